//! Workloads 9a and 9b: what most users run — a multi-thread tokio runtime whose 1 000
//! tasks each await calls of a `#[bulkhead] async fn` (the real attribute, declared in
//! `bulkhead-core/bulkheads.yaml`), against what they would write without the library:
//!
//! * **9a, thread pool**: a short CPU body on a 2-thread pool bulkhead, vs
//!   `spawn_blocking` guarded by a `tokio::sync::Semaphore` of 2 permits (a blocking pool of
//!   2 threads);
//! * **9b, semaphore**: a body that awaits once, under a fair 64-permit semaphore bulkhead
//!   with `max_wait: 10s`, vs the same body under a 64-permit `tokio::sync::Semaphore`.
//!
//! Each round runs every task to the end on a fresh set of tasks; rounds alternate
//! between the contenders. Reported per contender: time per call (wall time of the round /
//! calls, the median round) and the p50 / p99 / p999 latency of one call as its task saw
//! it (every call of every round, timed with `Instant`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkhead::BulkheadError;

use crate::harness::{Cell, Row, Settings};
use crate::workloads::Workload;

/// Tasks awaiting calls at once.
const TASKS: usize = 1_000;
/// Permits of the semaphore contenders (`bench-tokio-semaphore` in `bulkheads.yaml`).
const SEMAPHORE_PERMITS: usize = 64;
/// Threads of the pool contenders (`bench-tokio-pool` in `bulkheads.yaml`).
const POOL_THREADS: usize = 2;

/// The body of 9a: a little CPU work (about a microsecond), no await.
fn cpu_body(x: u64) -> u64 {
    let mut h = x;
    for i in 0..200u64 {
        h = black_box(h.rotate_left(5) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    h
}

/// 9a, ours: the body runs on one of the pool bulkhead's workers, the task awaits it.
#[bulkhead::bulkhead("bench-tokio-pool")]
async fn pool_call(x: u64) -> Result<u64, BulkheadError> {
    Ok(cpu_body(x))
}

/// 9b, ours: a body that awaits once (yields to the runtime) under the semaphore bulkhead.
#[bulkhead::bulkhead("bench-tokio-semaphore")]
pub async fn semaphore_call(x: u64) -> Result<u64, BulkheadError> {
    tokio::task::yield_now().await;
    Ok(black_box(x))
}

/// What one contender measured over its rounds.
struct Figures {
    /// Nanoseconds per call, per round.
    per_call: Vec<f64>,
    /// Nanoseconds of every call.
    latencies: Vec<u64>,
}

impl Figures {
    fn new() -> Self {
        Figures {
            per_call: Vec::new(),
            latencies: Vec::new(),
        }
    }

    fn median_per_call(&self) -> f64 {
        let mut v = self.per_call.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// The `q` quantile of the call latencies (`latencies` sorted).
    fn quantile(&self, q: f64) -> f64 {
        let i = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
        self.latencies[i] as f64
    }
}

/// Runs `TASKS` tasks of `calls` calls of `call` on `rt`; adds the round to `into`.
fn round<C, Fut>(rt: &tokio::runtime::Runtime, calls: u64, call: C, into: &mut Figures)
where
    C: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = u64> + Send + 'static,
{
    let call = Arc::new(call);
    let start = Instant::now();
    let latencies = rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let call = Arc::clone(&call);
                tokio::spawn(async move {
                    let mut latencies = Vec::with_capacity(calls as usize);
                    for i in 0..calls {
                        let began = Instant::now();
                        black_box(call(t as u64 * calls + i).await);
                        latencies.push(began.elapsed().as_nanos() as u64);
                    }
                    latencies
                })
            })
            .collect();
        let mut all = Vec::with_capacity(TASKS * calls as usize);
        for task in tasks {
            all.extend(task.await.expect("a bench task"));
        }
        all
    });
    let elapsed = start.elapsed();
    into.per_call
        .push(elapsed.as_nanos() as f64 / (TASKS as u64 * calls) as f64);
    into.latencies.extend(latencies);
}

/// The runtime of both workloads: multi-thread, one worker per core.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(crate::fixtures::WORKERS as usize)
        .max_blocking_threads(POOL_THREADS)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Rounds per contender and calls per task in each: fewer in a quick run.
fn shape(settings: &Settings) -> (usize, u64) {
    if settings.fast < Duration::from_millis(5) {
        (1, 5)
    } else {
        (7, 100)
    }
}

/// The rows of one workload: time per call and the latency quantiles, ours vs the peer.
fn rows_of(
    workload: Workload,
    title: &str,
    (ours_label, ours): (&str, &mut Figures),
    (peer_label, peer): (&str, &mut Figures),
    targets: [&str; 4],
    rows: &mut Vec<Row>,
) {
    ours.latencies.sort_unstable();
    peer.latencies.sort_unstable();
    let calls_per_s = |ns: f64| format!("{:.2} M calls/s", 1e3 / ns);
    let per_call = |f: &Figures, label: &str| {
        Cell::nanos(label, f.median_per_call())
            .with_note(calls_per_s(f.median_per_call()))
            .with_rounds(f.per_call.clone())
    };
    rows.push(Row {
        workload,
        title: format!("{title}: time per call"),
        ours: per_call(ours, ours_label),
        peer: per_call(peer, peer_label),
        target: targets[0].into(),
    });
    for (name, q, target) in [
        ("p50", 0.5, targets[1]),
        ("p99", 0.99, targets[2]),
        ("p999", 0.999, targets[3]),
    ] {
        rows.push(Row {
            workload,
            title: format!("{title}: {name} call latency"),
            ours: Cell::nanos(ours_label, ours.quantile(q)),
            peer: Cell::nanos(peer_label, peer.quantile(q)),
            target: target.into(),
        });
    }
    for (label, f) in [(ours_label, &*ours), (peer_label, &*peer)] {
        eprintln!(
            "  {:<34} {label:<52} {:>9.0} ns/call  p50 {:.0} p99 {:.0} p999 {:.0} ns",
            workload.heading(),
            f.median_per_call(),
            f.quantile(0.5),
            f.quantile(0.99),
            f.quantile(0.999)
        );
    }
}

/// One tokio workload: `ours` and `peer` (each a label and one call), alternating rounds,
/// then their rows. `ours` is called once first: the rows measure calls after a
/// function's first.
fn compare<O, P, FutO, FutP>(
    settings: &Settings,
    (workload, title): (Workload, &str),
    (ours_label, ours_call): (&str, O),
    (peer_label, peer_call): (&str, P),
    targets: [&str; 4],
    rows: &mut Vec<Row>,
) where
    O: Fn(u64) -> FutO + Clone + Send + Sync + 'static,
    P: Fn(u64) -> FutP + Clone + Send + Sync + 'static,
    FutO: std::future::Future<Output = u64> + Send + 'static,
    FutP: std::future::Future<Output = u64> + Send + 'static,
{
    let rt = runtime();
    let (rounds, calls) = shape(settings);
    black_box(rt.block_on(ours_call(0)));
    let (mut ours, mut peer) = (Figures::new(), Figures::new());
    for _ in 0..rounds {
        round(&rt, calls, ours_call.clone(), &mut ours);
        round(&rt, calls, peer_call.clone(), &mut peer);
    }
    rows_of(
        workload,
        title,
        (ours_label, &mut ours),
        (peer_label, &mut peer),
        targets,
        rows,
    );
}

/// 9a: tokio tasks calling a thread-pool bulkhead with a short CPU body, vs
/// `spawn_blocking` under a semaphore of as many permits as the pool has threads.
pub fn run_pool(settings: &Settings, rows: &mut Vec<Row>) {
    let guard: &'static tokio::sync::Semaphore =
        Box::leak(Box::new(tokio::sync::Semaphore::new(POOL_THREADS)));
    compare(
        settings,
        (
            Workload::TokioPool,
            "1 000 tokio tasks, thread pool, CPU body",
        ),
        ("#[bulkhead] async fn on a thread pool", |x| async move {
            pool_call(x).await.expect("sized for every task")
        }),
        (
            "spawn_blocking under a tokio Semaphore",
            move |x| async move {
                let _permit = guard.acquire().await.expect("never closed");
                tokio::task::spawn_blocking(move || cpu_body(x))
                    .await
                    .expect("the body does not panic")
            },
        ),
        ["≤ 1.0×", "–", "≤ 1.0×", "–"],
        rows,
    );
}

/// 9b: tokio tasks calling a semaphore bulkhead with a body that awaits, vs the same body
/// under a `tokio::sync::Semaphore` of as many permits.
pub fn run_semaphore(settings: &Settings, rows: &mut Vec<Row>) {
    let peer: &'static tokio::sync::Semaphore =
        Box::leak(Box::new(tokio::sync::Semaphore::new(SEMAPHORE_PERMITS)));
    compare(
        settings,
        (
            Workload::TokioSemaphore,
            "1 000 tokio tasks, semaphore, awaiting body",
        ),
        ("#[bulkhead] async fn on a semaphore", |x| async move {
            semaphore_call(x).await.expect("max_wait is long")
        }),
        ("tokio Semaphore::acquire", move |x| async move {
            let _permit = peer.acquire().await.expect("never closed");
            tokio::task::yield_now().await;
            black_box(x)
        }),
        ["≤ 1.2×", "–", "–", "≤ 1.2×"],
        rows,
    );
}

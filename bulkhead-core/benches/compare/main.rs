//! `cargo bench -p bulkhead-core --bench compare`: our bulkheads and their peers on the same
//! workloads, in one run, printed as one table of ratios (absolute times drift on shared
//! machines; ratios taken in the same run do not).
//!
//! Workloads:
//! 1. an uncontended sync semaphore call (through `#[bulkhead]`, and the core API by hand)
//!    vs `tokio::sync::Semaphore` try_acquire + drop and a `Mutex`/`Condvar` semaphore;
//! 2. the refusal of a full bulkhead, with the allocations it makes;
//! 3. a thread-pool round trip vs a bare crossbeam-channel pool and `spawn_blocking`;
//! 4. thread-pool throughput with several callers;
//! 5. an async semaphore acquire + release vs tokio's `Semaphore::acquire`;
//! 6. resident memory after 1,000,000 refused submissions;
//! 7. admission through a cluster-wide rate limit (Redis) vs the local one (`cluster.rs`).
//!
//! With `java` on PATH, `benches/java/Compare.java` adds the JDK's `Semaphore` and
//! `ThreadPoolExecutor` (what Resilience4j is built on) on the same workloads.
//!
//! Set `BENCH_QUICK=1` for a short smoke run (shorter samples; no Java), `BENCH_NO_JAVA=1` to
//! skip the Java peers. `--profile <workload> <iterations>` runs one workload's loop alone,
//! for callgrind (see `profile.rs`). `BENCH_ONLY=7` (a comma-separated list of workload
//! numbers) runs only those workloads.

mod alloc;
mod attribute;
mod cluster;
mod harness;
mod java;
mod peers;
mod profile;

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::hint::black_box;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bulkhead_config_types::{
    AdaptiveAlgorithm, AdaptiveConfig, BulkheadConfig, SemaphoreConfig, ThreadPoolConfig,
};
use bulkhead_core::{Bulkhead, Registry, SemaphoreBulkhead, ThreadPoolBulkhead};
use crossbeam_channel::{Receiver, Sender};

use harness::{Cell, Measured, Row, Unit, each, measure, report, timed};
use peers::{CondvarSemaphore, CrossbeamPool};

#[global_allocator]
static GLOBAL: alloc::CountingAlloc = alloc::CountingAlloc;

/// Worker threads of every pool (ours and the peers): the machine's core count.
const WORKERS: u32 = 2;
/// Callers in the throughput workloads.
const CALLERS: u64 = 4;
/// Tasks each throughput caller keeps in flight.
const WINDOW: usize = 32;
/// Queue capacity of the pools: room for every caller's window.
const QUEUE: u32 = 256;
/// Refusals in the memory workload.
const REFUSALS: u64 = 1_000_000;

struct Settings {
    /// Sample time for nanosecond-scale workloads.
    fast: Duration,
    /// Sample time for pool workloads.
    slow: Duration,
    java: bool,
}

/// One numbered workload: measures, then adds its rows.
type Workload = dyn Fn(&Settings, &mut Vec<Row>);

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--test` (from `cargo test --benches`)
    // means a smoke run.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--profile") {
        let workload = args.get(at + 1).map_or("", String::as_str);
        let n = args
            .get(at + 2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(100_000);
        profile::run(workload, n);
        return;
    }
    let quick = std::env::var_os("BENCH_QUICK").is_some() || args.iter().any(|a| a == "--test");
    let settings = if quick {
        Settings {
            fast: Duration::from_millis(1),
            slow: Duration::from_millis(3),
            java: false,
        }
    } else {
        Settings {
            fast: Duration::from_millis(20),
            slow: Duration::from_millis(60),
            java: std::env::var_os("BENCH_NO_JAVA").is_none() && java::available(),
        }
    };
    let started = Instant::now();
    let header = machine();
    eprintln!("{header}");
    eprintln!(
        "method: median of {} interleaved samples (~{:?} / {:?} each) per contender",
        harness::SAMPLES,
        settings.fast,
        settings.slow
    );

    let only = std::env::var("BENCH_ONLY").ok();
    let selected = |n: &str| {
        only.as_deref()
            .is_none_or(|list| list.split(',').any(|w| w.trim() == n))
    };
    let mut rows = Vec::new();
    let workloads: [(&str, &Workload); 8] = [
        ("1", &semaphore_call),
        ("2", &refusal),
        ("3", &pool_round_trip),
        ("4", &pool_throughput),
        ("5", &async_semaphore),
        ("6", &|_, rows| memory(rows)),
        ("listeners", &listeners),
        ("7", &cluster::run),
    ];
    for (n, workload) in workloads {
        if selected(n) {
            workload(&settings, &mut rows);
        }
    }

    let with_java = settings.java && only.is_none();
    let java = if with_java {
        eprintln!("java peers (benches/java/Compare.java):");
        java::run().unwrap_or_else(|why| {
            eprintln!("  java peers skipped: {why}");
            BTreeMap::new()
        })
    } else {
        BTreeMap::new()
    };
    add_java_rows(&java, &mut rows, with_java);
    // Each workload's rows together (the Java rows were measured last; the attribute-overhead row is
    // about row 1); stable otherwise.
    rows.sort_by_key(|r| match r.workload.chars().next() {
        _ if r.workload.starts_with("attribute overhead") || r.workload.starts_with("adaptive") => {
            '1'
        }
        Some(lead) if lead.is_ascii_digit() => lead,
        _ => '9',
    });

    println!("{header}; at end: {}", load_average());
    println!(
        "method: median of {} interleaved samples per contender; ratio = ours / peer (lower is better); run took {:.0?}\n",
        harness::SAMPLES,
        started.elapsed()
    );
    println!("{}", harness::render_table(&rows));
}

/// Date, machine, toolchain and load, for the README.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let output = |cmd: &str, arg: &str| {
        std::process::Command::new(cmd)
            .arg(arg)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{}; machine: {cores} cores, {model}; {}; load average at start: {}",
        output("date", "-u"),
        output("rustc", "-V"),
        load_average()
    )
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn find<'a>(results: &'a [Measured], name: &str) -> &'a Measured {
    results
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no result named {name}"))
}

fn semaphore_config(permits: u32) -> SemaphoreConfig {
    SemaphoreConfig {
        max_concurrent_calls: permits,
        ..SemaphoreConfig::default()
    }
}

fn pool_config(threads: u32, queue: u32) -> ThreadPoolConfig {
    ThreadPoolConfig {
        core_threads: threads,
        max_threads: threads,
        queue_capacity: queue,
        ..ThreadPoolConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// 1. Uncontended semaphore call

const ATTRIBUTE: &str = "#[bulkhead] fn";
const CORE_CALL: &str = "SemaphoreBulkhead::call (core, inline in the loop)";
const BY_HAND_FN: &str = "the same fn by hand (static bulkhead + call)";
const CORE_TRY: &str = "SemaphoreBulkhead::try_acquire + drop";
const TOKIO_TRY: &str = "tokio Semaphore::try_acquire + drop";
const CONDVAR: &str = "Mutex/Condvar semaphore";
const ADAPTIVE_CALL: &str = "SemaphoreBulkhead::call, adaptive limit (gradient2)";

fn semaphore_call(settings: &Settings, rows: &mut Vec<Row>) {
    let ours = SemaphoreBulkhead::new("bench-semaphore", &semaphore_config(25));
    let adaptive_config = AdaptiveConfig::new(AdaptiveAlgorithm::Gradient2).with_bounds(1, 25, 25);
    let adaptive = SemaphoreBulkhead::new("bench-adaptive", &semaphore_config(25))
        .with_adaptive(Some(&adaptive_config));
    let mut a = 0u64;
    let tokio_sem = tokio::sync::Semaphore::new(25);
    let condvar = CondvarSemaphore::new(25);
    let mut x = 0u64;
    let mut y = 0u64;
    let mut z = 0u64;
    let mut w = 0u64;
    let mut v = 0u64;
    let mut u = 0u64;
    let results = measure(
        settings.fast,
        vec![
            each(ATTRIBUTE, || {
                v += 1;
                black_box(attribute::guarded(v).ok());
            }),
            each(BY_HAND_FN, || {
                u += 1;
                black_box(attribute::guarded_by_hand(u).ok());
            }),
            each(CORE_CALL, || {
                x += 1;
                black_box(ours.call(|| black_box(x)).ok());
            }),
            each(ADAPTIVE_CALL, || {
                a += 1;
                black_box(adaptive.call(|| black_box(a)).ok());
            }),
            each(CORE_TRY, || {
                let permit = ours.try_acquire();
                black_box(&permit);
                drop(permit);
            }),
            each(TOKIO_TRY, || {
                y += 1;
                let permit = tokio_sem.try_acquire();
                black_box(y);
                drop(black_box(permit));
            }),
            each(CONDVAR, || {
                z += 1;
                black_box(condvar.call(|| black_box(z)));
            }),
            each("empty loop (harness overhead)", || {
                w += 1;
                black_box(w);
            }),
        ],
    );
    report("1. semaphore call", &results);
    let (core, core_try, tokio, condvar) = (
        find(&results, CORE_CALL),
        find(&results, CORE_TRY),
        find(&results, TOKIO_TRY),
        find(&results, CONDVAR),
    );
    let attribute = || Cell::of(find(&results, ATTRIBUTE));
    rows.push(Row {
        workload: "1. sync semaphore call, uncontended".into(),
        ours: attribute(),
        peer: Cell::of(tokio),
        target: "≤ 1.3×".into(),
    });
    rows.push(Row {
        workload: "1. sync semaphore call, uncontended".into(),
        ours: attribute(),
        peer: Cell::of(condvar),
        target: "–".into(),
    });
    rows.push(Row {
        workload: "1. sync semaphore call, core API".into(),
        ours: Cell::of(core),
        peer: Cell::of(tokio),
        target: "≤ 1.3×".into(),
    });
    rows.push(Row {
        workload: "1. sync semaphore call, core API".into(),
        ours: Cell::of(core),
        peer: Cell::of(condvar),
        target: "–".into(),
    });
    rows.push(Row {
        workload: "1. permit only (try_acquire + drop)".into(),
        ours: Cell::of(core_try),
        peer: Cell::of(tokio),
        target: "–".into(),
    });
    rows.push(Row {
        workload: "adaptive: sync semaphore call, adaptive vs static (core API)".into(),
        ours: Cell::of(find(&results, ADAPTIVE_CALL)),
        peer: Cell::of(core),
        target: "≤ 1.5×".into(),
    });
    rows.push(Row {
        workload: "attribute overhead: #[bulkhead] fn vs the same fn by hand".into(),
        ours: attribute(),
        peer: Cell::of(find(&results, BY_HAND_FN)),
        target: "≤ 1.10×".into(),
    });
    rows.push(Row {
        workload: "attribute overhead: #[bulkhead] fn vs core call inlined in the loop".into(),
        ours: attribute(),
        peer: Cell::of(core),
        target: "–".into(),
    });
}

// ---------------------------------------------------------------------------------------
// 2. Refusal of a full bulkhead

/// A thread that holds every slot of a bulkhead until the guard drops.
struct Occupied {
    release: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Occupied {
    /// Runs `hold(held, release)` on a new thread and returns once `hold` has sent on
    /// `held` (it holds the bulkhead); `release` is closed when the guard drops.
    fn new(hold: impl FnOnce(Sender<()>, Receiver<()>) + Send + 'static) -> Occupied {
        let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
        let (held_tx, held_rx) = crossbeam_channel::bounded::<()>(1);
        let thread = std::thread::spawn(move || hold(held_tx, release_rx));
        let _ = held_rx.recv();
        Occupied {
            release: Some(release_tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Occupied {
    fn drop(&mut self) {
        self.release = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A registered bulkhead, as `#[bulkhead]` and `bulkhead::install` get them: from a
/// [`Registry`], which gives it a static name (an error clones no reference count).
fn registered(name: &str, config: BulkheadConfig) -> Bulkhead {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY
        .get_or_init(Registry::new)
        .register(name, &config)
        .expect("a bench bulkhead")
}

/// A registered semaphore bulkhead with its only permit held by another thread.
fn full_semaphore() -> (SemaphoreBulkhead, Occupied) {
    let sem = registered(
        "bench-full-semaphore",
        BulkheadConfig::semaphore(semaphore_config(1)),
    );
    occupy_semaphore(sem.as_semaphore().expect("a semaphore").clone())
}

/// The same, built by hand with a shared (reference-counted) name, as
/// `SemaphoreBulkhead::new("…", …)` makes: each refusal clones and drops the name's `Arc`.
fn full_semaphore_shared_name() -> (SemaphoreBulkhead, Occupied) {
    occupy_semaphore(SemaphoreBulkhead::new(
        "bench-full-semaphore-by-hand",
        &semaphore_config(1),
    ))
}

pub(crate) fn occupy_semaphore(sem: SemaphoreBulkhead) -> (SemaphoreBulkhead, Occupied) {
    let holder = sem.clone();
    let occupied = Occupied::new(move |held, release| {
        let _permit = holder.try_acquire();
        let _ = held.send(());
        let _ = release.recv();
    });
    (sem, occupied)
}

/// A registered one-thread, no-queue pool whose thread is busy until the guard drops.
fn full_pool() -> (ThreadPoolBulkhead, Occupied) {
    let pool = registered(
        "bench-full-pool",
        BulkheadConfig::thread_pool(pool_config(1, 0)),
    );
    let pool = pool.as_thread_pool().expect("a thread pool").clone();
    let holder = pool.clone();
    let occupied = Occupied::new(move |held, release| {
        let _ = holder.call((), |()| {
            let _ = held.send(());
            let _ = release.recv();
        });
    });
    (pool, occupied)
}

const ATTRIBUTE_REFUSED: &str = "#[bulkhead] fn refused (Full)";
const SEM_REFUSED: &str = "semaphore: call refused (Full)";
const SEM_SHARED_REFUSED: &str =
    "semaphore built by hand with an Arc name (not registered): call refused (Full)";
const SEM_TRY_REFUSED: &str = "semaphore: try_acquire refused";
const POOL_REFUSED: &str = "thread pool: call refused (Full)";
const POOL_ASYNC_REFUSED: &str = "thread pool: call_async refused, first poll";
const TOKIO_REFUSED: &str = "tokio Semaphore::try_acquire refused";

fn refusal(settings: &Settings, rows: &mut Vec<Row>) {
    let (_attribute, _attribute_held) = attribute::full_attribute();
    let (sem, _sem_held) = full_semaphore();
    let (shared_sem, _shared_sem_held) = full_semaphore_shared_name();
    let (pool, _pool_held) = full_pool();
    let tokio_sem = tokio::sync::Semaphore::new(1);
    let _tokio_permit = tokio_sem.try_acquire();
    let mut cx = Context::from_waker(Waker::noop());
    let results = measure(
        settings.fast,
        vec![
            each(ATTRIBUTE_REFUSED, || {
                black_box(attribute::refused(7).is_err());
            }),
            each(SEM_REFUSED, || {
                black_box(sem.call(|| 1u64).is_err());
            }),
            each(SEM_SHARED_REFUSED, || {
                black_box(shared_sem.call(|| 1u64).is_err());
            }),
            each(SEM_TRY_REFUSED, || {
                black_box(sem.try_acquire().is_err());
            }),
            each(POOL_REFUSED, || {
                black_box(pool.call(7u64, |x| x + 1).is_err());
            }),
            each(POOL_ASYNC_REFUSED, || {
                let mut call = pool.call_async(7u64, |x| async move { x + 1 });
                let refused = matches!(Pin::new(&mut call).poll(&mut cx), Poll::Ready(Err(_)));
                black_box(refused);
            }),
            each(TOKIO_REFUSED, || {
                black_box(tokio_sem.try_acquire().is_err());
            }),
        ],
    );
    report("2. refusal", &results);
    let allocs_per = |f: &mut dyn FnMut()| {
        let ((), n) = alloc::count_allocations(|| {
            for _ in 0..100_000 {
                f();
            }
        });
        n as f64 / 100_000.0
    };
    let attribute_allocs = allocs_per(&mut || {
        black_box(attribute::refused(7).is_err());
    });
    let sem_allocs = allocs_per(&mut || {
        black_box(sem.call(|| 1u64).is_err());
    });
    let shared_sem_allocs = allocs_per(&mut || {
        black_box(shared_sem.call(|| 1u64).is_err());
    });
    let pool_allocs = allocs_per(&mut || {
        black_box(pool.call(7u64, |x| x + 1).is_err());
    });
    let pool_async_allocs = allocs_per(&mut || {
        let mut call = pool.call_async(7u64, |x| async move { x + 1 });
        black_box(Pin::new(&mut call).poll(&mut cx).is_ready());
    });
    let tokio_allocs = allocs_per(&mut || {
        black_box(tokio_sem.try_acquire().is_err());
    });
    let allocs = |n: f64| format!("{n} allocations/refusal");
    let tokio = Cell::of(find(&results, TOKIO_REFUSED)).with_note(allocs(tokio_allocs));
    let target = "≤ 25 ns, 0 allocations".to_string();
    for (name, n) in [
        (ATTRIBUTE_REFUSED, attribute_allocs),
        (SEM_REFUSED, sem_allocs),
        (SEM_SHARED_REFUSED, shared_sem_allocs),
        (POOL_REFUSED, pool_allocs),
        (POOL_ASYNC_REFUSED, pool_async_allocs),
    ] {
        rows.push(Row {
            workload: "2. refusal of a full bulkhead".into(),
            ours: Cell::of(find(&results, name)).with_note(allocs(n)),
            peer: Cell::of(find(&results, TOKIO_REFUSED)).with_note(allocs(tokio_allocs)),
            target: target.clone(),
        });
    }
    rows.push(Row {
        workload: "2. refusal, permit only".into(),
        ours: Cell::of(find(&results, SEM_TRY_REFUSED)),
        peer: tokio,
        target: "–".into(),
    });
}

// ---------------------------------------------------------------------------------------
// 3. Thread-pool round trip

const POOL_CALL: &str = "ThreadPoolBulkhead::call";
const POOL_CALL_ASYNC: &str = "ThreadPoolBulkhead::call_async (block_on)";
const CROSSBEAM_CALL: &str = "crossbeam-channel pool";
const TOKIO_BLOCKING: &str = "tokio spawn_blocking (block_on)";

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(WORKERS as usize)
        .build()
        .expect("a tokio runtime")
}

fn pool_round_trip(settings: &Settings, rows: &mut Vec<Row>) {
    let ours = ThreadPoolBulkhead::new("bench-pool", &pool_config(WORKERS, QUEUE));
    let crossbeam = CrossbeamPool::new(WORKERS as usize, QUEUE as usize);
    let rt = tokio_runtime();
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let results = measure(
        settings.slow,
        vec![
            each(POOL_CALL, || {
                a += 1;
                black_box(ours.call(a, |x| x + 1).ok());
            }),
            each(POOL_CALL_ASYNC, || {
                b += 1;
                let call = ours.call_async(b, |x| async move { x + 1 });
                black_box(futures_executor::block_on(call).ok());
            }),
            each(CROSSBEAM_CALL, || {
                c += 1;
                let x = c;
                black_box(crossbeam.call(move || x + 1));
            }),
            each(TOKIO_BLOCKING, || {
                d += 1;
                let x = d;
                black_box(futures_executor::block_on(rt.spawn_blocking(move || x + 1)).ok());
            }),
        ],
    );
    report("3. pool round trip", &results);
    let ours_sync = find(&results, POOL_CALL);
    let ours_async = find(&results, POOL_CALL_ASYNC);
    let crossbeam = find(&results, CROSSBEAM_CALL);
    let tokio = find(&results, TOKIO_BLOCKING);
    for (ours, peer, target) in [
        (ours_sync, crossbeam, "≤ 1.5×"),
        (ours_sync, tokio, "–"),
        (ours_async, tokio, "–"),
    ] {
        rows.push(Row {
            workload: "3. thread-pool round trip".into(),
            ours: Cell::of(ours),
            peer: Cell::of(peer),
            target: target.into(),
        });
    }
}

// ---------------------------------------------------------------------------------------
// 4. Thread-pool throughput, several callers

const WINDOW_OURS: &str = "ThreadPoolBulkhead::call_async";
const WINDOW_CROSSBEAM: &str = "crossbeam-channel pool";
const WINDOW_TOKIO: &str = "tokio spawn_blocking";
const BLOCKING_OURS: &str = "ThreadPoolBulkhead::call, blocking";
const BLOCKING_CROSSBEAM: &str = "crossbeam-channel pool, blocking";

/// Runs `per_caller(iterations)` on `CALLERS` threads at once and returns the time per
/// iteration, scaled back to `n` iterations.
fn callers(n: u64, per_caller: &(dyn Fn(u64) + Sync)) -> Duration {
    let each = (n / CALLERS).max(1);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..CALLERS {
            s.spawn(|| per_caller(each));
        }
    });
    let elapsed = start.elapsed();
    elapsed.mul_f64(n as f64 / (each * CALLERS) as f64)
}

/// Waits for a task's result the way crossbeam's `recv` does, so that every windowed peer
/// waits alike: polls with crossbeam's backoff (spin 2^step times up to step 6, then yield,
/// up to step 10), then blocks the thread (`futures_executor::block_on`).
fn settle<F: Future + Unpin>(mut fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    let backoff = crossbeam_utils::Backoff::new();
    while !backoff.is_completed() {
        if let Poll::Ready(output) = Pin::new(&mut fut).poll(&mut cx) {
            return output;
        }
        backoff.snooze();
    }
    futures_executor::block_on(fut)
}

fn ours_window(pool: &ThreadPoolBulkhead, tasks: u64) {
    let mut cx = Context::from_waker(Waker::noop());
    let submit = |i: u64| pool.call_async(i, |x| async move { x + 1 });
    let mut window = deque_for(&submit);
    let mut refused = 0u64;
    for i in 0..tasks {
        if window.len() == WINDOW {
            let oldest = window.pop_front().expect("a full window");
            refused += u64::from(settle(oldest).is_err());
        }
        // Admission happens at the first poll; the result is awaited later.
        let mut call = submit(i);
        match Pin::new(&mut call).poll(&mut cx) {
            Poll::Ready(result) => refused += u64::from(result.is_err()),
            Poll::Pending => window.push_back(call),
        }
    }
    for call in window {
        refused += u64::from(settle(call).is_err());
    }
    assert_eq!(
        refused, 0,
        "the throughput pool refused work: size it for the window"
    );
}

fn crossbeam_window(pool: &CrossbeamPool, tasks: u64) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut in_flight = 0;
    for i in 0..tasks {
        if in_flight == WINDOW {
            black_box(rx.recv().ok());
            in_flight -= 1;
        }
        pool.submit(move || i + 1, tx.clone());
        in_flight += 1;
    }
    for _ in 0..in_flight {
        black_box(rx.recv().ok());
    }
}

/// An empty window for the futures `make` returns.
fn deque_for<T>(_make: &impl Fn(u64) -> T) -> VecDeque<T> {
    VecDeque::with_capacity(WINDOW)
}

fn tokio_window(rt: &tokio::runtime::Runtime, tasks: u64) {
    let spawn = |i: u64| rt.spawn_blocking(move || i + 1);
    let mut window = deque_for(&spawn);
    for i in 0..tasks {
        if window.len() == WINDOW {
            let oldest = window.pop_front().expect("a full window");
            black_box(settle(oldest).ok());
        }
        window.push_back(spawn(i));
    }
    for handle in window {
        black_box(settle(handle).ok());
    }
}

fn pool_throughput(settings: &Settings, rows: &mut Vec<Row>) {
    let ours = ThreadPoolBulkhead::new("bench-throughput", &pool_config(WORKERS, QUEUE));
    let crossbeam = CrossbeamPool::new(WORKERS as usize, QUEUE as usize);
    let rt = tokio_runtime();
    let results = measure(
        settings.slow,
        vec![
            timed(WINDOW_OURS, |n| {
                callers(n, &|tasks| ours_window(&ours, tasks))
            }),
            timed(WINDOW_CROSSBEAM, |n| {
                callers(n, &|tasks| crossbeam_window(&crossbeam, tasks))
            }),
            timed(WINDOW_TOKIO, |n| {
                callers(n, &|tasks| tokio_window(&rt, tasks))
            }),
            timed(BLOCKING_OURS, |n| {
                callers(n, &|tasks| {
                    for i in 0..tasks {
                        black_box(ours.call(i, |x| x + 1).ok());
                    }
                })
            }),
            timed(BLOCKING_CROSSBEAM, |n| {
                callers(n, &|tasks| {
                    for i in 0..tasks {
                        black_box(crossbeam.call(move || i + 1));
                    }
                })
            }),
        ],
    );
    report("4. pool throughput", &results);
    let window = format!("4. throughput, {CALLERS} callers × {WINDOW} in flight, ns/task");
    let blocking = format!("4. throughput, {CALLERS} blocking callers, ns/task");
    for (workload, ours, peer, target) in [
        (&window, WINDOW_OURS, WINDOW_CROSSBEAM, "≤ 150 ns/task"),
        (&window, WINDOW_OURS, WINDOW_TOKIO, "≤ 150 ns/task"),
        (&blocking, BLOCKING_OURS, BLOCKING_CROSSBEAM, "–"),
    ] {
        rows.push(Row {
            workload: workload.clone(),
            ours: Cell::of(find(&results, ours)),
            peer: Cell::of(find(&results, peer)),
            target: target.into(),
        });
    }
}

// ---------------------------------------------------------------------------------------
// 5. Async semaphore acquire + release

const ASYNC_OURS: &str = "SemaphoreBulkhead::acquire_async + drop";
const ASYNC_OURS_CALL: &str = "SemaphoreBulkhead::call_async(ready body)";
const ASYNC_TOKIO: &str = "tokio Semaphore::acquire + drop";

fn async_semaphore(settings: &Settings, rows: &mut Vec<Row>) {
    let ours = SemaphoreBulkhead::new("bench-async", &semaphore_config(25));
    let tokio_sem = tokio::sync::Semaphore::new(25);
    let mut cx = Context::from_waker(Waker::noop());
    let mut cx2 = Context::from_waker(Waker::noop());
    let mut cx3 = Context::from_waker(Waker::noop());
    let mut x = 0u64;
    // Each future is polled once with a no-op waker: an uncontended acquire is ready at once,
    // so this is the cost of acquire + release without any executor's overhead.
    let results = measure(
        settings.fast,
        vec![
            each(ASYNC_OURS, || {
                let acquire = pin!(ours.acquire_async());
                match acquire.poll(&mut cx) {
                    Poll::Ready(permit) => drop(black_box(permit)),
                    Poll::Pending => unreachable!("uncontended"),
                }
            }),
            each(ASYNC_OURS_CALL, || {
                x += 1;
                let call = pin!(ours.call_async(async { black_box(x) }));
                match call.poll(&mut cx3) {
                    Poll::Ready(result) => drop(black_box(result)),
                    Poll::Pending => unreachable!("uncontended"),
                }
            }),
            each(ASYNC_TOKIO, || {
                let acquire = pin!(tokio_sem.acquire());
                match acquire.poll(&mut cx2) {
                    Poll::Ready(permit) => drop(black_box(permit)),
                    Poll::Pending => unreachable!("uncontended"),
                }
            }),
        ],
    );
    report("5. async semaphore", &results);
    for ours in [ASYNC_OURS, ASYNC_OURS_CALL] {
        rows.push(Row {
            workload: "5. async semaphore acquire + release".into(),
            ours: Cell::of(find(&results, ours)),
            peer: Cell::of(find(&results, ASYNC_TOKIO)),
            target: "–".into(),
        });
    }
}

// ---------------------------------------------------------------------------------------
// 6. Resident memory after 1,000,000 refused submissions

fn resident_kib() -> f64 {
    memory_stats::memory_stats().map_or(f64::NAN, |m| m.physical_mem as f64 / 1024.0)
}

/// Runs `refuse` `REFUSALS` times; returns the growth of resident memory (KiB) and the
/// allocations made.
fn refusals_footprint(mut refuse: impl FnMut() -> bool) -> (f64, u64) {
    for _ in 0..1000 {
        assert!(refuse(), "warm-up: the bulkhead must refuse");
    }
    let before = resident_kib();
    let (refused, allocations) = alloc::count_allocations(|| {
        let mut refused = 0u64;
        for _ in 0..REFUSALS {
            refused += u64::from(refuse());
        }
        refused
    });
    assert_eq!(refused, REFUSALS, "every submission must be refused");
    (resident_kib() - before, allocations)
}

/// Resident growth and allocations over `REFUSALS` admitted calls of an adaptive bulkhead
/// (samples, windows and limit changes included).
fn adaptive_calls_footprint(bulkhead: &SemaphoreBulkhead) -> (f64, u64) {
    for _ in 0..1000 {
        assert!(
            bulkhead.call(|| ()).is_ok(),
            "warm-up: the call must be admitted"
        );
    }
    let before = resident_kib();
    let (admitted, allocations) = alloc::count_allocations(|| {
        (0..REFUSALS)
            .filter(|_| bulkhead.call(|| black_box(1u64)).is_ok())
            .count() as u64
    });
    assert_eq!(admitted, REFUSALS, "every call must be admitted");
    (resident_kib() - before, allocations)
}

fn memory(rows: &mut Vec<Row>) {
    let (sem, _sem_held) = full_semaphore();
    let (pool, _pool_held) = full_pool();
    let tokio_sem = tokio::sync::Semaphore::new(1);
    let _tokio_permit = tokio_sem.try_acquire();
    let mut cx = Context::from_waker(Waker::noop());
    let baseline = resident_kib();
    let tokio = refusals_footprint(|| tokio_sem.try_acquire().is_err());
    let peer = |(kib, allocs): (f64, u64)| Cell {
        label: "tokio Semaphore::try_acquire refused".into(),
        value: Some(kib),
        unit: Unit::KiB,
        note: format!("{allocs} allocations"),
    };
    let ours_cases: [(&str, (f64, u64)); 3] = [
        (
            SEM_REFUSED,
            refusals_footprint(|| sem.call(|| 1u64).is_err()),
        ),
        (
            POOL_REFUSED,
            refusals_footprint(|| pool.call(7u64, |x| x + 1).is_err()),
        ),
        (
            POOL_ASYNC_REFUSED,
            refusals_footprint(|| {
                let mut call = pool.call_async(7u64, |x| async move { x + 1 });
                matches!(Pin::new(&mut call).poll(&mut cx), Poll::Ready(Err(_)))
            }),
        ),
    ];
    let adaptive_config = AdaptiveConfig::new(AdaptiveAlgorithm::Gradient2).with_bounds(1, 25, 25);
    let adaptive = SemaphoreBulkhead::new("bench-adaptive-memory", &semaphore_config(25))
        .with_adaptive(Some(&adaptive_config));
    let (kib, allocs) = adaptive_calls_footprint(&adaptive);
    eprintln!("  6. memory: adaptive calls: {kib:+.0} KiB, {allocs} allocations");
    rows.push(Row {
        workload: format!("6. resident memory after {REFUSALS} adaptive calls"),
        ours: Cell {
            label: "semaphore with an adaptive limit (gradient2): call admitted".into(),
            value: Some(kib),
            unit: Unit::KiB,
            note: format!("{allocs} allocations"),
        },
        peer: peer(tokio),
        target: "flat".into(),
    });
    eprintln!("  6. memory: resident at start of workload {baseline:.0} KiB");
    for (name, (kib, allocs)) in ours_cases {
        eprintln!("  6. memory: {name}: {kib:+.0} KiB, {allocs} allocations");
        rows.push(Row {
            workload: format!("6. resident memory after {REFUSALS} refusals"),
            ours: Cell {
                label: name.into(),
                value: Some(kib),
                unit: Unit::KiB,
                note: format!("{allocs} allocations"),
            },
            peer: peer(tokio),
            target: "flat".into(),
        });
    }
}

// ---------------------------------------------------------------------------------------
// Events are built only when someone listens

fn listeners(settings: &Settings, rows: &mut Vec<Row>) {
    use bulkhead_core::events::{self, Event};
    const NO_LISTENER: &str = "SemaphoreBulkhead::call, no listener";
    const ONE_LISTENER: &str = "SemaphoreBulkhead::call, one listener";
    let ours = SemaphoreBulkhead::new("bench-listeners", &semaphore_config(25));
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut x = 0u64;
    let mut y = 0u64;
    let results = measure(
        settings.fast,
        vec![
            each(NO_LISTENER, || {
                x += 1;
                black_box(ours.call(|| black_box(x)).ok());
            }),
            // Subscribed for each sample only, outside the timed loop, so the other
            // contender's samples run with nobody listening.
            timed(ONE_LISTENER, |n| {
                let seen = std::sync::Arc::clone(&seen);
                let subscription = events::subscribe(move |event: &Event<'_>| {
                    black_box(event);
                    seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                });
                let start = Instant::now();
                for _ in 0..n {
                    y += 1;
                    black_box(ours.call(|| black_box(y)).ok());
                }
                let elapsed = start.elapsed();
                drop(subscription);
                elapsed
            }),
        ],
    );
    report("events: nothing is built when nobody listens", &results);
    rows.push(Row {
        workload: "listeners: call without vs with a listener".into(),
        ours: Cell::of(find(&results, NO_LISTENER)),
        peer: Cell::of(find(&results, ONE_LISTENER)),
        target: "no-listener = row 1 core call".into(),
    });
}

// ---------------------------------------------------------------------------------------
// Java peers

fn add_java_rows(java: &BTreeMap<String, f64>, rows: &mut Vec<Row>, wanted: bool) {
    if !wanted {
        eprintln!("java peers: not run (java/javac not on PATH, or quick run)");
        return;
    }
    // (java key, java label, row workload, our result's workload prefix + label, target)
    let pairs: [(&str, &str, &str, &str, &str); 6] = [
        (
            "semaphore_call",
            "JDK fair Semaphore tryAcquire(0) + release",
            "1. sync semaphore call, uncontended",
            ATTRIBUTE,
            "(ref: R4j 21.9 ns)",
        ),
        (
            "semaphore_refusal",
            "JDK Semaphore tryAcquire(0) refused",
            "2. refusal of a full bulkhead",
            SEM_REFUSED,
            "(ref: R4j 159 ns)",
        ),
        (
            "semaphore_refusal_exception",
            "JDK Semaphore refused + exception without stack trace",
            "2. refusal of a full bulkhead",
            SEM_REFUSED,
            "(ref: R4j 159 ns)",
        ),
        (
            "pool_round_trip",
            "JDK ThreadPoolExecutor + ArrayBlockingQueue",
            "3. thread-pool round trip",
            POOL_CALL,
            "> 10× faster (ratio < 0.1)",
        ),
        (
            "pool_throughput_window",
            "JDK ThreadPoolExecutor",
            "4. throughput",
            WINDOW_OURS,
            "–",
        ),
        (
            "pool_throughput_blocking",
            "JDK ThreadPoolExecutor, blocking",
            "4. throughput",
            BLOCKING_OURS,
            "–",
        ),
    ];
    for (key, label, workload, ours_label, target) in pairs {
        let Some(ours) = rows
            .iter()
            .find(|r| r.workload.starts_with(workload) && r.ours.label == ours_label)
            .map(|r| (r.workload.clone(), r.ours.value, r.ours.note.clone()))
        else {
            continue;
        };
        let peer = match java.get(key) {
            Some(&ns) => Cell::nanos(label, ns),
            None => Cell::missing(label, "n/a (java run failed)"),
        };
        rows.push(Row {
            workload: ours.0,
            ours: Cell {
                label: ours_label.into(),
                value: ours.1,
                unit: Unit::Nanos,
                note: ours.2,
            },
            peer,
            target: target.into(),
        });
    }
}

//! The same overload through five queue policies of a thread-pool bulkhead: which one
//! serves the most requests while their clients still wait?
//!
//! ```sh
//! cargo run --release --example overload
//! ```
//!
//! Every policy gets a pool of the same size (4 threads, a queue of 200) in front of a
//! dependency that takes 10 ms per call, so the pool serves at most 400 calls/s and a full
//! queue means 200 / 400 = 500 ms of waiting (queue / throughput = worst-case
//! wait). Requests arrive open-loop — the clients do not slow down when the pool does — at
//! 2x capacity (800/s) for 1.2 s, then at 0.5x (200/s) for 1.2 s. Each client gives up
//! 100 ms after sending: a call served after that is wasted work, not goodput.
//!
//! For each policy it prints what was served, what was served in time (goodput), what was
//! refused and why, and the queue time of the served calls (p50/p99).
//!
//! # When each policy wins
//!
//! * **FIFO** (the default) is right when overload is rare and short: a burst shorter than
//!   the clients' patience drains in order and nothing is refused. Under sustained overload
//!   it is the worst: the queue fills, every call waits the full 500 ms, and the pool spends
//!   its time serving calls whose clients left long ago (low goodput, huge p99).
//! * **FIFO + `max_queue_wait`** wins when the clients' deadline is known: set it to the
//!   deadline minus the service time, and work nobody waits for any more is failed with
//!   `QueueTimeout` at the head of the queue instead of run. Served work is always in time;
//!   the price is that a shed call first sat in the queue for the whole wait.
//! * **CoDel** `{ target: 5ms, interval: 100ms }` wins when the deadline is not known or
//!   differs per caller: once the queue has stood for `interval` it sheds everything older
//!   than `target`, so queue time stays near `target` during sustained overload while a
//!   short burst (shorter than `interval`) is still absorbed.
//! * **Adaptive LIFO** serves the newest calls first while the queue stands, so the calls
//!   that are served are fresh (low p50) — but without shedding, the old ones are served
//!   last, late, and p99 explodes. Pair it with CoDel (Facebook's "Fail at Scale" setting,
//!   the last row) or `max_queue_wait`: the newest are served, the oldest age out.
//!
//! Numbers vary with the machine; the ranking should not (the service time is a sleep, so a
//! busy CPU changes little).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use bulkhead::ThreadPoolBulkhead;
use bulkhead::config::{CodelConfig, Duration as ConfigDuration, QueueOrder, ThreadPoolConfig};

const THREADS: u32 = 4;
const QUEUE: u32 = 200;
const SERVICE: Duration = Duration::from_millis(10);
const DEADLINE: Duration = Duration::from_millis(100);
/// Requests per second the pool can serve.
const CAPACITY: f64 = THREADS as f64 / 0.010;
/// The arrival schedule: (rate as a multiple of capacity, how long).
const PHASES: [(f64, Duration); 2] = [
    (2.0, Duration::from_millis(1_200)),
    (0.5, Duration::from_millis(1_200)),
];

struct Policy {
    name: &'static str,
    config: ThreadPoolConfig,
}

fn policies() -> Vec<Policy> {
    let base = ThreadPoolConfig {
        core_threads: THREADS,
        max_threads: THREADS,
        queue_capacity: QUEUE,
        ..ThreadPoolConfig::default()
    };
    let codel = Some(CodelConfig {
        target: ConfigDuration::from_millis(5),
        interval: ConfigDuration::from_millis(100),
    });
    vec![
        Policy {
            name: "fifo",
            config: base.clone(),
        },
        Policy {
            name: "fifo + max_queue_wait 90ms",
            config: ThreadPoolConfig {
                max_queue_wait: Some((DEADLINE - SERVICE).into()),
                ..base.clone()
            },
        },
        Policy {
            name: "codel 5ms/100ms",
            config: ThreadPoolConfig {
                codel,
                ..base.clone()
            },
        },
        Policy {
            name: "adaptive-lifo",
            config: ThreadPoolConfig {
                queue_order: QueueOrder::AdaptiveLifo,
                ..base.clone()
            },
        },
        Policy {
            name: "adaptive-lifo + codel",
            config: ThreadPoolConfig {
                queue_order: QueueOrder::AdaptiveLifo,
                codel,
                ..base
            },
        },
    ]
}

/// One served call: when it was sent, when a worker started it, when it finished.
#[derive(Clone, Copy)]
struct Served {
    sent: Instant,
    started: Instant,
    finished: Instant,
}

struct Outcome {
    offered: usize,
    served: Vec<Served>,
    full: u64,
    queue_timeout: u64,
    elapsed: Duration,
}

/// Polls a future once with a waker that does nothing (admission happens at the first
/// poll; the result is collected once the pool is idle, so no wake-up is needed).
fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

type Call = Pin<Box<dyn Future<Output = Result<(), bulkhead::Refused<Instant>>> + Send>>;

fn run(policy: &Policy) -> Outcome {
    let pool = ThreadPoolBulkhead::new(policy.name, &policy.config);
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut pending: Vec<Call> = Vec::new();
    let mut offered = 0;
    let start = Instant::now();
    let mut next = start;
    for (rate, length) in PHASES {
        let gap = Duration::from_secs_f64(1.0 / (rate * CAPACITY));
        let end = next + length;
        while next < end {
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
            let served = Arc::clone(&served);
            // Open loop: submit and move on; the pool's answer is collected at the end.
            let mut call: Call =
                Box::pin(pool.call_async(Instant::now(), move |sent| async move {
                    let started = Instant::now();
                    thread::sleep(SERVICE); // the dependency
                    let finished = Instant::now();
                    served.lock().unwrap().push(Served {
                        sent,
                        started,
                        finished,
                    });
                }));
            offered += 1;
            if poll_once(call.as_mut()).is_pending() {
                pending.push(call); // admitted: dropping it would cancel it
            }
            next += gap;
        }
    }
    // Let the pool drain what it admitted, then collect the answers.
    loop {
        let s = pool.snapshot();
        if s.active == 0 && s.queued == 0 {
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    for mut call in pending {
        while poll_once(call.as_mut()).is_pending() {
            thread::yield_now();
        }
    }
    let elapsed = start.elapsed();
    let calls = pool.snapshot().calls;
    pool.shutdown(Duration::from_secs(5));
    let served = std::mem::take(&mut *served.lock().unwrap());
    Outcome {
        offered,
        served,
        full: calls.refused.full,
        queue_timeout: calls.refused.queue_timeout,
        elapsed,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

struct Row {
    name: &'static str,
    offered: usize,
    served: usize,
    in_time: usize,
    goodput: f64,
    full: u64,
    queue_timeout: u64,
    p50: Duration,
    p99: Duration,
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn main() {
    let window: Duration = PHASES.iter().map(|(_, d)| *d).sum();
    println!(
        "pool: {THREADS} threads, queue {QUEUE}, service {} ms (capacity {CAPACITY:.0}/s); \
         arrivals {}; client deadline {} ms\n",
        SERVICE.as_millis(),
        PHASES
            .iter()
            .map(|(rate, d)| format!("{rate}x for {:.1} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", then "),
        DEADLINE.as_millis(),
    );
    let total = Instant::now();
    let rows: Vec<Row> = policies()
        .iter()
        .map(|policy| {
            let out = run(policy);
            let mut waits: Vec<Duration> = out.served.iter().map(|s| s.started - s.sent).collect();
            waits.sort();
            let in_time = out
                .served
                .iter()
                .filter(|s| s.finished - s.sent <= DEADLINE)
                .count();
            println!(
                "ran {:<28} in {:.1} s",
                policy.name,
                out.elapsed.as_secs_f64()
            );
            Row {
                name: policy.name,
                offered: out.offered,
                served: out.served.len(),
                in_time,
                goodput: in_time as f64 / window.as_secs_f64(),
                full: out.full,
                queue_timeout: out.queue_timeout,
                p50: percentile(&waits, 0.50),
                p99: percentile(&waits, 0.99),
            }
        })
        .collect();

    println!(
        "| policy | offered | served | in time | late | goodput/s | refused full | refused queue-timeout | queue p50 ms | queue p99 ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
            r.name,
            r.offered,
            r.served,
            r.in_time,
            r.served - r.in_time,
            r.goodput,
            r.full,
            r.queue_timeout,
            ms(r.p50),
            ms(r.p99),
        );
    }
    println!(
        "\n(goodput = calls finished within {} ms of being sent, per second of the {:.1} s \
         arrival window; late = served after the client gave up: wasted work)",
        DEADLINE.as_millis(),
        window.as_secs_f64()
    );

    let fifo = &rows[0];
    let best_goodput = rows.iter().map(|r| r.goodput).fold(0.0_f64, f64::max);
    let best_p99 = rows.iter().map(|r| r.p99).min().expect("rows");
    // Within 5% of the best goodput, or 10 ms of the best p99: a tie on a noisy machine.
    let names = |keep: &dyn Fn(&Row) -> bool| {
        rows.iter()
            .filter(|r| keep(r))
            .map(|r| r.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let most_waste = rows
        .iter()
        .max_by_key(|r| r.served - r.in_time)
        .expect("rows");
    println!();
    println!(
        "goodput:      {} (~{best_goodput:.0}/s, {:.1}x plain FIFO's {:.0}/s)",
        names(&|r| r.goodput >= best_goodput * 0.95),
        best_goodput / fifo.goodput.max(1.0),
        fifo.goodput
    );
    println!(
        "tail latency: {} (p99 queue time ~{} ms; plain FIFO {} ms)",
        names(&|r| r.p99 <= best_p99 + Duration::from_millis(10)),
        ms(best_p99),
        ms(fifo.p99)
    );
    println!(
        "fresh first:  {} serves half its calls within {} ms of arrival",
        names(&|r| r.p50 == rows.iter().map(|r| r.p50).min().unwrap_or_default()),
        ms(rows.iter().map(|r| r.p50).min().unwrap_or_default())
    );
    println!(
        "wasted work:  {} served {} calls after their clients gave up ({:.0}% of its work)",
        most_waste.name,
        most_waste.served - most_waste.in_time,
        100.0 * (most_waste.served - most_waste.in_time) as f64 / most_waste.served.max(1) as f64
    );
    println!("total run time: {:.1} s", total.elapsed().as_secs_f64());
}

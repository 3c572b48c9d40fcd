//! Soak: each bulkhead kind driven at ten times its capacity for a bounded time and call
//! count, with panicking bodies, dropped async calls and live resizes mixed in. Checks that
//! nothing deadlocks, that resident memory stays flat, and that the callers' own tallies
//! reconcile with the bulkhead's counters.
//!
//! Ignored by default; `.ci/run` runs it in release mode:
//! `cargo test -p bulkheads-core --release --test soak -- --ignored --nocapture`.
//! `SOAK_SECS` (default 20 per kind) and `SOAK_CALLS` (default 5 000 000 per kind) bound it.

mod support;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use bulkhead_config_types::{
    Duration as ConfigDuration, OnFull, SemaphoreConfig, ThreadPoolConfig,
};
use bulkhead_core::{BulkheadError, CallCounts, SemaphoreBulkhead, ThreadPoolBulkhead};
use support::yield_once;

/// The bounds of one soak run.
struct Bounds {
    time: Duration,
    calls: u64,
}

impl Bounds {
    fn from_env() -> Bounds {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Bounds {
            time: Duration::from_secs(var("SOAK_SECS", 20)),
            calls: var("SOAK_CALLS", 5_000_000),
        }
    }
}

/// What the callers saw, added up.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    panicked: AtomicU64,
    dropped: AtomicU64,
    full: AtomicU64,
    timeout: AtomicU64,
    queue_timeout: AtomicU64,
    shut_down: AtomicU64,
}

impl Tally {
    fn calls(&self) -> u64 {
        [
            &self.ok,
            &self.panicked,
            &self.dropped,
            &self.full,
            &self.timeout,
            &self.queue_timeout,
            &self.shut_down,
        ]
        .iter()
        .map(|c| c.load(Relaxed))
        .sum()
    }

    fn refused(&self, err: &BulkheadError) {
        let counter = match err {
            BulkheadError::Full { .. } => &self.full,
            BulkheadError::Timeout { .. } => &self.timeout,
            BulkheadError::QueueTimeout { .. } => &self.queue_timeout,
            BulkheadError::ShutDown { .. } => &self.shut_down,
            other => panic!("unexpected refusal {other:?}"),
        };
        counter.fetch_add(1, Relaxed);
    }

    /// The bulkhead's counters agree with what the callers saw.
    fn reconcile(&self, c: &CallCounts) {
        assert_eq!(
            c.permitted,
            c.completed + c.panicked + c.cancelled,
            "every admitted call ended exactly once: {c:?}"
        );
        assert_eq!(c.refused.full, self.full.load(Relaxed), "{c:?}");
        assert_eq!(c.refused.timeout, self.timeout.load(Relaxed), "{c:?}");
        assert_eq!(
            c.refused.queue_timeout,
            self.queue_timeout.load(Relaxed),
            "{c:?}"
        );
        assert_eq!(c.refused.shut_down, self.shut_down.load(Relaxed), "{c:?}");
        assert_eq!(c.panicked, self.panicked.load(Relaxed), "{c:?}");
        assert_eq!(c.reentrant, 0, "{c:?}");
        assert_eq!(
            c.permitted + c.refused.total(),
            self.calls(),
            "every call is counted once, admitted or refused: {c:?}"
        );
    }
}

/// Keeps the injected panics out of the output (real panics still print).
fn quiet_injected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let injected = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.starts_with("soak: injected"));
            if !injected {
                default(info);
            }
        }));
    });
}

fn rss() -> usize {
    memory_stats::memory_stats().map_or(0, |m| m.physical_mem)
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn poll_once<F: Future>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

/// A little CPU work, so bodies overlap.
fn work(seed: u64) -> u64 {
    (0..200).fold(seed, |acc, i| acc.rotate_left(5) ^ i)
}

/// How long after its time bound a soak may take to stop its callers before it is a hang.
const HANG_AFTER: Duration = Duration::from_secs(60);

/// Ends the whole process, with the reason, if the returned sender is not dropped within
/// `limit`: a deadlocked caller would otherwise hold the test (and CI) until its time
/// limit, with nothing said. A liveness guard, not a timing assertion: the soak stops its
/// callers within a few milliseconds of its bound.
fn hang_guard(what: &str, limit: Duration) -> std::sync::mpsc::Sender<()> {
    let (finished, watch) = std::sync::mpsc::channel::<()>();
    let what = what.to_owned();
    thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(limit) {
            eprintln!(
                "soak {what}: the callers had not stopped {}s after the soak's bound: a hang \
                 (a deadlock or a lost wake-up); attach a debugger to see where",
                HANG_AFTER.as_secs()
            );
            std::process::exit(101);
        }
    });
    finished
}

/// Drives `callers` threads, each calling `one_call(caller, n)` until a bound is reached,
/// while `controller` runs alongside; samples RSS after a warm-up and at the end.
fn soak(
    what: &str,
    callers: usize,
    tally: &Tally,
    one_call: impl Fn(usize, u64) + Sync,
    controller: impl Fn(&AtomicBool) + Sync,
) {
    quiet_injected_panics();
    let bounds = Bounds::from_env();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let finished = hang_guard(what, bounds.time + HANG_AFTER);
    let barrier = Barrier::new(callers + 1);
    let (rss_start, rss_end) = thread::scope(|s| {
        for caller in 0..callers {
            let (stop, barrier, one_call) = (&stop, &barrier, &one_call);
            s.spawn(move || {
                barrier.wait();
                let mut n = 0;
                while !stop.load(Relaxed) {
                    one_call(caller, n);
                    n += 1;
                }
            });
        }
        s.spawn(|| controller(&stop));
        barrier.wait();
        let warm_up = bounds.time / 4;
        let mut rss_start = None;
        while started.elapsed() < bounds.time && tally.calls() < bounds.calls {
            if rss_start.is_none() && started.elapsed() >= warm_up {
                rss_start = Some(rss());
            }
            thread::sleep(Duration::from_millis(50));
        }
        let rss_end = rss();
        stop.store(true, Relaxed);
        (rss_start.unwrap_or(rss_end), rss_end)
    });
    drop(finished);
    let elapsed = started.elapsed();
    eprintln!(
        "soak {what}: {} calls by {callers} callers in {:.1}s ({} ok, {} panicked, {} dropped, \
         {} full, {} timeout, {} queue_timeout); RSS {:.1} MiB after warm-up, {:.1} MiB at the end",
        tally.calls(),
        elapsed.as_secs_f64(),
        tally.ok.load(Relaxed),
        tally.panicked.load(Relaxed),
        tally.dropped.load(Relaxed),
        tally.full.load(Relaxed),
        tally.timeout.load(Relaxed),
        tally.queue_timeout.load(Relaxed),
        mib(rss_start),
        mib(rss_end),
    );
    assert!(tally.calls() > 0, "no call made progress");
    // Flat: the working set of a saturated bulkhead does not grow with the number of calls.
    assert!(
        rss_end <= rss_start + 32 * 1024 * 1024,
        "resident memory grew from {:.1} MiB to {:.1} MiB",
        mib(rss_start),
        mib(rss_end)
    );
}

#[test]
#[ignore = "soak: run by .ci/run in release mode"]
fn semaphore_at_ten_times_capacity_stays_flat_and_reconciles() {
    const LIMIT: u32 = 8;
    let config = |limit| SemaphoreConfig {
        max_concurrent_calls: limit,
        max_wait: ConfigDuration::from_millis(1),
        fair: true,
    };
    let bulkhead = SemaphoreBulkhead::new("soak-semaphore", &config(LIMIT));
    let tally = Tally::default();
    let inside = AtomicU64::new(0);
    let max_limit = u64::from(LIMIT) * 2;
    let one_call = |caller: usize, n: u64| {
        let seed = caller as u64 * 7919 + n;
        let body = || {
            let now = inside.fetch_add(1, Relaxed) + 1;
            assert!(
                now <= max_limit,
                "{now} calls inside a limit of at most {max_limit}"
            );
            let out = work(seed);
            inside.fetch_sub(1, Relaxed);
            out
        };
        match seed % 16 {
            // A body that panics.
            0 => match catch_unwind(AssertUnwindSafe(|| {
                bulkhead.call(|| -> u64 {
                    body();
                    panic!("soak: injected panic")
                })
            })) {
                Err(_) => {
                    tally.panicked.fetch_add(1, Relaxed);
                }
                Ok(Err(err)) => tally.refused(&err),
                Ok(Ok(_)) => unreachable!("the body always panics"),
            },
            // An async call dropped after its first poll (queued, or inside its body).
            1 => {
                let mut call = Box::pin(bulkhead.call_async(async {
                    yield_once().await;
                    body()
                }));
                match poll_once(call.as_mut()) {
                    Poll::Ready(Err(err)) => tally.refused(&err),
                    Poll::Ready(Ok(_)) => unreachable!("the body awaits once"),
                    Poll::Pending => {
                        // Dropped while queued: neither admitted nor refused by the bulkhead;
                        // dropped inside the body: admitted, then `cancelled`.
                        drop(call);
                        tally.dropped.fetch_add(1, Relaxed);
                    }
                }
            }
            // An async call run to completion.
            2..=5 => match futures_executor::block_on(bulkhead.call_async(async {
                yield_once().await;
                body()
            })) {
                Ok(_) => {
                    tally.ok.fetch_add(1, Relaxed);
                }
                Err(err) => tally.refused(&err),
            },
            _ => match bulkhead.call(body) {
                Ok(_) => {
                    tally.ok.fetch_add(1, Relaxed);
                }
                Err(err) => tally.refused(&err),
            },
        };
    };
    let controller = |stop: &AtomicBool| {
        let mut grow = true;
        while !stop.load(Relaxed) {
            thread::sleep(Duration::from_millis(20));
            bulkhead.resize(&config(if grow { LIMIT * 2 } else { LIMIT }));
            grow = !grow;
        }
        bulkhead.resize(&config(LIMIT));
    };
    soak(
        "semaphore",
        10 * LIMIT as usize,
        &tally,
        one_call,
        controller,
    );
    let s = bulkhead.snapshot();
    eprintln!("soak semaphore counters: {:?}", s.calls);
    assert_eq!(s.available, LIMIT, "every permit back: {s:?}");
    assert_eq!(s.waiting, 0, "{s:?}");
    // Dropped calls that were still queued are neither admitted nor refused; the rest are
    // `cancelled`: together they are what the callers dropped.
    let c = s.calls;
    let dropped_queued = tally.dropped.load(Relaxed) - c.cancelled;
    assert_eq!(
        c.permitted + c.refused.total() + dropped_queued,
        tally.calls(),
        "{c:?}"
    );
    let adjusted = Tally {
        dropped: AtomicU64::new(c.cancelled),
        ..tally
    };
    adjusted.reconcile(&c);
    bulkhead.shutdown(Duration::from_secs(5));
}

#[test]
#[ignore = "soak: run by .ci/run in release mode"]
fn thread_pool_at_ten_times_capacity_stays_flat_and_reconciles() {
    let config = |max: u32| ThreadPoolConfig {
        core_threads: 2,
        max_threads: max,
        queue_capacity: 16,
        keep_alive: ConfigDuration::from_millis(5),
        on_full: OnFull::Wait(ConfigDuration::from_millis(1)),
        max_queue_wait: Some(ConfigDuration::from_millis(5)),
        ..ThreadPoolConfig::default()
    };
    const MAX: u32 = 4;
    let pool = ThreadPoolBulkhead::new("soak-pool", &config(MAX));
    let capacity = (MAX + 16) as usize;
    let tally = Tally::default();
    let one_call = |caller: usize, n: u64| {
        let seed = caller as u64 * 7919 + n;
        let outcome = match seed % 16 {
            0 => match catch_unwind(AssertUnwindSafe(|| {
                pool.call(seed, |s| -> u64 {
                    work(s);
                    panic!("soak: injected panic")
                })
            })) {
                Err(_) => {
                    tally.panicked.fetch_add(1, Relaxed);
                    return;
                }
                Ok(result) => result.map(|_| ()),
            },
            1 => {
                let mut call = Box::pin(pool.call_async(seed, |s| async move {
                    yield_once().await;
                    work(s)
                }));
                match poll_once(call.as_mut()) {
                    Poll::Ready(result) => result.map(|_| ()),
                    Poll::Pending => {
                        drop(call);
                        tally.dropped.fetch_add(1, Relaxed);
                        return;
                    }
                }
            }
            2..=5 => futures_executor::block_on(pool.call_async(seed, |s| async move {
                yield_once().await;
                work(s)
            }))
            .map(|_| ()),
            _ => pool.call(seed, work).map(|_| ()),
        };
        match outcome {
            Ok(()) => {
                tally.ok.fetch_add(1, Relaxed);
            }
            Err(refused) => tally.refused(&refused.error),
        };
    };
    let controller = |stop: &AtomicBool| {
        let mut grow = true;
        while !stop.load(Relaxed) {
            thread::sleep(Duration::from_millis(20));
            if std::env::var_os("SOAK_NO_RESIZE").is_none() {
                pool.resize(&config(if grow { MAX * 2 } else { MAX }));
            }
            grow = !grow;
        }
        pool.resize(&config(MAX));
    };
    soak("thread pool", 10 * capacity, &tally, one_call, controller);
    // Dropped async calls still running finish on their workers: wait for the pool to idle.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = pool.snapshot();
        let c = s.calls;
        if s.active == 0 && s.queued == 0 && c.permitted == c.completed + c.panicked + c.cancelled {
            break;
        }
        assert!(Instant::now() < deadline, "the pool never went idle: {s:?}");
        thread::sleep(Duration::from_millis(10));
    }
    let s = pool.snapshot();
    eprintln!("soak thread pool counters: {:?}", s.calls);
    assert!(s.pool_size.unwrap() <= MAX * 2, "{s:?}");
    let c = s.calls;
    assert_eq!(
        c.permitted,
        c.completed + c.panicked + c.cancelled,
        "every admitted call ended exactly once: {c:?}"
    );
    // What the callers saw is what the pool counted; a call dropped by its caller was
    // either admitted (it then ran, or was removed or failed from the queue) or dropped
    // while waiting for room (neither admitted nor refused).
    let dropped = tally.dropped.load(Relaxed);
    assert_eq!(c.panicked, tally.panicked.load(Relaxed), "{c:?}");
    assert_eq!(c.refused.full, tally.full.load(Relaxed), "{c:?}");
    assert_eq!(c.refused.timeout, tally.timeout.load(Relaxed), "{c:?}");
    assert_eq!(
        c.refused.shut_down + tally.shut_down.load(Relaxed),
        0,
        "{c:?}"
    );
    let ok = tally.ok.load(Relaxed);
    assert!(c.completed >= ok && c.completed - ok <= dropped, "{c:?}");
    let seen_queue_timeouts = tally.queue_timeout.load(Relaxed);
    assert!(c.refused.queue_timeout >= seen_queue_timeouts, "{c:?}");
    let counted = c.permitted + c.refused.full + c.refused.timeout;
    let calls = tally.calls();
    assert!(
        counted <= calls && counted + dropped >= calls,
        "every call is counted once, admitted or refused: {counted} of {calls} ({dropped} dropped): {c:?}"
    );
    let report = pool.shutdown(Duration::from_secs(5));
    assert_eq!(report.still_running, 0, "{report:?}");
    assert_eq!(pool.snapshot().pool_size, Some(0));
}

//! Workload 4: thread-pool throughput with several callers, each keeping a window of
//! tasks in flight (and blocking callers), vs a crossbeam-channel pool, `spawn_blocking`,
//! and the bounded peers of `peers.rs` (the CAS-admission pool, `spawn_blocking` under a
//! semaphore, rayon's `spawn`), whose windows await a future per task as ours do.

use std::collections::VecDeque;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bulkhead_core::ThreadPoolBulkhead;

use crate::fixtures::{QUEUE, WORKERS, pool_config, tokio_runtime};
use crate::harness::{Cell, Row, Settings, find, measure, report, timed};
use crate::peers::{BoundedBlocking, BoundedPool, CrossbeamPool, RayonPool, Refused};
use crate::workloads::Workload;

/// Callers in the throughput workloads.
const CALLERS: u64 = 4;
/// Tasks each throughput caller keeps in flight.
const WINDOW: usize = 32;

pub const WINDOW_OURS: &str = "ThreadPoolBulkhead::call_async";
pub const WINDOW_CROSSBEAM: &str = "crossbeam-channel pool";
pub const WINDOW_TOKIO: &str = "tokio spawn_blocking";
pub const WINDOW_BOUNDED: &str = "bounded peer: CAS admission + try_send + oneshot";
pub const WINDOW_BOUNDED_BLOCKING: &str = "spawn_blocking under a Semaphore, try_acquire";
pub const WINDOW_RAYON: &str = "rayon spawn + oneshot";
pub const BLOCKING_OURS: &str = "ThreadPoolBulkhead::call, blocking";
pub const BLOCKING_CROSSBEAM: &str = "crossbeam-channel pool, blocking";

/// Runs `per_caller(iterations)` on `CALLERS` threads at once and returns the time per
/// iteration, scaled back to `n` iterations.
pub fn callers(n: u64, per_caller: &(dyn Fn(u64) + Sync)) -> Duration {
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

pub fn ours_window(pool: &ThreadPoolBulkhead, tasks: u64) {
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

pub fn crossbeam_window(pool: &CrossbeamPool, tasks: u64) {
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

/// A peer's window: `submit` admits a task (or refuses it) and returns the future of its
/// result, awaited `WINDOW` tasks later with [`settle`], as ours are.
pub fn peer_window<F, T, E>(tasks: u64, submit: impl Fn(u64) -> Result<F, Refused>)
where
    F: Future<Output = Result<T, E>> + Unpin,
{
    let mut window: VecDeque<F> = VecDeque::with_capacity(WINDOW);
    let mut failed = 0u64;
    for i in 0..tasks {
        if window.len() == WINDOW {
            let oldest = window.pop_front().expect("a full window");
            failed += u64::from(settle(oldest).is_err());
        }
        match submit(i) {
            Ok(reply) => window.push_back(reply),
            Err(Refused) => failed += 1,
        }
    }
    for reply in window {
        failed += u64::from(settle(reply).is_err());
    }
    assert_eq!(
        failed, 0,
        "a throughput peer refused or lost work: size it for the window"
    );
}

pub fn tokio_window(rt: &tokio::runtime::Runtime, tasks: u64) {
    peer_window(tasks, |i| Ok(rt.spawn_blocking(move || i + 1)));
}

pub fn bounded_window(pool: &BoundedPool, tasks: u64) {
    peer_window(tasks, |i| pool.submit(move || i + 1));
}

pub fn bounded_blocking_window(pool: &BoundedBlocking, tasks: u64) {
    peer_window(tasks, |i| pool.submit(move || i + 1));
}

pub fn rayon_window(pool: &RayonPool, tasks: u64) {
    peer_window(tasks, |i| Ok(pool.submit(move || i + 1)));
}

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
    let ours = ThreadPoolBulkhead::new("bench-throughput", &pool_config(WORKERS, QUEUE));
    let crossbeam = CrossbeamPool::new(WORKERS as usize, QUEUE as usize);
    let rt = tokio_runtime();
    let bounded = BoundedPool::new(WORKERS as usize, QUEUE as usize);
    let bounded_blocking = BoundedBlocking::new(tokio_runtime(), WORKERS as usize, QUEUE as usize);
    let rayon = RayonPool::new(WORKERS as usize);
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
            timed(WINDOW_BOUNDED, |n| {
                callers(n, &|tasks| bounded_window(&bounded, tasks))
            }),
            timed(WINDOW_BOUNDED_BLOCKING, |n| {
                callers(n, &|tasks| {
                    bounded_blocking_window(&bounded_blocking, tasks)
                })
            }),
            timed(WINDOW_RAYON, |n| {
                callers(n, &|tasks| rayon_window(&rayon, tasks))
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
    let window = format!("throughput, {CALLERS} callers × {WINDOW} in flight, ns/task");
    let blocking = format!("throughput, {CALLERS} blocking callers, ns/task");
    for (workload, ours, peer, target) in [
        (&window, WINDOW_OURS, WINDOW_CROSSBEAM, "≤ 1.0×"),
        (&window, WINDOW_OURS, WINDOW_BOUNDED, "≤ 1.0×"),
        (&window, WINDOW_OURS, WINDOW_TOKIO, "–"),
        (&window, WINDOW_OURS, WINDOW_BOUNDED_BLOCKING, "–"),
        (&window, WINDOW_OURS, WINDOW_RAYON, "–"),
        (&blocking, BLOCKING_OURS, BLOCKING_CROSSBEAM, "–"),
    ] {
        rows.push(Row {
            workload: Workload::PoolThroughput,
            title: workload.clone(),
            ours: Cell::of(find(&results, ours)),
            peer: Cell::of(find(&results, peer)),
            target: target.into(),
        });
    }
}

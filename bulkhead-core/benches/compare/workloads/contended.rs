//! Workload 8: one semaphore bulkhead called from 2, 4 and 8 threads at once (a sync call
//! with a trivial body; the bulkhead has more permits than threads, so nobody waits and
//! the cost is the contention on its state word), vs tokio's `Semaphore` (`try_acquire` +
//! drop) shared the same way. Reported as wall time per call over all threads.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bulkhead_core::SemaphoreBulkhead;

use crate::fixtures::semaphore_config;
use crate::harness::{Cell, Row, Settings, find, measure, report, timed};
use crate::workloads::Workload;

/// Permits of both semaphores: more than the most threads, so no call waits or is refused.
const PERMITS: u32 = 25;

/// Runs `n` calls of `call`, split over `threads` threads started together; the wall time.
fn spread(threads: u64, n: u64, call: &(dyn Fn(u64) + Sync)) -> Duration {
    let each = (n / threads).max(1);
    let barrier = std::sync::Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                barrier.wait();
                for i in 0..each {
                    call(i);
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins the threads when it ends; time until then.
        start
    })
    .elapsed()
    .mul_f64(n as f64 / (each * threads) as f64)
}

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
    let ours = SemaphoreBulkhead::new("bench-contended", &semaphore_config(PERMITS));
    let tokio_sem = tokio::sync::Semaphore::new(PERMITS as usize);
    let ours_call = |i: u64| {
        black_box(ours.call(|| black_box(i)).ok());
    };
    let tokio_call = |i: u64| {
        let permit = tokio_sem.try_acquire();
        black_box(i);
        drop(black_box(permit));
    };
    for threads in [2u64, 4, 8] {
        let ours_name = format!("SemaphoreBulkhead::call, {threads} threads");
        let tokio_name = format!("tokio Semaphore::try_acquire + drop, {threads} threads");
        let results = measure(
            settings.fast,
            vec![
                timed(ours_name.clone(), |n| spread(threads, n, &ours_call)),
                timed(tokio_name.clone(), |n| spread(threads, n, &tokio_call)),
            ],
        );
        report("8. contended semaphore", &results);
        rows.push(Row {
            workload: Workload::ContendedSemaphore,
            title: format!("contended semaphore, {threads} threads, ns per call"),
            ours: Cell::of(find(&results, &ours_name)),
            peer: Cell::of(find(&results, &tokio_name)),
            target: "–".into(),
        });
    }
}

//! Events are built only when someone listens: a semaphore call with no listener vs
//! with one (the no-listener figure should match workload 1's core call).

use std::hint::black_box;
use std::time::Instant;

use bulkhead_core::SemaphoreBulkhead;

use crate::fixtures::semaphore_config;
use crate::harness::{Cell, Row, Settings, each, find, measure, report, timed};
use crate::workloads::Workload;

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
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
        workload: Workload::Listeners,
        title: "call without vs with a listener".into(),
        ours: Cell::of(find(&results, NO_LISTENER)),
        peer: Cell::of(find(&results, ONE_LISTENER)),
        target: "no-listener = row 1 core call".into(),
    });
}

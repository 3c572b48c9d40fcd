//! Workload 5: an uncontended async semaphore acquire + release, and `call_async` with a
//! ready body, each polled once with a no-op waker, vs tokio's `Semaphore::acquire`.

use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bulkhead_core::SemaphoreBulkhead;

use crate::fixtures::semaphore_config;
use crate::harness::{Cell, Row, Settings, each, find, measure, report};
use crate::workloads::Workload;

pub const ASYNC_OURS: &str = "SemaphoreBulkhead::acquire_async + drop";
pub const ASYNC_OURS_CALL: &str = "SemaphoreBulkhead::call_async(ready body)";
pub const ASYNC_TOKIO: &str = "tokio Semaphore::acquire + drop";

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
    let ours = SemaphoreBulkhead::new("bench-async", &semaphore_config(25));
    let tokio_sem = tokio::sync::Semaphore::new(25);
    let mut cx = Context::from_waker(Waker::noop());
    let mut cx2 = Context::from_waker(Waker::noop());
    let mut cx3 = Context::from_waker(Waker::noop());
    let mut x = 0u64;
    // Each future is polled once with a no-op waker: an uncontended acquire is ready at once,
    // so this is the cost of acquire + release without any executor's overhead. Each
    // contender consumes its success value (the permit, the body's output), as a caller
    // matching on the result does; `black_box` of a whole `Result` would force it into
    // memory, which costs ours (a 48-byte `Result`, the error carrying the bulkhead's name)
    // more than tokio's (16 bytes) and measures the harness, not the acquisition.
    let results = measure(
        settings.fast,
        vec![
            each(ASYNC_OURS, || {
                let acquire = pin!(ours.acquire_async());
                match acquire.poll(&mut cx) {
                    Poll::Ready(Ok(permit)) => drop(black_box(permit)),
                    Poll::Ready(Err(_)) | Poll::Pending => unreachable!("uncontended"),
                }
            }),
            each(ASYNC_OURS_CALL, || {
                x += 1;
                let call = pin!(ours.call_async(async { black_box(x) }));
                match call.poll(&mut cx3) {
                    Poll::Ready(Ok(value)) => drop(black_box(value)),
                    Poll::Ready(Err(_)) | Poll::Pending => unreachable!("uncontended"),
                }
            }),
            each(ASYNC_TOKIO, || {
                let acquire = pin!(tokio_sem.acquire());
                match acquire.poll(&mut cx2) {
                    Poll::Ready(Ok(permit)) => drop(black_box(permit)),
                    Poll::Ready(Err(_)) | Poll::Pending => unreachable!("uncontended"),
                }
            }),
        ],
    );
    report("5. async semaphore", &results);
    for (ours, target) in [(ASYNC_OURS, "–"), (ASYNC_OURS_CALL, "≤ 1.1×")] {
        rows.push(Row {
            workload: Workload::AsyncSemaphore,
            title: "async semaphore acquire + release".into(),
            ours: Cell::of(find(&results, ours)),
            peer: Cell::of(find(&results, ASYNC_TOKIO)),
            target: target.into(),
        });
    }
}

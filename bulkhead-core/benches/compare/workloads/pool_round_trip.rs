//! Workload 3: a thread-pool round trip (submit, run on a worker, reply) vs a bare
//! crossbeam-channel pool and tokio's `spawn_blocking`.

use std::hint::black_box;

use bulkhead_core::ThreadPoolBulkhead;

use crate::fixtures::{QUEUE, WORKERS, pool_config, tokio_runtime};
use crate::harness::{Cell, Row, Settings, each, find, measure, report};
use crate::peers::CrossbeamPool;
use crate::workloads::Workload;

pub const POOL_CALL: &str = "ThreadPoolBulkhead::call";
pub const POOL_CALL_ASYNC: &str = "ThreadPoolBulkhead::call_async (block_on)";
pub const CROSSBEAM_CALL: &str = "crossbeam-channel pool";
pub const TOKIO_BLOCKING: &str = "tokio spawn_blocking (block_on)";

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
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
            workload: Workload::PoolRoundTrip,
            title: "thread-pool round trip".into(),
            ours: Cell::of(ours),
            peer: Cell::of(peer),
            target: target.into(),
        });
    }
}

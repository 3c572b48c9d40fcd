//! Workload 3: a thread-pool round trip (submit, run on a worker, reply) vs a bare
//! crossbeam-channel pool, tokio's `spawn_blocking`, and the bounded peers of `peers.rs`
//! (the CAS-admission pool, `spawn_blocking` under a semaphore, rayon's `spawn`), each
//! awaited with `block_on` as ours `call_async` is.

use std::hint::black_box;

use bulkhead_core::ThreadPoolBulkhead;

use crate::fixtures::{QUEUE, WORKERS, pool_config, tokio_runtime};
use crate::harness::{Cell, Row, Settings, each, find, measure, report};
use crate::peers::{BoundedBlocking, BoundedPool, CrossbeamPool, RayonPool, wait};
use crate::workloads::Workload;

pub const POOL_CALL: &str = "ThreadPoolBulkhead::call";
pub const POOL_CALL_ASYNC: &str = "ThreadPoolBulkhead::call_async (block_on)";
pub const CROSSBEAM_CALL: &str = "crossbeam-channel pool";
pub const TOKIO_BLOCKING: &str = "tokio spawn_blocking (block_on)";
pub const BOUNDED: &str = "bounded peer: CAS admission + try_send + oneshot (block_on)";
pub const BOUNDED_BLOCKING: &str = "spawn_blocking under a Semaphore, try_acquire (block_on)";
pub const RAYON: &str = "rayon spawn + oneshot (block_on)";

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
    let ours = ThreadPoolBulkhead::new("bench-pool", &pool_config(WORKERS, QUEUE));
    let crossbeam = CrossbeamPool::new(WORKERS as usize, QUEUE as usize);
    let rt = tokio_runtime();
    let bounded = BoundedPool::new(WORKERS as usize, QUEUE as usize);
    let bounded_blocking = BoundedBlocking::new(tokio_runtime(), WORKERS as usize, QUEUE as usize);
    let rayon = RayonPool::new(WORKERS as usize);
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let (mut e, mut f, mut g) = (0u64, 0u64, 0u64);
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
                black_box(wait(rt.spawn_blocking(move || x + 1)));
            }),
            each(BOUNDED, || {
                e += 1;
                let x = e;
                black_box(bounded.submit(move || x + 1).ok().and_then(wait));
            }),
            each(BOUNDED_BLOCKING, || {
                f += 1;
                let x = f;
                black_box(bounded_blocking.submit(move || x + 1).ok().and_then(wait));
            }),
            each(RAYON, || {
                g += 1;
                let x = g;
                black_box(wait(rayon.submit(move || x + 1)));
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
        (ours_async, tokio, "≤ 0.5×"),
        (ours_async, find(&results, BOUNDED), "–"),
        (ours_async, find(&results, BOUNDED_BLOCKING), "–"),
        (ours_async, find(&results, RAYON), "–"),
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

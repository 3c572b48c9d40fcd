//! Workload 6: resident memory and allocations over 1,000,000 refused submissions (and
//! 1,000,000 admitted calls of an adaptive bulkhead), vs tokio's refused `try_acquire`.

use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bulkhead_config_types::{AdaptiveAlgorithm, AdaptiveConfig};
use bulkhead_core::SemaphoreBulkhead;

use crate::alloc;
use crate::fixtures::{configured, full_pool, full_semaphore, semaphore_config};
use crate::harness::{Cell, Row, Settings, Unit};
use crate::workloads::Workload;
use crate::workloads::refusal::{POOL_ASYNC_REFUSED, POOL_REFUSED, SEM_REFUSED};

/// Refusals in the memory workload.
const REFUSALS: u64 = 1_000_000;

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

pub fn run(_: &Settings, rows: &mut Vec<Row>) {
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
        rounds: Vec::new(),
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
    let adaptive = configured(
        SemaphoreBulkhead::new("bench-adaptive-memory", &semaphore_config(25)),
        |c| c.adaptive = Some(adaptive_config),
    );
    let (kib, allocs) = adaptive_calls_footprint(&adaptive);
    eprintln!("  6. memory: adaptive calls: {kib:+.0} KiB, {allocs} allocations");
    rows.push(Row {
        workload: Workload::Memory,
        title: format!("resident memory after {REFUSALS} adaptive calls"),
        ours: Cell {
            label: "semaphore with an adaptive limit (gradient2): call admitted".into(),
            value: Some(kib),
            unit: Unit::KiB,
            note: format!("{allocs} allocations"),
            rounds: Vec::new(),
        },
        peer: peer(tokio),
        target: "flat".into(),
    });
    eprintln!("  6. memory: resident at start of workload {baseline:.0} KiB");
    for (name, (kib, allocs)) in ours_cases {
        eprintln!("  6. memory: {name}: {kib:+.0} KiB, {allocs} allocations");
        rows.push(Row {
            workload: Workload::Memory,
            title: format!("resident memory after {REFUSALS} refusals"),
            ours: Cell {
                label: name.into(),
                value: Some(kib),
                unit: Unit::KiB,
                note: format!("{allocs} allocations"),
                rounds: Vec::new(),
            },
            peer: peer(tokio),
            target: "flat".into(),
        });
    }
}

//! Workload 2: the refusal of a full bulkhead (sync, `#[bulkhead]`, pool, pool async),
//! with the allocations it makes, vs tokio's `try_acquire` refused.

use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::fixtures::{full_pool, full_semaphore, full_semaphore_shared_name};
use crate::harness::{Cell, Row, Settings, each, find, measure, report};
use crate::workloads::Workload;
use crate::{alloc, attribute};

pub const ATTRIBUTE_REFUSED: &str = "#[bulkhead] fn refused (Full)";
pub const SEM_REFUSED: &str = "semaphore: call refused (Full)";
pub const SEM_SHARED_REFUSED: &str =
    "semaphore built by hand with an Arc name (not registered): call refused (Full)";
pub const SEM_TRY_REFUSED: &str = "semaphore: try_acquire refused";
pub const POOL_REFUSED: &str = "thread pool: call refused (Full)";
pub const POOL_ASYNC_REFUSED: &str = "thread pool: call_async refused, first poll";
pub const TOKIO_REFUSED: &str = "tokio Semaphore::try_acquire refused";

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
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
    let sync_target = "≤ 25 ns, 0 allocations";
    for (name, n, target) in [
        (ATTRIBUTE_REFUSED, attribute_allocs, sync_target),
        (SEM_REFUSED, sem_allocs, sync_target),
        (SEM_SHARED_REFUSED, shared_sem_allocs, sync_target),
        (POOL_REFUSED, pool_allocs, sync_target),
        (
            POOL_ASYNC_REFUSED,
            pool_async_allocs,
            "≤ 15 ns, 0 allocations",
        ),
    ] {
        rows.push(Row {
            workload: Workload::Refusal,
            title: "refusal of a full bulkhead".into(),
            ours: Cell::of(find(&results, name)).with_note(allocs(n)),
            peer: Cell::of(find(&results, TOKIO_REFUSED)).with_note(allocs(tokio_allocs)),
            target: target.into(),
        });
    }
    rows.push(Row {
        workload: Workload::Refusal,
        title: "refusal, permit only".into(),
        ours: Cell::of(find(&results, SEM_TRY_REFUSED)),
        peer: tokio,
        target: "–".into(),
    });
}

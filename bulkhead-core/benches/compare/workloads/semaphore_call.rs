//! Workload 1: an uncontended sync semaphore call, through `#[bulkhead]` and the core API
//! by hand, vs `tokio::sync::Semaphore` try_acquire + drop and a `Mutex`/`Condvar`
//! semaphore; with the adaptive limit's cost and the attribute's overhead.

use std::hint::black_box;

use bulkhead_config_types::{AdaptiveAlgorithm, AdaptiveConfig};
use bulkhead_core::SemaphoreBulkhead;

use crate::attribute;
use crate::fixtures::{configured, semaphore_config};
use crate::harness::{Cell, Row, Settings, each, find, measure, report};
use crate::peers::CondvarSemaphore;
use crate::workloads::Workload;

pub const ATTRIBUTE: &str = "#[bulkhead] fn";
pub const CORE_CALL: &str = "SemaphoreBulkhead::call (core, inline in the loop)";
pub const BY_HAND_FN: &str = "the same fn by hand (static bulkhead + call)";
pub const CORE_TRY: &str = "SemaphoreBulkhead::try_acquire + drop";
pub const TOKIO_TRY: &str = "tokio Semaphore::try_acquire + drop";
pub const CONDVAR: &str = "Mutex/Condvar semaphore";
pub const ADAPTIVE_CALL: &str = "SemaphoreBulkhead::call, adaptive limit (gradient2)";

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
    let ours = SemaphoreBulkhead::new("bench-semaphore", &semaphore_config(25));
    let adaptive_config = AdaptiveConfig::new(AdaptiveAlgorithm::Gradient2).with_bounds(1, 25, 25);
    let adaptive = configured(
        SemaphoreBulkhead::new("bench-adaptive", &semaphore_config(25)),
        |c| c.adaptive = Some(adaptive_config),
    );
    let mut a = 0u64;
    let tokio_sem = tokio::sync::Semaphore::new(25);
    let condvar = CondvarSemaphore::new(25);
    let mut x = 0u64;
    let mut y = 0u64;
    let mut z = 0u64;
    let mut w = 0u64;
    let mut v = 0u64;
    let mut u = 0u64;
    let results = measure(
        settings.fast,
        vec![
            each(ATTRIBUTE, || {
                v += 1;
                black_box(attribute::guarded(v).ok());
            }),
            each(BY_HAND_FN, || {
                u += 1;
                black_box(attribute::guarded_by_hand(u).ok());
            }),
            each(CORE_CALL, || {
                x += 1;
                black_box(ours.call(|| black_box(x)).ok());
            }),
            each(ADAPTIVE_CALL, || {
                a += 1;
                black_box(adaptive.call(|| black_box(a)).ok());
            }),
            each(CORE_TRY, || {
                let permit = ours.try_acquire();
                black_box(&permit);
                drop(permit);
            }),
            each(TOKIO_TRY, || {
                y += 1;
                let permit = tokio_sem.try_acquire();
                black_box(y);
                drop(black_box(permit));
            }),
            each(CONDVAR, || {
                z += 1;
                black_box(condvar.call(|| black_box(z)));
            }),
            each("empty loop (harness overhead)", || {
                w += 1;
                black_box(w);
            }),
        ],
    );
    report("1. semaphore call", &results);
    let (core, core_try, tokio, condvar) = (
        find(&results, CORE_CALL),
        find(&results, CORE_TRY),
        find(&results, TOKIO_TRY),
        find(&results, CONDVAR),
    );
    let attribute = || Cell::of(find(&results, ATTRIBUTE));
    rows.push(Row {
        workload: Workload::SemaphoreCall,
        title: "sync semaphore call, uncontended".into(),
        ours: attribute(),
        peer: Cell::of(tokio),
        target: "≤ 1.3×".into(),
    });
    rows.push(Row {
        workload: Workload::SemaphoreCall,
        title: "sync semaphore call, uncontended".into(),
        ours: attribute(),
        peer: Cell::of(condvar),
        target: "–".into(),
    });
    rows.push(Row {
        workload: Workload::SemaphoreCall,
        title: "sync semaphore call, core API".into(),
        ours: Cell::of(core),
        peer: Cell::of(tokio),
        target: "≤ 1.3×".into(),
    });
    rows.push(Row {
        workload: Workload::SemaphoreCall,
        title: "sync semaphore call, core API".into(),
        ours: Cell::of(core),
        peer: Cell::of(condvar),
        target: "–".into(),
    });
    rows.push(Row {
        workload: Workload::SemaphoreCall,
        title: "permit only (try_acquire + drop)".into(),
        ours: Cell::of(core_try),
        peer: Cell::of(tokio),
        target: "–".into(),
    });
    rows.push(Row {
        workload: Workload::SemaphoreCall,
        title: "adaptive: sync semaphore call, adaptive vs static (core API)".into(),
        ours: Cell::of(find(&results, ADAPTIVE_CALL)),
        peer: Cell::of(core),
        target: "≤ 1.5×".into(),
    });
    rows.push(Row {
        workload: Workload::SemaphoreCall,
        title: "attribute overhead: #[bulkhead] fn vs the same fn by hand".into(),
        ours: attribute(),
        peer: Cell::of(find(&results, BY_HAND_FN)),
        target: "≤ 1.10×".into(),
    });
    rows.push(Row {
        workload: Workload::SemaphoreCall,
        title: "attribute overhead: #[bulkhead] fn vs core call inlined in the loop".into(),
        ours: attribute(),
        peer: Cell::of(core),
        target: "–".into(),
    });
}

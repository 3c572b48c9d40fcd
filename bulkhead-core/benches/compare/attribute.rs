//! The `#[bulkhead]` rows: the attribute as users write it, through the facade (a
//! dev-dependency cycle cargo allows for benches), declared in `bulkhead-core/bulkheads.yaml`.

use std::hint::black_box;
use std::sync::OnceLock;

use bulkhead_config_types::SemaphoreConfig;
use bulkhead_core::SemaphoreBulkhead;

use bulkhead::BulkheadError;

/// An uncontended call through the attribute (`bench-attribute`: a semaphore of 25).
#[bulkhead::bulkhead("bench-attribute")]
pub fn guarded(x: u64) -> Result<u64, BulkheadError> {
    Ok(black_box(x))
}

/// An uncontended call through the attribute, in a partition (`bench-attribute-partitioned`:
/// a semaphore of 25, `live: 0.8`): compared with [`guarded`].
#[bulkhead::bulkhead("bench-attribute-partitioned", partition = "live")]
pub fn guarded_in_partition(x: u64) -> Result<u64, BulkheadError> {
    Ok(black_box(x))
}

/// A call through the attribute that is refused (`bench-attribute-full`: a semaphore of
/// 1, whose permit [`full_attribute`] holds).
#[bulkhead::bulkhead("bench-attribute-full")]
pub fn refused(x: u64) -> Result<u64, BulkheadError> {
    Ok(black_box(x))
}

/// The bulkhead of [`refused`] from the process-wide registry, its only permit held by
/// another thread until the guard drops.
pub fn full_attribute() -> (SemaphoreBulkhead, crate::fixtures::Occupied) {
    // One admitted call first: the rows measure calls after a function's first.
    let _ = refused(0);
    let sem = bulkhead::registry()
        .semaphore("bench-attribute-full")
        .expect("declared by `refused`");
    crate::fixtures::occupy_semaphore(sem)
}

/// The same function written by hand against the core API, as a user would without the
/// attribute: a bulkhead built once and kept in a `static`, then `SemaphoreBulkhead::call`.
/// The target "the attribute adds at most 10% over calling the core API by hand" compares
/// [`guarded`] with this: both are functions the loop calls, returning the same `Result`.
pub fn guarded_by_hand(x: u64) -> Result<u64, BulkheadError> {
    static BULKHEAD: OnceLock<SemaphoreBulkhead> = OnceLock::new();
    let bulkhead = BULKHEAD.get_or_init(|| {
        let config = SemaphoreConfig {
            max_concurrent_calls: 25,
            ..SemaphoreConfig::default()
        };
        SemaphoreBulkhead::new("bench-by-hand", &config)
    });
    bulkhead.call(|| black_box(x))
}

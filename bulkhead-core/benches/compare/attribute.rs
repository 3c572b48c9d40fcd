//! The `#[bulkhead]` rows: the attribute as users write it, through the facade (a
//! dev-dependency cycle cargo allows for benches), declared in `bulkhead-core/bulkheads.yaml`.

use std::hint::black_box;

use bulkhead::BulkheadError;

/// An uncontended call through the attribute (`bench-attribute`: a semaphore of 25).
#[bulkhead::bulkhead("bench-attribute")]
pub fn guarded(x: u64) -> Result<u64, BulkheadError> {
    Ok(black_box(x))
}

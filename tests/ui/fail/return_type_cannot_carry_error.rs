// A return type that cannot say "refused" (u64): return Result<T, BulkheadError>, or a fallback.
use bulkhead::bulkhead;

// A refused call has to return something: a plain `u64` cannot say "refused".
#[bulkhead("payment")]
fn charge(order: u64) -> u64 {
    order
}

fn main() {
    let _ = charge(1);
}

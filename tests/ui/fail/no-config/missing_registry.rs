// Compiled with no bulkheads.yaml beside the crate (tests/ui.rs points the attribute at
// this directory, which has none).
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment")]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn main() {
    let _ = charge(1);
}

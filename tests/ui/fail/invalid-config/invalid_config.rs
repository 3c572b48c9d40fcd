// Compiled against the invalid bulkheads.yaml in this directory.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment")]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn main() {
    let _ = charge(1);
}

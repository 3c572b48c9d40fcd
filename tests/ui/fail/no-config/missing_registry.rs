// No bulkheads.yaml beside Cargo.toml: add one, or name it in [package.metadata.bulkhead].
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment")]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn main() {
    let _ = charge(1);
}

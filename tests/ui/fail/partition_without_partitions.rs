// `partition = "…"` on a bulkhead without partitions: declare them in config, or drop the option.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment", partition = "batch")]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn main() {
    let _ = charge(1);
}

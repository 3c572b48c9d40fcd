// A bulkhead name the config does not declare (a typo): use the declared name the error suggests.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("paymnet")]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn main() {
    let _ = charge(1);
}

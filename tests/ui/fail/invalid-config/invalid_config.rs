// Using the invalid bulkheads.yaml beside this file: fix the file (reported once, not per fn).
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment")]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

#[bulkhead("payment")]
fn refund(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

#[bulkhead("reports")]
fn report(day: u32) -> Result<u32, BulkheadError> {
    Ok(day)
}

fn main() {
    let _ = (charge(1), refund(2), report(3));
}

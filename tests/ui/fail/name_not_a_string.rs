// The bulkhead's name as a path, or left out: write it as a string literal, #[bulkhead("payment")].
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead(payment)]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

#[bulkhead]
fn refund(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn main() {
    let _ = (charge(1), refund(1));
}

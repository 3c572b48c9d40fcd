use bulkhead::{BulkheadError, bulkhead};

// `crate` names the facade by a path, not by any other expression.
#[bulkhead("payment", crate = 7)]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

#[bulkhead("payment", crate = "not a path")]
fn refund(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn main() {
    let _ = (charge(1), refund(1));
}

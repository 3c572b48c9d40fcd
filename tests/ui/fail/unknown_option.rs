// Options #[bulkhead] lacks (a typo, `timeout`): use fallback, partition or key; timeouts: config.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment", fallbak = retry_later)]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

#[bulkhead("payment", timeout = "2s")]
fn refund(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn retry_later(order: u64, _: BulkheadError) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn main() {
    let _ = (charge(1), refund(1), retry_later);
}

// #[bulkhead] on a plain `fn` that returns a future: the permit would cover only making the
// future, not running it.
use std::future::Future;
use std::pin::Pin;

use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment")]
fn charge(order: u64) -> Pin<Box<dyn Future<Output = Result<u64, BulkheadError>> + Send>> {
    Box::pin(async move { Ok(order) })
}

#[bulkhead("payment")]
fn refund(order: u64) -> Result<impl Future<Output = u64>, BulkheadError> {
    Ok(async move { order })
}

fn main() {}

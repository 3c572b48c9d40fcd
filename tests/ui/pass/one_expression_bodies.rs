//! Bodies of one expression, on every kind: the expansion adds no warning of its own
//! (`unused_braces` once fired at the user's braces).
#![deny(warnings)]
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment")]
fn charge() -> Result<u32, BulkheadError> { Ok(3) }

#[bulkhead("recommendations")]
async fn recommend() -> Result<u32, BulkheadError> { Ok(4) }

#[bulkhead("reports")]
fn report() -> Result<u32, BulkheadError> { Ok(5) }

#[bulkhead("reports")]
async fn report_async() -> Result<u32, BulkheadError> { Ok(6) }

fn main() {
    let _ = charge();
    let _ = report();
    let _ = (recommend(), report_async());
}

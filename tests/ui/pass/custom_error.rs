//! `Result<T, E>` with the caller's own error type, `?` and early returns in the body.
#![deny(warnings)]
use bulkhead::{BulkheadError, bulkhead};

#[derive(Debug)]
enum StoreError {
    NotFound(u32),
    Busy(BulkheadError),
}

impl From<BulkheadError> for StoreError {
    fn from(e: BulkheadError) -> Self {
        StoreError::Busy(e)
    }
}

fn lookup(id: u32) -> Result<u32, StoreError> {
    if id == 0 { Err(StoreError::NotFound(id)) } else { Ok(id * 10) }
}

type StoreResult<T> = Result<T, StoreError>;

#[bulkhead("inventory")]
fn stock(id: u32) -> StoreResult<u32> {
    let count = lookup(id)?;
    if count > 100 {
        return Ok(100);
    }
    Ok(count)
}

#[bulkhead("inventory")]
async fn stock_async(id: u32) -> Result<u32, StoreError> {
    let count = lookup(id)?;
    Ok(count)
}

fn main() {
    assert_eq!(stock(2).unwrap(), 20);
    assert!(matches!(stock(0), Err(StoreError::NotFound(0))));
    let _ = stock_async(1);
    let _ = StoreError::Busy;
}

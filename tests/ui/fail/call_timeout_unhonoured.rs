// A call `timeout` on a sync fn's bulkhead: make the fn async, or time out an async-only bulkhead.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("testing-timeout")]
fn sync_lookup(id: u32) -> Result<u32, BulkheadError> {
    Ok(id)
}

#[bulkhead("testing-timeout", fallback = cached)]
async fn lookup_with_fallback(id: u32) -> u32 {
    id
}

fn cached(id: u32, _refused: BulkheadError) -> u32 {
    id
}

fn main() {}

// A partition the bulkhead does not declare (a typo): use the declared name the error suggests.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("shared-search", partition = "bacth")]
fn reindex(shard: u32) -> Result<u32, BulkheadError> {
    Ok(shard)
}

fn main() {
    let _ = reindex(1);
}

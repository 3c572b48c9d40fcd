use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("shared-search", partition = "bacth")]
fn reindex(shard: u32) -> Result<u32, BulkheadError> {
    Ok(shard)
}

fn main() {
    let _ = reindex(1);
}

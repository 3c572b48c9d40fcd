// A #[bulkhead] fn calling itself (deadlock): recurse in a plain fn, annotate the entry point only.
use bulkhead::{BulkheadError, bulkhead};

/// Walks a category tree, one bulkhead call per level: each level would wait for a permit
/// while its caller holds one.
#[bulkhead("inventory")]
fn count_items(category: u32) -> Result<u32, BulkheadError> {
    if category == 0 {
        return Ok(1);
    }
    Ok(1 + count_items(category - 1)?)
}

fn main() {
    let _ = count_items(3);
}

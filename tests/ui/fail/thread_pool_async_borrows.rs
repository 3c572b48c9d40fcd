// An async fn on a thread-pool bulkhead borrowing an argument: take owned ones, or use a semaphore.
use bulkhead::{BulkheadError, bulkhead};

// The worker may outlive this call's borrows: an async fn on a thread pool takes owned
// arguments.
#[bulkhead("search")]
async fn search(query: &str) -> Result<usize, BulkheadError> {
    Ok(query.len())
}

fn main() {
    let _ = search("x");
}

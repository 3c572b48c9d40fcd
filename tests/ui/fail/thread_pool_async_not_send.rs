// An async fn on a thread pool holding an Rc across .await: use Send types (Arc), or a semaphore.
use std::rc::Rc;

use bulkhead::{BulkheadError, bulkhead};

// A thread-pool bulkhead runs the future on one of its worker threads: an `Rc` held across
// an `.await` makes it impossible to send there.
#[bulkhead("search")]
async fn search(query: String) -> Result<usize, BulkheadError> {
    let shared = Rc::new(query);
    tokio::task::yield_now().await;
    Ok(shared.len())
}

fn main() {
    let _ = search(String::from("x"));
}

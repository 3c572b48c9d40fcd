// An async fn's fallback produces another type: make it produce the function's output type.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("recommendations", fallback = stale)]
async fn recommend(user: u64) -> Vec<u64> {
    vec![user]
}

async fn stale(_user: u64, _: BulkheadError) -> Option<u64> {
    None
}

fn main() {}

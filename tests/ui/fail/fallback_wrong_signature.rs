// A fallback leaving out one of the fn's arguments: take them all, then the BulkheadError.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("recommendations", fallback = no_recommendations)]
fn recommend(user: u64, limit: usize) -> Vec<u64> {
    vec![user; limit]
}

// Forgot the `limit` argument.
fn no_recommendations(_user: u64, _: BulkheadError) -> Vec<u64> {
    Vec::new()
}

fn main() {
    let _ = recommend(1, 2);
}

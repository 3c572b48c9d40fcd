//! An `async fn`'s fallback that returns an `Option` of the function's output: the error
//! names both types, and suggests no edit of the attribute that would not compile.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("recommendations", fallback = no_recommendations)]
async fn recommend(user: u64) -> Vec<u64> {
    vec![user]
}

async fn no_recommendations(_user: u64, _: BulkheadError) -> Option<Vec<u64>> {
    None
}

fn main() {}

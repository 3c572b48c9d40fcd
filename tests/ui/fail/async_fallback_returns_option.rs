// An async fn's fallback returns `Option` of the fn's output: return the output type itself.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("recommendations", fallback = no_recommendations)]
async fn recommend(user: u64) -> Vec<u64> {
    vec![user]
}

async fn no_recommendations(_user: u64, _: BulkheadError) -> Option<Vec<u64>> {
    None
}

fn main() {}

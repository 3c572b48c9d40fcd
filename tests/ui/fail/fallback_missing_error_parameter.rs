// A fallback without the BulkheadError parameter: add it last (`_: BulkheadError`).
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("recommendations", fallback = no_recommendations)]
fn recommend(user: u64) -> Result<Vec<u64>, BulkheadError> {
    Ok(vec![user])
}

// Takes the call's argument but not the error that refused it.
fn no_recommendations(_user: u64) -> Result<Vec<u64>, BulkheadError> {
    Ok(Vec::new())
}

fn main() {
    let _ = recommend(1);
}

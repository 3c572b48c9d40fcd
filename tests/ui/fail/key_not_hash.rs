// A key must be `Hash` (an `f64` is not): the error points at the key expression.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("tenant-api", key = weight)]
fn weigh(weight: f64) -> Result<f64, BulkheadError> {
    Ok(weight)
}

#[bulkhead("pool-keyed", key = weight)]
fn weigh_on_pool(weight: f64) -> Result<f64, BulkheadError> {
    Ok(weight)
}

fn main() {
    let _ = (weigh(1.0), weigh_on_pool(2.0));
}

// A thread pool's partition the bulkhead does not declare (a typo): the same check as on a
// semaphore, with the declared name the error suggests.
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("pool-shares", partition = "lve")]
fn render(page: u32) -> Result<u32, BulkheadError> {
    Ok(page)
}

#[bulkhead("pool-shares", partition = "batch")]
async fn export(page: u32) -> Result<u32, BulkheadError> {
    Ok(page)
}

fn main() {
    let _ = (render(1), export(2));
}

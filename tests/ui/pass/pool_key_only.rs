// A parameter used only by `key = …` of a thread-pool function (sync or async) is not an
// unused variable: the key is read before the arguments move to the worker.
#![deny(warnings)]

use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("pool-keyed", key = tenant)]
fn render(tenant: &str, page: u32) -> Result<u32, BulkheadError> {
    Ok(page)
}

#[bulkhead("pool-keyed", key = (tenant.as_str(), region))]
async fn export(tenant: String, region: u8, pages: u32) -> Result<u32, BulkheadError> {
    Ok(pages)
}

fn main() {
    let _ = (render("acme", 1), export("acme".to_owned(), 2, 3));
}

use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("shared-search", partition = "live")]
fn search(query: &str) -> Result<usize, BulkheadError> {
    Ok(query.len())
}

#[bulkhead("shared-search")]
async fn unnamed(query: String) -> Result<usize, BulkheadError> {
    Ok(query.len())
}

#[bulkhead("tenant-api", key = (tenant, region))]
fn orders(tenant: u64, region: &str) -> Result<u64, BulkheadError> {
    Ok(tenant + region.len() as u64)
}

#[bulkhead("shares-tests", partition = "batch", key = tenant.as_str(), fallback = busy)]
async fn export(tenant: String) -> usize {
    tenant.len()
}

async fn busy(_tenant: String, _refused: BulkheadError) -> usize {
    0
}

// A thread pool takes both options too (its shares divide running plus queued calls).
#[bulkhead("pool-shares", partition = "live")]
fn render(page: &str) -> Result<usize, BulkheadError> {
    Ok(page.len())
}

#[bulkhead("pool-keyed", key = tenant.as_str(), fallback = later)]
async fn pool_export(tenant: String) -> usize {
    tenant.len()
}

async fn later(_tenant: String, _refused: BulkheadError) -> usize {
    0
}

fn main() {
    let _ = (search("a"), orders(1, "eu"), render("p"), pool_export("t".to_owned()));
    let _ = (unnamed("a".to_owned()), export("b".to_owned()));
    let _reindex = bulkhead::layer!("shared-search", partition = "batch");
}

//! A crate that depends on the facade under another name
//! (`my_bulkhead = { package = "bulkheads", … }` in its Cargo.toml) says so with
//! `crate = ::my_bulkhead`: every row of the expansion, and `layer!`, name the facade by
//! that path. `::bulkhead` names something else here, so any path the expansion still
//! spelled `::bulkhead` would fail to build.
#![deny(warnings)]

// The facade under another name, as the renamed dependency gives it ...
extern crate bulkhead as my_bulkhead;
// ... and `::bulkhead` taken by another crate.
extern crate std as bulkhead;

use my_bulkhead::BulkheadError;

#[my_bulkhead::bulkhead("payment", crate = ::my_bulkhead)]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order * 2)
}

#[my_bulkhead::bulkhead("recommendations", fallback = none, crate = my_bulkhead)]
async fn recommend(user: u64) -> Vec<u64> {
    vec![user + 1]
}

fn none(_user: u64, _refused: BulkheadError) -> Vec<u64> {
    Vec::new()
}

// Timed by the bulkhead's call timeout: the refusal path through the return type.
#[my_bulkhead::bulkhead("testing-timeout", crate = ::my_bulkhead)]
async fn quote(item: u64) -> Result<u64, BulkheadError> {
    Ok(item + 1)
}

// serde's and tokio's spelling: the path in a string.
#[my_bulkhead::bulkhead("reports", crate = "my_bulkhead")]
fn render(rows: &[u32]) -> Result<usize, BulkheadError> {
    Ok(rows.len())
}

#[my_bulkhead::bulkhead("search", fallback = nothing, crate = ::my_bulkhead)]
async fn search(query: String) -> Vec<String> {
    vec![query]
}

async fn nothing(_query: String, _refused: BulkheadError) -> Vec<String> {
    Vec::new()
}

#[my_bulkhead::bulkhead("shares-tests", partition = "batch", key = tenant, crate = ::my_bulkhead)]
fn export(tenant: u64) -> Result<u64, BulkheadError> {
    Ok(tenant)
}

#[my_bulkhead::bulkhead("pool-keyed", key = tenant.as_str(), crate = ::my_bulkhead)]
async fn pool_export(tenant: String) -> Result<usize, BulkheadError> {
    Ok(tenant.len())
}

#[tokio::main]
async fn main() {
    assert_eq!(charge(3).unwrap(), 6);
    assert_eq!(recommend(1).await, vec![2]);
    assert_eq!(quote(1).await.unwrap(), 2);
    assert_eq!(render(&[1, 2, 3]).unwrap(), 3);
    assert_eq!(search(String::from("q")).await, vec![String::from("q")]);
    assert_eq!(export(7).unwrap(), 7);
    assert_eq!(pool_export(String::from("acme")).await.unwrap(), 4);

    let layer = my_bulkhead::layer!("tower-gateway", crate = ::my_bulkhead);
    let partitioned =
        my_bulkhead::layer!("shared-search", crate = ::my_bulkhead, partition = "batch");
    let _ = (layer, partitioned);
    let names: Vec<&str> = my_bulkhead::declarations().iter().map(|d| d.name()).collect();
    assert!(names.contains(&"payment") && names.contains(&"tower-gateway"));
}

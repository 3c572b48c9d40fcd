//! `async fn` on a semaphore bulkhead, with and without a fallback, free and as a method.
#![deny(warnings)]
use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("recommendations", fallback = no_recommendations)]
async fn recommend(user: u64) -> Vec<u64> {
    tokio::task::yield_now().await;
    vec![user + 1]
}

fn no_recommendations(_user: u64, _: BulkheadError) -> Vec<u64> {
    Vec::new()
}

/// A parameter named like the expansion's own locals is still the caller's.
#[bulkhead("payment")]
async fn redeem(permit: u32, refused: bool) -> Result<u32, BulkheadError> {
    Ok(if refused { 0 } else { permit })
}

/// `impl Trait` arguments in an `async fn`.
#[bulkhead("inventory")]
pub async fn total(counts: impl IntoIterator<Item = u32>) -> Result<u32, BulkheadError> {
    Ok(counts.into_iter().sum())
}

struct Client;

impl Client {
    #[bulkhead("payment")]
    async fn charge(&self, amount: &str) -> Result<String, BulkheadError> {
        tokio::task::yield_now().await;
        Ok(format!("charged {amount}"))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(recommend(1).await, vec![2]);
    assert_eq!(redeem(3, false).await.unwrap(), 3);
    assert_eq!(total([1, 2]).await.unwrap(), 3);
    assert_eq!(Client.charge("5 EUR").await.unwrap(), "charged 5 EUR");
}

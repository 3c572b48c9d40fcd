//! A free function on a semaphore bulkhead: docs, attributes and visibility are kept.
#![deny(warnings)]
use bulkhead::{BulkheadError, bulkhead};

/// Charges an order.
#[bulkhead("payment")]
#[must_use = "the receipt says whether the charge went through"]
#[inline]
pub(crate) fn charge(order: u64) -> Result<String, BulkheadError> {
    if order == 0 {
        return Ok(String::from("nothing to charge"));
    }
    Ok(format!("receipt {order}"))
}

/// No arguments, unit output: a fallback makes any return type work.
#[bulkhead("recommendations", fallback = warm_up_skipped)]
fn warm_up() {}

fn warm_up_skipped(_: BulkheadError) {}

fn main() {
    assert_eq!(charge(3).unwrap(), "receipt 3");
    warm_up();
}

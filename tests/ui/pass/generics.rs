//! Generic functions, `impl Trait` arguments, `where` clauses and argument patterns.
#![deny(warnings)]
use std::fmt::Display;

use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment")]
fn describe<T: Display>(value: T) -> Result<String, BulkheadError> {
    Ok(value.to_string())
}

#[bulkhead("payment")]
fn join(parts: impl IntoIterator<Item = impl Display>, sep: &str) -> Result<String, BulkheadError> {
    Ok(parts.into_iter().map(|p| p.to_string()).collect::<Vec<_>>().join(sep))
}

#[bulkhead("recommendations", fallback = zero)]
fn add<T>((a, b): (T, T), mut scale: u8) -> u64
where
    T: Into<u64>,
{
    scale += 1;
    (a.into() + b.into()) * u64::from(scale)
}

fn zero<T>(_: (T, T), _: u8, _: BulkheadError) -> u64 {
    0
}

fn main() {
    assert_eq!(describe(5).unwrap(), "5");
    assert_eq!(join([1, 2], "-").unwrap(), "1-2");
    assert_eq!(add((1u8, 2u8), 1), 6);
}

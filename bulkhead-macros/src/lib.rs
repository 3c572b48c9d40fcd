//! The `#[bulkhead]` attribute.
#![deny(missing_docs)]

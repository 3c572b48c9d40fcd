//! bulkhead: named, config-driven bulkheads for Rust services.
#![deny(missing_docs)]

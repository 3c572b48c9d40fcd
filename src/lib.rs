//! bulkhead: named, config-driven bulkheads for Rust services.
#![deny(missing_docs)]

#[cfg(feature = "axum")]
pub mod axum;
#[cfg(feature = "tower")]
pub mod tower;

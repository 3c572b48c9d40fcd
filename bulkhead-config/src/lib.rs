//! Configuration for [bulkhead]: the typed config, its YAML format and its JSON Schema.
//!
//! One set of types drives everything: parsing, the JSON Schema, the compile-time checks
//! made by `#[bulkhead]`, and the runtime in `bulkhead-core`.
//!
//! [bulkhead]: https://docs.rs/bulkhead
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod duration;
mod types;

pub use duration::{Duration, DurationParseError};
pub use types::*;

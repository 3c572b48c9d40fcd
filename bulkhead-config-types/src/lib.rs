//! The typed config of [bulkhead]: what each bulkhead *is* — its kind, sizes, waits and
//! rate limit — once a `bulkheads.yaml` (or a deploy layered over it) is resolved.
//!
//! This crate holds the types only: serde, and `schemars::JsonSchema` behind the feature
//! `schema`. The runtime (`bulkhead-core`) builds bulkheads from them and `#[bulkhead]`
//! compiles each declaration into the binary as one of them, so nothing at run time needs
//! a YAML parser. Reading, checking and layering files is `bulkhead-config`'s job.
//!
//! ```
//! use bulkhead::config::{BulkheadConfig, Kind, SemaphoreConfig};
//!
//! let payment = BulkheadConfig::semaphore(SemaphoreConfig {
//!     max_concurrent_calls: 10,
//!     ..Default::default()
//! });
//! assert_eq!(payment.kind(), Kind::Semaphore);
//! ```
//!
//! [bulkhead]: https://docs.rs/bulkheads
#![deny(missing_docs)]
#![warn(unreachable_pub)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod adaptive;
mod cluster;
mod config;
mod deploy;
mod duration;
mod limits;
mod names;
mod partitions;
mod rate_limit;
mod validate;

pub use adaptive::*;
pub use cluster::*;
pub use config::*;
pub use deploy::{CheckedDeploy, KindChange, SIZES_NOT_KINDS};
pub use duration::{Duration, DurationParseError};
pub use limits::*;
pub use names::{UndeclaredName, closest_name};
pub use partitions::*;
pub use rate_limit::*;
pub use validate::{
    InvalidConfig, MAX_CONCURRENT_CALLS, MAX_KEYS, MAX_PARTITIONS, MAX_QUEUE_CAPACITY,
    MAX_THREADS_PER_POOL, Problem, validate_name,
};

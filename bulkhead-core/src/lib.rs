//! The bulkhead runtime: named semaphore and bounded thread-pool bulkheads, the registry,
//! errors, stats and the clock.
//!
//! Most users depend on the `bulkhead` facade crate and its `#[bulkhead]` attribute; this
//! crate is the runtime underneath it, usable on its own.
#![deny(missing_docs)]

mod clock;
mod error;
mod reentry;
mod snapshot;
mod stats;

pub use clock::{Clock, ManualClock, Sleep, SystemClock, system_clock};
pub use error::{BulkheadError, BulkheadName, Refused};
pub use snapshot::{BulkheadSnapshot, CallCounts, RefusalCounts};

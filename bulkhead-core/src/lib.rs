//! The bulkhead runtime: named semaphore and bounded thread-pool bulkheads, the registry,
//! errors, stats and the clock.
//!
//! Most users depend on the `bulkhead` facade crate and its `#[bulkhead]` attribute; this
//! crate is the runtime underneath it, usable on its own.
//!
//! Observability: every call runs in a `bulkhead` tracing span (carried onto pool workers
//! with the caller's span as parent, see [`context`]), every refusal logs a `WARN`;
//! [`Registry::snapshot`] reads limits, load, counters, wait- and queue-time histograms and
//! saturation; [`prometheus`] renders them as text exposition; [`events`] delivers
//! permitted / refused / finished events to listeners.
#![deny(missing_docs)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adaptive;
mod admission;
pub mod async_caller;
mod call_timeout;
mod clock;
pub mod context;
pub mod declaration;
mod error;
pub mod events;
mod frame;
pub mod metric_families;
#[cfg(feature = "metrics")]
pub mod metrics_bridge;
pub mod prometheus;
mod rate_limit;
mod registry;
mod reloads;
mod semaphore;
#[cfg(feature = "serde")]
mod serialize;
mod shares;
mod snapshot;
mod stats;
mod sync;
mod telemetry;
mod thread_pool;

pub use clock::{Clock, ManualClock, Sleep, SystemClock, system_clock};
pub use declaration::{
    AnnotatedFunction, DeclarationConflict, DeclarationSite, Declarations, DeclaredBulkhead,
};
pub use error::{BulkheadError, BulkheadName, Refused};
pub use rate_limit::{
    LeaseSnapshot, RateAdmission, RateLimiter, StoreCheck, check_cluster_stores,
    retry_after_header_secs,
};
#[doc(hidden)]
pub use registry::declared_handle;
pub use registry::{
    Bulkhead, BulkheadShutdown, CheckedDeploy, DeployBase, DeployRefused, Registry, RegistryError,
    ReloadError, ReloadProblem, ReloadReport, UndeclaredName, registry,
};
pub use reloads::{DeployOutcome, DeploySubscription, ReloadFailure, ReloadStatus};
pub use semaphore::{
    Acquire, Admission, AsyncPermit, AsyncSharePermit, OwnedPermit, Partition, Permit, RunAdmitted,
    RunAsync, SemaphoreBulkhead, SemaphoreCall, SemaphoreShutdown, SharePermit,
};
pub use shares::{KeyLoad, PartitionNamesChanged, PartitionSnapshot, PerKeySnapshot, TOP_KEYS};
pub use snapshot::{BulkheadSnapshot, CallCounts, RefusalCounts};
pub use telemetry::{BUCKETS, HistogramSnapshot, SaturationLevel};
pub use thread_pool::{CallAsync, PoolAdmission, ShutdownReport, ThreadPoolBulkhead, Timed};

//! bulkhead: named, config-driven bulkheads for Rust services.
//!
//! One slow dependency should not take a whole service down. Give every dependency its
//! own named bulkhead — a semaphore, or a thread pool with a bounded queue — declared in
//! `bulkheads.yaml` beside your `Cargo.toml`, and attach it with one attribute:
//!
//! ```
//! use bulkhead::{bulkhead, BulkheadError};
//!
//! #[derive(Debug)]
//! enum PaymentError {
//!     Busy(BulkheadError),
//! }
//!
//! impl From<BulkheadError> for PaymentError {
//!     fn from(e: BulkheadError) -> Self {
//!         PaymentError::Busy(e)
//!     }
//! }
//!
//! /// Charges an order (at most `payment.max_concurrent_calls` at once).
//! #[bulkhead("payment")]
//! fn charge(order: u64) -> Result<String, PaymentError> {
//!     Ok(format!("receipt for order {order}"))
//! }
//!
//! #[bulkhead("recommendations", fallback = no_recommendations)]
//! fn recommend(user: u64) -> Vec<u64> {
//!     vec![user + 1, user + 2]
//! }
//!
//! // Called with the same arguments when the bulkhead refuses the call.
//! fn no_recommendations(_user: u64, _refused: BulkheadError) -> Vec<u64> {
//!     Vec::new()
//! }
//!
//! assert_eq!(charge(7).unwrap(), "receipt for order 7");
//! assert_eq!(recommend(1), vec![2, 3]);
//! ```
//!
//! with, beside `Cargo.toml`:
//!
//! ```yaml
//! bulkheads:
//!   payment:         { kind: semaphore, max_concurrent_calls: 10 }
//!   recommendations: { kind: semaphore, max_concurrent_calls: 8, max_wait: 300ms }
//! ```
//!
//! The build fails, at the right token, when a name is not declared, when there is no
//! config, when the config is invalid, and for the misuse listed under [`bulkhead`]. The
//! attribute compiles each declaration into the binary as typed data and the linker gathers
//! them, so at run time, with nothing to set up, the process-wide [`registry`] holds every
//! bulkhead the program declares — in every crate it links — from its first use
//! ([`declarations`] lists them). No YAML is read at run time; a deploy resizes the
//! declared bulkheads with [`install`], [`reload`] or [`Deploy`] (files and `BULKHEAD_…`
//! environment variables), checked against every declaration.
//!
//! # Features
//!
//! Only `deploy` is on by default; the attribute, the registry, [`install`] / [`reload`] of
//! a [`Config`] built in code and both kinds of bulkhead need none of them.
//!
//! | feature | adds |
//! |---|---|
//! | `deploy` (default) | [`Deploy`], [`check_deploy`], [`watch()`] and the admin router's writes: deploy files and `BULKHEAD_…` variables layered over the registry. It links the YAML parser; a program that never reads a deploy file turns it off (`default-features = false`) and links none (`cargo tree -e normal` shows no `saphyr`, `figment`, `schemars` or `serde_json`). |
//! | `tokio` | A thread-pool `async fn` runs its future on a worker thread; with `tokio`, the worker enters the tokio runtime of the task that awaits the call, so the body can use tokio's timers, I/O and `spawn`. Without it such a body panics with a message that names this feature (semaphore bulkheads run the body on the caller's task, on any executor, and never need it). |
//! | `tower` | `tower::BulkheadLayer`: a semaphore bulkhead as a tower `Layer`; a full bulkhead is an error value (`tower::ServiceError::Refused`), never a hang. |
//! | `axum` | (with `tower`) `axum::BulkheadLayer` for routes: the permit is held until the response body's last frame, a refusal is a `503` (`429` when rate limited) with `Retry-After` (`axum::Refusal`). |
//! | `axum` (admin) | [`axum::admin`] / [`axum::Admin`]: a router with every bulkhead as JSON, its events as server-sent events, `/metrics`, `/reloads`, and live resizing behind a bearer token. |
//! | `metrics` | [`metrics_bridge`]: publishes every bulkhead's snapshot through the `metrics` crate's recorder, from the same table of families as [`prometheus`] ([`metric_families::FAMILIES`]). |
//! | `serde` | `Serialize` for snapshots, reload reports and statuses, shutdown reports (on with `axum`). |
//! | `watch` | (with `deploy`) [`watch()`] / [`Watch`]: applies a deploy file and then every change to it (edits, atomic renames, the Kubernetes `..data` symlink swap). |
//! | `redis` | `rate_limit: { scope: cluster, store: { redis: … } }` counts the limit in Redis, shared by every replica, and a semaphore's `cluster: { store: { redis: … } }` shares its `max_concurrent_calls` the same way (below); without it such a limit is a store error, handled as its `on_store_error` says. |
//!
//! ```toml
//! bulkheads = { version = "0.1", features = ["tokio", "axum"] }
//! ```
//!
//! # Config reference
//!
//! The keys of `bulkheads.yaml`, layering and `BULKHEAD_…` variables:
//! `docs/config-reference.md` (its Rust examples are compiled and run as doc tests).
//!
//! # One rate limit for every replica
//!
//! A `rate_limit` with `scope: cluster` is counted in Redis (feature `redis`), shared by
//! every process that uses the same store and bulkhead name: one atomic script per decision,
//! the same admission and `RateLimited { retry_after }` as the per-process limiter. When
//! Redis cannot answer within `response_timeout`, `on_store_error` decides (`local`: this
//! process's share, `limit_for_period / replicas`; `allow`; `refuse`), and the decision is
//! counted in the snapshot's `rate_limit_store_errors` and in
//! `bulkhead_rate_limit_store_errors_total`. No decision waits longer than
//! `response_timeout` of wall-clock time, however the server behaves; a process that falls
//! back charges its share with what Redis admitted for it and reports what it admitted on
//! its own when Redis returns, so with `local` no period admits more than
//! `limit_for_period + replicas − 1` through a Redis kill and return. A deploy whose store
//! cannot be used at all (an unset `${NAME}`, not `redis://`) is refused by
//! [`Deploy::install`] and [`check_deploy`] unless the store says `start_anyway: true`;
//! [`check_cluster_stores`] asks every store once, for a readiness probe.
//! `docs/cluster.md` has a deployment example, the bound and a table of faults.
//!
//! ```
//! use bulkhead::config::{
//!     BulkheadConfig, Duration, OnStoreError, RateLimitConfig, RateLimitScope, RateLimitStore,
//!     SemaphoreConfig,
//! };
//! use bulkhead::{BulkheadError, Registry};
//!
//! let mut config = BulkheadConfig::semaphore(SemaphoreConfig::default());
//! config.rate_limit = Some(RateLimitConfig {
//!     scope: RateLimitScope::Cluster,
//!     store: Some(RateLimitStore {
//!         on_store_error: OnStoreError::Refuse,
//!         // In a file: `redis: "${REDIS_URL}"` reads the URL from the environment.
//!         ..RateLimitStore::redis("redis://127.0.0.1:1/")
//!     }),
//!     ..RateLimitConfig::per_process(100, Duration::from_secs(1))
//! });
//! let registry = Registry::new();
//! let partner = registry.register("partner-api", &config).unwrap();
//!
//! // Nothing listens on port 1: Redis cannot answer, so `on_store_error: refuse` refuses,
//! // with a `retry_after` of one period, and the store error is counted.
//! let refused = partner.as_semaphore().unwrap().call(|| ()).unwrap_err();
//! assert!(matches!(refused, BulkheadError::RateLimited { .. }));
//! assert_eq!(refused.retry_after(), Some(std::time::Duration::from_secs(1)));
//! assert_eq!(partner.snapshot().rate_limit_store_errors, Some(1));
//! ```
//!
//! # One concurrency limit for every replica
//!
//! A partner API that allows 50 concurrent requests per account needs one limit for all
//! the service's replicas. `cluster:` on a semaphore makes its `max_concurrent_calls` that
//! limit (feature `redis`): each admitted call holds a *lease* in Redis (an id and an
//! expiry), renewed by one heartbeat thread per bulkhead every `lease_ttl / 3` while the
//! call runs and given back when it ends. The local semaphore still bounds the process.
//!
//! ```yaml
//! bulkheads:
//!   partner-api:
//!     kind: semaphore
//!     max_concurrent_calls: 50        # for all the replicas together
//!     cluster:
//!       store: { redis: "${REDIS_URL}", replicas: 5, on_store_error: local }
//!       lease_ttl: 10s
//! ```
//!
//! A call that finds every lease taken is refused with [`BulkheadError::Full`] at once (a
//! `max_wait` applies to the local permit only). The leases of a process that crashed
//! expire within `lease_ttl` of its last heartbeat, and the next caller reclaims them. A
//! release removes the process's own lease only, so a release after its lease expired
//! never frees someone else's. When Redis cannot answer within `response_timeout`,
//! `on_store_error` decides: `local` runs the call if this process runs fewer than
//! `max_concurrent_calls / replicas` (rounded up), `allow` runs it, `refuse` refuses it;
//! the next heartbeat that reaches Redis registers the calls admitted without it.
//! Partitions and `per_key` caps apply within each process, in front of the cluster limit.
//! The snapshot's [`leases`](BulkheadSnapshot::leases) ([`LeaseSnapshot`]) and the
//! `bulkhead_cluster_leases_*` metrics count leases held, running without a lease,
//! renewed, expired, reclaimed and the store's errors. `docs/cluster.md` has the bounds
//! measured through Redis faults.
//!
//! ```
//! use bulkhead::config::{
//!     BulkheadConfig, ClusterLimitConfig, OnStoreError, RateLimitStore, SemaphoreConfig,
//! };
//! use bulkhead::{BulkheadError, Registry};
//!
//! let mut config = BulkheadConfig::semaphore(SemaphoreConfig {
//!     max_concurrent_calls: 50,
//!     ..SemaphoreConfig::default()
//! });
//! config.cluster = Some(ClusterLimitConfig {
//!     store: RateLimitStore {
//!         on_store_error: OnStoreError::Refuse,
//!         // In a file: `redis: "${REDIS_URL}"` reads the URL from the environment.
//!         ..RateLimitStore::redis("redis://127.0.0.1:1/")
//!     },
//!     ..ClusterLimitConfig::redis("")
//! });
//! let registry = Registry::new();
//! let partner = registry.register("partner-api", &config).unwrap();
//!
//! // Nothing listens on port 1: no lease can be had, so `on_store_error: refuse` refuses
//! // the call, and the store error is counted.
//! let refused = partner.as_semaphore().unwrap().call(|| ()).unwrap_err();
//! assert!(matches!(refused, BulkheadError::Full { .. }));
//! let leases = partner.snapshot().leases.unwrap();
//! assert_eq!((leases.limit, leases.store_errors, leases.held), (50, 1, 0));
//! ```
//!
//! # Partitions and per-key shares
//!
//! Inside one bulkhead, one caller can still take everything: a batch job, or one tenant
//! of a multi-tenant service. `partitions` divide a bulkhead's limit into named shares (a
//! thread pool's: the calls it admits, running plus queued), and `per_key` caps the calls
//! of each key:
//!
//! ```yaml
//! bulkheads:
//!   shared-search: { kind: semaphore, max_concurrent_calls: 10, max_wait: 1s,
//!                    partitions: { live: 0.8, batch: 0.2 } }
//!   tenant-api:    { kind: semaphore, max_concurrent_calls: 8,
//!                    per_key: { max_concurrent_calls: 2, max_keys: 1000 } }
//! ```
//!
//! ```
//! use bulkhead::{BulkheadError, bulkhead};
//!
//! // Guaranteed 8 of the 10 permits; may wait up to max_wait for them.
//! #[bulkhead("shared-search", partition = "live")]
//! fn search(query: &str) -> Result<usize, BulkheadError> {
//!     Ok(query.len())
//! }
//!
//! // Guaranteed 2; borrows permits live leaves idle, but never waits for one.
//! #[bulkhead("shared-search", partition = "batch")]
//! fn reindex(shard: u32) -> Result<u32, BulkheadError> {
//!     Ok(shard)
//! }
//!
//! // At most 2 calls per tenant at once; any `Hash` expression of the arguments.
//! #[bulkhead("tenant-api", key = tenant)]
//! fn list_orders(tenant: &str, page: u32) -> Result<u32, BulkheadError> {
//!     Ok(page)
//! }
//!
//! assert_eq!(search("rust"), Ok(4));
//! assert_eq!(reindex(3), Ok(3));
//! assert_eq!(list_orders("acme", 1), Ok(1));
//!
//! // The snapshot shows each partition and the per-key aggregates (never one series per key).
//! let snapshot = bulkhead::registry().semaphore("shared-search").unwrap().snapshot();
//! let live = snapshot.partitions.iter().find(|p| p.name == "live").unwrap();
//! assert_eq!(live.guaranteed, 8);
//! ```
//!
//! The rules, exactly: a partition is guaranteed `floor(share × limit)` permits of the
//! limit in force (a resize or an adaptive limit moves every guarantee). A call of a
//! partition below its guarantee is admitted like any call, waiting up to `max_wait`; a
//! call at or above it **borrows**: it takes a permit only if one is free at that instant
//! and nobody waits, and is refused with `Full` otherwise — it never waits. So only calls
//! below their share ever queue, and a released permit, borrowed or not, goes to the
//! longest of them: borrowed capacity comes back at the borrower's next release. The
//! bulkhead's own limit is never exceeded. A function on a partitioned bulkhead that names
//! no partition only borrows. `partition = "…"` is checked at compile time against the
//! declared partitions, with a "did you mean".
//!
//! A call whose key already holds `per_key.max_concurrent_calls` is refused with
//! [`BulkheadError::KeyLimit`] (reason `key_limit`). At most `max_keys` keys are tracked,
//! each only while it has a call in flight; further keys share one overflow entry with the
//! same cap. In code: [`SemaphoreBulkhead::partition`], [`SemaphoreBulkhead::keyed`],
//! [`Admission`]; on a pool [`ThreadPoolBulkhead::in_partition`],
//! [`ThreadPoolBulkhead::keyed`]; for tower, `tower::BulkheadLayer::partition` and `key_by`.
//! `docs/partitions.md` has the details.
#![deny(missing_docs)]
#![warn(unreachable_pub)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
#[cfg(feature = "watch")]
#[cfg_attr(docsrs, doc(cfg(feature = "watch")))]
pub mod watch;

/// The Rust examples of the README and of every page of `docs/`, compiled and run as doc
/// tests (users read them on GitHub, so each is complete, without hidden lines).
#[cfg(doctest)]
mod doc_pages {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/config-reference.md")]
    struct ConfigReference;
    #[doc = include_str!("../docs/configuration.md")]
    struct Configuration;
    #[doc = include_str!("../docs/tower-axum.md")]
    struct TowerAxum;
    #[doc = include_str!("../docs/observability.md")]
    struct Observability;
    #[doc = include_str!("../docs/operations.md")]
    struct Operations;
    #[doc = include_str!("../docs/overload.md")]
    struct Overload;
    #[doc = include_str!("../docs/adaptive.md")]
    struct Adaptive;
    #[doc = include_str!("../docs/cluster.md")]
    struct ClusterRateLimit;
    #[doc = include_str!("../docs/incident.md")]
    struct Incident;
    #[doc = include_str!("../docs/benchmarks.md")]
    struct Benchmarks;
}

/// The Rust examples of `docs/partitions.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/partitions.md")]
pub struct PartitionsExamples;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod deploy;

#[cfg(feature = "deploy")]
#[cfg_attr(docsrs, doc(cfg(feature = "deploy")))]
pub use deploy::{Deploy, DeployCheck, DeployError, check_deploy};
pub use deploy::{declarations, install, install_strict, registry, reload};
#[cfg(feature = "watch")]
pub use watch::{Watch, WatchError, WatchGuard, watch};

/// The config types, YAML parsing with positions, validation and deploy layering
/// ([`config::Layers`]: embedded defaults < deploy files < `BULKHEAD_…` environment variables).
/// Without the `deploy` feature: the config types only (no parser is linked).
///
/// The `bulkhead` CLI's own helpers (the JSON Schema, pool sizing, the file format's raw
/// form) live in the `bulkhead-config` crate, not here.
#[cfg(feature = "deploy")]
pub mod config {
    pub use bulkhead_config::{
        CheckReport, Diagnostic, Diagnostics, ENV_PREFIX, Layers, MAX_DEPTH, MAX_EXTENDS_DEPTH,
        MAX_NODES, MAX_SOURCE_BYTES, Parsed, Severity, check_against, env_var_name, parse_file,
    };
    pub use bulkhead_config_types::*;
}
/// The config types (with the `deploy` feature, also YAML parsing, validation with
/// positions and deploy layering).
#[cfg(not(feature = "deploy"))]
pub use bulkhead_config_types as config;
pub use bulkhead_config_types::Config;
/// Adaptive limits: a bulkhead declared with `adaptive: { algorithm: vegas | gradient2 |
/// aimd, … }` sizes itself from the latency and drops of its calls, within its declared
/// size. Code marks a call whose dependency said "overloaded" with [`mark_overloaded`]:
///
/// ```
/// use bulkhead::{BulkheadError, bulkhead, mark_overloaded};
///
/// // bulkheads.yaml: shipping-quotes: { kind: semaphore, max_concurrent_calls: 50,
/// //   adaptive: { algorithm: aimd, timeout: 200ms, backoff_ratio: 0.5 } }
/// #[bulkhead("shipping-quotes")]
/// fn quote(weight: u32) -> Result<u32, BulkheadError> {
///     let status = if weight > 1000 { 503 } else { 200 }; // the carrier's answer
///     if status == 503 {
///         mark_overloaded(); // a drop: the limit backs off
///     }
///     Ok(weight * 3)
/// }
///
/// for _ in 0..20 {
///     quote(2000).unwrap();
/// }
/// let limits = bulkhead::registry().semaphore("shipping-quotes").unwrap().snapshot();
/// // 20 at start (the default); a window (20 calls at that limit) with drops halves it.
/// assert_eq!(limits.limit, 10);
/// assert!(limits.adaptive.is_some());
/// ```
///
/// The algorithms gather the timed calls into windows of about one round trip (as many
/// calls as the limit, at least [`MIN_WINDOW`](adaptive::MIN_WINDOW)); the limit can change
/// once per window, and the snapshot's [`AdaptiveSnapshot`](adaptive::AdaptiveSnapshot)
/// says what the algorithm saw. `docs/adaptive.md` has the algorithms and their settings.
pub mod adaptive {
    pub use bulkhead_core::adaptive::{AdaptiveSnapshot, Estimates, MIN_WINDOW, mark_overloaded};
}
pub use bulkhead_core::adaptive::mark_overloaded;
pub use bulkhead_core::{
    Acquire, Admission, AnnotatedFunction, AsyncPermit, AsyncSharePermit, Bulkhead, BulkheadError,
    BulkheadName, BulkheadShutdown, BulkheadSnapshot, CallAsync, CallCounts, CheckedDeploy, Clock,
    DeclarationConflict, DeclarationSite, Declarations, DeclaredBulkhead, DeployBase,
    DeployRefused, KeyLoad, LeaseSnapshot, ManualClock, OwnedPermit, Partition,
    PartitionNamesChanged, PartitionSnapshot, PerKeySnapshot, Permit, PoolAdmission, RefusalCounts,
    Refused, Registry, RegistryError, ReloadError, ReloadProblem, ReloadReport, RunAdmitted,
    RunAsync, SemaphoreBulkhead, SemaphoreCall, SemaphoreShutdown, SharePermit, ShutdownReport,
    Sleep, StoreCheck, SystemClock, ThreadPoolBulkhead, UndeclaredName, check_cluster_stores,
    retry_after_header_secs, system_clock,
};
// Observability: spans, events, context propagation, exposition.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use bulkhead_core::metrics_bridge;
pub use bulkhead_core::{
    DeployOutcome, DeploySubscription, HistogramSnapshot, ReloadFailure, ReloadStatus,
    SaturationLevel, async_caller, context, events, metric_families, prometheus,
};

/// Routes every call of a function through a named bulkhead declared in the crate's
/// `bulkheads.yaml`.
///
/// ```text
/// #[bulkhead("name")]
/// #[bulkhead("name", fallback = path)]
/// #[bulkhead("name", partition = "batch", key = tenant_id)]   // see "Partitions and per-key shares"
/// #[my_bulkhead::bulkhead("name", crate = ::my_bulkhead)]     // see "A renamed dependency"
/// ```
///
/// # The config, at compile time
///
/// The attribute reads `bulkheads.yaml` beside the crate's `Cargo.toml` (or the file named
/// by `[package.metadata.bulkhead] config = "…"` in it, relative to it), validates it, and
/// fails the build for an unknown name (with a suggestion), a missing file (saying where it
/// looked) or an invalid file (file:line:column of each problem). What it resolved — the
/// bulkhead's name, kind, every size, where the file declares it and which function uses it
/// — is compiled into the binary as typed data and gathered at link time (see
/// [`declarations`]); editing the file rebuilds the crate. Nothing is parsed at run time.
///
/// Under trybuild, which compiles test cases in a crate of its own so that
/// `CARGO_MANIFEST_DIR` names that crate (trybuild#202), set `BULKHEAD_MANIFEST_DIR` to
/// the directory whose config the cases use before running them (`tests/ui.rs` in this
/// crate does).
///
/// # What the function becomes
///
/// * **semaphore, `fn`**: takes a permit (waiting at most `max_wait`), runs the body in
///   place, returns the permit.
/// * **semaphore, `async fn`**: awaits a permit, then awaits the body while holding it; works
///   on any executor.
/// * **thread pool, `fn`**: runs the body on one of the pool's worker threads and blocks
///   until it is done, so borrowed arguments (`&self`, `&str`) are fine. The body needs to be
///   `Send`.
/// * **thread pool, `async fn`**: runs the future on a worker; it must be `Send + 'static`
///   (owned arguments, `self: Arc<Self>`). This is the form to call from async code: the
///   caller's task awaits the worker without blocking its thread.
///
/// A thread-pool `fn` called from a tokio task blocks that task's thread while it waits.
/// With feature `tokio`, on the multi-thread runtime the wait is handed to the runtime
/// (`block_in_place`), so the runtime's other tasks keep running; on a current-thread
/// runtime it blocks the runtime. Either way the first such call of each function logs a
/// WARN naming the fix (see [`async_caller`]).
///
/// With `timeout` in the bulkhead's config, an `async fn` without a fallback that runs past
/// it returns [`BulkheadError::CallTimeout`] through its return type at the deadline: a
/// body that awaits is dropped there and its permit or worker freed at once; a thread-pool
/// body that blocks (it never yields, so it cannot be cut) keeps its worker, and so its
/// slot, until it returns, and its late result is discarded. A sync `fn`, or a function with a fallback (which
/// answers calls that never ran, with their arguments), cannot be timed, and annotating one
/// with a bulkhead that declares a `timeout` fails the build. (A `timeout` a deploy adds at
/// run time applies to the `async fn`s without a fallback; other functions are not timed.)
///
/// A call into a bulkhead the thread is already inside runs inline instead of waiting on
/// itself (a pool task that submits to its own full pool would wait for itself forever),
/// and is counted `reentrant`. When the attribute can see it — an annotated function
/// calling itself, or another function of the same `impl` block or module annotated with
/// the same bulkhead, by its name (`f(..)`, `self::f(..)`, `Self::f(..)`, `Type::f(..)`,
/// `self.f(..)`) — the build fails instead. A call it cannot see as one (through a
/// `crate::` or `super::` path, a function pointer, another module) runs inline as above.
///
/// A plain `fn` that returns a future (`impl Future`, `Pin<Box<dyn Future>>`) fails the
/// build: the permit would be given back before the future runs. Write an `async fn`.
///
/// # Partitions and keys
///
/// `partition = "batch"` must name a partition the bulkhead declares (checked at compile
/// time); `key = expr` (any `Hash` expression of the arguments) counts the call under that
/// key, on either kind. `key =` compiles on a bulkhead without `per_key` and then limits
/// nothing: a deploy may add `per_key` live, and the calls already carry their key.
///
/// # Adaptive limits
///
/// A bulkhead declared with `adaptive: { algorithm: … }` sizes itself (see [`adaptive`]).
/// Every call the attribute admits is a sample: its latency, and whether it was a drop — it
/// panicked, or was cancelled (an `async fn` whose future was dropped, e.g. by a timeout).
/// When the body learns that the dependency is overloaded (an HTTP 503, a "too busy"
/// error) it says so with [`mark_overloaded()`], which marks the call it runs in, on either
/// kind, sync or async. By default a returned `Err` is not a drop.
///
/// # Refusals
///
/// A refused call never runs its body. Without a fallback the function must return
/// `Result<T, E>` with `E: From<BulkheadError>`, and returns `Err(error.into())`. With
/// `fallback = path`, the fallback is called with the function's arguments (for methods,
/// `self` first: `fallback = Self::cached`) followed by the [`BulkheadError`], and must
/// return the function's return type. For an `async fn` the fallback may be an `async fn`
/// too (a cache read over the network), whose output is awaited, or a plain function
/// returning the output. The compiler checks the fallback's signature.
///
/// ```
/// use bulkhead::{BulkheadError, bulkhead};
///
/// struct Catalog {
///     cached: Vec<u64>,
/// }
///
/// impl Catalog {
///     #[bulkhead("recommendations", fallback = Self::from_cache)]
///     fn recommend(&self, user: u64) -> Vec<u64> {
///         vec![user * 2]
///     }
///
///     fn from_cache(&self, _user: u64, _refused: BulkheadError) -> Vec<u64> {
///         self.cached.clone()
///     }
/// }
///
/// let catalog = Catalog { cached: vec![1] };
/// assert_eq!(catalog.recommend(4), vec![8]);
/// ```
///
/// # A renamed dependency
///
/// The code the attribute generates names this crate as `::bulkhead`. A crate that depends
/// on it under another name (`my_bulkhead = { package = "…", … }` in `[dependencies]`, or a
/// crate that re-exports it) says which path to use with `crate = path`, as with serde's
/// and tokio's attributes (`crate = "my_bulkhead"`, a string, works too); `layer!` takes
/// the same option.
///
/// ```
/// extern crate bulkhead as my_bulkhead; // what `my_bulkhead = { package = … }` gives
///
/// use my_bulkhead::BulkheadError;
///
/// #[my_bulkhead::bulkhead("payment", crate = ::my_bulkhead)]
/// fn charge(order: u64) -> Result<u64, BulkheadError> {
///     Ok(order)
/// }
///
/// fn main() {
///     assert_eq!(charge(7).unwrap(), 7);
/// }
/// ```
///
/// # Compile errors
///
/// An unknown name (pointing at the string, with a suggestion), no config (saying where it
/// looked), an invalid config (each problem as `file:line:column`), a call to itself or to a
/// function of the same `impl` block or module in the same bulkhead, a fallback of the wrong
/// signature, a return type that cannot carry a [`BulkheadError`] without a fallback, an
/// `async fn` on a thread pool whose future is not `Send + 'static`, the attribute on
/// something that is not a function, and unknown options. On an error the function is still
/// emitted unchanged, so one mistake gives one error. `tests/ui/fail` has one case of each.
pub use bulkhead_macros::bulkhead;

/// A [`tower::BulkheadLayer`] admitting requests through the named semaphore bulkhead,
/// with the name checked at compile time (feature `tower`).
///
/// ```
/// use std::time::Duration;
/// use bulkhead::tower::BoxError;
/// use tower::ServiceBuilder;
///
/// let login = ServiceBuilder::new()
///     .layer(bulkhead::layer!("tower-gateway"))
///     .service_fn(|user: u64| async move { Ok::<_, BoxError>(user) });
/// # drop(login);
/// ```
///
/// Like `#[bulkhead("name")]`, it reads the crate's `bulkheads.yaml` at compile time: an
/// unknown name fails the build at the string, with a "did you mean", and so does a
/// thread-pool bulkhead (a layer runs requests on the caller's task). It also declares the
/// bulkhead, so the process-wide [`registry`] holds it from start-up and a deploy can
/// resize it before the first request. Every expansion of `layer!("login")`, and every
/// `#[bulkhead("login")]` function, share the one bulkhead `login`. For axum, turn it
/// into the HTTP flavour with `bulkhead::axum::BulkheadLayer::from(bulkhead::layer!("login"))`.
///
/// `partition = "…"` counts the layer's requests under one of the bulkhead's partitions
/// ([`tower::BulkheadLayer::partition`]), checked at compile time like the attribute's: a
/// partition the bulkhead does not declare fails the build, with a "did you mean".
/// `crate = path` names this crate where it is a dependency under another name, as for
/// the attribute (see [`bulkhead`](macro@bulkhead)):
/// `my_bulkhead::layer!("login", crate = ::my_bulkhead)`.
///
/// ```
/// use bulkhead::tower::BoxError;
/// use tower::ServiceBuilder;
///
/// // bulkheads.yaml: shared-search: { kind: semaphore, max_concurrent_calls: 10,
/// //   max_wait: 1s, partitions: { live: 0.8, batch: 0.2 } }
/// let reindex = ServiceBuilder::new()
///     .layer(bulkhead::layer!("shared-search", partition = "batch"))
///     .service_fn(|shard: u32| async move { Ok::<_, BoxError>(shard) });
/// # drop(reindex);
/// ```
#[cfg(feature = "tower")]
pub use bulkhead_macros::layer;

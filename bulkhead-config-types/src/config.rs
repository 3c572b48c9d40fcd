//! The resolved configuration as a whole: every bulkhead by name ([`Config`]), one
//! bulkhead ([`BulkheadConfig`]: its kind, limits and options) and the small settings only
//! it holds (saturation thresholds, expectations for lints).
//!
//! These types are what the runtime (`bulkhead-core`) builds bulkheads from. The file
//! format users write (with `templates` and `extends`) resolves into them. The parts live
//! beside this file: `limits.rs` (kind-specific sizes), `rate_limit.rs`, `partitions.rs`,
//! `adaptive.rs`. Defaults are documented on each field and are the same everywhere
//! (DESIGN §4).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    AdaptiveConfig, ClusterLimitConfig, Duration, Limits, Partitions, PerKeyConfig,
    RateLimitConfig, SemaphoreConfig, ThreadPoolConfig,
};

/// Every bulkhead a program declares, by name, after templates are resolved.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The bulkheads, by name.
    #[serde(default)]
    pub bulkheads: BTreeMap<String, BulkheadConfig>,
}

/// The two kinds of bulkhead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Kind {
    /// A concurrency limit: the body runs on the caller's thread or task while it holds a permit.
    Semaphore,
    /// A pool of named worker threads with a bounded queue: the body runs on a worker.
    ThreadPool,
}

impl Kind {
    /// The name used in config files: `semaphore` or `thread-pool`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Semaphore => "semaphore",
            Kind::ThreadPool => "thread-pool",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One bulkhead, fully resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BulkheadConfig {
    /// Kind-specific limits.
    #[serde(flatten)]
    pub limits: Limits,
    /// An optional rate limit checked before admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitConfig>,
    /// How long an admitted call may run before its caller gets `CallTimeout`. An async
    /// body that awaits is dropped at the deadline and its permit or worker freed at once.
    /// A thread-pool body that blocks (a sync one, or an async one that does not yield)
    /// cannot be interrupted: its caller still gets `CallTimeout` at the deadline, the body
    /// keeps its worker until it returns, and its result is discarded (counted). Default:
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// When the snapshot reports `warning` and `critical` saturation.
    #[serde(default)]
    pub saturation: SaturationThresholds,
    /// What the operator expects of the dependency behind it; used only by lints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
    /// An adaptive limit between declared bounds, set from the calls' latency and drops;
    /// `None`: the declared size is the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveConfig>,
    /// Named shares of the limit (`{ live: 0.8, batch: 0.2 }`): each partition is
    /// guaranteed its share and may borrow idle capacity up to the limit (see
    /// [`Partitions`]; of a pool, the limit is what it admits, running plus queued: see
    /// [`shared_limit`](Self::shared_limit)). Empty: one undivided limit.
    #[serde(default, skip_serializing_if = "Partitions::is_empty")]
    pub partitions: Partitions,
    /// A cap on the calls one key (a tenant, a user) may hold at once, with a bounded
    /// number of tracked keys; `None`: keys are not limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_key: Option<PerKeyConfig>,
    /// A semaphore's `max_concurrent_calls` shared by every replica: each running call
    /// holds a lease in Redis (see [`ClusterLimitConfig`]); `None`: the limit is this
    /// process's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterLimitConfig>,
}

impl BulkheadConfig {
    /// A bulkhead with the given kind-specific limits and everything else default: no
    /// rate limit, call timeout, expectations, adaptive limit, partitions, per-key cap or
    /// cluster-wide limit.
    pub fn new(limits: Limits) -> Self {
        BulkheadConfig {
            limits,
            rate_limit: None,
            timeout: None,
            saturation: SaturationThresholds::default(),
            expected: None,
            adaptive: None,
            partitions: Partitions::default(),
            per_key: None,
            cluster: None,
        }
    }

    /// A semaphore bulkhead with the given limits and everything else default.
    pub fn semaphore(config: SemaphoreConfig) -> Self {
        Self::new(Limits::Semaphore(config))
    }

    /// A thread-pool bulkhead with the given limits and everything else default.
    pub fn thread_pool(config: ThreadPoolConfig) -> Self {
        Self::new(Limits::ThreadPool(config))
    }

    /// The declared size: `max_concurrent_calls` of a semaphore, `max_threads` of a pool
    /// (the hard upper bound of an adaptive limit).
    pub fn declared_size(&self) -> u32 {
        match &self.limits {
            Limits::Semaphore(s) => s.max_concurrent_calls,
            Limits::ThreadPool(t) => t.max_threads,
        }
    }

    /// The declared limit that partitions divide: `max_concurrent_calls` of a semaphore;
    /// of a pool, the calls it admits, running plus queued (`max_threads + queue_capacity`).
    ///
    /// ```
    /// use bulkhead::config::{BulkheadConfig, ThreadPoolConfig};
    /// let pool = ThreadPoolConfig { core_threads: 2, max_threads: 2, queue_capacity: 8, ..Default::default() };
    /// assert_eq!(BulkheadConfig::thread_pool(pool).shared_limit(), 10);
    /// ```
    pub fn shared_limit(&self) -> u32 {
        match &self.limits {
            Limits::Semaphore(s) => s.max_concurrent_calls,
            Limits::ThreadPool(t) => t.max_threads.saturating_add(t.queue_capacity),
        }
    }

    /// Which kind this is.
    pub fn kind(&self) -> Kind {
        match self.limits {
            Limits::Semaphore(_) => Kind::Semaphore,
            Limits::ThreadPool(_) => Kind::ThreadPool,
        }
    }
}

/// Fractions of capacity at which the snapshot reports `warning` and `critical`.
/// Saturation is information for dashboards and alerts, never a failed health check.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct SaturationThresholds {
    /// Active calls / limit at which saturation is `warning`. Default 0.8.
    #[cfg_attr(feature = "schema", schemars(range(min = 0.0, max = 1.0)))]
    pub active_warning: f64,
    /// Active calls / limit at which saturation is `critical`. Default 0.95.
    #[cfg_attr(feature = "schema", schemars(range(min = 0.0, max = 1.0)))]
    pub active_critical: f64,
    /// Queued tasks / queue capacity at which saturation is `warning`. Default 0.7.
    #[cfg_attr(feature = "schema", schemars(range(min = 0.0, max = 1.0)))]
    pub queue_warning: f64,
    /// Queued tasks / queue capacity at which saturation is `critical`. Default 0.9.
    #[cfg_attr(feature = "schema", schemars(range(min = 0.0, max = 1.0)))]
    pub queue_critical: f64,
}

impl Default for SaturationThresholds {
    fn default() -> Self {
        SaturationThresholds {
            active_warning: 0.8,
            active_critical: 0.95,
            queue_warning: 0.7,
            queue_critical: 0.9,
        }
    }
}

/// What the operator expects of the dependency behind a bulkhead. Used only by lints,
/// e.g. to warn when the worst-case queue wait exceeds the client's timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// The dependency's usual latency per call.
    pub latency: Duration,
    /// How long the caller's client waits before giving up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_timeout: Option<Duration>,
}

//! The resolved configuration: what a bulkhead *is* once templates are applied.
//!
//! These types are what the runtime (`bulkhead-core`) builds bulkheads from. The file
//! format users write (with `templates` and `extends`) resolves into them.
//! Defaults are documented on each field and are the same everywhere (DESIGN §4).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{AdaptiveConfig, Duration};

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
    /// body is dropped at the deadline and its permit or worker freed at once; a sync
    /// thread-pool body cannot be interrupted, so its caller stops waiting and the worker's
    /// result is discarded (counted). Default: none.
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
    /// [`Partitions`]). Empty: one undivided limit.
    #[serde(default, skip_serializing_if = "Partitions::is_empty")]
    pub partitions: Partitions,
    /// A cap on the calls one key (a tenant, a user) may hold at once, with a bounded
    /// number of tracked keys; `None`: keys are not limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_key: Option<PerKeyConfig>,
}

impl BulkheadConfig {
    /// A semaphore bulkhead with the given limits and everything else default.
    pub fn semaphore(config: SemaphoreConfig) -> Self {
        BulkheadConfig {
            limits: Limits::Semaphore(config),
            rate_limit: None,
            timeout: None,
            saturation: SaturationThresholds::default(),
            expected: None,
            adaptive: None,
            partitions: Partitions::default(),
            per_key: None,
        }
    }

    /// A thread-pool bulkhead with the given limits and everything else default.
    pub fn thread_pool(config: ThreadPoolConfig) -> Self {
        BulkheadConfig {
            limits: Limits::ThreadPool(config),
            rate_limit: None,
            timeout: None,
            saturation: SaturationThresholds::default(),
            expected: None,
            adaptive: None,
            partitions: Partitions::default(),
            per_key: None,
        }
    }

    /// The declared size: `max_concurrent_calls` of a semaphore, `max_threads` of a pool
    /// (the hard upper bound of an adaptive limit).
    pub fn declared_size(&self) -> u32 {
        match &self.limits {
            Limits::Semaphore(s) => s.max_concurrent_calls,
            Limits::ThreadPool(t) => t.max_threads,
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

/// Named shares of a bulkhead's limit: `partitions: { live: 0.8, batch: 0.2 }`.
///
/// Each share is above 0 and at most 1, and the shares add up to at most 1. With the
/// limit in force `L` (declared, resized or adaptive, read at each admission), partition
/// `p` is **guaranteed** `floor(share × L)` slots. The rules, applied at each admission:
///
/// 1. A call of a partition holding (or waiting for) fewer slots than its guarantee is
///    admitted like any call of the bulkhead: at once when a slot is free, otherwise it
///    waits up to `max_wait` in the bulkhead's first-come queue.
/// 2. A call of a partition at or above its guarantee **borrows**: it takes a slot only if
///    one is free at that instant and nobody is waiting; it never waits, and is refused
///    with `Full` otherwise.
/// 3. So only calls below their guarantee wait, and a released slot — borrowed or not —
///    goes to the longest waiter: borrowed capacity is given back at the borrower's next
///    release. The bulkhead's own limit is never exceeded.
///
/// A share that rounds down to no slot guarantees nothing but may still borrow, as do
/// calls that name no partition. What the shares leave over (`1 − sum`) is guaranteed to
/// no one: any partition may borrow it. Partitions need `fair: true`, the default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
#[cfg_attr(
    feature = "schema",
    schemars(extend(
        "additionalProperties" = { "type": "number", "exclusiveMinimum": 0.0, "maximum": 1.0 },
        "propertyNames" = { "pattern": "^[A-Za-z0-9_-]+$" },
        "maxProperties" = 16
    ))
)]
pub struct Partitions {
    /// The share of each partition, by name.
    pub shares: BTreeMap<String, f64>,
}

impl Partitions {
    /// Partitions with the given shares.
    ///
    /// ```
    /// use bulkhead_config_types::Partitions;
    /// let p = Partitions::new([("live", 0.8), ("batch", 0.2)]);
    /// assert_eq!(p.guaranteed("batch", 10), Some(2));
    /// assert_eq!(p.guaranteed("live", 10), Some(8));
    /// assert_eq!(p.guaranteed("other", 10), None);
    /// ```
    pub fn new<'a>(shares: impl IntoIterator<Item = (&'a str, f64)>) -> Self {
        Partitions {
            shares: shares
                .into_iter()
                .map(|(name, share)| (name.to_owned(), share))
                .collect(),
        }
    }

    /// True when the bulkhead is not partitioned.
    pub fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }

    /// The partition names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.shares.keys().map(String::as_str)
    }

    /// The slots `name` is guaranteed under a limit of `limit`: `floor(share × limit)`.
    pub fn guaranteed(&self, name: &str, limit: u32) -> Option<u32> {
        self.shares
            .get(name)
            .map(|share| guaranteed_slots(*share, limit))
    }
}

/// `floor(share × limit)`, for a share in (0, 1]; 0 for anything else.
#[inline]
pub fn guaranteed_slots(share: f64, limit: u32) -> u32 {
    if share.is_finite() && share > 0.0 {
        // At most `limit` (share ≤ 1): the cast cannot overflow.
        (share.min(1.0) * f64::from(limit)).floor() as u32
    } else {
        0
    }
}

/// A cap per key: `per_key: { max_concurrent_calls: 2, max_keys: 10000 }`.
///
/// No key (a tenant, a user, any `Hash + Eq` value the call names) holds more than
/// `max_concurrent_calls` of the bulkhead at once; a call over it is refused with
/// `KeyLimit` before it reaches the bulkhead. At most `max_keys` keys are tracked, each
/// for as long as it has a call in progress (an idle key's entry is removed when its last
/// call ends). While `max_keys` keys are busy, every further key shares one overflow
/// entry, itself capped at `max_concurrent_calls`: memory stays bounded and new keys
/// still get in, but together they get one key's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PerKeyConfig {
    /// The most calls one key may hold at once (at least 1).
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub max_concurrent_calls: u32,
    /// The most keys tracked at once (at least 1). Default 10000.
    #[serde(default = "PerKeyConfig::default_max_keys")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 1_000_000)))]
    pub max_keys: u32,
}

impl PerKeyConfig {
    /// At most `max_concurrent_calls` per key, with the default bound on tracked keys.
    pub fn new(max_concurrent_calls: u32) -> Self {
        PerKeyConfig {
            max_concurrent_calls,
            max_keys: Self::default_max_keys(),
        }
    }

    fn default_max_keys() -> u32 {
        10_000
    }
}

/// The kind-specific part of a bulkhead's config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Limits {
    /// `kind: semaphore`.
    Semaphore(SemaphoreConfig),
    /// `kind: thread-pool`.
    ThreadPool(ThreadPoolConfig),
}

/// Limits of a semaphore bulkhead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct SemaphoreConfig {
    /// How many calls may run at once (at least 1). Default 25.
    pub max_concurrent_calls: u32,
    /// How long a caller waits for a permit before `Timeout`. Default `0ms`: fail fast with `Full`.
    pub max_wait: Duration,
    /// Waiters get permits in arrival order (FIFO). Default true.
    pub fair: bool,
}

impl Default for SemaphoreConfig {
    fn default() -> Self {
        SemaphoreConfig {
            max_concurrent_calls: 25,
            max_wait: Duration::ZERO,
            fair: true,
        }
    }
}

/// Limits of a thread-pool bulkhead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct ThreadPoolConfig {
    /// Threads kept alive even when idle. Default 4.
    pub core_threads: u32,
    /// The most threads the pool runs (at least `core_threads`). Default 4.
    pub max_threads: u32,
    /// How many submitted tasks may wait for a thread; 0 is a direct hand-off. Default 100.
    pub queue_capacity: u32,
    /// How long a thread above `core_threads` stays idle before it retires. Default `60s`.
    pub keep_alive: Duration,
    /// What a submission does when every thread is busy and the queue is full. Default `abort`.
    pub on_full: OnFull,
    /// A task that waited in the queue longer than this fails with `QueueTimeout` and never runs.
    /// Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queue_wait: Option<Duration>,
    /// Worker threads are named `<prefix><n>`. Default: the bulkhead's name followed by `-`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_name_prefix: Option<String>,
    /// The order queued tasks are taken in. Default `fifo`.
    pub queue_order: QueueOrder,
    /// Controlled-delay queue management (off by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codel: Option<CodelConfig>,
}

impl Default for ThreadPoolConfig {
    fn default() -> Self {
        ThreadPoolConfig {
            core_threads: 4,
            max_threads: 4,
            queue_capacity: 100,
            keep_alive: Duration::from_secs(60),
            on_full: OnFull::Abort,
            max_queue_wait: None,
            thread_name_prefix: None,
            queue_order: QueueOrder::Fifo,
            codel: None,
        }
    }
}

/// What a thread-pool submission does when every thread is busy and the queue is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum OnFull {
    /// Refuse at once with `Full`.
    #[default]
    Abort,
    /// Run the task on the caller's thread (back-pressure on the caller).
    CallerRuns,
    /// Wait up to this long for room, then refuse with `Timeout`: `{ wait: 2s }`.
    Wait(Duration),
}

/// The order a thread pool takes queued tasks in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum QueueOrder {
    /// Oldest first.
    #[default]
    Fifo,
    /// Oldest first while the queue drains; newest first while a queue is standing
    /// (Facebook's "Fail at Scale"), so fresh requests are served before stale ones.
    AdaptiveLifo,
}

/// Controlled delay (CoDel) for a thread pool's queue: while the queue has not been empty
/// for `interval`, queued work older than `target` is failed with `QueueTimeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CodelConfig {
    /// The queueing delay tolerated while the queue is standing (Facebook: 5ms).
    pub target: Duration,
    /// How long the queue must stay non-empty before CoDel sheds (Facebook: 100ms).
    pub interval: Duration,
}

/// A rate limit: at most `limit_for_period` admissions per `refresh_period`, counted by
/// this process (`scope: process`, the default) or by every process that shares a store
/// (`scope: cluster`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Admissions allowed in each period (at least 1).
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub limit_for_period: u32,
    /// The period's length, with a unit (Resilience4j's default `500` meant nanoseconds).
    pub refresh_period: Duration,
    /// How long a call may wait for the next period before `RateLimited`. Default `0ms`.
    #[serde(default)]
    pub timeout: Duration,
    /// Who shares the limit: `process` (each process counts its own calls, the default) or
    /// `cluster` (every process using the same `store` and bulkhead name shares one count).
    #[serde(default, skip_serializing_if = "RateLimitScope::is_process")]
    pub scope: RateLimitScope,
    /// Where a `scope: cluster` limit is counted (required with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<RateLimitStore>,
}

impl RateLimitConfig {
    /// A per-process limit of `limit_for_period` calls per `refresh_period`, refusing at
    /// once (`timeout: 0ms`).
    pub fn per_process(limit_for_period: u32, refresh_period: Duration) -> Self {
        RateLimitConfig {
            limit_for_period,
            refresh_period,
            timeout: Duration::ZERO,
            scope: RateLimitScope::Process,
            store: None,
        }
    }

    /// The store of a cluster-wide limit: `Some` only with `scope: cluster`.
    pub fn cluster_store(&self) -> Option<&RateLimitStore> {
        match self.scope {
            RateLimitScope::Cluster => self.store.as_ref(),
            RateLimitScope::Process => None,
        }
    }
}

/// Who shares a rate limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RateLimitScope {
    /// Each process counts its own calls: ten replicas admit ten times the limit.
    #[default]
    Process,
    /// Every process using the same store and bulkhead name shares one count (Redis).
    Cluster,
}

impl RateLimitScope {
    /// True for [`RateLimitScope::Process`].
    pub fn is_process(&self) -> bool {
        *self == RateLimitScope::Process
    }
}

/// The store a `scope: cluster` rate limit is counted in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RateLimitStore {
    /// The Redis server: a URL such as `redis://:password@redis.internal:6379/0`, or
    /// `${NAME}` to read the URL from the environment variable `NAME` when the bulkhead is
    /// built, which keeps passwords out of the file.
    pub redis: String,
    /// Prepended to the bulkhead's name to form the Redis key. Default `bulkhead:rate:`.
    #[serde(default = "RateLimitStore::default_key_prefix")]
    pub key_prefix: String,
    /// How long a decision waits for Redis's answer (connecting included) before it counts
    /// as a store error. Default `50ms`.
    #[serde(default = "RateLimitStore::default_response_timeout")]
    pub response_timeout: Duration,
    /// What a call does when Redis cannot answer: `local` (the default), `allow` or `refuse`.
    #[serde(default)]
    pub on_store_error: OnStoreError,
    /// How many processes share the limit. With `on_store_error: local`, each admits
    /// `limit_for_period / replicas` (rounded up) per period while Redis is unreachable, so
    /// the cluster as a whole stays near the limit. Default 1.
    #[serde(default = "RateLimitStore::default_replicas")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub replicas: u32,
}

impl RateLimitStore {
    /// A store at `redis` (a URL or `${NAME}`) with every other setting default.
    pub fn redis(redis: impl Into<String>) -> Self {
        RateLimitStore {
            redis: redis.into(),
            key_prefix: Self::default_key_prefix(),
            response_timeout: Self::default_response_timeout(),
            on_store_error: OnStoreError::default(),
            replicas: Self::default_replicas(),
        }
    }

    /// The per-process share of `limit_for_period` used by `on_store_error: local`:
    /// `limit_for_period / replicas`, rounded up, at least 1.
    pub fn local_share(&self, limit_for_period: u32) -> u32 {
        limit_for_period.div_ceil(self.replicas.max(1)).max(1)
    }

    /// The environment variable named by `${NAME}` in `redis`, if it is written so.
    pub fn redis_env_var(&self) -> Option<&str> {
        self.redis.strip_prefix("${")?.strip_suffix('}')
    }

    fn default_key_prefix() -> String {
        "bulkhead:rate:".to_owned()
    }

    fn default_response_timeout() -> Duration {
        Duration::from_millis(50)
    }

    fn default_replicas() -> u32 {
        1
    }
}

/// What a `scope: cluster` rate limit does when its store cannot answer in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum OnStoreError {
    /// Count locally: this process admits its share, `limit_for_period / replicas`.
    #[default]
    Local,
    /// Admit the call: availability over the limit.
    Allow,
    /// Refuse the call with `RateLimited`: the limit over availability.
    Refuse,
}

impl OnStoreError {
    /// The name used in config files: `local`, `allow` or `refuse`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnStoreError::Local => "local",
            OnStoreError::Allow => "allow",
            OnStoreError::Refuse => "refuse",
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

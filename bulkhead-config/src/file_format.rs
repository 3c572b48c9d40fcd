//! The file format users write: `templates`, `bulkheads` and `extends`.
//!
//! These serde types are the single source of truth for the format: their doc comments
//! become the descriptions in `bulkheads.schema.json` (editors show them on hover) and the
//! key table in `docs/config-reference.md`; tests fail when either is stale.
//!
//! Every key of a [`BulkheadSpec`] is optional because an entry may inherit it from a
//! template (`extends`, which may chain) or, at run time, from a lower layer. Resolution
//! ([`crate::parse_file`]) copies — a template is never changed by the entries that extend
//! it (Resilience4j's `baseConfig` mutates the shared base; we do not).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    AdaptiveAlgorithm, AdaptiveConfig, ClusterLimitConfig, CodelConfig, Duration, Expected, Kind,
    OnFull, Partitions, PerKeyConfig, QueueOrder, RateLimitConfig, SaturationThresholds,
    SemaphoreConfig, ThreadPoolConfig,
};

/// A `bulkheads.yaml` document: reusable templates and the bulkheads the code uses.
///
/// Start the file with `# yaml-language-server: $schema=bulkheads.schema.json` so editors
/// validate it as you type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "bulkheads.yaml")]
pub struct ConfigFile {
    /// Named, partial bulkheads that entries inherit from with `extends` (a template may
    /// itself extend another). Templates are never used on their own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("propertyNames" = { "$ref": "#/$defs/Name" }))]
    pub templates: BTreeMap<String, BulkheadSpec>,
    /// Every bulkhead, by the name `#[bulkhead("…")]` uses. Names are letters, digits, `-`
    /// and `_`.
    #[serde(default)]
    #[schemars(extend("propertyNames" = { "$ref": "#/$defs/Name" }))]
    pub bulkheads: BTreeMap<String, BulkheadSpec>,
}

/// One bulkhead or template as written. Keys it does not set come from the template it
/// `extends`, then from the defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = kind_specific_keys)]
pub struct BulkheadSpec {
    /// The template this entry starts from; its own keys override the template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Name>")]
    pub extends: Option<String>,
    /// `semaphore` or `thread-pool`. Required here or in the template chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,

    /// Semaphore: how many calls may run at once (at least 1). Default 25.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_concurrent_calls: Option<u32>,
    /// Semaphore: how long a caller waits for a permit before `Timeout`. Default `0ms` (fail fast with `Full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait: Option<Duration>,
    /// Semaphore: waiters get permits in arrival order. Default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair: Option<bool>,

    /// Thread pool: threads kept alive even when idle. Default 4, or `max_threads` if that is smaller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 10_000))]
    pub core_threads: Option<u32>,
    /// Thread pool: the most threads the pool runs (at least 1 and at least `core_threads`). Default `core_threads`, or 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000))]
    pub max_threads: Option<u32>,
    /// Thread pool: how many tasks may wait for a thread; 0 is a direct hand-off. Default 100.
    /// Worst-case wait = queue_capacity × latency / max_threads: keep it under the client's timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1_000_000))]
    pub queue_capacity: Option<u32>,
    /// Thread pool: how long a thread above `core_threads` stays idle before it retires. Default `60s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<Duration>,
    /// Thread pool: what a submission does when every thread is busy and the queue is full:
    /// `abort`, `caller-runs` or `{ wait: <duration> }`. Default `abort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_full: Option<OnFull>,
    /// Thread pool: the longest a call waits in the queue. At this deadline its caller gets
    /// `QueueTimeout` (with the input back) even while every worker is busy, and the task is
    /// taken out of the queue: it never runs. A live change bounds the calls queued after
    /// it; a call already queued keeps the deadline it was queued with (none, if there was
    /// none). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_wait: Option<Duration>,
    /// Thread pool: worker threads are named `<prefix><n>`. Default: the bulkhead's name and `-`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_name_prefix: Option<String>,
    /// Thread pool: `fifo`, or `adaptive-lifo` (newest first while a queue is standing). Default `fifo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_order: Option<QueueOrder>,
    /// Thread pool: controlled delay, `{ target, interval }` (Facebook: 5ms / 100ms). It sheds as a worker takes the next task, so it bounds no caller's wait while every worker is stuck: `max_queue_wait` does. Default: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codel: Option<CodelConfig>,

    /// Any kind: a rate limit checked before admission, `{ limit_for_period, refresh_period, timeout }`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitConfig>,
    /// Any kind: how long an admitted call may run before its caller gets `CallTimeout`. An
    /// async body that awaits is dropped at the deadline and its permit or worker freed at
    /// once. A thread-pool body that blocks (a sync one, or an async one that does not
    /// yield) cannot be cut: its caller still gets `CallTimeout` at the deadline, the body
    /// keeps its worker until it returns, and its result is discarded. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Any kind: fractions of capacity at which the snapshot reports `warning` and `critical`
    /// (80%/95% active, 70%/90% queued). Information, never a failed health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation: Option<SaturationThresholds>,
    /// Any kind: what you expect of the dependency, `{ latency, client_timeout }`; used only
    /// by lints, e.g. to warn when the worst-case queue wait exceeds the client's timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
    /// Any kind: an adaptive limit, `{ algorithm: vegas | gradient2 | aimd | off, min_limit,
    /// max_limit, initial_limit, … }`, set from the calls' latency and drops within the
    /// declared size. Default: none (the declared size is the limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveConfig>,
    /// Any kind: named shares of the limit, `{ live: 0.8, batch: 0.2 }` (each above 0 and at
    /// most 1, summing to at most 1); of a thread pool, the limit is what it admits, running
    /// plus queued (`max_threads + queue_capacity`). A partition is guaranteed
    /// `floor(share × limit)` slots and borrows free ones, never waiting for them;
    /// `#[bulkhead("…", partition = "live")]` picks one, checked at compile time. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Partitions>,
    /// Any kind: at most `max_concurrent_calls` calls per key at once, tracking at most
    /// `max_keys` keys (default 10000; further keys share one overflow entry).
    /// `#[bulkhead("…", key = tenant_id)]` names the key. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_key: Option<PerKeyConfig>,
    /// Semaphore: `max_concurrent_calls` is the limit of every process sharing the store,
    /// `{ store: { redis: "${REDIS_URL}", replicas: 5 }, lease_ttl: 10s }`: each running
    /// call holds a lease in Redis, renewed every `lease_ttl / 3`; a crashed process's
    /// leases expire within `lease_ttl`. `store` takes the keys of a cluster rate limit's
    /// store. Default: none (the limit is each process's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterLimitConfig>,
}

/// A bulkhead or template name: letters, digits, `-` and `_`.
#[derive(JsonSchema)]
#[schemars(
    extend("pattern" = "^[A-Za-z0-9_-]+$"),
    description = "A bulkhead or template name: letters, digits, `-` and `_`."
)]
#[allow(dead_code)] // exists only for its schema
struct Name(String);

/// The keys only a semaphore has, or only a thread pool has: the properties of their
/// resolved types' schemas, and a semaphore's `cluster` (made once per process).
pub(crate) fn kind_keys(kind: Kind) -> &'static [String] {
    fn keys(schema: schemars::Schema) -> Vec<String> {
        schema
            .get("properties")
            .and_then(serde_json::Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }
    static SEMAPHORE: OnceLock<Vec<String>> = OnceLock::new();
    static THREAD_POOL: OnceLock<Vec<String>> = OnceLock::new();
    match kind {
        Kind::Semaphore => SEMAPHORE.get_or_init(|| {
            let mut keys = keys(schemars::schema_for!(SemaphoreConfig));
            keys.push("cluster".to_owned());
            keys
        }),
        Kind::ThreadPool => {
            THREAD_POOL.get_or_init(|| keys(schemars::schema_for!(ThreadPoolConfig)))
        }
        _ => &[],
    }
}

/// Adds to the schema of [`BulkheadSpec`]: an entry that says `kind: semaphore` may not use
/// thread-pool keys, and the other way round.
fn kind_specific_keys(schema: &mut schemars::Schema) {
    let rule = |kind: Kind, other: Kind| {
        let forbidden: serde_json::Map<String, serde_json::Value> = kind_keys(other)
            .iter()
            .map(|k| (k.clone(), serde_json::Value::Bool(false)))
            .collect();
        serde_json::json!({
            "if": { "properties": { "kind": { "const": kind.as_str() } }, "required": ["kind"] },
            "then": { "properties": forbidden }
        })
    };
    schema.insert(
        "allOf".to_owned(),
        serde_json::json!([
            rule(Kind::Semaphore, Kind::ThreadPool),
            rule(Kind::ThreadPool, Kind::Semaphore)
        ]),
    );
}

/// The JSON Schema of the file format (`bulkheads.schema.json`), generated from the types.
///
/// ```
/// let schema = bulkhead_config::json_schema();
/// assert!(schema["properties"]["bulkheads"].is_object());
/// ```
pub fn json_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(ConfigFile);
    schema.insert(
        "$id".to_owned(),
        "https://example.invalid/bulkhead/bulkheads.schema.json".into(),
    );
    schema.to_value()
}

/// The JSON Schema as checked in: pretty-printed, with a trailing newline.
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).unwrap_or_default();
    text.push('\n');
    text
}

impl BulkheadSpec {
    /// Keys of `self` override keys of `base`; nested settings (`rate_limit`, …) are taken
    /// whole from whichever sets them. Neither input is changed.
    pub fn over(&self, base: &BulkheadSpec) -> BulkheadSpec {
        macro_rules! pick {
            ($($field:ident),*) => {
                BulkheadSpec { $($field: self.$field.clone().or_else(|| base.$field.clone()),)* }
            };
        }
        pick!(
            extends,
            kind,
            max_concurrent_calls,
            max_wait,
            fair,
            core_threads,
            max_threads,
            queue_capacity,
            keep_alive,
            on_full,
            max_queue_wait,
            thread_name_prefix,
            queue_order,
            codel,
            rate_limit,
            timeout,
            saturation,
            expected,
            adaptive,
            partitions,
            per_key,
            cluster
        )
    }

    /// The resolved config for `kind`, with defaults for what is not set. Keys of the other
    /// kind are ignored here; validation reports them.
    pub fn resolve(&self, kind: Kind) -> crate::BulkheadConfig {
        let limits = match kind {
            Kind::Semaphore => {
                let d = SemaphoreConfig::default();
                crate::Limits::Semaphore(SemaphoreConfig {
                    max_concurrent_calls: self
                        .max_concurrent_calls
                        .unwrap_or(d.max_concurrent_calls),
                    max_wait: self.max_wait.unwrap_or(d.max_wait),
                    fair: self.fair.unwrap_or(d.fair),
                })
            }
            Kind::ThreadPool => {
                let d = ThreadPoolConfig::default();
                let (core_threads, max_threads) = match (self.core_threads, self.max_threads) {
                    (Some(core), Some(max)) => (core, max),
                    (Some(core), None) => (core, core.max(1)),
                    (None, Some(max)) => (d.core_threads.min(max), max),
                    (None, None) => (d.core_threads, d.max_threads),
                };
                crate::Limits::ThreadPool(ThreadPoolConfig {
                    core_threads,
                    max_threads,
                    queue_capacity: self.queue_capacity.unwrap_or(d.queue_capacity),
                    keep_alive: self.keep_alive.unwrap_or(d.keep_alive),
                    on_full: self.on_full.unwrap_or(d.on_full),
                    max_queue_wait: self.max_queue_wait.or(d.max_queue_wait),
                    thread_name_prefix: self.thread_name_prefix.clone().or(d.thread_name_prefix),
                    queue_order: self.queue_order.unwrap_or(d.queue_order),
                    codel: self.codel.or(d.codel),
                })
            }
            _ => unreachable!("the bulkhead crates are pinned to one release: no other kind"),
        };
        crate::BulkheadConfig {
            limits,
            rate_limit: self.rate_limit.clone(),
            timeout: self.timeout,
            saturation: self.saturation.unwrap_or_default(),
            expected: self.expected,
            adaptive: self
                .adaptive
                .filter(|a| a.algorithm != AdaptiveAlgorithm::Off),
            partitions: self.partitions.clone().unwrap_or_default(),
            per_key: self.per_key,
            cluster: self.cluster.clone(),
        }
    }
}

impl From<&crate::BulkheadConfig> for BulkheadSpec {
    /// Writes a resolved bulkhead back as an entry that sets every key.
    fn from(config: &crate::BulkheadConfig) -> Self {
        let mut spec = BulkheadSpec {
            kind: Some(config.kind()),
            rate_limit: config.rate_limit.clone(),
            timeout: config.timeout,
            saturation: Some(config.saturation),
            expected: config.expected,
            adaptive: config.adaptive,
            partitions: (!config.partitions.is_empty()).then(|| config.partitions.clone()),
            per_key: config.per_key,
            cluster: config.cluster.clone(),
            ..BulkheadSpec::default()
        };
        match &config.limits {
            crate::Limits::Semaphore(s) => {
                spec.max_concurrent_calls = Some(s.max_concurrent_calls);
                spec.max_wait = Some(s.max_wait);
                spec.fair = Some(s.fair);
            }
            crate::Limits::ThreadPool(t) => {
                spec.core_threads = Some(t.core_threads);
                spec.max_threads = Some(t.max_threads);
                spec.queue_capacity = Some(t.queue_capacity);
                spec.keep_alive = Some(t.keep_alive);
                spec.on_full = Some(t.on_full);
                spec.max_queue_wait = t.max_queue_wait;
                spec.thread_name_prefix = t.thread_name_prefix.clone();
                spec.queue_order = Some(t.queue_order);
                spec.codel = t.codel;
            }
            _ => {}
        }
        spec
    }
}

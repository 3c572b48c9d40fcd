//! A semaphore's `max_concurrent_calls` shared by every replica ([`ClusterLimitConfig`]):
//! each running call holds a lease in Redis.

use serde::{Deserialize, Serialize};

use crate::{Duration, RateLimitStore};

/// `cluster:` on a semaphore: its `max_concurrent_calls` is the limit of every process
/// that uses the same store and bulkhead name together, not of each one.
///
/// Each admitted call holds a *lease* in Redis (an id and an expiry) while it runs; a
/// heartbeat renews the process's leases every `lease_ttl / 3`, so the leases of a process
/// that crashed expire within `lease_ttl` and are reclaimed by the next caller. The local
/// semaphore still bounds the process (a process never runs more than
/// `max_concurrent_calls`).
///
/// ```yaml
/// partner-api:
///   kind: semaphore
///   max_concurrent_calls: 50          # for the whole cluster
///   cluster:
///     store: { redis: "${REDIS_URL}", replicas: 5 }
///     lease_ttl: 10s
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ClusterLimitConfig {
    /// The Redis store the leases live in: the same settings as a cluster rate limit's
    /// `store` (`redis`, `key_prefix`, `response_timeout`, `on_store_error`, `replicas`,
    /// `start_anyway`). The leases' key is `key_prefix` + the bulkhead's name + `:leases`.
    /// With `on_store_error: local` a process runs at most `max_concurrent_calls /
    /// replicas` (rounded up) calls while Redis cannot answer.
    pub store: RateLimitStore,
    /// How long a lease lives without being renewed: a crashed process's calls stop
    /// counting at most this long after its last heartbeat (every `lease_ttl / 3`).
    /// Default `10s`; at least `100ms` and 3 × `store.response_timeout`.
    #[serde(default = "ClusterLimitConfig::default_lease_ttl")]
    pub lease_ttl: Duration,
}

impl ClusterLimitConfig {
    /// Leases in the store at `redis` (a URL or `${NAME}`), every other setting default.
    pub fn redis(redis: impl Into<String>) -> Self {
        ClusterLimitConfig {
            store: RateLimitStore::redis(redis),
            lease_ttl: Self::default_lease_ttl(),
        }
    }

    /// The shortest `lease_ttl` accepted.
    pub const MIN_LEASE_TTL: Duration = Duration::from_millis(100);

    fn default_lease_ttl() -> Duration {
        Duration::from_secs(10)
    }
}

//! A registered bulkhead of either kind ([`Bulkhead`]), what shutting one down reports,
//! and the resize a reload applies to it.
//!
//! Invariant: a resize is built only for a config of the bulkhead's own kind
//! ([`Bulkhead::resize_to`] answers `None` otherwise), so applying one never changes a kind.

use std::sync::Arc;
use std::time::Duration;

use bulkhead_config_types::{
    AdaptiveConfig, BulkheadConfig, Kind, Limits, Partitions, PerKeyConfig, RateLimitConfig,
    SemaphoreConfig, ThreadPoolConfig,
};

use crate::BulkheadName;
use crate::clock::Clock;
use crate::semaphore::{SemaphoreBulkhead, SemaphoreShutdown};
use crate::shares::PartitionNamesChanged;
use crate::snapshot::BulkheadSnapshot;
use crate::thread_pool::{ShutdownReport, ThreadPoolBulkhead};

/// A registered bulkhead of either kind. Cloning is cheap and every clone is the same
/// bulkhead.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Bulkhead {
    /// A concurrency limit; the body runs on the caller's thread or task.
    Semaphore(SemaphoreBulkhead),
    /// A bounded pool of named worker threads.
    ThreadPool(ThreadPoolBulkhead),
}

impl Bulkhead {
    /// Builds a bulkhead of the kind `config` declares, on `clock`.
    pub fn from_config(
        name: impl Into<BulkheadName>,
        config: &BulkheadConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let name = name.into();
        match &config.limits {
            Limits::Semaphore(limits) => {
                let b = SemaphoreBulkhead::with_clock(name, limits, clock);
                // A fresh bulkhead takes any partition names.
                let _ = configure(&b, config);
                b.rate_limiter()
                    .set_cluster_limit(limits.max_concurrent_calls, config.cluster.as_ref());
                Bulkhead::Semaphore(b)
            }
            Limits::ThreadPool(limits) => {
                let b = ThreadPoolBulkhead::with_clock(name, limits, clock);
                let _ = configure(&b, config);
                Bulkhead::ThreadPool(b)
            }
            _ => unreachable!("the bulkhead crates are pinned to one release: no other kind"),
        }
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &BulkheadName {
        match self {
            Bulkhead::Semaphore(b) => b.name(),
            Bulkhead::ThreadPool(b) => b.name(),
        }
    }

    /// Semaphore or thread pool.
    pub fn kind(&self) -> Kind {
        match self {
            Bulkhead::Semaphore(_) => Kind::Semaphore,
            Bulkhead::ThreadPool(_) => Kind::ThreadPool,
        }
    }

    /// The semaphore bulkhead, if this is one.
    pub fn as_semaphore(&self) -> Option<&SemaphoreBulkhead> {
        match self {
            Bulkhead::Semaphore(b) => Some(b),
            Bulkhead::ThreadPool(_) => None,
        }
    }

    /// The thread-pool bulkhead, if this is one.
    pub fn as_thread_pool(&self) -> Option<&ThreadPoolBulkhead> {
        match self {
            Bulkhead::ThreadPool(b) => Some(b),
            Bulkhead::Semaphore(_) => None,
        }
    }

    /// A point-in-time view of the bulkhead.
    pub fn snapshot(&self) -> BulkheadSnapshot {
        match self {
            Bulkhead::Semaphore(b) => b.snapshot(),
            Bulkhead::ThreadPool(b) => b.snapshot(),
        }
    }

    /// Counts a refused call answered by a fallback (`bulkhead_fallbacks_total`).
    pub fn record_fallback(&self) {
        match self {
            Bulkhead::Semaphore(b) => b.record_fallback(),
            Bulkhead::ThreadPool(b) => b.record_fallback(),
        }
    }

    /// `config`'s limits paired with this bulkhead, when the kinds match (`None`: a kind
    /// change, which nothing may apply; invariant 2).
    pub(super) fn resize_to<'a>(&'a self, config: &'a BulkheadConfig) -> Option<Resize<'a>> {
        let limits = match (self, &config.limits) {
            (Bulkhead::Semaphore(b), Limits::Semaphore(limits)) => KindLimits::Semaphore(b, limits),
            (Bulkhead::ThreadPool(b), Limits::ThreadPool(limits)) => {
                KindLimits::ThreadPool(b, limits)
            }
            _ => return None,
        };
        Some(Resize { config, limits })
    }

    /// Whether `partitions` keeps the running partition names (a reload may change shares
    /// only).
    pub(super) fn check_partitions(
        &self,
        partitions: &bulkhead_config_types::Partitions,
    ) -> Result<(), crate::shares::PartitionNamesChanged> {
        match self {
            Bulkhead::Semaphore(b) => b.check_partitions(partitions),
            Bulkhead::ThreadPool(b) => b.check_partitions(partitions),
        }
    }

    /// Stops admission and waits at most `timeout` for running work.
    pub fn shutdown(&self, timeout: Duration) -> BulkheadShutdown {
        match self {
            Bulkhead::Semaphore(b) => BulkheadShutdown::Semaphore(b.shutdown(timeout)),
            Bulkhead::ThreadPool(b) => BulkheadShutdown::ThreadPool(b.shutdown(timeout)),
        }
    }

    /// Stops admission without waiting (the first half of [`shutdown`](Self::shutdown)).
    pub(crate) fn stop_admission(&self) {
        match self {
            Bulkhead::Semaphore(b) => b.stop_admission(),
            Bulkhead::ThreadPool(b) => b.shared().begin_shutdown(),
        }
    }
}

/// A resize checked to keep the bulkhead's kind, applied after a whole reload is checked.
pub(super) struct Resize<'a> {
    pub(super) config: &'a BulkheadConfig,
    limits: KindLimits<'a>,
}

enum KindLimits<'a> {
    Semaphore(&'a SemaphoreBulkhead, &'a SemaphoreConfig),
    ThreadPool(&'a ThreadPoolBulkhead, &'a ThreadPoolConfig),
}

impl Resize<'_> {
    pub(super) fn apply(&self) {
        match self.limits {
            KindLimits::Semaphore(b, limits) => {
                b.resize(limits);
                // The names were checked with the whole reload (`check_partitions`).
                let _ = configure(b, self.config);
                b.rate_limiter()
                    .set_cluster_limit(limits.max_concurrent_calls, self.config.cluster.as_ref());
            }
            KindLimits::ThreadPool(b, limits) => {
                b.resize(limits);
                let _ = configure(b, self.config);
            }
        }
    }
}

/// The policies both kinds carry beside their size, each set live from the config.
trait Policies {
    fn telemetry(&self) -> &crate::telemetry::Telemetry;
    fn set_rate_limit(&self, config: Option<&RateLimitConfig>);
    fn set_call_timeout(&self, timeout: Option<Duration>);
    fn set_adaptive(&self, config: Option<&AdaptiveConfig>);
    fn set_partitions(&self, partitions: &Partitions) -> Result<(), PartitionNamesChanged>;
    fn set_per_key(&self, config: Option<&PerKeyConfig>);
}

/// The one place a bulkhead's policies follow its config: when it is built, on every
/// reload (after its resize, the partition names checked with the whole reload first) and
/// through the kinds' public `configure`. The partitions go first: their names are all
/// that can be refused, and a refused set changes nothing, so neither does the config.
fn configure(b: &impl Policies, config: &BulkheadConfig) -> Result<(), PartitionNamesChanged> {
    b.set_partitions(&config.partitions)?;
    b.telemetry().set_saturation(config.saturation);
    b.set_rate_limit(config.rate_limit.as_ref());
    b.set_call_timeout(config.timeout.map(|t| t.as_std()));
    b.set_adaptive(config.adaptive.as_ref());
    b.set_per_key(config.per_key.as_ref());
    Ok(())
}

/// The same inherent methods on either kind (each its own type), and its public
/// `configure`.
macro_rules! policies_of {
    ($kind:ty, $example:literal) => {
        impl Policies for $kind {
            fn telemetry(&self) -> &crate::telemetry::Telemetry {
                <$kind>::telemetry(self)
            }
            fn set_rate_limit(&self, config: Option<&RateLimitConfig>) {
                <$kind>::set_rate_limit(self, config);
            }
            fn set_call_timeout(&self, timeout: Option<Duration>) {
                <$kind>::set_call_timeout(self, timeout);
            }
            fn set_adaptive(&self, config: Option<&AdaptiveConfig>) {
                <$kind>::set_adaptive(self, config);
            }
            fn set_partitions(&self, partitions: &Partitions) -> Result<(), PartitionNamesChanged> {
                <$kind>::set_partitions(self, partitions)
            }
            fn set_per_key(&self, config: Option<&PerKeyConfig>) {
                <$kind>::set_per_key(self, config);
            }
        }

        impl $kind {
            /// Sets the bulkhead's policies from `config`, live, as a reload does: its call
            /// `timeout`, `rate_limit`, `adaptive` limit, `partitions`, `per_key` cap and
            /// `saturation` thresholds, each to what `config` says (a policy `config` leaves
            /// out is removed). Its size is [`resize`](Self::resize)'s: `config.limits` is
            /// not read here. A change applies to calls admitted after it; none cancels an
            /// admitted call. A bulkhead declared in `bulkheads.yaml` gets all of this from
            /// the registry; this is for bulkheads built in code. `config` is taken as
            /// given, not checked against the ranges a file or the registry accepts (a
            /// `per_key` cap of 0 refuses every keyed call): check it first with
            /// [`BulkheadConfig::validate`], as the registry does.
            ///
            /// ```
            #[doc = $example]
            /// ```
            ///
            /// # Errors
            ///
            /// [`PartitionNamesChanged`] when `config` names other partitions than the
            /// running ones (the first non-empty set fixes the names; later ones may change
            /// the shares only); nothing is changed then.
            pub fn configure(&self, config: &BulkheadConfig) -> Result<(), PartitionNamesChanged> {
                configure(self, config)
            }
        }
    };
}
policies_of!(
    SemaphoreBulkhead,
    r#"use bulkhead::config::{BulkheadConfig, Duration, RateLimitConfig, SemaphoreConfig};
use bulkhead::{BulkheadError, SemaphoreBulkhead};

let limits = SemaphoreConfig::default();
let search = SemaphoreBulkhead::new("search", &limits);
search.configure(&BulkheadConfig {
    rate_limit: Some(RateLimitConfig::per_process(1, Duration::from_secs(60))),
    ..BulkheadConfig::semaphore(limits)
})?;
assert_eq!(search.call(|| "first"), Ok("first"));
let err = search.call(|| "second").unwrap_err();
assert!(matches!(err, BulkheadError::RateLimited { .. }));
# Ok::<(), bulkhead::PartitionNamesChanged>(())"#
);
policies_of!(
    ThreadPoolBulkhead,
    r#"use bulkhead::config::{AdaptiveAlgorithm, AdaptiveConfig, BulkheadConfig, ThreadPoolConfig};
use bulkhead::ThreadPoolBulkhead;

let limits = ThreadPoolConfig { core_threads: 2, max_threads: 16, ..ThreadPoolConfig::default() };
let images = ThreadPoolBulkhead::new("images", &limits);
images.configure(&BulkheadConfig {
    adaptive: Some(AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, 4, 16)),
    ..BulkheadConfig::thread_pool(limits)
})?;
assert_eq!(images.snapshot().limit, 4);
assert_eq!(images.call(1, |n| n + 1).unwrap(), 2);
# images.shutdown(std::time::Duration::from_secs(5));
# Ok::<(), bulkhead::PartitionNamesChanged>(())"#
);

/// What shutting down one bulkhead did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "kind", rename_all = "kebab-case"))]
#[non_exhaustive]
pub enum BulkheadShutdown {
    /// A semaphore bulkhead's report.
    Semaphore(SemaphoreShutdown),
    /// A thread-pool bulkhead's report.
    ThreadPool(ShutdownReport),
}

impl BulkheadShutdown {
    /// Calls still running when the timeout passed (0: everything finished).
    pub fn still_running(&self) -> u32 {
        match self {
            BulkheadShutdown::Semaphore(r) => r.still_running,
            BulkheadShutdown::ThreadPool(r) => r.still_running,
        }
    }
}

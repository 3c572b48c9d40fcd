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
                configure(&b, config);
                b.rate_limiter()
                    .set_cluster_limit(limits.max_concurrent_calls, config.cluster.as_ref());
                Bulkhead::Semaphore(b)
            }
            Limits::ThreadPool(limits) => {
                let b = ThreadPoolBulkhead::with_clock(name, limits, clock);
                configure(&b, config);
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
                configure(b, self.config);
                b.rate_limiter()
                    .set_cluster_limit(limits.max_concurrent_calls, self.config.cluster.as_ref());
            }
            KindLimits::ThreadPool(b, limits) => {
                b.resize(limits);
                configure(b, self.config);
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

/// The one place a bulkhead's policies follow its config: when it is built and on every
/// reload (after its resize). The partition names are fixed by the first set and checked
/// with the whole reload (`check_partitions`) before anything is applied, so setting them
/// here cannot fail.
fn configure(b: &impl Policies, config: &BulkheadConfig) {
    b.telemetry().set_saturation(config.saturation);
    b.set_rate_limit(config.rate_limit.as_ref());
    b.set_call_timeout(config.timeout.map(|t| t.as_std()));
    b.set_adaptive(config.adaptive.as_ref());
    let _ = b.set_partitions(&config.partitions);
    b.set_per_key(config.per_key.as_ref());
}

/// The same inherent methods on either kind (each its own type).
macro_rules! policies_of {
    ($kind:ty) => {
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
    };
}
policies_of!(SemaphoreBulkhead);
policies_of!(ThreadPoolBulkhead);

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

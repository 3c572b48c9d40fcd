//! The rate limiter a bulkhead checks before admission: at most `limit_for_period` calls
//! per `refresh_period`, with an optional bounded wait for the next period.
//!
//! Resilience4j's `AtomicRateLimiter` semantics, on a [`Clock`]: time is cut into
//! cycles of `refresh_period` counted from the limiter's creation; each cycle refills the
//! permissions to `limit_for_period` (unused ones do not accumulate). A caller that finds
//! none may *reserve* one of a coming cycle if it would get it within its `timeout`, and
//! then waits until that cycle starts; otherwise it is refused with
//! [`BulkheadError::RateLimited`], whose `retry_after` is computed from the limiter's state:
//! the time until a permission would be free.
//!
//! # Invariants
//!
//! 1. The cycle and the permissions left in it live in one atomic word, changed only by
//!    compare-and-swap: however many threads race, a cycle admits at most
//!    `limit_for_period` calls (reservations of later cycles count against those cycles).
//! 2. A refusal reserves nothing and writes nothing.
//! 3. A reload takes effect at once: the permissions of the current cycle move by the
//!    change of `limit_for_period` (never above the new limit); a new `refresh_period`
//!    starts a new cycle.
//!
//! 4. A reservation whose waiter goes away before its period starts (a dropped async
//!    caller) is given back ([`RateLimiter::give_back`]): the next caller can have it.
//!    Resilience4j keeps it, so a burst of client time-outs used to spend a later period.
//!
//! 5. With `scope: cluster` (feature `redis`), the count lives in Redis
//!    (`rate_limit/cluster.rs`): one atomic script per decision runs this same algorithm on
//!    Redis's clock for every process at once. The local state then holds the
//!    `on_store_error: local` share (`limit_for_period / replicas`), used while Redis
//!    cannot answer, and its cycles are aligned to the Unix epoch (as Redis's are), so a
//!    period is the same period in every process and in Redis.
//!
//! 6. Transitions are counted both ways, so that a period in which Redis fails or returns
//!    stays near the limit: every answer from Redis charges the local share (one
//!    permission per admission, and never more than this process's part of what Redis
//!    says is left, `left / replicas` rounded up); every call admitted on the local share
//!    is reported to Redis with the next request, which subtracts it from the period.
//!    In a period in which this process admitted calls on its own, a Redis admission also
//!    takes a local permission first (given back if Redis refuses), so the process's
//!    total for that period stays within its share whichever way each call was decided.
//!    So does every period for a while after Redis answers again (`RETURN_WINDOW` in
//!    `rate_limit/cluster.rs`): the other processes may still be backing off and deciding
//!    on their shares, and Redis, knowing nothing of their calls yet, would otherwise
//!    give the whole limit to the processes back.
//!
//! Known limit: the cycle number is kept modulo 2³², so a limiter idle for 2³² periods
//! (50 days at 1 ms) may refill one cycle late.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bulkhead_config_types::{OnStoreError, RateLimitConfig};
use parking_lot::{Mutex, RwLock};

use crate::clock::{Clock, duration_nanos, system_clock};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64};
use crate::{BulkheadError, BulkheadName};

mod client;
mod cluster;
mod leases;
mod state;

pub(crate) use leases::Lease;
pub use leases::LeaseSnapshot;

use cluster::{ClusterStore, Decision, Report};
use state::{pack, unpack};

/// What the rate limiter says to one caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateAdmission {
    /// A permission was taken from the current period: go on.
    Admitted,
    /// A permission of a coming period was reserved: wait until this instant (by the
    /// limiter's clock), then go on.
    WaitUntil(Instant),
    /// No permission within the caller's timeout; nothing was reserved.
    Refused {
        /// How long until a permission would be free.
        retry_after: Duration,
    },
}

/// An atomic rate limiter, shared by every caller of one bulkhead (of either kind).
///
/// A limiter without a config ([`RateLimiter::disabled`]) admits everything at the cost of
/// one relaxed load, so bulkheads always carry one and reloads can switch it on and off.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use bulkhead::config::{Duration as ConfigDuration, RateLimitConfig};
/// use bulkhead_core::{ManualClock, RateAdmission, RateLimiter, retry_after_header_secs};
///
/// let clock = ManualClock::new();
/// let config = RateLimitConfig::per_process(2, ConfigDuration::from_secs(1));
/// let limiter = RateLimiter::new(Some(&config), Arc::new(clock.clone()));
/// assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
/// assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
/// clock.advance(Duration::from_millis(300));
/// let RateAdmission::Refused { retry_after } = limiter.reserve(Duration::ZERO) else {
///     unreachable!("two per second")
/// };
/// assert_eq!(retry_after, Duration::from_millis(700));
/// assert_eq!(retry_after_header_secs(retry_after), 1); // `Retry-After: 1`
/// ```
pub struct RateLimiter {
    /// `(cycle as u32) << 32 | (permissions as i32 as u32)`.
    state: AtomicU64,
    /// `limit_for_period`; 0 = no rate limit.
    limit: AtomicU32,
    /// `refresh_period` in nanoseconds (at least 1).
    period_nanos: AtomicU64,
    /// `timeout` in nanoseconds.
    timeout_nanos: AtomicU64,
    /// Serialises reconfiguration.
    reconfiguring: Mutex<()>,
    origin: Instant,
    clock: Arc<dyn Clock>,
    /// The bulkhead's name: a cluster-wide limit's key in its store (after `key_prefix`).
    name: BulkheadName,
    /// True while `cluster` holds a cluster-wide limit (read before taking the lock).
    clustered: AtomicBool,
    /// The cluster-wide limit, with `scope: cluster`.
    cluster: RwLock<Option<Arc<Cluster>>>,
    /// Decisions the cluster store could not make, since the limiter was built.
    store_errors: AtomicU64,
    /// Added to the nanoseconds since `origin` to number cycles: the Unix time of `origin`
    /// for a cluster-wide limit (cycles aligned to the epoch, as Redis's), else 0.
    epoch_nanos: AtomicU64,
    /// The cycle (plus one; 0: none) of the latest call admitted on the local share while
    /// the store could not answer: in that cycle, store admissions take a local permission.
    fallback_cycle: AtomicU64,
    /// Calls admitted on the local share not yet reported to the store.
    unreported: Mutex<Report>,
    /// A semaphore's `max_concurrent_calls` shared by the cluster (`cluster:`): a lease
    /// per running call (`rate_limit/leases.rs`). Kept here because this is the gate every
    /// admission already asks: with either limit, [`is_enabled`](Self::is_enabled) sends
    /// the bulkhead's calls down the path that asks it.
    leases: leases::Leases,
    /// True with a rate limit or leases: what [`is_enabled`](Self::is_enabled) reads.
    gated: AtomicBool,
}

/// A `scope: cluster` limit: the global `limit_for_period` and where it is counted.
struct Cluster {
    store: Arc<ClusterStore>,
    limit: u32,
    period: Duration,
    on_error: OnStoreError,
    replicas: u32,
}

impl RateLimiter {
    /// A limiter with `config` (`None`: no rate limit) on `clock`. A `scope: cluster`
    /// limit built this way has the empty name: its store key is the `key_prefix` alone
    /// (bulkheads use [`for_bulkhead`](Self::for_bulkhead)).
    pub fn new(config: Option<&RateLimitConfig>, clock: Arc<dyn Clock>) -> Self {
        RateLimiter::for_bulkhead(BulkheadName::new(""), config, clock)
    }

    /// The limiter of bulkhead `name`: a `scope: cluster` limit is counted under
    /// `key_prefix` + `name` in its store, shared with every process that uses the same
    /// store and name.
    pub fn for_bulkhead(
        name: BulkheadName,
        config: Option<&RateLimitConfig>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let limiter = RateLimiter {
            state: AtomicU64::new(0),
            limit: AtomicU32::new(0),
            period_nanos: AtomicU64::new(1),
            timeout_nanos: AtomicU64::new(0),
            reconfiguring: Mutex::new(()),
            origin: clock.now(),
            clock,
            name,
            clustered: AtomicBool::new(false),
            cluster: RwLock::new(None),
            store_errors: AtomicU64::new(0),
            epoch_nanos: AtomicU64::new(0),
            fallback_cycle: AtomicU64::new(0),
            unreported: Mutex::new(Report::default()),
            leases: leases::Leases::disabled(),
            gated: AtomicBool::new(false),
        };
        limiter.reconfigure(config);
        limiter
    }

    /// A limiter that admits everything, on the system clock.
    pub fn disabled() -> Self {
        RateLimiter::new(None, system_clock())
    }

    /// True when a rate limit is configured, or a cluster-wide concurrency limit (a
    /// semaphore's `cluster:`, whose leases this gate also takes): the bulkhead's calls
    /// then take the path that asks it.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.gated.load(Relaxed)
    }

    /// True when a rate limit is configured.
    fn is_limited(&self) -> bool {
        self.limit.load(Relaxed) != 0
    }

    fn update_gate(&self) {
        self.gated
            .store(self.is_limited() || self.leases.is_enabled(), Release);
    }

    /// Applies a semaphore's cluster-wide concurrency limit of `limit` calls (`None`:
    /// none), as [`reconfigure`](Self::reconfigure) applies a rate limit.
    pub(crate) fn set_cluster_limit(
        &self,
        limit: u32,
        config: Option<&bulkhead_config_types::ClusterLimitConfig>,
    ) {
        let _serialised = self.reconfiguring.lock();
        self.leases
            .reconfigure(&self.name, limit, config, &self.clock);
        self.update_gate();
    }

    /// True when the bulkhead has a cluster-wide concurrency limit (`cluster:`), whose
    /// leases [`begin_call`](Self::begin_call) takes.
    #[inline]
    pub(crate) fn has_leases(&self) -> bool {
        self.leases.is_enabled()
    }

    /// A call admitted by the semaphore's count takes its cluster lease (`None` without
    /// a cluster-wide concurrency limit); its permit keeps the lease for
    /// [`end_call`](Self::end_call).
    ///
    /// # Errors
    ///
    /// [`BulkheadError::Full`] when the cluster has no lease free, or Redis could not
    /// answer and `on_store_error` refuses.
    pub(crate) fn begin_call(&self) -> Result<Option<Lease>, BulkheadError> {
        self.leases.begin(&self.name)
    }

    /// A call that [`begin_call`](Self::begin_call) gave `lease` gave its permit back: the
    /// lease goes back to the set it came from, even if a reload has replaced it since.
    pub(crate) fn end_call(&self, lease: Lease) {
        self.leases.end(lease);
    }

    /// The cluster-wide concurrency limit's leases, if the bulkhead has one.
    pub fn leases(&self) -> Option<LeaseSnapshot> {
        self.leases.snapshot()
    }

    /// The configured `timeout`: how long a caller may wait for a coming period.
    pub fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_nanos.load(Relaxed))
    }

    /// The current `limit_for_period` (0 without a rate limit); for a cluster-wide limit,
    /// the limit of the whole cluster.
    pub fn limit_for_period(&self) -> u32 {
        match self.cluster() {
            Some(cluster) => cluster.limit,
            None => self.limit.load(Relaxed),
        }
    }

    /// True when the limit is shared through a store (`scope: cluster`).
    pub fn is_cluster_wide(&self) -> bool {
        self.clustered.load(Relaxed)
    }

    /// With a cluster-wide limit, how many decisions its store could not make (Redis
    /// down, too slow, or backing off before reconnecting; each then followed
    /// `on_store_error`), since the limiter was built; `None` for a per-process limit.
    pub fn store_errors(&self) -> Option<u64> {
        self.is_cluster_wide()
            .then(|| self.store_errors.load(Relaxed))
    }

    /// With a cluster-wide rate limit or concurrency limit (`cluster:`), asks each store
    /// once (within its `response_timeout`) whether it can count the limit: the URL is
    /// usable, Redis answers, and the limit's key is free or its own. `None` with neither. Decisions never depend on it: a
    /// readiness probe or a start-up check calls it (see [`check_cluster_stores`]).
    ///
    /// # Errors
    ///
    /// What is wrong, as a sentence with the fix when there is one (never a password).
    pub fn check_store(&self) -> Option<Result<(), String>> {
        let rate = self.cluster().map(|cluster| cluster.store.check());
        match (rate, self.leases.check_store()) {
            (Some(Err(rate)), Some(Err(leases))) if rate != leases => {
                Some(Err(format!("{rate}; and for the leases: {leases}")))
            }
            (Some(Err(why)), _) | (_, Some(Err(why))) => Some(Err(why)),
            (rate, leases) => rate.or(leases),
        }
    }

    /// The current `refresh_period` (`None` without a rate limit).
    pub fn refresh_period(&self) -> Option<Duration> {
        self.is_limited()
            .then(|| Duration::from_nanos(self.period_nanos.load(Relaxed)))
    }

    /// Permissions left in the current period (negative: reserved by waiting callers). For
    /// a cluster-wide limit, those of this process's `on_store_error: local` share.
    pub fn available_permissions(&self) -> i64 {
        if !self.is_limited() {
            return i64::MAX;
        }
        let now = self.elapsed_nanos();
        self.refreshed(self.state.load(Acquire), now).1
    }

    /// Applies a new rate limit live (`None` switches it off). Never blocks callers. A
    /// cluster-wide limit keeps its store (and connections) unless the store's settings
    /// changed.
    pub fn reconfigure(&self, config: Option<&RateLimitConfig>) {
        let _serialised = self.reconfiguring.lock();
        let Some(config) = config.filter(|c| c.limit_for_period > 0) else {
            self.set_cluster(None);
            self.limit.store(0, Release);
            self.update_gate();
            return;
        };
        let mut local_limit = config.limit_for_period;
        let cluster = config.cluster_store().map(|store| {
            local_limit = store.local_share(config.limit_for_period);
            let kept = self.cluster().map(|c| Arc::clone(&c.store));
            Arc::new(Cluster {
                store: kept
                    .filter(|kept| kept.config() == store)
                    .unwrap_or_else(|| Arc::new(ClusterStore::new(&self.name, store))),
                limit: config.limit_for_period,
                period: config.refresh_period.as_std().max(Duration::from_micros(1)),
                on_error: store.on_store_error,
                replicas: store.replicas.max(1),
            })
        });
        // A cluster-wide limit numbers its cycles from the Unix epoch; a per-process one from
        // its creation. A switch between the two starts a fresh cycle.
        let old_epoch = self.epoch_nanos.load(Acquire);
        let new_epoch = match (&cluster, old_epoch) {
            (None, _) => 0,
            (Some(_), 0) => {
                let unix = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, duration_nanos);
                unix.saturating_sub(self.nanos_since_origin(self.clock.now()))
                    .max(1)
            }
            (Some(_), kept) => kept,
        };
        let rebased = new_epoch != old_epoch;
        self.epoch_nanos.store(new_epoch, Release);
        self.set_cluster(cluster);
        let new_limit = local_limit.min(i32::MAX as u32);
        let new_period = duration_nanos(config.refresh_period.as_std()).max(1);
        self.timeout_nanos
            .store(duration_nanos(config.timeout.as_std()), Relaxed);
        let old_limit = self.limit.load(Acquire);
        let old_period = self.period_nanos.load(Acquire);
        let mut prev = self.state.load(Acquire);
        loop {
            let now = self.elapsed_nanos();
            let permissions = if old_limit == 0 || old_period != new_period || rebased {
                // Switched on, or a new period length: start a fresh cycle now, keeping any
                // debt of reservations already promised.
                let left = if old_limit == 0 {
                    i64::from(new_limit)
                } else {
                    self.refreshed(prev, now).1
                };
                left.min(i64::from(new_limit))
            } else {
                let left = self.refreshed(prev, now).1;
                (left + i64::from(new_limit) - i64::from(old_limit)).min(i64::from(new_limit))
            };
            let next = pack(now / new_period, permissions);
            match self.state.compare_exchange(prev, next, AcqRel, Acquire) {
                Ok(_) => break,
                Err(actual) => prev = actual,
            }
        }
        self.period_nanos.store(new_period, Release);
        self.limit.store(new_limit, Release);
        self.update_gate();
    }

    fn cluster(&self) -> Option<Arc<Cluster>> {
        if !self.clustered.load(Acquire) {
            return None;
        }
        self.cluster.read().clone()
    }

    fn set_cluster(&self, cluster: Option<Arc<Cluster>>) {
        self.clustered.store(cluster.is_some(), Release);
        *self.cluster.write() = cluster;
    }

    /// Takes a permission now, or reserves one of a coming period if it would be free
    /// within `timeout`, or refuses (reserving nothing).
    ///
    /// A cluster-wide limit asks its store (one exchange, at most `response_timeout` of
    /// wall-clock time; the calling thread blocks for it, async callers included); when the
    /// store cannot answer, `on_store_error` decides: this process's share (`local`), admit
    /// (`allow`) or refuse with `retry_after` = one period (`refuse`).
    pub fn reserve(&self, timeout: Duration) -> RateAdmission {
        if self.limit.load(Acquire) == 0 {
            return RateAdmission::Admitted;
        }
        match self.cluster() {
            Some(cluster) => self.reserve_clustered(&cluster, timeout),
            None => self.reserve_local(timeout),
        }
    }

    /// [`reserve`](Self::reserve) of a cluster-wide limit (invariants 5 and 6).
    fn reserve_clustered(&self, cluster: &Cluster, timeout: Duration) -> RateAdmission {
        let now = || self.clock.now();
        let cycle = self.elapsed_nanos() / self.period_nanos.load(Acquire).max(1);
        // A period this process already counted on its own, or one soon after Redis came
        // back (others may still be deciding on their shares): its share bounds it.
        let local = cluster.on_error == OnStoreError::Local;
        let shared_period = self.fallback_cycle.load(Acquire) == cycle + 1
            || (local && cluster.store.transition(now()).1);
        if shared_period
            && let refused @ RateAdmission::Refused { .. } = self.reserve_local(Duration::ZERO)
        {
            return refused;
        }
        let report = self.take_report(cycle);
        match cluster
            .store
            .reserve(cluster.limit, cluster.period, timeout, report, &now)
        {
            Ok(decision) => {
                let admitted = !matches!(decision.admission, RateAdmission::Refused { .. });
                if !shared_period && local && decision.returned && admitted {
                    // The first answer after a failure opens the return window: this
                    // admission takes a local permission too (Redis's is left unused).
                    if let refused @ RateAdmission::Refused { .. } =
                        self.reserve_local(Duration::ZERO)
                    {
                        return refused;
                    }
                } else if !shared_period {
                    self.charge_local(decision, cluster.replicas);
                } else if matches!(decision.admission, RateAdmission::Refused { .. }) {
                    self.refund_local(cycle);
                }
                decision.admission
            }
            Err(error) => {
                self.restore_report(report);
                self.store_errors.fetch_add(1, Relaxed);
                cluster.store.log_error(&self.name, &error, now());
                match cluster.on_error {
                    OnStoreError::Allow => RateAdmission::Admitted,
                    OnStoreError::Refuse => {
                        if shared_period {
                            self.refund_local(cycle);
                        }
                        RateAdmission::Refused {
                            retry_after: cluster.period,
                        }
                    }
                    // `local`, the default (the crates are pinned to one release).
                    _ => {
                        let admission = if shared_period {
                            RateAdmission::Admitted
                        } else {
                            self.reserve_local(timeout)
                        };
                        self.record_local(admission, cycle);
                        admission
                    }
                }
            }
        }
    }

    /// Charges the local share with a store's `decision`: one permission for an admission,
    /// and at most this process's part of what the store has left.
    fn charge_local(&self, decision: Decision, replicas: u32) {
        let admitted = i64::from(!matches!(decision.admission, RateAdmission::Refused { .. }));
        let cap = decision
            .left
            .max(0)
            .unsigned_abs()
            .div_ceil(u64::from(replicas)) as i64;
        // Never into debt: negative permissions are reservations of coming periods.
        self.update_local(|permissions| (permissions - admitted).min(cap).max(permissions.min(0)));
    }

    /// Gives back a local permission taken in `cycle` for a call the store refused.
    fn refund_local(&self, cycle: u64) {
        let limit = i64::from(self.limit.load(Acquire));
        let period = self.period_nanos.load(Acquire).max(1);
        if self.elapsed_nanos() / period == cycle {
            self.update_local(|permissions| (permissions + 1).min(limit));
        }
    }

    /// Applies `change` to the current cycle's local permissions.
    fn update_local(&self, change: impl Fn(i64) -> i64) {
        let mut prev = self.state.load(Acquire);
        loop {
            let (cycle, permissions) = self.refreshed(prev, self.elapsed_nanos());
            let next = pack(cycle, change(permissions));
            match self
                .state
                .compare_exchange_weak(prev, next, AcqRel, Acquire)
            {
                Ok(_) => return,
                Err(actual) => prev = actual,
            }
        }
    }

    /// Notes a call admitted on the local share while the store could not answer: its
    /// cycle becomes one where store admissions take a local permission, and its count
    /// is reported to the store with the next request.
    fn record_local(&self, admission: RateAdmission, now_cycle: u64) {
        let cycle = match admission {
            RateAdmission::Admitted => now_cycle,
            RateAdmission::WaitUntil(at) => {
                self.nanos_since_origin(at) / self.period_nanos.load(Acquire).max(1)
            }
            RateAdmission::Refused { .. } => return,
        };
        self.fallback_cycle.fetch_max(cycle + 1, AcqRel);
        let mut report = self.unreported.lock();
        if report.cycle == cycle {
            report.count = report.count.saturating_add(1);
        } else if report.cycle < cycle || report.count == 0 {
            *report = Report { cycle, count: 1 };
        }
    }

    /// The unreported count of `cycle`, taken (a count of a past cycle is dropped).
    fn take_report(&self, cycle: u64) -> Report {
        let mut report = self.unreported.lock();
        if report.cycle == cycle {
            std::mem::take(&mut *report)
        } else {
            if report.cycle < cycle {
                *report = Report::default();
            }
            Report { cycle, count: 0 }
        }
    }

    /// Puts back a report whose request failed.
    fn restore_report(&self, taken: Report) {
        if taken.count == 0 {
            return;
        }
        let mut report = self.unreported.lock();
        if report.cycle == taken.cycle {
            report.count = report.count.saturating_add(taken.count);
        } else if report.cycle < taken.cycle || report.count == 0 {
            *report = taken;
        }
    }

    /// [`reserve`](Self::reserve) against this process's own count.
    fn reserve_local(&self, timeout: Duration) -> RateAdmission {
        let limit = i64::from(self.limit.load(Acquire));
        if limit == 0 {
            return RateAdmission::Admitted;
        }
        let period = self.period_nanos.load(Acquire);
        let timeout = duration_nanos(timeout);
        let mut prev = self.state.load(Acquire);
        loop {
            let now = self.elapsed_nanos();
            let (cycle, permissions) = self.refreshed(prev, now);
            let wait = if permissions >= 1 {
                0
            } else {
                // Cycles until a permission is left over for us, the first one partial.
                let to_next_cycle = (cycle + 1) * period - now;
                let cycles = (1 - permissions + limit - 1) / limit;
                to_next_cycle.saturating_add((cycles as u64 - 1).saturating_mul(period))
            };
            if wait > timeout {
                return RateAdmission::Refused {
                    retry_after: Duration::from_nanos(wait),
                };
            }
            match self.state.compare_exchange_weak(
                prev,
                pack(cycle, permissions - 1),
                AcqRel,
                Acquire,
            ) {
                Ok(_) if wait == 0 => return RateAdmission::Admitted,
                Ok(_) => {
                    return RateAdmission::WaitUntil(self.instant_at(now.saturating_add(wait)));
                }
                Err(actual) => prev = actual,
            }
        }
    }

    /// Gives back a permission reserved with [`RateAdmission::WaitUntil`]`(reserved_for)`
    /// whose caller no longer waits for it. Nothing happens once its period has started
    /// (the permission counts as spent then), so a caller may call this whenever it gives
    /// up. Never raises the permissions above `limit_for_period`. A cluster-wide limit
    /// keeps the reservation counted in its store (giving it back would cost a round trip
    /// on the path of a dropped future).
    pub fn give_back(&self, reserved_for: Instant) {
        if self.is_cluster_wide() {
            return;
        }
        let mut prev = self.state.load(Acquire);
        loop {
            let limit = i64::from(self.limit.load(Acquire));
            let now = self.clock.now();
            if limit == 0 || now >= reserved_for {
                return;
            }
            let (cycle, permissions) = self.refreshed(prev, self.nanos_since_origin(now));
            let back = pack(cycle, permissions.saturating_add(1).min(limit));
            match self
                .state
                .compare_exchange_weak(prev, back, AcqRel, Acquire)
            {
                Ok(_) => return,
                Err(actual) => prev = actual,
            }
        }
    }

    /// Takes a permission for a call to bulkhead `name`, blocking the thread (through the
    /// clock) for a reserved one if the configured `timeout` allows.
    ///
    /// # Errors
    ///
    /// [`BulkheadError::RateLimited`] naming `name`, with when to retry, when no permission
    /// comes within the `timeout`.
    pub fn acquire_blocking(&self, name: &BulkheadName) -> Result<(), BulkheadError> {
        if !self.is_limited() {
            return Ok(());
        }
        match self.reserve(self.timeout()) {
            RateAdmission::Admitted => Ok(()),
            RateAdmission::WaitUntil(deadline) => {
                while self.clock.now() < deadline {
                    self.clock.park_until(deadline);
                }
                Ok(())
            }
            RateAdmission::Refused { retry_after } => Err(BulkheadError::RateLimited {
                name: name.clone(),
                retry_after,
            }),
        }
    }

    /// Like [`acquire_blocking`](Self::acquire_blocking) but never waits: a permission of
    /// the current period or a refusal.
    ///
    /// # Errors
    ///
    /// [`BulkheadError::RateLimited`] naming `name`, with when to retry, when the current
    /// period has no permission left.
    pub fn try_acquire(&self, name: &BulkheadName) -> Result<(), BulkheadError> {
        match self.reserve(Duration::ZERO) {
            RateAdmission::Refused { retry_after } => Err(BulkheadError::RateLimited {
                name: name.clone(),
                retry_after,
            }),
            _ => Ok(()),
        }
    }

    /// The clock the limiter measures periods with; async callers wait for a
    /// [`RateAdmission::WaitUntil`] with its [`Clock::sleep_until`].
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Now, in the nanoseconds cycles are numbered in (by the limiter's clock).
    fn elapsed_nanos(&self) -> u64 {
        self.nanos_since_origin(self.clock.now())
    }

    /// `at` in the nanoseconds cycles are numbered in: since the limiter's creation, plus
    /// the Unix time of its creation for a cluster-wide limit.
    fn nanos_since_origin(&self, at: Instant) -> u64 {
        duration_nanos(at.saturating_duration_since(self.origin))
            .saturating_add(self.epoch_nanos.load(Acquire))
    }

    /// The instant of `nanos` (as [`nanos_since_origin`](Self::nanos_since_origin) counts).
    fn instant_at(&self, nanos: u64) -> Instant {
        self.origin + Duration::from_nanos(nanos.saturating_sub(self.epoch_nanos.load(Acquire)))
    }

    /// The current cycle and the permissions left in it, refilling `state` as of `now`.
    fn refreshed(&self, state: u64, now: u64) -> (u64, i64) {
        let limit = i64::from(self.limit.load(Acquire));
        let period = self.period_nanos.load(Acquire).max(1);
        let cycle_now = now / period;
        let (cycle, permissions) = unpack(state);
        let elapsed = u64::from((cycle_now as u32).wrapping_sub(cycle));
        let permissions = if elapsed == 0 {
            permissions
        } else {
            permissions
                .saturating_add((elapsed as i64).saturating_mul(limit))
                .min(limit)
        };
        (cycle_now, permissions)
    }
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("limit_for_period", &self.limit_for_period())
            .field("refresh_period", &self.refresh_period())
            .field("timeout", &self.timeout())
            .field("cluster_wide", &self.is_cluster_wide())
            .finish()
    }
}

/// One bulkhead's cluster store, as [`check_cluster_stores`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreCheck {
    /// The bulkhead whose `rate_limit` is counted in the store.
    pub bulkhead: BulkheadName,
    /// `Ok`, or what is wrong with the store, with the fix when there is one.
    pub result: Result<(), String>,
}

/// Checks the store of every cluster-wide rate limit in `registry` once (each within its
/// `response_timeout`), for a readiness probe or a start-up check: the URL is usable, Redis
/// answers, and each limit's key is free or its own (a key of another type is reported
/// with the command that frees it). Bulkheads without a cluster-wide limit are left out.
///
/// ```
/// use bulkhead::config::{
///     BulkheadConfig, Duration, RateLimitConfig, RateLimitScope, RateLimitStore, SemaphoreConfig,
/// };
/// use bulkhead::{Registry, check_cluster_stores};
///
/// let mut config = BulkheadConfig::semaphore(SemaphoreConfig::default());
/// config.rate_limit = Some(RateLimitConfig {
///     scope: RateLimitScope::Cluster,
///     // No variable BULKHEAD_DOC_UNSET_URL: the store cannot be used.
///     store: Some(RateLimitStore::redis("${BULKHEAD_DOC_UNSET_URL}")),
///     ..RateLimitConfig::per_process(100, Duration::from_secs(1))
/// });
/// let registry = Registry::new();
/// registry.register("partner", &config).unwrap();
/// let checks = check_cluster_stores(&registry);
/// assert_eq!(checks.len(), 1);
/// assert!(checks[0].result.as_ref().unwrap_err().contains("BULKHEAD_DOC_UNSET_URL"));
/// ```
pub fn check_cluster_stores(registry: &crate::Registry) -> Vec<StoreCheck> {
    registry
        .names()
        .into_iter()
        .filter_map(|name| {
            let result = match registry.get(&name)? {
                crate::Bulkhead::Semaphore(b) => b.rate_limiter().check_store(),
                crate::Bulkhead::ThreadPool(b) => b.rate_limiter().check_store(),
            }?;
            Some(StoreCheck {
                bulkhead: BulkheadName::new(name),
                result,
            })
        })
        .collect()
}

/// `Retry-After` in whole seconds (HTTP's unit), rounded up so a client that honours it
/// never comes back before a permission is free.
///
/// ```
/// use std::time::Duration;
/// use bulkhead::retry_after_header_secs;
/// assert_eq!(retry_after_header_secs(Duration::from_millis(1)), 1);
/// assert_eq!(retry_after_header_secs(Duration::from_secs(2)), 2);
/// assert_eq!(retry_after_header_secs(Duration::from_millis(2001)), 3);
/// assert_eq!(retry_after_header_secs(Duration::ZERO), 0);
/// ```
pub fn retry_after_header_secs(retry_after: Duration) -> u64 {
    retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0)
}

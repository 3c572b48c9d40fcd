//! A point-in-time view of one bulkhead, shared by both kinds.
//!
//! A snapshot is read from relaxed counters and gauges without stopping the bulkhead, so
//! its fields are each accurate but not taken at exactly the same instant (for example
//! `active + available` may briefly differ from `limit` while a permit is changing hands).
//! Saturation is information for dashboards and alerts, never a failed health check.

use bulkhead_config_types::Kind;

use crate::BulkheadName;
use crate::adaptive::AdaptiveSnapshot;
use crate::telemetry::{HistogramSnapshot, SaturationLevel};

/// What one bulkhead looks like right now: its limits, its load and its call counters.
///
/// Fields that only make sense for a thread pool (`pool_size`, `largest_pool_size`,
/// `queue_capacity`) are `None` for a semaphore; `queued` is 0 for a semaphore, whose
/// waiting callers are counted in `waiting` instead.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BulkheadSnapshot {
    /// The bulkhead's name.
    pub name: BulkheadName,
    /// Semaphore or thread pool.
    pub kind: Kind,
    /// The concurrency limit in force: `max_concurrent_calls` for a semaphore, `max_threads`
    /// for a pool, or the adaptive limit within it.
    pub limit: u32,
    /// Calls running right now (holding a permit, or running on a worker).
    pub active: u32,
    /// Room for more calls to start now without waiting (`limit - active`, never negative).
    pub available: u32,
    /// Callers blocked or awaiting admission right now (semaphore `max_wait`, pool `on_full: wait`).
    pub waiting: u32,
    /// Tasks accepted and waiting in a pool's queue; 0 for a semaphore.
    pub queued: u32,
    /// The pool's queue capacity; `None` for a semaphore.
    pub queue_capacity: Option<u32>,
    /// Worker threads alive right now; `None` for a semaphore.
    pub pool_size: Option<u32>,
    /// The most worker threads ever alive at once; `None` for a semaphore.
    pub largest_pool_size: Option<u32>,
    /// What happened to the calls made so far.
    pub calls: CallCounts,
    /// How long admitted calls waited for a permit (semaphore `max_wait`) or for room in
    /// the pool (`on_full: wait`); calls admitted at once count as 0. Its count is
    /// `calls.permitted`.
    pub wait_time: HistogramSnapshot,
    /// How long tasks waited in the pool's queue before a worker took them; `None` for a
    /// semaphore. Sampled on the system clock: every task of a pool with `max_queue_wait`
    /// or an age-ordered queue (adaptive LIFO, CoDel), else one task in 16 per queuing
    /// thread, chosen regardless of its wait (so its quantiles and mean are those of all
    /// tasks, its count that of the sampled ones). On a clock that is not the system's
    /// ([`Clock::is_system_time`](crate::clock::Clock::is_system_time)), every task.
    pub queue_time: Option<HistogramSnapshot>,
    /// How long admitted calls ran: a semaphore call from admission to the permit's
    /// return, a pool task on its worker. Recorded only for calls admitted while call
    /// timing was on ([`events::time_calls`](crate::events::time_calls), or any event
    /// listener), so its count may be below `calls.permitted`.
    pub call_duration: HistogramSnapshot,
    /// How close the bulkhead is to refusing, against its configured thresholds
    /// (`saturation` in the config; 80 %/95 % active, 70 %/90 % queue by default).
    /// Information for dashboards and alerts, never a failed health check.
    pub saturation: SaturationLevel,
    /// The adaptive limit's algorithm, bounds and estimates (no-load latency, gradient);
    /// `None` for a static limit.
    pub adaptive: Option<AdaptiveSnapshot>,
    /// With a cluster-wide rate limit (`scope: cluster`), the decisions its store could
    /// not make (each followed `on_store_error`); `None` otherwise.
    pub rate_limit_store_errors: Option<u64>,
    /// With a cluster-wide concurrency limit (a semaphore's `cluster:`), its leases: held,
    /// running without one, renewed, expired, reclaimed, refused, store errors; `None`
    /// otherwise.
    pub leases: Option<crate::LeaseSnapshot>,
    /// Each partition's share and counters (`partitions` in the config); empty when the
    /// bulkhead is not partitioned.
    pub partitions: Vec<crate::PartitionSnapshot>,
    /// The per-key aggregates and the busiest keys (`per_key` in the config); `None`
    /// without a per-key cap.
    pub per_key: Option<crate::PerKeySnapshot>,
}

/// Cumulative call counters of one bulkhead since it was built.
///
/// Every admitted call ends up in exactly one of `completed`, `panicked` or `cancelled`
/// once it is over, so at rest `permitted == completed + panicked + cancelled`.
/// Re-entrant calls ran inline without a permit and are counted only in `reentrant`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct CallCounts {
    /// Calls admitted (given a permit or accepted into the pool).
    pub permitted: u64,
    /// Admitted calls whose body returned.
    pub completed: u64,
    /// Admitted calls whose body panicked.
    pub panicked: u64,
    /// Admitted calls given up before or while running (a dropped future, shutdown).
    pub cancelled: u64,
    /// Calls that entered a bulkhead they were already inside and ran inline.
    pub reentrant: u64,
    /// Admitted calls whose caller got [`CallTimeout`](crate::BulkheadError::CallTimeout):
    /// an async body dropped at the deadline (also counted `cancelled`), or a synchronous
    /// thread-pool call the caller stopped waiting for (also counted in `discarded` once
    /// the worker finishes it).
    pub timed_out: u64,
    /// Synchronous thread-pool calls that finished on their worker after their caller had
    /// stopped waiting at the call timeout: the result was thrown away.
    pub discarded: u64,
    /// Refused calls answered by a fallback (`#[bulkhead(…, fallback = …)]`, or code that
    /// reports its own with `record_fallback`).
    pub fallbacks: u64,
    /// Refused calls, by reason.
    pub refused: RefusalCounts,
}

/// Refused calls of one bulkhead, by reason ([`BulkheadError::reason`](crate::BulkheadError::reason)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RefusalCounts {
    /// `Full`: no room and no wait allowed.
    pub full: u64,
    /// `Timeout`: waited the whole allowance.
    pub timeout: u64,
    /// `QueueTimeout`: waited too long in a pool's queue.
    pub queue_timeout: u64,
    /// `RateLimited`: the rate limit allowed no more calls in the period.
    pub rate_limited: u64,
    /// `ShutDown`: the bulkhead was shutting down.
    pub shut_down: u64,
    /// `KeyLimit`: the call's key already held its cap (`per_key`).
    pub key_limit: u64,
}

impl CallCounts {
    /// `(outcome, count)` for `completed`, `panicked`, `cancelled`, `refused` (every
    /// reason) and `reentrant`: the `outcome` label of `bulkhead_calls_total`.
    pub fn by_outcome(&self) -> [(&'static str, u64); 5] {
        [
            ("completed", self.completed),
            ("panicked", self.panicked),
            ("cancelled", self.cancelled),
            ("refused", self.refused.total()),
            ("reentrant", self.reentrant),
        ]
    }
}

impl RefusalCounts {
    /// `(reason, count)` for each reason, labelled as
    /// [`BulkheadError::reason`](crate::BulkheadError::reason).
    pub fn by_reason(&self) -> [(&'static str, u64); 6] {
        [
            ("full", self.full),
            ("timeout", self.timeout),
            ("queue_timeout", self.queue_timeout),
            ("rate_limited", self.rate_limited),
            ("shut_down", self.shut_down),
            ("key_limit", self.key_limit),
        ]
    }

    /// Refusals of every reason together.
    pub fn total(&self) -> u64 {
        self.full
            + self.timeout
            + self.queue_timeout
            + self.rate_limited
            + self.shut_down
            + self.key_limit
    }
}

//! The semaphore bulkhead's handle, past its calls: live changes (limits, `max_wait`,
//! fairness, rate limit, adaptive limit, call timeout), shutdown, and the snapshot. Each
//! change applies to acquisitions that start after it; none cancels an admitted call.

use std::sync::atomic::Ordering::{Acquire as AcquireOrd, Relaxed};
use std::time::Duration;

use bulkhead_config_types::{AdaptiveConfig, Kind, RateLimitConfig, SemaphoreConfig};

use super::state::{available, clamp_u32};
use super::{Acquire, AsyncPermit, OwnedPermit, SemaphoreBulkhead};
use crate::BulkheadError;
use crate::clock::duration_nanos;
use crate::frame;
use crate::rate_limit::RateLimiter;
use crate::snapshot::BulkheadSnapshot;
use crate::telemetry::Telemetry;

impl SemaphoreBulkhead {
    /// Changes the call timeout live, for calls admitted after this (`configure`). A
    /// synchronous body runs on the caller's thread and cannot be stopped, so it is not
    /// timed.
    pub(crate) fn set_call_timeout(&self, timeout: Option<Duration>) {
        self.shared.call_timeout.set(timeout);
    }

    /// The call timeout, if one is set.
    pub fn call_timeout(&self) -> Option<Duration> {
        self.shared.call_timeout.get()
    }

    /// Changes the rate limit live (`None` removes it; `configure`).
    pub(crate) fn set_rate_limit(&self, config: Option<&RateLimitConfig>) {
        self.shared.rate.reconfigure(config);
    }

    /// The rate limiter checked before each admission (the crates' tests look at it; not
    /// part of the facade's documented surface).
    #[doc(hidden)]
    pub fn rate_limiter(&self) -> &RateLimiter {
        &self.shared.rate
    }

    /// Applies new limits live.
    ///
    /// Growing `max_concurrent_calls` hands the new permits to waiters first. Shrinking never
    /// cancels admitted calls and never blocks: permits above the new limit are retired as
    /// their holders release them. `max_wait` and `fair` apply to acquisitions that start
    /// after the call.
    pub fn resize(&self, config: &SemaphoreConfig) {
        let shared = &*self.shared;
        shared
            .max_wait_nanos
            .store(duration_nanos(config.max_wait.as_std()), Relaxed);
        shared.fair.store(config.fair, Relaxed);
        let declared = config.max_concurrent_calls;
        shared.declared.store(declared, Relaxed);
        shared.set_limit(shared.adaptive.limit_for_declared(declared));
    }

    /// Changes the adaptive limit live (`None`: back to `max_concurrent_calls`). The same
    /// algorithm with the same parameters keeps what it learned. Like
    /// [`resize`](Self::resize), it never cancels admitted calls (`configure`).
    pub(crate) fn set_adaptive(&self, config: Option<&AdaptiveConfig>) {
        let shared = &*self.shared;
        let declared = shared.declared.load(Relaxed);
        shared
            .adaptive
            .configure(config, declared, |limit| shared.set_limit(limit));
    }

    /// Marks the call running under the innermost permit of this bulkhead held on this
    /// thread (or, within an async body, on this task) as overloaded: see
    /// [`adaptive::mark_overloaded`](crate::adaptive::mark_overloaded).
    pub fn mark_overloaded(&self) -> bool {
        frame::mark_sync(self.shared.id()) || frame::mark_overloaded()
    }

    /// Stops admission and waits (through the bulkhead's clock) at most `timeout` for the
    /// calls that hold a permit to finish.
    ///
    /// Callers waiting for a permit and every later acquisition are refused with
    /// [`BulkheadError::ShutDown`]. Running calls are never interrupted: those still
    /// running when `timeout` passes are reported, and release their permits normally.
    ///
    /// Any number of threads may call it at once: each returns by its own deadline, and
    /// all report the same refused waiters.
    pub fn shutdown(&self, timeout: Duration) -> SemaphoreShutdown {
        let shared = &*self.shared;
        // `None`: a timeout too long for an `Instant` (`Duration::MAX`) waits for good.
        let deadline = shared.clock.now().checked_add(timeout);
        let me = std::thread::current();
        let waiters_refused = shared.close(Some(me.clone()));
        let still_running = loop {
            let running = shared.running();
            if running == 0 || deadline.is_some_and(|d| shared.clock.now() >= d) {
                break running;
            }
            match deadline {
                Some(deadline) => shared.clock.park_until(deadline),
                None => std::thread::park(),
            }
        };
        shared.stop_draining(&me);
        SemaphoreShutdown {
            waiters_refused,
            still_running,
        }
    }

    /// Stops admission without waiting (the first half of [`shutdown`](Self::shutdown)).
    pub(crate) fn stop_admission(&self) {
        self.shared.close(None);
    }

    /// True once [`shutdown`](Self::shutdown) has been called.
    pub fn is_shut_down(&self) -> bool {
        self.shared.is_shut_down()
    }

    /// A point-in-time view of the bulkhead's limits, load and counters.
    pub fn snapshot(&self) -> BulkheadSnapshot {
        let shared = &*self.shared;
        // Counters first: a call admitted after this read but seen running below makes
        // `completed` one short for a moment, never one too many.
        let mut calls = shared.counters.counts();
        // Calls of partitions admitted at once are counted there (`shares/partition.rs`).
        calls.permitted += shared.shares.admitted_at_once();
        let (limit, state, waiting) = {
            let waiters = shared.waiters.lock();
            (
                shared.limit.load(Relaxed),
                shared.state.load(AcquireOrd),
                waiters.queue.len(),
            )
        };
        let active = clamp_u32(limit as isize - available(state));
        calls.completed = calls
            .permitted
            .saturating_sub(calls.panicked + calls.cancelled + u64::from(active));
        BulkheadSnapshot {
            name: shared.name.clone(),
            kind: Kind::Semaphore,
            limit,
            active,
            available: clamp_u32(available(state)),
            waiting: u32::try_from(waiting).unwrap_or(u32::MAX),
            queued: 0,
            queue_capacity: None,
            pool_size: None,
            largest_pool_size: None,
            calls,
            wait_time: shared.telemetry.wait_time(calls.permitted),
            queue_time: None,
            call_duration: shared.telemetry.call_duration(),
            saturation: shared.telemetry.saturation(active, limit, 0, 0),
            adaptive: shared.adaptive.snapshot(),
            rate_limit_store_errors: shared.rate.store_errors(),
            leases: shared.rate.leases(),
            partitions: shared.shares.partition_snapshots(limit),
            per_key: shared.shares.per_key_snapshot(),
        }
    }

    /// Counts a call this bulkhead refused that a fallback answered instead
    /// (`bulkhead_fallbacks_total`). `#[bulkhead(…, fallback = …)]` calls it; call it
    /// from a fallback of your own.
    pub fn record_fallback(&self) {
        self.shared.counters.fallbacks.fetch_add(1, Relaxed);
    }

    /// Spans, histograms, saturation thresholds and events of this bulkhead.
    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.shared.telemetry
    }

    /// Partitions and per-key caps (`crate::shares`).
    #[inline]
    pub(crate) fn shares(&self) -> &crate::shares::Layers {
        &self.shared.shares
    }

    /// Whether this thread (or the task polled on it) is inside this bulkhead: its next
    /// call would be re-entrant (`crate::shares` checks it before a key's cap).
    #[inline]
    pub(crate) fn entered_here(&self) -> bool {
        crate::frame::is_inside(self.shared.id())
    }

    /// Counts and reports a refusal decided in front of admission (`crate::shares`).
    pub(crate) fn refuse(&self, err: BulkheadError) -> BulkheadError {
        self.shared.refuse(err)
    }

    /// `permit` (of this bulkhead) as an [`OwnedPermit`].
    pub(crate) fn own(&self, permit: AsyncPermit<'_>) -> OwnedPermit {
        OwnedPermit::new(self.clone(), permit.into_parts())
    }

    /// [`acquire_async`](Self::acquire_async) that never queues: a borrowing partition's.
    pub(crate) fn try_acquire_async(&self) -> Acquire<'_> {
        Acquire::without_waiting(&self.shared)
    }
}

/// What [`SemaphoreBulkhead::shutdown`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SemaphoreShutdown {
    /// Callers that were waiting for a permit and were refused with `ShutDown`.
    pub waiters_refused: u64,
    /// Calls still holding a permit when the timeout passed (0: everything finished).
    pub still_running: u32,
}

//! The semaphore bulkhead: a named concurrency limit whose body runs on the caller's thread
//! or task while it holds a permit. This file is the public handle and its calls; the rest
//! of the bulkhead is split by idea:
//!
//! * `state.rs`: the permit count and the waiter queue (one atomic word, a FIFO behind a
//!   mutex; fast path, hand-off to waiters, resize, shutdown) and their invariants 1–4;
//! * `admission.rs`: who is admitted and how each decision is counted and reported
//!   (invariant 5), and the code shape that keeps the uncontended call in registers;
//! * `acquire.rs`: the future of an async acquisition;
//! * `permit.rs`: what an admitted call holds, and how its outcome is counted;
//! * `control.rs`: live changes, shutdown and the snapshot.
//!
//! # Re-entry
//!
//! Acquiring a bulkhead that the current thread is already inside returns a *re-entrant*
//! permit: no permit is taken, the body runs inline, and the call is counted `reentrant`.
//! A [`Permit`] from [`SemaphoreBulkhead::acquire`] or [`SemaphoreBulkhead::try_acquire`]
//! marks its thread while held; an [`AsyncPermit`] marks the polling thread only while
//! [`AsyncPermit::run_async`] polls its body (a task may move between threads between polls).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire as AcquireOrd, Relaxed};
use std::task::Waker;
use std::time::Duration;

use bulkhead_config_types::{Kind, SemaphoreConfig};
use crossbeam_utils::CachePadded;

use crate::adaptive::calls::Controller;
use crate::call_timeout::CallTimeout;
use crate::clock::{Clock, duration_nanos, system_clock};
use crate::rate_limit::RateLimiter;
use crate::stats::Counters;
// The handle and the clock are plain `std` Arcs (not part of a loom model); waiters, which
// cross threads through the queue, use the shim's.
use crate::sync::{AtomicBool, AtomicIsize, AtomicU8, AtomicU32, AtomicU64, Mutex};
use crate::telemetry::Telemetry;
use crate::{BulkheadError, BulkheadName};

mod acquire;
mod admission;
mod call;
mod control;
mod deadlines;
mod permit;
mod shares;
mod state;

pub use acquire::Acquire;
use admission::Fast;
pub use call::{RunAdmitted, SemaphoreCall};
pub use control::SemaphoreShutdown;
use permit::Held;
pub use permit::{AsyncPermit, OwnedPermit, Permit, RunAsync};
pub use shares::{Admission, AsyncSharePermit, Partition, SharePermit};
use state::{Waiters, available, clamp_u32, permits_to_state};

/// A semaphore bulkhead: at most `max_concurrent_calls` calls run at once, each on its
/// caller's thread or task; others wait up to `max_wait` or are refused.
///
/// Cloning is cheap and every clone is the same bulkhead.
///
/// ```
/// use bulkhead::config::SemaphoreConfig;
/// use bulkhead::{BulkheadError, SemaphoreBulkhead};
///
/// let config = SemaphoreConfig { max_concurrent_calls: 1, ..SemaphoreConfig::default() };
/// let payment = SemaphoreBulkhead::new("payment", &config);
///
/// let held = payment.try_acquire().expect("the bulkhead is empty");
/// // Fail fast (max_wait is 0 by default): the only permit is taken. This thread is inside
/// // the bulkhead, so check from another thread, as another request would.
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         assert!(matches!(payment.call(|| 42), Err(BulkheadError::Full { .. })));
///     });
/// });
/// drop(held);
/// assert_eq!(payment.call(|| 42), Ok(42));
/// ```
#[derive(Clone)]
pub struct SemaphoreBulkhead {
    shared: Arc<Shared>,
}

struct Shared {
    /// Available permits `<< FLAG_BITS`, plus the flags.
    state: CachePadded<AtomicIsize>,
    waiters: Mutex<Waiters>,
    /// The limit in force: `max_concurrent_calls`, or the adaptive limit within it.
    limit: AtomicU32,
    /// `max_concurrent_calls`, as last configured (an adaptive limit's hard bound).
    declared: AtomicU32,
    /// The adaptive limit, if one is configured.
    adaptive: Controller,
    /// `max_wait` in nanoseconds.
    max_wait_nanos: AtomicU64,
    fair: AtomicBool,
    name: BulkheadName,
    clock: Arc<dyn Clock>,
    counters: Counters,
    /// Checked before a permit is taken; admits everything unless configured.
    rate: RateLimiter,
    /// Spans, refusal warnings, wait-time histogram, events.
    telemetry: Telemetry,
    /// How long an admitted async call may run (`timeout` in the config).
    call_timeout: CallTimeout,
    /// Wakes the queue's one `max_wait` timer (`deadlines.rs`).
    timer_waker: Waker,
    /// Whether the queue's timer is being armed under the queue lock, and whether its
    /// waker was woken meanwhile (`deadlines.rs`): such a wake is handed to the armer.
    timer_arming: AtomicU8,
    /// Partitions and per-key caps, in front of admission (`crate::shares`).
    shares: crate::shares::Layers,
}

impl SemaphoreBulkhead {
    /// A semaphore bulkhead named `name` on the system clock.
    pub fn new(name: impl Into<BulkheadName>, config: &SemaphoreConfig) -> Self {
        Self::with_clock(name, config, system_clock())
    }

    /// A semaphore bulkhead that reads time and waits through `clock` (tests pass a
    /// [`ManualClock`](crate::ManualClock)).
    pub fn with_clock(
        name: impl Into<BulkheadName>,
        config: &SemaphoreConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let limit = config.max_concurrent_calls;
        let name = name.into();
        let telemetry = Telemetry::new(name.clone(), Kind::Semaphore, Arc::clone(&clock));
        SemaphoreBulkhead {
            shared: Arc::new_cyclic(|me| Shared {
                state: CachePadded::new(AtomicIsize::new(permits_to_state(limit))),
                waiters: Mutex::new(Waiters::default()),
                limit: AtomicU32::new(limit),
                declared: AtomicU32::new(limit),
                adaptive: Controller::new(),
                max_wait_nanos: AtomicU64::new(duration_nanos(config.max_wait.as_std())),
                fair: AtomicBool::new(config.fair),
                rate: RateLimiter::for_bulkhead(name.clone(), None, Arc::clone(&clock)),
                name,
                telemetry,
                clock,
                counters: Counters::default(),
                call_timeout: CallTimeout::default(),
                timer_waker: deadlines::timer_waker(me.clone()),
                timer_arming: AtomicU8::new(deadlines::IDLE),
                shares: crate::shares::Layers::default(),
            }),
        }
    }

    /// The bulkhead's name.
    #[inline]
    pub fn name(&self) -> &BulkheadName {
        &self.shared.name
    }

    /// The limit in force: `max_concurrent_calls`, or the adaptive limit within it.
    #[inline]
    pub fn limit(&self) -> u32 {
        self.shared.limit.load(AcquireOrd)
    }

    /// Permits free right now (0 while a shrink is still retiring permits).
    pub fn available(&self) -> u32 {
        clamp_u32(available(self.shared.state.load(Relaxed)))
    }

    /// The current `max_wait`.
    pub fn max_wait(&self) -> Duration {
        Duration::from_nanos(self.shared.max_wait_nanos.load(Relaxed))
    }

    /// Takes a permit if one is free right now; never waits. The returned permit marks this
    /// thread as inside the bulkhead until it is dropped.
    ///
    /// # Errors
    ///
    /// [`BulkheadError::RateLimited`] when a rate limit allows no more calls in this period,
    /// [`BulkheadError::Full`] when every permit is taken (or, for a fair bulkhead, when
    /// others are already waiting), [`BulkheadError::ShutDown`] after
    /// [`shutdown`](Self::shutdown).
    #[inline(always)]
    pub fn try_acquire(&self) -> Result<Permit<'_>, BulkheadError> {
        self.permit(false)
    }

    /// Takes a permit, blocking the thread at most `max_wait` for one (after waiting at most
    /// the rate limit's `timeout` for a rate-limit permission, if a rate limit is set).
    ///
    /// # Errors
    ///
    /// With `max_wait` 0 a caller that finds no permit is refused with
    /// [`BulkheadError::Full`]. Otherwise it queues (FIFO) and is refused with
    /// [`BulkheadError::Timeout`] once the bulkhead's clock has passed `max_wait`.
    /// [`BulkheadError::RateLimited`] when the rate limit has no permission within its
    /// `timeout`; [`BulkheadError::ShutDown`] after [`shutdown`](Self::shutdown).
    #[inline(always)]
    pub fn acquire(&self) -> Result<Permit<'_>, BulkheadError> {
        self.permit(true)
    }

    /// [`acquire`](Self::acquire) (`may_wait`) or [`try_acquire`](Self::try_acquire).
    /// Inlined into the caller: see `admission.rs`, *Code shape*.
    #[inline(always)]
    pub(crate) fn permit(&self, may_wait: bool) -> Result<Permit<'_>, BulkheadError> {
        let shared = &*self.shared;
        let held = match shared.admit_fast(may_wait) {
            Fast::Admitted => Held::PERMIT,
            Fast::Reentrant => Held::NOTHING,
            // A refusal or the slow path: out of line, one source for the error.
            other => return shared.not_admitted(other, may_wait),
        };
        Ok(Permit::admitted(shared, held))
    }

    /// For a call of a partition (`crate::shares`): a permit only if one is free now, not
    /// counted `permitted` (the partition counts it), or a re-entrant one; `None` with
    /// nothing done otherwise (take [`permit`](Self::permit) then).
    #[inline(always)]
    pub(crate) fn permit_at_once_uncounted(&self) -> Option<Permit<'_>> {
        let shared = &*self.shared;
        let held = match shared.admit_at_once_uncounted() {
            Fast::Admitted => Held::PERMIT,
            Fast::Reentrant => Held::NOTHING,
            _ => return None,
        };
        Some(Permit::admitted(shared, held))
    }

    /// Takes a permit, awaiting at most `max_wait` for one, on any executor.
    ///
    /// Dropping the future gives up its place in the queue, and passes on a permit that was
    /// already handed to it.
    ///
    /// ```
    /// use bulkhead::config::SemaphoreConfig;
    /// use bulkhead::SemaphoreBulkhead;
    ///
    /// let db = SemaphoreBulkhead::new("db", &SemaphoreConfig::default());
    /// let rows = futures_executor::block_on(async {
    ///     let permit = db.acquire_async().await?;
    ///     Ok::<_, bulkhead::BulkheadError>(permit.run_async(async { 3 }).await)
    /// });
    /// assert_eq!(rows, Ok(3));
    /// ```
    pub fn acquire_async(&self) -> Acquire<'_> {
        Acquire::new(&self.shared)
    }

    /// Takes a permit like [`acquire_async`](Self::acquire_async), as an [`OwnedPermit`]
    /// that holds its own handle to this bulkhead, so it is `'static` and can outlive the
    /// caller (a streamed response body, a spawned task). The future is `'static` too.
    ///
    /// # Errors
    ///
    /// The future resolves to the refusals of [`acquire`](Self::acquire), awaited instead
    /// of blocking.
    pub fn acquire_owned(
        &self,
    ) -> impl Future<Output = Result<OwnedPermit, BulkheadError>> + Send + 'static {
        let bulkhead = self.clone();
        async move {
            let parts = bulkhead.acquire_async().await?.into_parts();
            Ok(OwnedPermit::new(bulkhead, parts))
        }
    }

    /// Runs `body` on this thread while holding a permit (waiting at most `max_wait` for one).
    ///
    /// A panic in `body` reaches the caller as a panic; the permit is returned either way.
    ///
    /// # Errors
    ///
    /// The refusals of [`acquire`](Self::acquire); `body` did not run.
    #[inline(always)]
    pub fn call<R>(&self, body: impl FnOnce() -> R) -> Result<R, BulkheadError> {
        // `acquire` by hand, so a refusal is written straight into this call's result.
        let shared = &*self.shared;
        let held = match shared.admit_fast(true) {
            Fast::Admitted => Held::PERMIT,
            Fast::Reentrant => Held::NOTHING,
            Fast::Refused(reason) => return Err(shared.error(reason)),
            Fast::Slow => shared.admit_slow(true)?,
        };
        let permit = Permit::admitted(shared, held);
        let result = body();
        drop(permit);
        Ok(result)
    }

    /// Awaits a permit (at most `max_wait`), then awaits `body` while holding it.
    ///
    /// The bulkhead is marked "entered" on whichever thread polls `body`, during each poll,
    /// so a nested call to the same bulkhead runs inline. Dropping the returned future at
    /// any point releases what it held; an admitted call dropped before `body` finished is
    /// counted `cancelled`.
    ///
    /// With a call timeout set (`timeout` in the config, or through
    /// [`configure`](Self::configure)), a body still running at the deadline (measured on the bulkhead's
    /// clock from when the permit was taken) is dropped, its permit returned at once, and
    /// the call fails with [`BulkheadError::CallTimeout`] (counted `timed_out` and
    /// `cancelled`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use bulkhead::config::{self, BulkheadConfig, SemaphoreConfig};
    /// use bulkhead::{BulkheadError, ManualClock, SemaphoreBulkhead};
    ///
    /// let clock = ManualClock::new();
    /// let limits = SemaphoreConfig::default();
    /// let search = SemaphoreBulkhead::with_clock("search", &limits, Arc::new(clock.clone()));
    /// search.configure(&BulkheadConfig {
    ///     timeout: Some(config::Duration::from_secs(2)),
    ///     ..BulkheadConfig::semaphore(limits)
    /// }).unwrap();
    /// let mut call = Box::pin(search.call_async(std::future::pending::<()>()));
    /// let waker = std::task::Waker::noop();
    /// assert!(call.as_mut().poll(&mut std::task::Context::from_waker(&waker)).is_pending());
    /// clock.advance(Duration::from_secs(2));
    /// let out = call.as_mut().poll(&mut std::task::Context::from_waker(&waker));
    /// assert!(matches!(out, std::task::Poll::Ready(Err(BulkheadError::CallTimeout { .. }))));
    /// assert_eq!(search.available(), 25);
    /// ```
    pub fn call_async<F: Future>(&self, body: F) -> SemaphoreCall<'_, F> {
        SemaphoreCall::new(&self.shared, body)
    }
}

impl fmt::Debug for SemaphoreBulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreBulkhead")
            .field("name", &self.shared.name)
            .field("limit", &self.limit())
            .field("available", &self.available())
            .field("max_wait", &self.max_wait())
            .field("fair", &self.shared.fair.load(Relaxed))
            .finish()
    }
}

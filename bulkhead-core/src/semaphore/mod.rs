//! The semaphore bulkhead: a named concurrency limit whose body runs on the caller's thread
//! or task while it holds a permit.
//!
//! # Implementation
//!
//! One atomic word, `state`, holds the number of available permits (shifted left by
//! [`FLAG_BITS`]) and two flags: [`HAS_WAITERS`] (the waiter queue is not empty) and
//! [`CLOSED`] (shut down: no more admission). The waiter queue is a FIFO behind a mutex.
//!
//! * **Fast path.** While no flag is set, acquiring is a compare-and-swap that takes one
//!   available permit and releasing is a compare-and-swap that puts one back; neither
//!   touches the mutex. A refusal of a full bulkhead is one load and allocates nothing.
//! * **Slow path.** A caller that may wait locks the queue, re-checks the count and, if
//!   it still cannot take a permit, sets [`HAS_WAITERS`] *with a compare-and-swap that also
//!   sees the count* and enqueues itself. From then on every release sees the flag and
//!   takes the lock too, so a permit released while someone waits is **handed directly**
//!   to the waiter at the head of the queue (it never reaches the atomic count). That is
//!   what makes a fair bulkhead fair: once someone waits, newcomers find no permit in the
//!   count and queue behind them.
//! * **Resize.** Growing by `n` hands up to `n` permits to waiters and adds the rest to the
//!   count. Shrinking subtracts from the count, which may go negative: the permits above
//!   the new limit are retired one by one as their holders release them (a release that
//!   finds the count negative only increments it). Resizing never waits for running calls
//!   and never cancels them.
//!
//! # Invariants
//!
//! 1. Permits handed out (`limit - available`) never exceed `limit`, except transiently
//!    after a shrink, while admitted calls above the new limit finish; no new permit is
//!    handed out until the count is positive again.
//! 2. `available > 0` and a non-empty queue do not coexist once the queue lock is released:
//!    permits returned while waiters exist go to the waiters first.
//! 3. A waiter is granted at most once (its state moves `WAITING → GRANTED` or
//!    `WAITING → CLOSED` under the queue lock, never back) and woken exactly once for it.
//! 4. A waiter that gives up (timeout, dropped future) removes itself under the queue lock;
//!    if it had already been granted a permit, it passes that permit on (to the next
//!    waiter or the count): no permit is ever lost.
//! 5. Every admitted call is counted `permitted` once, and once it is over exactly one of
//!    `completed`, `panicked` or `cancelled`; every refusal is counted under its reason.
//!    Re-entrant calls take no permit and are counted only as `reentrant`. (`completed` is
//!    not an atomic of its own: the snapshot derives it as `permitted - panicked - cancelled
//!    - running`, which keeps one atomic add off the uncontended fast path.)
//!
//! # Cost
//!
//! Uncontended `try_acquire` + drop: one compare-and-swap to take, one to give back, one
//! relaxed add (`permitted`) and two accesses to a destructor-free thread-local (re-entry
//! mark). A fail-fast refusal: one load, one relaxed add (the refusal counter), no
//! allocation; with a static name (every registered bulkhead) no reference count either.
//!
//! Code shape: `acquire`, `try_acquire` and `call` are inlined into the caller and make
//! two calls into this crate, `Shared::admit_fast` (re-entry check, permit, mark,
//! `permitted`; its decision comes back as a two-byte `Fast`, in a register) and, when the
//! permit drops, `Shared::exit_held`. Compiled here, the re-entry thread-local is a direct
//! thread-local access, not a call through `LocalKey` from the caller's crate, and neither
//! the permit nor a refusal travels through memory between functions. A refusal carries a
//! one-byte reason until the error is built, once, in a `#[cold]` function; the rate limit
//! and waiting in the queue are `#[cold]` out-of-line paths.
//!
//! # Re-entry
//!
//! Acquiring a bulkhead that the current thread is already inside returns a *re-entrant*
//! permit: no permit is taken, the body runs inline, and the call is counted `reentrant`.
//! A [`Permit`] from [`SemaphoreBulkhead::acquire`] or [`SemaphoreBulkhead::try_acquire`]
//! marks its thread while held; an [`AsyncPermit`] marks the polling thread only while
//! [`AsyncPermit::run_async`] polls its body (a task may move between threads between polls).

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering::{AcqRel, Acquire as AcquireOrd, Relaxed, Release};
use std::task::Waker;
use std::thread::Thread;
use std::time::{Duration, Instant};

use bulkhead_config_types::{AdaptiveConfig, Kind, RateLimitConfig, SemaphoreConfig};
use crossbeam_utils::CachePadded;

use crate::adaptive::Sample;
use crate::adaptive::calls::{self, CallStart, Controller};
use crate::call_timeout::{CallTimeout, Deadline, Elapsed};
use crate::clock::{Clock, duration_nanos, system_clock};
use crate::rate_limit::RateLimiter;
use crate::reentry::{self, BulkheadId};
use crate::snapshot::BulkheadSnapshot;
use crate::stats::{self, Counters};
// The handle and the clock are plain `std` Arcs (not part of a loom model); waiters, which
// cross threads through the queue, use the shim's.
use crate::sync::{self, AtomicBool, AtomicIsize, AtomicU8, AtomicU32, AtomicU64, Mutex};
use crate::telemetry::{Load, Telemetry};
use crate::{BulkheadError, BulkheadName};
use std::sync::Arc;

mod acquire;
mod permit;

pub use acquire::Acquire;
use permit::RawPermit;
pub use permit::{AsyncPermit, OwnedPermit, Permit, RunAsync};

/// Low bits of `state` used for flags; the permit count sits above them.
const FLAG_BITS: u32 = 2;
/// Set while the waiter queue is not empty: releases must take the slow path.
const HAS_WAITERS: isize = 0b01;
/// Set once the bulkhead is shut down: no more admission.
const CLOSED: isize = 0b10;
/// Both flags.
const FLAGS: isize = HAS_WAITERS | CLOSED;
/// One permit in `state`'s units.
const ONE: isize = 1 << FLAG_BITS;

/// Available permits in a `state` word (negative while a shrink is retiring permits).
const fn available(state: isize) -> isize {
    state >> FLAG_BITS
}

/// A semaphore bulkhead: at most `max_concurrent_calls` calls run at once, each on its
/// caller's thread or task; others wait up to `max_wait` or are refused.
///
/// Cloning is cheap and every clone is the same bulkhead.
///
/// ```
/// use bulkhead_config_types::SemaphoreConfig;
/// use bulkhead_core::{BulkheadError, SemaphoreBulkhead};
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
}

#[derive(Default)]
struct Waiters {
    queue: VecDeque<sync::Arc<Waiter>>,
    /// The thread waiting in [`SemaphoreBulkhead::shutdown`] for running calls to finish.
    drain: Option<Thread>,
}

/// One caller waiting for a permit.
struct Waiter {
    /// `WAITING`, then `GRANTED` or `CLOSED`; changed only under the queue lock.
    status: AtomicU8,
    wake: parking_lot::Mutex<Wake>,
}

const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const SHUT: u8 = 2;

enum Wake {
    Thread(Thread),
    Task(Waker),
}

impl Waiter {
    fn new(wake: Wake) -> sync::Arc<Waiter> {
        sync::Arc::new(Waiter {
            status: AtomicU8::new(WAITING),
            wake: parking_lot::Mutex::new(wake),
        })
    }

    fn status(&self) -> u8 {
        self.status.load(AcquireOrd)
    }

    fn wake(&self) {
        match &*self.wake.lock() {
            Wake::Thread(thread) => thread.unpark(),
            Wake::Task(waker) => waker.wake_by_ref(),
        }
    }

    /// How the wait ended, once it has.
    fn resolved(&self) -> Option<Waited> {
        match self.status() {
            GRANTED => Some(Waited::Granted),
            SHUT => Some(Waited::ShutDown),
            _ => None,
        }
    }

    /// Replaces the stored waker if it would not wake the same task.
    fn update_waker(&self, waker: &Waker) {
        let mut wake = self.wake.lock();
        if !matches!(&*wake, Wake::Task(w) if w.will_wake(waker)) {
            *wake = Wake::Task(waker.clone());
        }
    }
}

/// What a waiting acquisition ended with.
enum Waited {
    Granted,
    TimedOut(Duration),
    ShutDown,
}

/// What [`Shared::admit_fast`] decided; two bytes, so it comes back in a register.
#[derive(Clone, Copy)]
enum Fast {
    /// A permit was taken (counted `permitted`) and the thread marked inside.
    Admitted,
    /// The thread is already inside: run inline (counted `reentrant`).
    Reentrant,
    /// Refused (counted, and logged if anyone listens); [`Shared::error`] builds the error.
    Refused(Reason),
    /// A rate limit or a wait in the queue: the slow path decides (nothing done yet).
    Slow,
}

/// A fast-path refusal reason: one byte, the index of its counter in `Counters::refused`,
/// until the caller builds the [`BulkheadError`] (in [`Shared::error`], out of line).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Reason {
    Full = stats::FULL as u8,
    ShutDown = stats::SHUT_DOWN as u8,
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
            shared: Arc::new(Shared {
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
            }),
        }
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &BulkheadName {
        &self.shared.name
    }

    /// The limit in force: `max_concurrent_calls`, or the adaptive limit within it.
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

    /// Takes a permit if one is free right now; never waits.
    ///
    /// Refuses with [`BulkheadError::RateLimited`] when a rate limit allows no more calls in
    /// this period, [`BulkheadError::Full`] when every permit is taken (or, for a fair
    /// bulkhead, when others are already waiting) and [`BulkheadError::ShutDown`] after
    /// [`shutdown`](Self::shutdown). The returned permit marks this thread as inside the
    /// bulkhead until it is dropped.
    #[inline(always)]
    pub fn try_acquire(&self) -> Result<Permit<'_>, BulkheadError> {
        let shared = &*self.shared;
        let held = match shared.admit_fast(false) {
            Fast::Admitted => true,
            Fast::Reentrant => false,
            // A refusal or the slow path: out of line, one source for the error.
            other => return shared.not_admitted(other, false),
        };
        Ok(Permit::admitted(shared, held))
    }

    /// Takes a permit, blocking the thread at most `max_wait` for one (after waiting at most
    /// the rate limit's `timeout` for a rate-limit permission, if a rate limit is set).
    ///
    /// With `max_wait` 0 a caller that finds no permit is refused with
    /// [`BulkheadError::Full`]. Otherwise it queues (FIFO) and is refused with
    /// [`BulkheadError::Timeout`] once the bulkhead's clock has passed `max_wait`.
    #[inline(always)]
    pub fn acquire(&self) -> Result<Permit<'_>, BulkheadError> {
        // Inlined into the caller so the permit stays in registers (a refusal is written
        // straight into the caller's result): the decision comes back from core's
        // out-of-line fast path as a two-byte `Fast`.
        let shared = &*self.shared;
        let held = match shared.admit_fast(true) {
            Fast::Admitted => true,
            Fast::Reentrant => false,
            // A refusal or the slow path: out of line, one source for the error.
            other => return shared.not_admitted(other, true),
        };
        Ok(Permit::admitted(shared, held))
    }

    /// Takes a permit, awaiting at most `max_wait` for one, on any executor.
    ///
    /// Dropping the future gives up its place in the queue, and passes on a permit that was
    /// already handed to it.
    ///
    /// ```
    /// use bulkhead_config_types::SemaphoreConfig;
    /// use bulkhead_core::SemaphoreBulkhead;
    ///
    /// let db = SemaphoreBulkhead::new("db", &SemaphoreConfig::default());
    /// let rows = futures_executor::block_on(async {
    ///     let permit = db.acquire_async().await?;
    ///     Ok::<_, bulkhead_core::BulkheadError>(permit.run_async(async { 3 }).await)
    /// });
    /// assert_eq!(rows, Ok(3));
    /// ```
    pub fn acquire_async(&self) -> Acquire<'_> {
        Acquire::new(&self.shared)
    }

    /// Takes a permit like [`acquire_async`](Self::acquire_async), as an [`OwnedPermit`]
    /// that holds its own handle to this bulkhead, so it is `'static` and can outlive the
    /// caller (a streamed response body, a spawned task). The future is `'static` too.
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
    #[inline(always)]
    pub fn call<R>(&self, body: impl FnOnce() -> R) -> Result<R, BulkheadError> {
        // `acquire` by hand, so a refusal is written straight into this call's result.
        let shared = &*self.shared;
        let held = match shared.admit_fast(true) {
            Fast::Admitted => true,
            Fast::Reentrant => false,
            Fast::Refused(reason) => return Err(shared.error(reason)),
            Fast::Slow => {
                shared.admit_slow(true)?;
                true
            }
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
    /// With a call timeout set ([`with_call_timeout`](Self::with_call_timeout), `timeout`
    /// in the config), a body still running at the deadline (measured on the bulkhead's
    /// clock from when the permit was taken) is dropped, its permit returned at once, and
    /// the call fails with [`BulkheadError::CallTimeout`] (counted `timed_out` and
    /// `cancelled`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use bulkhead_config_types::SemaphoreConfig;
    /// use bulkhead_core::{BulkheadError, ManualClock, SemaphoreBulkhead};
    ///
    /// let clock = ManualClock::new();
    /// let search = SemaphoreBulkhead::with_clock("search", &SemaphoreConfig::default(), Arc::new(clock.clone()))
    ///     .with_call_timeout(Some(Duration::from_secs(2)));
    /// let mut call = Box::pin(search.call_async(std::future::pending::<()>()));
    /// let waker = std::task::Waker::noop();
    /// assert!(call.as_mut().poll(&mut std::task::Context::from_waker(&waker)).is_pending());
    /// clock.advance(Duration::from_secs(2));
    /// let out = call.as_mut().poll(&mut std::task::Context::from_waker(&waker));
    /// assert!(matches!(out, std::task::Poll::Ready(Err(BulkheadError::CallTimeout { .. }))));
    /// assert_eq!(search.available(), 25);
    /// ```
    pub async fn call_async<F: Future>(&self, body: F) -> Result<F::Output, BulkheadError> {
        let permit = self.acquire_async().await?;
        self.run_admitted(permit, body).await
    }

    /// Awaits `body` while holding `permit` (taken from this bulkhead), under the
    /// bulkhead's call timeout: what [`call_async`](Self::call_async) does once admitted.
    pub async fn run_admitted<F: Future>(
        &self,
        permit: AsyncPermit<'_>,
        body: F,
    ) -> Result<F::Output, BulkheadError> {
        let shared = &*self.shared;
        let Some((deadline, after)) = shared.call_timeout.deadline(&*shared.clock) else {
            return Ok(permit.run_async(body).await);
        };
        match Deadline::new(permit.run_async(body), &*shared.clock, Some(deadline)).await {
            Ok(output) => Ok(output),
            Err(Elapsed) => {
                let error = BulkheadError::CallTimeout {
                    name: shared.name.clone(),
                    after,
                };
                shared.report_refusal(&error);
                shared.counters.refuse(error.clone());
                Err(error)
            }
        }
    }

    /// Sets (or, with `None`, removes) how long an admitted async call may run; for
    /// building: `SemaphoreBulkhead::new(..).with_call_timeout(config.timeout.map(..))`.
    /// A synchronous body runs on the caller's thread and cannot be stopped, so it is not
    /// timed.
    pub fn with_call_timeout(self, timeout: Option<Duration>) -> Self {
        self.set_call_timeout(timeout);
        self
    }

    /// Changes the call timeout live, for calls admitted after this.
    pub fn set_call_timeout(&self, timeout: Option<Duration>) {
        self.shared.call_timeout.set(timeout);
    }

    /// The call timeout, if one is set.
    pub fn call_timeout(&self) -> Option<Duration> {
        self.shared.call_timeout.get()
    }

    /// Adds (or, with `None`, removes) a rate limit checked before each admission; for
    /// building: `SemaphoreBulkhead::new(..).with_rate_limit(config.rate_limit.as_ref())`.
    ///
    /// ```
    /// use bulkhead_config_types::{Duration, RateLimitConfig, SemaphoreConfig};
    /// use bulkhead_core::{BulkheadError, SemaphoreBulkhead};
    ///
    /// let limit = RateLimitConfig::per_process(1, Duration::from_secs(60));
    /// let search = SemaphoreBulkhead::new("search", &SemaphoreConfig::default())
    ///     .with_rate_limit(Some(&limit));
    /// assert_eq!(search.call(|| "first"), Ok("first"));
    /// let err = search.call(|| "second").unwrap_err();
    /// assert!(matches!(err, BulkheadError::RateLimited { .. }));
    /// assert!(err.retry_after().unwrap() <= std::time::Duration::from_secs(60));
    /// ```
    pub fn with_rate_limit(self, config: Option<&RateLimitConfig>) -> Self {
        self.set_rate_limit(config);
        self
    }

    /// Changes the rate limit live (`None` removes it); see [`RateLimiter::reconfigure`].
    pub fn set_rate_limit(&self, config: Option<&RateLimitConfig>) {
        self.shared.rate.reconfigure(config);
    }

    /// The rate limiter checked before each admission.
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

    /// Adds (or, with `None`, removes) an adaptive limit; for building:
    /// `SemaphoreBulkhead::new(..).with_adaptive(config.adaptive.as_ref())`.
    ///
    /// The limit then follows the latency and drops of the calls, between the
    /// configured bounds and never above `max_concurrent_calls`
    /// ([`crate::adaptive`]).
    ///
    /// ```
    /// use bulkhead_config_types::{AdaptiveAlgorithm, AdaptiveConfig, SemaphoreConfig};
    /// use bulkhead_core::SemaphoreBulkhead;
    ///
    /// let config = SemaphoreConfig { max_concurrent_calls: 100, ..SemaphoreConfig::default() };
    /// let adaptive = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(2, 10, 50);
    /// let search = SemaphoreBulkhead::new("search", &config).with_adaptive(Some(&adaptive));
    /// assert_eq!(search.limit(), 10);
    /// search.set_adaptive(None);
    /// assert_eq!(search.limit(), 100);
    /// ```
    pub fn with_adaptive(self, config: Option<&AdaptiveConfig>) -> Self {
        self.set_adaptive(config);
        self
    }

    /// Changes the adaptive limit live (`None`: back to `max_concurrent_calls`). The same
    /// algorithm with the same parameters keeps what it learned. Like
    /// [`resize`](Self::resize), it never cancels admitted calls.
    pub fn set_adaptive(&self, config: Option<&AdaptiveConfig>) {
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
        calls::mark_sync(self.shared.id()) || calls::mark_overloaded()
    }

    /// Stops admission and waits (through the bulkhead's clock) at most `timeout` for the
    /// calls that hold a permit to finish.
    ///
    /// Callers waiting for a permit and every later acquisition are refused with
    /// [`BulkheadError::ShutDown`]. Running calls are never interrupted: those still
    /// running when `timeout` passes are reported, and release their permits normally.
    pub fn shutdown(&self, timeout: Duration) -> SemaphoreShutdown {
        let shared = &*self.shared;
        // `None`: a timeout too long for an `Instant` (`Duration::MAX`) waits for good.
        let deadline = shared.clock.now().checked_add(timeout);
        let mut refused = Vec::new();
        {
            let mut waiters = shared.waiters.lock();
            shared.state.fetch_or(CLOSED, AcqRel);
            for waiter in waiters.queue.drain(..) {
                waiter.status.store(SHUT, Release);
                refused.push(waiter);
            }
            shared.state.fetch_and(!HAS_WAITERS, AcqRel);
            waiters.drain = Some(std::thread::current());
        }
        let waiters_refused = refused.len() as u64;
        for waiter in refused {
            waiter.wake();
        }
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
        shared.waiters.lock().drain = None;
        SemaphoreShutdown {
            waiters_refused,
            still_running,
        }
    }

    /// True once [`shutdown`](Self::shutdown) has been called.
    pub fn is_shut_down(&self) -> bool {
        self.shared.state.load(Relaxed) & CLOSED != 0
    }

    /// A point-in-time view of the bulkhead's limits, load and counters.
    pub fn snapshot(&self) -> BulkheadSnapshot {
        let shared = &*self.shared;
        // Counters first: a call admitted after this read but seen running below makes
        // `completed` one short for a moment, never one too many.
        let mut calls = shared.counters.counts();
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

impl Shared {
    #[inline]
    fn id(&self) -> BulkheadId {
        self as *const Shared as BulkheadId
    }

    /// Takes one permit from the count if admission is allowed right now.
    #[inline]
    fn try_take(&self) -> Result<(), BulkheadError> {
        self.try_take_fast().map_err(|reason| self.error(reason))
    }

    /// [`try_take`](Self::try_take), refusing with a one-byte reason (no error built).
    #[inline]
    fn try_take_fast(&self) -> Result<(), Reason> {
        let mut state = self.state.load(Relaxed);
        loop {
            if state & FLAGS != 0 && !self.may_barge(state) {
                return Err(if state & CLOSED != 0 {
                    Reason::ShutDown
                } else {
                    Reason::Full
                });
            }
            if available(state) <= 0 {
                return Err(Reason::Full);
            }
            match self
                .state
                .compare_exchange_weak(state, state - ONE, AcquireOrd, Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => state = actual,
            }
        }
    }

    /// With flags set, whether a newcomer may still take a permit from the count: only an
    /// unfair bulkhead that is not shut down lets newcomers pass its waiters.
    #[cold]
    fn may_barge(&self, state: isize) -> bool {
        state & CLOSED == 0 && !self.fair.load(Relaxed)
    }

    /// Sets the limit in force (the resize path): growing hands the new permits to
    /// waiters first; shrinking retires permits as their holders release them.
    fn set_limit(&self, new: u32) {
        let mut granted = Vec::new();
        {
            let mut waiters = self.waiters.lock();
            // The limit changes only here, under the queue lock. A lower limit is published
            // after the count has lost its permits, so whoever reads it (acquire) finds
            // them gone.
            let old = self.limit.load(Relaxed);
            if new > old {
                self.add_permits_locked(&mut waiters, (new - old) as usize, |w| granted.push(w));
            } else if old > new {
                self.state.fetch_sub((old - new) as isize * ONE, AcqRel);
            }
            self.limit.store(new, Release);
        }
        for waiter in granted {
            waiter.wake();
        }
    }

    /// The start of an admitted call, for an adaptive limit (the call is counted running).
    #[cold]
    pub(super) fn call_start(&self) -> CallStart {
        CallStart {
            started: self.clock.now(),
            inflight: self.running().max(1),
        }
    }

    /// A sync permit was taken on this thread: if the limit is adaptive, its start is kept
    /// for its release.
    #[inline]
    fn begin_adaptive_sync(&self, id: BulkheadId) {
        if self.adaptive.is_enabled() {
            calls::begin_sync(id, self.call_start());
            self.telemetry
                .record_sync_limit(id, self.limit.load(Relaxed));
        }
    }

    /// A sync permit of this thread is being returned: its sample, if it has a start.
    #[cold]
    #[inline(never)]
    fn end_adaptive_sync(&self, id: BulkheadId) {
        if let Some((start, overloaded)) = calls::end_sync(id) {
            let dropped = overloaded || std::thread::panicking();
            self.record_sample(start.finish(self.clock.now(), dropped));
        }
    }

    /// A finished adaptive call: feeds the limit, applies a change through the resize
    /// path, and reports it.
    #[cold]
    pub(super) fn record_sample(&self, sample: Sample) {
        if let Some((from, to)) = self.adaptive.record(sample, |to| self.set_limit(to)) {
            self.telemetry.on_limit_changed(from, to);
        }
    }

    /// Gives one permit back.
    #[inline]
    fn release(&self) {
        let mut state = self.state.load(Relaxed);
        loop {
            if state & FLAGS != 0 {
                return self.release_slow();
            }
            match self
                .state
                .compare_exchange_weak(state, state + ONE, Release, Relaxed)
            {
                Ok(_) => return,
                Err(actual) => state = actual,
            }
        }
    }

    #[cold]
    fn release_slow(&self) {
        let mut granted = None;
        let drain = {
            let mut waiters = self.waiters.lock();
            self.add_permits_locked(&mut waiters, 1, |w| granted = Some(w));
            waiters.drain.clone()
        };
        if let Some(waiter) = granted {
            waiter.wake();
        }
        if let Some(thread) = drain {
            thread.unpark();
        }
    }

    /// Adds `n` permits: first to a shrink's debt, then straight to queued waiters (each is
    /// passed to `grant`, to be woken once the lock is released), the rest to the count.
    fn add_permits_locked(
        &self,
        waiters: &mut Waiters,
        mut n: usize,
        mut grant: impl FnMut(sync::Arc<Waiter>),
    ) {
        while n > 0 {
            let debt = -available(self.state.load(AcquireOrd));
            if debt > 0 {
                let retire = n.min(debt as usize);
                self.state.fetch_add(retire as isize * ONE, AcqRel);
                n -= retire;
                continue;
            }
            match waiters.queue.pop_front() {
                Some(waiter) => {
                    waiter.status.store(GRANTED, Release);
                    grant(waiter);
                    n -= 1;
                }
                None => {
                    self.state.fetch_add(n as isize * ONE, AcqRel);
                    n = 0;
                }
            }
        }
        if waiters.queue.is_empty() {
            self.state.fetch_and(!HAS_WAITERS, AcqRel);
        }
    }

    /// Under the queue lock: takes a permit if one is free and nobody is ahead (or the
    /// bulkhead is unfair), otherwise enqueues `waiter`. Returns `Ok(true)` when it took a
    /// permit, `Ok(false)` when it enqueued.
    fn take_or_enqueue(&self, waiter: &sync::Arc<Waiter>) -> Result<bool, BulkheadError> {
        let mut waiters = self.waiters.lock();
        let fair = self.fair.load(Relaxed);
        let mut state = self.state.load(AcquireOrd);
        loop {
            if state & CLOSED != 0 {
                return Err(self.shut_down());
            }
            let next = if available(state) > 0 && (waiters.queue.is_empty() || !fair) {
                state - ONE
            } else if state & HAS_WAITERS == 0 {
                state | HAS_WAITERS
            } else {
                waiters.queue.push_back(sync::Arc::clone(waiter));
                return Ok(false);
            };
            match self.state.compare_exchange(state, next, AcqRel, AcquireOrd) {
                Ok(_) if next & HAS_WAITERS != 0 && state & HAS_WAITERS == 0 => {
                    // The flag is now set with the count seen empty: every release from
                    // here on takes the lock, so nobody can miss us.
                    waiters.queue.push_back(sync::Arc::clone(waiter));
                    return Ok(false);
                }
                Ok(_) => return Ok(true),
                Err(actual) => state = actual,
            }
        }
    }

    /// A waiter gives up (timed out or dropped). Returns true if it had been granted a
    /// permit meanwhile, which the caller now owns.
    fn leave_queue(&self, waiter: &sync::Arc<Waiter>) -> bool {
        let mut waiters = self.waiters.lock();
        if waiter.status() == GRANTED {
            return true;
        }
        if let Some(pos) = waiters
            .queue
            .iter()
            .position(|w| sync::Arc::ptr_eq(w, waiter))
        {
            waiters.queue.remove(pos);
        }
        if waiters.queue.is_empty() {
            self.state.fetch_and(!HAS_WAITERS, AcqRel);
        }
        false
    }

    /// Blocks the thread until granted a permit, shut down, or `max_wait` passed.
    fn wait_blocking(&self, max_wait: Duration) -> Waited {
        let waiter = Waiter::new(Wake::Thread(std::thread::current()));
        match self.take_or_enqueue(&waiter) {
            Ok(true) => return Waited::Granted,
            Ok(false) => {}
            Err(_) => return Waited::ShutDown,
        }
        let start = self.clock.now();
        let deadline = start + max_wait;
        loop {
            if let Some(resolved) = waiter.resolved() {
                return resolved;
            }
            if self.clock.now() >= deadline {
                return self.give_up(&waiter, start);
            }
            self.clock.park_until(deadline);
        }
    }

    /// A queued waiter's `max_wait` has passed: it leaves the queue, unless a permit or
    /// the shutdown reached it first.
    fn give_up(&self, waiter: &sync::Arc<Waiter>, start: Instant) -> Waited {
        if self.leave_queue(waiter) {
            Waited::Granted
        } else if waiter.status() == SHUT {
            Waited::ShutDown
        } else {
            Waited::TimedOut(self.clock.now().saturating_duration_since(start))
        }
    }

    /// Non-waiting admission of a caller that is not inside: the rate limit, then a permit.
    #[inline]
    fn try_admit(&self) -> Result<RawPermit<'_>, BulkheadError> {
        if self.rate.is_enabled() {
            self.rate
                .try_acquire(&self.name)
                .map_err(|err| self.refuse(err))?;
        }
        match self.try_take() {
            Ok(()) => Ok(self.admitted()),
            Err(err) => Err(self.refuse(err)),
        }
    }

    /// The uncontended admission of [`SemaphoreBulkhead::acquire`] (`may_wait`) and
    /// [`try_acquire`](SemaphoreBulkhead::try_acquire): the re-entry check, then a permit
    /// from the count, the mark made once it is taken. A refusal that needs no wait
    /// (fail fast, `max_wait: 0`, or `try_acquire`) is counted here; a rate limit or a
    /// possible wait in the queue goes to the slow path with nothing done yet.
    ///
    /// Out of line on purpose: compiled in this crate, the re-entry thread-local is a direct
    /// `%fs` access rather than a call through `LocalKey` from the caller's crate, and the
    /// decision comes back in a register.
    #[inline(never)]
    fn admit_fast(&self, may_wait: bool) -> Fast {
        let id = self.id();
        if reentry::is_inside(id) {
            self.counters.reentrant.fetch_add(1, Relaxed);
            return Fast::Reentrant;
        }
        if self.rate.is_enabled() {
            return Fast::Slow;
        }
        match self.try_take_fast() {
            Ok(()) => {
                reentry::enter(id).forget();
                self.counters.permitted.fetch_add(1, Relaxed);
                self.telemetry.begin_sync_call(id);
                self.begin_adaptive_sync(id);
                Fast::Admitted
            }
            // Fail fast (`max_wait: 0`, the default): refuse without the slow path.
            Err(reason) if !may_wait || self.max_wait_nanos.load(Relaxed) == 0 => {
                self.refuse_fast(reason);
                Fast::Refused(reason)
            }
            Err(_) => Fast::Slow,
        }
    }

    /// Past [`admit_fast`](Self::admit_fast) (a rate limit, or a possible wait), the thread
    /// not inside: for [`SemaphoreBulkhead::acquire`] (`may_wait`) the rate limit (waiting
    /// up to its `timeout`), then a permit (waiting up to `max_wait`); for
    /// [`try_acquire`](SemaphoreBulkhead::try_acquire) the same without waiting. `Ok` once
    /// admitted: a held permit (counted `permitted`) whose mark is made; the caller builds
    /// the [`Permit`] that owns both.
    #[cold]
    #[inline(never)]
    fn admit_slow(&self, may_wait: bool) -> Result<(), BulkheadError> {
        let inside = reentry::enter(self.id());
        // On a refusal, `inside` drops and the mark goes with it.
        let raw = if may_wait {
            self.admit_blocking_slow()?
        } else {
            self.try_admit()?
        };
        hand_over(raw, inside);
        Ok(())
    }

    /// [`SemaphoreBulkhead::acquire`] (`may_wait`) or
    /// [`try_acquire`](SemaphoreBulkhead::try_acquire) when [`admit_fast`](Self::admit_fast)
    /// did not admit: the refusal's error, or the slow path.
    #[cold]
    #[inline(never)]
    fn not_admitted(&self, fast: Fast, may_wait: bool) -> Result<Permit<'_>, BulkheadError> {
        match fast {
            Fast::Refused(reason) => Err(self.error(reason)),
            _ => self.admit_slow(may_wait),
        }
        .map(|()| Permit::admitted(self, true))
    }

    /// Returns the permit of a [`Permit`] held on this thread: removes the thread's
    /// re-entry mark, counts `panicked` if the thread is panicking, gives the permit back.
    /// Out of line for the same reason as [`admit_fast`](Self::admit_fast).
    #[inline(never)]
    fn exit_held(&self) {
        self.telemetry.end_sync_call(self.id());
        reentry::leave(self.id());
        if std::thread::panicking() {
            self.counters.panicked.fetch_add(1, Relaxed);
        }
        if self.adaptive.may_sample() {
            self.end_adaptive_sync(self.id());
        }
        self.release();
    }

    /// Blocking admission past the fast path: the rate limit (waiting up to its
    /// `timeout`), then a permit (waiting up to `max_wait`).
    #[cold]
    fn admit_blocking_slow(&self) -> Result<RawPermit<'_>, BulkheadError> {
        self.rate
            .acquire_blocking(&self.name)
            .map_err(|err| self.refuse(err))?;
        let refused = match self.try_take() {
            Ok(()) => return Ok(self.admitted()),
            Err(err) => err,
        };
        match self.max_wait_after(refused) {
            Ok(max_wait) => {
                let since = self.clock.now();
                let waited = self.wait_blocking(max_wait);
                self.record_wait(&waited, since);
                self.settle(waited)
            }
            Err(refused) => Err(self.refuse(refused)),
        }
    }

    /// After the fast path refused with `refused`: how long this caller may wait in the
    /// queue, or the refusal to give now (no `max_wait`, or shut down).
    fn max_wait_after(&self, refused: BulkheadError) -> Result<Duration, BulkheadError> {
        let max_wait = Duration::from_nanos(self.max_wait_nanos.load(Relaxed));
        if max_wait.is_zero() || matches!(refused, BulkheadError::ShutDown { .. }) {
            Err(refused)
        } else {
            Ok(max_wait)
        }
    }

    /// Records the wait of a caller that queued since `since` and was granted a permit.
    fn record_wait(&self, waited: &Waited, since: Instant) {
        if matches!(waited, Waited::Granted) {
            let now = self.clock.now();
            self.telemetry
                .record_wait(now.saturating_duration_since(since));
        }
    }

    /// Turns the end of a wait in the queue into a permit or a counted refusal.
    fn settle(&self, waited: Waited) -> Result<RawPermit<'_>, BulkheadError> {
        match waited {
            Waited::Granted => Ok(self.admitted()),
            Waited::TimedOut(waited) => Err(self.refuse(self.timeout(waited))),
            Waited::ShutDown => Err(self.refuse(self.shut_down())),
        }
    }

    /// Calls holding a permit right now.
    fn running(&self) -> u32 {
        clamp_u32(self.limit.load(Relaxed) as isize - available(self.state.load(AcquireOrd)))
    }

    /// A permit for an admitted call, counted `permitted`.
    #[inline]
    fn admitted(&self) -> RawPermit<'_> {
        self.counters.permitted.fetch_add(1, Relaxed);
        RawPermit::new(self, true)
    }

    /// An inline permit for a re-entrant call, counted `reentrant`; holds nothing.
    fn reentrant(&self) -> RawPermit<'_> {
        self.counters.reentrant.fetch_add(1, Relaxed);
        RawPermit::new(self, false)
    }

    /// The error of a fast-path refusal, built only once the caller has it.
    #[cold]
    #[inline(never)]
    fn error(&self, reason: Reason) -> BulkheadError {
        match reason {
            Reason::Full => BulkheadError::Full {
                name: self.name.clone(),
            },
            Reason::ShutDown => self.shut_down(),
        }
    }

    fn shut_down(&self) -> BulkheadError {
        BulkheadError::ShutDown {
            name: self.name.clone(),
        }
    }

    fn timeout(&self, waited: Duration) -> BulkheadError {
        BulkheadError::Timeout {
            name: self.name.clone(),
            waited,
        }
    }

    /// Counts and reports a refusal, handing the error back.
    #[inline]
    fn refuse(&self, err: BulkheadError) -> BulkheadError {
        // Relaxed loads decide whether anyone records WARN events or listens to events;
        // only then is anything built (a refusal storm with neither costs nothing extra).
        if self.telemetry.refusals_observed() {
            self.report_refusal(&err);
        }
        self.counters.refuse(err)
    }

    /// [`refuse`](Self::refuse) for a fast-path refusal: counted by its reason; the error
    /// is built only for a WARN subscriber or an event listener.
    #[inline]
    fn refuse_fast(&self, reason: Reason) {
        if self.telemetry.refusals_observed() {
            self.report_refusal_fast(reason);
        }
        self.counters.refused[reason as usize].fetch_add(1, Relaxed);
    }

    #[cold]
    #[inline(never)]
    fn report_refusal_fast(&self, reason: Reason) {
        self.report_refusal(&self.error(reason));
    }

    /// The WARN event and the listeners of one refusal: reason, active, queued (callers
    /// waiting), limit. Never called with the waiter queue locked.
    #[cold]
    #[inline(never)]
    fn report_refusal(&self, err: &BulkheadError) {
        self.telemetry.on_refused(err, || Load {
            active: self.running(),
            queued: u32::try_from(self.waiters.lock().queue.len()).unwrap_or(u32::MAX),
            limit: self.limit.load(Relaxed),
        });
    }
}

/// Keeps an admitted permit and its thread mark for the [`Permit`] the caller builds with
/// [`Permit::admitted`] (which returns both when dropped).
fn hand_over(raw: RawPermit<'_>, inside: reentry::Entered) {
    debug_assert!(raw.held);
    inside.forget();
    raw.shared.telemetry.begin_sync_call(raw.shared.id());
    raw.shared.begin_adaptive_sync(raw.shared.id());
    std::mem::forget(raw);
}

fn permits_to_state(permits: u32) -> isize {
    permits as isize * ONE
}

fn clamp_u32(n: isize) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

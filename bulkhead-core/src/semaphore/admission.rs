//! Admission and its accounting for a semaphore bulkhead: who gets a permit (re-entry
//! check, rate limit, the count, a wait in the queue), how each decision is counted and
//! reported, and the error a refusal carries. The permits themselves move in `state.rs`.
//!
//! # Invariant
//!
//! 5. Every admitted call is counted `permitted` once, and once it is over exactly one of
//!    `completed`, `panicked` or `cancelled`; every refusal is counted under its reason.
//!    (A call of a partition that finds a free permit at once is counted `permitted` by its
//!    partition instead, after its permit is taken, as `permitted` is:
//!    `shares/partition.rs`; the snapshot adds those counts.)
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
//! # Code shape
//!
//! `acquire`, `try_acquire` and `call` are inlined into the caller and make two calls into
//! this crate: [`Shared::admit_fast`] (re-entry check, permit, mark, `permitted`; its
//! decision comes back as a two-byte [`Fast`], in a register) and, when the permit drops,
//! [`Shared::exit_held`]. Compiled here, the re-entry thread-local is a direct thread-local
//! access, not a call through `LocalKey` from the caller's crate, and neither the permit
//! nor a refusal travels through memory between functions (the sync [`Permit`] has no field
//! with drop glue for the same reason). A refusal carries a one-byte [`Reason`] until the
//! error is built, once, in a `#[cold]` function; the rate limit and waiting in the queue
//! are `#[cold]` out-of-line paths.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::permit::{Held, RawPermit};
use super::state::Waited;
use super::{Permit, Shared};
use crate::adaptive::calls::{self, CallStart};
use crate::admission::{self, First, Gate};
use crate::frame::{self, BulkheadId, SyncEnd};
use crate::rate_limit::{Lease, RateLimiter};
use crate::stats;
use crate::telemetry::{Load, Telemetry};
use crate::{BulkheadError, BulkheadName};

/// What [`Shared::admit_fast`] decided (two bytes: see *Code shape* above).
#[derive(Clone, Copy)]
pub(super) enum Fast {
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
pub(super) enum Reason {
    Full = stats::FULL as u8,
    ShutDown = stats::SHUT_DOWN as u8,
}

/// Steps 1–3 of the order (`crate::admission`) read this. The permit word refuses a
/// shut-down bulkhead itself, so the gate is open whenever no rate limit (nor cluster
/// lease) is set: one relaxed load.
impl Gate for Shared {
    #[inline(always)]
    fn id(&self) -> BulkheadId {
        self.id()
    }

    #[inline(always)]
    fn count_reentrant(&self) {
        self.counters.reentrant.fetch_add(1, Relaxed);
    }

    #[inline(always)]
    fn is_open(&self) -> bool {
        !self.rate.is_enabled()
    }

    fn is_shut_down(&self) -> bool {
        self.is_shut_down()
    }

    fn rate(&self) -> &RateLimiter {
        &self.rate
    }

    fn name(&self) -> &BulkheadName {
        &self.name
    }

    fn refuse(&self, error: BulkheadError) -> BulkheadError {
        self.refuse(error)
    }
}

impl Shared {
    #[inline]
    pub(super) fn id(&self) -> BulkheadId {
        self as *const Shared as BulkheadId
    }

    /// The start of an admitted call, for an adaptive limit (the call is counted running):
    /// `None` without one; timed one time in the limit's `sample_every`.
    #[inline]
    pub(super) fn call_start(&self) -> Option<CallStart> {
        self.adaptive.begin(|| self.timed_start())
    }

    /// The start of a call that is timed.
    #[cold]
    fn timed_start(&self) -> CallStart {
        CallStart::timed(self.clock.now(), self.running().max(1))
    }

    /// A sync permit of an adaptive bulkhead was taken on this thread, its frame pushed:
    /// the call is timed if drawn (out of line), and its span, if it has one, records the
    /// limit in force.
    #[inline(always)]
    fn begin_adaptive_sync(&self, every: u32) {
        if calls::draw(every) {
            frame::time_sync(self.timed_start());
        }
        Telemetry::record_sync_limit(self.limit.load(Relaxed));
    }

    /// The end of an adaptive call that has something to record (timed, or a drop): feeds
    /// the limit, applies a change through the resize path, and reports it.
    #[inline(never)]
    pub(super) fn end_adaptive(&self, start: CallStart, dropped: bool) {
        let now = || self.clock.now();
        if let Some((from, to)) = self
            .adaptive
            .end(start, dropped, now, |to| self.set_limit(to))
        {
            self.telemetry.on_limit_changed(from, to);
        }
    }

    /// The uncontended admission of [`SemaphoreBulkhead::acquire`] (`may_wait`) and
    /// [`try_acquire`](SemaphoreBulkhead::try_acquire): the re-entry check, then a permit
    /// from the count, the mark made once it is taken. A refusal that needs no wait
    /// (fail fast, `max_wait: 0`, or `try_acquire`) is counted here; a rate limit or a
    /// possible wait in the queue goes to the slow path with nothing done yet.
    /// Out of line: see *Code shape* above.
    #[inline(never)]
    pub(super) fn admit_fast(&self, may_wait: bool) -> Fast {
        match admission::first(self) {
            First::Inside => return Fast::Reentrant,
            First::Gated => return Fast::Slow,
            First::Open => {}
        }
        match self.try_take_fast() {
            Ok(()) => {
                self.counters.permitted.fetch_add(1, Relaxed);
                self.begin_held(self.id());
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

    /// [`admit_fast`](Self::admit_fast) for a call of a partition: a permit only if one is
    /// free now, **not** counted `permitted` (its partition counts it, and the snapshot
    /// adds the partitions' counts to `permitted`: one atomic add less per call); or a
    /// re-entrant one. Anything else is [`Fast::Slow`] with nothing done or counted: the
    /// caller then takes the counted path. Out of line: see *Code shape* above.
    #[inline(never)]
    pub(super) fn admit_at_once_uncounted(&self) -> Fast {
        match admission::first(self) {
            First::Inside => return Fast::Reentrant,
            First::Gated => return Fast::Slow,
            First::Open => {}
        }
        if self.try_take_fast().is_err() {
            return Fast::Slow;
        }
        self.begin_held(self.id());
        Fast::Admitted
    }

    /// A sync permit was taken on this thread: its frame (the re-entry mark, and for an
    /// adaptive limit the call's start), then the call's telemetry.
    #[inline(always)]
    fn begin_held(&self, id: BulkheadId) {
        let every = self.adaptive.sample_every();
        frame::begin_sync(id, every.is_some());
        self.telemetry.begin_sync_call(id);
        if let Some(every) = every {
            self.begin_adaptive_sync(every);
        }
    }

    /// Past [`admit_fast`](Self::admit_fast) (a rate limit, or a possible wait), the thread
    /// not inside: steps 2 and 3 of the order if the gate is closed (`crate::admission`:
    /// shut down, then the rate limit, waiting up to its `timeout` if `may_wait`), then a
    /// permit, waiting up to `max_wait` for [`SemaphoreBulkhead::acquire`] (`may_wait`),
    /// not at all for [`try_acquire`](SemaphoreBulkhead::try_acquire). `Ok` once admitted:
    /// a held permit (counted `permitted`) whose mark is made; the caller builds the
    /// [`Permit`] that owns both.
    #[cold]
    #[inline(never)]
    pub(super) fn admit_slow(&self, may_wait: bool) -> Result<Held, BulkheadError> {
        if !Gate::is_open(self) {
            admission::gated(self, may_wait)?;
        }
        let raw = match self.try_take() {
            Ok(()) => RawPermit::new(self, self.admitted()?),
            Err(refused) if may_wait => self.wait_for_permit(refused)?,
            Err(refused) => return Err(self.refuse(refused)),
        };
        Ok(self.hand_over(raw))
    }

    /// Keeps a permit the slow path admitted for the [`Permit`] the caller builds with
    /// [`Permit::admitted`] from what this returns (and which gives it back when dropped):
    /// its frame pushed, as on the fast path.
    fn hand_over(&self, raw: RawPermit<'_>) -> Held {
        debug_assert!(raw.held.is_held());
        self.begin_held(self.id());
        let held = raw.held;
        std::mem::forget(raw);
        held
    }

    /// [`SemaphoreBulkhead::acquire`] (`may_wait`) or
    /// [`try_acquire`](SemaphoreBulkhead::try_acquire) when [`admit_fast`](Self::admit_fast)
    /// did not admit: the refusal's error, or the slow path.
    #[cold]
    #[inline(never)]
    pub(super) fn not_admitted(
        &self,
        fast: Fast,
        may_wait: bool,
    ) -> Result<Permit<'_>, BulkheadError> {
        // The refusal is made in the result itself: a refusal made first and moved in is
        // copied in wide loads right behind the narrow stores that built it (a
        // store-forwarding stall, a third of a refused `#[bulkhead] fn`'s time).
        match fast {
            Fast::Refused(reason) => Err(self.error(reason)),
            _ => self
                .admit_slow(may_wait)
                .map(|held| Permit::admitted(self, held)),
        }
    }

    /// Returns the permit of a [`Permit`] held on this thread: removes the thread's frame
    /// of it, counts `panicked` if the thread is panicking, gives the permit back.
    /// Out of line: see *Code shape* above.
    #[inline(never)]
    pub(super) fn exit_held(&self) {
        let id = self.id();
        // Each arm counts a panic itself: the frame's answer is not kept across the check.
        match frame::end_sync(id) {
            None => {
                self.count_panicked();
                self.give_back();
            }
            Some(end) => {
                self.count_panicked();
                self.exit_framed(id, end);
            }
        }
    }

    /// Counts `panicked` if the thread is panicking (a sync permit returned by an unwind).
    #[inline(always)]
    fn count_panicked(&self) {
        if std::thread::panicking() {
            self.counters.panicked.fetch_add(1, Relaxed);
        }
    }

    /// [`exit_held`](Self::exit_held) of a frame with more to it: the adaptive limit fed
    /// (a timed call, or a drop), the permit given back, then the call's scope closed (its
    /// listeners told after the permit is free).
    #[cold]
    #[inline(never)]
    fn exit_framed(&self, id: BulkheadId, end: SyncEnd) {
        if end.flags & frame::ADAPTIVE != 0 {
            let dropped = end.flags & frame::OVERLOADED != 0 || std::thread::panicking();
            if dropped || end.flags & frame::TIMED != 0 {
                self.end_adaptive(end.start, dropped);
            }
        }
        self.give_back();
        if end.flags & frame::SCOPED != 0 {
            self.telemetry.end_sync_call(id);
        }
    }

    /// The cluster lease of a call that took one goes back, before its permit. Out of
    /// line: only a bulkhead with `cluster:` gets here.
    #[cold]
    #[inline(never)]
    pub(super) fn end_lease(&self, lease: Lease) {
        self.rate.end_call(lease);
    }

    /// A blocking caller the count `refused`: waits in the queue up to `max_wait` for a
    /// permit, or is refused now (no `max_wait`, or shut down).
    fn wait_for_permit(&self, refused: BulkheadError) -> Result<RawPermit<'_>, BulkheadError> {
        match self.max_wait_after(refused) {
            Ok(max_wait) => {
                let since = self.clock.now();
                let waited = self.wait_blocking(max_wait);
                self.record_wait(&waited, since);
                Ok(RawPermit::new(self, self.settle(waited)?))
            }
            Err(refused) => Err(self.refuse(refused)),
        }
    }

    /// After the count refused with `reason`: how long this caller may wait in the queue,
    /// or `None` to refuse now (no `max_wait`, or shut down).
    pub(super) fn max_wait_for(&self, reason: Reason) -> Option<Duration> {
        let max_wait = Duration::from_nanos(self.max_wait_nanos.load(Relaxed));
        (!max_wait.is_zero() && reason != Reason::ShutDown).then_some(max_wait)
    }

    /// After the fast path refused with `refused`: how long this caller may wait in the
    /// queue, or the refusal to give now (no `max_wait`, or shut down).
    pub(super) fn max_wait_after(&self, refused: BulkheadError) -> Result<Duration, BulkheadError> {
        let max_wait = Duration::from_nanos(self.max_wait_nanos.load(Relaxed));
        if max_wait.is_zero() || matches!(refused, BulkheadError::ShutDown { .. }) {
            Err(refused)
        } else {
            Ok(max_wait)
        }
    }

    /// Records the wait of a caller that queued since `since` and was granted a permit.
    pub(super) fn record_wait(&self, waited: &Waited, since: Instant) {
        if matches!(waited, Waited::Granted) {
            let now = self.clock.now();
            self.telemetry
                .record_wait(now.saturating_duration_since(since));
        }
    }

    /// Turns the end of a wait in the queue into what its permit holds (the caller makes
    /// the permit), or a counted refusal.
    pub(super) fn settle(&self, waited: Waited) -> Result<Held, BulkheadError> {
        match waited {
            Waited::Granted => self.admitted(),
            Waited::TimedOut(waited) => Err(self.refuse(self.timeout(waited))),
            Waited::ShutDown => Err(self.refuse(self.shut_down())),
        }
    }

    /// What the permit of an admitted call holds, counted `permitted`, once the call has
    /// its cluster lease (`cluster:`; every admission with a lease comes here, the gate
    /// sending it off the fast path). Refused a lease, the permit goes back and the
    /// refusal is counted. The caller makes the permit ([`RawPermit::new`]) at once: only
    /// the `Held` travels, not a permit built here and moved (`acquire::install`).
    #[inline]
    pub(super) fn admitted(&self) -> Result<Held, BulkheadError> {
        let held = if self.rate.has_leases() {
            self.take_lease()?
        } else {
            Held::PERMIT
        };
        self.counters.permitted.fetch_add(1, Relaxed);
        Ok(held)
    }

    /// An admitted call that needs no cluster lease (the rate limit's gate, which leases
    /// also set, is off), counted `permitted`: what its permit holds, for the caller to
    /// make the permit (in place: `acquire::install`).
    #[inline(always)]
    pub(super) fn count_permitted(&self) -> Held {
        self.counters.permitted.fetch_add(1, Relaxed);
        Held::PERMIT
    }

    /// The cluster lease of a call the count admitted (a reload may just have switched
    /// the limit off: then none); refused one, its permit goes back and the refusal is
    /// counted. Out of line, so that a call without leases inlines
    /// [`admitted`](Self::admitted) down to the check for them.
    #[cold]
    #[inline(never)]
    fn take_lease(&self) -> Result<Held, BulkheadError> {
        match self.rate.begin_call() {
            Ok(Some(lease)) => Ok(Held::leased(lease)),
            Ok(None) => Ok(Held::PERMIT),
            Err(refused) => {
                self.give_back();
                Err(self.refuse(refused))
            }
        }
    }

    /// The error of a fast-path refusal, built only once the caller has it.
    #[cold]
    #[inline(never)]
    pub(super) fn error(&self, reason: Reason) -> BulkheadError {
        match reason {
            Reason::Full => BulkheadError::Full {
                name: self.name.clone(),
            },
            Reason::ShutDown => self.shut_down(),
        }
    }

    /// The refusal of an admitted async call whose body was still running `after` the
    /// permit was taken: reported and counted like a refusal.
    #[cold]
    #[inline(never)]
    pub(super) fn call_timed_out(&self, after: Duration) -> BulkheadError {
        let error = BulkheadError::CallTimeout {
            name: self.name.clone(),
            after,
        };
        self.report_refusal(&error);
        self.counters.refuse(error.clone());
        error
    }

    pub(super) fn shut_down(&self) -> BulkheadError {
        BulkheadError::ShutDown {
            name: self.name.clone(),
        }
    }

    pub(super) fn timeout(&self, waited: Duration) -> BulkheadError {
        BulkheadError::Timeout {
            name: self.name.clone(),
            waited,
        }
    }

    /// Counts and reports a refusal, handing the error back.
    #[inline]
    pub(super) fn refuse(&self, err: BulkheadError) -> BulkheadError {
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
    pub(super) fn refuse_fast(&self, reason: Reason) {
        if self.telemetry.refusals_observed() {
            self.report_refusal_fast(reason);
        }
        self.counters.refused[reason as usize].fetch_add(1, Relaxed);
    }

    #[cold]
    #[inline(never)]
    pub(super) fn report_refusal_fast(&self, reason: Reason) {
        self.report_refusal(&self.error(reason));
    }

    /// The WARN event and the listeners of one refusal: reason, active, queued (callers
    /// waiting), limit. Never called with the waiter queue locked.
    #[cold]
    #[inline(never)]
    pub(super) fn report_refusal(&self, err: &BulkheadError) {
        self.telemetry.on_refused(err, || Load {
            active: self.running(),
            queued: u32::try_from(self.waiters.lock().queue.len()).unwrap_or(u32::MAX),
            limit: self.limit.load(Relaxed),
        });
    }
}

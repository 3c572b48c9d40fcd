//! Permits: what an admitted (or re-entrant) call holds, and how its outcome is counted.
//!
//! A held permit is returned exactly once, when its guard drops (also while a panic
//! unwinds); the call is then counted `panicked` if the thread is panicking, `cancelled` if
//! an async body was dropped before it finished, and `completed` otherwise. A re-entrant
//! permit holds nothing and returns nothing.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};

use super::call::RunAdmitted;
use super::{SemaphoreBulkhead, Shared};
use crate::adaptive::calls::CallStart;
use crate::events::CallOutcome;
use crate::frame::{self, BulkheadId};
use crate::rate_limit::Lease;
use crate::telemetry::CallScope;

/// What a permit holds, and gives back when it drops: nothing (a re-entrant call runs
/// inside the permit its thread already holds), a permit of the count, or a permit and the
/// cluster lease its call took (`cluster:`), given back to the lease set it came from even
/// if a reload replaced that set since. One `u32` (0, 1, or the lease's generation + 1),
/// tested like a `bool` on the fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Held(u32);

impl Held {
    /// Nothing: a re-entrant call.
    pub(super) const NOTHING: Held = Held(0);
    /// A permit of the count, without a lease.
    pub(super) const PERMIT: Held = Held(1);

    /// A permit and `lease`.
    pub(super) fn leased(lease: Lease) -> Held {
        // A generation is below `u32::MAX`: no overflow.
        Held(lease.generation() + 1)
    }

    /// True for a permit of the count (with or without a lease).
    #[inline(always)]
    pub(super) fn is_held(self) -> bool {
        self.0 != 0
    }

    /// The lease it holds, if any.
    #[inline(always)]
    pub(super) fn lease(self) -> Option<Lease> {
        // One comparison on the path of every permit; the conversion only with a lease.
        if self.0 > 1 {
            Lease::of_generation(self.0 - 1)
        } else {
            None
        }
    }
}

/// A permit as the accounting sees it: held (returned on drop) or re-entrant (nothing to
/// return). Counts the call's outcome when dropped.
pub(super) struct RawPermit<'a> {
    pub(super) shared: &'a Shared,
    pub(super) held: Held,
    /// Set when an async body was dropped before it finished.
    pub(super) cancelled: bool,
    /// An async call's span and start, only while tracing or a listener wants them; the
    /// span is entered by [`RunAsync`] during each poll. (A sync permit's scope is kept by
    /// its frame on its thread instead: `crate::frame`.)
    pub(super) scope: Option<Box<CallScope>>,
    /// An async call's start, if the bulkhead's limit is adaptive.
    pub(super) start: Option<CallStart>,
    /// The call was marked overloaded (a drop for the adaptive limit).
    pub(super) overloaded: bool,
}

impl<'a> RawPermit<'a> {
    #[inline]
    pub(super) fn new(shared: &'a Shared, held: Held) -> Self {
        RawPermit {
            shared,
            held,
            cancelled: false,
            scope: None,
            start: None,
            overloaded: false,
        }
    }

    #[inline]
    fn id(&self) -> BulkheadId {
        self.shared.id()
    }
}

impl RawPermit<'_> {
    /// The end of the call: the common one — a plain permit (no lease), no scope, no
    /// adaptive start, not cancelled and no panic — is `completed` (derived) and the permit
    /// given back; anything else is [`finish`], out of line. A re-entrant permit returns
    /// nothing. Out of line itself, so that the futures that may drop a permit stay small.
    #[inline(never)]
    fn end(&mut self) {
        if self.held == Held::PERMIT
            && !self.cancelled
            && self.start.is_none()
            && self.scope.is_none()
            && !std::thread::panicking()
        {
            self.shared.give_back();
        } else if self.held.is_held() {
            self.finish_slow();
        }
    }

    /// [`finish`] for a permit with more to its end than giving the permit back: a lease,
    /// a span or listener, an adaptive start, a cancellation or a panic.
    #[cold]
    #[inline(never)]
    fn finish_slow(&mut self) {
        let ended = Ended {
            cancelled: self.cancelled,
            start: self.start,
            overloaded: self.overloaded,
        };
        finish(self.shared, self.held, ended, self.scope.take());
    }
}

impl Drop for RawPermit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.end();
    }
}

/// How a call under an async or owned permit ended, besides a panic.
struct Ended {
    cancelled: bool,
    start: Option<CallStart>,
    overloaded: bool,
}

/// Counts the outcome of a call that held a permit and returns the permit (and its
/// lease); a re-entrant permit returns nothing.
#[inline]
fn finish(shared: &Shared, held: Held, ended: Ended, scope: Option<Box<CallScope>>) {
    if !held.is_held() {
        return;
    }
    if let Some(lease) = held.lease() {
        shared.end_lease(lease);
    }
    // `completed` is not counted here: the snapshot derives it (admitted calls that are
    // over and neither panicked nor cancelled), keeping one atomic add off the fast path.
    let outcome = if std::thread::panicking() {
        shared.counters.panicked.fetch_add(1, Relaxed);
        CallOutcome::Panicked
    } else if ended.cancelled {
        shared.counters.cancelled.fetch_add(1, Relaxed);
        CallOutcome::Cancelled
    } else {
        CallOutcome::Completed
    };
    if let Some(start) = ended.start {
        // A panic, a cancellation (a dropped future: a timeout around the call) or a mark.
        let dropped = ended.overloaded || outcome != CallOutcome::Completed;
        shared.end_adaptive(start, dropped);
    }
    shared.give_back();
    if let Some(scope) = scope {
        shared.telemetry.on_finished(scope.started, outcome);
    }
}

/// A permit of a [`SemaphoreBulkhead`](super::SemaphoreBulkhead), held by a synchronous caller; returned when dropped
/// (also during a panic's unwinding).
///
/// While it lives, the thread that acquired it counts as inside the bulkhead, so a nested
/// call to the same bulkhead on this thread runs inline instead of waiting for a permit it
/// holds itself. It therefore stays on that thread (`!Send`); async code gets an
/// [`AsyncPermit`] instead.
#[must_use = "the permit is returned as soon as it is dropped"]
pub struct Permit<'a> {
    // Not a `RawPermit`: no field with drop glue (see `admission.rs`, *Code shape*).
    shared: &'a Shared,
    /// Holds a permit (and its thread's re-entry mark), or nothing for a re-entrant permit.
    held: Held,
    // A held permit owns its thread's re-entry mark, so it stays on that thread.
    _not_send: PhantomData<*const ()>,
}

impl<'a> Permit<'a> {
    /// A permit admitted by `shared`'s fast or slow path. A held permit was counted
    /// `permitted`, and its thread's re-entry mark is already made: the permit owns both
    /// and returns them when dropped. A re-entrant permit ([`Held::NOTHING`]) holds nothing.
    #[inline(always)]
    pub(super) fn admitted(shared: &'a Shared, held: Held) -> Self {
        // (`telemetry.begin_sync_call` was made by the admission, in this crate.)
        Permit {
            shared,
            held,
            _not_send: PhantomData,
        }
    }

    /// True when this permit was given to a re-entrant call: it holds no permit, and the
    /// call runs inline inside the permit its thread already holds.
    pub fn is_reentrant(&self) -> bool {
        !self.held.is_held()
    }

    /// Marks this call as overloaded: a drop for the bulkhead's adaptive limit (see
    /// [`adaptive::mark_overloaded`](crate::adaptive::mark_overloaded)). Returns false,
    /// changing nothing, if the limit is not adaptive or the permit is re-entrant.
    pub fn mark_overloaded(&self) -> bool {
        self.held.is_held() && frame::mark_sync(self.shared.id())
    }
}

impl Drop for Permit<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // The mark, the `panicked` count and the permit, in one out-of-line call into this
        // crate (a sync permit is never `cancelled`); a lease first, out of line too.
        if self.held == Held::PERMIT {
            self.shared.exit_held();
        } else if let Some(lease) = self.held.lease() {
            self.shared.end_lease(lease);
            self.shared.exit_held();
        }
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("bulkhead", &self.shared.name)
            .field("reentrant", &self.is_reentrant())
            .finish()
    }
}

/// A permit of a [`SemaphoreBulkhead`](super::SemaphoreBulkhead) held by an async caller; returned when dropped.
///
/// It does not mark any thread by itself (a task may move between threads); run the body
/// through [`run_async`](Self::run_async) so that nested calls to the same bulkhead made
/// while it is polled run inline.
#[must_use = "the permit is returned as soon as it is dropped"]
pub struct AsyncPermit<'a> {
    pub(super) raw: RawPermit<'a>,
}

impl<'a> AsyncPermit<'a> {
    /// True when this permit was given to a re-entrant call (see [`Permit::is_reentrant`]).
    pub fn is_reentrant(&self) -> bool {
        !self.raw.held.is_held()
    }

    /// Marks this call as overloaded: a drop for the bulkhead's adaptive limit. Inside
    /// [`run_async`](Self::run_async)'s body, call
    /// [`adaptive::mark_overloaded`](crate::adaptive::mark_overloaded) instead.
    pub fn mark_overloaded(&mut self) {
        self.raw.overloaded = true;
    }

    /// Awaits `body` while holding this permit, marking the bulkhead "entered" on the
    /// polling thread during each poll. The permit is returned when the body finishes or
    /// the returned future is dropped (then the call counts as `cancelled`).
    #[inline]
    pub fn run_async<F: Future>(self, body: F) -> RunAsync<'a, F> {
        RunAsync {
            permit: Some(self),
            body,
        }
    }

    /// [`run_async`](Self::run_async) under the bulkhead's call timeout: what
    /// [`SemaphoreBulkhead::call_async`](super::SemaphoreBulkhead::call_async) does once
    /// admitted. Past the timeout the body is dropped, the permit returned and the call
    /// answered `Err(`[`BulkheadError::CallTimeout`](crate::BulkheadError::CallTimeout)`)`.
    ///
    /// ```
    /// use bulkhead::config::SemaphoreConfig;
    /// use bulkhead::SemaphoreBulkhead;
    ///
    /// let db = SemaphoreBulkhead::new("db", &SemaphoreConfig::default());
    /// let rows = futures_executor::block_on(async {
    ///     let permit = db.acquire_async().await?;
    ///     permit.run_timed(async { 3 }).await
    /// });
    /// assert_eq!(rows, Ok(3));
    /// assert_eq!(db.available(), db.limit());
    /// ```
    #[inline]
    pub fn run_timed<F: Future>(self, body: F) -> RunAdmitted<'a, F> {
        let shared = self.raw.shared;
        RunAdmitted::new(shared, self.run_async(body))
    }
}

impl AsyncPermit<'_> {
    /// Whether it holds a permit, its call's scope and its adaptive start; the permit
    /// itself is forgotten (with its scope taken, nothing of it is left to drop), for an
    /// [`OwnedPermit`] to hold instead.
    pub(super) fn into_parts(self) -> (Held, Option<Box<CallScope>>, Option<CallStart>) {
        let mut raw = ManuallyDrop::new(self.raw);
        (raw.held, raw.scope.take(), raw.start)
    }
}

impl fmt::Debug for AsyncPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncPermit")
            .field("bulkhead", &self.raw.shared.name)
            .field("reentrant", &self.is_reentrant())
            .finish()
    }
}

pin_project_lite::pin_project! {
    /// The future of [`AsyncPermit::run_async`]: `body`, polled inside the bulkhead.
    #[must_use = "futures do nothing unless polled"]
    pub struct RunAsync<'a, F> {
        permit: Option<AsyncPermit<'a>>,
        #[pin]
        body: F,
    }

    impl<'a, F> PinnedDrop for RunAsync<'a, F> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(permit) = this.project().permit.as_mut() {
                // Dropped before the body finished.
                permit.raw.cancelled = true;
            }
        }
    }
}

impl<F: Future> Future for RunAsync<'_, F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        poll_inside(this.permit, this.body, cx)
    }
}

/// One poll of `body` under `permit` (taken out and returned, counted, when the body
/// finishes or panics): the bulkhead marked entered on this thread, the call's span entered
/// and, for an adaptive limit, `adaptive::mark_overloaded` caught. Shared by [`RunAsync`]
/// and [`SemaphoreCall`](super::SemaphoreCall), which keeps the body in place.
#[inline]
pub(super) fn poll_inside<F: Future>(
    permit: &mut Option<AsyncPermit<'_>>,
    body: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<F::Output> {
    let Some(held) = permit.as_ref() else {
        panic!("`RunAsync` polled after it completed");
    };
    // The poll's frame: for an adaptive limit, `adaptive::mark_overloaded` in the body
    // marks it. It is gone before the permit is returned (and listeners told).
    let inside = frame::enter(held.raw.id(), held.raw.start.is_some());
    let polled = {
        let _span = held.raw.scope.as_ref().map(|scope| scope.span.enter());
        let mut body = body;
        catch_unwind(AssertUnwindSafe(|| body.as_mut().poll(cx)))
    };
    let overloaded = inside.leave();
    if overloaded && let Some(held) = permit.as_mut() {
        held.raw.overloaded = true;
    }
    let output = match polled {
        Ok(polled) => std::task::ready!(polled),
        // Give the permit back while the panic unwinds, so the call counts as
        // `panicked` even when the caller catches the panic and drops this later.
        Err(payload) => {
            let _permit = permit.take();
            resume_unwind(payload)
        }
    };
    // The body finished: return the permit now, counted completed.
    *permit = None;
    Poll::Ready(output)
}

impl<F> fmt::Debug for RunAsync<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunAsync")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}

/// A permit that owns a handle to its bulkhead, from
/// [`SemaphoreBulkhead::acquire_owned`]: `'static` and `Send`, so it can outlive the call
/// that took it (a response body streamed after the handler returned) or move into a
/// spawned task. Returned when dropped; the call counts as `completed` then (`panicked` if
/// dropped while a panic unwinds).
///
/// Like an [`AsyncPermit`] it marks no thread by itself: wrap each piece of work done under
/// it (each poll) in [`in_scope`](Self::in_scope), so a nested call to the same bulkhead
/// runs inline instead of waiting for a second permit.
///
/// ```
/// use bulkhead::config::SemaphoreConfig;
/// use bulkhead::SemaphoreBulkhead;
///
/// let config = SemaphoreConfig { max_concurrent_calls: 1, ..SemaphoreConfig::default() };
/// let uploads = SemaphoreBulkhead::new("uploads", &config);
/// let permit = futures_executor::block_on(uploads.acquire_owned()).unwrap();
/// let worker = std::thread::spawn(move || {
///     // Inside the bulkhead: a nested call runs inline on the permit held.
///     permit.in_scope(|| permit.bulkhead().call(|| "nested").unwrap())
/// });
/// assert_eq!(worker.join().unwrap(), "nested");
/// assert_eq!(uploads.available(), 1);
/// ```
#[must_use = "the permit is returned as soon as it is dropped"]
pub struct OwnedPermit {
    bulkhead: SemaphoreBulkhead,
    held: Held,
    scope: Option<Box<CallScope>>,
    cancelled: bool,
    start: Option<CallStart>,
    overloaded: AtomicBool,
    /// A partition's or key's counts, given back after the permit (`crate::shares`).
    counted: crate::shares::Counted,
}

impl OwnedPermit {
    /// The owned form of a permit of `bulkhead`, from its
    /// [`into_parts`](AsyncPermit::into_parts).
    pub(super) fn new(
        bulkhead: SemaphoreBulkhead,
        (held, scope, start): (Held, Option<Box<CallScope>>, Option<CallStart>),
    ) -> Self {
        OwnedPermit {
            bulkhead,
            held,
            scope,
            cancelled: false,
            start,
            overloaded: AtomicBool::new(false),
            counted: crate::shares::Counted::default(),
        }
    }

    /// The same permit, giving back `counted` after itself.
    pub(crate) fn with_counted(mut self, counted: crate::shares::Counted) -> Self {
        self.counted = counted;
        self
    }

    /// Marks this call as overloaded: a drop for the bulkhead's adaptive limit (see
    /// [`adaptive::mark_overloaded`](crate::adaptive::mark_overloaded), which marks it too
    /// from inside [`in_scope`](Self::in_scope)).
    pub fn mark_overloaded(&self) {
        self.overloaded.store(true, Relaxed);
    }

    /// Gives the permit back and counts the call `cancelled` rather than `completed`: the
    /// work it admitted was abandoned before its end (a client that went away while its
    /// response was being sent).
    pub fn cancel(mut self) {
        self.cancelled = true;
    }

    /// True when this permit was given to a re-entrant call (see [`Permit::is_reentrant`]).
    pub fn is_reentrant(&self) -> bool {
        !self.held.is_held()
    }

    /// The bulkhead this permit belongs to.
    pub fn bulkhead(&self) -> &SemaphoreBulkhead {
        &self.bulkhead
    }

    /// Runs `f` on this thread inside the bulkhead: marked as entered (a call to the same
    /// bulkhead made by `f` runs inline) and in the call's span, if tracing records it.
    pub fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        let inside = frame::enter(self.bulkhead.shared.id(), self.start.is_some());
        let result = {
            let _span = self.scope.as_ref().map(|scope| scope.span.enter());
            f()
        };
        if inside.leave() {
            self.mark_overloaded();
        }
        result
    }
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        let ended = Ended {
            cancelled: self.cancelled,
            start: self.start,
            overloaded: self.overloaded.load(Relaxed),
        };
        finish(&self.bulkhead.shared, self.held, ended, self.scope.take());
        self.counted.release(&self.bulkhead.shared.shares);
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("bulkhead", &self.bulkhead.shared.name)
            .field("reentrant", &self.is_reentrant())
            .finish()
    }
}

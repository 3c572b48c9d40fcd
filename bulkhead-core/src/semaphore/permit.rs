//! Permits: what an admitted (or re-entrant) call holds, and how its outcome is counted.
//!
//! A held permit is returned exactly once, when its guard drops (also while a panic
//! unwinds); the call is then counted `panicked` if the thread is panicking, `cancelled` if
//! an async body was dropped before it finished, and `completed` otherwise. A re-entrant
//! permit holds nothing and returns nothing.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};

use super::Shared;
use crate::events::CallOutcome;
use crate::reentry::{self, BulkheadId, Entered};
use crate::telemetry::CallScope;

/// A permit as the accounting sees it: held (returned on drop) or re-entrant (nothing to
/// return). Counts the call's outcome when dropped.
pub(super) struct RawPermit<'a> {
    pub(super) shared: &'a Shared,
    pub(super) held: bool,
    /// Set when an async body was dropped before it finished.
    pub(super) cancelled: bool,
    /// An async call's span and start, only while tracing or a listener wants them; the
    /// span is entered by [`RunAsync`] during each poll. (A sync permit's scope is kept by
    /// `Telemetry::begin_sync_call` instead.)
    pub(super) scope: Option<Box<CallScope>>,
}

impl<'a> RawPermit<'a> {
    #[inline]
    pub(super) fn new(shared: &'a Shared, held: bool) -> Self {
        RawPermit {
            shared,
            held,
            cancelled: false,
            scope: None,
        }
    }

    #[inline]
    fn id(&self) -> BulkheadId {
        self.shared.id()
    }
}

impl Drop for RawPermit<'_> {
    #[inline]
    fn drop(&mut self) {
        let scope = self.scope.take();
        if !self.held {
            return;
        }
        // `completed` is not counted here: the snapshot derives it (admitted calls that are
        // over and neither panicked nor cancelled), keeping one atomic add off the fast path.
        let outcome = if std::thread::panicking() {
            self.shared.counters.panicked.fetch_add(1, Relaxed);
            CallOutcome::Panicked
        } else if self.cancelled {
            self.shared.counters.cancelled.fetch_add(1, Relaxed);
            CallOutcome::Cancelled
        } else {
            CallOutcome::Completed
        };
        self.shared.release();
        if let Some(scope) = scope {
            self.shared.telemetry.on_finished(scope.started, outcome);
        }
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
    /// Its span (if any) is entered on this thread while the permit is held.
    raw: RawPermit<'a>,
    // A held permit owns its thread's re-entry mark, so it stays on that thread.
    _not_send: PhantomData<*const ()>,
}

impl<'a> Permit<'a> {
    /// A permit for `raw`; `inside` is the thread's re-entry mark for a held permit (the
    /// permit takes it over and removes it when dropped), `None` for a re-entrant one.
    #[inline]
    pub(super) fn new(raw: RawPermit<'a>, inside: Option<Entered>) -> Self {
        debug_assert_eq!(raw.held, inside.is_some());
        if let Some(inside) = inside {
            inside.forget();
        }
        if raw.held {
            raw.shared.telemetry.begin_sync_call(raw.id());
        }
        Permit {
            raw,
            _not_send: PhantomData,
        }
    }

    /// True when this permit was given to a re-entrant call: it holds no permit, and the
    /// call runs inline inside the permit its thread already holds.
    pub fn is_reentrant(&self) -> bool {
        !self.raw.held
    }
}

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.raw.held {
            self.raw.shared.telemetry.end_sync_call(self.raw.id());
            reentry::leave(self.raw.id());
        }
        // Then `raw` drops: the permit goes back.
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("bulkhead", &self.raw.shared.name)
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
        !self.raw.held
    }

    /// Awaits `body` while holding this permit, marking the bulkhead "entered" on the
    /// polling thread during each poll. The permit is returned when the body finishes or
    /// the returned future is dropped (then the call counts as `cancelled`).
    pub fn run_async<F: Future>(self, body: F) -> RunAsync<'a, F> {
        RunAsync {
            permit: Some(self),
            body,
        }
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

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let Some(permit) = this.permit.as_ref() else {
            panic!("`RunAsync` polled after it completed");
        };
        let _inside = reentry::enter(permit.raw.id());
        let polled = {
            let _span = permit.raw.scope.as_ref().map(|scope| scope.span.enter());
            let mut body = this.body;
            catch_unwind(AssertUnwindSafe(|| body.as_mut().poll(cx)))
        };
        let output = match polled {
            Ok(polled) => std::task::ready!(polled),
            // Give the permit back while the panic unwinds, so the call counts as
            // `panicked` even when the caller catches the panic and drops this later.
            Err(payload) => {
                let _permit = this.permit.take();
                resume_unwind(payload)
            }
        };
        // The body finished: return the permit now, counted completed.
        *this.permit = None;
        Poll::Ready(output)
    }
}

impl<F> fmt::Debug for RunAsync<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunAsync")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}

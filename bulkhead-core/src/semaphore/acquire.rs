//! The future of [`SemaphoreBulkhead::acquire_async`](super::SemaphoreBulkhead::acquire_async).
//!
//! A small state machine, polled on any executor, taking the order of every admission
//! (`crate::admission`): `Start` (re-entry; with a rate limit set, shut down and the rate
//! limit) → `RateWait` (a reserved permission of a coming period awaited) → `Permit`
//! (fast path, else enqueue) → `Queued` (until granted, shut down, or timed out by the
//! queue's one `max_wait` timer, `deadlines.rs`) → done. Dropping it while `Queued` leaves
//! the queue and passes on a permit that was granted but not yet seen (invariant 4 in
//! `state.rs`); while in `RateWait`, gives back the reserved rate-limit permission.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use super::permit::{Held, RawPermit};
use super::state::{Waited, Waiter, Wake};
use super::{AsyncPermit, Shared};
use crate::BulkheadError;
use crate::admission::{self, First, RateWait};
use crate::sync::Arc;

/// The future of [`SemaphoreBulkhead::acquire_async`](super::SemaphoreBulkhead::acquire_async):
/// resolves to a permit, or to the refusal. Needs no particular executor; every wait goes
/// through the bulkhead's clock.
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a> {
    shared: &'a Shared,
    stage: Stage,
    /// False for a call that must not queue (it is refused where it would wait).
    may_wait: bool,
}

enum Stage {
    /// Not polled yet.
    Start,
    /// Waiting for the period of a reserved rate-limit permission to start (step 3 of the
    /// order).
    RateWait(RateWait),
    /// Past the rate limit: take a permit or queue for one.
    Permit,
    /// In the waiter queue since `start`, until granted, shut down or timed out.
    Queued { waiter: Arc<Waiter>, start: Instant },
    /// Refused: the refusal, until the caller takes it ([`Acquire::take_refusal`]).
    Refused(BulkheadError),
    /// Resolved.
    Done,
}

impl Stage {
    /// Moves on to `next` from a stage that holds nothing (`Start`, `Permit`, `Done`)
    /// without running the enum's drop glue, which is an out-of-line call (a sixth of a
    /// queued acquisition's own instructions went to three of them).
    #[inline(always)]
    fn advance(&mut self, next: Stage) {
        debug_assert!(
            matches!(self, Stage::Start | Stage::Permit | Stage::Done),
            "only a stage that holds nothing is left without its drop"
        );
        std::mem::forget(std::mem::replace(self, next));
    }
}

impl<'a> Acquire<'a> {
    pub(super) fn new(shared: &'a Shared) -> Self {
        Acquire {
            shared,
            stage: Stage::Start,
            may_wait: true,
        }
    }

    pub(super) fn without_waiting(shared: &'a Shared) -> Self {
        Acquire {
            shared,
            stage: Stage::Start,
            may_wait: false,
        }
    }
}

impl<'a> Future for Acquire<'a> {
    type Output = Result<AsyncPermit<'a>, BulkheadError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The first poll's common case, decided without stepping through the stages (a
        // caller that must not queue is refused there, where it would wait).
        if matches!(self.stage, Stage::Start)
            && let Some(decided) = try_now(self.shared)
        {
            self.stage.advance(Stage::Done);
            return Poll::Ready(decided);
        }
        let shared = self.shared;
        match ready!(self.as_mut().poll_held(cx)) {
            Ok(held) => Poll::Ready(Ok(async_permit(RawPermit::new(shared, held)))),
            Err(Refused) => Poll::Ready(Err(self.take_refusal())),
        }
    }
}

/// [`Acquire::poll_held`] refused the call: the refusal waits in the acquisition for
/// [`Acquire::take_refusal`].
pub(super) struct Refused;

impl<'a> Acquire<'a> {
    /// The stages, out of line: the first poll's common case above stays small. Ready
    /// with what the permit holds, not the permit: the caller makes it where it keeps it
    /// ([`SemaphoreCall`](super::SemaphoreCall) in its own slot). A refusal stays here
    /// ([`take_refusal`](Self::take_refusal)): the answer fits in a register. (A permit,
    /// or a result as wide as a refusal, returned through memory is copied in wide loads
    /// right behind the narrow stores that wrote it, a store-forwarding stall.)
    #[inline(never)]
    pub(super) fn poll_held(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Held, Refused>> {
        let shared = self.shared;
        // The stage is matched in place, not taken out and put back: a take reads the
        // whole stage right behind the narrow stores that last wrote it (a store-forwarding
        // stall, a tenth of a contended call's time in a profile). In place, a waiter
        // whose poll unwinds (a panicking clock) is still `Queued` when the future drops,
        // and leaves the queue.
        let waited = loop {
            match &mut self.stage {
                Stage::Start => {
                    let next = match admission::first(shared) {
                        First::Inside => return self.done(Ok(Held::NOTHING)),
                        First::Open => Stage::Permit,
                        // Shut down, then the rate limit.
                        First::Gated => match admission::gated_async(shared, self.may_wait) {
                            Ok(None) => Stage::Permit,
                            Ok(Some(wait)) => Stage::RateWait(wait),
                            Err(refused) => return self.done(Err(refused)),
                        },
                    };
                    self.stage.advance(next);
                }
                Stage::RateWait(wait) => {
                    if wait.poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.stage = Stage::Permit;
                }
                Stage::Permit => {
                    // The error is built only for a refusal, not for a caller that waits.
                    let max_wait = match shared.try_take_fast() {
                        Ok(()) => return self.done(shared.admitted()),
                        // A borrowing partition's call never queues: refused as if full.
                        Err(reason) => match shared.max_wait_for(reason) {
                            Some(max_wait) if self.may_wait => max_wait,
                            _ => return self.done(Err(shared.refuse(shared.error(reason)))),
                        },
                    };
                    let start = shared.clock.now();
                    // No deadline for a wait too long for an `Instant`: it never times out.
                    let deadline = start.checked_add(max_wait);
                    let waiter = Waiter::new(Wake::Task(cx.waker().clone()), deadline);
                    match shared.take_or_enqueue(&waiter) {
                        Ok(true) => {
                            self.stage.advance(Stage::Done);
                            Waiter::recycle(waiter);
                            break Waited::Granted;
                        }
                        // Queued with this poll's waker: a grant, a time-out or a shut
                        // down from now on wakes it, so the waker needs no update. Still
                        // waiting (one load) is the common case; anything else (a
                        // deadline already past, say) is handled in this poll.
                        Ok(false) => {
                            let waiting = waiter.is_waiting();
                            self.stage.advance(Stage::Queued { waiter, start });
                            if waiting {
                                return Poll::Pending;
                            }
                        }
                        Err(err) => return self.done(Err(shared.refuse(err))),
                    }
                }
                Stage::Queued { waiter, start } => {
                    let start = *start;
                    let Some(waited) = poll_queued(shared, waiter, start, cx) else {
                        return Poll::Pending;
                    };
                    // Recorded while still `Queued`: if the clock panics here, the
                    // future's drop passes the granted permit on.
                    shared.record_wait(&waited, start);
                    if let Stage::Queued { waiter, .. } =
                        std::mem::replace(&mut self.stage, Stage::Done)
                    {
                        Waiter::recycle(waiter);
                    }
                    break waited;
                }
                Stage::Refused(_) | Stage::Done => panic!("`Acquire` polled after it completed"),
            }
        };
        let settled = shared.settle(waited);
        self.done(settled)
    }

    /// The refusal [`poll_held`](Self::poll_held) answered `Err(Refused)` for.
    #[cold]
    pub(super) fn take_refusal(&mut self) -> BulkheadError {
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Refused(refusal) => refusal,
            _ => panic!("`Acquire` has no refusal to give"),
        }
    }
}

impl<'a> Acquire<'a> {
    /// The acquisition is over with `held`, or refused (the refusal kept for
    /// [`take_refusal`](Self::take_refusal)): nothing left for its drop to give back.
    #[inline(always)]
    fn done(&mut self, held: Result<Held, BulkheadError>) -> Poll<Result<Held, Refused>> {
        match held {
            Ok(held) => {
                self.stage.advance(Stage::Done);
                Poll::Ready(Ok(held))
            }
            Err(refusal) => {
                self.stage.advance(Stage::Refused(refusal));
                Poll::Ready(Err(Refused))
            }
        }
    }
}

/// An admitted (or re-entrant) call's permit, with its call scope and adaptive start.
#[inline(always)]
fn async_permit(mut raw: RawPermit<'_>) -> AsyncPermit<'_> {
    begin_async(&mut raw);
    AsyncPermit { raw }
}

/// An admitted (or re-entrant) call's permit, made in `slot` itself, then its call scope
/// and adaptive start set there. Made in place, not returned: a permit built elsewhere
/// and then moved is copied in wide loads right behind the narrow stores that built it,
/// which stall the copy (store forwarding fails) — most of the uncontended
/// `call_async`'s time in a profile.
#[inline(always)]
pub(super) fn install<'a>(slot: &mut Option<AsyncPermit<'a>>, shared: &'a Shared, held: Held) {
    let permit = slot.insert(AsyncPermit {
        raw: RawPermit::new(shared, held),
    });
    begin_async(&mut permit.raw);
}

/// What [`async_permit`] adds to a permit: the call scope, and the adaptive start.
#[inline(always)]
fn begin_async(raw: &mut RawPermit<'_>) {
    raw.scope = raw.shared.telemetry.call_scope(raw.held.is_held());
    if raw.held.is_held()
        && let Some(start) = raw.shared.call_start()
    {
        raw.start = Some(start);
        if let Some(scope) = &raw.scope {
            scope.span.record(
                "limit",
                raw.shared.limit.load(std::sync::atomic::Ordering::Relaxed),
            );
        }
    }
}

/// The first poll of an acquisition that may wait, decided without building its future:
/// a re-entrant permit, a permit from the count, or a refusal that needs no wait. `None`
/// (nothing done) when a rate limit or a wait in the queue must decide: poll an
/// [`Acquire`] then. What [`SemaphoreCall`](super::SemaphoreCall) does first.
#[inline(always)]
pub(super) fn try_now(shared: &Shared) -> Option<Result<AsyncPermit<'_>, BulkheadError>> {
    try_now_held(shared)
        .map(|decided| decided.map(|held| async_permit(RawPermit::new(shared, held))))
}

/// [`try_now`], the permit's `Held` only (counted `permitted` if held), for a caller that
/// makes the permit in place ([`install`]).
#[inline(always)]
pub(super) fn try_now_held(shared: &Shared) -> Option<Result<Held, BulkheadError>> {
    match admission::first(shared) {
        First::Inside => return Some(Ok(Held::NOTHING)),
        First::Gated => return None,
        First::Open => {}
    }
    match shared.try_take_fast() {
        // The gate is off: no cluster lease is due.
        Ok(()) => Some(Ok(shared.count_permitted())),
        Err(reason) => match shared.max_wait_for(reason) {
            Some(_) => None,
            None => Some(Err(shared.refuse(shared.error(reason)))),
        },
    }
}

/// One poll of a queued waiter: `Some` once its wait has ended.
fn poll_queued(
    shared: &Shared,
    waiter: &Arc<Waiter>,
    start: Instant,
    cx: &mut Context<'_>,
) -> Option<Waited> {
    let waited = || shared.clock.now().saturating_duration_since(start);
    if let Some(resolved) = waiter.resolved(waited) {
        return Some(resolved);
    }
    waiter.update_waker(cx.waker());
    // A grant or time-out between the first look and the waker update woke the old waker:
    // look again.
    waiter.resolved(waited)
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        match &self.stage {
            // A permit was handed to us but never reached the caller: pass it on.
            Stage::Queued { waiter, .. } if self.shared.leave_queue(waiter) => {
                self.shared.release_slow();
            }
            // A reserved rate-limit permission nobody will use: give it back.
            Stage::RateWait(wait) => wait.give_back(self.shared),
            _ => {}
        }
    }
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = match &self.stage {
            Stage::Start => "start",
            Stage::RateWait(_) => "rate-wait",
            Stage::Permit => "permit",
            Stage::Queued { .. } => "queued",
            Stage::Refused(_) => "refused",
            Stage::Done => "done",
        };
        f.debug_struct("Acquire")
            .field("bulkhead", &self.shared.name)
            .field("stage", &stage)
            .finish()
    }
}

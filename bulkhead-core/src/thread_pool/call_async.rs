//! The future returned by [`ThreadPoolBulkhead::call_async`].

use std::fmt;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Instant;

use bulkhead_config_types::OnFull;

use super::ThreadPoolBulkhead;
use super::async_job::AsyncTask;
use super::job::{JobRef, job_id};
use super::room_waiters::Ticket;
use super::shared::Shared;
use super::shared::deadline;
use crate::admission::{self, First, Gate, RateWait};
use crate::clock::Sleep;
use crate::events::CallOutcome;
use crate::{BulkheadError, Refused, frame};

/// The future of an async call to a [`ThreadPoolBulkhead`]: resolves to the body's output,
/// or to [`Refused`] with the input when the call did not run.
///
/// Admission happens at the first poll, except the refusal of a full pool under
/// `on_full: abort`, decided when the call is made (as a sync call's): that future holds
/// nothing but the refusal. Dropping it while the task is queued removes the task (it
/// never runs, counted as cancelled); while the task runs, it finishes and the result is
/// discarded.
#[must_use = "futures do nothing unless polled"]
pub struct CallAsync<I, F, Fut: Future>(Call<I, F, Fut>);

/// A call refused when it was made holds nothing but its refusal, so dropping it costs a
/// check (the admissible call's drop glue is out of line).
enum Call<I, F, Fut: Future> {
    /// Refused when the call was made (a full pool under `on_full: abort`; counted then):
    /// its input, taken by the first poll, and the pool's name. The poll makes the error
    /// from the name, read a field at a time: an error made here and moved out by that
    /// poll is copied in wide loads right behind the narrow stores that wrote it (a
    /// store-forwarding stall, half of such a refusal's time).
    Refused(Option<I>, crate::BulkheadName),
    Admissible(Admissible<I, F, Fut>),
}

/// A call decided at its first poll.
struct Admissible<I, F, Fut: Future> {
    pool: ThreadPoolBulkhead,
    /// Dropped by `Admissible`'s `Drop` only when not `Done` (the common end, which holds
    /// nothing): a finished call's drop is a compare, not a call into the state's drop glue.
    state: ManuallyDrop<State<I, F, Fut>>,
    /// The call's span (a child of the span current when the call was made), entered during
    /// each poll, so the job captures it and enters it on the worker; `None` while no
    /// subscriber has ever been set (its span would be `Span::none()`: nothing to enter).
    /// Boxed: a span is five words the future would otherwise move wherever it goes, for
    /// the calls made with a subscriber only.
    span: Option<Box<tracing::Span>>,
    /// Only borrows room (a partition at or above its share): never waits, never runs on
    /// its caller ([`borrowing`](Self::borrowing)).
    borrowing: bool,
}

// An explicit tag: each check of the state (several per poll, and the drops) is one
// compare, not the decoding of a niche. The common states are small (the submitted call
// is the job's handle and an optional expiry: four words), so the future is cheap to move
// (callers keep it in a window, a `Vec`, a task); the rare waits keep their clocks in a box
// (they allocate a sleep anyway).
#[repr(u8)]
enum State<I, F, Fut: Future> {
    Start(I, F),
    /// A rate-limit permission of a coming period is reserved (step 3 of the order,
    /// `crate::admission`): waiting for the period to start.
    RateWait(I, F, Box<RateWait>),
    /// Past the rate limit: asks the pool for a slot.
    PastRateLimit(I, F),
    /// `on_full: { wait }`: waiting for room.
    Waiting(I, F, Box<WaitingRoom>),
    /// Handed to the pool; `queued` is set while it may still be queued (by the job's
    /// address, `job_id`).
    // (The flags first: with the explicit tag the fields stay in this order, and a flag
    // beside the tag takes no word of its own.)
    Submitted {
        queued: bool,
        task: Arc<AsyncTask<I, F, Fut::Output>>,
        /// Fires at the task's `max_queue_wait` deadline: the caller withdraws it then.
        expiry: Option<Sleep>,
    },
    /// Polled by the caller: a re-entrant call, or `on_full: caller-runs` (`counted`).
    Inline {
        counted: bool,
        fut: Pin<Box<Fut>>,
        /// For `counted` calls, when they were permitted, if someone listened.
        started: Option<Instant>,
    },
    Done,
}

/// An `on_full: { wait }` call's wait for room: since when, until when, and its place
/// among the room waiters.
struct WaitingRoom {
    started: Instant,
    sleep: Option<Sleep>,
    ticket: Option<u64>,
}

impl<I, F, Fut: Future> State<I, F, Fut> {
    /// A state moved out of (left `Done` by `mem::replace`) takes `next`: a `Done` has
    /// nothing to drop, so none of the state's drop glue runs (were it not `Done` after
    /// all, its values would leak, never be used twice).
    #[inline]
    fn set_from_done(&mut self, next: Self) {
        debug_assert!(matches!(self, State::Done));
        std::mem::forget(std::mem::replace(self, next));
    }
}

// No field is structurally pinned: the body's future is boxed, everything else is moved.
impl<I, F, Fut: Future> Unpin for CallAsync<I, F, Fut> {}

impl<I, F, Fut> CallAsync<I, F, Fut>
where
    I: Send + 'static,
    F: FnOnce(I) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    #[inline]
    pub(super) fn new(pool: &ThreadPoolBulkhead, input: I, body: F) -> Self {
        let shared = pool.shared();
        // The fail-fast refusal of the sync call, before anything is cloned or a span made.
        if shared.aborts_when_full()
            && shared.is_open()
            && shared.is_full()
            && !frame::is_inside(shared.id())
        {
            return CallAsync(Call::Refused(Some(input), shared.count_full()));
        }
        CallAsync(Call::Admissible(Admissible::new(pool, input, body, false)))
    }

    /// A call that only borrows room (a partition at or above its share): admitted at its
    /// first poll if a slot is free and nobody waits for room, else refused `Full`; never
    /// waits for room, never runs on its caller.
    pub(crate) fn borrowing(pool: &ThreadPoolBulkhead, input: I, body: F) -> Self {
        CallAsync(Call::Admissible(Admissible::new(pool, input, body, true)))
    }
}

impl<I, F, Fut> Future for CallAsync<I, F, Fut>
where
    I: Send + 'static,
    F: FnOnce(I) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    type Output = Result<Fut::Output, Refused<I>>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Call::Refused(input, name) => match input.take() {
                Some(input) => Poll::Ready(Err(Refused {
                    input,
                    error: BulkheadError::Full { name: name.clone() },
                })),
                None => panic!("`CallAsync` polled after it completed"),
            },
            Call::Admissible(call) => call.poll(cx),
        }
    }
}

impl<I, F, Fut> Admissible<I, F, Fut>
where
    I: Send + 'static,
    F: FnOnce(I) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    /// A call that is decided at its first poll.
    #[inline]
    fn new(pool: &ThreadPoolBulkhead, input: I, body: F, borrowing: bool) -> Self {
        let shared = pool.shared();
        Admissible {
            span: shared.telemetry.call_span_if_any().map(Box::new),
            pool: pool.clone(),
            state: ManuallyDrop::new(State::Start(input, body)),
            borrowing,
        }
    }

    /// Hands the admitted call to the pool: `state` (moved out of, so `Done`) becomes
    /// `Submitted`, written in place.
    #[inline]
    fn submit(shared: &Arc<Shared>, state: &mut State<I, F, Fut>, input: I, body: F) {
        shared.counters.permitted.fetch_add(1, Relaxed);
        shared.telemetry.on_permitted();
        let (job, task) = AsyncTask::<I, F, Fut::Output>::job(input, body);
        let queued = shared.enqueue(JobRef::new(job));
        let expiry = queued
            .as_ref()
            .and_then(|queued| shared.queue_deadline(queued))
            .map(|at| shared.clock.sleep_until(at));
        state.set_from_done(State::Submitted {
            task,
            queued: queued.is_some(),
            expiry,
        });
    }

    fn refused(&self, input: I, error: BulkheadError) -> Poll<Result<Fut::Output, Refused<I>>> {
        Poll::Ready(Err(Refused {
            input,
            error: self.pool.shared().refuse(error),
        }))
    }

    /// A poll of a call that was not refused when it was made: one compare, and a jump to
    /// the poll of a call handed to the pool or of one not yet handed (both out of line, so
    /// the caller's poll saves no registers for the path it does not take).
    #[inline]
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Fut::Output, Refused<I>>> {
        if matches!(*self.state, State::Submitted { .. }) {
            self.poll_handed(cx)
        } else {
            self.poll_unsubmitted(cx)
        }
    }

    /// A poll of a call handed to the pool, in the call's span. Without a span (no
    /// subscriber) the outcome is written straight into the caller's result, with no
    /// guard to drop after it.
    #[inline(never)]
    fn poll_handed(&mut self, cx: &mut Context<'_>) -> Poll<Result<Fut::Output, Refused<I>>> {
        let shared = &**self.pool.shared();
        match self.span.as_deref() {
            None => poll_submitted(&mut self.state, shared, cx),
            Some(span) => {
                let _span = span.enter();
                poll_submitted(&mut self.state, shared, cx)
            }
        }
    }

    /// A poll of a call not yet handed to the pool (or running inline).
    #[inline(never)]
    fn poll_unsubmitted(&mut self, cx: &mut Context<'_>) -> Poll<Result<Fut::Output, Refused<I>>> {
        let this = self;
        let shared = &**this.pool.shared();
        let _span = this.span.as_deref().map(tracing::Span::enter);
        loop {
            // Handed to the pool (at this poll): on as at every later poll.
            if let State::Submitted { .. } = *this.state {
                return poll_submitted(&mut *this.state, shared, cx);
            }
            if let State::Inline {
                fut,
                counted,
                started,
            } = &mut *this.state
            {
                let polled = if *counted {
                    // Caller-runs: marked inside while polled; a panic is counted here (the
                    // caller may catch it and drop this future later).
                    let inside = frame::enter(shared.id(), false);
                    let polled = catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx)));
                    // Out of the bulkhead before the listeners hear of the call.
                    drop(inside);
                    match polled {
                        Ok(polled) => polled,
                        Err(payload) => {
                            shared.counters.panicked.fetch_add(1, Relaxed);
                            shared
                                .telemetry
                                .on_finished(*started, CallOutcome::Panicked);
                            *this.state = State::Done;
                            resume_unwind(payload)
                        }
                    }
                } else {
                    fut.as_mut().poll(cx)
                };
                let output = std::task::ready!(polled);
                if *counted {
                    shared.counters.completed.fetch_add(1, Relaxed);
                    shared
                        .telemetry
                        .on_finished(*started, CallOutcome::Completed);
                }
                *this.state = State::Done;
                return Poll::Ready(Ok(output));
            }
            match std::mem::replace(&mut *this.state, State::Done) {
                State::Start(input, body) => match admission::first(shared) {
                    First::Inside => {
                        *this.state = State::Inline {
                            fut: Box::pin(body(input)),
                            counted: false,
                            started: None,
                        };
                    }
                    // The common case: a free slot, one state write. A borrowing call
                    // looks for room waiters first (`PastRateLimit`).
                    First::Open if !this.borrowing && shared.try_admit() => {
                        Self::submit(this.pool.shared(), &mut *this.state, input, body);
                    }
                    First::Open => *this.state = State::PastRateLimit(input, body),
                    // Shut down, then the rate limit (a borrowing call never waits).
                    First::Gated => match admission::gated_async(shared, !this.borrowing) {
                        Ok(None) => *this.state = State::PastRateLimit(input, body),
                        Ok(Some(wait)) => {
                            *this.state = State::RateWait(input, body, Box::new(wait));
                        }
                        // Counted and reported by the gate.
                        Err(error) => return Poll::Ready(Err(Refused { input, error })),
                    },
                },
                State::RateWait(input, body, mut wait) => {
                    if wait.poll(cx).is_pending() {
                        *this.state = State::RateWait(input, body, wait);
                        return Poll::Pending;
                    }
                    *this.state = State::PastRateLimit(input, body);
                }
                State::PastRateLimit(input, body) => {
                    if shared.is_shut_down() {
                        return this.refused(input, shared.shut_down_error());
                    }
                    if this.borrowing && shared.room.len() > 0 {
                        return this.refused(input, shared.full());
                    }
                    if shared.try_admit() {
                        Self::submit(this.pool.shared(), &mut *this.state, input, body);
                        continue;
                    }
                    if this.borrowing {
                        return this.refused(input, shared.full());
                    }
                    match shared.on_full() {
                        OnFull::Wait(wait) if wait.is_zero() => {
                            return this.refused(input, shared.full());
                        }
                        OnFull::CallerRuns => {
                            shared.counters.permitted.fetch_add(1, Relaxed);
                            shared.caller_runs.fetch_add(1, Relaxed);
                            let started = shared.telemetry.on_permitted();
                            let fut = {
                                let _inside = frame::enter(shared.id(), false);
                                Box::pin(body(input))
                            };
                            *this.state = State::Inline {
                                fut,
                                counted: true,
                                started,
                            };
                        }
                        OnFull::Wait(wait) => {
                            let started = shared.clock.now();
                            // No deadline for a wait too long for an `Instant`: never times out.
                            let sleep = deadline(started, wait.as_std())
                                .map(|deadline| shared.clock.sleep_until(deadline));
                            *this.state = State::Waiting(
                                input,
                                body,
                                Box::new(WaitingRoom {
                                    started,
                                    sleep,
                                    ticket: None,
                                }),
                            );
                        }
                        // `abort` (`OnFull` is `#[non_exhaustive]`; `on_full()` answers no other).
                        _ => return Poll::Ready(Err(shared.refused_full(input))),
                    }
                }
                State::Waiting(input, body, mut room) => {
                    let WaitingRoom {
                        started,
                        ref mut sleep,
                        ticket,
                    } = *room;
                    // Leaves the room however this poll ends, unless kept below: a clock
                    // or waker that panics loses no registration.
                    let mut ticket = Ticket::held(&shared.room, ticket);
                    ticket.set(shared.room.register_task(ticket.id(), cx.waker()));
                    if shared.is_shut_down() {
                        ticket.leave();
                        return this.refused(input, shared.shut_down_error());
                    }
                    // Read before the slot is taken: a clock that panics takes nothing.
                    let now = shared.clock.now();
                    if shared.try_admit() {
                        ticket.leave();
                        shared
                            .telemetry
                            .record_wait(now.saturating_duration_since(started));
                        Self::submit(this.pool.shared(), &mut *this.state, input, body);
                        continue;
                    }
                    if sleep
                        .as_mut()
                        .is_some_and(|s| s.as_mut().poll(cx).is_ready())
                    {
                        if !ticket.leave() {
                            // Woken for a slot we will not use: pass it on.
                            shared.room.wake_one();
                        }
                        let waited = shared.clock.now().saturating_duration_since(started);
                        return this.refused(
                            input,
                            BulkheadError::Timeout {
                                name: shared.name.clone(),
                                waited,
                            },
                        );
                    }
                    room.ticket = ticket.keep();
                    *this.state = State::Waiting(input, body, room);
                    return Poll::Pending;
                }
                State::Submitted { .. } | State::Inline { .. } => unreachable_state(),
                State::Done => panic!("`CallAsync` polled after completion"),
            }
        }
    }
}

#[cold]
fn unreachable_state() -> ! {
    panic!("bulkhead bug: a state handled elsewhere")
}

/// A poll of a call handed to the pool (`state` is `Submitted`), in the call's span: the
/// outcome once delivered, else the `max_queue_wait` expiry (a task still queued then is
/// withdrawn: failed with `QueueTimeout`, delivered at once; one a worker took runs to its
/// end).
#[inline(always)]
fn poll_submitted<I, F, Fut>(
    state: &mut State<I, F, Fut>,
    shared: &Shared,
    cx: &mut Context<'_>,
) -> Poll<Result<Fut::Output, Refused<I>>>
where
    Fut: Future,
{
    let State::Submitted {
        task,
        queued,
        expiry,
    } = state
    else {
        unreachable_state()
    };
    let outcome = loop {
        if let Poll::Ready(outcome) = task.poll_outcome(cx) {
            break outcome;
        }
        if !expiry
            .as_mut()
            .is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready())
        {
            return Poll::Pending;
        }
        *expiry = None;
        if std::mem::take(queued) {
            shared.withdraw_stale(job_id(task));
        }
    };
    // The job and the expiry go (the job's last handle, as a rule: the delivery dropped
    // the pool's), the state is `Done`: only `Submitted`'s own fields are dropped.
    if let State::Submitted { task, expiry, .. } = std::mem::replace(state, State::Done) {
        drop(expiry);
        drop(task);
    }
    Poll::Ready(shared.settle(outcome))
}

impl<I, F, Fut: Future> Drop for Admissible<I, F, Fut> {
    /// A finished call (the common drop) has nothing to undo, nor a state to drop: one
    /// compare (and one for the span).
    #[inline]
    fn drop(&mut self) {
        if !matches!(*self.state, State::Done) {
            self.drop_unfinished();
        }
        if let Some(span) = self.span.take() {
            drop(span);
        }
    }
}

impl<I, F, Fut: Future> Admissible<I, F, Fut> {
    /// Undoes what a call dropped before its end holds: a rate-limit permission, a place
    /// among the room waiters, a queued task, a caller-runs call under way.
    /// The state is taken out first, so it is dropped even if a clock or a listener here
    /// panics.
    #[inline(never)]
    fn drop_unfinished(&mut self) {
        let state = ManuallyDrop::into_inner(std::mem::replace(
            &mut self.state,
            ManuallyDrop::new(State::Done),
        ));
        let shared = self.pool.shared();
        match &state {
            // A reserved rate-limit permission nobody will use: give it back.
            State::RateWait(.., wait) => wait.give_back(&**shared),
            State::Waiting(.., room) => {
                if let Some(ticket) = room.ticket
                    && !shared.room.deregister(ticket)
                {
                    shared.room.wake_one();
                }
            }
            // Still queued: remove it so it never runs and its slot frees now. Otherwise a
            // worker has it: it sees the caller gone and skips it, or finishes it.
            State::Submitted { task, queued, .. } => {
                task.caller_gone();
                if *queued {
                    shared.cancel_queued(job_id(task));
                }
            }
            // Caller-runs given up part-way (a panic was counted where it happened).
            State::Inline {
                counted: true,
                started,
                ..
            } => {
                shared.counters.cancelled.fetch_add(1, Relaxed);
                shared
                    .telemetry
                    .on_finished(*started, CallOutcome::Cancelled);
            }
            _ => {}
        }
    }
}

impl<I, F, Fut: Future> fmt::Debug for CallAsync<I, F, Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Call::Admissible(call) = &self.0 else {
            return f
                .debug_struct("CallAsync")
                .field("state", &"refused")
                .finish_non_exhaustive();
        };
        let state = match *call.state {
            State::Start(..) | State::PastRateLimit(..) => "start",
            State::RateWait(..) => "waiting for the rate limit",
            State::Waiting(..) => "waiting for room",
            State::Submitted { .. } => "submitted",
            State::Inline { .. } => "running inline",
            State::Done => "done",
        };
        f.debug_struct("CallAsync")
            .field("bulkhead", &call.pool.name())
            .field("state", &state)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    /// The future of a call with word-sized values is eight words (the pool, the span's
    /// box, a four-word state, the flag, and the tag beside a refusal's seven words): the
    /// waits' clocks are boxed, the span too, and the waker the last poll left is kept in
    /// the job, so moving the future (into a window, a task) copies little.
    #[test]
    fn the_future_of_a_call_is_small() {
        type Body = fn(u64) -> std::future::Ready<u64>;
        type Call = super::CallAsync<u64, Body, std::future::Ready<u64>>;
        assert!(
            std::mem::size_of::<Call>() <= 64,
            "{} bytes",
            std::mem::size_of::<Call>()
        );
    }
}

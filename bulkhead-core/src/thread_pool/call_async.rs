//! The future returned by [`ThreadPoolBulkhead::call_async`].

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Instant;

use bulkhead_config_types::OnFull;

use super::ThreadPoolBulkhead;
use super::job::{AsyncReceiver, AsyncTask, JobRef};
use super::pool::deadline;
use crate::clock::Sleep;
use crate::events::CallOutcome;
use crate::rate_limit::RateAdmission;
use crate::{BulkheadError, Refused, reentry};

/// The future of an async call to a [`ThreadPoolBulkhead`]: resolves to the body's output,
/// or to [`Refused`] with the input when the call did not run.
///
/// Admission happens at the first poll. Dropping it while the task is queued removes the
/// task (it never runs, counted as cancelled); while the task runs, it finishes and the
/// result is discarded.
#[must_use = "futures do nothing unless polled"]
pub struct CallAsync<I, F, Fut: Future> {
    pool: ThreadPoolBulkhead,
    state: State<I, F, Fut>,
    /// The call's span (a child of the span current when the call was made), entered during
    /// each poll, so the job captures it and enters it on the worker.
    span: tracing::Span,
}

enum State<I, F, Fut: Future> {
    Start(I, F),
    /// A rate-limit permission of a coming period is reserved: waiting for it to start (at
    /// the instant held, when the sleep fires).
    RateWait(I, F, Sleep, Instant),
    /// Past the rate limit: admission to the pool.
    Admit(I, F),
    /// `on_full: { wait }`: waiting for room.
    Waiting {
        input: I,
        body: F,
        started: Instant,
        sleep: Option<Sleep>,
        ticket: Option<u64>,
    },
    /// Handed to the pool; `id` is set while it may still be queued.
    Submitted {
        rx: AsyncReceiver<I, Fut::Output>,
        id: Option<u64>,
    },
    /// Polled by the caller: a re-entrant call, or `on_full: caller-runs` (`counted`).
    Inline {
        fut: Pin<Box<Fut>>,
        counted: bool,
        /// For `counted` calls, when they were permitted, if someone listened.
        started: Option<Instant>,
    },
    Done,
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
    pub(super) fn new(pool: ThreadPoolBulkhead, input: I, body: F) -> Self {
        let span = pool.inner().telemetry.call_span();
        CallAsync {
            pool,
            state: State::Start(input, body),
            span,
        }
    }

    fn submit(&self, input: I, body: F) -> State<I, F, Fut> {
        let inner = self.pool.inner();
        inner.counters.permitted.fetch_add(1, Relaxed);
        inner.telemetry.on_permitted();
        let (job, rx) = AsyncTask::<I, F, Fut::Output>::job(input, body);
        let id = inner.enqueue(JobRef::new(job));
        State::Submitted { rx, id }
    }

    fn refused(&self, input: I, error: BulkheadError) -> Poll<<Self as Future>::Output> {
        Poll::Ready(Err(Refused {
            input,
            error: self.pool.inner().refuse(error),
        }))
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

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let inner = &**this.pool.inner();
        let _span = this.span.enter();
        loop {
            if let State::Inline {
                fut,
                counted,
                started,
            } = &mut this.state
            {
                let polled = if *counted {
                    // Caller-runs: marked inside while polled; a panic is counted here (the
                    // caller may catch it and drop this future later).
                    let _inside = reentry::enter(inner.id());
                    match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
                        Ok(polled) => polled,
                        Err(payload) => {
                            inner.counters.panicked.fetch_add(1, Relaxed);
                            inner.telemetry.on_finished(*started, CallOutcome::Panicked);
                            this.state = State::Done;
                            resume_unwind(payload)
                        }
                    }
                } else {
                    fut.as_mut().poll(cx)
                };
                let output = std::task::ready!(polled);
                if *counted {
                    inner.counters.completed.fetch_add(1, Relaxed);
                    inner
                        .telemetry
                        .on_finished(*started, CallOutcome::Completed);
                }
                this.state = State::Done;
                return Poll::Ready(Ok(output));
            }
            match std::mem::replace(&mut this.state, State::Done) {
                State::Start(input, body) => {
                    if reentry::is_inside(inner.id()) {
                        inner.counters.reentrant.fetch_add(1, Relaxed);
                        this.state = State::Inline {
                            fut: Box::pin(body(input)),
                            counted: false,
                            started: None,
                        };
                        continue;
                    }
                    if inner.is_shut_down() {
                        return this.refused(input, inner.shut_down_error());
                    }
                    // The rate limit before the queue.
                    if inner.rate.is_enabled() {
                        match inner.rate.reserve(inner.rate.timeout()) {
                            RateAdmission::Admitted => {}
                            RateAdmission::WaitUntil(at) => {
                                let sleep = inner.rate.clock().sleep_until(at);
                                this.state = State::RateWait(input, body, sleep, at);
                                continue;
                            }
                            RateAdmission::Refused { retry_after } => {
                                return this.refused(
                                    input,
                                    BulkheadError::RateLimited {
                                        name: inner.name.clone(),
                                        retry_after,
                                    },
                                );
                            }
                        }
                    }
                    this.state = State::Admit(input, body);
                }
                State::RateWait(input, body, mut sleep, at) => {
                    if sleep.as_mut().poll(cx).is_pending() {
                        this.state = State::RateWait(input, body, sleep, at);
                        return Poll::Pending;
                    }
                    this.state = State::Admit(input, body);
                }
                State::Admit(input, body) => {
                    if inner.is_shut_down() {
                        return this.refused(input, inner.shut_down_error());
                    }
                    if inner.try_admit() {
                        this.state = this.submit(input, body);
                        continue;
                    }
                    match inner.on_full() {
                        OnFull::Abort => return Poll::Ready(Err(inner.refused_full(input))),
                        OnFull::Wait(wait) if wait.is_zero() => {
                            return this.refused(input, inner.full());
                        }
                        OnFull::CallerRuns => {
                            inner.counters.permitted.fetch_add(1, Relaxed);
                            inner.caller_runs.fetch_add(1, Relaxed);
                            let started = inner.telemetry.on_permitted();
                            let fut = {
                                let _inside = reentry::enter(inner.id());
                                Box::pin(body(input))
                            };
                            this.state = State::Inline {
                                fut,
                                counted: true,
                                started,
                            };
                        }
                        OnFull::Wait(wait) => {
                            let started = inner.clock.now();
                            // No deadline for a wait too long for an `Instant`: never times out.
                            let sleep = deadline(started, wait.as_std())
                                .map(|deadline| inner.clock.sleep_until(deadline));
                            this.state = State::Waiting {
                                input,
                                body,
                                started,
                                sleep,
                                ticket: None,
                            };
                        }
                    }
                }
                State::Waiting {
                    input,
                    body,
                    started,
                    mut sleep,
                    ticket,
                } => {
                    let ticket = inner.room.register_task(ticket, cx.waker());
                    if inner.is_shut_down() {
                        inner.room.deregister(ticket);
                        return this.refused(input, inner.shut_down_error());
                    }
                    if inner.try_admit() {
                        inner.room.deregister(ticket);
                        let waited = inner.clock.now().saturating_duration_since(started);
                        inner.telemetry.record_wait(waited);
                        this.state = this.submit(input, body);
                        continue;
                    }
                    if sleep
                        .as_mut()
                        .is_some_and(|s| s.as_mut().poll(cx).is_ready())
                    {
                        if !inner.room.deregister(ticket) {
                            // Woken for a slot we will not use: pass it on.
                            inner.room.wake_one();
                        }
                        let waited = inner.clock.now().saturating_duration_since(started);
                        return this.refused(
                            input,
                            BulkheadError::Timeout {
                                name: inner.name.clone(),
                                waited,
                            },
                        );
                    }
                    this.state = State::Waiting {
                        input,
                        body,
                        started,
                        sleep,
                        ticket: Some(ticket),
                    };
                    return Poll::Pending;
                }
                State::Submitted { mut rx, id } => match Pin::new(&mut rx).poll(cx) {
                    Poll::Pending => {
                        this.state = State::Submitted { rx, id };
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok(outcome)) => return Poll::Ready(inner.settle(outcome)),
                    Poll::Ready(Err(_)) => sender_lost(),
                },
                State::Inline { .. } => unreachable_state(),
                State::Done => panic!("`CallAsync` polled after completion"),
            }
        }
    }
}

#[cold]
fn sender_lost() -> ! {
    // Every job sends exactly one outcome before its sender is dropped (see `job`).
    panic!("bulkhead bug: a pool job was dropped without an outcome")
}

#[cold]
fn unreachable_state() -> ! {
    panic!("bulkhead bug: inline state handled above")
}

impl<I, F, Fut: Future> Drop for CallAsync<I, F, Fut> {
    fn drop(&mut self) {
        let inner = self.pool.inner();
        match &self.state {
            // A reserved rate-limit permission nobody will use: give it back.
            State::RateWait(.., at) => inner.rate.give_back(*at),
            State::Waiting {
                ticket: Some(ticket),
                ..
            } if !inner.room.deregister(*ticket) => inner.room.wake_one(),
            // Still queued: remove it so it never runs and its slot frees now. Otherwise a
            // worker has it: it sees the closed channel and skips it, or finishes it.
            State::Submitted { id: Some(id), .. } => {
                inner.cancel_queued(*id);
            }
            // Caller-runs given up part-way (a panic was counted where it happened).
            State::Inline {
                counted: true,
                started,
                ..
            } => {
                inner.counters.cancelled.fetch_add(1, Relaxed);
                inner
                    .telemetry
                    .on_finished(*started, CallOutcome::Cancelled);
            }
            _ => {}
        }
    }
}

impl<I, F, Fut: Future> fmt::Debug for CallAsync<I, F, Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Start(..) | State::Admit(..) => "start",
            State::RateWait(..) => "waiting for the rate limit",
            State::Waiting { .. } => "waiting for room",
            State::Submitted { .. } => "submitted",
            State::Inline { .. } => "running inline",
            State::Done => "done",
        };
        f.debug_struct("CallAsync")
            .field("bulkhead", self.pool.name())
            .field("state", &state)
            .finish()
    }
}

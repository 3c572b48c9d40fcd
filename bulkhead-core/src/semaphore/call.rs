//! The futures of an async call to a semaphore bulkhead: [`SemaphoreCall`] (acquire, then the
//! body under the permit) and [`RunAdmitted`] (the body under a permit already taken, and
//! the call timeout).
//!
//! One flat state machine per call, `Acquiring → Running → Done`, with no `async fn` layer
//! in between: an uncontended call with a ready body takes its permit, polls the body and
//! returns the permit in its first poll, moving the body once. The body is not polled
//! before the permit is held, and it is polled only through [`RunAsync`], which marks the
//! bulkhead entered on the polling thread during each poll. Dropping the future releases
//! what it holds at that point: a place in the queue (as [`Acquire`] does) or the permit,
//! counted `cancelled`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use super::{Acquire, RunAsync, Shared};
use crate::BulkheadError;
use crate::call_timeout::{Deadline, Elapsed};

pin_project_lite::pin_project! {
    /// The future of [`SemaphoreBulkhead::call_async`](super::SemaphoreBulkhead::call_async):
    /// resolves to the body's output, or to the refusal (or the call timeout).
    #[must_use = "futures do nothing unless polled"]
    pub struct SemaphoreCall<'a, F> {
        #[pin]
        state: CallState<'a, F>,
    }
}

pin_project_lite::pin_project! {
    #[project = CallProj]
    #[project_replace = CallOwned]
    enum CallState<'a, F> {
        // The body is not pinned yet: it moves into `Running` once the permit is held.
        Acquiring { acquire: Acquire<'a>, body: F },
        Running { #[pin] run: RunAdmitted<'a, F> },
        Done,
    }
}

impl<'a, F> SemaphoreCall<'a, F> {
    pub(super) fn new(shared: &'a Shared, body: F) -> Self {
        SemaphoreCall {
            state: CallState::Acquiring {
                acquire: Acquire::new(shared),
                body,
            },
        }
    }
}

impl<F: Future> Future for SemaphoreCall<'_, F> {
    type Output = Result<F::Output, BulkheadError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project().state.project() {
                CallProj::Acquiring { acquire, .. } => {
                    let admitted = ready!(Pin::new(acquire).poll(cx));
                    let owned = self
                        .as_mut()
                        .project()
                        .state
                        .project_replace(CallState::Done);
                    let CallOwned::Acquiring { acquire, body } = owned else {
                        unreachable!("the state was `Acquiring` above")
                    };
                    let permit = match admitted {
                        Ok(permit) => permit,
                        Err(refused) => return Poll::Ready(Err(refused)),
                    };
                    let run = RunAdmitted::new(acquire.shared(), permit.run_async(body));
                    self.as_mut()
                        .project()
                        .state
                        .set(CallState::Running { run });
                }
                CallProj::Running { run } => {
                    let output = ready!(run.poll(cx));
                    self.as_mut().project().state.set(CallState::Done);
                    return Poll::Ready(output);
                }
                CallProj::Done => panic!("`SemaphoreCall` polled after it completed"),
            }
        }
    }
}

impl<F> fmt::Debug for SemaphoreCall<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            CallState::Acquiring { .. } => "acquiring",
            CallState::Running { .. } => "running",
            CallState::Done => "done",
        };
        f.debug_struct("SemaphoreCall")
            .field("state", &state)
            .finish()
    }
}

pin_project_lite::pin_project! {
    /// The future of [`SemaphoreBulkhead::run_admitted`](super::SemaphoreBulkhead::run_admitted):
    /// the body under its permit, and under the bulkhead's call timeout if one is set.
    #[must_use = "futures do nothing unless polled"]
    pub struct RunAdmitted<'a, F> {
        #[pin]
        run: Timing<'a, F>,
    }
}

pin_project_lite::pin_project! {
    #[project = TimingProj]
    enum Timing<'a, F> {
        Untimed { #[pin] run: RunAsync<'a, F> },
        Timed {
            #[pin]
            run: Deadline<RunAsync<'a, F>>,
            shared: &'a Shared,
            after: Duration,
        },
    }
}

impl<'a, F> RunAdmitted<'a, F> {
    /// `run` (a body under its permit) under `shared`'s call timeout, measured from now.
    pub(super) fn new(shared: &'a Shared, run: RunAsync<'a, F>) -> Self {
        let run = match shared.call_timeout.deadline(&*shared.clock) {
            None => Timing::Untimed { run },
            Some((deadline, after)) => Timing::Timed {
                run: Deadline::new(run, &*shared.clock, Some(deadline)),
                shared,
                after,
            },
        };
        RunAdmitted { run }
    }
}

impl<F: Future> Future for RunAdmitted<'_, F> {
    type Output = Result<F::Output, BulkheadError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().run.project() {
            TimingProj::Untimed { run } => run.poll(cx).map(Ok),
            TimingProj::Timed { run, shared, after } => match ready!(run.poll(cx)) {
                Ok(output) => Poll::Ready(Ok(output)),
                Err(Elapsed) => Poll::Ready(Err(shared.call_timed_out(*after))),
            },
        }
    }
}

impl<F> fmt::Debug for RunAdmitted<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let timed = matches!(self.run, Timing::Timed { .. });
        f.debug_struct("RunAdmitted")
            .field("timed", &timed)
            .finish_non_exhaustive()
    }
}

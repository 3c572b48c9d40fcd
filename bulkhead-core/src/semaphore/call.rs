//! The futures of an async call to a semaphore bulkhead: [`SemaphoreCall`] (acquire, then the
//! body under the permit) and [`RunAdmitted`] (the body under a permit already taken, and
//! the call timeout).
//!
//! [`SemaphoreCall`] keeps the body in one place from the call to its end: nothing moves
//! when the permit is taken. Its first poll decides admission without building an
//! [`Acquire`] (`acquire::try_now`: re-entry, the count, a refusal that needs no wait);
//! only a rate limit or a wait in the queue builds one. An uncontended call with a ready
//! body takes its permit, polls the body and returns the permit in that first poll. The
//! body is not polled before the permit is held, and it is polled only through
//! `permit::poll_inside` (as [`RunAsync`] polls), which marks the bulkhead entered on the
//! polling thread during each poll. Dropping the future releases what it holds at that
//! point: a place in the queue (as [`Acquire`] does) or the permit, counted `cancelled`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use super::acquire::{Refused, install, try_now_held};
use super::permit::{Held, poll_inside};
use super::{Acquire, AsyncPermit, RunAsync, Shared};
use crate::BulkheadError;
use crate::call_timeout::{Deadline, Elapsed};
use crate::clock::Sleep;

pin_project_lite::pin_project! {
    /// The future of [`SemaphoreBulkhead::call_async`](super::SemaphoreBulkhead::call_async):
    /// resolves to the body's output, or to the refusal (or the call timeout).
    #[must_use = "futures do nothing unless polled"]
    pub struct SemaphoreCall<'a, F> {
        shared: &'a Shared,
        // Only when the first poll could not decide: a rate limit or a wait in the queue.
        acquire: Option<Acquire<'a>>,
        // From admission until the body finishes (or panics, or times out).
        permit: Option<AsyncPermit<'a>>,
        // The call timeout's timer and length, armed at admission when one is set.
        deadline: Option<(Sleep, Duration)>,
        admitted: bool,
        // Polled in place; dropped once the call is over.
        #[pin]
        body: Option<F>,
    }

    impl<'a, F> PinnedDrop for SemaphoreCall<'a, F> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(permit) = this.project().permit.as_mut() {
                // Dropped before the body finished.
                permit.raw.cancelled = true;
            }
        }
    }
}

impl<'a, F> SemaphoreCall<'a, F> {
    pub(super) fn new(shared: &'a Shared, body: F) -> Self {
        SemaphoreCall {
            shared,
            acquire: None,
            permit: None,
            deadline: None,
            admitted: false,
            body: Some(body),
        }
    }
}

impl<F: Future> Future for SemaphoreCall<'_, F> {
    type Output = Result<F::Output, BulkheadError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let shared = *this.shared;
        if !*this.admitted {
            if this.body.is_none() {
                panic!("`SemaphoreCall` polled after it completed");
            }
            let admitted = match try_now_or(this.acquire, shared) {
                Some(Ok(held)) => {
                    install(this.permit, shared, held);
                    Ok(())
                }
                Some(Err(refused)) => Err(refused),
                None => {
                    let acquire = this.acquire.get_or_insert_with(|| Acquire::new(shared));
                    // What the permit holds, made into the permit in its slot here.
                    let admitted = match ready!(Pin::new(&mut *acquire).poll_held(cx)) {
                        Ok(held) => {
                            install(this.permit, shared, held);
                            Ok(())
                        }
                        Err(Refused) => Err(acquire.take_refusal()),
                    };
                    *this.acquire = None;
                    admitted
                }
            };
            if let Err(refused) = admitted {
                this.body.set(None);
                return Poll::Ready(Err(refused));
            }
            *this.admitted = true;
            if let Some((at, after)) = shared.call_timeout.deadline(&*shared.clock) {
                *this.deadline = Some((shared.clock.sleep_until(at), after));
            }
        }
        // As `Deadline` does: the timer first, so a body past its deadline is not polled.
        if let Some((sleep, after)) = this.deadline
            && sleep.as_mut().poll(cx).is_ready()
        {
            let after = *after;
            if let Some(permit) = this.permit.as_mut() {
                permit.raw.cancelled = true;
            }
            *this.permit = None;
            *this.deadline = None;
            this.body.set(None);
            return Poll::Ready(Err(shared.call_timed_out(after)));
        }
        let (Some(body), true) = (this.body.as_mut().as_pin_mut(), this.permit.is_some()) else {
            panic!("`SemaphoreCall` polled after it completed");
        };
        let output = ready!(poll_inside(this.permit, body, cx));
        *this.deadline = None;
        this.body.set(None);
        Poll::Ready(Ok(output))
    }
}

/// The first poll's decision without an [`Acquire`] (`None`: one is needed, or is already
/// under way).
#[inline(always)]
fn try_now_or(
    acquire: &Option<Acquire<'_>>,
    shared: &Shared,
) -> Option<Result<Held, BulkheadError>> {
    if acquire.is_some() {
        return None;
    }
    try_now_held(shared)
}

impl<F> fmt::Debug for SemaphoreCall<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match (self.admitted, &self.permit) {
            (false, _) if self.body.is_none() => "done",
            (false, _) => "acquiring",
            (true, Some(_)) => "running",
            (true, None) => "done",
        };
        f.debug_struct("SemaphoreCall")
            .field("state", &state)
            .finish()
    }
}

pin_project_lite::pin_project! {
    /// The future of [`AsyncPermit::run_timed`](super::AsyncPermit::run_timed):
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
    #[inline(always)]
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

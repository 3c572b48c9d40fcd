//! Thread-pool calls under the bulkhead's call timeout (`timeout` in the config).
//!
//! The deadline is measured on the pool's clock from when a worker starts the body (time
//! in the queue has its own limit, `max_queue_wait`).
//!
//! * async body: the future is raced against the deadline on the worker; at the deadline
//!   it is dropped and the worker is free at once.
//! * sync body: it cannot be interrupted. The caller stops waiting at the deadline and gets
//!   [`BulkheadError::CallTimeout`]; the worker runs the body to its end and the result is
//!   thrown away, counted `discarded`. So the body and its input must be `'static`: nothing
//!   the caller lends may outlive its wait.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering::AcqRel, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_channel::oneshot;

use super::ThreadPoolBulkhead;
use crate::call_timeout::{Deadline, Elapsed};
use crate::clock::{Clock, Sleep};
use crate::{BulkheadError, Refused};

/// What a timed call returns: the body's output, or a [`BulkheadError::CallTimeout`]
/// (`Ok(Err(..))`: the call was admitted, so its input is gone), or a refusal that hands
/// the input back (`Err(Refused)`: the body never ran).
pub type Timed<R, I> = Result<Result<R, BulkheadError>, Refused<I>>;

const RUNNING: u8 = 0;
const FINISHED: u8 = 1;
const CALLER_GONE: u8 = 2;

impl ThreadPoolBulkhead {
    /// Sets (or, with `None`, removes) how long a timed call may run
    /// ([`call_timed`](Self::call_timed), [`call_async_timed`](Self::call_async_timed)).
    #[must_use]
    pub fn with_call_timeout(self, timeout: Option<Duration>) -> Self {
        self.set_call_timeout(timeout);
        self
    }

    /// Changes the call timeout live, for calls started after this.
    pub fn set_call_timeout(&self, timeout: Option<Duration>) {
        self.shared().call_timeout.set(timeout);
    }

    /// The call timeout, if one is set.
    pub fn call_timeout(&self) -> Option<Duration> {
        self.shared().call_timeout.get()
    }

    /// [`call_async`](Self::call_async) under the call timeout: a body still running at
    /// the deadline (on the pool's clock, from when a worker started it) is dropped there,
    /// freeing the worker at once, and the call returns `Ok(Err(CallTimeout))`.
    ///
    /// # Errors
    ///
    /// `Err(Refused)` with the input when the call did not run (the refusals of
    /// [`call`](Self::call)); `Ok(Err(BulkheadError::CallTimeout))` when it ran past the
    /// deadline.
    pub async fn call_async_timed<I, F, Fut>(&self, input: I, body: F) -> Timed<Fut::Output, I>
    where
        I: Send + 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let Some(timeout) = self.shared().call_timeout.get() else {
            return self.call_async(input, body).await.map(Ok);
        };
        let ran = self
            .call_async(input, self.under_deadline(Some(timeout), body))
            .await;
        self.settle_deadline(ran, timeout)
    }

    /// `body` as a worker runs it under the call timeout `timeout`: cut at the deadline,
    /// measured on the pool's clock from when the worker starts it (`None`: never cut).
    pub(crate) fn under_deadline<I, F, Fut>(
        &self,
        timeout: Option<Duration>,
        body: F,
    ) -> impl FnOnce(I) -> Deadline<Fut> + Send + use<I, F, Fut>
    where
        I: 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: Future + 'static,
    {
        let clock = Arc::clone(&self.shared().clock);
        move |input: I| {
            let deadline = timeout.and_then(|t| clock.now().checked_add(t));
            Deadline::new(body(input), &*clock, deadline)
        }
    }

    /// A timed call's result from a run under [`under_deadline`](Self::under_deadline): a
    /// body cut at the deadline is a counted `CallTimeout` after `timeout`.
    pub(crate) fn settle_deadline<R, I>(
        &self,
        ran: Result<Result<R, Elapsed>, Refused<I>>,
        timeout: Duration,
    ) -> Timed<R, I> {
        match ran? {
            Ok(output) => Ok(Ok(output)),
            Err(Elapsed) => Ok(Err(self.timed_out(timeout))),
        }
    }

    /// [`call`](Self::call) under the call timeout: the caller stops waiting at the
    /// deadline (on the pool's clock, from when a worker started the body) and gets
    /// `Ok(Err(CallTimeout))`; the worker finishes the body, whose result is discarded
    /// (counted in the snapshot's `discarded`). Blocks the calling thread like `call`.
    ///
    /// # Errors
    ///
    /// As [`call_async_timed`](Self::call_async_timed): `Err(Refused)` when the call did not
    /// run, `Ok(Err(BulkheadError::CallTimeout))` when it ran past the deadline.
    pub fn call_timed<I, R>(
        &self,
        input: I,
        body: impl FnOnce(I) -> R + Send + 'static,
    ) -> Timed<R, I>
    where
        I: Send + 'static,
        R: Send + 'static,
    {
        let shared = self.shared();
        let Some(timeout) = shared.call_timeout.get() else {
            return self.call(input, body).map(Ok);
        };
        let state = Arc::new(AtomicU8::new(RUNNING));
        let (started_tx, started) = oneshot::channel::<Instant>();
        let worker_state = Arc::clone(&state);
        let clock = Arc::clone(&shared.clock);
        let pool = self.clone();
        let call = self.call_async(input, move |input: I| async move {
            // Sent from the worker when it starts (the caller may be gone: ignored).
            let _ = started_tx.send(clock.now());
            let output = body(input);
            if worker_state
                .compare_exchange(RUNNING, FINISHED, AcqRel, Relaxed)
                .is_err()
            {
                pool.shared().counters.discarded.fetch_add(1, Relaxed);
            }
            output
        });
        let waiting = SyncWait {
            call: Some(Box::pin(call)),
            started: Some(started),
            sleep: None,
            clock: Arc::clone(&shared.clock),
            timeout,
        };
        let caller = crate::async_caller::caller();
        let waited = crate::async_caller::block(caller, || futures_executor::block_on(waiting));
        match waited {
            Waited::Done(result) => result.map(Ok),
            Waited::Elapsed(call) => {
                if state
                    .compare_exchange(RUNNING, CALLER_GONE, AcqRel, Relaxed)
                    .is_ok()
                {
                    drop(call);
                    return Ok(Err(self.timed_out(timeout)));
                }
                // The body finished just as the deadline passed: its result is on its way.
                crate::async_caller::block(caller, || futures_executor::block_on(call)).map(Ok)
            }
        }
    }

    /// How long a queued call can expect to wait for a worker: the mean time the calls
    /// queued so far waited (`None` before any call was queued). An estimate for a client's
    /// `Retry-After`, not a promise.
    pub fn expected_queue_wait(&self) -> Option<Duration> {
        let queued = self.shared().telemetry.queue_time();
        let count = u32::try_from(queued.count()).unwrap_or(u32::MAX);
        (count > 0).then(|| queued.sum() / count)
    }

    pub(crate) fn timed_out(&self, after: Duration) -> BulkheadError {
        let shared = self.shared();
        let error = BulkheadError::CallTimeout {
            name: shared.name.clone(),
            after,
        };
        shared.refuse(error)
    }
}

/// The caller of a timed sync call: the call's result, or the deadline (armed once the
/// worker reports that it started the body).
struct SyncWait<C> {
    call: Option<Pin<Box<C>>>,
    started: Option<oneshot::Receiver<Instant>>,
    sleep: Option<Sleep>,
    clock: Arc<dyn Clock>,
    timeout: Duration,
}

enum Waited<C: Future> {
    Done(C::Output),
    Elapsed(Pin<Box<C>>),
}

impl<C: Future> Future for SyncWait<C> {
    type Output = Waited<C>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Waited<C>> {
        let this = self.get_mut();
        let Some(call) = &mut this.call else {
            return Poll::Pending; // not polled again once it returned
        };
        if let Poll::Ready(output) = call.as_mut().poll(cx) {
            this.call = None;
            return Poll::Ready(Waited::Done(output));
        }
        if let Some(started) = &mut this.started
            && let Poll::Ready(at) = Pin::new(started).poll(cx)
        {
            this.started = None;
            // A dropped sender (the body never ran) leaves the call to resolve by itself.
            if let Ok(at) = at {
                let deadline = at.checked_add(this.timeout);
                this.sleep = deadline.map(|d| this.clock.sleep_until(d));
            }
        }
        if let Some(sleep) = &mut this.sleep
            && sleep.as_mut().poll(cx).is_ready()
            && let Some(call) = this.call.take()
        {
            return Poll::Ready(Waited::Elapsed(call));
        }
        Poll::Pending
    }
}

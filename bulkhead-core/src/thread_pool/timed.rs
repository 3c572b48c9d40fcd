//! Thread-pool calls under the bulkhead's call timeout (`timeout` in the config).
//!
//! The deadline is measured on the pool's clock from when a worker starts the body (time
//! in the queue has its own limit, `max_queue_wait`).
//!
//! One shape for every timed call ([`ThreadPoolBulkhead::timed_parts`]): the worker reports
//! when it starts the body, and the caller stops waiting at that instant plus the timeout,
//! whatever the body does.
//!
//! * async body: the future is also raced against the deadline on the worker; at the
//!   deadline it is dropped and the worker is free at once (counted `cancelled`). An async
//!   body that blocks its worker (never yields) is not cut: the caller is answered at the
//!   deadline all the same, and the body's late result is thrown away, counted `discarded`.
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
    /// Changes how long a timed call may run ([`call_timed`](Self::call_timed),
    /// [`call_async_timed`](Self::call_async_timed)) live, for calls started after this
    /// (`configure`).
    pub(crate) fn set_call_timeout(&self, timeout: Option<Duration>) {
        self.shared().call_timeout.set(timeout);
    }

    /// The call timeout, if one is set.
    pub fn call_timeout(&self) -> Option<Duration> {
        self.shared().call_timeout.get()
    }

    /// [`call_async`](Self::call_async) under the call timeout: the caller gets
    /// `Ok(Err(CallTimeout))` at the deadline (on the pool's clock, from when a worker
    /// started the body) whatever the body does. A body that awaits is dropped there,
    /// freeing its worker at once (counted `cancelled`); a body that blocks its worker
    /// cannot be interrupted: it runs to its end, its late result is thrown away (counted
    /// `discarded`), and its slot is freed when it returns.
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
        let (on_worker, caller) = self.timed_parts(Some(timeout), cut_at_deadline(self, body));
        caller.wait(self.call_async(input, on_worker)).await
    }

    /// The two sides of a call under the call timeout `timeout` (`None`: never cut): what a
    /// worker runs — `body(input, deadline)`, the deadline measured on the pool's clock from
    /// when the worker starts it — and the caller's side, which stops waiting at that same
    /// deadline whether or not the body yields ([`TimedCaller::wait`]).
    pub(crate) fn timed_parts<I, R, F, Fut>(
        &self,
        timeout: Option<Duration>,
        body: F,
    ) -> (
        impl FnOnce(I) -> OnWorker<Fut> + Send + 'static + use<I, R, F, Fut>,
        TimedCaller,
    )
    where
        I: 'static,
        F: FnOnce(I, Option<Instant>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<R, Elapsed>> + 'static,
    {
        let state = Arc::new(AtomicU8::new(RUNNING));
        let (started_tx, started) = oneshot::channel::<Instant>();
        let shared = Arc::clone(self.shared());
        let worker_state = Arc::clone(&state);
        let on_worker = move |input: I| {
            let at = shared.clock.now();
            // The caller arms its deadline from this instant (it may be gone: ignored).
            let _ = started_tx.send(at);
            let deadline = timeout.and_then(|t| at.checked_add(t));
            OnWorker {
                body: body(input, deadline),
                state: worker_state,
                shared,
            }
        };
        let caller = TimedCaller {
            pool: self.clone(),
            state,
            started: timeout.map(|_| started),
            timeout: timeout.unwrap_or_default(),
        };
        (on_worker, caller)
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
        let Some(timeout) = self.shared().call_timeout.get() else {
            return self.call(input, body).map(Ok);
        };
        let (on_worker, caller) = self.timed_parts(Some(timeout), move |input: I, _| {
            std::future::ready(Ok::<R, Elapsed>(body(input)))
        });
        let call = self.call_async(input, on_worker);
        let waiting = caller.wait(call);
        crate::async_caller::block(crate::async_caller::caller(), || {
            futures_executor::block_on(waiting)
        })
    }

    /// How long a queued call can expect to wait for a worker: the mean time the calls
    /// queued so far waited, over the sample the queue-time histogram holds
    /// ([`BulkheadSnapshot::queue_time`](crate::BulkheadSnapshot::queue_time); `None` before
    /// any was timed). An estimate for a client's `Retry-After`, not a promise.
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

/// `body`'s future cut at the deadline on `pool`'s clock (as a worker runs it), for
/// [`ThreadPoolBulkhead::timed_parts`].
pub(crate) fn cut_at_deadline<I, F, Fut>(
    pool: &ThreadPoolBulkhead,
    body: F,
) -> impl FnOnce(I, Option<Instant>) -> Deadline<Fut> + Send + 'static + use<I, F, Fut>
where
    F: FnOnce(I) -> Fut + Send + 'static,
    Fut: Future,
{
    let clock = Arc::clone(&pool.shared().clock);
    move |input, deadline| Deadline::new(body(input), &*clock, deadline)
}

pin_project_lite::pin_project! {
    /// A timed body as its worker runs it: a result that comes after the caller stopped
    /// waiting is counted `discarded`; a body cut at its deadline is reported to the job
    /// (counted `cancelled`, not `completed`).
    pub(crate) struct OnWorker<Fut> {
        #[pin]
        body: Fut,
        state: Arc<AtomicU8>,
        shared: Arc<super::shared::Shared>,
    }
}

impl<R, Fut: Future<Output = Result<R, Elapsed>>> Future for OnWorker<Fut> {
    type Output = Fut::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Fut::Output> {
        let this = self.project();
        let output = std::task::ready!(this.body.poll(cx));
        match &output {
            Ok(_) => {
                if this
                    .state
                    .compare_exchange(RUNNING, FINISHED, AcqRel, Relaxed)
                    .is_err()
                {
                    this.shared.counters.discarded.fetch_add(1, Relaxed);
                }
            }
            Err(Elapsed) => crate::call_timeout::mark_cut(),
        }
        Poll::Ready(output)
    }
}

/// The caller's side of a timed call (see [`ThreadPoolBulkhead::timed_parts`]).
pub(crate) struct TimedCaller {
    pool: ThreadPoolBulkhead,
    state: Arc<AtomicU8>,
    /// The instant the worker started the body (`None`: no timeout).
    started: Option<oneshot::Receiver<Instant>>,
    timeout: Duration,
}

impl TimedCaller {
    /// Awaits `call` (the submitted worker side) until the deadline: then a body still
    /// running is left to its worker, and the call is a counted `CallTimeout`.
    pub(crate) async fn wait<R, I, C>(self, call: C) -> Timed<R, I>
    where
        C: Future<Output = Result<Result<R, Elapsed>, Refused<I>>>,
    {
        let TimedCaller {
            pool,
            state,
            started,
            timeout,
        } = self;
        let waiting = Waiting {
            call: Some(Box::pin(call)),
            started,
            sleep: None,
            clock: Arc::clone(&pool.shared().clock),
            timeout,
        };
        let ran = match waiting.await {
            Waited::Done(ran) => ran,
            Waited::Elapsed(call) => {
                if state
                    .compare_exchange(RUNNING, CALLER_GONE, AcqRel, Relaxed)
                    .is_ok()
                {
                    drop(call);
                    return Ok(Err(pool.timed_out(timeout)));
                }
                // The body finished just as the deadline passed: its result is on its way.
                call.await
            }
        };
        match ran? {
            Ok(output) => Ok(Ok(output)),
            Err(Elapsed) => Ok(Err(pool.timed_out(timeout))),
        }
    }
}

/// The caller of a timed call: the call's result, or the deadline (armed once the worker
/// reports that it started the body).
struct Waiting<C> {
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

impl<C: Future> Future for Waiting<C> {
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

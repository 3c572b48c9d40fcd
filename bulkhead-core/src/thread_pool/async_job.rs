//! Async jobs: an async call's body runs to completion on a worker (`block_on`), and its
//! outcome waits in the job itself for the awaiting caller, who holds the same `Arc`: one
//! allocation per call, no channel.
//!
//! Invariants (all under the job's one lock, `slot`):
//! * the stage only moves forward: `Queued` → `Running` → `Ran` → `Ready` → `Done`, or
//!   `Queued` → `Ready` (failed or abandoned before it ran) → `Done`, or to `Done` at once
//!   when the caller has gone away;
//! * the caller gets exactly one outcome — the body's result, its panic, or the input back
//!   with a refusal — unless it went away first; then the outcome is dropped on the worker,
//!   quietly (a panicking `Drop` never takes the worker down), and a job whose caller went
//!   away before it started is never run;
//! * the outcome becomes `Ready` (and the caller's waker is woken) only in `deliver`, after
//!   the pool has counted the task, so a caller that returns sees its call counted;
//! * `delivered` is set, under the lock, when the stage leaves `Queued`/`Running`/`Ran` for
//!   `Ready` or `Done` from the pool's side. Until then the slot holds the waker of the
//!   caller's last pending poll, so a poll with that same waker ([`WakerId`]) that finds
//!   `delivered` clear may return `Pending` without the lock: the waker it would store is
//!   the one already there, and it is woken when the outcome is delivered.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::task::{Context, Poll, Waker};

use super::job::{Job, Outcome};
use crate::BulkheadError;
use crate::context::CapturedContext;
use crate::events::CallOutcome;
use crate::sync::{AtomicBool, Mutex};

/// Drops a user value on a worker; a panicking `Drop` must not take the worker down.
fn drop_quietly<T>(value: T) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(value)));
}

/// What tokio's "no reactor" panic means on a pool's worker, and how to fix it.
#[cfg(not(feature = "tokio"))]
pub(crate) const NO_RUNTIME_HELP: &str = "an `async` body of a thread-pool bulkhead runs on \
    the pool's own worker thread, where no tokio runtime is entered: enable the `tokio` \
    feature of the `bulkhead` crate (`bulkhead = { features = [\"tokio\"] }`), and the worker \
    enters the runtime of the task that awaits the call";
/// What tokio's "no reactor" panic means on a pool's worker, and how to fix it.
#[cfg(feature = "tokio")]
pub(crate) const NO_RUNTIME_HELP: &str = "an `async` body of a thread-pool bulkhead runs on \
    the pool's own worker thread, which enters the tokio runtime of the task that awaits the \
    call — and this call was awaited outside any tokio runtime: await it from a tokio task";

/// A panic of an async body that used tokio where no tokio runtime is entered ("there is no
/// reactor running") gets [`NO_RUNTIME_HELP`] added to its message, for the caller it is
/// resumed on (and is reported as an error event here, since resuming a panic on the
/// caller prints nothing). Any other panic is passed on as it is.
pub(crate) fn explain_missing_runtime(payload: Box<dyn Any + Send>) -> Box<dyn Any + Send> {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied());
    match message {
        Some(message) if message.contains("no reactor running") => {
            let explained = format!("{message}\nhelp: {NO_RUNTIME_HELP}");
            tracing::error!(target: crate::telemetry::TARGET, "{explained}");
            Box::new(explained)
        }
        _ => payload,
    }
}

/// An async call's job: the body's future runs to completion on the worker; the outcome
/// waits here for the caller.
pub(crate) struct AsyncTask<I, F, Out> {
    slot: Mutex<Slot<I, F, Out>>,
    /// The pool is done with the job: its outcome is ready, or the caller went away (see
    /// the module's invariants). Lets a caller polling with the waker it left check
    /// without taking the lock the worker uses.
    delivered: AtomicBool,
    /// The caller's span and propagated context, entered on the worker around the body.
    context: CapturedContext,
    #[cfg(feature = "tokio")]
    runtime: Option<tokio::runtime::Handle>,
}

struct Slot<I, F, Out> {
    stage: Stage<I, F, Out>,
    /// The waker of the caller's last pending poll.
    waker: Option<Waker>,
    /// The caller dropped its future: nothing is run or delivered any more.
    caller_gone: bool,
}

enum Stage<I, F, Out> {
    /// Waiting for a worker: the input and the body.
    Queued(I, F),
    /// A worker runs the body.
    Running,
    /// The body is over; the outcome waits for [`Job::deliver`].
    Ran(Outcome<I, Out>),
    /// The caller may take the outcome.
    Ready(Outcome<I, Out>),
    /// The caller took the outcome, or went away.
    Done,
}

impl<I, F, Out> Slot<I, F, Out> {
    /// Makes `outcome` the caller's (returning its waker to wake outside the lock), or hands
    /// it back to be dropped when the caller has gone away.
    fn ready(&mut self, outcome: Outcome<I, Out>) -> Result<Option<Waker>, Outcome<I, Out>> {
        if self.caller_gone {
            self.stage = Stage::Done;
            return Err(outcome);
        }
        self.stage = Stage::Ready(outcome);
        Ok(self.waker.take())
    }
}

impl<I, F, Fut> AsyncTask<I, F, Fut::Output>
where
    I: Send + 'static,
    F: FnOnce(I) -> Fut + Send + 'static,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    /// A job for `body(input)`: the pool's handle and the caller's, one allocation. With
    /// feature `tokio`, the current tokio runtime (if any) is entered on the worker.
    pub(crate) fn job(input: I, body: F) -> (Arc<dyn Job>, Arc<Self>) {
        let task = Arc::new(AsyncTask {
            slot: Mutex::new(Slot {
                stage: Stage::Queued(input, body),
                waker: None,
                caller_gone: false,
            }),
            delivered: AtomicBool::new(false),
            context: CapturedContext::capture(),
            #[cfg(feature = "tokio")]
            runtime: tokio::runtime::Handle::try_current().ok(),
        });
        (Arc::clone(&task) as Arc<dyn Job>, task)
    }
}

impl<I, F, Out> AsyncTask<I, F, Out> {
    /// The caller's poll: the outcome once delivered, else its waker is kept. `left` is
    /// the waker the caller's last pending poll left here (the caller keeps it).
    #[inline]
    pub(crate) fn poll_outcome(
        &self,
        cx: &mut Context<'_>,
        left: &mut Option<WakerId>,
    ) -> Poll<Outcome<I, Out>> {
        let waker = WakerId::of(cx.waker());
        if *left == Some(waker) && !self.delivered.load(Acquire) {
            return Poll::Pending;
        }
        self.poll_locked(cx, left, waker)
    }

    fn poll_locked(
        &self,
        cx: &mut Context<'_>,
        left: &mut Option<WakerId>,
        waker: WakerId,
    ) -> Poll<Outcome<I, Out>> {
        let mut slot = self.slot.lock();
        match slot.stage {
            // Moved out only when there is something to take.
            Stage::Ready(_) => match std::mem::replace(&mut slot.stage, Stage::Done) {
                Stage::Ready(outcome) => Poll::Ready(outcome),
                _ => unreachable!("the stage was `Ready` above"),
            },
            Stage::Done => outcome_lost(),
            _ => {
                match &mut slot.waker {
                    Some(waker) => waker.clone_from(cx.waker()),
                    None => slot.waker = Some(cx.waker().clone()),
                }
                *left = Some(waker);
                Poll::Pending
            }
        }
    }

    /// The caller drops its future: a job not yet started is never run, and an outcome
    /// not yet taken is dropped (here if it is ready, else on the worker).
    pub(crate) fn caller_gone(&self) {
        let (stage, waker) = {
            let mut slot = self.slot.lock();
            slot.caller_gone = true;
            let stage = match slot.stage {
                Stage::Ready(_) => std::mem::replace(&mut slot.stage, Stage::Done),
                _ => Stage::Done,
            };
            (stage, slot.waker.take())
        };
        drop((stage, waker));
    }

    /// Fails or abandons a job that has not run: the input comes back in `outcome(input)`.
    fn end_unrun(&self, outcome: impl FnOnce(I) -> Outcome<I, Out>) {
        let mut slot = self.slot.lock();
        let Stage::Queued(input, body) = std::mem::replace(&mut slot.stage, Stage::Done) else {
            // Already run, failed or abandoned: the stage stays as it was.
            return;
        };
        let ready = slot.ready(outcome(input));
        self.delivered.store(true, Release);
        drop(slot);
        drop_quietly(body);
        match ready {
            Ok(waker) => waker.into_iter().for_each(Waker::wake),
            Err(outcome) => drop_quietly(outcome),
        }
    }
}

/// A waker's identity: the two pointers [`Waker::will_wake`] compares. While the job's
/// slot holds a clone of a waker, another waker with the same identity wakes the same
/// task.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct WakerId(usize, usize);

impl WakerId {
    fn of(waker: &Waker) -> Self {
        WakerId(
            waker.data().addr(),
            std::ptr::from_ref(waker.vtable()).addr(),
        )
    }
}

#[cold]
fn outcome_lost() -> ! {
    // The caller takes the outcome once, and stops polling after it.
    panic!("bulkhead bug: a pool job's outcome was taken twice")
}

impl<I, F, Fut> Job for AsyncTask<I, F, Fut::Output>
where
    I: Send + 'static,
    F: FnOnce(I) -> Fut + Send + 'static,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    fn run(&self) -> CallOutcome {
        let (input, body) = {
            let mut slot = self.slot.lock();
            match std::mem::replace(&mut slot.stage, Stage::Running) {
                Stage::Queued(input, body) if !slot.caller_gone => (input, body),
                Stage::Queued(input, body) => {
                    // The caller dropped its future before the body started: never run it.
                    slot.stage = Stage::Done;
                    drop(slot);
                    drop_quietly((input, body));
                    return CallOutcome::Cancelled;
                }
                stage => {
                    slot.stage = stage;
                    return CallOutcome::Cancelled;
                }
            }
        };
        let result = {
            let _context = self.context.enter();
            #[cfg(feature = "tokio")]
            let _runtime = self.runtime.as_ref().map(|handle| handle.enter());
            catch_unwind(AssertUnwindSafe(move || {
                futures_executor::block_on(body(input))
            }))
        };
        // A timed body cut at its deadline (`thread_pool::timed`) was dropped, not finished.
        let cut = crate::call_timeout::take_cut();
        let (outcome, ran) = match result {
            Ok(value) if cut => (Outcome::Ran(value), CallOutcome::Cancelled),
            Ok(value) => (Outcome::Ran(value), CallOutcome::Completed),
            Err(payload) => (
                Outcome::Panicked(explain_missing_runtime(payload)),
                CallOutcome::Panicked,
            ),
        };
        self.slot.lock().stage = Stage::Ran(outcome);
        ran
    }

    fn deliver(&self) {
        let mut slot = self.slot.lock();
        let Stage::Ran(outcome) = std::mem::replace(&mut slot.stage, Stage::Done) else {
            return;
        };
        let ready = slot.ready(outcome);
        self.delivered.store(true, Release);
        drop(slot);
        match ready {
            Ok(waker) => waker.into_iter().for_each(Waker::wake),
            // A caller that went away while the body ran: the result is discarded.
            Err(outcome) => drop_quietly(outcome),
        }
    }

    fn fail(&self, error: BulkheadError) {
        self.end_unrun(|input| Outcome::Refused(input, error));
    }

    fn abandon(&self) {
        self.end_unrun(Outcome::Abandoned);
    }
}

impl<I, F, Out> Drop for AsyncTask<I, F, Out> {
    fn drop(&mut self) {
        // The last handle may be the worker's (the caller went away): whatever is left of
        // the caller's values is dropped quietly. (The last handle: nobody else can lock.)
        let stage = std::mem::replace(&mut self.slot.get_mut().stage, Stage::Done);
        drop_quietly(stage);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::task::{Context, Poll, Wake, Waker};

    use super::{AsyncTask, Outcome};

    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn only_the_waker_the_last_pending_poll_left_is_woken_by_the_delivery() {
        let (job, task) = AsyncTask::job(20, |n: i32| async move { n + 1 });
        let (first, second) = (
            Arc::new(CountingWaker::default()),
            Arc::new(CountingWaker::default()),
        );
        let (first_waker, second_waker) = (Waker::from(first.clone()), Waker::from(second.clone()));
        let mut left = None;
        let mut poll =
            |waker: &Waker| task.poll_outcome(&mut Context::from_waker(waker), &mut left);
        assert!(poll(&first_waker).is_pending());
        // The same waker again: answered from the flag, the registration stays.
        assert!(poll(&first_waker).is_pending());
        // Another waker replaces it.
        assert!(poll(&second_waker).is_pending());
        assert_eq!(job.run(), crate::events::CallOutcome::Completed);
        assert!(poll(&second_waker).is_pending(), "ran, not yet delivered");
        job.deliver();
        assert_eq!((first.0.load(SeqCst), second.0.load(SeqCst)), (0, 1));
        match poll(&second_waker) {
            Poll::Ready(Outcome::Ran(value)) => assert_eq!(value, 21),
            _ => panic!("the delivered outcome is taken by the next poll"),
        }
    }
}

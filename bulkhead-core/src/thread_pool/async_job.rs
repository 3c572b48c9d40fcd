//! Async jobs: an async call's body runs to completion on a worker (`block_on`), and its
//! outcome waits in the job itself for the awaiting caller, who holds the same `Arc`: one
//! allocation per call, no channel.
//!
//! Invariants (the job's state word, `state`: a stage and the `GONE` flag; no lock):
//! * the stage only moves forward: `QUEUED` → `RUNNING` → `RAN` → `READY` → `DONE`, or
//!   `QUEUED` → `RUNNING` → `READY` (failed or abandoned before it ran: the failure takes
//!   the same claim a run does) → `DONE`, or to `DONE` from `QUEUED` or `RAN` when the caller
//!   has gone away;
//! * leaving `QUEUED` is one compare-and-swap from exactly `QUEUED` (caller still there): its
//!   winner alone takes the payload and, until `READY`, owns the outcome cell; the caller
//!   owns the outcome from `READY` (seen with `Acquire`) on;
//! * the caller gets exactly one outcome — the body's result, its panic, or the input back
//!   with a refusal — unless it went away first (`GONE`, set by the caller's one
//!   `fetch_or`); then the outcome is dropped on the worker, quietly (a panicking `Drop`
//!   never takes the worker down), or by the caller if it was already `READY`; a job whose
//!   caller went away before it started is never run;
//! * the outcome becomes `READY` (and the caller's waker is woken) only in `deliver`, after
//!   the pool has counted the task, so a caller that returns sees its call counted; the
//!   pool's handle is dropped between `READY` and the wake-up (the waker taken first), so
//!   the caller it wakes holds the last handle and frees the job on its own thread, where
//!   the next call allocates;
//! * the caller registers its waker (`AtomicWaker`) before it reads the stage, the pool
//!   publishes `READY` before it wakes: a poll that reads a stage before `READY` is woken
//!   later. A poll with the waker its last pending poll registered ([`WakerId`], kept in
//!   the job's `left`, which only the caller uses) skips the registration: that waker is
//!   still the one registered (only the delivery's wake takes it, after `READY`).
// One of the crate's two modules with `unsafe` code (with `job`; the crate denies it
// everywhere else): the outcome and payload cells the state word guards (the invariants
// above), each use with its SAFETY comment. loom models each race (`.ci/run`).
#![allow(unsafe_code)]

use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::task::{Context, Poll, Waker};

use super::job::{Job, Outcome};
use crate::BulkheadError;
use crate::context::CapturedContext;
use crate::events::CallOutcome;
use crate::sync::{AtomicU8, AtomicWaker, UnsafeCell};

/// Drops a user value on a worker; a panicking `Drop` must not take the worker down.
fn drop_quietly<T>(value: T) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(value)));
}

/// What tokio's "no reactor" panic means on a pool's worker, and how to fix it.
#[cfg(not(feature = "tokio"))]
pub(crate) const NO_RUNTIME_HELP: &str = "an `async` body of a thread-pool bulkhead runs on \
    the pool's own worker thread, where no tokio runtime is entered: enable the `tokio` \
    feature of the `bulkhead` crate (`bulkheads = { features = [\"tokio\"] }`), and the worker \
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
    /// The stage (`QUEUED` … `DONE`) and the `GONE` flag (see the module's invariants).
    state: AtomicU8,
    /// The input and the body until a worker (or a failure) claims them, then the outcome:
    /// the claim's winner's until `READY`, the caller's after. One cell for both, as one
    /// owner holds both at any stage, which keeps the job small (one allocation, copied
    /// into place field by field rather than by `memcpy`).
    slot: UnsafeCell<Slot<I, F, Out>>,
    /// The waker of the caller's last pending poll.
    waker: AtomicWaker,
    /// Which waker that is, as the caller last registered it: read and written by the
    /// caller's polls only (the pool never looks at it), so a plain cell. Kept here rather
    /// than in the caller's future, which stays small.
    left: Cell<Option<WakerId>>,
    /// The caller's span and propagated context, entered on the worker around the body
    /// (`None`: nothing to carry, so nothing is entered); boxed, as it is rare and large.
    context: Option<Box<CapturedContext>>,
    #[cfg(feature = "tokio")]
    runtime: Option<tokio::runtime::Handle>,
}

/// What an [`AsyncTask`]'s cell holds.
enum Slot<I, F, Out> {
    /// The input and the body, until claimed.
    Payload(I, F),
    /// The claim's outcome, until the caller takes it (or it is dropped).
    Outcome(Outcome<I, Out>),
    /// Claimed and not yet stored, or taken.
    Empty,
}

/// Waiting for a worker: the payload is in place.
const QUEUED: u8 = 0;
/// Claimed: a worker runs the body, or a failure is being delivered.
const RUNNING: u8 = 1;
/// The body is over; the outcome waits for [`Job::deliver`].
const RAN: u8 = 2;
/// The caller may take the outcome.
const READY: u8 = 3;
/// The caller took the outcome, or went away and it was dropped.
const DONE: u8 = 4;
/// The bits of the stage.
const STAGE: u8 = 0b0111;
/// The caller dropped its future: nothing is run or delivered any more.
const GONE: u8 = 0b1000;

// SAFETY: the cells are used by one thread at a time, as the state word decides (the
// module's invariants), which moves their values across threads: `Send` bounds, as a
// `Mutex` of them would need. `left` is used only through the caller's handle, by the
// polls of its future (`&mut`, so one at a time) and never by the pool.
unsafe impl<I: Send, F: Send, Out: Send> Sync for AsyncTask<I, F, Out> {}

impl<I, F, Fut> AsyncTask<I, F, Fut::Output>
where
    I: Send + 'static,
    F: FnOnce(I) -> Fut + Send + 'static,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    /// A job for `body(input)`: the pool's handle and the caller's, one allocation. With
    /// feature `tokio`, the current tokio runtime (if any) is entered on the worker.
    #[inline]
    pub(crate) fn job(input: I, body: F) -> (Arc<dyn Job>, Arc<Self>) {
        let task = Arc::new(AsyncTask {
            state: AtomicU8::new(QUEUED),
            slot: UnsafeCell::new(Slot::Payload(input, body)),
            waker: AtomicWaker::default(),
            left: Cell::new(None),
            context: CapturedContext::capture_if_any().map(Box::new),
            #[cfg(feature = "tokio")]
            runtime: tokio::runtime::Handle::try_current().ok(),
        });
        (Arc::clone(&task) as Arc<dyn Job>, task)
    }
}

impl<I, F, Out> AsyncTask<I, F, Out> {
    /// The caller's poll: the outcome once delivered, else its waker is kept (registered
    /// unless it is the one the caller's last pending poll left here). Only the caller's
    /// future calls it, one poll at a time.
    #[inline]
    pub(crate) fn poll_outcome(&self, cx: &mut Context<'_>) -> Poll<Outcome<I, Out>> {
        let waker = WakerId::of(cx.waker());
        if self.left.get() != Some(waker) {
            self.waker.register(cx.waker());
            self.left.set(Some(waker));
        }
        match self.state.load(Acquire) & STAGE {
            READY => {
                // Only the caller moves the stage on from `READY`.
                self.state.store(DONE, Relaxed);
                match self.take_outcome() {
                    Some(outcome) => Poll::Ready(outcome),
                    None => outcome_lost(),
                }
            }
            DONE => outcome_lost(),
            _ => Poll::Pending,
        }
    }

    /// The outcome out of its cell, by whoever owns it now (the state word says who).
    fn take_outcome(&self) -> Option<Outcome<I, Out>> {
        match self.take_slot() {
            Slot::Outcome(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// The payload out of the cell, by the claim's winner.
    fn take_payload(&self) -> Option<(I, F)> {
        match self.take_slot() {
            Slot::Payload(input, body) => Some((input, body)),
            _ => None,
        }
    }

    /// The cell's value, left `Empty`, by whoever owns it now (the state word says who).
    fn take_slot(&self) -> Slot<I, F, Out> {
        // SAFETY: called only by the cell's owner of the moment (module invariants).
        self.slot
            .with_mut(|slot| unsafe { std::mem::replace(&mut *slot, Slot::Empty) })
    }

    /// The caller drops its future: a job not yet started is never run, and an outcome
    /// not yet taken is dropped (here if it is ready, else on the worker).
    pub(crate) fn caller_gone(&self) {
        let before = self.state.fetch_or(GONE, AcqRel);
        if before & STAGE == READY {
            // The pool is done with the job: the ready outcome is the caller's to drop.
            self.state.store(DONE | GONE, Relaxed);
            drop(self.take_outcome());
        }
        drop(self.waker.take());
    }

    /// Claims the payload from `QUEUED`: `Some` for the first of run, fail and abandon,
    /// while the caller is still there. A job whose caller went away is emptied here (its
    /// payload dropped quietly) and `None` returned.
    #[inline]
    fn claim(&self) -> Option<(I, F)> {
        match self
            .state
            .compare_exchange(QUEUED, RUNNING, Acquire, Acquire)
        {
            // The claim from `QUEUED` is won once; the payload is the winner's.
            Ok(_) => self.take_payload(),
            Err(state) if state == QUEUED | GONE => {
                if self
                    .state
                    .compare_exchange(state, DONE | GONE, Acquire, Relaxed)
                    .is_ok()
                {
                    // As above: this thread won the move out of `QUEUED`.
                    drop_quietly(self.take_slot());
                }
                None
            }
            Err(_) => None,
        }
    }

    /// Stores the outcome as the claim's winner and marks it `RAN`.
    fn ran(&self, outcome: Outcome<I, Out>) {
        // SAFETY: between the claim and `READY` the outcome is the winner's (this thread).
        self.slot
            .with_mut(|slot| unsafe { *slot = Slot::Outcome(outcome) });
        // `RUNNING` → `RAN`, keeping `GONE`: nobody else moves the stage meanwhile.
        self.state.fetch_add(RAN - RUNNING, Release);
    }

    /// `RAN` → `READY`, and the caller's waker to wake, taken after `READY` is published
    /// (as `AtomicWaker::wake` takes it); or, the caller gone, drops the outcome.
    fn make_ready(&self) -> Option<Waker> {
        let ready = self.state.compare_exchange(RAN, READY, AcqRel, Acquire);
        match ready {
            Ok(_) => self.waker.take(),
            Err(state) if state == RAN | GONE => {
                self.state.store(DONE | GONE, Relaxed);
                // A caller that went away while the body ran: the result is discarded.
                drop_quietly(self.take_outcome());
                None
            }
            // Not run (a failure already delivered), or delivered before: nothing to do.
            Err(_) => None,
        }
    }

    /// Fails or abandons a job that has not run: the input comes back in `outcome(input)`.
    fn end_unrun(&self, outcome: impl FnOnce(I) -> Outcome<I, Out>) {
        // Already run, failed or abandoned (or the caller gone): nothing to do.
        let Some((input, body)) = self.claim() else {
            return;
        };
        drop_quietly(body);
        self.ran(outcome(input));
        if let Some(waker) = self.make_ready() {
            waker.wake();
        }
    }
}

/// A waker's identity: the two pointers [`Waker::will_wake`] compares. While the job's
/// slot holds a clone of a waker, another waker with the same identity wakes the same
/// task.
/// (The vtable's address is never 0: an `Option<WakerId>` is two words.)
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct WakerId(usize, std::num::NonZeroUsize);

impl WakerId {
    fn of(waker: &Waker) -> Self {
        WakerId(
            waker.data().addr(),
            std::ptr::NonNull::from(waker.vtable()).addr(),
        )
    }
}

/// Runs a body's future to completion on this thread. The first poll is made with a waker
/// that does nothing, outside any executor: a body that is ready at once (no await that
/// waits) costs no executor set-up. A body still pending after it is polled again by
/// `block_on` with a waker of its own, as the `Future` contract allows (a future that
/// returned `Pending` registers the waker of its latest poll), so no wake-up is lost.
fn run_to_completion<Fut: std::future::Future>(future: Fut) -> Fut::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(value) => value,
        Poll::Pending => futures_executor::block_on(future),
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
        // Already failed, or the caller dropped its future before the body started: the
        // body never runs.
        let Some((input, body)) = self.claim() else {
            return CallOutcome::Cancelled;
        };
        let result = {
            let _context = self.context.as_deref().map(CapturedContext::enter);
            #[cfg(feature = "tokio")]
            let _runtime = self.runtime.as_ref().map(|handle| handle.enter());
            catch_unwind(AssertUnwindSafe(move || run_to_completion(body(input))))
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
        self.ran(outcome);
        ran
    }

    fn deliver(self: Arc<Self>) {
        let waker = self.make_ready();
        // The pool's handle goes before the wake-up: the caller it wakes holds the last one.
        drop(self);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn fail(&self, error: BulkheadError) {
        self.end_unrun(|input| Outcome::Refused(input, Box::new(error)));
    }

    fn abandon(&self) {
        self.end_unrun(Outcome::Abandoned);
    }
}

impl<I, F, Out> Drop for AsyncTask<I, F, Out> {
    fn drop(&mut self) {
        // The last handle may be the worker's (the caller went away): whatever is left of
        // the caller's values is dropped quietly. (The last handle: nobody else can use
        // the cells.)
        // Under loom the cells are left alone: the handles are std `Arc`s, whose
        // synchronisation loom does not see, so it would take this last use for a race with
        // the other side's (in the models every value is taken or dropped before).
        // Nothing is left once the caller took the outcome (the common end): no unwind
        // guard then.
        #[cfg(not(loom))]
        {
            // SAFETY: `&mut self`: no other handle exists.
            let empty = self
                .slot
                .with_mut(|slot| matches!(unsafe { &*slot }, Slot::Empty));
            if !empty {
                drop_quietly(self.take_slot());
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::future::Future;
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

    /// The worker's first poll uses a waker that does nothing: a body still pending then is
    /// polled again by the executor, and a wake-up sent later through the waker of that
    /// poll (here from another thread, once the body is waiting) finishes it.
    #[test]
    fn a_body_pending_at_its_first_poll_finishes_when_woken_later() {
        let (tx, rx) = futures_channel::oneshot::channel::<i32>();
        let (waiting_tx, waiting_rx) = std::sync::mpsc::channel();
        let mut rx = Some(rx);
        let (job, task) = AsyncTask::job(1, move |n: i32| {
            // Pending at the first poll: nothing is sent before it says it waits.
            std::future::poll_fn(move |cx| {
                let polled = std::pin::Pin::new(rx.as_mut().expect("not done")).poll(cx);
                if polled.is_pending() {
                    let _ = waiting_tx.send(());
                }
                polled.map(|sent| n + sent.expect("sent"))
            })
        });
        let sender = std::thread::spawn(move || {
            // The body has polled the oneshot and found it empty.
            waiting_rx.recv().unwrap();
            tx.send(41).unwrap();
        });
        assert_eq!(job.run(), crate::events::CallOutcome::Completed);
        sender.join().unwrap();
        job.deliver();
        match task.poll_outcome(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Outcome::Ran(value)) => assert_eq!(value, 42),
            _ => panic!("the body finished and its outcome was delivered"),
        }
    }

    /// The payload and the outcome share one cell, and a context is boxed: the job of a
    /// call with word-sized values is the state word, the cell, the waker slot and a
    /// pointer (and, with feature `tokio`, the runtime handle).
    #[test]
    fn a_job_holds_one_cell_and_a_boxed_context() {
        type Job = AsyncTask<u64, fn(u64) -> std::future::Ready<u64>, u64>;
        let handle = if cfg!(feature = "tokio") { 16 } else { 0 };
        assert!(
            std::mem::size_of::<Job>() <= 96 + handle,
            "{} bytes",
            std::mem::size_of::<Job>()
        );
    }

    /// The delivery drops the pool's handle before it wakes the caller: the woken caller
    /// holds the last one (and frees the job on its own thread).
    #[test]
    fn the_woken_caller_holds_the_job_s_last_handle() {
        struct CountsHandles(
            std::sync::OnceLock<std::sync::Weak<dyn Send + Sync>>,
            AtomicUsize,
        );
        impl Wake for CountsHandles {
            fn wake(self: Arc<Self>) {
                let handles = self.0.get().map_or(0, std::sync::Weak::strong_count);
                self.1.store(handles, SeqCst);
            }
        }
        let (job, task) = AsyncTask::job(1, |n: i32| async move { n });
        let counts = Arc::new(CountsHandles(
            std::sync::OnceLock::new(),
            AtomicUsize::new(0),
        ));
        let weak: std::sync::Weak<dyn Send + Sync> = Arc::downgrade(&task) as _;
        let _ = counts.0.set(weak);
        let waker = Waker::from(Arc::clone(&counts));
        assert!(
            task.poll_outcome(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(job.run(), crate::events::CallOutcome::Completed);
        job.deliver();
        assert_eq!(
            counts.1.load(SeqCst),
            1,
            "handles left when the caller was woken"
        );
        assert!(matches!(
            task.poll_outcome(&mut Context::from_waker(&waker)),
            Poll::Ready(Outcome::Ran(1))
        ));
    }

    #[test]
    fn only_the_waker_the_last_pending_poll_left_is_woken_by_the_delivery() {
        let (job, task) = AsyncTask::job(20, |n: i32| async move { n + 1 });
        let (first, second) = (
            Arc::new(CountingWaker::default()),
            Arc::new(CountingWaker::default()),
        );
        let (first_waker, second_waker) = (Waker::from(first.clone()), Waker::from(second.clone()));
        let poll = |waker: &Waker| task.poll_outcome(&mut Context::from_waker(waker));
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

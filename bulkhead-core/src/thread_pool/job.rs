//! Jobs: the unit of work a pool queues, with the thread pool's `unsafe` code: the one lifetime
//! erasure, and the cells its state word guards (as are `async_job`'s).
//!
//! A job is shared between the caller and the pool (`Arc<dyn Job>`). The pool runs it once
//! ([`Job::run`]) or fails it once ([`Job::fail`]); both first claim the job's payload (input
//! and body) by moving its state word from `QUEUED` to `CLAIMED`, so whichever comes first
//! wins and the other is a no-op. Either way the caller receives exactly one [`Outcome`].
//!
//! The state word (no lock): `QUEUED` → `CLAIMED` (one compare-and-swap: the winner alone
//! takes the payload and writes the outcome) → `DONE` (a release store after the outcome is
//! written; the caller reads the outcome only after an acquire load sees `DONE`, and the
//! pool side touches nothing but the `'static` caller handle after it). A job the pool drops without doing either
//! (only possible through a bug or a worker dying in our own code) is abandoned by
//! [`JobRef`]'s `Drop`, which hands the input back as well: nothing is dropped silently.
//!
//! # The lifetime erasure
//!
//! [`ThreadPoolBulkhead::call`](super::ThreadPoolBulkhead::call) blocks its caller until the
//! body has run, so the body may borrow from the caller's stack, like
//! [`std::thread::scope`]. The queue only holds `'static` jobs, so [`call_blocking`] erases
//! the job's lifetime. This is sound because of three facts, all local to this file:
//!
//! 1. **The caller cannot leave early.** [`call_blocking`] creates a [`WaitForDone`] guard
//!    *before* the job is handed to the pool; the guard's `Drop` (which also runs on unwind)
//!    blocks until the job's `done` flag is set. A job that is leaked instead makes the caller
//!    wait forever, which is a hang, never a dangling borrow.
//! 2. **Nothing borrowed is touched after `done`.** Every path that sets `done` (the state
//!    word's `DONE`)
//!    ([`SyncTask::signal`]) first consumes or drops the body and moves the input or result
//!    into the outcome slot; after `done` the pool side only unparks the caller (a `'static`
//!    [`Thread`] handle) and drops its `Arc`, whose remaining fields are then `None`.
//! 3. **The outcome never outlives the caller's frame.** The caller takes the outcome out of
//!    the shared slot before its own `Arc` goes away (in [`WaitForDone::drop`] on unwind), so
//!    when the pool's `Arc` is the last one, dropping the task drops no borrowed value.
//!
//! The task lives in an `Arc` (one allocation per call, the "job box") rather than on the
//! caller's stack so that no reference into freed memory exists while the pool signals
//! completion.
// One of the crate's two modules with `unsafe` code (with `async_job`; the crate denies it
// everywhere else): the lifetime erasure below and the cells the state word guards, each
// use with its SAFETY comment. Miri and loom check both (`.ci/run`).
#![allow(unsafe_code)]

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::thread::Thread;

use std::sync::Arc;

use crate::BulkheadError;
use crate::context::CapturedContext;
use crate::events::CallOutcome;
use crate::sync::{AtomicU8, UnsafeCell};

/// What a caller gets back from its job.
pub(crate) enum Outcome<I, R> {
    /// The body returned this.
    Ran(R),
    /// The body panicked with this payload.
    Panicked(Box<dyn Any + Send + 'static>),
    /// The job was failed before it ran; the input comes back. The error is boxed (a
    /// failure of an admitted call is rare, and its job allocated already), which keeps
    /// an outcome, and the job cell that holds it, three words for word-sized values.
    Refused(I, Box<BulkheadError>),
    /// The pool dropped the job without running or failing it; treated as `ShutDown`.
    Abandoned(I),
}

/// A unit of work the pool can run or fail, exactly once.
pub(crate) trait Job: Send + Sync {
    /// Runs the body on the current thread and keeps its outcome for [`Job::deliver`]. A
    /// no-op returning `Cancelled` when the job was already run or failed.
    fn run(&self) -> CallOutcome;
    /// Hands the outcome kept by `run` to the caller (wakes it), and with it the pool's
    /// handle on the job (an async job drops it before the wake-up, so the caller it wakes
    /// frees the job). The pool frees the job's slot and counts it *before* delivering, so
    /// a caller that returns sees both.
    fn deliver(self: Arc<Self>);
    /// Delivers a refusal with the input, without running the body. A no-op when the job
    /// was already run or failed.
    fn fail(&self, error: BulkheadError);
    /// Like `fail`, for a job dropped without a reason (see the module docs).
    fn abandon(&self);
}

/// A job's identity, its address: the same through any handle on it (the pool's
/// `Arc<dyn Job>` and the caller's typed `Arc`), so a caller finds its own queued task by
/// the handle it keeps.
pub(crate) fn job_id<T: ?Sized>(job: &Arc<T>) -> u64 {
    Arc::as_ptr(job).cast::<()>().addr() as u64
}

/// The pool's handle on a job. Dropping it without [`run`](JobRef::run) or
/// [`fail`](JobRef::fail) abandons the job, so its caller is never left waiting.
pub(crate) struct JobRef(Arc<dyn Job>);

/// Moves the job out of a handle whose `Drop` must not run (`JobRef`, `Finished`): the
/// handle is consumed, so its `Drop` never sees the job it no longer owns, and the call
/// sites carry no drop flag or empty case.
macro_rules! into_job {
    ($handle:expr) => {{
        let handle = std::mem::ManuallyDrop::new($handle);
        // SAFETY: the job is read out once, and `handle` is never used or dropped again.
        unsafe { std::ptr::read(&handle.0) }
    }};
}

impl JobRef {
    pub(crate) fn new(job: Arc<dyn Job>) -> Self {
        JobRef(job)
    }

    /// A job that does nothing, for the queue's and the inbox's unit tests.
    #[cfg(test)]
    pub(crate) fn nop() -> Self {
        struct Nop;
        impl Job for Nop {
            fn run(&self) -> CallOutcome {
                CallOutcome::Completed
            }
            fn deliver(self: Arc<Self>) {}
            fn fail(&self, _: BulkheadError) {}
            fn abandon(&self) {}
        }
        JobRef(Arc::new(Nop))
    }

    /// The job's identity while it is alive (its address, [`job_id`]), by which a caller
    /// that holds the job cancels it: unique among queued jobs, since each entry holds its
    /// job alive.
    pub(crate) fn id(&self) -> u64 {
        job_id(&self.0)
    }

    /// Runs the job on this thread; its caller is woken when the returned [`Finished`] is
    /// delivered (or dropped).
    #[inline]
    pub(crate) fn run(self) -> (CallOutcome, Finished) {
        let job: Arc<dyn Job> = into_job!(self);
        (job.run(), Finished(job))
    }

    /// Fails the job with `error`: its caller gets its input back.
    pub(crate) fn fail(self, error: BulkheadError) {
        let job: Arc<dyn Job> = into_job!(self);
        job.fail(error);
    }
}

impl Drop for JobRef {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

/// A job that has run and whose outcome is not yet delivered. Dropping it delivers.
pub(crate) struct Finished(Arc<dyn Job>);

impl Finished {
    /// Wakes the caller with the outcome.
    #[inline]
    pub(crate) fn deliver(self) {
        let job: Arc<dyn Job> = into_job!(self);
        job.deliver();
    }
}

impl Drop for Finished {
    /// Only when not delivered by [`deliver`](Finished::deliver) (an unwinding worker):
    /// the job gets a handle of its own, and this one is dropped right after.
    fn drop(&mut self) {
        Arc::clone(&self.0).deliver();
    }
}

/// A blocking call's job: the input and body, and the slot its outcome goes to.
struct SyncTask<I, F, R> {
    /// `QUEUED`, `CLAIMED` or `DONE` (see the module docs).
    state: AtomicU8,
    /// Taken once, by the winner of the claim.
    payload: UnsafeCell<Option<(I, F)>>,
    /// Written by the winner of the claim before `DONE`; read by the caller after it.
    outcome: UnsafeCell<Option<Outcome<I, R>>>,
    caller: Thread,
    /// The caller's span and propagated context, entered on the worker around the body
    /// (`None`: nothing to carry, so nothing is entered).
    context: Option<CapturedContext>,
}

/// Nobody has run or failed the job yet: the payload is in place.
const QUEUED: u8 = 0;
/// A worker runs it, or a failure is being delivered: the winner owns payload and outcome.
const CLAIMED: u8 = 1;
/// The outcome is stored; the caller owns it.
const DONE: u8 = 2;

// SAFETY: the cells are shared only through the state word's protocol: the payload and
// the outcome are used by one thread at a time (the claim's winner until `DONE`, the caller
// after it), which moves them across threads, hence `Send` bounds as for a `Mutex`.
unsafe impl<I: Send, F: Send, R: Send> Sync for SyncTask<I, F, R> {}

impl<I, F, R> SyncTask<I, F, R> {
    /// Claims the payload: `Some` for the first of run, fail and abandon only.
    fn claim(&self) -> Option<(I, F)> {
        self.state
            .compare_exchange(QUEUED, CLAIMED, Acquire, Relaxed)
            .ok()?;
        // SAFETY: the claim is won once; nobody else touches the payload after `QUEUED`.
        self.payload
            .with_mut(|payload| unsafe { (*payload).take() })
    }

    /// Stores the outcome without waking the caller yet (only by the claim's winner).
    fn store(&self, outcome: Outcome<I, R>) {
        // SAFETY: before `DONE` only the claim's winner (this thread) uses the outcome.
        self.outcome
            .with_mut(|slot| unsafe { *slot = Some(outcome) });
    }

    /// Signals the caller. After `DONE` is stored, nothing but the `'static` caller handle
    /// is used (safety fact 2).
    fn signal(&self) {
        self.state.store(DONE, Release);
        self.caller.unpark();
    }

    fn is_done(&self) -> bool {
        self.state.load(Acquire) == DONE
    }

    /// The outcome, taken by the caller once `is_done` said so.
    fn take_outcome(&self) -> Option<Outcome<I, R>> {
        debug_assert!(self.is_done());
        // SAFETY: after `DONE` (seen with `Acquire`) only the caller uses the outcome.
        self.outcome.with_mut(|slot| unsafe { (*slot).take() })
    }
}

impl<I, F, R> Job for SyncTask<I, F, R>
where
    I: Send,
    F: FnOnce(I) -> R + Send,
    R: Send,
{
    fn run(&self) -> CallOutcome {
        let Some((input, body)) = self.claim() else {
            return CallOutcome::Cancelled;
        };
        let result = {
            let _context = self.context.as_ref().map(CapturedContext::enter);
            catch_unwind(AssertUnwindSafe(move || body(input)))
        };
        match result {
            Ok(value) => {
                self.store(Outcome::Ran(value));
                CallOutcome::Completed
            }
            Err(payload) => {
                self.store(Outcome::Panicked(payload));
                CallOutcome::Panicked
            }
        }
    }

    fn deliver(self: Arc<Self>) {
        // Only after `run` (which took the payload): the outcome is stored.
        self.signal();
    }

    fn fail(&self, error: BulkheadError) {
        if let Some((input, body)) = self.claim() {
            // The body may own borrowed data with a Drop impl: drop it before `done`.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(body)));
            self.store(Outcome::Refused(input, Box::new(error)));
            self.signal();
        }
    }

    fn abandon(&self) {
        if let Some((input, body)) = self.claim() {
            let _ = catch_unwind(AssertUnwindSafe(move || drop(body)));
            self.store(Outcome::Abandoned(input));
            self.signal();
        }
    }
}

/// Blocks until the task is done, then drops whatever outcome is left, on this thread.
struct WaitForDone<'t, I, F, R>(&'t SyncTask<I, F, R>);

/// When a blocking caller stops waiting for its task to be taken, and how it withdraws it
/// (`max_queue_wait`): at `at` on `clock`, `withdraw` fails the task if it is still queued
/// (which ends the wait), else the caller waits for the task a worker took.
pub(crate) struct Withdraw<'c, W> {
    pub(crate) clock: &'c dyn crate::clock::Clock,
    pub(crate) at: std::time::Instant,
    pub(crate) withdraw: W,
}

/// A submission whose caller never withdraws its task.
#[cfg(all(test, not(loom)))]
pub(crate) type NoWithdraw = Option<Withdraw<'static, fn()>>;

impl<I, F, R> WaitForDone<'_, I, F, R> {
    /// Waits until `expiry`'s deadline (withdrawing the task there), then until done.
    fn wait_or_withdraw<W: FnOnce()>(&self, expiry: Option<Withdraw<'_, W>>) {
        if let Some(Withdraw {
            clock,
            at,
            withdraw,
        }) = expiry
        {
            while !self.0.is_done() {
                if clock.now() >= at {
                    withdraw();
                    break;
                }
                clock.park_until(at);
            }
        }
        self.wait();
    }

    fn wait(&self) {
        // Spin briefly (short bodies finish within it, sparing a park/unpark pair), then park.
        let backoff = crossbeam_utils::Backoff::new();
        while !self.0.is_done() {
            if backoff.is_completed() {
                std::thread::park();
            } else {
                backoff.snooze();
            }
        }
    }

    fn take<W: FnOnce()>(self, expiry: Option<Withdraw<'_, W>>) -> Option<Outcome<I, R>> {
        self.wait_or_withdraw(expiry);
        self.0.take_outcome()
        // `self` drops here: waits again (already done) and finds the slot empty.
    }
}

impl<I, F, R> Drop for WaitForDone<'_, I, F, R> {
    fn drop(&mut self) {
        self.wait();
        drop(self.0.take_outcome());
    }
}

/// Runs `body(input)` through `submit` and blocks until the pool has run or failed it.
///
/// `submit` receives the job and must give it to the pool (or drop it); whatever it does,
/// this returns only once the job is finished, so `body` and `input` may borrow. What
/// `submit` returns says when the caller withdraws a task still queued.
pub(crate) fn call_blocking<'a, 'c, I, F, R, W: FnOnce()>(
    input: I,
    body: F,
    submit: impl FnOnce(JobRef) -> Option<Withdraw<'c, W>>,
) -> Outcome<I, R>
where
    I: Send + 'a,
    F: FnOnce(I) -> R + Send + 'a,
    R: Send + 'a,
{
    let task = Arc::new(SyncTask {
        state: AtomicU8::new(QUEUED),
        payload: UnsafeCell::new(Some((input, body))),
        outcome: UnsafeCell::new(None),
        caller: std::thread::current(),
        context: CapturedContext::capture_if_any(),
    });
    // Safety fact 1: the guard exists before the pool can see the job.
    let waiter = WaitForDone(&*task);
    let job: Arc<dyn Job + 'a> = task.clone();
    // SAFETY: the job may be used by a worker after this function's borrows would otherwise
    // end; `waiter` keeps this frame alive (even on unwind) until `done`, after which the pool
    // touches nothing borrowed (see the module docs, facts 1–3). Only the lifetime changes:
    // `dyn Job + 'a` and `dyn Job + 'static` have the same layout and vtable. The crate's
    // erasure (the module's other `unsafe` is the state word's cells).
    let job: Arc<dyn Job + 'static> =
        unsafe { std::mem::transmute::<Arc<dyn Job + 'a>, Arc<dyn Job + 'static>>(job) };
    let expiry = submit(JobRef::new(job));
    match waiter.take(expiry) {
        Some(outcome) => outcome,
        // An outcome is always stored before `done`; unreachable, but never UB.
        None => unreachable_outcome(),
    }
}

#[cold]
fn unreachable_outcome() -> ! {
    panic!("bulkhead bug: a pool job signalled completion without an outcome")
}

/// The erasure's contract, in isolation (and small enough for Miri:
/// `cargo +nightly miri test -p bulkheads-core --lib thread_pool::job`). Real threads, so not
/// under loom (whose primitives the `sync` shim swaps in).
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::BulkheadName;
    use std::thread::JoinHandle;

    /// A "worker" on another thread doing `work` with the job.
    fn on_worker(
        slot: &mut Option<JoinHandle<()>>,
        work: impl FnOnce(JobRef) + Send + 'static,
    ) -> impl FnOnce(JobRef) -> NoWithdraw + '_ {
        move |job| {
            *slot = Some(std::thread::spawn(move || work(job)));
            None
        }
    }

    fn run_and_deliver(job: JobRef) {
        let (_, finished) = job.run();
        finished.deliver();
    }

    /// Counts its drop in borrowed memory: proves the drop happened before the caller left.
    struct DropsInto<'a>(&'a mut u32);
    impl Drop for DropsInto<'_> {
        fn drop(&mut self) {
            *self.0 += 1;
        }
    }

    #[test]
    fn borrowed_input_and_result_cross_to_the_worker_and_back() {
        let data = vec![1, 2, 3];
        let mut log = String::new();
        let mut worker = None;
        let outcome = call_blocking(
            (&data, &mut log),
            |(data, log)| {
                log.push_str("ran");
                &data[1..]
            },
            on_worker(&mut worker, run_and_deliver),
        );
        assert!(matches!(outcome, Outcome::Ran([2, 3])));
        if let Some(worker) = worker {
            worker.join().unwrap();
        }
        assert_eq!(log, "ran");
    }

    #[test]
    fn failed_job_drops_its_body_then_gives_the_borrowed_input_back() {
        let mut drops = 0;
        let mut input = 7;
        let guard = DropsInto(&mut drops);
        let mut worker = None;
        let outcome = call_blocking(
            &mut input,
            move |n: &mut i32| {
                let _guard = guard;
                *n += 1;
            },
            on_worker(&mut worker, |job| {
                job.fail(BulkheadError::ShutDown {
                    name: BulkheadName::new("t"),
                })
            }),
        );
        match outcome {
            Outcome::Refused(n, error) if matches!(*error, BulkheadError::ShutDown { .. }) => {
                *n += 100;
            }
            _ => panic!("expected a refusal"),
        }
        if let Some(worker) = worker {
            worker.join().unwrap();
        }
        assert_eq!((input, drops), (107, 1));
    }

    #[test]
    fn dropped_job_is_abandoned_with_its_input() {
        let text = String::from("kept");
        let outcome = call_blocking(
            text.as_str(),
            |s: &str| s.len(),
            |job| -> NoWithdraw {
                drop(job);
                None
            },
        );
        assert!(matches!(outcome, Outcome::Abandoned("kept")));
    }

    #[test]
    fn panic_payload_reaches_the_caller() {
        let mut worker = None;
        let outcome = call_blocking(
            (),
            |()| -> u8 { std::panic::panic_any(5u8) },
            on_worker(&mut worker, run_and_deliver),
        );
        if let Some(worker) = worker {
            worker.join().unwrap();
        }
        match outcome {
            Outcome::Panicked(payload) => assert_eq!(payload.downcast_ref::<u8>(), Some(&5)),
            _ => panic!("expected the panic"),
        }
    }
}

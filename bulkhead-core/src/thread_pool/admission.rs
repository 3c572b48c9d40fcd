//! Admission: a call takes a running-or-queued slot (or runs on its caller, waits for room,
//! or is refused), and an admitted call is queued with a worker claimed for it.
//!
//! Invariants:
//! * a slot is taken only by `try_admit` (a CAS below `limit`) and given back exactly once
//!   per admitted call: when its task finishes (`worker`), is failed (`fail_admitted`) or is
//!   cancelled while queued (`cancel_queued`); each give-back wakes one room waiter;
//! * `enqueue` never refuses an admitted call: it queues it and claims an idle worker,
//!   reserves a new one, or leaves it for a busy one; only a shut-down pool fails it;
//! * with every worker busy and the pool at `max_threads` (`Shared::direct`), `enqueue`
//!   takes no lock: the task goes into the inbox (see `enqueue` for why none is lost).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

use bulkhead_config_types::OnFull;

use super::job::{JobRef, Outcome};
use super::queue::Entry;
use super::room_waiters::Ticket;
use super::shared::{Shared, StateGuard, deadline, park};
use crate::admission::Gate;
use crate::events::CallOutcome;
use crate::frame::{self, BulkheadId};
use crate::rate_limit::RateLimiter;
use crate::sync::Arc;
use crate::{BulkheadError, BulkheadName, Refused};

/// Where an admitted call's task was queued: by which id it is cancelled or withdrawn, and
/// when (on the pool's clock) it was queued, if the time was read (always when the pool
/// has a `max_queue_wait`: see `enqueue`).
#[derive(Clone, Copy)]
pub(crate) struct Queued {
    pub(crate) id: u64,
    pub(crate) enqueued: Option<Instant>,
}

/// Where an admitted blocking call runs.
pub(crate) enum Admission {
    /// A slot (running or queued) was taken: hand the job to the pool.
    Slot,
    /// `on_full: caller-runs`: run the body on the calling thread.
    CallerRuns,
}

/// Steps 1–3 of the order (`crate::admission`) read this. A slot is a plain count that
/// knows nothing of a shutdown, so the gate is open only with no rate limit set and the
/// pool not shut down: two relaxed loads.
impl Gate for Shared {
    #[inline(always)]
    fn id(&self) -> BulkheadId {
        self.id()
    }

    #[inline(always)]
    fn count_reentrant(&self) {
        self.counters.reentrant.fetch_add(1, Relaxed);
    }

    #[inline(always)]
    fn is_open(&self) -> bool {
        !self.rate.is_enabled() && !self.is_shut_down()
    }

    fn is_shut_down(&self) -> bool {
        self.is_shut_down()
    }

    fn rate(&self) -> &RateLimiter {
        &self.rate
    }

    fn name(&self) -> &BulkheadName {
        &self.name
    }

    fn refuse(&self, error: BulkheadError) -> BulkheadError {
        self.refuse(error)
    }
}

impl Shared {
    /// Takes a running-or-queued slot if one is free. Lock-free; never allocates.
    #[inline]
    pub(crate) fn try_admit(&self) -> bool {
        let limit = self.limit.load(Relaxed);
        // SeqCst load: pairs with the room waiters' registration (see `room_waiters`).
        let mut current = self.admitted.load(SeqCst);
        loop {
            if current >= limit {
                return false;
            }
            match self
                .admitted
                .compare_exchange_weak(current, current + 1, SeqCst, Relaxed)
            {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Gives a slot back (the caller then wakes one room waiter).
    pub(super) fn release(&self) {
        self.admitted.fetch_sub(1, SeqCst);
    }

    /// Admission for a blocking caller: a slot, caller-runs, or a refusal (not yet counted).
    /// `on_full: { wait }` parks the caller through the clock.
    pub(crate) fn admit_blocking(&self) -> Result<Admission, BulkheadError> {
        if self.is_shut_down() {
            return Err(self.shut_down_error());
        }
        if self.try_admit() {
            return Ok(Admission::Slot);
        }
        match self.on_full() {
            OnFull::CallerRuns => Ok(Admission::CallerRuns),
            OnFull::Wait(wait) if wait.is_zero() => Err(self.full()),
            OnFull::Wait(wait) => self.wait_for_room(wait.as_std()).map(|()| Admission::Slot),
            // `abort` (`OnFull` is `#[non_exhaustive]`; `on_full()` answers no other).
            _ => Err(self.full()),
        }
    }

    fn wait_for_room(&self, wait: Duration) -> Result<(), BulkheadError> {
        let started = self.clock.now();
        let deadline = deadline(started, wait);
        loop {
            // Leaves the room however this round ends, a panicking clock's unwinding too.
            let ticket = Ticket::held(&self.room, Some(self.room.register_thread()));
            if self.is_shut_down() {
                ticket.leave();
                return Err(self.shut_down_error());
            }
            // Read before the slot is taken: a clock that panics takes nothing.
            let now = self.clock.now();
            if self.try_admit() {
                ticket.leave();
                self.telemetry
                    .record_wait(now.saturating_duration_since(started));
                return Ok(());
            }
            if deadline.is_some_and(|deadline| now >= deadline) {
                if !ticket.leave() {
                    // A releaser woke us for a slot we will not use: pass it on.
                    self.room.wake_one();
                }
                return Err(BulkheadError::Timeout {
                    name: self.name.clone(),
                    waited: now - started,
                });
            }
            park(&*self.clock, deadline);
            ticket.leave();
        }
    }

    /// Runs `body` on the caller's thread (`on_full: caller-runs`), counted like a pool task.
    pub(crate) fn run_on_caller<I, R>(&self, input: I, body: impl FnOnce(I) -> R) -> R {
        self.counters.permitted.fetch_add(1, Relaxed);
        self.caller_runs.fetch_add(1, Relaxed);
        let started = self.telemetry.on_permitted();
        let inside = frame::enter(self.id(), false);
        let ran = catch_unwind(AssertUnwindSafe(move || body(input)));
        // Out of the bulkhead before the listeners hear of the call.
        drop(inside);
        match ran {
            Ok(value) => {
                self.counters.completed.fetch_add(1, Relaxed);
                self.telemetry.on_finished(started, CallOutcome::Completed);
                value
            }
            Err(payload) => {
                self.counters.panicked.fetch_add(1, Relaxed);
                self.telemetry.on_finished(started, CallOutcome::Panicked);
                resume_unwind(payload)
            }
        }
    }

    /// Turns a job's outcome into the call's result: a panic is resumed on the caller.
    pub(crate) fn settle<I, R>(&self, outcome: Outcome<I, R>) -> Result<R, Refused<I>> {
        match outcome {
            Outcome::Ran(value) => Ok(value),
            Outcome::Panicked(payload) => resume_unwind(payload),
            // Already counted where the job was failed.
            Outcome::Refused(input, error) => Err(Refused {
                input,
                error: *error,
            }),
            Outcome::Abandoned(input) => Err(Refused {
                input,
                error: self.refuse(self.shut_down_error()),
            }),
        }
    }

    /// Fails an admitted job that will never run: its slot is freed, the refusal counted
    /// (also as `cancelled`, so `permitted = completed + panicked + cancelled` holds), and
    /// its caller gets the input back.
    pub(super) fn fail_admitted(&self, job: JobRef, error: BulkheadError) {
        self.release();
        self.counters.cancelled.fetch_add(1, Relaxed);
        self.telemetry.on_cancelled();
        job.fail(self.refuse(error));
        self.room.wake_one();
    }

    /// Queues an admitted job and makes sure a worker will take it. Returns where it is
    /// queued (for cancellation and withdrawal), `None` if it was failed instead (only when
    /// the pool is shutting down).
    ///
    /// The common case under load — every worker busy, the pool at `max_threads` — takes
    /// no lock: the task goes into the inbox, and a busy worker moves it into the queue
    /// when it next looks. The caller then re-reads `direct` after a `SeqCst` fence; a
    /// worker that goes idle clears `direct` and, after its own fence, looks at the inbox
    /// again before it parks: one of the two sees the other, so no task is left without a
    /// worker.
    ///
    /// The clock is read only when something needs the time: the caller's `max_queue_wait`
    /// deadline, the queue's age policies (`queue_ages` without the lock, and the queue
    /// stamps a task it gets untimed), or the queue-time histogram's sample
    /// (`Telemetry::sample_queue_time`).
    pub(crate) fn enqueue(self: &Arc<Self>, job: JobRef) -> Option<Queued> {
        if !self.direct.load(Relaxed) {
            return self.enqueue_locked(job);
        }
        let id = job.id();
        let enqueued = self.enqueue_stamp(self.queue_ages.load(Relaxed));
        let queued = Queued { id, enqueued };
        let entry = Entry { job, id, enqueued };
        self.inbox.push(entry);
        crate::sync::seq_cst_fence();
        if self.direct.load(Relaxed) {
            return Some(queued);
        }
        self.direct_ended(queued)
    }

    /// A task queued into the inbox as the pool changed (a worker went idle, it may grow,
    /// or it shuts down): the lock moves the task into the queue, and a worker is found
    /// for it. Out of line, as is the locked `enqueue`: the lock-free path stays small.
    #[inline(never)]
    fn direct_ended(self: &Arc<Self>, queued: Queued) -> Option<Queued> {
        let st = self.lock_state();
        if st.shutting_down {
            return self.fail_if_queued(st, queued.id).then_some(queued);
        }
        self.find_worker(st);
        Some(queued)
    }

    /// `enqueue` under the lock (`direct` is clear).
    #[inline(never)]
    fn enqueue_locked(self: &Arc<Self>, job: JobRef) -> Option<Queued> {
        let id = job.id();
        let mut st = self.lock_state();
        if st.shutting_down {
            drop(st);
            self.fail_admitted(job, self.shut_down_error());
            return None;
        }
        let enqueued = self.enqueue_stamp(st.policy.needs_time());
        let policy = st.policy;
        st.queue
            .push(Entry { job, id, enqueued }, &policy, || self.clock.now());
        self.find_worker(st);
        Some(Queued { id, enqueued })
    }

    /// The time a task queued now is stamped with, if anything needs it: `ages` (the
    /// queue orders or ages tasks), the pool's `max_queue_wait`, or the queue-time
    /// histogram's sample.
    #[inline]
    fn enqueue_stamp(&self, ages: bool) -> Option<Instant> {
        let timed = ages || self.max_queue_wait().is_some() || self.telemetry.sample_queue_time();
        timed.then(|| self.clock.now())
    }

    /// With task `id` queued, makes sure a worker will take it. Any idle worker is claimed,
    /// also a surplus one (above a shrunk `max_threads`): woken, it either takes the task
    /// (once it is no longer surplus) or retires and passes the claim on to the next idle
    /// worker (`worker`). With no idle worker the task waits for a busy one: each comes
    /// back for the queue when its task ends, and the surplus ones retire first, so it runs
    /// on one of the `max_threads` left. Never refused here: the call was admitted. Only a
    /// call admitted just before a shrink can find the queue above the new capacity, and
    /// that excess only drains.
    fn find_worker(self: &Arc<Self>, mut st: StateGuard<'_>) {
        if let Some((_, worker)) = st.idle.pop() {
            st.pending += 1;
            self.idle_claims.fetch_add(1, Relaxed);
            drop(st);
            worker.unpark();
        } else if st.threads < st.max {
            let number = st.reserve_thread();
            drop(st);
            self.spawn_worker(number);
        } else {
            st.largest_queued = st.largest_queued.max(st.queued(&self.settled));
        }
    }

    /// A task queued through the inbox as the pool began to shut down: failed like any
    /// call that reaches a shutting-down pool, if no worker has taken it (and the shutdown
    /// has not failed it) yet. True if it is still queued (or taken by a worker).
    #[cold]
    fn fail_if_queued(&self, mut st: StateGuard<'_>, id: u64) -> bool {
        let now = self.clock.now();
        let entry = st.queue.remove(id, now);
        drop(st);
        match entry {
            Some(entry) => {
                self.fail_admitted(entry.job, self.shut_down_error());
                false
            }
            None => true,
        }
    }

    /// When a caller whose task is `queued` stops waiting for a worker (`max_queue_wait`
    /// after it was queued), if the config limits the wait.
    #[inline]
    pub(crate) fn queue_deadline(&self, queued: &Queued) -> Option<Instant> {
        queued.enqueued?.checked_add(self.max_queue_wait()?)
    }

    /// The caller's side of `max_queue_wait`: at its deadline a task still queued is taken
    /// out (it never runs), counted and failed with `QueueTimeout`, so its caller is answered
    /// whether or not a worker comes for it. A task a worker has taken runs to its end.
    pub(crate) fn withdraw_stale(&self, id: u64) {
        let now = self.clock.now();
        let entry = self.lock_state().queue.remove(id, now);
        if let Some(entry) = entry {
            let waited = entry
                .enqueued
                .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
            self.fail_stale(entry, waited);
        }
    }

    /// Fails a task taken out of the queue because it waited `waited`, too long.
    pub(super) fn fail_stale(&self, entry: Entry, waited: Duration) {
        self.telemetry.record_queue_time(waited);
        let name = self.name.clone();
        self.fail_admitted(entry.job, BulkheadError::QueueTimeout { name, waited });
    }

    /// Removes a queued job whose async caller went away. True if it was still queued.
    pub(crate) fn cancel_queued(&self, id: u64) -> bool {
        let now = self.clock.now();
        let entry = self.lock_state().queue.remove(id, now);
        match entry {
            Some(entry) => {
                self.release();
                self.counters.cancelled.fetch_add(1, Relaxed);
                self.telemetry.on_cancelled();
                drop(entry);
                self.room.wake_one();
                true
            }
            None => false,
        }
    }
}

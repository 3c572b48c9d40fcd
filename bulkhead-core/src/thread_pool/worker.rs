//! A worker thread: a loop over [`WorkerState`] that looks at the queue under the pool's
//! lock (moving the inbox into it first), runs or fails one task outside it, parks when
//! idle, and retires through one path. A worker that has just run a task first tries the
//! inbox without the lock (`Shared::take_free`: callers queue there without it, and the
//! queue is empty and plain FIFO), which is the common case under load. Finding it empty,
//! it settles its task there too and watches the inbox a little longer (`Settled`) before
//! it looks under the lock: a busy pool's callers keep queueing without the lock rather
//! than meeting a worker that went idle for a moment.
//!
//! Invariants:
//! * a finished task's slot is freed and counted before its caller is woken (so a caller
//!   that returns can call again at once and sees its call counted): under the lock, in the
//!   same critical section that takes the next task, or — the next task taken from the
//!   inbox without the lock — after that task is taken (so admission never sees a slot
//!   whose task is neither queued nor running), `active` unchanged (one ends, one starts);
//! * a worker that found the inbox empty while the pool takes without the lock settles its
//!   task there (slot freed, counted, caller woken) and stays counted in `active` and in
//!   `Shared::settled` — which the gauges and refusals take off `active`, so it reads as
//!   idle — until it takes a task from the inbox (leaving `settled` before it runs it) or
//!   looks under the lock (leaving both);
//! * a worker claimed for a queued task (`pending`) settles the claim at its next look: it
//!   takes a task, or retires and passes the claim to an idle worker when tasks are left;
//! * a worker that goes idle looks at the inbox once more before it parks (see `Step::Park`
//!   in `worker_main`, and `Shared::enqueue`);
//! * a worker retires only when it is surplus (more threads than `max_threads`), idle above
//!   `core_threads` for `keep_alive`, or the pool shuts down with an empty queue. Idle time
//!   counts only while keep-alive applies: a worker that goes idle at or below
//!   `core_threads` reads no clock, and if a resize (or an adaptive limit) later puts it
//!   above `core_threads`, its idle time counts from its first look after that (as Java's
//!   pool counts from `setCorePoolSize`).

use std::sync::atomic::Ordering::Relaxed;
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::job::{Finished, JobRef};
use super::queue::{Entry, Taken};
use super::shared::{PoolState, Shared, deadline, park};
use crate::adaptive::calls::CallStart;
use crate::events::CallOutcome;
use crate::frame;
use crate::sync::Arc;

/// How long an idle worker stays awake for the next task before it parks, counted from the
/// end of the backoff's spin and yield steps (so a task that comes during them costs no
/// clock read). A caller that submits again within it (the common case for a busy pool)
/// hands its task over without a futex wake-up on either side. Measured with the machine's
/// clock, not the pool's: it decides no outcome, only when to sleep.
const IDLE_SPIN: Duration = Duration::from_micros(20);

/// Where a worker is between two looks at the queue.
enum WorkerState {
    /// Claimed for a queued task (spawned for it, woken by `enqueue`, or back from failing a
    /// stale task): counted in `pending` until its next look.
    Claimed,
    /// Ran a task: its slot is freed and counted at the next look, and its caller woken
    /// right after.
    Ran(CallOutcome, Finished),
    /// Ran a task and settled it without the lock (see the module's invariants): counted in
    /// `active` and `Shared::settled` until its next look.
    Settled,
    /// In the idle list (parked, or woken without a claim: a resize, a shutdown, or
    /// keep-alive running out); idle above `core_threads` since the instant held, `None`
    /// while keep-alive has not applied to it (no clock read).
    Idle(Option<Instant>),
    /// Left the loop (the threads to wake are woken).
    Retired,
}

/// What a worker does after a look at the queue, outside the lock.
pub(super) enum Step {
    /// Run this task, `active` tasks running with it.
    Run(Entry, u32),
    /// Fail this task, which waited `Duration` (too long), with `QueueTimeout`.
    FailStale(Entry, Duration),
    /// Nothing to do: stay idle (in the idle list; idle above core since `since`, if
    /// keep-alive applies) until woken, or until `until` (keep-alive). `claims` is the
    /// idle-claim count seen under the lock.
    Park {
        since: Option<Instant>,
        until: Option<Instant>,
        claims: u64,
    },
    /// Leave the loop, waking these threads (a worker the claim is passed to, the shutdown).
    Retire(Vec<Thread>),
}

/// A worker's thread: takes queued tasks until it retires.
pub(super) fn worker_main(shared: Arc<Shared>, worker: u64) {
    // Everything this thread runs is inside the bulkhead: nested calls run inline.
    let _inside = frame::enter(shared.id(), false);
    let me = std::thread::current();
    let mut state = WorkerState::Claimed;
    loop {
        // Ran a task: the next ones straight from the inbox, without the lock, while the pool
        // allows it. Each finished task is settled as under the lock: its slot freed and
        // counted before its caller is woken; `active` stays as it was (one ends, one
        // starts).
        if let WorkerState::Ran(mut outcome, mut finished) = state {
            state = loop {
                // Taken apart at once: the job and its stamp stay in registers across the
                // delivery, rather than the entry being copied from frame slot to frame slot.
                while let Some(Entry { job, enqueued, .. }) = shared.take_free() {
                    shared.settle_free(outcome, finished);
                    // No adaptive limit here (`take_free`): `active` feeds only that.
                    (outcome, finished) = shared.run_entry(job, enqueued, 0);
                }
                if !shared.takes_free() {
                    break WorkerState::Ran(outcome, finished);
                }
                // The inbox is empty: settled now, and watching it for a little while.
                shared.settled.fetch_add(1, Relaxed);
                shared.settle_free(outcome, finished);
                match shared.await_free() {
                    Some(Entry { job, enqueued, .. }) => {
                        (outcome, finished) = shared.run_entry(job, enqueued, 0);
                    }
                    None => break WorkerState::Settled,
                }
            };
        }
        state = shared.look_under_lock(state, worker, &me);
        if matches!(state, WorkerState::Retired) {
            return;
        }
    }
}

impl Shared {
    /// A worker's look at the queue under the lock, from `state`, and what it does next
    /// (outside the lock): runs or fails a task, parks, or retires.
    fn look_under_lock(
        self: &Arc<Self>,
        state: WorkerState,
        worker: u64,
        me: &Thread,
    ) -> WorkerState {
        let shared = self;
        let mut st = shared.lock_state_for_worker();
        let mut delivery = None;
        // Settle the last state; `Some(since)` while this worker is still in the idle list.
        let idle_since = match state {
            WorkerState::Ran(outcome, finished) => {
                st.active -= 1;
                shared.release();
                if st.shutting_down {
                    st.drained += 1;
                }
                shared.count(outcome);
                delivery = Some(finished);
                None
            }
            // Settled without the lock, before any shutdown it did not see (`takes_free`
            // was still set): not one of the tasks a shutdown drained.
            WorkerState::Settled => {
                shared.leave_settled(&mut st);
                None
            }
            WorkerState::Idle(since) if st.is_idle(worker) => Some(since),
            // Claimed (by `enqueue`, which took it out of the idle list, or before).
            WorkerState::Idle(_) | WorkerState::Claimed => {
                st.pending = st.pending.saturating_sub(1);
                None
            }
            // Never looked with (the loop ends); nothing to settle.
            WorkerState::Retired => None,
        };
        let step = shared.next_step(&mut st, worker, idle_since, me);
        drop(st);
        // Outside the lock: wake the caller of the task just counted, then one room waiter.
        if let Some(finished) = delivery {
            finished.deliver();
            shared.room.wake_one();
        }
        match step {
            Step::Run(entry, active) => {
                let (outcome, finished) = shared.run_entry(entry.job, entry.enqueued, active);
                WorkerState::Ran(outcome, finished)
            }
            Step::FailStale(entry, waited) => {
                shared.fail_stale(entry, waited);
                WorkerState::Claimed
            }
            Step::Park {
                since,
                until,
                claims,
            } => {
                // Idle, so `direct` is clear (written as the lock was released). A caller that
                // put a task into the inbox before it saw that is found here, after the fence
                // that pairs with the caller's; one that comes later sees `direct` clear and
                // claims an idle worker under the lock.
                if !shared.inbox_has_work_after_idle() {
                    stay_awake(shared, claims);
                    park(&*shared.clock, until);
                }
                WorkerState::Idle(since)
            }
            Step::Retire(wake) => {
                for thread in wake {
                    thread.unpark();
                }
                WorkerState::Retired
            }
        }
    }

    /// Runs a task this worker took (its job, and when it was queued if that was read),
    /// `active` tasks running with it: its queue time recorded (if it was timed: see
    /// `Shared::enqueue`), its run reported to listeners. Inlined into the worker's loop,
    /// where the job and the outcome stay in registers.
    #[inline]
    fn run_entry(
        self: &Arc<Self>,
        job: JobRef,
        enqueued: Option<Instant>,
        active: u32,
    ) -> (CallOutcome, Finished) {
        let telemetry = &self.telemetry;
        if let Some(enqueued) = enqueued {
            telemetry.record_queue_time(self.clock.now().saturating_duration_since(enqueued));
        }
        let started = telemetry.run_started();
        let (outcome, finished) = self.run_taken(job, active);
        telemetry.on_finished(started, outcome);
        (outcome, finished)
    }

    /// The next task from the inbox, taken without the lock, if the pool allows it
    /// (`take_free`: see `shared`'s invariants) and has no adaptive limit (whose samples
    /// want the tasks running, counted under the lock).
    #[inline]
    pub(super) fn take_free(&self) -> Option<Entry> {
        if !self.takes_free() {
            return None;
        }
        self.inbox.pop()
    }

    /// Whether a worker may take tasks from the inbox without the lock (see `take_free`).
    #[inline]
    pub(super) fn takes_free(&self) -> bool {
        self.take_free.load(Relaxed) && self.adaptive.sample_every().is_none()
    }

    /// Settles a task its worker ran, without the lock: its slot freed and counted before
    /// its caller is woken, then one room waiter woken.
    #[inline]
    pub(super) fn settle_free(&self, outcome: CallOutcome, finished: Finished) {
        self.release();
        self.count(outcome);
        finished.deliver();
        self.room.wake_one();
    }

    /// A settled worker (counted in `settled`) watching the inbox: the next task, taken
    /// without the lock (the worker then leaves `settled`, before it runs the task), or
    /// `None` once crossbeam's backoff (~127 spin hints, then a few yields of the CPU) is
    /// over or the pool stops taking without the lock — then it looks under the lock.
    fn await_free(&self) -> Option<Entry> {
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            if let Some(entry) = self.take_settled() {
                return Some(entry);
            }
            if backoff.is_completed() || !self.takes_free() {
                return None;
            }
            backoff.snooze();
        }
    }

    /// A settled worker's look under the lock: it stops counting as running a task.
    pub(super) fn leave_settled(&self, st: &mut PoolState) {
        st.active -= 1;
        self.settled.fetch_sub(1, Relaxed);
    }

    /// One look of a settled worker at the inbox (see `await_free`).
    #[inline]
    pub(super) fn take_settled(&self) -> Option<Entry> {
        let entry = self.take_free()?;
        self.settled.fetch_sub(1, Relaxed);
        Some(entry)
    }
}

/// Registered idle, stays awake before parking (crossbeam's `Backoff`: ~127 spin hints,
/// then yielding the CPU to anything that wants it, then up to [`IDLE_SPIN`] more): a task
/// enqueued meanwhile claims this worker and unparks it before it sleeps, which costs
/// neither side a futex call. Stops as soon as some idle worker is claimed; reads the clock
/// only once the backoff's steps are over.
fn stay_awake(shared: &Shared, claims: u64) {
    let backoff = crossbeam_utils::Backoff::new();
    let mut awake_until = None;
    while shared.idle_claims.load(Relaxed) == claims {
        backoff.snooze();
        if backoff.is_completed() {
            let now = Instant::now();
            if now >= *awake_until.get_or_insert(now + IDLE_SPIN) {
                break;
            }
        }
    }
}

impl Shared {
    /// One look at the queue under the lock: what the worker does next. `idle_since` is
    /// `Some` while the worker is still in the idle list (holding its `WorkerState::Idle`).
    pub(super) fn next_step(
        &self,
        st: &mut PoolState,
        worker: u64,
        idle_since: Option<Option<Instant>>,
        me: &Thread,
    ) -> Step {
        // A surplus worker (after a shrink) retires before taking new work.
        if st.threads <= st.max {
            // Borrowed beside the queue, not copied (the policy is a few words).
            let PoolState { queue, policy, .. } = &mut *st;
            let taken = match queue.take(policy, || self.clock.now()) {
                // The queue empty and taking from the inbox: its oldest task is the next.
                None if st.takes_from_inbox() => self.inbox.pop().map(Taken::Run),
                taken => taken,
            };
            if let Some(taken) = taken {
                if idle_since.is_some() {
                    st.remove_idle(worker);
                }
                return match taken {
                    Taken::Run(entry) => {
                        st.active += 1;
                        Step::Run(entry, st.active)
                    }
                    // While it fails this task the worker is neither running nor idle, yet
                    // it comes straight back for the next one: it counts as claimed, or
                    // `enqueue` would see the queue over capacity.
                    Taken::Stale(entry, waited) => {
                        st.pending += 1;
                        Step::FailStale(entry, waited)
                    }
                };
            }
            // Keep-alive applies only above core: only then is the clock read, and idle time
            // counts from the first look that finds this worker above core.
            let above_core = st.threads > st.core;
            let now = above_core.then(|| self.clock.now());
            let expired = match (idle_since, now) {
                (Some(Some(since)), Some(now)) => {
                    deadline(since, st.keep_alive).is_some_and(|at| now >= at)
                }
                _ => false,
            };
            if !st.shutting_down && !expired {
                if idle_since.is_none() {
                    st.idle.push((worker, me.clone()));
                }
                let since = idle_since.flatten().or(now);
                return Step::Park {
                    since,
                    until: if above_core {
                        since.and_then(|since| deadline(since, st.keep_alive))
                    } else {
                        None
                    },
                    claims: self.idle_claims.load(Relaxed),
                };
            }
        }
        Step::Retire(self.retire(st, worker, idle_since.is_some()))
    }

    /// Whether the inbox holds a task, looked at by a worker that has just gone idle (so
    /// `direct` is clear), after the fence that pairs with the caller's in `enqueue`.
    pub(super) fn inbox_has_work_after_idle(&self) -> bool {
        crate::sync::seq_cst_fence();
        !self.inbox.is_empty()
    }

    /// The one way out of the worker loop: the thread stops counting, a claim it held on a
    /// queued task goes to an idle worker (or the task stays queued for the workers that
    /// remain, at least `max_threads` of them), and the last thread wakes a shutdown.
    fn retire(&self, st: &mut PoolState, worker: u64, registered: bool) -> Vec<Thread> {
        if registered {
            st.remove_idle(worker);
        }
        st.threads -= 1;
        let pass_on = if st.unassigned() > 0 {
            st.idle.pop().map(|(_, thread)| {
                st.pending += 1;
                thread
            })
        } else {
            None
        };
        let mut wake: Vec<Thread> = pass_on.into_iter().collect();
        if st.threads == 0 {
            wake.extend(st.shutdown_waiters.iter().cloned());
        }
        wake
    }

    /// Runs a task a worker took, `active` calls running with it: with an adaptive limit,
    /// timed by the pool's clock and fed to the limit (a panic, a cancellation or a mark
    /// of [`mark_overloaded`](crate::adaptive::mark_overloaded) is a drop). Without one (one
    /// relaxed load) the job just runs, inline in the worker's loop.
    #[inline]
    fn run_taken(self: &Arc<Self>, job: JobRef, active: u32) -> (CallOutcome, Finished) {
        if self.adaptive.sample_every().is_none() {
            return job.run();
        }
        self.run_adaptive(job, active)
    }

    /// `run_taken` under an adaptive limit (set, or removed since it looked: then as
    /// without one).
    #[inline(never)]
    fn run_adaptive(self: &Arc<Self>, job: JobRef, active: u32) -> (CallOutcome, Finished) {
        let timed = || CallStart::timed(self.clock.now(), active);
        let Some(start) = self.adaptive.begin(timed) else {
            return job.run();
        };
        // A frame of its own (inside the worker's), which `mark_overloaded` marks.
        let inside = frame::enter(self.id(), true);
        let (outcome, finished) = job.run();
        let overloaded = inside.leave();
        let dropped = overloaded || outcome != CallOutcome::Completed;
        let now = || self.clock.now();
        let apply = |to| self.apply_limit(to);
        if let Some((from, to)) = self.adaptive.end(start, dropped, now, apply) {
            self.telemetry.on_limit_changed(from, to);
        }
        (outcome, finished)
    }
}

//! The permit count and the waiter queue of a semaphore bulkhead: one atomic word and a
//! FIFO behind a mutex, and every change made to them (take, release, hand-off to a
//! waiter, resize, shutdown). Admission decisions and their accounting are in
//! `admission.rs`; this file only moves permits.
//!
//! One atomic word, `state`, holds the number of available permits (shifted left by
//! [`FLAG_BITS`]) and two flags: [`HAS_WAITERS`] (the waiter queue is not empty) and
//! [`SHUT_DOWN`] (no more admission).
//!
//! * **Fast path.** While no flag is set, acquiring is a compare-and-swap that takes one
//!   available permit and releasing is a compare-and-swap that puts one back; neither
//!   touches the mutex. A refusal of a full bulkhead is one load and allocates nothing.
//! * **Slow path.** A caller that may wait locks the queue, re-checks the count and, if
//!   it still cannot take a permit, sets [`HAS_WAITERS`] *with a compare-and-swap that also
//!   sees the count* and enqueues itself. From then on every release sees the flag and
//!   takes the lock too, so a permit released while someone waits is **handed directly**
//!   to the waiter at the head of the queue (it never reaches the atomic count). That is
//!   what makes a fair bulkhead fair: once someone waits, newcomers find no permit in the
//!   count and queue behind them.
//! * **Resize.** Growing by `n` hands up to `n` permits to waiters and adds the rest to the
//!   count. Shrinking subtracts from the count, which may go negative: the permits above
//!   the new limit are retired one by one as their holders release them (a release that
//!   finds the count negative only increments it). Resizing never waits for running calls
//!   and never cancels them.
//!
//! # Invariants
//!
//! 1. Permits handed out (`limit - available`) never exceed `limit`, except transiently
//!    after a shrink, while admitted calls above the new limit finish; no new permit is
//!    handed out until the count is positive again.
//! 2. `available > 0` and a non-empty queue do not coexist once the queue lock is released:
//!    permits returned while waiters exist go to the waiters first.
//! 3. A waiter is granted at most once (its status moves `WAITING → GRANTED` or
//!    `WAITING → SHUT_DOWN` under the queue lock, never back) and woken exactly once for it.
//!    (An async waiter's allocation is reused by the next wait on its thread, back at
//!    `WAITING`, only once nothing else holds it — `Arc::get_mut` — so to the queue, the
//!    timer and the releasers it is a new waiter.)
//! 4. A waiter that gives up (timeout, dropped future) removes itself under the queue lock;
//!    if it had already been granted a permit, it passes that permit on (to the next
//!    waiter or the count): no permit is ever lost.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::{AcqRel, Acquire as AcquireOrd, Relaxed, Release};
use std::task::Waker;
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::Shared;
use super::admission::Reason;
use super::deadlines::QueueTimer;
use crate::BulkheadError;
use crate::sync::{self, AtomicU8};

/// Low bits of `state` used for flags; the permit count sits above them.
pub(super) const FLAG_BITS: u32 = 2;
/// Set while the waiter queue is not empty: releases must take the slow path.
pub(super) const HAS_WAITERS: isize = 0b01;
/// Set once the bulkhead is shut down: no more admission.
pub(super) const SHUT_DOWN: isize = 0b10;
/// Both flags.
pub(super) const FLAGS: isize = HAS_WAITERS | SHUT_DOWN;
/// One permit in `state`'s units.
pub(super) const ONE: isize = 1 << FLAG_BITS;

/// Available permits in a `state` word (negative while a shrink is retiring permits).
pub(super) const fn available(state: isize) -> isize {
    state >> FLAG_BITS
}

#[derive(Default)]
pub(super) struct Waiters {
    pub(super) queue: VecDeque<sync::Arc<Waiter>>,
    /// The threads waiting in [`SemaphoreBulkhead::shutdown`] for running calls to finish
    /// (any number of callers may wait at once; each release wakes them all).
    pub(super) drain: Vec<Thread>,
    /// Waiters refused by the shutdown, so that every `shutdown` caller reports them.
    pub(super) refused_by_shutdown: u64,
    /// Async waiters in `queue` (`deadlines.rs`, invariant 7).
    pub(super) timed: usize,
    /// The one timer of the async waiters' `max_wait` (`deadlines.rs`).
    pub(super) timer: Option<QueueTimer>,
}

/// One caller waiting for a permit.
pub(super) struct Waiter {
    /// `WAITING`, then `GRANTED`, `SHUT_DOWN_WAITER` or `TIMED_OUT`; changed only under
    /// the queue lock.
    status: AtomicU8,
    wake: parking_lot::Mutex<Wake>,
    /// An async waiter's end of `max_wait`, kept by the queue's timer (`deadlines.rs`);
    /// `None` for a blocking waiter (it parks with a timeout) or a wait without end.
    deadline: Option<Instant>,
}

/// [`Waiter::status`]: still queued.
const WAITING: u8 = 0;
/// [`Waiter::status`]: a permit was handed to it.
const GRANTED: u8 = 1;
/// [`Waiter::status`]: refused by the shutdown.
const SHUT_DOWN_WAITER: u8 = 2;
/// [`Waiter::status`]: its `max_wait` passed (set by the queue's timer).
const TIMED_OUT: u8 = 3;

pub(super) enum Wake {
    Thread(Thread),
    Task(Waker),
    /// A spare waiter between two waits: wakes nobody.
    Spare,
}

/// The most spare waiters a thread keeps (about 64 bytes each: at most 4 KiB a thread).
/// Under contention a thread starts waits while the tasks it woke have not yet polled
/// their granted waiters back, so it needs more than one to reuse them all: with 1 000
/// tasks on 64 permits, one spare let almost every wait allocate.
#[cfg(not(loom))]
const SPARES: usize = 64;

#[cfg(not(loom))]
std::thread_local! {
    /// Waiters whose async wait is over and that no queue holds any more, at most
    /// [`SPARES`]: the next async waits on this thread reuse their allocations
    /// (`Waiter::new`). A `Cell` taken and put back, so that no borrow can panic.
    static SPARE: std::cell::Cell<Vec<sync::Arc<Waiter>>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Waiter {
    /// A waiter woken through `wake`; `deadline` for an async waiter the queue's timer
    /// times out.
    pub(super) fn new(wake: Wake, deadline: Option<Instant>) -> sync::Arc<Waiter> {
        #[cfg(not(loom))]
        if let Some(mut spare) = take_spare()
            && let Some(waiter) = sync::Arc::get_mut(&mut spare)
        {
            waiter.status = AtomicU8::new(WAITING);
            *waiter.wake.get_mut() = wake;
            waiter.deadline = deadline;
            return spare;
        }
        sync::Arc::new(Waiter {
            status: AtomicU8::new(WAITING),
            wake: parking_lot::Mutex::new(wake),
            deadline,
        })
    }

    /// An async waiter whose wait is over: kept among this thread's spares if nothing
    /// else holds it any more (a queue, or a releaser about to wake it) and the thread
    /// keeps fewer than [`SPARES`], else just dropped. A spare keeps no waker.
    pub(super) fn recycle(waiter: sync::Arc<Waiter>) {
        #[cfg(not(loom))]
        {
            let mut waiter = waiter;
            if let Some(exclusive) = sync::Arc::get_mut(&mut waiter) {
                *exclusive.wake.get_mut() = Wake::Spare;
                with_spares(|spares| {
                    if spares.len() < SPARES {
                        spares.push(waiter);
                    }
                });
            }
        }
        #[cfg(loom)]
        drop(waiter);
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Under the queue lock, as it leaves the queue: its `max_wait` has passed.
    pub(super) fn time_out(&self) {
        self.status.store(TIMED_OUT, Release);
    }

    pub(super) fn status(&self) -> u8 {
        self.status.load(AcquireOrd)
    }

    /// Still waiting: not granted, timed out or shut down yet.
    pub(super) fn is_waiting(&self) -> bool {
        self.status() == WAITING
    }

    /// Wakes the waiter, once: its wait has just ended (it left `WAITING` under the queue
    /// lock). The waker is taken out of its lock before it runs, since a waker may do
    /// anything — poll the task inline, which updates this very waker.
    pub(super) fn wake(&self) {
        let wake = std::mem::replace(&mut *self.wake.lock(), Wake::Spare);
        match wake {
            Wake::Thread(thread) => thread.unpark(),
            Wake::Task(waker) => waker.wake(),
            Wake::Spare => {}
        }
    }

    /// How the wait ended, once it has; `waited` measures a timed-out wait.
    pub(super) fn resolved(&self, waited: impl FnOnce() -> Duration) -> Option<Waited> {
        match self.status() {
            GRANTED => Some(Waited::Granted),
            SHUT_DOWN_WAITER => Some(Waited::ShutDown),
            TIMED_OUT => Some(Waited::TimedOut(waited())),
            _ => None,
        }
    }

    /// Replaces the stored waker if it would not wake the same task.
    pub(super) fn update_waker(&self, waker: &Waker) {
        let mut wake = self.wake.lock();
        if !matches!(&*wake, Wake::Task(w) if w.will_wake(waker)) {
            *wake = Wake::Task(waker.clone());
        }
    }
}

/// One of this thread's spare waiters, if it has one (`None` too while the thread's
/// locals are being destroyed).
#[cfg(not(loom))]
fn take_spare() -> Option<sync::Arc<Waiter>> {
    with_spares(Vec::pop).flatten()
}

/// Runs `f` on this thread's spare waiters (taken out of their `Cell` and put back);
/// `None` while the thread's locals are being destroyed.
#[cfg(not(loom))]
fn with_spares<R>(f: impl FnOnce(&mut Vec<sync::Arc<Waiter>>) -> R) -> Option<R> {
    SPARE
        .try_with(|spare| {
            let mut spares = spare.take();
            let result = f(&mut spares);
            spare.set(spares);
            result
        })
        .ok()
}

/// What a waiting acquisition ended with.
pub(super) enum Waited {
    Granted,
    TimedOut(Duration),
    ShutDown,
}

impl Shared {
    /// [`try_take`](Self::try_take), refusing with a one-byte reason (no error built).
    #[inline]
    pub(super) fn try_take_fast(&self) -> Result<(), Reason> {
        let mut state = self.state.load(Relaxed);
        loop {
            if state & FLAGS != 0 && !self.may_barge(state) {
                return Err(if state & SHUT_DOWN != 0 {
                    Reason::ShutDown
                } else {
                    Reason::Full
                });
            }
            if available(state) <= 0 {
                return Err(Reason::Full);
            }
            match self
                .state
                .compare_exchange_weak(state, state - ONE, AcquireOrd, Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => state = actual,
            }
        }
    }

    /// Takes one permit from the count if admission is allowed right now.
    #[inline]
    pub(super) fn try_take(&self) -> Result<(), BulkheadError> {
        self.try_take_fast().map_err(|reason| self.error(reason))
    }

    /// With flags set, whether a newcomer may still take a permit from the count: only an
    /// unfair bulkhead that is not shut down lets newcomers pass its waiters.
    #[cold]
    pub(super) fn may_barge(&self, state: isize) -> bool {
        state & SHUT_DOWN == 0 && !self.fair.load(Relaxed)
    }

    /// Gives one permit back to the count (or to a waiter).
    #[inline]
    pub(super) fn give_back(&self) {
        let mut state = self.state.load(Relaxed);
        loop {
            if state & FLAGS != 0 {
                return self.release_slow();
            }
            match self
                .state
                .compare_exchange_weak(state, state + ONE, Release, Relaxed)
            {
                Ok(_) => return,
                Err(actual) => state = actual,
            }
        }
    }

    #[cold]
    pub(super) fn release_slow(&self) {
        let mut granted = None;
        let drain = {
            let mut waiters = self.waiters.lock();
            self.add_permits_locked(&mut waiters, 1, |w| granted = Some(w));
            waiters.drain.clone()
        };
        if let Some(waiter) = granted {
            waiter.wake();
        }
        for thread in drain {
            thread.unpark();
        }
    }

    /// Adds `n` permits: first to a shrink's debt, then straight to queued waiters (each is
    /// passed to `grant`, to be woken once the lock is released), the rest to the count.
    pub(super) fn add_permits_locked(
        &self,
        waiters: &mut Waiters,
        mut n: usize,
        mut grant: impl FnMut(sync::Arc<Waiter>),
    ) {
        while n > 0 {
            let debt = -available(self.state.load(AcquireOrd));
            if debt > 0 {
                let retire = n.min(debt as usize);
                self.state.fetch_add(retire as isize * ONE, AcqRel);
                n -= retire;
                continue;
            }
            match waiters.queue.pop_front() {
                Some(waiter) => {
                    self.left_queue_locked(waiters, &waiter);
                    waiter.status.store(GRANTED, Release);
                    grant(waiter);
                    n -= 1;
                }
                None => {
                    self.state.fetch_add(n as isize * ONE, AcqRel);
                    n = 0;
                }
            }
        }
        if waiters.queue.is_empty() {
            self.state.fetch_and(!HAS_WAITERS, AcqRel);
        }
    }

    /// Takes a permit if one is free and nobody is ahead (or the bulkhead is unfair),
    /// otherwise enqueues `waiter` (an async waiter under the queue's timer). Returns
    /// `Ok(true)` when it took a permit, `Ok(false)` when it enqueued.
    pub(super) fn take_or_enqueue(
        &self,
        waiter: &sync::Arc<Waiter>,
    ) -> Result<bool, BulkheadError> {
        let mut waiters = self.waiters.lock();
        let taken = self.take_or_enqueue_locked(&mut waiters, waiter)?;
        let due = !taken
            && waiter
                .deadline()
                .is_some_and(|deadline| self.queued_async_locked(&mut waiters, deadline));
        drop(waiters);
        if due {
            self.expire_waiters();
        }
        Ok(taken)
    }

    /// [`take_or_enqueue`](Self::take_or_enqueue) under the queue lock, the timer aside.
    fn take_or_enqueue_locked(
        &self,
        waiters: &mut Waiters,
        waiter: &sync::Arc<Waiter>,
    ) -> Result<bool, BulkheadError> {
        let fair = self.fair.load(Relaxed);
        let mut state = self.state.load(AcquireOrd);
        loop {
            if state & SHUT_DOWN != 0 {
                return Err(self.shut_down());
            }
            let next = if available(state) > 0 && (waiters.queue.is_empty() || !fair) {
                state - ONE
            } else if state & HAS_WAITERS == 0 {
                state | HAS_WAITERS
            } else {
                waiters.queue.push_back(sync::Arc::clone(waiter));
                return Ok(false);
            };
            match self.state.compare_exchange(state, next, AcqRel, AcquireOrd) {
                Ok(_) if next & HAS_WAITERS != 0 && state & HAS_WAITERS == 0 => {
                    // The flag is now set with the count seen empty: every release from
                    // here on takes the lock, so nobody can miss us.
                    waiters.queue.push_back(sync::Arc::clone(waiter));
                    return Ok(false);
                }
                Ok(_) => return Ok(true),
                Err(actual) => state = actual,
            }
        }
    }

    /// A waiter gives up (timed out or dropped). Returns true if it had been granted a
    /// permit meanwhile, which the caller now owns.
    pub(super) fn leave_queue(&self, waiter: &sync::Arc<Waiter>) -> bool {
        let mut waiters = self.waiters.lock();
        if waiter.status() == GRANTED {
            return true;
        }
        if let Some(pos) = waiters
            .queue
            .iter()
            .position(|w| sync::Arc::ptr_eq(w, waiter))
        {
            waiters.queue.remove(pos);
            self.left_queue_locked(&mut waiters, waiter);
        }
        if waiters.queue.is_empty() {
            self.state.fetch_and(!HAS_WAITERS, AcqRel);
        }
        false
    }

    /// Blocks the thread until granted a permit, shut down, or `max_wait` passed.
    pub(super) fn wait_blocking(&self, max_wait: Duration) -> Waited {
        let waiter = Waiter::new(Wake::Thread(std::thread::current()), None);
        match self.take_or_enqueue(&waiter) {
            Ok(true) => return Waited::Granted,
            Ok(false) => {}
            Err(_) => return Waited::ShutDown,
        }
        // A clock that panics (or anything else unwinding out of the wait) must not leave
        // this waiter queued, where it would swallow the next permit.
        let queued = LeaveOnUnwind {
            shared: self,
            waiter: &waiter,
        };
        let start = self.clock.now();
        // `None`: a wait too long for an `Instant` never times out.
        let deadline = start.checked_add(max_wait);
        let waited = loop {
            if let Some(resolved) = waiter.resolved(|| max_wait) {
                break resolved;
            }
            match deadline {
                Some(deadline) if self.clock.now() >= deadline => {
                    break self.give_up(&waiter, start);
                }
                Some(deadline) => self.clock.park_until(deadline),
                None => std::thread::park(),
            }
        };
        std::mem::forget(queued);
        waited
    }

    /// A queued waiter's `max_wait` has passed: it leaves the queue, unless a permit or
    /// the shutdown reached it first.
    pub(super) fn give_up(&self, waiter: &sync::Arc<Waiter>, start: Instant) -> Waited {
        if self.leave_queue(waiter) {
            Waited::Granted
        } else if waiter.status() == SHUT_DOWN_WAITER {
            Waited::ShutDown
        } else {
            Waited::TimedOut(self.clock.now().saturating_duration_since(start))
        }
    }

    /// Sets the limit in force (the resize path): growing hands the new permits to
    /// waiters first; shrinking retires permits as their holders release them.
    pub(super) fn set_limit(&self, new: u32) {
        let mut granted = Vec::new();
        {
            let mut waiters = self.waiters.lock();
            // The limit changes only here, under the queue lock. A lower limit is published
            // after the count has lost its permits, so whoever reads it (acquire) finds
            // them gone.
            let old = self.limit.load(Relaxed);
            if new > old {
                self.add_permits_locked(&mut waiters, (new - old) as usize, |w| granted.push(w));
            } else if old > new {
                self.state.fetch_sub((old - new) as isize * ONE, AcqRel);
            }
            self.limit.store(new, Release);
        }
        for waiter in granted {
            waiter.wake();
        }
    }

    /// Calls holding a permit right now.
    pub(super) fn running(&self) -> u32 {
        clamp_u32(self.limit.load(Relaxed) as isize - available(self.state.load(AcquireOrd)))
    }

    /// Stops admission: sets [`SHUT_DOWN`], refuses every queued waiter (woken once the
    /// lock is released) and, with `drain`, adds a thread that waits for the running calls,
    /// so that every release from now on wakes it. Returns the waiters refused by the
    /// shutdown so far (the same count for every caller).
    pub(super) fn close(&self, drain: Option<Thread>) -> u64 {
        let mut refused = Vec::new();
        let count = {
            let mut waiters = self.waiters.lock();
            self.state.fetch_or(SHUT_DOWN, AcqRel);
            for waiter in waiters.queue.drain(..) {
                waiter.status.store(SHUT_DOWN_WAITER, Release);
                refused.push(waiter);
            }
            waiters.timed = 0;
            waiters.timer = None;
            self.state.fetch_and(!HAS_WAITERS, AcqRel);
            waiters.drain.extend(drain);
            waiters.refused_by_shutdown += refused.len() as u64;
            waiters.refused_by_shutdown
        };
        for waiter in refused {
            waiter.wake();
        }
        count
    }

    /// Takes `drain` (a thread `close` added) out of the threads woken by releases.
    pub(super) fn stop_draining(&self, drain: &Thread) {
        let mut waiters = self.waiters.lock();
        if let Some(at) = waiters.drain.iter().position(|t| t.id() == drain.id()) {
            waiters.drain.swap_remove(at);
        }
    }

    /// True once [`close`](Self::close) has run.
    pub(super) fn is_shut_down(&self) -> bool {
        self.state.load(Relaxed) & SHUT_DOWN != 0
    }
}

/// A `state` word holding `permits` available permits and no flag.
pub(super) fn permits_to_state(permits: u32) -> isize {
    permits as isize * ONE
}

/// `n` as a `u32`, negative counts as 0.
pub(super) fn clamp_u32(n: isize) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// Takes a blocking waiter out of the queue if its wait unwinds; a permit granted to it
/// meanwhile is released (it has no holder).
struct LeaveOnUnwind<'a> {
    shared: &'a Shared,
    waiter: &'a sync::Arc<Waiter>,
}

impl Drop for LeaveOnUnwind<'_> {
    fn drop(&mut self) {
        // Granted, it has taken no lease yet (the admission takes it after the wait).
        if self.shared.leave_queue(self.waiter) {
            self.shared.give_back();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{SPARES, Waiter, Wake, sync, with_spares};

    fn spares() -> usize {
        with_spares(|spares| spares.len()).unwrap()
    }

    /// Waits that end while others begin lend their waiters to the next ones, up to
    /// `SPARES` of them: a contended semaphore's waits do not each allocate.
    #[test]
    fn ended_waits_lend_their_waiters_to_the_next_ones_up_to_the_cap() {
        std::thread::spawn(|| {
            let ended: Vec<_> = (0..SPARES + 8)
                .map(|_| Waiter::new(Wake::Spare, None))
                .collect();
            assert_eq!(spares(), 0);
            for waiter in ended {
                Waiter::recycle(waiter);
            }
            assert_eq!(spares(), SPARES, "the thread keeps at most SPARES");
            let next: Vec<_> = (0..SPARES)
                .map(|_| Waiter::new(Wake::Spare, None))
                .collect();
            assert_eq!(spares(), 0, "each new wait took a kept waiter");
            drop(next);
            // A waiter something else still holds (a queue, a releaser) is not kept.
            let held = Waiter::new(Wake::Spare, None);
            let other = sync::Arc::clone(&held);
            Waiter::recycle(held);
            assert_eq!(spares(), 0);
            drop(other);
        })
        .join()
        .unwrap();
    }
}

//! The `max_wait` of async waiters: one timer per bulkhead, not one per waiting caller.
//!
//! A queued async waiter records its deadline in its [`Waiter`] and arms nothing of its
//! own. The queue keeps one timer (`Waiters::timer`), armed for the earliest deadline of
//! its async waiters; when it fires, it removes every async waiter whose deadline has
//! passed (status `TIMED_OUT`, woken once), then re-arms for the earliest deadline left.
//! Blocking waiters time themselves (they park with a timeout) and are not counted here.
//!
//! # Invariants (all under the queue lock)
//!
//! 6. While an async waiter is queued, the timer is armed for a deadline no later than its
//!    own: no waiter waits past its `max_wait` for lack of a timer.
//! 7. `Waiters::timed` is the number of queued async waiters; when it drops to 0 the timer
//!    is dropped with it (no timer outlives the waiters it serves).
//! 8. A waiter leaves `WAITING` once, to `TIMED_OUT` only here, and is removed from the
//!    queue in the same critical section: a timed-out waiter holds no permit.
//! 9. The timer is polled under the queue lock, and a timer may wake its waker from inside
//!    that poll (futures-timer does when it fires during the registration; a user's
//!    [`Clock`](crate::Clock) may at any time). While the timer is being armed, a wake —
//!    from inside the poll or from the timer's thread — is handed to the armer
//!    (`Shared::timer_arming`), who then expires the due waiters itself: the waker never
//!    takes the lock its own poll holds, and no wake is lost.

use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::task::{Context, Wake as TaskWake, Waker};
use std::time::Instant;

use super::Shared;
use super::state::{HAS_WAITERS, Waiter, Waiters};
use crate::clock::Sleep;
use crate::sync;
use crate::sync::AtomicU8;

/// `Shared::timer_arming`: nobody is arming the timer; a wake expires the due waiters.
pub(super) const IDLE: u8 = 0;
/// The timer is being armed under the queue lock.
const ARMING: u8 = 1;
/// The timer was woken while being armed: the armer expires the due waiters.
const WOKEN_WHILE_ARMING: u8 = 2;

/// The queue's one timer, and the instant it fires at.
pub(super) struct QueueTimer {
    /// Polled once with the bulkhead's timer waker; it wakes that waker when due.
    _sleep: Sleep,
    at: Instant,
}

/// The waker the queue's timer wakes: expires the waiters whose deadline has passed.
pub(super) struct TimerWaker {
    pub(super) shared: std::sync::Weak<Shared>,
}

impl TaskWake for TimerWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(shared) = self.shared.upgrade() {
            // Being armed (maybe by this very thread, inside the timer's poll, with the
            // queue lock held): the armer takes the wake over — also when another wake
            // was handed over first.
            let handed_over = matches!(
                shared
                    .timer_arming
                    .compare_exchange(ARMING, WOKEN_WHILE_ARMING, AcqRel, Acquire),
                Ok(_) | Err(WOKEN_WHILE_ARMING)
            );
            if !handed_over {
                shared.expire_waiters();
            }
        }
    }
}

impl Shared {
    /// Under the queue lock, an async waiter with `deadline` was just queued: counts it and
    /// arms the timer if it is not armed for that deadline or earlier. Returns true if the
    /// timer is already due: the caller then calls [`expire_waiters`](Self::expire_waiters)
    /// once the lock is released.
    pub(super) fn queued_async_locked(&self, waiters: &mut Waiters, deadline: Instant) -> bool {
        waiters.timed += 1;
        if waiters
            .timer
            .as_ref()
            .is_some_and(|timer| timer.at <= deadline)
        {
            return false;
        }
        self.arm_locked(waiters, Some(deadline))
    }

    /// Under the queue lock, `waiter` left the queue (granted, given up or shut down): the
    /// timer goes once no async waiter is left.
    pub(super) fn left_queue_locked(&self, waiters: &mut Waiters, waiter: &Waiter) {
        if waiter.deadline().is_some() {
            waiters.timed -= 1;
            if waiters.timed == 0 {
                waiters.timer = None;
            }
        }
    }

    /// Arms the timer for `at` (`None`: no timer). Returns true if it is already due, or
    /// was woken while being armed (invariant 9).
    fn arm_locked(&self, waiters: &mut Waiters, at: Option<Instant>) -> bool {
        let Some(at) = at else {
            waiters.timer = None;
            return false;
        };
        let mut sleep = self.clock.sleep_until(at);
        let arming = Arming::start(&self.timer_arming);
        let ready = sleep
            .as_mut()
            .poll(&mut Context::from_waker(&self.timer_waker))
            .is_ready();
        let woken = arming.finish();
        waiters.timer = Some(QueueTimer { _sleep: sleep, at });
        ready || woken
    }

    /// The timer fired (or may have): every async waiter whose deadline has passed leaves
    /// the queue timed out and is woken; the timer is re-armed for the earliest deadline
    /// left, if any.
    pub(super) fn expire_waiters(&self) {
        let mut expired: Vec<sync::Arc<Waiter>> = Vec::new();
        {
            let mut waiters = self.waiters.lock();
            let mut first = true;
            loop {
                let now = self.clock.now();
                let mut next: Option<Instant> = None;
                let before = expired.len();
                waiters.queue.retain(|waiter| match waiter.deadline() {
                    Some(deadline) if deadline <= now => {
                        waiter.time_out();
                        expired.push(sync::Arc::clone(waiter));
                        false
                    }
                    Some(deadline) => {
                        next = Some(next.map_or(deadline, |n| n.min(deadline)));
                        true
                    }
                    None => true,
                });
                waiters.timed -= expired.len() - before;
                if waiters.queue.is_empty() {
                    self.state.fetch_and(!HAS_WAITERS, AcqRel);
                }
                // Another round only when the timer just armed is due and the round before
                // expired someone (or was the first): a clock whose timer is "due" while its
                // `now` says otherwise cannot keep this loop, and the queue lock, forever.
                let progressed = first || expired.len() > before;
                first = false;
                if !self.arm_locked(&mut waiters, next) || !progressed {
                    break;
                }
            }
        }
        for waiter in expired {
            waiter.wake();
        }
    }
}

/// The timer being armed: wakes meanwhile are handed to the armer, until [`finish`]
/// (or an unwinding poll) ends it.
///
/// [`finish`]: Arming::finish
struct Arming<'a>(&'a AtomicU8);

impl<'a> Arming<'a> {
    fn start(state: &'a AtomicU8) -> Self {
        state.store(ARMING, Release);
        Arming(state)
    }

    /// Ends the arming; true if the timer was woken meanwhile.
    fn finish(self) -> bool {
        let woken = self.0.swap(IDLE, AcqRel) == WOKEN_WHILE_ARMING;
        std::mem::forget(self);
        woken
    }
}

impl Drop for Arming<'_> {
    /// The timer's poll unwound: later wakes expire the waiters themselves again.
    fn drop(&mut self) {
        self.0.store(IDLE, Release);
    }
}

/// The waker of `shared`'s queue timer.
pub(super) fn timer_waker(shared: std::sync::Weak<Shared>) -> Waker {
    Waker::from(Arc::new(TimerWaker { shared }))
}

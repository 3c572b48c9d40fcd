//! The order of every admission, written once for both kinds and every call shape (a
//! thread that blocks, a caller that must not wait, a task that awaits):
//!
//! 1. **Re-entry.** A thread already inside the bulkhead (a nested call, one of a pool's
//!    workers, a poll of a body under a permit) runs inline, counted `reentrant`, and
//!    nothing else is checked: a call never waits for a slot its own caller holds.
//! 2. **Shut down.** Refused `ShutDown`, before the rate limit spends a permission on it.
//! 3. **Rate limit** (or a semaphore's cluster leases, which share its gate). A permission
//!    of this period; or one of a coming period reserved within the limit's `timeout` and
//!    waited for on the bulkhead's clock — a thread parks, a task awaits a [`RateWait`] — else
//!    `RateLimited`. A caller that must not wait (`try_acquire`, a call that only borrows
//!    room past its partition's share) takes only a permission of this period.
//! 4. **Slot**: the kind's own. A semaphore's permit (its count and waiter queue,
//!    `semaphore/state.rs`); a pool's running-or-queued slot (its room waiters and
//!    `on_full`, `thread_pool/admission.rs`).
//!
//! Each kind implements [`Gate`], what steps 1–3 read of it, and takes step 4 itself after
//! [`first`] (steps 1 and the gate's state) and, when the gate is closed, [`gated`] or
//! [`gated_async`] (steps 2 and 3). With no rate limit set, steps 2 and 3 cost one relaxed
//! load ([`Gate::is_open`]): the uncontended call goes from the re-entry check straight
//! to its slot, and a semaphore's slot word refuses a shut-down bulkhead itself.
//!
//! Partitions and per-key caps (`crate::shares`) are counted in front of this order, over
//! the same re-entry check (a nested call is counted under neither): a call refused at its
//! key's cap, or refused while borrowing past its partition's share, spends no rate-limit
//! permission that another tenant could have used.

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::clock::Sleep;
use crate::frame::{self, BulkheadId};
use crate::rate_limit::{RateAdmission, RateLimiter};
use crate::{BulkheadError, BulkheadName};

/// What the order reads of a bulkhead before its slot (implemented by each kind's shared
/// state: `semaphore::Shared`, `thread_pool::Shared`).
pub(crate) trait Gate {
    /// The bulkhead's id on the per-thread call frames (the re-entry mark).
    fn id(&self) -> BulkheadId;
    /// Counts a call that entered from inside (`reentrant`).
    fn count_reentrant(&self);
    /// True when steps 2 and 3 have nothing to check before the slot: no rate limit (nor
    /// cluster lease) is set, and the bulkhead is not shut down or its slot refuses a
    /// shut-down bulkhead itself. One or two relaxed loads.
    fn is_open(&self) -> bool;
    /// True once the bulkhead is shut down.
    fn is_shut_down(&self) -> bool;
    /// The rate limiter checked at step 3 (disabled unless configured).
    fn rate(&self) -> &RateLimiter;
    /// The bulkhead's name, for the errors.
    fn name(&self) -> &BulkheadName;
    /// Counts and reports a refusal, handing the error back.
    fn refuse(&self, error: BulkheadError) -> BulkheadError;
}

/// What step 1 found, and whether steps 2 and 3 must run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum First {
    /// The thread is inside the bulkhead: run inline (already counted `reentrant`).
    Inside,
    /// Nothing to check before the slot: take step 4 now.
    Open,
    /// A rate limit is set, or the bulkhead is shut down: steps 2 and 3 first ([`gated`],
    /// [`gated_async`]), nothing done yet.
    Gated,
}

/// Step 1, and whether steps 2 and 3 must run. Inlined: it is each kind's fast path.
#[inline(always)]
pub(crate) fn first<G: Gate + ?Sized>(gate: &G) -> First {
    if frame::is_inside(gate.id()) {
        gate.count_reentrant();
        First::Inside
    } else if gate.is_open() {
        First::Open
    } else {
        First::Gated
    }
}

/// Steps 2 and 3 for a thread, after [`first`] said [`First::Gated`]: waits on the clock
/// for a reserved rate-limit permission when `may_wait`, else takes only one of this period.
///
/// # Errors
///
/// [`BulkheadError::ShutDown`] or [`BulkheadError::RateLimited`], counted and reported.
#[cold]
#[inline(never)]
pub(crate) fn gated<G: Gate + ?Sized>(gate: &G, may_wait: bool) -> Result<(), BulkheadError> {
    if gate.is_shut_down() {
        return Err(gate.refuse(shut_down(gate)));
    }
    let rate = gate.rate();
    if rate.is_enabled() {
        let passed = if may_wait {
            rate.acquire_blocking(gate.name())
        } else {
            rate.try_acquire(gate.name())
        };
        passed.map_err(|error| gate.refuse(error))?;
    }
    Ok(())
}

fn shut_down<G: Gate + ?Sized>(gate: &G) -> BulkheadError {
    BulkheadError::ShutDown {
        name: gate.name().clone(),
    }
}

/// Steps 2 and 3 for a task, after [`first`] said [`First::Gated`]: shut down, then the
/// rate limit, reserving a permission of a coming period within the limit's `timeout` if
/// `may_wait` (else only one of this period). `Ok(None)`: go on to the slot; `Ok(Some)`:
/// await the [`RateWait`] first (the call's future keeps it, and gives it back if dropped
/// before it is over).
///
/// # Errors
///
/// [`BulkheadError::ShutDown`] or [`BulkheadError::RateLimited`], counted and reported.
#[cold]
#[inline(never)]
pub(crate) fn gated_async<G: Gate + ?Sized>(
    gate: &G,
    may_wait: bool,
) -> Result<Option<RateWait>, BulkheadError> {
    if gate.is_shut_down() {
        return Err(gate.refuse(shut_down(gate)));
    }
    let rate = gate.rate();
    if !rate.is_enabled() {
        return Ok(None);
    }
    let timeout = if may_wait {
        rate.timeout()
    } else {
        Duration::ZERO
    };
    match rate.reserve(timeout) {
        RateAdmission::Admitted => Ok(None),
        RateAdmission::WaitUntil(at) => Ok(Some(RateWait {
            sleep: rate.clock().sleep_until(at),
            at,
        })),
        RateAdmission::Refused { retry_after } => {
            let error = BulkheadError::RateLimited {
                name: gate.name().clone(),
                retry_after,
            };
            Err(gate.refuse(error))
        }
    }
}

/// A rate-limit permission of a coming period, reserved by [`gated_async`]: its task awaits
/// the period's start. The call's future keeps it (the same size as the sleep and the
/// instant it holds) and, dropped before it is over, calls [`give_back`](Self::give_back).
pub(crate) struct RateWait {
    sleep: Sleep,
    at: Instant,
}

impl RateWait {
    /// Ready once the reserved period has started (by the rate limiter's clock).
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.sleep.as_mut().poll(cx)
    }

    /// The call is dropped while waiting: the reserved permission goes back.
    pub(crate) fn give_back<G: Gate + ?Sized>(&self, gate: &G) {
        gate.rate().give_back(self.at);
    }
}

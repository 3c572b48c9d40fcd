//! The sync call's paths on this thread, in the order of every admission
//! (`crate::admission`): the fast path (re-entry, a free slot or the fail-fast refusal,
//! decided without building anything), the slow path (shut down, rate limit, waiting for
//! room, running on the caller), and an admitted call run on a worker while the caller
//! blocks.

use std::sync::atomic::Ordering::Relaxed;

use super::ThreadPoolBulkhead;
use super::admission::Admission;
use super::job;
use crate::Refused;
use crate::admission::{self, First};

impl ThreadPoolBulkhead {
    /// [`call`](Self::call) on this thread, blocking it.
    #[inline(always)]
    pub(super) fn call_here<I, R>(
        &self,
        input: I,
        body: impl FnOnce(I) -> R + Send,
    ) -> Result<R, Refused<I>>
    where
        I: Send,
        R: Send,
    {
        let shared = self.shared();
        // The common case, decided without building anything: no rate limit, not shut down,
        // and a free slot, or a refusal under `on_full: abort` built straight into the result.
        match admission::first(&**shared) {
            First::Inside => return Ok(self.run_inline(input, body)),
            First::Open => {
                if shared.try_admit() {
                    let span = shared.telemetry.call_span();
                    let _span = span.enter();
                    return self.run_admitted(input, body);
                }
                if shared.aborts_when_full() {
                    return Err(shared.refused_full(input));
                }
            }
            First::Gated => {}
        }
        self.call_slow(input, body)
    }

    /// A re-entrant call (this thread is inside the pool: one of its workers, or a
    /// caller-runs body): runs inline, in a span of its own.
    fn run_inline<I, R>(&self, input: I, body: impl FnOnce(I) -> R) -> R {
        let span = self.shared().telemetry.call_span();
        let _span = span.enter();
        body(input)
    }

    /// A call that only borrows room (a partition at or above its share): admitted if a
    /// running-or-queued slot is free now and nobody waits for room; never waits, never
    /// runs on its caller. A re-entrant call runs inline as [`call`](Self::call)'s does.
    pub(crate) fn call_borrowing<I, R>(
        &self,
        input: I,
        body: impl FnOnce(I) -> R + Send,
    ) -> Result<R, Refused<I>>
    where
        I: Send,
        R: Send,
    {
        let shared = self.shared();
        if admission::first(&**shared) == First::Inside {
            return Ok(self.run_inline(input, body));
        }
        let span = shared.telemetry.call_span();
        let _span = span.enter();
        if let Err(error) = admission::gated(&**shared, false) {
            return Err(Refused { input, error });
        }
        if shared.room.len() > 0 || !shared.try_admit() {
            return Err(shared.refused_full(input));
        }
        // `block` runs the wait directly on a plain thread.
        crate::async_caller::block(crate::async_caller::caller(), || {
            self.run_admitted(input, body)
        })
    }

    /// [`call`](Self::call) past its fast path: the rate limit, shut down, waiting for room
    /// or running on the caller.
    #[cold]
    #[inline(never)]
    fn call_slow<I, R>(&self, input: I, body: impl FnOnce(I) -> R + Send) -> Result<R, Refused<I>>
    where
        I: Send,
        R: Send,
    {
        let shared = self.shared();
        // The call's span; the job captures it as the current span and enters it on the worker.
        let span = shared.telemetry.call_span();
        let _span = span.enter();
        // Shut down, then the rate limit (waiting up to its `timeout`), before the queue.
        if let Err(error) = admission::gated(&**shared, true) {
            return Err(Refused { input, error });
        }
        match shared.admit_blocking() {
            Ok(Admission::Slot) => self.run_admitted(input, body),
            Ok(Admission::CallerRuns) => Ok(shared.run_on_caller(input, body)),
            Err(error) => Err(Refused {
                input,
                error: shared.refuse(error),
            }),
        }
    }

    /// Runs an admitted call (its slot taken) on a worker, in the caller's current span.
    fn run_admitted<I, R>(
        &self,
        input: I,
        body: impl FnOnce(I) -> R + Send,
    ) -> Result<R, Refused<I>>
    where
        I: Send,
        R: Send,
    {
        let shared = self.shared();
        shared.counters.permitted.fetch_add(1, Relaxed);
        shared.telemetry.on_permitted();
        let outcome = job::call_blocking(input, body, |job| {
            let queued = shared.enqueue(job)?;
            Some(job::Withdraw {
                clock: &*shared.clock,
                at: shared.queue_deadline(&queued)?,
                withdraw: move || shared.withdraw_stale(queued.id),
            })
        });
        shared.settle(outcome)
    }
}

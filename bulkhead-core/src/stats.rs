//! Per-bulkhead counters, shared by both kinds.
//!
//! Plain relaxed atomics: a counter is read for reporting, never to decide admission
//! (admission state lives in the semaphore and the pool themselves).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::BulkheadError;
use crate::snapshot::{CallCounts, RefusalCounts};

/// Counters kept by every bulkhead.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Calls admitted (given a permit or accepted into the pool, queued or not). On a cache
    /// line of its own: callers add to it on every admission, while a pool's workers count
    /// outcomes in the fields below (a semaphore's fast path writes only this one).
    pub permitted: crossbeam_utils::CachePadded<AtomicU64>,
    /// Admitted calls whose body returned.
    pub completed: AtomicU64,
    /// Admitted calls whose body panicked.
    pub panicked: AtomicU64,
    /// Admitted calls whose caller gave up (dropped the future) before the body ran.
    pub cancelled: AtomicU64,
    /// Calls that entered a bulkhead they were already inside and ran inline.
    pub reentrant: AtomicU64,
    /// Refusals, indexed by [`refusal_index`] (index 5 counts call timeouts).
    pub refused: [AtomicU64; REFUSAL_REASONS.len()],
    /// Synchronous thread-pool calls whose caller stopped waiting at the call timeout: the
    /// worker finished them and their result was thrown away.
    pub discarded: AtomicU64,
    /// Refused calls answered by a fallback (counted by whoever called the fallback).
    pub fallbacks: AtomicU64,
}

/// The refusal reasons, in the order of [`Counters::refused`]; equal to [`BulkheadError::reason`].
/// `call_timeout` is not a refusal (the body ran) and is reported as
/// [`CallCounts::timed_out`].
pub(crate) const REFUSAL_REASONS: [&str; 7] = [
    "full",
    "timeout",
    "queue_timeout",
    "rate_limited",
    "shut_down",
    "call_timeout",
    "key_limit",
];

/// The index of `full` in [`REFUSAL_REASONS`] and [`Counters::refused`].
pub(crate) const FULL: usize = 0;
/// The index of `shut_down` in [`REFUSAL_REASONS`] and [`Counters::refused`].
pub(crate) const SHUT_DOWN: usize = 4;

pub(crate) fn refusal_index(err: &BulkheadError) -> usize {
    match err {
        BulkheadError::Full { .. } => FULL,
        BulkheadError::Timeout { .. } => 1,
        BulkheadError::QueueTimeout { .. } => 2,
        BulkheadError::RateLimited { .. } => 3,
        BulkheadError::ShutDown { .. } => SHUT_DOWN,
        BulkheadError::CallTimeout { .. } => 5,
        BulkheadError::KeyLimit { .. } => 6,
    }
}

impl Counters {
    /// Counts a refusal and hands the error back, so call sites read `return Err(c.refuse(e))`.
    #[inline]
    pub(crate) fn refuse(&self, err: BulkheadError) -> BulkheadError {
        self.refused[refusal_index(&err)].fetch_add(1, Relaxed);
        err
    }

    /// The counters as plain numbers, for a [`BulkheadSnapshot`](crate::BulkheadSnapshot).
    pub(crate) fn counts(&self) -> CallCounts {
        let refused = |i: usize| self.refused[i].load(Relaxed);
        CallCounts {
            permitted: self.permitted.load(Relaxed),
            completed: self.completed.load(Relaxed),
            panicked: self.panicked.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            reentrant: self.reentrant.load(Relaxed),
            timed_out: refused(5),
            discarded: self.discarded.load(Relaxed),
            fallbacks: self.fallbacks.load(Relaxed),
            refused: RefusalCounts {
                full: refused(0),
                timeout: refused(1),
                queue_timeout: refused(2),
                rate_limited: refused(3),
                shut_down: refused(4),
                key_limit: refused(6),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BulkheadName;

    #[test]
    fn reasons_line_up_with_error_labels() {
        let name = BulkheadName::new("x");
        let d = std::time::Duration::ZERO;
        for err in [
            BulkheadError::Full { name: name.clone() },
            BulkheadError::Timeout {
                name: name.clone(),
                waited: d,
            },
            BulkheadError::QueueTimeout {
                name: name.clone(),
                waited: d,
            },
            BulkheadError::RateLimited {
                name: name.clone(),
                retry_after: d,
            },
            BulkheadError::ShutDown { name: name.clone() },
            BulkheadError::CallTimeout {
                name: name.clone(),
                after: d,
            },
            BulkheadError::KeyLimit { name: name.clone() },
        ] {
            assert_eq!(REFUSAL_REASONS[refusal_index(&err)], err.reason());
        }
    }
}

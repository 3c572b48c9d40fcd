//! How often a bulkhead's refusals are logged: the `WARN` of a refusal storm, bounded.
//!
//! An overload refuses calls by the hundred thousand a second, and one log line each would
//! flood the log pipeline when it is needed most. Per bulkhead and reason, the first
//! refusal is logged at once; after it, at most one line per [`WINDOW`] (by the bulkhead's
//! clock), carrying the number of refusals left unlogged since the previous line. The
//! counters and the events see every refusal; only the log lines are thinned.
//!
//! # Invariants
//!
//! * Within any window of [`WINDOW`] after a logged line, no other line of the same reason
//!   is logged: at most `1 + elapsed / WINDOW` lines per reason.
//! * Every refusal not logged is counted once in `suppressed`, reported by the next line of
//!   its reason (a refusal counted while that line is being written may go to the one after).
//! * Lock-free: a relaxed load, then a compare-exchange or a `fetch_add`.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::clock::duration_nanos;
use crate::stats::REFUSAL_REASONS;

/// At most one refusal line per bulkhead and reason in this long, after the first.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);

/// The rate limit of one bulkhead's refusal lines. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct RefusalLog {
    /// Times are kept as nanoseconds since this instant (of the bulkhead's clock).
    epoch: Instant,
    reasons: [ReasonLog; REFUSAL_REASONS.len()],
}

#[derive(Debug, Default)]
struct ReasonLog {
    /// When the last line was logged, in nanoseconds since the epoch, plus one; 0: never.
    last: AtomicU64,
    /// Refusals not logged since that line.
    suppressed: AtomicU64,
}

impl RefusalLog {
    pub(crate) fn new(epoch: Instant) -> Self {
        RefusalLog {
            epoch,
            reasons: Default::default(),
        }
    }

    /// A refusal of reason `reason` (an index of [`REFUSAL_REASONS`]) at `now`: `Some(n)`
    /// when it is to be logged, `n` being the refusals of that reason left unlogged since
    /// the previous line; `None` when it is counted as suppressed instead.
    pub(crate) fn admit(&self, reason: usize, now: Instant) -> Option<u64> {
        let log = self.reasons.get(reason)?;
        let now = duration_nanos(now.saturating_duration_since(self.epoch)).saturating_add(1);
        let last = log.last.load(Relaxed);
        let within_window = last != 0 && now.saturating_sub(last) < duration_nanos(WINDOW);
        if !within_window
            && log
                .last
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            return Some(log.suppressed.swap(0, Relaxed));
        }
        log.suppressed.fetch_add(1, Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_refusal_is_logged_then_one_per_window_with_the_suppressed_count() {
        let epoch = Instant::now();
        let log = RefusalLog::new(epoch);
        let at = |millis| epoch + Duration::from_millis(millis);
        assert_eq!(log.admit(0, at(0)), Some(0));
        assert_eq!(log.admit(0, at(1)), None);
        assert_eq!(log.admit(0, at(999)), None);
        // Another reason has a window of its own.
        assert_eq!(log.admit(1, at(999)), Some(0));
        assert_eq!(log.admit(0, at(1000)), Some(2));
        assert_eq!(log.admit(0, at(1500)), None);
        assert_eq!(log.admit(0, at(5000)), Some(1));
    }
}

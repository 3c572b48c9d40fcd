//! AIMD: additive increase, multiplicative decrease, driven by drops.

use std::time::Duration;

use super::{AdaptiveAlgorithm, Estimates, LimitAlgorithm, Window};

/// The AIMD algorithm.
///
/// As TCP Reno and Netflix concurrency-limits' `AIMDLimit`: a window with a drop (a call
/// that panicked, was cancelled or was marked overloaded), or whose mean latency is above
/// `timeout`, multiplies the limit by `backoff_ratio`; any other window in which the limit
/// was used adds one. It needs no no-load latency, so it never probes; it does need drops:
/// without a `timeout` it does not react to a dependency that only gets slow.
///
/// Difference from `AIMDLimit`: one step per window of about one round trip instead of per
/// sample (+1 per sample doubles the limit every round trip).
///
/// ```
/// use std::time::Duration;
/// use bulkhead_core::adaptive::{Aimd, LimitAlgorithm, Window};
///
/// let mut aimd = Aimd::new(0.9, Some(Duration::from_millis(100)));
/// assert_eq!(aimd.update(10.0, &Window::uniform(10, Duration::from_millis(20), 10)), 11.0);
/// // Slower than the timeout counts as a drop.
/// assert_eq!(aimd.update(10.0, &Window::uniform(10, Duration::from_millis(200), 10)), 9.0);
/// ```
#[derive(Clone, Debug)]
pub struct Aimd {
    backoff_ratio: f64,
    timeout: Option<Duration>,
    window_rtt: Option<Duration>,
}

impl Aimd {
    /// AIMD multiplying by `backoff_ratio` (default 0.9) after a drop, counting windows
    /// slower than `timeout` (if any) as drops.
    pub fn new(backoff_ratio: f64, timeout: Option<Duration>) -> Self {
        Aimd {
            backoff_ratio,
            timeout,
            window_rtt: None,
        }
    }
}

impl LimitAlgorithm for Aimd {
    fn algorithm(&self) -> AdaptiveAlgorithm {
        AdaptiveAlgorithm::Aimd
    }

    fn probes(&self) -> bool {
        false
    }

    fn update(&mut self, limit: f64, window: &Window) -> f64 {
        self.window_rtt = Some(window.mean_rtt);
        let too_slow = self.timeout.is_some_and(|t| window.mean_rtt > t);
        if window.dropped || too_slow {
            limit * self.backoff_ratio
        } else if window.used(limit) {
            limit + 1.0
        } else {
            limit
        }
    }

    fn estimates(&self) -> Estimates {
        Estimates {
            window_rtt: self.window_rtt,
            ..Estimates::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn grows_by_one_per_used_window_and_backs_off_after_a_drop() {
        let mut aimd = Aimd::new(0.5, None);
        assert_eq!(aimd.update(8.0, &Window::uniform(10, 500 * MS, 8)), 9.0);
        let mut window = Window::uniform(10, MS, 8);
        window.dropped = true;
        assert_eq!(aimd.update(8.0, &window), 4.0);
    }

    #[test]
    fn without_a_timeout_latency_alone_changes_nothing_but_growth() {
        let mut aimd = Aimd::new(0.9, None);
        assert_eq!(aimd.update(8.0, &Window::uniform(10, 10_000 * MS, 8)), 9.0);
        assert_eq!(aimd.update(8.0, &Window::uniform(10, 10_000 * MS, 3)), 8.0);
    }
}

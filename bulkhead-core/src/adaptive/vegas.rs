//! Vegas: keeps a few calls queued at the dependency, estimated from latency.

use super::no_load::Latencies;
use super::{AdaptiveAlgorithm, Estimates, LimitAlgorithm, Window};

/// The Vegas algorithm.
///
/// From TCP Vegas, as in Netflix concurrency-limits' `VegasLimit`: with the no-load
/// latency `d` and the window's mean latency `r`, about `limit × (1 − d / r)` calls are
/// queued at the dependency rather than being served. Few queued (≤ log10 limit): grow
/// fast (`beta` × log10 limit); fewer than `alpha` × log10 limit: grow by log10 limit;
/// more than `beta` × log10 limit: shrink by half the excess (at least log10 limit). A drop
/// shrinks by a tenth.
///
/// Differences from `VegasLimit`, and why: it judges windows of about one round trip
/// instead of each sample (a limit that grows per sample overshoots by a round trip's worth
/// before the first slow call returns); the no-load latency is the lowest *window mean*, not
/// the lowest sample (one lucky fast call no longer makes every later call look queued); and
/// it shrinks by half the excess queue, so a limit that starts ten times too high comes down
/// in a few windows instead of hundreds.
///
/// ```
/// use std::time::Duration;
/// use bulkhead_core::adaptive::{LimitAlgorithm, Vegas, Window};
///
/// let mut vegas = Vegas::new(3.0, 6.0);
/// vegas.on_probe(&Window::uniform(10, Duration::from_millis(10), 1));
/// // At no-load latency the limit grows …
/// assert!(vegas.update(100.0, &Window::uniform(100, Duration::from_millis(10), 100)) > 100.0);
/// // … at twice the latency half of the calls are queued: it shrinks.
/// assert!(vegas.update(100.0, &Window::uniform(100, Duration::from_millis(20), 100)) < 100.0);
/// ```
#[derive(Clone, Debug)]
pub struct Vegas {
    alpha: f64,
    beta: f64,
    /// The no-load latency (the lowest window or probe mean since the last probe) and
    /// the last window's.
    latencies: Latencies,
    queued: Option<f64>,
}

impl Vegas {
    /// Vegas keeping between `alpha` and `beta` × log10 limit calls queued (defaults 3, 6).
    pub fn new(alpha: f64, beta: f64) -> Self {
        Vegas {
            alpha,
            beta,
            latencies: Latencies::default(),
            queued: None,
        }
    }
}

impl LimitAlgorithm for Vegas {
    fn algorithm(&self) -> AdaptiveAlgorithm {
        AdaptiveAlgorithm::Vegas
    }

    fn probes(&self) -> bool {
        true
    }

    fn on_probe(&mut self, window: &Window) {
        self.latencies.on_probe(window);
    }

    fn update(&mut self, limit: f64, window: &Window) -> f64 {
        let (mean, no_load) = self.latencies.observe(window, f64::min);
        let log = limit.max(1.0).log10().max(1.0);
        if window.dropped {
            return limit - log.max(limit / 10.0);
        }
        if !window.used(limit) {
            return limit;
        }
        let queued = limit * (1.0 - no_load / mean);
        self.queued = Some(queued);
        if queued <= log {
            limit + self.beta * log
        } else if queued < self.alpha * log {
            limit + log
        } else if queued > self.beta * log {
            limit - log.max((queued - self.beta * log) / 2.0)
        } else {
            limit
        }
    }

    fn estimates(&self) -> Estimates {
        self.latencies.estimates(self.queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    fn probed() -> Vegas {
        let mut vegas = Vegas::new(3.0, 6.0);
        vegas.on_probe(&Window::uniform(10, 10 * MS, 1));
        vegas
    }

    #[test]
    fn grows_while_latency_stays_at_no_load() {
        let mut vegas = probed();
        let next = vegas.update(50.0, &Window::uniform(50, 10 * MS, 50));
        assert!((next - (50.0 + 6.0 * 50f64.log10())).abs() < 1e-9, "{next}");
    }

    #[test]
    fn holds_between_alpha_and_beta_queued_calls() {
        let mut vegas = probed();
        // 100 × (1 − 10/10.9) ≈ 8.3 queued: between alpha × 2 = 6 and beta × 2 = 12.
        let hold = vegas.update(100.0, &Window::uniform(100, MS * 109 / 10, 100));
        assert_eq!(hold, 100.0);
    }

    #[test]
    fn shrinks_by_half_the_excess_queue() {
        let mut vegas = probed();
        // 100 × (1 − 10/20) = 50 queued, beta × log = 12: shrink by 19.
        let next = vegas.update(100.0, &Window::uniform(100, 20 * MS, 100));
        assert!((next - 81.0).abs() < 1e-9, "{next}");
    }

    #[test]
    fn an_unused_limit_is_not_judged() {
        let mut vegas = probed();
        assert_eq!(
            vegas.update(100.0, &Window::uniform(30, 50 * MS, 30)),
            100.0
        );
    }

    #[test]
    fn a_drop_shrinks_by_a_tenth() {
        let mut vegas = probed();
        let mut window = Window::uniform(100, 10 * MS, 100);
        window.dropped = true;
        assert_eq!(vegas.update(100.0, &window), 90.0);
    }

    #[test]
    fn latencies_measured_at_zero_do_not_drive_the_limit_down() {
        // A clock too coarse for the calls: probe and windows all measure 0 ns.
        let mut vegas = Vegas::new(3.0, 6.0);
        vegas.on_probe(&Window::uniform(10, Duration::ZERO, 1));
        let mut limit = 50.0;
        for _ in 0..20 {
            limit = vegas.update(limit, &Window::uniform(100, Duration::ZERO, 100));
        }
        assert!(limit > 50.0, "{limit}: equal latencies are no queue");
    }

    #[test]
    fn the_no_load_latency_follows_a_faster_dependency_down() {
        let mut vegas = probed();
        vegas.update(100.0, &Window::uniform(100, 5 * MS, 100));
        assert_eq!(vegas.estimates().no_load_rtt, Some(5 * MS));
    }
}

//! Gradient2: scales the limit by how much slower than no-load the dependency answers.

use super::no_load::Latencies;
use super::{AdaptiveAlgorithm, Estimates, LimitAlgorithm, Window};

/// The lowest gradient: a window at most halves the limit's target.
const MIN_GRADIENT: f64 = 0.5;

/// The Gradient2 algorithm.
///
/// As in Netflix concurrency-limits' `Gradient2Limit` and Envoy's adaptive concurrency
/// filter: the gradient is `tolerance × no-load / now`, kept within `0.5..=1.0`; the new
/// limit is `limit × gradient + √limit` (the square root is headroom: a few calls may
/// queue, so the limit can grow when the dependency can take more), moved toward by
/// `smoothing` each window. A drop counts as the lowest gradient, 0.5.
///
/// Differences from `Gradient2Limit`, and why: the no-load latency is measured by probes
/// (as Envoy does) instead of a long-term average of every call — an average of calls that
/// queue rises with the queue, so the limit creeps up without end while the dependency is
/// past its knee; between probes it only falls (to a window mean under half of it: the
/// dependency got faster). Windows of about one round trip replace per-sample updates,
/// for the same reason as in [`Vegas`](super::Vegas).
///
/// ```
/// use std::time::Duration;
/// use bulkhead_core::adaptive::{Gradient2, LimitAlgorithm, Window};
///
/// let mut gradient = Gradient2::new(1.0, 1.0);
/// gradient.on_probe(&Window::uniform(10, Duration::from_millis(10), 1));
/// // Twice the no-load latency: gradient 0.5, the limit halves (plus √limit headroom).
/// let next = gradient.update(100.0, &Window::uniform(100, Duration::from_millis(20), 100));
/// assert_eq!(next, 60.0);
/// ```
#[derive(Clone, Debug)]
pub struct Gradient2 {
    tolerance: f64,
    smoothing: f64,
    /// The no-load latency (the last probe's mean, or lower) and the last window's.
    latencies: Latencies,
    gradient: Option<f64>,
}

impl Gradient2 {
    /// Gradient2 tolerating `tolerance` × the no-load latency, moving `smoothing` of the
    /// way to each new estimate (defaults 1.0, 0.5).
    pub fn new(tolerance: f64, smoothing: f64) -> Self {
        Gradient2 {
            tolerance,
            smoothing,
            latencies: Latencies::default(),
            gradient: None,
        }
    }
}

impl LimitAlgorithm for Gradient2 {
    fn algorithm(&self) -> AdaptiveAlgorithm {
        AdaptiveAlgorithm::Gradient2
    }

    fn probes(&self) -> bool {
        true
    }

    fn on_probe(&mut self, window: &Window) {
        self.latencies.on_probe(window);
    }

    fn update(&mut self, limit: f64, window: &Window) -> f64 {
        // The dependency got much faster: re-base.
        let (mean, no_load) = self
            .latencies
            .observe(window, |d, mean| if mean >= d / 2.0 { d } else { mean });
        let gradient = if window.dropped {
            MIN_GRADIENT
        } else if !window.used(limit) {
            return limit;
        } else {
            (self.tolerance * no_load / mean).clamp(MIN_GRADIENT, 1.0)
        };
        self.gradient = Some(gradient);
        let target = limit * gradient + limit.max(1.0).sqrt();
        limit * (1.0 - self.smoothing) + target * self.smoothing
    }

    fn estimates(&self) -> Estimates {
        self.latencies.estimates(self.gradient)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    fn probed(tolerance: f64, smoothing: f64) -> Gradient2 {
        let mut gradient = Gradient2::new(tolerance, smoothing);
        gradient.on_probe(&Window::uniform(10, 10 * MS, 1));
        gradient
    }

    #[test]
    fn at_no_load_latency_the_limit_grows_by_its_square_root() {
        let mut g = probed(1.0, 1.0);
        assert_eq!(g.update(100.0, &Window::uniform(100, 10 * MS, 100)), 110.0);
        assert_eq!(g.estimates().gradient, Some(1.0));
    }

    #[test]
    fn tolerance_lets_latency_rise_before_the_limit_shrinks() {
        let mut g = probed(1.5, 1.0);
        // 1.5 × 10 / 15 = 1: still growing.
        assert_eq!(g.update(100.0, &Window::uniform(100, 15 * MS, 100)), 110.0);
    }

    #[test]
    fn smoothing_moves_part_of_the_way() {
        let mut g = probed(1.0, 0.5);
        // target 100 × 0.5 + 10 = 60; half way from 100: 80.
        assert_eq!(g.update(100.0, &Window::uniform(100, 40 * MS, 100)), 80.0);
    }

    #[test]
    fn a_drop_counts_as_the_lowest_gradient() {
        let mut g = probed(1.0, 1.0);
        let mut window = Window::uniform(100, 10 * MS, 100);
        window.dropped = true;
        assert_eq!(g.update(100.0, &window), 60.0);
    }

    #[test]
    fn a_much_faster_dependency_lowers_the_no_load_latency() {
        let mut g = probed(1.0, 1.0);
        g.update(100.0, &Window::uniform(100, 4 * MS, 100));
        assert_eq!(g.estimates().no_load_rtt, Some(4 * MS));
        // A little faster is noise: the probe's figure stays.
        let mut g = probed(1.0, 1.0);
        g.update(100.0, &Window::uniform(100, 8 * MS, 100));
        assert_eq!(g.estimates().no_load_rtt, Some(10 * MS));
    }
}

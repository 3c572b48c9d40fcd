//! What the probing algorithms (Vegas, Gradient2) know about the dependency's latency:
//! its no-load latency, measured by probes, and the mean of the last window judged.
//!
//! Invariant: both are in nanoseconds and at least 1 (clamped alike, so a probe and a
//! window measured at 0 ns compare as equal, not as an infinite queue);
//! before the first probe the no-load latency is the first window's mean.

use super::{Estimates, Window, duration_of, nanos_f64};

/// The no-load and the last window's latency, kept by a probing algorithm.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Latencies {
    no_load: Option<f64>,
    window: Option<f64>,
}

impl Latencies {
    /// A probe's window: its mean is the no-load latency.
    pub(crate) fn on_probe(&mut self, window: &Window) {
        self.no_load = Some(clamped_nanos(window));
    }

    /// A window being judged: returns its mean and the no-load latency, which
    /// `follow(no_load, mean)` may move (a dependency that got faster).
    pub(crate) fn observe(
        &mut self,
        window: &Window,
        follow: impl FnOnce(f64, f64) -> f64,
    ) -> (f64, f64) {
        let mean = clamped_nanos(window);
        self.window = Some(mean);
        let no_load = self.no_load.map_or(mean, |d| follow(d, mean));
        self.no_load = Some(no_load);
        (mean, no_load)
    }

    /// The estimates for the snapshot, with the algorithm's `gradient`.
    pub(crate) fn estimates(&self, gradient: Option<f64>) -> Estimates {
        Estimates {
            no_load_rtt: self.no_load.map(duration_of),
            window_rtt: self.window.map(duration_of),
            gradient,
        }
    }
}

/// A window's mean latency in nanoseconds, at least 1.
fn clamped_nanos(window: &Window) -> f64 {
    nanos_f64(window.mean_rtt).max(1.0)
}

//! [`AdaptiveLimit`]: samples into windows, windows into an algorithm, probes of the
//! no-load latency, the sampling, and the bounds. Pure: no clock, no threads; the
//! bulkhead calls it under a lock and applies the limit it returns.
//!
//! A window holds the timed calls of about one round trip: with one call in
//! `sample_every` timed, `limit / sample_every` samples, and at least [`MIN_WINDOW`].
//! After each window the sampling follows the window's latency
//! ([`sample_every_for`](super::sample_every_for)).
//!
//! A probe runs at start, every `probe_interval` windows, and early when the limit has
//! fallen to half of where a fall began while the latency did not fall with it (to 3/4
//! or less of the latency then): a dependency past its knee answers faster as fewer calls
//! reach it; one that only got slower does not, and the probe measures its new no-load
//! latency instead of keeping its limit down until the next scheduled probe. Likewise when
//! a window's latency is under 3/4 of the no-load latency: the dependency got faster, and
//! the calls queued at it would hide by how much.

use std::time::Duration;

use bulkhead_config_types::{AdaptiveAlgorithm, AdaptiveConfig};

use super::{
    AdaptiveSnapshot, Aimd, Gradient2, LimitAlgorithm, Sample, Vegas, Window, duration_of,
    nanos_f64, sample_every_for,
};

/// The fewest samples (timed calls) in a window (and in a probe), however low the limit.
pub const MIN_WINDOW: u32 = 10;

/// A fall of the limit to this fraction of where it began, with the latency above
/// [`FALL_LATENCY`] of what it was then, means a slower dependency: probe early.
const FALL_LIMIT: f64 = 0.5;
/// See [`FALL_LIMIT`].
const FALL_LATENCY: f64 = 0.75;

/// A limit driven by an algorithm: feed it every finished call with
/// [`on_sample`](Self::on_sample), apply the limit it returns.
///
/// ```
/// use std::time::Duration;
/// use bulkhead_core::adaptive::{AdaptiveAlgorithm, AdaptiveConfig, AdaptiveLimit, Sample};
///
/// let config = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, 4, 8);
/// let mut limit = AdaptiveLimit::new(&config, 100);
/// assert_eq!(limit.limit(), 4);
/// // Ten calls with the limit used: one window, +1.
/// for _ in 0..10 {
///     limit.on_sample(Sample::new(Duration::from_millis(5), 4));
/// }
/// assert_eq!(limit.limit(), 5);
/// ```
#[derive(Debug)]
pub struct AdaptiveLimit {
    config: AdaptiveConfig,
    algorithm: Box<dyn LimitAlgorithm>,
    min: u32,
    max: u32,
    /// The algorithm's limit, unrounded (a probe returns to it).
    estimate: f64,
    /// `Some(limit)` while probing the no-load latency under that limit.
    probe: Option<u32>,
    windows_since_probe: u32,
    window: Accumulator,
    windows: u64,
    changes: u64,
    current: u32,
    /// One call in this many is timed (a power of two).
    sample_every: u32,
    /// While the limit falls window after window: the limit and the window's mean latency
    /// (in nanoseconds) before the fall began.
    fall: Option<(f64, f64)>,
}

/// The window being gathered.
#[derive(Clone, Copy, Debug, Default)]
struct Accumulator {
    samples: u32,
    total_nanos: f64,
    min_rtt: Option<Duration>,
    max_inflight: u32,
    dropped: bool,
}

impl Accumulator {
    fn add(&mut self, sample: &Sample) {
        self.samples += 1;
        self.total_nanos += nanos_f64(sample.rtt);
        self.min_rtt = Some(self.min_rtt.map_or(sample.rtt, |m| m.min(sample.rtt)));
        self.max_inflight = self.max_inflight.max(sample.inflight);
        self.dropped |= sample.dropped;
    }

    /// The window gathered so far; starts the next one.
    fn take(&mut self) -> Window {
        let taken = std::mem::take(self);
        Window {
            samples: taken.samples,
            mean_rtt: duration_of(taken.total_nanos / f64::from(taken.samples.max(1))),
            min_rtt: taken.min_rtt.unwrap_or_default(),
            max_inflight: taken.max_inflight,
            dropped: taken.dropped,
        }
    }
}

/// The algorithm `config` names, with its parameters.
fn algorithm_of(config: &AdaptiveConfig) -> Box<dyn LimitAlgorithm> {
    match config.algorithm {
        AdaptiveAlgorithm::Vegas => Box::new(Vegas::new(config.alpha(), config.beta())),
        AdaptiveAlgorithm::Aimd => Box::new(Aimd::new(
            config.backoff_ratio(),
            config.timeout.map(|t| t.as_std()),
        )),
        // `off` never reaches a bulkhead (configuring a bulkhead with it removes the
        // adaptive limit); a limit built by hand with it behaves as the default algorithm.
        _ => Box::new(Gradient2::new(config.tolerance(), config.smoothing())),
    }
}

impl AdaptiveLimit {
    /// The limit `config` describes, for a bulkhead whose declared size is `declared`
    /// (the hard upper bound). Vegas and Gradient2 start with a probe.
    pub fn new(config: &AdaptiveConfig, declared: u32) -> Self {
        let min = config.min_limit(declared);
        let max = config.max_limit(declared);
        let initial = config.initial_limit(declared);
        let algorithm = algorithm_of(config);
        let mut limit = AdaptiveLimit {
            config: *config,
            probe: None,
            algorithm,
            min,
            max,
            estimate: f64::from(initial),
            windows_since_probe: 0,
            window: Accumulator::default(),
            windows: 0,
            changes: 0,
            current: initial,
            sample_every: 1,
            fall: None,
        };
        if limit.algorithm.probes() {
            limit.probe = Some(limit.probe_limit());
        }
        limit.current = limit.effective();
        limit
    }

    /// The limit to apply now.
    pub fn limit(&self) -> u32 {
        self.current
    }

    /// The settings it was last configured with.
    pub fn config(&self) -> AdaptiveConfig {
        self.config
    }

    /// The algorithm.
    pub fn algorithm(&self) -> AdaptiveAlgorithm {
        self.algorithm.algorithm()
    }

    /// Whether a probe of the no-load latency is under way.
    pub fn is_probing(&self) -> bool {
        self.probe.is_some()
    }

    /// One call in this many is timed: a power of two, from the last window's latency
    /// (every call until the first window; see [`sample_every_for`](super::sample_every_for)).
    pub fn sample_every(&self) -> u32 {
        self.sample_every
    }

    /// One finished call that was timed; returns the limit to apply from now on.
    pub fn on_sample(&mut self, sample: Sample) -> u32 {
        if sample.dropped {
            self.time_every_call();
        }
        match self.probe {
            Some(probe_limit) => {
                // Calls admitted before the probe lowered the limit are still draining:
                // only calls admitted under it show the no-load latency.
                if sample.inflight <= probe_limit {
                    self.window.add(&sample);
                }
                if self.window_is_full(probe_limit) {
                    let window = self.take_window();
                    self.algorithm.on_probe(&window);
                    self.probe = None;
                    self.windows_since_probe = 0;
                }
            }
            None => {
                self.window.add(&sample);
                if self.window_is_full(self.current) {
                    let window = self.take_window();
                    // Much faster than the no-load latency: the dependency got faster, and
                    // calls now queued hide by how much; measure it.
                    let faster =
                        self.algorithm.estimates().no_load_rtt.is_some_and(|d| {
                            nanos_f64(window.mean_rtt) < nanos_f64(d) * FALL_LATENCY
                        });
                    let next = self.algorithm.update(self.estimate, &window);
                    let next = self.clamp(next);
                    let slower = self.follow_fall(next, &window);
                    self.estimate = next;
                    self.windows += 1;
                    self.windows_since_probe += 1;
                    if self.algorithm.probes()
                        && (slower
                            || faster
                            || self.windows_since_probe >= self.config.probe_interval())
                    {
                        self.probe = Some(self.probe_limit());
                        self.fall = None;
                    }
                }
            }
        }
        self.settle()
    }

    /// A drop of a call that was not timed: the window being gathered has a drop.
    pub fn on_untimed_drop(&mut self) {
        self.window.dropped = true;
        self.time_every_call();
    }

    /// After a drop, every call is timed until the window is judged, so a window with a
    /// drop closes after about one round trip of calls (`max(limit, MIN_WINDOW)`), however
    /// fast the calls are: an overloaded dependency that answers at once (a 503) is
    /// backed off from as quickly as a slow one. The next window's latency sets the
    /// sampling again.
    fn time_every_call(&mut self) {
        self.sample_every = 1;
    }

    /// Whether the window holds about one round trip of calls under `limit`.
    fn window_is_full(&self, limit: u32) -> bool {
        self.window.samples >= limit.div_ceil(self.sample_every).max(MIN_WINDOW)
    }

    /// The window gathered (the next one starts), with the sampling following its latency.
    fn take_window(&mut self) -> Window {
        let window = self.window.take();
        self.sample_every = sample_every_for(window.mean_rtt);
        window
    }

    /// Follows a fall of the limit to `next` after `window`: true when it has halved since
    /// it began while the latency stayed above 3/4 of what it was (a slower dependency).
    fn follow_fall(&mut self, next: f64, window: &Window) -> bool {
        let mean = nanos_f64(window.mean_rtt);
        if next >= self.estimate {
            self.fall = None;
            return false;
        }
        let (from, latency) = *self.fall.get_or_insert((self.estimate, mean));
        next <= from * FALL_LIMIT && mean >= latency * FALL_LATENCY
    }

    /// New settings (a reload) for a bulkhead now declared `declared`: the same algorithm
    /// with the same parameters keeps what it learned, within the new bounds; otherwise it
    /// starts over from the current limit. Returns the limit to apply.
    pub fn reconfigure(&mut self, config: &AdaptiveConfig, declared: u32) -> u32 {
        let same = config.algorithm == self.config.algorithm
            && AdaptiveConfig {
                min_limit: self.config.min_limit,
                max_limit: self.config.max_limit,
                initial_limit: self.config.initial_limit,
                ..*config
            } == self.config;
        self.min = config.min_limit(declared);
        self.max = config.max_limit(declared);
        self.estimate = self.clamp(self.estimate);
        if !same {
            self.algorithm = algorithm_of(config);
            self.window = Accumulator::default();
            self.fall = None;
            self.probe = None;
            if self.algorithm.probes() {
                self.probe = Some(self.probe_limit());
            }
        }
        self.config = *config;
        self.settle()
    }

    /// What it has learned, for the snapshot.
    pub fn snapshot(&self) -> AdaptiveSnapshot {
        AdaptiveSnapshot {
            algorithm: self.algorithm(),
            min_limit: self.min,
            max_limit: self.max,
            probing: self.is_probing(),
            windows: self.windows,
            limit_changes: self.changes,
            sample_every: self.sample_every,
            estimates: self.algorithm.estimates(),
        }
    }

    fn clamp(&self, limit: f64) -> f64 {
        if limit.is_finite() {
            limit.clamp(f64::from(self.min), f64::from(self.max))
        } else {
            f64::from(self.min)
        }
    }

    /// A tenth of the limit (at least `min_limit`): low enough to be below the
    /// dependency's knee when the limit starts up to ten times above it.
    fn probe_limit(&self) -> u32 {
        let tenth = (self.estimate / 10.0).ceil() as u32;
        tenth.clamp(self.min, self.max)
    }

    /// Takes the limit to apply now as the current one (counting a change); returns it.
    fn settle(&mut self) -> u32 {
        let next = self.effective();
        if next != self.current {
            self.changes += 1;
            self.current = next;
        }
        next
    }

    fn effective(&self) -> u32 {
        match self.probe {
            Some(probe_limit) => probe_limit,
            None => (self.estimate.round() as u32).clamp(self.min, self.max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adaptive::MAX_SAMPLE_EVERY;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn vegas_starts_with_a_probe_at_a_tenth_then_resumes() {
        let config = AdaptiveConfig::new(AdaptiveAlgorithm::Vegas).with_bounds(1, 50, 100);
        let mut limit = AdaptiveLimit::new(&config, 100);
        assert_eq!((limit.limit(), limit.is_probing()), (5, true));
        // Calls admitted before the probe (50 in flight) do not count.
        for _ in 0..20 {
            limit.on_sample(Sample::new(30 * MS, 50));
        }
        assert!(limit.is_probing());
        for _ in 0..MIN_WINDOW {
            limit.on_sample(Sample::new(10 * MS, 5));
        }
        assert_eq!((limit.limit(), limit.is_probing()), (50, false));
        assert_eq!(limit.snapshot().estimates.no_load_rtt, Some(10 * MS));
    }

    #[test]
    fn probes_again_every_probe_interval_windows() {
        let mut config = AdaptiveConfig::new(AdaptiveAlgorithm::Gradient2).with_bounds(1, 10, 10);
        config.probe_interval = Some(3);
        let mut limit = AdaptiveLimit::new(&config, 10);
        for _ in 0..MIN_WINDOW {
            limit.on_sample(Sample::new(10 * MS, 1));
        }
        for _ in 0..3 * MIN_WINDOW - 1 {
            limit.on_sample(Sample::new(10 * MS, 10));
        }
        assert!(!limit.is_probing());
        limit.on_sample(Sample::new(10 * MS, 10));
        assert!(limit.is_probing());
        assert_eq!(limit.snapshot().windows, 3);
    }

    #[test]
    fn the_limit_stays_within_the_bounds() {
        let config = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(3, 4, 5);
        let mut limit = AdaptiveLimit::new(&config, 100);
        for _ in 0..100 {
            limit.on_sample(Sample::new(MS, 5));
        }
        assert_eq!(limit.limit(), 5);
        for _ in 0..100 {
            limit.on_sample(Sample::new(MS, 5).dropped());
        }
        assert_eq!(limit.limit(), 3);
    }

    #[test]
    fn absurd_samples_and_parameters_never_panic_and_stay_in_bounds() {
        let mut config = AdaptiveConfig::new(AdaptiveAlgorithm::Vegas).with_bounds(2, 5, 9);
        config.alpha = Some(f64::NAN);
        config.beta = Some(f64::INFINITY);
        for algorithm in [
            AdaptiveAlgorithm::Vegas,
            AdaptiveAlgorithm::Gradient2,
            AdaptiveAlgorithm::Aimd,
        ] {
            config.algorithm = algorithm;
            config.tolerance = Some(f64::NAN);
            config.smoothing = Some(f64::INFINITY);
            config.backoff_ratio = Some(f64::NAN);
            let mut limit = AdaptiveLimit::new(&config, 100);
            for rtt in [
                Duration::ZERO,
                Duration::MAX,
                MS,
                Duration::MAX,
                Duration::ZERO,
            ] {
                for inflight in [0, 1, u32::MAX] {
                    for _ in 0..MIN_WINDOW {
                        let l = limit.on_sample(Sample::new(rtt, inflight));
                        assert!((2..=9).contains(&l), "{algorithm}: {l}");
                    }
                }
            }
            let _ = limit.snapshot();
        }
    }

    #[test]
    fn fast_calls_are_sampled_and_a_window_still_spans_the_limit() {
        let config = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, 100, 1_000);
        let mut limit = AdaptiveLimit::new(&config, 1_000);
        let fast = Sample::new(Duration::from_nanos(100), 100);
        // 100 ns: one call in 128.
        // Until the first window every call is timed: a window of 100 samples.
        for _ in 0..100 {
            limit.on_sample(fast);
        }
        assert_eq!((limit.snapshot().windows, limit.sample_every()), (1, 128));
        // Now one call in 128: 101 calls are 1 sample, under MIN_WINDOW.
        for _ in 0..MIN_WINDOW - 1 {
            limit.on_sample(fast);
        }
        assert_eq!(limit.snapshot().windows, 1);
        limit.on_sample(fast);
        assert_eq!(limit.snapshot().windows, 2);
        // Slow calls again: every call timed from the next window on.
        for _ in 0..MIN_WINDOW {
            limit.on_sample(Sample::new(MS, 102));
        }
        assert_eq!(limit.sample_every(), 1);
    }

    #[test]
    fn after_a_drop_every_call_is_timed_until_the_window_is_judged() {
        let mut config = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, 20, 20);
        config.backoff_ratio = Some(0.5);
        let mut limit = AdaptiveLimit::new(&config, 20);
        // Calls too fast to measure: the sparsest sampling.
        for _ in 0..MIN_WINDOW.max(20) {
            limit.on_sample(Sample::new(Duration::ZERO, 20));
        }
        assert_eq!(limit.sample_every(), MAX_SAMPLE_EVERY);
        let before = limit.limit();
        limit.on_untimed_drop();
        assert_eq!(limit.sample_every(), 1, "an untimed drop");
        // One round trip of calls, all timed now, closes the window with its drop.
        for _ in 0..before.max(MIN_WINDOW) {
            limit.on_sample(Sample::new(Duration::ZERO, before));
        }
        assert_eq!(limit.limit(), before / 2);
        assert_eq!(
            limit.sample_every(),
            MAX_SAMPLE_EVERY,
            "the sampling follows again"
        );
        // A timed drop does the same.
        limit.on_sample(Sample::new(Duration::ZERO, before / 2).dropped());
        assert_eq!(limit.sample_every(), 1, "a timed drop");
    }

    #[test]
    fn a_drop_of_an_untimed_call_counts_in_the_window() {
        let mut config = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, 8, 8);
        config.backoff_ratio = Some(0.5);
        let mut limit = AdaptiveLimit::new(&config, 8);
        limit.on_untimed_drop();
        for _ in 0..MIN_WINDOW {
            limit.on_sample(Sample::new(MS, 8));
        }
        assert_eq!(limit.limit(), 4);
    }

    /// Gradient2 from 100 after its first probe (10 ms), fed windows whose latency
    /// `latency(limit)` gives: the windows until the next probe began, if within 50.
    fn windows_until_a_probe(latency: impl Fn(u32) -> Duration) -> Option<u32> {
        let config = AdaptiveConfig::new(AdaptiveAlgorithm::Gradient2).with_bounds(1, 100, 1_000);
        let mut limit = AdaptiveLimit::new(&config, 1_000);
        for _ in 0..MIN_WINDOW {
            limit.on_sample(Sample::new(10 * MS, 10));
        }
        assert!(!limit.is_probing());
        (1..=50).find(|_| {
            let current = limit.limit();
            for _ in 0..current.max(MIN_WINDOW) {
                limit.on_sample(Sample::new(latency(current), current));
            }
            limit.is_probing()
        })
    }

    #[test]
    fn a_dependency_that_got_slower_is_probed_early() {
        // Ten times slower whatever the load: the limit halves, the latency stays.
        let probed = windows_until_a_probe(|_| 100 * MS);
        assert!(probed.is_some_and(|w| w <= 10), "{probed:?}");
    }

    #[test]
    fn an_overloaded_dependency_is_not_probed_early() {
        // Past a knee of 20 calls the latency follows the calls in flight down.
        let probed = windows_until_a_probe(|limit| 10 * MS * limit.max(20) / 20);
        assert_eq!(probed, None);
    }

    #[test]
    fn a_reload_with_the_same_algorithm_keeps_what_it_learned() {
        let config = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, 10, 50);
        let mut limit = AdaptiveLimit::new(&config, 100);
        for _ in 0..10 {
            limit.on_sample(Sample::new(MS, 10));
        }
        assert_eq!(limit.limit(), 11);
        assert_eq!(limit.reconfigure(&config.with_bounds(1, 10, 8), 100), 8);
        assert_eq!(limit.snapshot().windows, 1);
        let vegas = AdaptiveConfig::new(AdaptiveAlgorithm::Vegas).with_bounds(1, 10, 50);
        limit.reconfigure(&vegas, 100);
        assert_eq!(
            (limit.algorithm(), limit.is_probing()),
            (AdaptiveAlgorithm::Vegas, true)
        );
    }
}

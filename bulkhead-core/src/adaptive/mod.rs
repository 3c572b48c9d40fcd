//! Adaptive limits: a bulkhead whose limit follows the dependency, between declared bounds.
//!
//! Configured by `adaptive: { algorithm: vegas | gradient2 | aimd, … }`
//! ([`AdaptiveConfig`]). A timed call is a [`Sample`]: its latency by the bulkhead's
//! clock, the calls in flight when it was admitted (itself included), and whether it was a
//! *drop* — it panicked, was cancelled (a dropped future, a timeout around it), or the
//! code [marked it overloaded](mark_overloaded) (the dependency answered 503, say). Calls
//! of 10 µs or more are all timed; faster ones one in up to 256 ([`sample_every_for`]),
//! so timing stays about 1 % of the calls' own time; drops count whether timed or not.
//! [`AdaptiveLimit`] gathers samples into windows of about one round trip (as many calls
//! as the limit, at least [`MIN_WINDOW`] samples) and hands each window to the
//! algorithm, a small pure type behind [`LimitAlgorithm`]: the limit and a window in, a
//! new limit out — no threads, no clock, no randomness, so the same samples always give
//! the same limits.
//!
//! | algorithm | signal | picks the limit by |
//! |---|---|---|
//! | [`Vegas`] | latency | the calls queued at the dependency, `limit × (1 − no-load / now)`, kept between `alpha` and `beta` × log10 limit |
//! | [`Gradient2`] | latency | `limit × min(1, tolerance × no-load / now) + √limit`, smoothed |
//! | [`Aimd`] | drops (and `timeout`) | +1 per window while used, × `backoff_ratio` after a drop |
//!
//! Vegas and Gradient2 need the dependency's latency without load. They measure it by a
//! **probe**: at start, and every `probe_interval` windows, the limit drops to a tenth
//! (at least `min_limit`) until a window of calls admitted under it has finished; that
//! window's latency is the no-load latency. A limit that starts far above the
//! dependency's knee is found the same way. A probe also comes early when the limit has
//! halved while the latency did not fall with it: the dependency got slower rather than
//! overloaded (see [`AdaptiveLimit`]).
//!
//! # Invariants
//!
//! * The limit is within `min_limit..=max_limit`, and `max_limit` within the declared
//!   size: threads and queues never exceed what is declared.
//! * A limit change goes through the bulkhead's resize path: admitted calls are never
//!   cancelled; a lower limit takes effect as calls finish.
//! * During a probe only calls admitted under the probe's limit are measured (calls
//!   still draining from before it are not).
//!
//! [`AdaptiveConfig`]: bulkhead_config_types::AdaptiveConfig

mod aimd;
pub(crate) mod calls;
mod gradient2;
mod limit;
mod no_load;
mod sampling;
mod vegas;

use std::fmt;
use std::time::Duration;

pub use crate::frame::mark_overloaded;
pub use aimd::Aimd;
pub use gradient2::Gradient2;
pub use limit::{AdaptiveLimit, MIN_WINDOW};
pub use sampling::{MAX_SAMPLE_EVERY, SAMPLING_SPAN, sample_every_for};
pub use vegas::Vegas;

pub use bulkhead_config_types::{AdaptiveAlgorithm, AdaptiveConfig};

/// One finished call that was timed, as an adaptive limit sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// How long it held its permit (ran on its worker), by the bulkhead's clock.
    pub rtt: Duration,
    /// Calls in flight when it was admitted, itself included.
    pub inflight: u32,
    /// It panicked, was cancelled, or was marked overloaded.
    pub dropped: bool,
}

impl Sample {
    /// A call that took `rtt` and was admitted as the `inflight`-th call in flight.
    pub const fn new(rtt: Duration, inflight: u32) -> Self {
        Sample {
            rtt,
            inflight,
            dropped: false,
        }
    }

    /// The same call, counted as a drop.
    #[must_use]
    pub const fn dropped(mut self) -> Self {
        self.dropped = true;
        self
    }
}

/// Samples gathered over about one round trip, as the algorithms judge them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// How many samples (timed calls).
    pub samples: u32,
    /// Their mean latency.
    pub mean_rtt: Duration,
    /// The lowest latency among them.
    pub min_rtt: Duration,
    /// The most calls in flight any of them was admitted with.
    pub max_inflight: u32,
    /// Whether any of them, or any call not timed meanwhile, was a drop.
    pub dropped: bool,
}

impl Window {
    /// A window of `samples` calls of latency `rtt` each, admitted with `inflight` in
    /// flight, none dropped (for tests and simulations).
    pub const fn uniform(samples: u32, rtt: Duration, inflight: u32) -> Self {
        Window {
            samples,
            mean_rtt: rtt,
            min_rtt: rtt,
            max_inflight: inflight,
            dropped: false,
        }
    }

    /// Whether the limit was used: a limit that was never half full is not judged (the
    /// load, not the dependency, kept it low), as in Netflix concurrency-limits.
    pub fn used(&self, limit: f64) -> bool {
        f64::from(self.max_inflight) * 2.0 >= limit
    }
}

/// What an algorithm estimates about the dependency, for the snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Estimates {
    /// The dependency's latency without load (Vegas: the lowest window mean; Gradient2:
    /// the probe's mean); `None` before the first probe, or for AIMD.
    pub no_load_rtt: Option<Duration>,
    /// The mean latency of the last window.
    pub window_rtt: Option<Duration>,
    /// Gradient2: the last gradient (no-load / now × tolerance, in `0.5..=1.0`); Vegas:
    /// the calls it estimated queued at the dependency. `None` for AIMD.
    pub gradient: Option<f64>,
}

/// A limit algorithm: a small pure type that turns a window of samples into a new limit.
///
/// Implementations keep their own estimates (a no-load latency, say) but no clock and no
/// threads: [`AdaptiveLimit`] calls them under its lock, in sample order.
pub trait LimitAlgorithm: Send + fmt::Debug {
    /// Which algorithm this is.
    fn algorithm(&self) -> AdaptiveAlgorithm;

    /// Whether it needs the no-load latency measured by probes.
    fn probes(&self) -> bool;

    /// A probe's window: calls admitted under a tenth of the limit.
    fn on_probe(&mut self, _window: &Window) {}

    /// The new limit (unclamped; the caller clamps it to the bounds) after `window`.
    fn update(&mut self, limit: f64, window: &Window) -> f64;

    /// Its estimates, for the snapshot.
    fn estimates(&self) -> Estimates;
}

/// The adaptive part of a [`BulkheadSnapshot`](crate::BulkheadSnapshot).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct AdaptiveSnapshot {
    /// The algorithm.
    pub algorithm: AdaptiveAlgorithm,
    /// The bounds of the limit.
    pub min_limit: u32,
    /// The upper bound (within the declared size).
    pub max_limit: u32,
    /// Whether a probe of the no-load latency is under way (the limit is a tenth).
    pub probing: bool,
    /// Windows judged so far.
    pub windows: u64,
    /// Times the limit changed.
    pub limit_changes: u64,
    /// One call in this many is timed (a power of two; 1 for calls of 10 µs or more).
    pub sample_every: u32,
    /// The algorithm's estimates.
    pub estimates: Estimates,
}

/// `d` in nanoseconds, as a float.
pub(crate) fn nanos_f64(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

/// `nanos` as a duration (negative and NaN as zero, too large as the largest duration).
pub(crate) fn duration_of(nanos: f64) -> Duration {
    if nanos > 0.0 {
        Duration::try_from_secs_f64(nanos / 1e9).unwrap_or(Duration::MAX)
    } else {
        Duration::ZERO
    }
}

//! Fixed-bucket duration histograms: lock-free to record, cheap to read.
//!
//! Every histogram of every bulkhead has the same bucket bounds, [`BUCKETS`] (100 µs to
//! 10 s, roughly 1-2.5-5 per decade), so dashboards can aggregate across bulkheads and
//! processes. Recording is one relaxed `fetch_add` on the bucket and one on the sum; it
//! never allocates or locks.
//!
//! # Invariants
//!
//! * A recorded duration lands in exactly one bucket: the first whose bound is at least the
//!   duration, or the overflow (`+Inf`) bucket.
//! * Counts only grow. A reader sees each bucket's count as of its own load (relaxed), so
//!   a snapshot taken while recording is consistent per bucket, not across buckets.
//!
//! The semaphore's fast path records nothing: a call admitted without waiting is counted in
//! the lowest bucket implicitly ([`Histogram::snapshot_with_implicit_zeros`]).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::clock::duration_nanos;

/// The upper bounds of the histogram buckets (inclusive, as Prometheus' `le`), shared by
/// every wait-time and queue-time histogram. A last, unbounded bucket follows them.
pub const BUCKETS: [Duration; 16] = [
    Duration::from_micros(100),
    Duration::from_micros(250),
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_micros(2_500),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_millis(2_500),
    Duration::from_secs(5),
    Duration::from_secs(10),
];

/// The bucket bounds in nanoseconds, for recording.
const BOUNDS_NANOS: [u64; BUCKETS.len()] = {
    let mut nanos = [0u64; BUCKETS.len()];
    let mut i = 0;
    while i < BUCKETS.len() {
        nanos[i] = BUCKETS[i].as_nanos() as u64;
        i += 1;
    }
    nanos
};

/// Number of buckets including the overflow bucket.
const SLOTS: usize = BUCKETS.len() + 1;

/// A histogram being recorded into.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    /// Non-cumulative counts; the last slot is the overflow (`+Inf`) bucket.
    counts: [AtomicU64; SLOTS],
    /// Sum of recorded durations, in nanoseconds (wraps after 584 years of waiting).
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// Records one duration. Lock-free; never allocates.
    #[inline]
    pub(crate) fn record(&self, duration: Duration) {
        let nanos = duration_nanos(duration);
        // The lowest bucket first: where a pool that keeps up puts nearly every task.
        let slot = if nanos <= BOUNDS_NANOS[0] {
            0
        } else {
            BOUNDS_NANOS.partition_point(|&bound| bound < nanos)
        };
        self.counts[slot].fetch_add(1, Relaxed);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }

    /// The recorded counts.
    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        self.snapshot_with_implicit_zeros(0)
    }

    /// The recorded counts plus `total - recorded` observations of zero in the lowest
    /// bucket: for histograms whose fast path (no wait) records nothing, `total` being the
    /// number of all observations (e.g. admitted calls).
    pub(crate) fn snapshot_with_implicit_zeros(&self, total: u64) -> HistogramSnapshot {
        let mut counts = [0u64; SLOTS];
        for (count, slot) in counts.iter_mut().zip(&self.counts) {
            *count = slot.load(Relaxed);
        }
        let recorded: u64 = counts.iter().sum();
        counts[0] += total.saturating_sub(recorded);
        HistogramSnapshot {
            counts,
            sum: Duration::from_nanos(self.sum_nanos.load(Relaxed)),
        }
    }
}

/// A histogram of durations at one instant: counts per bucket of [`BUCKETS`], their sum,
/// and quantile estimates.
///
/// ```
/// use bulkhead::HistogramSnapshot;
/// let h = HistogramSnapshot::default();
/// assert_eq!(h.count(), 0);
/// assert_eq!(h.p99(), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: [u64; SLOTS],
    sum: Duration,
}

impl HistogramSnapshot {
    /// The bucket bounds: the same for every histogram ([`BUCKETS`]).
    pub fn bounds(&self) -> &'static [Duration] {
        &BUCKETS
    }

    /// Observations per bucket (not cumulative): one per bound of [`bounds`](Self::bounds),
    /// then the overflow bucket (above the last bound).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Cumulative counts paired with their upper bound (`None` for `+Inf`), as Prometheus'
    /// `_bucket{le}` series.
    pub fn cumulative(&self) -> impl Iterator<Item = (Option<Duration>, u64)> + '_ {
        let bounds = BUCKETS.iter().copied().map(Some).chain([None]);
        bounds.zip(self.counts.iter().scan(0u64, |acc, &c| {
            *acc += c;
            Some(*acc)
        }))
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Sum of the observed durations.
    pub fn sum(&self) -> Duration {
        self.sum
    }

    /// An upper estimate of the `q` quantile (`0.0..=1.0`): the bound of the bucket that
    /// holds the observation of rank `ceil(q * count)`. `None` without observations;
    /// `Duration::MAX` when that observation is above the last bound (10 s).
    ///
    /// ```
    /// use bulkhead::HistogramSnapshot;
    /// // Read from a snapshot: `registry.snapshot()[0].wait_time.p99()`.
    /// assert_eq!(HistogramSnapshot::default().quantile(0.5), None);
    /// ```
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
        self.cumulative()
            .find(|&(_, cumulative)| cumulative >= rank)
            .map(|(bound, _)| bound.unwrap_or(Duration::MAX))
    }

    /// The median estimate; see [`quantile`](Self::quantile).
    pub fn p50(&self) -> Option<Duration> {
        self.quantile(0.5)
    }

    /// The 99th percentile estimate; see [`quantile`](Self::quantile).
    pub fn p99(&self) -> Option<Duration> {
        self.quantile(0.99)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_lands_in_the_first_bucket_whose_bound_holds_it() {
        let h = Histogram::default();
        h.record(Duration::ZERO);
        h.record(Duration::from_micros(100)); // on the bound: same bucket
        h.record(Duration::from_micros(101));
        h.record(Duration::from_secs(60)); // overflow
        let s = h.snapshot();
        assert_eq!(s.counts()[0], 2);
        assert_eq!(s.counts()[1], 1);
        assert_eq!(s.counts()[BUCKETS.len()], 1);
        assert_eq!(s.count(), 4);
        assert_eq!(s.sum(), Duration::from_micros(60_000_201));
    }

    #[test]
    fn quantiles_read_the_bound_of_the_bucket_holding_the_rank() {
        let h = Histogram::default();
        for _ in 0..98 {
            h.record(Duration::from_millis(3)); // bucket le=5ms
        }
        h.record(Duration::from_millis(400)); // le=500ms
        h.record(Duration::from_secs(30)); // +Inf
        let s = h.snapshot();
        assert_eq!(s.p50(), Some(Duration::from_millis(5)));
        assert_eq!(s.quantile(0.99), Some(Duration::from_millis(500)));
        assert_eq!(s.quantile(1.0), Some(Duration::MAX));
        assert_eq!(s.quantile(0.0), Some(Duration::from_millis(5)));
    }

    #[test]
    fn implicit_zeros_fill_the_lowest_bucket() {
        let h = Histogram::default();
        h.record(Duration::from_millis(20));
        let s = h.snapshot_with_implicit_zeros(10);
        assert_eq!(s.count(), 10);
        assert_eq!(s.counts()[0], 9);
        assert_eq!(s.p50(), Some(Duration::from_micros(100)));
        // Fewer total than recorded (a racing snapshot) adds nothing.
        assert_eq!(h.snapshot_with_implicit_zeros(0).count(), 1);
    }

    #[test]
    fn cumulative_ends_with_the_total_at_plus_inf() {
        let h = Histogram::default();
        h.record(Duration::from_millis(1));
        h.record(Duration::from_secs(11));
        let last = h.snapshot().cumulative().last();
        assert_eq!(last, Some((None, 2)));
    }
}

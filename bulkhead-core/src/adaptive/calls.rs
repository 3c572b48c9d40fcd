//! How a bulkhead feeds its adaptive limit: the [`Controller`] each bulkhead owns, and
//! [`CallStart`], what an admitted call carries to its release.
//!
//! Cost: a bulkhead without an adaptive limit pays one relaxed load per admission
//! ([`Controller::sample_every`], [`Controller::begin`]) and none per release. An
//! adaptive call's frame on its thread is flagged adaptive ([`crate::frame`]), and it draws
//! whether to time it ([`sampling`](super::sampling)); a timed call reads the clock at
//! admission and at release and takes the controller's lock (a window's bookkeeping; a
//! limit change also takes the waiter-queue lock, through the resize path). A drop of a
//! call that was not timed is one relaxed store. Lock order: controller, then waiters.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use bulkhead_config_types::{AdaptiveAlgorithm, AdaptiveConfig};

// loom's primitives under `--cfg loom`: the models race limit changes with admissions.
use crate::sync::{AtomicBool, AtomicU32, Mutex};

use super::{AdaptiveLimit, AdaptiveSnapshot, Sample, sampling};

// Whether to time a call, drawn on its thread: the sync admission draws it here.
pub(crate) use super::sampling::draw;

/// What an adaptive call carries from admission to release: when, and as which call in
/// flight, it was admitted — if it is one of the calls timed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallStart {
    timed: Option<(Instant, u32)>,
}

impl CallStart {
    /// A timed call admitted at `started` as the `inflight`-th call in flight.
    pub(crate) fn timed(started: Instant, inflight: u32) -> Self {
        CallStart {
            timed: Some((started, inflight)),
        }
    }

    /// A call that is not timed (only a drop of it counts).
    pub(crate) const fn untimed() -> Self {
        CallStart { timed: None }
    }

    /// Whether the call is timed.
    #[cfg(test)]
    pub(crate) fn is_timed(&self) -> bool {
        self.timed.is_some()
    }
}

/// The adaptive limit of one bulkhead, if it has one.
#[derive(Debug)]
pub(crate) struct Controller {
    /// 0 without an adaptive limit; with one, one call in this many is timed (the limit's
    /// [`sample_every`](AdaptiveLimit::sample_every), a power of two).
    timing: AtomicU32,
    /// A call that was not timed was a drop since the last timed call was recorded.
    untimed_drop: AtomicBool,
    state: Mutex<Option<AdaptiveLimit>>,
}

impl Controller {
    pub(crate) fn new() -> Self {
        Controller {
            timing: AtomicU32::new(0),
            untimed_drop: AtomicBool::new(false),
            state: Mutex::new(None),
        }
    }

    /// `None` without an adaptive limit (one relaxed load); otherwise one call in this
    /// many is to be timed.
    #[inline]
    pub(crate) fn sample_every(&self) -> Option<u32> {
        match self.timing.load(Relaxed) {
            0 => None,
            every => Some(every),
        }
    }

    /// An admitted call: `None` without an adaptive limit (one relaxed load); otherwise
    /// its start, timed (by `timed`: the clock and the calls in flight) one time in
    /// `sample_every`.
    #[inline]
    pub(crate) fn begin(&self, timed: impl FnOnce() -> CallStart) -> Option<CallStart> {
        match self.timing.load(Relaxed) {
            0 => None,
            every if sampling::draw(every) => Some(timed()),
            _ => Some(CallStart::untimed()),
        }
    }

    /// The end of a call begun with `start`, a drop or not: a timed call, finished `now()`,
    /// feeds the limit (see [`record`](Self::record)); a drop of an untimed one is noted
    /// for the next timed call to bring into its window. The clock is read only for a
    /// timed call.
    #[inline]
    pub(crate) fn end(
        &self,
        start: CallStart,
        dropped: bool,
        now: impl FnOnce() -> Instant,
        apply: impl FnOnce(u32),
    ) -> Option<(u32, u32)> {
        match start.timed {
            Some((started, inflight)) => {
                let sample = Sample {
                    rtt: now().saturating_duration_since(started),
                    inflight,
                    dropped,
                };
                self.record(sample, apply)
            }
            None => {
                if dropped {
                    self.untimed_drop.store(true, Relaxed);
                    // Time every call from now on, until the window with this drop is
                    // judged (`AdaptiveLimit::on_untimed_drop`); never re-enables a limit
                    // removed meanwhile (0).
                    let _ = self
                        .timing
                        .fetch_update(Relaxed, Relaxed, |every| (every > 1).then_some(1));
                }
                None
            }
        }
    }

    /// Sets (or, with `None` or the algorithm `off`, removes) the adaptive limit of a
    /// bulkhead declared `declared` and calls `apply(limit)` with the limit to use from now
    /// on, under the controller's lock (so a concurrent sample cannot apply an older limit
    /// after it). The one place both kinds take an adaptive config, from a file or from
    /// code alike.
    pub(crate) fn configure(
        &self,
        config: Option<&AdaptiveConfig>,
        declared: u32,
        apply: impl FnOnce(u32),
    ) {
        let config = config.filter(|c| c.algorithm != AdaptiveAlgorithm::Off);
        let mut state = self.state.lock();
        let limit = match (config, state.as_mut()) {
            (None, _) => {
                *state = None;
                self.timing.store(0, Relaxed);
                declared
            }
            (Some(config), Some(limit)) => limit.reconfigure(config, declared),
            (Some(config), None) => {
                let limit = AdaptiveLimit::new(config, declared);
                let initial = limit.limit();
                self.timing.store(limit.sample_every(), Relaxed);
                *state = Some(limit);
                initial
            }
        };
        apply(limit);
    }

    /// The limit to use when the declared size becomes `declared`: the adaptive limit within
    /// the new bound, or `declared` itself without one.
    pub(crate) fn limit_for_declared(&self, declared: u32) -> u32 {
        let mut state = self.state.lock();
        match state.as_mut() {
            Some(limit) => {
                let config = limit.config();
                limit.reconfigure(&config, declared)
            }
            None => declared,
        }
    }

    /// A finished call: feeds the limit and, if it changes, calls `apply(to)` under the
    /// controller's lock; returns `(from, to)` then, to be reported once the lock is
    /// released (a listener may call the bulkhead again).
    fn record(&self, sample: Sample, apply: impl FnOnce(u32)) -> Option<(u32, u32)> {
        let mut state = self.state.lock();
        let limit = state.as_mut()?;
        let from = limit.limit();
        if self.untimed_drop.load(Relaxed) && self.untimed_drop.swap(false, Relaxed) {
            limit.on_untimed_drop();
        }
        let to = limit.on_sample(sample);
        let every = limit.sample_every();
        if self.timing.load(Relaxed) != every {
            self.timing.store(every, Relaxed);
        }
        (to != from).then(|| {
            apply(to);
            (from, to)
        })
    }

    /// The adaptive part of the snapshot.
    pub(crate) fn snapshot(&self) -> Option<AdaptiveSnapshot> {
        self.state.lock().as_ref().map(AdaptiveLimit::snapshot)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use bulkhead_config_types::AdaptiveAlgorithm;

    use super::*;
    use crate::adaptive::MIN_WINDOW;

    #[test]
    fn a_drop_of_an_untimed_call_reaches_the_next_window() {
        let controller = Controller::new();
        assert!(controller.begin(|| unreachable!("not adaptive")).is_none());
        let mut config = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, 8, 8);
        config.backoff_ratio = Some(0.5);
        controller.configure(Some(&config), 8, |limit| assert_eq!(limit, 8));
        let start = Instant::now();
        let never = || -> Instant { unreachable!("an untimed call reads no clock") };
        assert_eq!(
            controller.end(CallStart::untimed(), true, never, |_| ()),
            None
        );
        assert_eq!(
            controller.sample_every(),
            Some(1),
            "every call timed after a drop"
        );
        let later = || start + Duration::from_millis(1);
        let changes: Vec<_> = (0..MIN_WINDOW)
            .filter_map(|_| {
                let timed = CallStart::timed(start, 8);
                controller.end(timed, false, later, |_| ())
            })
            .collect();
        assert_eq!(changes, [(8, 4)]);
    }
}

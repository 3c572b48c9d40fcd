//! How a bulkhead feeds its adaptive limit: the [`Controller`] each bulkhead owns, and the
//! per-thread record of the adaptive calls running on a thread, which
//! [`mark_overloaded`] marks.
//!
//! Cost: a bulkhead without an adaptive limit pays one relaxed load per admission
//! ([`Controller::is_enabled`]) and one per release ([`Controller::may_sample`]). An
//! adaptive one reads the clock at admission and at release, and takes its controller's
//! lock once per finished call (a window's bookkeeping; a limit change also takes the
//! waiter-queue lock, through the resize path). Lock order: controller, then waiters.

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use bulkhead_config_types::AdaptiveConfig;

// loom's primitives under `--cfg loom`: the models race limit changes with admissions.
use crate::sync::{AtomicBool, Mutex};

use super::{AdaptiveLimit, AdaptiveSnapshot, Sample};

/// When and as which call in flight an adaptive call was admitted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallStart {
    pub started: Instant,
    pub inflight: u32,
}

impl CallStart {
    /// The sample of this call, finished `now`.
    pub(crate) fn finish(self, now: Instant, dropped: bool) -> Sample {
        Sample {
            rtt: now.saturating_duration_since(self.started),
            inflight: self.inflight,
            dropped,
        }
    }
}

/// The adaptive limit of one bulkhead, if it has one.
#[derive(Debug)]
pub(crate) struct Controller {
    /// An adaptive limit is configured: admissions record their start.
    enabled: AtomicBool,
    /// One was configured at some point: releases look for their call's start.
    sampling: AtomicBool,
    state: Mutex<Option<AdaptiveLimit>>,
}

impl Controller {
    pub(crate) fn new() -> Self {
        Controller {
            enabled: AtomicBool::new(false),
            sampling: AtomicBool::new(false),
            state: Mutex::new(None),
        }
    }

    /// Whether admissions should record their start. One relaxed load.
    #[inline]
    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// Whether a release may have a start to sample. One relaxed load.
    #[inline]
    pub(crate) fn may_sample(&self) -> bool {
        self.sampling.load(Relaxed)
    }

    /// Sets (or, with `None`, removes) the adaptive limit of a bulkhead declared `declared`
    /// and calls `apply(limit)` with the limit to use from now on, under the controller's
    /// lock (so a concurrent sample cannot apply an older limit after it).
    pub(crate) fn configure(
        &self,
        config: Option<&AdaptiveConfig>,
        declared: u32,
        apply: impl FnOnce(u32),
    ) {
        let mut state = self.state.lock();
        let limit = match (config, state.as_mut()) {
            (None, _) => {
                *state = None;
                self.enabled.store(false, Relaxed);
                declared
            }
            (Some(config), Some(limit)) => limit.reconfigure(config, declared),
            (Some(config), None) => {
                let limit = AdaptiveLimit::new(config, declared);
                let initial = limit.limit();
                *state = Some(limit);
                self.sampling.store(true, Relaxed);
                self.enabled.store(true, Relaxed);
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
    pub(crate) fn record(&self, sample: Sample, apply: impl FnOnce(u32)) -> Option<(u32, u32)> {
        let mut state = self.state.lock();
        let limit = state.as_mut()?;
        let from = limit.limit();
        let to = limit.on_sample(sample);
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

/// One adaptive call running on this thread: a sync permit from admission to release, or
/// an async body during one poll.
struct Frame {
    bulkhead: usize,
    start: Option<CallStart>,
    overloaded: bool,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Marks the innermost call of an adaptive bulkhead running on this thread (or, in async
/// code, on this task while it is polled) as **overloaded**: its outcome counts as a drop
/// for the adaptive limit, as a panic or a timeout does, whatever the body returns. Call
/// it when the dependency said it is overloaded (an HTTP 503, a "too busy" error).
/// Returns false when no call of an adaptive bulkhead is running here (nothing to mark).
///
/// ```
/// use bulkhead_config_types::{AdaptiveAlgorithm, AdaptiveConfig, SemaphoreConfig};
/// use bulkhead_core::SemaphoreBulkhead;
/// use bulkhead_core::adaptive::mark_overloaded;
///
/// let search = SemaphoreBulkhead::new("search", &SemaphoreConfig::default())
///     .with_adaptive(Some(&AdaptiveConfig::new(AdaptiveAlgorithm::Aimd)));
/// let marked = search.call(|| {
///     let status = 503; // what the dependency answered
///     status == 503 && mark_overloaded()
/// });
/// assert_eq!(marked, Ok(true));
/// assert!(!mark_overloaded(), "no call is running here now");
/// ```
pub fn mark_overloaded() -> bool {
    FRAMES.with(|frames| match frames.borrow_mut().last_mut() {
        Some(frame) => {
            frame.overloaded = true;
            true
        }
        None => false,
    })
}

/// A sync permit of bulkhead `id` was taken on this thread at `start`.
pub(crate) fn begin_sync(id: usize, start: CallStart) {
    FRAMES.with(|frames| {
        frames.borrow_mut().push(Frame {
            bulkhead: id,
            start: Some(start),
            overloaded: false,
        });
    });
}

/// The sync permit of bulkhead `id` taken on this thread is being returned: its start and
/// whether it was marked overloaded (`None` if it was admitted before the bulkhead became
/// adaptive).
pub(crate) fn end_sync(id: usize) -> Option<(CallStart, bool)> {
    FRAMES.with(|frames| {
        let mut frames = frames.borrow_mut();
        let at = frames
            .iter()
            .rposition(|f| f.bulkhead == id && f.start.is_some())?;
        let frame = frames.remove(at);
        Some((frame.start?, frame.overloaded))
    })
}

/// Marks the innermost sync permit of bulkhead `id` held on this thread; false if none.
pub(crate) fn mark_sync(id: usize) -> bool {
    FRAMES.with(|frames| {
        let mut frames = frames.borrow_mut();
        match frames
            .iter_mut()
            .rev()
            .find(|f| f.bulkhead == id && f.start.is_some())
        {
            Some(frame) => {
                frame.overloaded = true;
                true
            }
            None => false,
        }
    })
}

/// Runs `poll` (one poll of an async body of bulkhead `id`, or work done in an owned
/// permit's scope) so that [`mark_overloaded`] inside it marks this call; returns its
/// result and whether it was marked.
pub(crate) fn in_frame<R>(id: usize, poll: impl FnOnce() -> R) -> (R, bool) {
    /// Pops the frame also when `poll` unwinds.
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            FRAMES.with(|frames| frames.borrow_mut().pop());
        }
    }
    FRAMES.with(|frames| {
        frames.borrow_mut().push(Frame {
            bulkhead: id,
            start: None,
            overloaded: false,
        });
    });
    let pop = Pop;
    let result = poll();
    let overloaded = FRAMES.with(|frames| frames.borrow().last().is_some_and(|f| f.overloaded));
    drop(pop);
    (result, overloaded)
}

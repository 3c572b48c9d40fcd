//! What each bulkhead reports about its calls: tracing spans and refusal warnings, wait-
//! and queue-time histograms, saturation, and [events](crate::events) for listeners.
//!
//! Every bulkhead owns one [`Telemetry`]; its call sites invoke a handful of hooks:
//!
//! | hook | when | costs when nobody listens and tracing is off |
//! |---|---|---|
//! | [`Telemetry::call_span`] | a pool call starts | one relaxed load (tracing's max level), or two (the callsite's interest) |
//! | [`Telemetry::call_scope`] | an async semaphore call is admitted | two relaxed loads; `None`, no allocation |
//! | [`Telemetry::begin_sync_call`] / [`Telemetry::end_sync_call`] | a sync permit is taken / returned with a scope | two relaxed loads / not called (its frame has no scope) |
//! | [`Telemetry::on_permitted`] | a call is admitted | one relaxed load |
//! | [`Telemetry::on_finished`] | an admitted call is over | a branch on `None` |
//! | [`Telemetry::refusals_observed`] | a call is refused | two relaxed loads; [`Telemetry::on_refused`] (`#[cold]`) only if true |
//! | [`Telemetry::record_wait`] | an admitted call *had to wait* (slow path only) | two relaxed `fetch_add` |
//! | [`Telemetry::sample_queue_time`] | a pool queues a task the clock is not read for otherwise | a thread-local counter |
//! | [`Telemetry::record_queue_time`] | a worker takes a queued task that was timed | two relaxed `fetch_add` |
//!
//! Nothing here allocates or locks on a call path: histograms are arrays of atomics, events
//! are borrowed structs built only when [`events::is_listening`], and a disabled span is
//! `Span::none()`.
//!
//! # Tracing
//!
//! Target `bulkhead` (filter with `RUST_LOG=bulkhead=warn` to keep refusals and drop spans):
//!
//! * an `INFO` span named `bulkhead` per call, with fields `bulkhead` (the name) and `kind`
//!   (`semaphore` / `thread-pool`), and, for a semaphore with an [adaptive
//!   limit](crate::adaptive), `limit` (the limit in force when the call was admitted). Its parent is the caller's current span. For a thread
//!   pool it is created on the caller and entered on the worker, so the caller's trace
//!   continues across the hop ([`crate::context`]).
//! * a `WARN` event per refusal: `bulkhead`, `kind`, `reason` (as
//!   [`BulkheadError::reason`]), `active`, `queued`, `limit`, `suppressed`, and the
//!   error's message. Rate-limited per bulkhead and reason ([`refusal_log`]): the first at
//!   once, then at most one a second, `suppressed` saying how many refusals went unlogged
//!   since the previous line. Counters and events see every refusal.
//!
//! # Invariants
//!
//! * The wait-time histogram counts every admitted call once: calls that waited are
//!   recorded with their wait, the others are counted in the lowest bucket when a snapshot is
//!   taken (`admitted - recorded`), so the fast path records nothing.
//! * The queue-time histogram counts the tasks a worker took from the queue (to run it or
//!   to fail it as stale) that were timed, with their time in the queue: every task of a
//!   pool with `max_queue_wait`, or while its queue orders or ages tasks (adaptive LIFO,
//!   CoDel), or with a clock other than the system's ([`crate::clock::ManualClock`]: tests
//!   see every task); otherwise one task in [`QUEUE_TIME_SAMPLE_EVERY`] per queuing thread
//!   (its first, then every 16th), which spares the others two clock reads. Which tasks are
//!   sampled does not depend on how long they wait, so the distribution, its quantiles and
//!   its mean are those of all tasks; the count is of the sampled ones.
//! * The call-duration histogram counts every admitted call that was timed: admitted while
//!   someone listened to events (which [`events::time_calls`] does), so that
//!   [`Telemetry::on_permitted`] gave it a start.
//! * Saturation is computed when a snapshot is taken, from the thresholds last set
//!   ([`Telemetry::set_saturation`]); it never influences admission.

mod histogram;
mod refusal_log;
mod saturation;

use std::cell::Cell;
use std::fmt;
use std::time::{Duration, Instant};

use bulkhead_config_types::{Kind, SaturationThresholds};
use parking_lot::Mutex;

pub use histogram::{BUCKETS, HistogramSnapshot};
pub use saturation::SaturationLevel;

use crate::clock::Clock;
use crate::events::{self, CallOutcome, Event, EventKind};
use crate::frame;
use crate::sync::Arc;
use crate::{BulkheadError, BulkheadName};

use histogram::Histogram;
use refusal_log::RefusalLog;

/// The tracing target of every span and event of this crate.
pub(crate) const TARGET: &str = "bulkhead";

/// Whether any subscriber might record an `INFO` span: the compile-time and the global
/// maximum level (one relaxed load). The callsite's own interest is checked after it.
#[inline]
fn spans_may_be_enabled() -> bool {
    use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
    STATIC_MAX_LEVEL >= LevelFilter::INFO && LevelFilter::current() >= LevelFilter::INFO
}

/// A bulkhead's load when it refused a call, for the refusal warning.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Load {
    /// Calls running: permits held, or a pool's workers running a task or claimed for a
    /// queued one (spawned or woken for it, not yet started).
    pub active: u32,
    /// Tasks in a pool's queue (callers waiting, for a semaphore).
    pub queued: u32,
    /// The concurrency limit.
    pub limit: u32,
}

/// What an admitted semaphore call carries while someone is interested in it: its span
/// (tracing records `bulkhead` spans) and its start (event listeners exist). Boxed, and
/// built only then, so a permit stays small and the uninterested path builds nothing.
pub(crate) struct CallScope {
    /// The call's span.
    pub span: tracing::Span,
    /// When the call was admitted, if listeners existed then.
    pub started: Option<Instant>,
}

/// One task in this many is timed for the queue-time histogram when nothing else needs
/// the time (see the module's invariants).
pub(crate) const QUEUE_TIME_SAMPLE_EVERY: u32 = 16;

thread_local! {
    /// Tasks this thread queued that [`Telemetry::sample_queue_time`] was asked about.
    static QUEUE_TIME_DRAWS: Cell<u32> = const { Cell::new(0) };
}

/// The telemetry of one bulkhead. See the [module docs](self).
pub(crate) struct Telemetry {
    name: BulkheadName,
    kind: Kind,
    clock: Arc<dyn Clock>,
    /// Waits of admitted calls that had to wait (for a permit, or for room in the pool).
    wait: Histogram,
    /// Time tasks spent in a pool's queue before a worker took them.
    queue: Histogram,
    /// How long timed calls ran (see the module's invariants).
    duration: Histogram,
    /// How often refusals are logged.
    refusal_log: RefusalLog,
    /// One in this many tasks (a power of two) is timed for `queue` when nothing else needs the time: 1
    /// (every task) unless the clock is the system's.
    queue_sample_every: u32,
    /// Read only when a snapshot is taken.
    thresholds: Mutex<SaturationThresholds>,
}

impl Telemetry {
    pub(crate) fn new(name: BulkheadName, kind: Kind, clock: Arc<dyn Clock>) -> Self {
        let refusal_log = RefusalLog::new(clock.now());
        // Any clock but the machine's (a test's `ManualClock`, a simulation's) has every
        // queued task timed.
        let system_clock = clock.is_system_time();
        Telemetry {
            name,
            kind,
            queue_sample_every: if system_clock {
                QUEUE_TIME_SAMPLE_EVERY
            } else {
                1
            },
            clock,
            wait: Histogram::default(),
            queue: Histogram::default(),
            duration: Histogram::default(),
            refusal_log,
            thresholds: Mutex::new(SaturationThresholds::default()),
        }
    }

    /// [`call_span`](Self::call_span), `None` for its `Span::none()` of a process where no
    /// subscriber has ever been set (one relaxed load): nothing to enter, drop or keep.
    /// The span is built out of line, so the common caller keeps a small frame.
    #[inline]
    pub(crate) fn call_span_if_any(&self) -> Option<tracing::Span> {
        if !tracing::dispatcher::has_been_set() {
            return None;
        }
        Some(self.call_span_slow())
    }

    #[cold]
    #[inline(never)]
    fn call_span_slow(&self) -> tracing::Span {
        self.call_span()
    }

    /// The span of one call: a child of the current span; `Span::none()` when tracing is
    /// off for target `bulkhead` at `INFO`, or no subscriber has ever been set (then the
    /// callsite is not even looked at: one relaxed load).
    #[inline]
    pub(crate) fn call_span(&self) -> tracing::Span {
        if !tracing::dispatcher::has_been_set() {
            return tracing::Span::none();
        }
        tracing::info_span!(
            target: TARGET,
            "bulkhead",
            bulkhead = self.name.as_str(),
            kind = self.kind.as_str(),
            limit = tracing::field::Empty
        )
    }

    /// Records the limit in force on the span of the sync call just opened on this thread,
    /// if it has one (adaptive bulkheads only; one thread-local read otherwise).
    #[inline]
    pub(crate) fn record_sync_limit(limit: u32) {
        frame::with_top_scope(|scope| {
            scope.span.record("limit", limit);
        });
    }

    /// The scope of a semaphore call given a permit (`admitted`, reported as permitted) or
    /// running inline (re-entrant): `None`, allocating nothing, unless tracing wants its
    /// span or someone listens to events.
    #[inline]
    pub(crate) fn call_scope(&self, admitted: bool) -> Option<Box<CallScope>> {
        let listening = admitted && events::is_listening();
        if !listening && !spans_may_be_enabled() {
            return None;
        }
        self.call_scope_slow(listening)
    }

    #[cold]
    fn call_scope_slow(&self, listening: bool) -> Option<Box<CallScope>> {
        let span = self.call_span();
        if span.is_disabled() && !listening {
            return None;
        }
        let started = if listening {
            self.permitted_slow()
        } else {
            None
        };
        Some(Box::new(CallScope { span, started }))
    }

    /// A synchronous permit of bulkhead `id` was taken on this thread (its frame just
    /// pushed): if tracing wants its span or someone listens, its scope is opened (span
    /// entered) and kept by the frame until [`end_sync_call`](Self::end_sync_call). Two
    /// relaxed loads otherwise.
    #[inline]
    pub(crate) fn begin_sync_call(&self, id: usize) {
        let listening = events::is_listening();
        if listening || spans_may_be_enabled() {
            self.begin_sync_slow(id, listening);
        }
    }

    #[cold]
    #[inline(never)]
    fn begin_sync_slow(&self, id: usize, listening: bool) {
        if let Some(scope) = self.call_scope_slow(listening) {
            scope
                .span
                .with_subscriber(|(span, dispatch)| dispatch.enter(span));
            frame::open_scope(id, scope);
        }
    }

    /// The synchronous call of bulkhead `id` whose frame had a scope ([`frame::SCOPED`])
    /// is over, its permit returned: closes the scope (span exited, listeners told).
    #[cold]
    #[inline(never)]
    pub(crate) fn end_sync_call(&self, id: usize) {
        if let Some(scope) = frame::take_scope(id) {
            scope
                .span
                .with_subscriber(|(span, dispatch)| dispatch.exit(span));
            let outcome = if std::thread::panicking() {
                CallOutcome::Panicked
            } else {
                CallOutcome::Completed
            };
            self.on_finished(scope.started, outcome);
        }
    }

    /// An admitted call: tells the listeners, and returns its start when someone listens
    /// (to be passed to [`on_finished`](Self::on_finished)).
    #[inline]
    pub(crate) fn on_permitted(&self) -> Option<Instant> {
        if !events::is_listening() {
            return None;
        }
        self.permitted_slow()
    }

    #[cold]
    fn permitted_slow(&self) -> Option<Instant> {
        self.emit(EventKind::Permitted);
        Some(self.clock.now())
    }

    /// The start of a body's run on a worker, when someone listens.
    #[inline]
    pub(crate) fn run_started(&self) -> Option<Instant> {
        if !events::is_listening() {
            return None;
        }
        Some(self.clock.now())
    }

    /// An admitted call is over. `started` is what [`on_permitted`](Self::on_permitted) or
    /// [`run_started`](Self::run_started) returned: `None` means nobody listened then.
    #[inline]
    pub(crate) fn on_finished(&self, started: Option<Instant>, outcome: CallOutcome) {
        if let Some(started) = started {
            self.finished_slow(started, outcome);
        }
    }

    #[cold]
    fn finished_slow(&self, started: Instant, outcome: CallOutcome) {
        let duration = self.clock.now().saturating_duration_since(started);
        self.duration.record(duration);
        if events::is_listening() {
            self.emit(EventKind::Finished { outcome, duration });
        }
    }

    /// An admitted call given up before it ran (a task failed or removed from the queue).
    #[inline]
    pub(crate) fn on_cancelled(&self) {
        if events::is_listening() {
            self.emit(EventKind::Finished {
                outcome: CallOutcome::Cancelled,
                duration: Duration::ZERO,
            });
        }
    }

    /// Whether a refusal would be reported at all: a subscriber may record `WARN` events,
    /// or someone listens to events. Two relaxed loads; call sites skip
    /// [`on_refused`](Self::on_refused) (and building its load) when false.
    #[inline]
    pub(crate) fn refusals_observed(&self) -> bool {
        use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
        (STATIC_MAX_LEVEL >= LevelFilter::WARN && LevelFilter::current() >= LevelFilter::WARN)
            || events::is_listening()
    }

    /// A refusal, or a call timeout: the `WARN` event, unless the [`refusal_log`] holds it
    /// back (with `load()`, read only when the event is written), and the listeners'
    /// [`EventKind::Refused`] (for a call timeout [`EventKind::TimedOut`]: the body ran).
    /// Allocates nothing itself.
    #[cold]
    pub(crate) fn on_refused(&self, error: &BulkheadError, load: impl FnOnce() -> Load) {
        let warn = tracing::enabled!(target: TARGET, tracing::Level::WARN);
        if let Some(suppressed) = warn
            .then(|| {
                self.refusal_log
                    .admit(crate::stats::refusal_index(error), self.clock.now())
            })
            .flatten()
        {
            let Load {
                active,
                queued,
                limit,
            } = load();
            tracing::warn!(
                target: TARGET,
                bulkhead = self.name.as_str(),
                kind = self.kind.as_str(),
                reason = error.reason(),
                active,
                queued,
                limit,
                suppressed,
                "{error}"
            );
        }
        if events::is_listening() {
            self.emit(match error {
                // Counted `timed_out`, not refused: the body ran.
                BulkheadError::CallTimeout { .. } => EventKind::TimedOut { error },
                _ => EventKind::Refused { error },
            });
        }
    }

    /// The adaptive limit changed: a `DEBUG` event (`bulkhead`, `kind`, `from`, `to`) and
    /// the listeners' [`EventKind::LimitChanged`].
    #[cold]
    pub(crate) fn on_limit_changed(&self, from: u32, to: u32) {
        tracing::debug!(
            target: TARGET,
            bulkhead = self.name.as_str(),
            kind = self.kind.as_str(),
            from,
            to,
            "adaptive limit changed from {from} to {to}"
        );
        if events::is_listening() {
            self.emit(EventKind::LimitChanged { from, to });
        }
    }

    fn emit(&self, kind: EventKind<'_>) {
        events::emit(&Event {
            bulkhead: self.name.as_str(),
            bulkhead_kind: self.kind,
            kind,
        });
    }

    /// An admitted call waited `waited` for its permit or for room (slow path only).
    #[inline]
    pub(crate) fn record_wait(&self, waited: Duration) {
        self.wait.record(waited);
    }

    /// Whether to time a task being queued for the queue-time histogram, when nothing
    /// else needs its time: one in [`QUEUE_TIME_SAMPLE_EVERY`] per thread (its first, then
    /// every 16th), or every task with a clock other than the system's. One thread-local
    /// counter.
    #[inline]
    pub(crate) fn sample_queue_time(&self) -> bool {
        let every = self.queue_sample_every;
        every <= 1
            || QUEUE_TIME_DRAWS.with(|draws| {
                let n = draws.get();
                draws.set(n.wrapping_add(1));
                n & (every - 1) == 0
            })
    }

    /// A worker took a task that had been queued for `queued` (a timed one).
    #[inline]
    pub(crate) fn record_queue_time(&self, queued: Duration) {
        self.queue.record(queued);
    }

    /// The wait-time distribution of `admitted` calls (those that never waited count as 0).
    pub(crate) fn wait_time(&self, admitted: u64) -> HistogramSnapshot {
        self.wait.snapshot_with_implicit_zeros(admitted)
    }

    /// The queue-time distribution.
    pub(crate) fn queue_time(&self) -> HistogramSnapshot {
        self.queue.snapshot()
    }

    /// The distribution of how long timed calls ran.
    pub(crate) fn call_duration(&self) -> HistogramSnapshot {
        self.duration.snapshot()
    }

    /// Sets the thresholds used by later snapshots.
    pub(crate) fn set_saturation(&self, thresholds: SaturationThresholds) {
        *self.thresholds.lock() = thresholds;
    }

    /// The saturation of a bulkhead with this load.
    pub(crate) fn saturation(
        &self,
        active: u32,
        limit: u32,
        queued: u32,
        queue_capacity: u32,
    ) -> SaturationLevel {
        let thresholds = *self.thresholds.lock();
        SaturationLevel::assess(&thresholds, active, limit, queued, queue_capacity)
    }
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("bulkhead", &self.name)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

//! Observability: tracing spans across the pool hop, refusal warnings, context
//! propagators, events, snapshot histograms and saturation, and the Prometheus exposition.
//!
//! One capturing subscriber is installed process-wide (worker threads only see the global
//! default), and every test uses bulkhead names of its own and reads only its own records.
//! Deterministic: gates, barriers and a `ManualClock`; nothing sleeps.

mod support;

use support::{Gate, WithPolicies, pool_config, wait_until};

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use bulkhead_config_types::{
    BulkheadConfig, Config, Duration as ConfigDuration, SaturationThresholds, SemaphoreConfig,
    ThreadPoolConfig,
};
use bulkhead_core::context::{ContextPropagator, register_propagator};
use bulkhead_core::events::{self, CallOutcome, Event, EventKind};
use bulkhead_core::{
    Bulkhead, BulkheadError, HistogramSnapshot, Registry, SaturationLevel, SemaphoreBulkhead,
    SystemClock, ThreadPoolBulkhead, prometheus,
};
use tracing::Instrument;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

// ------------------------------------------------------------------ capturing subscriber

type Fields = BTreeMap<String, String>;

#[derive(Clone, Debug)]
struct SpanRecord {
    name: &'static str,
    fields: Fields,
}

#[derive(Clone, Debug)]
struct EventRecord {
    level: tracing::Level,
    target: String,
    fields: Fields,
    thread: Option<String>,
    /// The event's span and its ancestors, innermost first, following parent links.
    scope: Vec<SpanRecord>,
}

impl EventRecord {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

struct FieldVisitor<'a>(&'a mut Fields);

impl Visit for FieldVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

#[derive(Default)]
struct Capture {
    events: Mutex<Vec<EventRecord>>,
}

struct CaptureLayer(Arc<Capture>);

impl<S> tracing_subscriber::Layer<S> for CaptureLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut FieldVisitor(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanRecord {
                name: attrs.metadata().name(),
                fields,
            });
        }
    }

    fn on_record(&self, id: &Id, values: &tracing::span::Record<'_>, ctx: LayerContext<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(record) = span.extensions_mut().get_mut::<SpanRecord>()
        {
            values.record(&mut FieldVisitor(&mut record.fields));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: LayerContext<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut FieldVisitor(&mut fields));
        let scope = ctx
            .event_scope(event)
            .map(|scope| {
                scope
                    .filter_map(|span| span.extensions().get::<SpanRecord>().cloned())
                    .collect()
            })
            .unwrap_or_default();
        self.0.events.lock().unwrap().push(EventRecord {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            fields,
            thread: thread::current().name().map(String::from),
            scope,
        });
    }
}

/// The process-wide capture, installed on first use.
fn capture() -> &'static Arc<Capture> {
    static CAPTURE: OnceLock<Arc<Capture>> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Arc::new(Capture::default());
        let subscriber = tracing_subscriber::registry().with(CaptureLayer(Arc::clone(&capture)));
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
        capture
    })
}

/// Captured events that carry `field = value`.
fn events_with(field: &str, value: &str) -> Vec<EventRecord> {
    capture()
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.field(field) == Some(value))
        .cloned()
        .collect()
}

// ------------------------------------------------------------------ helpers

fn semaphore_config(permits: u32, max_wait_ms: u64) -> SemaphoreConfig {
    support::semaphore(permits, max_wait_ms)
}

// ------------------------------------------------------------------ tracing

/// On the system clock the queue-time histogram is sampled: of the tasks a thread queues,
/// its first and every 16th after it, whatever their wait; a pool whose queue ages tasks
/// (here `max_queue_wait`) times every one.
#[test]
fn on_the_system_clock_queue_times_are_sampled_unless_a_policy_needs_every_one() {
    let sampled = ThreadPoolBulkhead::new("obs-queue-sampled", &pool_config(1, 1, 4));
    let aged_config = ThreadPoolConfig {
        max_queue_wait: Some(ConfigDuration::from_secs(60)),
        ..pool_config(1, 1, 4)
    };
    let aged = ThreadPoolBulkhead::new("obs-queue-aged", &aged_config);
    // A thread of its own: its count of queued tasks starts at 0.
    thread::scope(|s| {
        s.spawn(|| {
            for pool in [&sampled, &aged] {
                for n in 0..64u32 {
                    assert_eq!(pool.call(n, |n| n + 1).ok(), Some(n + 1));
                }
            }
        });
    });
    let count = |pool: &ThreadPoolBulkhead| pool.snapshot().queue_time.expect("a pool").count();
    assert_eq!((count(&sampled), count(&aged)), (64 / 16, 64));
    sampled.shutdown(Duration::ZERO);
    aged.shutdown(Duration::ZERO);
}

#[test]
fn pool_body_runs_in_a_bulkhead_span_whose_parent_is_the_callers_span() {
    capture();
    let pool = ThreadPoolBulkhead::new("obs-trace-pool", &pool_config(1, 1, 4));
    let request = tracing::info_span!("request", trace_id = "4bf92f3577b34da6");
    let worker = request
        .in_scope(|| {
            pool.call((), |()| {
                tracing::info!(marker = "obs-trace-pool-body", "charging");
                thread::current().name().map(String::from)
            })
        })
        .unwrap();

    let events = events_with("marker", "obs-trace-pool-body");
    assert_eq!(events.len(), 1);
    let event = &events[0];
    // It ran on the pool's worker, not on the caller...
    assert_eq!(event.thread.as_deref(), Some("obs-trace-pool-1"));
    assert_eq!(worker.as_deref(), Some("obs-trace-pool-1"));
    assert_ne!(thread::current().name(), Some("obs-trace-pool-1"));
    // ...inside the call's span, whose parent is the caller's span: the trace survives.
    let names: Vec<&str> = event.scope.iter().map(|s| s.name).collect();
    assert_eq!(names, ["bulkhead", "request"]);
    assert_eq!(event.scope[0].fields["bulkhead"], "obs-trace-pool");
    assert_eq!(event.scope[0].fields["kind"], "thread-pool");
    assert_eq!(event.scope[1].fields["trace_id"], "4bf92f3577b34da6");
}

#[test]
fn async_pool_body_is_parented_to_the_span_the_call_was_made_in() {
    capture();
    let pool = ThreadPoolBulkhead::new("obs-trace-async", &pool_config(1, 1, 4));
    let request = tracing::info_span!("request", trace_id = "async-7");
    let call = async {
        pool.call_async((), |()| async {
            tracing::info!(marker = "obs-trace-async-body", "recommending");
        })
        .await
    };
    futures_executor::block_on(call.instrument(request)).unwrap();

    let events = events_with("marker", "obs-trace-async-body");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].thread.as_deref(), Some("obs-trace-async-1"));
    let names: Vec<&str> = events[0].scope.iter().map(|s| s.name).collect();
    assert_eq!(names, ["bulkhead", "request"]);
    assert_eq!(events[0].scope[1].fields["trace_id"], "async-7");
}

#[test]
fn semaphore_call_runs_in_a_bulkhead_span_under_the_callers_span() {
    capture();
    let inventory = SemaphoreBulkhead::new("obs-trace-sem", &semaphore_config(2, 0));
    let request = tracing::info_span!("request", trace_id = "sem-1");
    request.in_scope(|| {
        inventory
            .call(|| tracing::info!(marker = "obs-trace-sem-body", "reserving"))
            .unwrap();
    });
    let events = events_with("marker", "obs-trace-sem-body");
    assert_eq!(events.len(), 1);
    let scope = &events[0].scope;
    assert_eq!(scope[0].name, "bulkhead");
    assert_eq!(scope[0].fields["bulkhead"], "obs-trace-sem");
    assert_eq!(scope[0].fields["kind"], "semaphore");
    assert_eq!(scope[1].name, "request");
}

#[test]
fn an_adaptive_semaphore_records_its_limit_on_the_call_span_and_logs_changes_at_debug() {
    use bulkhead_config_types::{AdaptiveAlgorithm, AdaptiveConfig};
    use bulkhead_core::adaptive::MIN_WINDOW;
    capture();
    let mut adaptive = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, 6, 6);
    adaptive.backoff_ratio = Some(0.5);
    let quotes = SemaphoreBulkhead::new("obs-adaptive", &semaphore_config(6, 0))
        .with_policies(|c| c.adaptive = Some(adaptive));
    let changes = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&changes);
    let _listening =
        bulkhead_core::events::subscribe(move |e: &bulkhead_core::events::Event<'_>| {
            if let (true, bulkhead_core::events::EventKind::LimitChanged { from, to }) =
                (e.bulkhead == "obs-adaptive", e.kind)
            {
                seen.lock().unwrap().push((from, to));
            }
        });
    for _ in 1..MIN_WINDOW {
        quotes.call(|| ()).unwrap();
    }
    quotes
        .call(|| {
            tracing::info!(marker = "obs-adaptive-body", "quoting");
            assert!(quotes.mark_overloaded());
        })
        .unwrap();
    let body = events_with("marker", "obs-adaptive-body");
    assert_eq!(body.len(), 1);
    assert_eq!(body[0].scope[0].fields["limit"], "6");
    let changed = events_with("bulkhead", "obs-adaptive");
    let changed: Vec<_> = changed.iter().filter(|e| e.field("to").is_some()).collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0].level, tracing::Level::DEBUG);
    assert_eq!(
        (changed[0].field("from"), changed[0].field("to")),
        (Some("6"), Some("3"))
    );
    assert_eq!(*changes.lock().unwrap(), [(6, 3)]);
}

#[test]
fn semaphore_refusal_logs_a_warning_with_reason_and_counts() {
    capture();
    let inventory = SemaphoreBulkhead::new("obs-refuse-sem", &semaphore_config(1, 0));
    let held = inventory.try_acquire().unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            assert!(matches!(
                inventory.call(|| ()),
                Err(BulkheadError::Full { .. })
            ))
        });
    });
    drop(held);

    let warnings = events_with("bulkhead", "obs-refuse-sem");
    assert_eq!(warnings.len(), 1);
    let w = &warnings[0];
    assert_eq!(w.level, tracing::Level::WARN);
    assert_eq!(w.target, "bulkhead");
    assert_eq!(w.field("kind"), Some("semaphore"));
    assert_eq!(w.field("reason"), Some("full"));
    assert_eq!(w.field("active"), Some("1"));
    assert_eq!(w.field("queued"), Some("0"));
    assert_eq!(w.field("limit"), Some("1"));
}

#[test]
fn pool_refusal_logs_a_warning_with_active_and_queued_counts() {
    capture();
    let pool = ThreadPoolBulkhead::new("obs-refuse-pool", &pool_config(1, 1, 1));
    let gate = Gate::default();
    thread::scope(|s| {
        let running = s.spawn(|| pool.call((), |()| gate.wait()));
        wait_until(|| pool.snapshot().active == 1);
        let queued = s.spawn(|| pool.call((), |()| ()));
        wait_until(|| pool.snapshot().queued == 1);

        let refused = pool.call(7, |n| n).unwrap_err();
        assert_eq!(refused.input, 7);
        assert_eq!(refused.error.reason(), "full");
        gate.open();
        running.join().unwrap().unwrap();
        queued.join().unwrap().unwrap();
    });

    let warnings: Vec<EventRecord> = events_with("bulkhead", "obs-refuse-pool")
        .into_iter()
        .filter(|e| e.level == tracing::Level::WARN)
        .collect();
    assert_eq!(warnings.len(), 1);
    let w = &warnings[0];
    assert_eq!(w.field("kind"), Some("thread-pool"));
    assert_eq!(w.field("reason"), Some("full"));
    assert_eq!(w.field("active"), Some("1"));
    assert_eq!(w.field("queued"), Some("1"));
    assert_eq!(w.field("limit"), Some("1"));
    assert!(w.field("message").unwrap().contains("obs-refuse-pool"));
}

#[test]
fn a_refusal_storm_logs_a_bounded_number_of_warnings_and_counts_every_refusal() {
    capture();
    let (clock, shared) = support::manual_clock();
    let config = BulkheadConfig::semaphore(semaphore_config(1, 0));
    let storm = bulkhead_core::Bulkhead::from_config("obs-refusal-storm", &config, shared);
    let storm = storm.as_semaphore().unwrap();
    let held = storm.try_acquire().unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            // 100 000 refusals in one second of the bulkhead's clock, 10 µs apart.
            for _ in 0..100_000 {
                assert!(matches!(storm.call(|| ()), Err(BulkheadError::Full { .. })));
                clock.advance(Duration::from_micros(10));
            }
            // The second is over: the next refusal is logged, with the number left out.
            assert!(storm.call(|| ()).is_err());
        });
    });
    drop(held);

    let warnings: Vec<EventRecord> = events_with("bulkhead", "obs-refusal-storm")
        .into_iter()
        .filter(|e| e.level == tracing::Level::WARN)
        .collect();
    let suppressed: Vec<Option<&str>> = warnings.iter().map(|w| w.field("suppressed")).collect();
    assert_eq!(suppressed, [Some("0"), Some("99999")]);
    let calls = storm.snapshot().calls;
    assert_eq!(calls.refused.full, 100_001);
    assert_eq!(calls.refused.total(), 100_001);
}

// ------------------------------------------------------------------ context propagators

thread_local! {
    static TENANT: RefCell<Option<String>> = const { RefCell::new(None) };
}

struct TenantPropagator;

impl ContextPropagator for TenantPropagator {
    type Context = String;
    fn capture(&self) -> Option<String> {
        TENANT.with(|t| t.borrow().clone())
    }
    fn restore(&self, tenant: &String) {
        TENANT.with(|t| *t.borrow_mut() = Some(tenant.clone()));
    }
    fn clear(&self) {
        TENANT.with(|t| *t.borrow_mut() = None);
    }
}

fn tenant() -> Option<String> {
    TENANT.with(|t| t.borrow().clone())
}

fn set_tenant(value: Option<&str>) {
    TENANT.with(|t| *t.borrow_mut() = value.map(String::from));
}

fn register_tenant_propagator() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| register_propagator(TenantPropagator));
}

#[test]
fn propagator_restores_the_callers_context_on_the_worker_and_clears_it_after() {
    register_tenant_propagator();
    let pool = ThreadPoolBulkhead::new("obs-ctx-pool", &pool_config(1, 1, 4));

    set_tenant(Some("acme"));
    let seen = pool.call((), |()| tenant()).unwrap();
    assert_eq!(seen.as_deref(), Some("acme"));

    // The same worker, next task, from a caller without a tenant: nothing left over.
    set_tenant(None);
    let (seen, worker) = pool
        .call((), |()| {
            (tenant(), thread::current().name().map(String::from))
        })
        .unwrap();
    assert_eq!(seen, None);
    assert_eq!(worker.as_deref(), Some("obs-ctx-pool-1"));

    // A panicking body clears it too.
    set_tenant(Some("globex"));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.call((), |()| panic!())
    }));
    assert!(panicked.is_err());
    set_tenant(None);
    assert_eq!(pool.call((), |()| tenant()).unwrap(), None);
}

#[test]
fn propagator_reaches_async_pool_bodies() {
    register_tenant_propagator();
    let pool = ThreadPoolBulkhead::new("obs-ctx-async", &pool_config(1, 1, 4));
    set_tenant(Some("initech"));
    let seen = futures_executor::block_on(pool.call_async((), |()| async { tenant() })).unwrap();
    set_tenant(None);
    assert_eq!(seen.as_deref(), Some("initech"));
}

#[test]
fn caller_thread_context_is_left_alone_by_inline_calls() {
    register_tenant_propagator();
    let sem = SemaphoreBulkhead::new("obs-ctx-sem", &semaphore_config(1, 0));
    set_tenant(Some("umbrella"));
    assert_eq!(sem.call(tenant).unwrap().as_deref(), Some("umbrella"));
    // Nothing cleared the caller's own context.
    assert_eq!(tenant().as_deref(), Some("umbrella"));
    set_tenant(None);
}

// ------------------------------------------------------------------ events

type Recorded = Arc<Mutex<Vec<String>>>;

/// Subscribes a listener that records the events of `bulkhead` as short strings.
fn record_events(bulkhead: &'static str) -> (Recorded, events::Subscription) {
    let recorded: Recorded = Arc::default();
    let sink = Arc::clone(&recorded);
    let subscription = events::subscribe(move |event: &Event<'_>| {
        if event.bulkhead != bulkhead {
            return;
        }
        let line = match event.kind {
            EventKind::Permitted => "permitted".to_owned(),
            EventKind::Refused { error } => format!("refused {}", error.reason()),
            EventKind::TimedOut { error } => format!("timed_out {}", error.reason()),
            EventKind::Finished { outcome, duration } => {
                format!("finished {} {duration:?}", outcome.as_str())
            }
            _ => "other".to_owned(),
        };
        sink.lock().unwrap().push(line);
    });
    (recorded, subscription)
}

/// The events of a call whose caller got `CallTimeout`: `timed_out` (not `refused`: the
/// body ran, and the snapshot counts it `timed_out`), with the call's `finished`.
#[test]
fn a_call_timeout_is_reported_timed_out_not_refused_on_both_kinds() {
    const TIMEOUT: Duration = Duration::from_secs(2);
    let timed = |c: &mut BulkheadConfig| c.timeout = Some(TIMEOUT.into());

    // Semaphore: the body is dropped at the deadline (finished, its permit returned), then
    // the caller answered.
    let (clock, shared_clock) = support::manual_clock();
    let sem = SemaphoreBulkhead::with_clock(
        "obs-timed-out-sem",
        &SemaphoreConfig::default(),
        shared_clock,
    )
    .with_policies(timed);
    let (recorded, subscription) = record_events("obs-timed-out-sem");
    let mut call = std::pin::pin!(sem.call_async(std::future::pending::<()>()));
    assert!(support::poll_once(&mut call).is_pending());
    clock.advance(TIMEOUT);
    assert!(matches!(
        support::poll_once(&mut call),
        std::task::Poll::Ready(Err(BulkheadError::CallTimeout { .. }))
    ));
    assert_eq!(
        *recorded.lock().unwrap(),
        [
            "permitted",
            "finished cancelled 2s",
            "timed_out call_timeout"
        ]
    );
    let calls = sem.snapshot().calls;
    assert_eq!((calls.timed_out, calls.refused.total()), (1, 0));
    drop(subscription);

    // Thread pool: the caller is answered at the deadline, the body cut on its worker.
    let (clock, shared_clock) = support::manual_clock();
    let pool =
        ThreadPoolBulkhead::with_clock("obs-timed-out-pool", &pool_config(1, 1, 0), shared_clock)
            .with_policies(timed);
    let (recorded, subscription) = record_events("obs-timed-out-pool");
    thread::scope(|s| {
        let caller = s.spawn(|| {
            futures_executor::block_on(pool.call_async_timed((), |()| std::future::pending::<()>()))
        });
        clock.wait_for_sleepers(1);
        clock.advance(TIMEOUT);
        assert!(matches!(
            caller.join().expect("caller"),
            Ok(Err(BulkheadError::CallTimeout { .. }))
        ));
    });
    // The worker cuts the body at the same deadline on its own thread: its `finished` and
    // the caller's `timed_out` come in either order.
    wait_until(|| recorded.lock().unwrap().len() == 3);
    let mut heard = recorded.lock().unwrap().clone();
    assert_eq!(heard[0], "permitted");
    heard.sort();
    assert_eq!(
        heard,
        [
            "finished cancelled 2s",
            "permitted",
            "timed_out call_timeout"
        ]
    );
    let calls = pool.snapshot().calls;
    assert_eq!((calls.timed_out, calls.refused.total()), (1, 0));
    drop(subscription);
    pool.shutdown(Duration::from_secs(1));
}

#[test]
fn listeners_see_permitted_refused_and_finished_with_duration() {
    let (clock, shared_clock) = support::manual_clock();
    let sem =
        SemaphoreBulkhead::with_clock("obs-events-sem", &semaphore_config(1, 0), shared_clock);
    let (recorded, subscription) = record_events("obs-events-sem");

    let permit = sem.try_acquire().unwrap();
    clock.advance(Duration::from_millis(250));
    thread::scope(|s| {
        s.spawn(|| assert!(sem.call(|| ()).is_err()));
    });
    drop(permit);
    let panicked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sem.call(|| panic!("boom"))));
    assert!(panicked.is_err());
    drop(subscription);
    sem.call(|| ()).unwrap(); // nobody listens any more

    assert_eq!(
        *recorded.lock().unwrap(),
        [
            "permitted",
            "refused full",
            "finished completed 250ms",
            "permitted",
            "finished panicked 0ns",
        ]
    );
}

#[test]
fn pool_listeners_see_run_duration_and_cancelled_queue_timeouts() {
    let (clock, shared_clock) = support::manual_clock();
    let config = ThreadPoolConfig {
        max_queue_wait: Some(ConfigDuration::from_millis(100)),
        ..pool_config(1, 1, 2)
    };
    let pool = ThreadPoolBulkhead::with_clock("obs-events-pool", &config, shared_clock);
    let (recorded, subscription) = record_events("obs-events-pool");
    let gate = Gate::default();
    let started = Gate::default();
    thread::scope(|s| {
        let first = s.spawn(|| {
            pool.call((), |()| {
                started.open();
                gate.wait();
            })
        });
        started.wait();
        let stale = s.spawn(|| pool.call((), |()| ()));
        wait_until(|| pool.snapshot().queued == 1);
        // The queued task's caller stops waiting once 100 ms have passed (it finds 150 ms),
        // while the running body still runs; that body takes 150 ms in all.
        clock.advance(Duration::from_millis(40));
        clock.advance(Duration::from_millis(110));
        let refused = stale.join().unwrap().unwrap_err();
        assert_eq!(refused.error.reason(), "queue_timeout");
        gate.open();
        first.join().unwrap().unwrap();
    });
    drop(subscription);

    let snapshot = pool.snapshot();
    assert_eq!(
        *recorded.lock().unwrap(),
        [
            "permitted",
            "permitted",
            "finished cancelled 0ns",
            "refused queue_timeout",
            "finished completed 150ms",
        ]
    );
    let queue_time = snapshot.queue_time.unwrap();
    assert_eq!(queue_time.count(), 2);
    assert_eq!(queue_time.quantile(1.0), Some(Duration::from_millis(250)));
}

#[test]
fn a_subscription_turns_the_listening_flag_on() {
    // Other tests of this binary may listen concurrently, so "off" cannot be asserted here
    // (the unit test in `events` does); the benchmark shows the cost with nobody listening.
    let subscription = events::subscribe(|_: &Event<'_>| {});
    assert!(events::is_listening());
    drop(subscription);
    assert_eq!(CallOutcome::Completed.as_str(), "completed");
}

// ------------------------------------------------------------------ snapshot

#[test]
fn wait_time_histogram_counts_every_admitted_call_and_records_real_waits() {
    let (clock, shared_clock) = support::manual_clock();
    let sem =
        SemaphoreBulkhead::with_clock("obs-snap-wait", &semaphore_config(1, 1_000), shared_clock);
    sem.call(|| ()).unwrap(); // no wait
    let held = sem.try_acquire().unwrap();
    thread::scope(|s| {
        let waiter = s.spawn(|| sem.call(|| ()));
        clock.wait_for_sleepers(1);
        clock.advance(Duration::from_millis(300));
        // Still waiting (max_wait is 1 s): the permit is what frees it.
        clock.wait_for_sleepers(1);
        drop(held);
        waiter.join().unwrap().unwrap();
    });

    let wait = sem.snapshot().wait_time;
    assert_eq!(wait.count(), 3);
    assert_eq!(wait.counts()[0], 2, "two calls admitted without waiting");
    assert_eq!(wait.p50(), Some(Duration::from_micros(100)));
    assert_eq!(wait.p99(), Some(Duration::from_millis(500)));
    assert_eq!(wait.sum(), Duration::from_millis(300));
}

/// A registry with one bulkhead `name` built from `config` whose saturation thresholds
/// are `thresholds`.
fn registry_with(
    name: &str,
    mut config: BulkheadConfig,
    thresholds: SaturationThresholds,
) -> Registry {
    let registry = Registry::new();
    config.saturation = thresholds;
    registry.register(name, &config).unwrap();
    registry
}

fn saturation_of(registry: &Registry, name: &str) -> SaturationLevel {
    let snapshots = registry.snapshot();
    snapshots
        .iter()
        .find(|s| s.name.as_str() == name)
        .map(|s| s.saturation)
        .unwrap()
}

/// The saturation of `name` while `n` permits of `sem` are held (each on a thread of its
/// own: a permit marks its thread as inside the bulkhead).
fn saturation_with_active(registry: &Registry, sem: &SemaphoreBulkhead, n: u32) -> SaturationLevel {
    let gate = Gate::default();
    thread::scope(|s| {
        for _ in 0..n {
            let gate = gate.clone();
            s.spawn(move || {
                let permit = sem.try_acquire().unwrap();
                gate.wait();
                drop(permit);
            });
        }
        wait_until(|| sem.snapshot().active == n);
        let level = saturation_of(registry, sem.name());
        gate.open();
        level
    })
}

#[test]
fn saturation_follows_the_configured_thresholds_and_reloads() {
    let thresholds = SaturationThresholds {
        active_warning: 0.2,
        active_critical: 0.5,
        ..SaturationThresholds::default()
    };
    let config = BulkheadConfig::semaphore(semaphore_config(10, 0));
    let registry = registry_with("obs-sat-sem", config.clone(), thresholds);
    let sem = registry.semaphore("obs-sat-sem").unwrap();

    assert_eq!(
        saturation_with_active(&registry, &sem, 1),
        SaturationLevel::Ok
    );
    assert_eq!(
        saturation_with_active(&registry, &sem, 2),
        SaturationLevel::Warning
    );
    assert_eq!(
        saturation_with_active(&registry, &sem, 5),
        SaturationLevel::Critical
    );

    // A reload back to the defaults (80 % / 95 %) applies to the next snapshot.
    let mut reloaded = Config::default();
    reloaded.bulkheads.insert("obs-sat-sem".into(), config);
    registry.reload(&reloaded).unwrap();
    assert_eq!(
        saturation_with_active(&registry, &sem, 5),
        SaturationLevel::Ok
    );
    assert_eq!(
        saturation_with_active(&registry, &sem, 8),
        SaturationLevel::Warning
    );
    assert_eq!(
        saturation_with_active(&registry, &sem, 10),
        SaturationLevel::Critical
    );
    // Saturation is information: a critical bulkhead still admits while it has room.
    assert!(sem.call(|| ()).is_ok());
}

#[test]
fn pool_queue_saturation_uses_the_queue_thresholds() {
    // Active readings switched off (a fraction above 1 is never reached) to isolate the
    // queue reading; the defaults for the queue are 70 % and 90 %. A config file or the
    // registry refuses such thresholds; the pool is built directly, which takes them.
    let mut config = BulkheadConfig::thread_pool(pool_config(1, 1, 10));
    config.saturation = SaturationThresholds {
        active_warning: 2.0,
        active_critical: 2.0,
        ..SaturationThresholds::default()
    };
    let built = Bulkhead::from_config("obs-sat-pool", &config, Arc::new(SystemClock));
    let pool = built.as_thread_pool().unwrap().clone();
    let gate = Gate::default();
    thread::scope(|s| {
        let mut calls = vec![s.spawn(|| pool.call((), |()| gate.wait()))];
        wait_until(|| pool.snapshot().active == 1);
        let mut levels = Vec::new();
        for queued in 1..=9 {
            calls.push(s.spawn(|| pool.call((), |()| ())));
            wait_until(|| pool.snapshot().queued == queued);
            levels.push(pool.snapshot().saturation);
        }
        use SaturationLevel::{Critical, Ok, Warning};
        assert_eq!(levels, [Ok, Ok, Ok, Ok, Ok, Ok, Warning, Warning, Critical]);
        gate.open();
        for call in calls {
            call.join().unwrap().unwrap();
        }
    });
    let snapshot = pool.snapshot();
    assert_eq!(snapshot.saturation, SaturationLevel::Ok);
    assert_eq!(snapshot.queue_time.unwrap().count(), 10);
    assert_eq!(snapshot.wait_time.count(), 10);
}

// ------------------------------------------------------------------ Prometheus

/// A registry in a fixed state: `checkout` (semaphore, 1 permit) has completed one call,
/// refused one and holds its permit; `ledger` (pool) is idle.
fn fixed_registry() -> (Registry, bulkhead_core::ManualClock) {
    let (clock, shared) = support::manual_clock();
    let registry = Registry::with_clock(shared);
    registry
        .register(
            "checkout",
            &BulkheadConfig::semaphore(semaphore_config(1, 0)),
        )
        .unwrap();
    registry
        .register("ledger", &BulkheadConfig::thread_pool(pool_config(1, 2, 8)))
        .unwrap();
    (registry, clock)
}

const EXPECTED_EXPOSITION: &str = include_str!("fixtures/exposition.prom");

#[test]
fn exposition_matches_the_expected_text_exactly() {
    let (registry, _clock) = fixed_registry();
    let checkout = registry.semaphore("checkout").unwrap();
    checkout.call(|| ()).unwrap();
    let held = checkout.try_acquire().unwrap();
    thread::scope(|s| {
        s.spawn(|| assert!(checkout.call(|| ()).is_err()));
    });
    let text = prometheus::encode_registry(&registry);
    drop(held);
    if std::env::var_os("BULKHEAD_BLESS").is_some() {
        // Rewrites the expected text; review the diff before committing it.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/exposition.prom"
        );
        std::fs::write(path, &text).unwrap();
        return;
    }
    if text != EXPECTED_EXPOSITION {
        // Show the first differing line, then fail with both texts.
        for (line, (got, want)) in text.lines().zip(EXPECTED_EXPOSITION.lines()).enumerate() {
            assert_eq!(got, want, "line {}", line + 1);
        }
        assert_eq!(text, EXPECTED_EXPOSITION);
    }
}

#[test]
fn exposition_parses_as_prometheus_text_with_consistent_families() {
    let (registry, _clock) = fixed_registry();
    let checkout = registry.semaphore("checkout").unwrap();
    checkout.call(|| ()).unwrap();
    let ledger = registry.thread_pool("ledger").unwrap();
    ledger.call((), |()| ()).unwrap();
    let text = prometheus::encode_registry(&registry);

    strict_text_format(&text);

    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    let value = |metric: &str, bulkhead: &str, extra: Option<(&str, &str)>| {
        scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == metric
                    && s.labels.get("bulkhead") == Some(bulkhead)
                    && extra.is_none_or(|(k, v)| s.labels.get(k) == Some(v))
            })
            .map(|s| s.value.clone())
    };
    use prometheus_parse::Value;
    assert_eq!(
        value(
            "bulkhead_calls_total",
            "checkout",
            Some(("outcome", "completed"))
        ),
        Some(Value::Counter(1.0))
    );
    assert_eq!(
        value("bulkhead_queue_depth", "ledger", None),
        Some(Value::Gauge(0.0))
    );
    assert_eq!(value("bulkhead_queue_depth", "checkout", None), None);
    assert_eq!(
        value("bulkhead_info", "ledger", Some(("kind", "thread-pool"))),
        Some(Value::Gauge(1.0))
    );
    match value("bulkhead_wait_seconds", "ledger", None) {
        Some(Value::Histogram(buckets)) => {
            assert_eq!(buckets.len(), bulkhead_core::BUCKETS.len() + 1);
            assert!(buckets.iter().all(|b| b.count == 1.0));
        }
        other => panic!("bulkhead_wait_seconds is not a histogram: {other:?}"),
    }
    match value("bulkhead_queue_time_seconds", "ledger", None) {
        Some(Value::Histogram(buckets)) => {
            assert_eq!(buckets.last().map(|b| b.count), Some(1.0));
        }
        other => panic!("bulkhead_queue_time_seconds is not a histogram: {other:?}"),
    }
    assert!(scrape.docs.contains_key("bulkhead_queue_depth"));
}

/// The text format, checked line by line: every family has HELP then TYPE once, before its
/// samples; names and labels are well formed; histogram buckets are cumulative and end with
/// `+Inf` equal to `_count`.
fn strict_text_format(text: &str) {
    assert!(text.ends_with('\n'));
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut last_bucket: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP has a text");
            assert!(!help.is_empty());
            assert!(valid_name(name), "{line}");
            current = Some(name.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a type");
            assert_eq!(
                Some(name),
                current.as_deref(),
                "TYPE right after HELP: {line}"
            );
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "family {name} declared twice"
            );
            if kind == "counter" {
                assert!(name.ends_with("_total"), "counter {name} ends in _total");
            }
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment {line}");
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let value: f64 = value.parse().expect("value is a number");
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.strip_suffix('}').expect("labels close")),
            None => (series, ""),
        };
        let family = current.as_deref().expect("sample after its TYPE");
        let suffix = name
            .strip_prefix(family)
            .expect("sample of the current family");
        let kind = &types[family];
        match kind.as_str() {
            "histogram" => assert!(["_bucket", "_sum", "_count"].contains(&suffix), "{line}"),
            _ => assert_eq!(suffix, "", "{line}"),
        }
        let labels = parse_labels(labels);
        // Every series names its bulkhead, but the registry's own reload counter.
        let subject = match labels.get("bulkhead") {
            Some(bulkhead) => bulkhead.clone(),
            None => {
                assert_eq!(family, "bulkhead_config_reloads_total", "{line}");
                labels["result"].clone()
            }
        };
        let key = format!("{family}/{subject}");
        if suffix == "_bucket" {
            let le = &labels["le"];
            let bound: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("le is a number")
            };
            if let Some((prev_bound, prev)) = last_bucket.get(&key) {
                assert!(bound > *prev_bound && value >= *prev, "cumulative: {line}");
            }
            last_bucket.insert(key, (bound, value));
        } else if suffix == "_count" {
            let (bound, inf) = last_bucket[&key];
            assert_eq!(bound, f64::INFINITY, "+Inf is the last bucket");
            assert_eq!(inf, value, "+Inf bucket equals _count");
        }
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_labels(labels: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = labels;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect("label key=\"value\"");
        assert!(valid_name(key), "label name {key}");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect("label value closes") {
                (i, '"') => break i,
                (_, '\\') => match chars.next().expect("escape") {
                    (_, 'n') => value.push('\n'),
                    (_, c @ ('\\' | '"')) => value.push(c),
                    (_, c) => panic!("bad escape \\{c}"),
                },
                (_, c) => value.push(c),
            }
        };
        assert!(
            out.insert(key.to_owned(), value).is_none(),
            "label {key} twice"
        );
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    out
}

#[test]
fn histogram_snapshot_is_empty_for_a_fresh_bulkhead() {
    let sem = SemaphoreBulkhead::new("obs-fresh", &semaphore_config(1, 0));
    assert_eq!(sem.snapshot().wait_time, HistogramSnapshot::default());
    assert_eq!(sem.snapshot().queue_time, None);
}

// ------------------------------------------------------------------ metrics bridge

#[cfg(feature = "metrics")]
mod metrics_bridge {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::{Arc, Mutex};

    use bulkhead_core::{metrics_bridge, prometheus};
    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder,
        SharedString, Unit,
    };

    type Values = Arc<Mutex<BTreeMap<String, f64>>>;

    /// A recorder that keeps the last value of every series, keyed `name{k=v,...}`, and
    /// the type each series was registered as.
    #[derive(Default)]
    struct LastValue(Values, Mutex<BTreeMap<String, &'static str>>);

    struct Series(Values, String);

    impl CounterFn for Series {
        fn increment(&self, value: u64) {
            *self.0.lock().unwrap().entry(self.1.clone()).or_default() += value as f64;
        }
        fn absolute(&self, value: u64) {
            self.0.lock().unwrap().insert(self.1.clone(), value as f64);
        }
    }

    impl GaugeFn for Series {
        fn increment(&self, value: f64) {
            *self.0.lock().unwrap().entry(self.1.clone()).or_default() += value;
        }
        fn decrement(&self, value: f64) {
            *self.0.lock().unwrap().entry(self.1.clone()).or_default() -= value;
        }
        fn set(&self, value: f64) {
            self.0.lock().unwrap().insert(self.1.clone(), value);
        }
    }

    fn series(key: &Key) -> String {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }

    impl Recorder for LastValue {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            self.1.lock().unwrap().insert(series(key), "counter");
            Counter::from_arc(Arc::new(Series(Arc::clone(&self.0), series(key))))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            self.1.lock().unwrap().insert(series(key), "gauge");
            Gauge::from_arc(Arc::new(Series(Arc::clone(&self.0), series(key))))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn metrics_bridge_publishes_the_same_figures_as_the_exposition() {
        let (registry, _clock) = super::fixed_registry();
        let checkout = registry.semaphore("checkout").unwrap();
        checkout.call(|| ()).unwrap();
        let recorder = LastValue::default();
        metrics::with_local_recorder(&recorder, || {
            metrics_bridge::describe();
            metrics_bridge::publish_registry(&registry);
        });
        let values = recorder.0.lock().unwrap();
        let get = |k: &str| values.get(k).copied();
        assert_eq!(get("bulkhead_limit{bulkhead=checkout}"), Some(1.0));
        assert_eq!(
            get("bulkhead_calls_total{bulkhead=checkout,outcome=completed}"),
            Some(1.0)
        );
        assert_eq!(
            get("bulkhead_refusals_total{bulkhead=ledger,reason=full}"),
            Some(0.0)
        );
        assert_eq!(get("bulkhead_queue_depth{bulkhead=ledger}"), Some(0.0));
        assert_eq!(get("bulkhead_queue_depth{bulkhead=checkout}"), None);
        assert_eq!(
            get("bulkhead_info{bulkhead=ledger,kind=thread-pool}"),
            Some(1.0)
        );
        assert_eq!(
            get("bulkhead_wait_seconds_bucket{bulkhead=checkout,le=0.0001}"),
            Some(1.0)
        );
        assert_eq!(
            get("bulkhead_wait_seconds_count{bulkhead=checkout}"),
            Some(1.0)
        );
        assert_eq!(
            get("bulkhead_queue_time_seconds_count{bulkhead=ledger}"),
            Some(0.0)
        );
    }

    /// The text exposition's series as `name{k=v,...}` (labels sorted) with their values,
    /// and each family's type from its `# TYPE` line.
    type Families = BTreeMap<String, (String, BTreeSet<BTreeSet<String>>)>;

    fn text_series(text: &str) -> (BTreeMap<String, f64>, BTreeMap<String, String>) {
        let mut values = BTreeMap::new();
        let mut types = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                types.insert(name.to_owned(), kind.to_owned());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            let labels: BTreeMap<String, String> =
                super::parse_labels(labels.trim_end_matches('}'));
            values.insert(key(name, &labels), value.parse().unwrap());
        }
        (values, types)
    }

    fn key(name: &str, labels: &BTreeMap<String, String>) -> String {
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{name}{{{}}}", labels.join(","))
    }

    /// Families by name: their type and the label sets of their series (`le` of histogram
    /// buckets and the `_bucket`/`_sum`/`_count` suffixes folded into the family).
    fn families(
        values: &BTreeMap<String, f64>,
        type_of: impl Fn(&str, &str) -> String,
    ) -> Families {
        let mut families = Families::new();
        for series in values.keys() {
            let (name, labels) = series.split_once('{').unwrap();
            let kind = type_of(name, series);
            let family = match kind.as_str() {
                "histogram" => ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .unwrap_or(name),
                _ => name,
            };
            let keys: BTreeSet<String> = labels
                .trim_end_matches('}')
                .split(',')
                .filter(|l| !l.is_empty())
                .map(|l| l.split_once('=').unwrap().0.to_owned())
                .filter(|k| !(kind == "histogram" && k == "le"))
                .collect();
            let entry = families
                .entry(family.to_owned())
                .or_insert_with(|| (kind.clone(), BTreeSet::new()));
            assert_eq!(entry.0, kind, "{series}");
            entry.1.insert(keys);
        }
        families
    }

    #[test]
    fn the_bridge_and_the_text_publish_the_same_families_types_labels_and_values() {
        let (registry, _clock) = super::fixed_registry();
        let checkout = registry.semaphore("checkout").unwrap();
        let timing = bulkhead_core::events::time_calls();
        checkout.call(|| ()).unwrap();
        drop(timing);
        checkout.record_fallback();
        let ledger = registry.thread_pool("ledger").unwrap();
        ledger.call((), |()| ()).unwrap();
        let unreadable = |_: &bulkhead_core::DeployBase| {
            Err::<bulkhead_core::CheckedDeploy, _>("deploy.yaml:1:1: error: not a config")
        };
        registry
            .deploy_with("deploy.yaml", false, unreadable)
            .unwrap_err();
        // A partitioned bulkhead with a per-key cap: the partition and key families.
        let mut shared =
            bulkhead_config_types::BulkheadConfig::semaphore(crate::semaphore_config(4, 0));
        shared.partitions = bulkhead_config_types::Partitions::new([("live", 0.5), ("batch", 0.5)]);
        shared.per_key = Some(bulkhead_config_types::PerKeyConfig::new(1));
        let search = registry.register("search", &shared).unwrap();
        let live = search.as_semaphore().unwrap().partition("live").unwrap();
        let held = live.keyed("tenant").try_acquire().unwrap();
        // From another thread: on this one, the held permit makes a second call re-entrant.
        std::thread::scope(|s| {
            let refused = s.spawn(|| live.keyed("tenant").try_acquire().is_err());
            assert!(refused.join().unwrap(), "over the key's cap");
        });

        // A cluster concurrency limit whose Redis cannot be reached (nothing on port 1): the
        // lease families, with a counted store error.
        let mut leased =
            bulkhead_config_types::BulkheadConfig::semaphore(crate::semaphore_config(4, 0));
        leased.cluster = Some(bulkhead_config_types::ClusterLimitConfig::redis(
            "redis://127.0.0.1:1/",
        ));
        if let Some(cluster) = &mut leased.cluster {
            cluster.store.on_store_error = bulkhead_config_types::OnStoreError::Refuse;
        }
        let partner = registry.register("partner", &leased).unwrap();
        assert!(partner.as_semaphore().unwrap().call(|| ()).is_err());

        let text = prometheus::encode_registry(&registry);
        let recorder = LastValue::default();
        metrics::with_local_recorder(&recorder, || {
            metrics_bridge::describe();
            metrics_bridge::publish_registry(&registry);
        });
        let bridge_values = recorder.0.lock().unwrap().clone();
        let bridge_types = recorder.1.lock().unwrap().clone();

        let (text_values, text_types) = text_series(&text);
        // Every series and its value, one by one.
        assert_eq!(bridge_values, text_values);

        let text_families = families(&text_values, |name, _| {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|base| text_types.get(*base).map(String::as_str) == Some("histogram"))
                .unwrap_or(name);
            text_types[family].clone()
        });
        // The bridge publishes a histogram as counters `_bucket` (with `le`) and `_count`
        // and a gauge `_sum`: such a triple is a histogram family.
        let histograms: BTreeSet<&str> = bridge_types
            .iter()
            .filter(|(series, kind)| **kind == "counter" && series.contains(",le="))
            .filter_map(|(series, _)| series.split_once("_bucket{").map(|(base, _)| base))
            .collect();
        let bridge_families = families(&bridge_values, |name, series| {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix));
            match base {
                Some(base) if histograms.contains(base) => "histogram".to_owned(),
                _ => bridge_types[series].to_owned(),
            }
        });
        assert_eq!(
            bridge_families.keys().collect::<Vec<_>>(),
            text_families.keys().collect::<Vec<_>>()
        );
        for (family, text) in &text_families {
            assert_eq!(&bridge_families[family], text, "family {family}");
        }
        // Every family of the table is in both (the fixture has a pool, fallbacks, timed
        // calls, a reload and a cluster concurrency limit), but the one only a cluster-wide
        // rate limit has.
        drop(held);
        for family in &bulkhead_core::metric_families::FAMILIES {
            let Some((kind, _)) = text_families.get(family.name) else {
                assert_eq!(family.name, "bulkhead_rate_limit_store_errors_total");
                continue;
            };
            assert_eq!(kind, family.metric_type.as_str(), "{}", family.name);
        }
    }
}

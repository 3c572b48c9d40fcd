//! The same figures as [`crate::prometheus`], published through the [`metrics`] crate
//! facade (feature `metrics`), for services that already export with a `metrics` recorder
//! (`metrics-exporter-prometheus`, StatsD, OpenTelemetry bridges…).
//!
//! Call [`publish_registry`] periodically (every scrape, or every few seconds): it reads a
//! snapshot of every bulkhead and sets the recorder's gauges and counters (`absolute`), so it
//! adds nothing to any call path. [`describe`] registers the descriptions and units once.
//!
//! Names and labels are those of the Prometheus exposition (every series has the label
//! `bulkhead`). Histograms cannot be handed to a recorder as buckets, so the wait- and
//! queue-time distributions are published as summaries: a gauge `<name>` with label
//! `quantile` (`0.5`, `0.99`; the bucket bounds of [`HistogramSnapshot::quantile`]), a
//! gauge `<name>_sum` (seconds) and a counter `<name>_count`.
//!
//! ```
//! use bulkhead_core::{Registry, metrics_bridge};
//! let registry = Registry::new();
//! metrics_bridge::describe();
//! metrics_bridge::publish_registry(&registry); // no recorder installed: a no-op
//! ```

use metrics::{Unit, counter, describe_counter, describe_gauge, gauge};

use crate::{BulkheadSnapshot, HistogramSnapshot, Registry};

/// Registers the description and unit of every metric with the installed recorder.
pub fn describe() {
    let gauges: [(&'static str, &'static str); 10] = [
        ("bulkhead_info", "A bulkhead and its kind; always 1."),
        (
            "bulkhead_limit",
            "Concurrency limit in force (the adaptive limit, if any).",
        ),
        ("bulkhead_active_calls", "Calls running now."),
        (
            "bulkhead_available_calls",
            "Calls that could start now without waiting.",
        ),
        (
            "bulkhead_waiting_calls",
            "Callers blocked or awaiting admission.",
        ),
        (
            "bulkhead_queue_depth",
            "Tasks waiting in the thread pool's queue.",
        ),
        (
            "bulkhead_queue_capacity",
            "The thread pool's queue capacity.",
        ),
        ("bulkhead_pool_threads", "Worker threads alive."),
        (
            "bulkhead_pool_threads_largest",
            "The most worker threads ever alive at once.",
        ),
        (
            "bulkhead_saturation_level",
            "Saturation: 0 ok, 1 warning, 2 critical.",
        ),
    ];
    for (name, help) in gauges {
        describe_gauge!(name, Unit::Count, help);
    }
    describe_counter!(
        "bulkhead_permitted_calls_total",
        Unit::Count,
        "Calls admitted."
    );
    describe_counter!(
        "bulkhead_calls_total",
        Unit::Count,
        "Calls by outcome: completed, panicked, cancelled, refused, reentrant."
    );
    describe_counter!(
        "bulkhead_refusals_total",
        Unit::Count,
        "Refused calls by reason."
    );
    describe_counter!(
        "bulkhead_rate_limit_store_errors_total",
        Unit::Count,
        "Decisions a cluster-wide rate limit's store (Redis) could not make."
    );
    for name in ["bulkhead_wait_seconds", "bulkhead_queue_time_seconds"] {
        describe_gauge!(name, Unit::Seconds, "Quantile estimates (bucket bounds).");
    }
}

/// Publishes every bulkhead of `registry`.
pub fn publish_registry(registry: &Registry) {
    publish(&registry.snapshot());
}

/// Publishes `snapshots` to the installed recorder (a no-op without one).
pub fn publish(snapshots: &[BulkheadSnapshot]) {
    for s in snapshots {
        publish_one(s);
    }
}

fn publish_one(s: &BulkheadSnapshot) {
    let name = s.name.to_string();
    let set = |metric: &'static str, value: u32| {
        gauge!(metric, "bulkhead" => name.clone()).set(f64::from(value));
    };
    gauge!("bulkhead_info", "bulkhead" => name.clone(), "kind" => s.kind.as_str()).set(1.0);
    set("bulkhead_limit", s.limit);
    set("bulkhead_active_calls", s.active);
    set("bulkhead_available_calls", s.available);
    set("bulkhead_waiting_calls", s.waiting);
    set("bulkhead_saturation_level", s.saturation as u32);
    if let Some(capacity) = s.queue_capacity {
        set("bulkhead_queue_depth", s.queued);
        set("bulkhead_queue_capacity", capacity);
    }
    if let Some(threads) = s.pool_size {
        set("bulkhead_pool_threads", threads);
    }
    if let Some(largest) = s.largest_pool_size {
        set("bulkhead_pool_threads_largest", largest);
    }

    let c = &s.calls;
    counter!("bulkhead_permitted_calls_total", "bulkhead" => name.clone()).absolute(c.permitted);
    for (outcome, n) in c.by_outcome() {
        counter!("bulkhead_calls_total", "bulkhead" => name.clone(), "outcome" => outcome)
            .absolute(n);
    }
    for (reason, n) in c.refused.by_reason() {
        counter!("bulkhead_refusals_total", "bulkhead" => name.clone(), "reason" => reason)
            .absolute(n);
    }
    if let Some(errors) = s.rate_limit_store_errors {
        counter!("bulkhead_rate_limit_store_errors_total", "bulkhead" => name.clone())
            .absolute(errors);
    }

    summary("bulkhead_wait_seconds", &name, &s.wait_time);
    if let Some(queue_time) = &s.queue_time {
        summary("bulkhead_queue_time_seconds", &name, queue_time);
    }
}

fn summary(metric: &'static str, name: &str, h: &HistogramSnapshot) {
    for (quantile, q) in [("0.5", 0.5), ("0.99", 0.99)] {
        let value = h.quantile(q).map_or(0.0, |d| d.as_secs_f64());
        gauge!(metric, "bulkhead" => name.to_owned(), "quantile" => quantile).set(value);
    }
    let (sum, count) = match metric {
        "bulkhead_wait_seconds" => ("bulkhead_wait_seconds_sum", "bulkhead_wait_seconds_count"),
        _ => (
            "bulkhead_queue_time_seconds_sum",
            "bulkhead_queue_time_seconds_count",
        ),
    };
    gauge!(sum, "bulkhead" => name.to_owned()).set(h.sum().as_secs_f64());
    counter!(count, "bulkhead" => name.to_owned()).absolute(h.count());
}

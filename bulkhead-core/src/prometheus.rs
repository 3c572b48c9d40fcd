//! Prometheus text exposition (format 0.0.4) of bulkhead snapshots, with no dependency.
//!
//! Serve [`encode_registry`]`(registry)` at `/metrics` with the [`CONTENT_TYPE`] header.
//! Every bulkhead becomes one label value, `bulkhead="<name>"`, of the families below
//! (names follow the Prometheus conventions: base units, `_total` counters, `_seconds`
//! histograms). Families that only a thread pool has are left out when no bulkhead is a
//! pool; a family is never written without samples.
//!
//! | family | type | labels | meaning |
//! |---|---|---|---|
//! | `bulkhead_info` | gauge | `bulkhead`, `kind` | always 1; `kind` is `semaphore` or `thread-pool` |
//! | `bulkhead_limit` | gauge | `bulkhead` | concurrency limit in force (`max_concurrent_calls` / `max_threads`, or the adaptive limit within it) |
//! | `bulkhead_active_calls` | gauge | `bulkhead` | calls running now |
//! | `bulkhead_available_calls` | gauge | `bulkhead` | calls that could start now without waiting |
//! | `bulkhead_waiting_calls` | gauge | `bulkhead` | callers blocked or awaiting admission |
//! | `bulkhead_queue_depth` | gauge | `bulkhead` | tasks in a pool's queue (page on this, seed 001) |
//! | `bulkhead_queue_capacity` | gauge | `bulkhead` | a pool's `queue_capacity` |
//! | `bulkhead_pool_threads` | gauge | `bulkhead` | a pool's worker threads alive |
//! | `bulkhead_pool_threads_largest` | gauge | `bulkhead` | most worker threads ever alive at once |
//! | `bulkhead_saturation_level` | gauge | `bulkhead` | 0 ok, 1 warning, 2 critical |
//! | `bulkhead_permitted_calls_total` | counter | `bulkhead` | calls admitted |
//! | `bulkhead_calls_total` | counter | `bulkhead`, `outcome` | `completed`, `panicked`, `cancelled`, `refused`, `reentrant` |
//! | `bulkhead_refusals_total` | counter | `bulkhead`, `reason` | `full`, `timeout`, `queue_timeout`, `rate_limited`, `shut_down` |
//! | `bulkhead_rate_limit_store_errors_total` | counter | `bulkhead` | decisions a `scope: cluster` rate limit's store could not make (only bulkheads with one) |
//! | `bulkhead_wait_seconds` | histogram | `bulkhead` | wait of admitted calls for a permit or for room |
//! | `bulkhead_queue_time_seconds` | histogram | `bulkhead` | time tasks spent in a pool's queue |
//!
//! A task a pool admitted and then failed from its queue (`queue_timeout`, `shut_down`) is
//! counted both `outcome="cancelled"` and `outcome="refused"` (and under its reason).
//! Histogram buckets are [`BUCKETS`](crate::BUCKETS), 100 µs to 10 s, the same for every
//! bulkhead.
//!
//! ```
//! use bulkhead_config_types::{BulkheadConfig, SemaphoreConfig};
//! use bulkhead_core::{Registry, prometheus};
//!
//! let registry = Registry::new();
//! registry.register("payment", &BulkheadConfig::semaphore(SemaphoreConfig::default())).unwrap();
//! let text = prometheus::encode_registry(&registry);
//! assert!(text.contains("bulkhead_active_calls{bulkhead=\"payment\"} 0\n"));
//! assert!(text.contains("bulkhead_wait_seconds_bucket{bulkhead=\"payment\",le=\"+Inf\"} 0\n"));
//! ```

use std::fmt::{self, Write};

use crate::telemetry::HistogramSnapshot;
use crate::{BulkheadSnapshot, Registry};

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition of every bulkhead of `registry`, sorted by name.
pub fn encode_registry(registry: &Registry) -> String {
    encode(&registry.snapshot())
}

/// The exposition of `snapshots`, in their order.
pub fn encode(snapshots: &[BulkheadSnapshot]) -> String {
    let mut out = String::with_capacity(1024 + snapshots.len() * 4096);
    // Writing to a String cannot fail.
    let _ = write(&mut out, snapshots);
    out
}

/// Writes the exposition of `snapshots` to `out`.
pub fn write(out: &mut impl Write, snapshots: &[BulkheadSnapshot]) -> fmt::Result {
    let pools: Vec<&BulkheadSnapshot> = snapshots
        .iter()
        .filter(|s| s.queue_capacity.is_some())
        .collect();
    let all: Vec<&BulkheadSnapshot> = snapshots.iter().collect();
    if all.is_empty() {
        return Ok(());
    }

    family(
        out,
        "bulkhead_info",
        "gauge",
        "A bulkhead and its kind; always 1.",
    )?;
    for s in &all {
        sample(
            out,
            "bulkhead_info",
            s,
            &[("kind", s.kind.as_str())],
            Value::Int(1),
        )?;
    }
    gauge(
        out,
        &all,
        "bulkhead_limit",
        "Concurrency limit in force: max_concurrent_calls (semaphore) or max_threads (thread pool), or the adaptive limit within it.",
        |s| Some(s.limit),
    )?;
    gauge(
        out,
        &all,
        "bulkhead_active_calls",
        "Calls running now: permits held, or tasks running on workers.",
        |s| Some(s.active),
    )?;
    gauge(
        out,
        &all,
        "bulkhead_available_calls",
        "Calls that could start now without waiting.",
        |s| Some(s.available),
    )?;
    gauge(
        out,
        &all,
        "bulkhead_waiting_calls",
        "Callers blocked or awaiting admission (max_wait, on_full: wait).",
        |s| Some(s.waiting),
    )?;
    gauge(
        out,
        &pools,
        "bulkhead_queue_depth",
        "Tasks waiting in the thread pool's queue.",
        |s| Some(s.queued),
    )?;
    gauge(
        out,
        &pools,
        "bulkhead_queue_capacity",
        "The thread pool's queue capacity.",
        |s| s.queue_capacity,
    )?;
    gauge(
        out,
        &pools,
        "bulkhead_pool_threads",
        "Worker threads alive.",
        |s| s.pool_size,
    )?;
    gauge(
        out,
        &pools,
        "bulkhead_pool_threads_largest",
        "The most worker threads ever alive at once.",
        |s| s.largest_pool_size,
    )?;
    gauge(
        out,
        &all,
        "bulkhead_saturation_level",
        "Saturation against the configured thresholds: 0 ok, 1 warning, 2 critical.",
        |s| Some(s.saturation as u32),
    )?;

    family(
        out,
        "bulkhead_permitted_calls_total",
        "counter",
        "Calls admitted: given a permit, or accepted by the thread pool.",
    )?;
    for s in &all {
        sample(
            out,
            "bulkhead_permitted_calls_total",
            s,
            &[],
            Value::Int(s.calls.permitted),
        )?;
    }
    family(
        out,
        "bulkhead_calls_total",
        "counter",
        "Calls by outcome: completed, panicked, cancelled, refused, reentrant.",
    )?;
    for s in &all {
        for (outcome, n) in s.calls.by_outcome() {
            sample(
                out,
                "bulkhead_calls_total",
                s,
                &[("outcome", outcome)],
                Value::Int(n),
            )?;
        }
    }
    family(
        out,
        "bulkhead_refusals_total",
        "counter",
        "Refused calls by reason: full, timeout, queue_timeout, rate_limited, shut_down.",
    )?;
    for s in &all {
        for (reason, n) in s.calls.refused.by_reason() {
            sample(
                out,
                "bulkhead_refusals_total",
                s,
                &[("reason", reason)],
                Value::Int(n),
            )?;
        }
    }
    let clustered: Vec<(&BulkheadSnapshot, u64)> = snapshots
        .iter()
        .filter_map(|s| Some((s, s.rate_limit_store_errors?)))
        .collect();
    if !clustered.is_empty() {
        family(
            out,
            "bulkhead_rate_limit_store_errors_total",
            "counter",
            "Decisions a cluster-wide rate limit's store (Redis) could not make; each followed on_store_error.",
        )?;
        for (s, n) in clustered {
            sample(
                out,
                "bulkhead_rate_limit_store_errors_total",
                s,
                &[],
                Value::Int(n),
            )?;
        }
    }

    family(
        out,
        "bulkhead_wait_seconds",
        "histogram",
        "How long admitted calls waited for a permit or for room in the pool.",
    )?;
    for s in &all {
        histogram(out, "bulkhead_wait_seconds", s, &s.wait_time)?;
    }
    if pools.iter().any(|s| s.queue_time.is_some()) {
        family(
            out,
            "bulkhead_queue_time_seconds",
            "histogram",
            "How long tasks waited in the thread pool's queue before a worker took them.",
        )?;
        for s in &pools {
            if let Some(queue_time) = &s.queue_time {
                histogram(out, "bulkhead_queue_time_seconds", s, queue_time)?;
            }
        }
    }
    Ok(())
}

enum Value {
    Int(u64),
    Seconds(f64),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(n) => write!(f, "{n}"),
            Value::Seconds(s) => write!(f, "{s}"),
        }
    }
}

fn family(out: &mut impl Write, name: &str, kind: &str, help: &str) -> fmt::Result {
    writeln!(out, "# HELP {name} {help}")?;
    writeln!(out, "# TYPE {name} {kind}")
}

fn gauge(
    out: &mut impl Write,
    snapshots: &[&BulkheadSnapshot],
    name: &str,
    help: &str,
    value: impl Fn(&BulkheadSnapshot) -> Option<u32>,
) -> fmt::Result {
    if snapshots.iter().all(|s| value(s).is_none()) {
        return Ok(());
    }
    family(out, name, "gauge", help)?;
    for s in snapshots {
        if let Some(v) = value(s) {
            sample(out, name, s, &[], Value::Int(u64::from(v)))?;
        }
    }
    Ok(())
}

fn histogram(
    out: &mut impl Write,
    name: &str,
    snapshot: &BulkheadSnapshot,
    h: &HistogramSnapshot,
) -> fmt::Result {
    let bucket = format!("{name}_bucket");
    for (bound, cumulative) in h.cumulative() {
        let le = match bound {
            Some(bound) => Value::Seconds(bound.as_secs_f64()).to_string(),
            None => "+Inf".to_owned(),
        };
        sample(
            out,
            &bucket,
            snapshot,
            &[("le", &le)],
            Value::Int(cumulative),
        )?;
    }
    sample(
        out,
        &format!("{name}_sum"),
        snapshot,
        &[],
        Value::Seconds(h.sum().as_secs_f64()),
    )?;
    sample(
        out,
        &format!("{name}_count"),
        snapshot,
        &[],
        Value::Int(h.count()),
    )
}

fn sample(
    out: &mut impl Write,
    name: &str,
    snapshot: &BulkheadSnapshot,
    labels: &[(&str, &str)],
    value: Value,
) -> fmt::Result {
    write!(out, "{name}{{bulkhead=\"")?;
    escape_label(out, &snapshot.name)?;
    out.write_char('"')?;
    for (key, v) in labels {
        write!(out, ",{key}=\"")?;
        escape_label(out, v)?;
        out.write_char('"')?;
    }
    writeln!(out, "}} {value}")
}

/// Label values escape `\`, `"` and newlines.
fn escape_label(out: &mut impl Write, value: &str) -> fmt::Result {
    for c in value.chars() {
        match c {
            '\\' => out.write_str("\\\\")?,
            '"' => out.write_str("\\\"")?,
            '\n' => out.write_str("\\n")?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        escape_label(&mut out, "a\"b\\c\nd").unwrap();
        assert_eq!(out, r#"a\"b\\c\nd"#);
    }

    #[test]
    fn bucket_bounds_print_as_plain_seconds() {
        let bounds: Vec<String> = crate::BUCKETS
            .iter()
            .map(|b| Value::Seconds(b.as_secs_f64()).to_string())
            .collect();
        assert_eq!(
            bounds,
            [
                "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                "0.1", "0.25", "0.5", "1", "2.5", "5", "10"
            ]
        );
    }
}

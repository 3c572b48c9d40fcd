//! Prometheus text exposition (format 0.0.4) of bulkhead snapshots, with no dependency.
//!
//! Serve [`encode_registry`]`(registry)` at `/metrics` with the [`CONTENT_TYPE`] header.
//! Every bulkhead becomes one label value, `bulkhead="<name>"`, of the families of
//! [`metric_families::FAMILIES`](crate::metric_families::FAMILIES) (the same table the
//! `metrics` bridge publishes from); [`encode_registry`] adds the registry's
//! `bulkhead_config_reloads_total`. Names follow the Prometheus conventions: base units,
//! `_total` counters, `_seconds` histograms. A family is never written without samples
//! (the pool-only families are left out when no bulkhead is a pool).
//!
//! A task a pool admitted and then failed from its queue (`queue_timeout`, `shut_down`) is
//! counted both `outcome="cancelled"` and `outcome="refused"` (and under its reason).
//! Histogram buckets are [`BUCKETS`](crate::BUCKETS), 100 µs to 10 s, the same for every
//! bulkhead.
//!
//! ```
//! use bulkhead::config::{BulkheadConfig, SemaphoreConfig};
//! use bulkhead::{Registry, prometheus};
//!
//! let registry = Registry::new();
//! registry.register("payment", &BulkheadConfig::semaphore(SemaphoreConfig::default())).unwrap();
//! let text = prometheus::encode_registry(&registry);
//! assert!(text.contains("bulkhead_active_calls{bulkhead=\"payment\"} 0\n"));
//! assert!(text.contains("bulkhead_wait_seconds_bucket{bulkhead=\"payment\",le=\"+Inf\"} 0\n"));
//! ```

use std::fmt::{self, Write};

use crate::metric_families::{FAMILIES, MetricType, Series, Sources, Value as Sample};
use crate::telemetry::HistogramSnapshot;
use crate::{BulkheadSnapshot, Registry, ReloadStatus};

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition of every bulkhead of `registry`, sorted by name, and of its reloads.
pub fn encode_registry(registry: &Registry) -> String {
    let snapshots = registry.snapshot();
    let reloads = registry.reload_status();
    let mut out = String::with_capacity(1024 + snapshots.len() * 4096);
    // Writing to a String cannot fail.
    let _ = write_sources(
        &mut out,
        Sources {
            snapshots: &snapshots,
            reloads: Some(&reloads),
        },
    );
    out
}

/// The exposition of `snapshots`, in their order.
pub fn encode(snapshots: &[BulkheadSnapshot]) -> String {
    let mut out = String::with_capacity(1024 + snapshots.len() * 4096);
    // Writing to a String cannot fail.
    let _ = write(&mut out, snapshots);
    out
}

/// Writes the exposition of `snapshots` to `out`.
///
/// # Errors
///
/// Only what `out` returns: writing to a `String` never fails.
pub fn write(out: &mut impl Write, snapshots: &[BulkheadSnapshot]) -> fmt::Result {
    write_sources(
        out,
        Sources {
            snapshots,
            reloads: None,
        },
    )
}

/// Writes the exposition of `snapshots` and of the reloads `status` to `out`.
///
/// # Errors
///
/// Only what `out` returns: writing to a `String` never fails.
pub fn write_with_reloads(
    out: &mut impl Write,
    snapshots: &[BulkheadSnapshot],
    status: &ReloadStatus,
) -> fmt::Result {
    write_sources(
        out,
        Sources {
            snapshots,
            reloads: Some(status),
        },
    )
}

fn write_sources(out: &mut impl Write, sources: Sources<'_>) -> fmt::Result {
    for family in &FAMILIES {
        let mut result = Ok(());
        let mut header = false;
        family.series(sources, &mut |series: Series<'_>| {
            if result.is_err() {
                return;
            }
            if !header {
                header = true;
                result = writeln!(out, "# HELP {} {}", family.name, family.help).and_then(|()| {
                    writeln!(
                        out,
                        "# TYPE {} {}",
                        family.name,
                        family.metric_type.as_str()
                    )
                });
                if result.is_err() {
                    return;
                }
            }
            let labels: Vec<(&str, &str)> = family
                .labels
                .iter()
                .copied()
                .zip(series.labels.iter().copied())
                .collect();
            result = match (family.metric_type, series.value) {
                (MetricType::Histogram, Sample::Histogram(h)) => {
                    histogram(out, family.name, &labels, h)
                }
                (_, Sample::Gauge(n) | Sample::Counter(n)) => {
                    sample(out, family.name, &labels, Value::Int(n))
                }
                // The table pairs histograms with histogram values.
                _ => Ok(()),
            };
        });
        result?;
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

fn histogram(
    out: &mut impl Write,
    name: &str,
    labels: &[(&str, &str)],
    h: &HistogramSnapshot,
) -> fmt::Result {
    let bucket = format!("{name}_bucket");
    for (bound, cumulative) in h.cumulative() {
        let le = match bound {
            Some(bound) => Value::Seconds(bound.as_secs_f64()).to_string(),
            None => "+Inf".to_owned(),
        };
        let mut with_le = labels.to_vec();
        with_le.push(("le", &le));
        sample(out, &bucket, &with_le, Value::Int(cumulative))?;
    }
    sample(
        out,
        &format!("{name}_sum"),
        labels,
        Value::Seconds(h.sum().as_secs_f64()),
    )?;
    sample(out, &format!("{name}_count"), labels, Value::Int(h.count()))
}

fn sample(out: &mut impl Write, name: &str, labels: &[(&str, &str)], value: Value) -> fmt::Result {
    out.write_str(name)?;
    for (i, (key, v)) in labels.iter().enumerate() {
        out.write_str(if i == 0 { "{" } else { "," })?;
        write!(out, "{key}=\"")?;
        escape_label(out, v)?;
        out.write_char('"')?;
    }
    if !labels.is_empty() {
        out.write_char('}')?;
    }
    writeln!(out, " {value}")
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

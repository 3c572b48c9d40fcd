//! The same figures as [`crate::prometheus`], published through the [`metrics`] crate
//! facade (feature `metrics`), for services that already export with a `metrics` recorder
//! (`metrics-exporter-prometheus`, StatsD, OpenTelemetry bridges…).
//!
//! Call [`publish_registry`] periodically (every scrape, or every few seconds): it reads a
//! snapshot of every bulkhead and sets the recorder's gauges and counters (`absolute`), so it
//! adds nothing to any call path. [`describe`] registers the descriptions and units once.
//!
//! Names, types, labels and help come from the same table as the Prometheus text,
//! [`metric_families::FAMILIES`](crate::metric_families::FAMILIES). A recorder cannot be
//! handed a histogram's buckets, so a histogram family `<name>` is published as the series
//! a Prometheus histogram consists of: counters `<name>_bucket` (label `le`, cumulative)
//! and `<name>_count`, and a gauge `<name>_sum` (seconds). The values are those of the
//! text exposition, and `histogram_quantile` works on them as on a native histogram.
//!
//! ```
//! use bulkhead::{Registry, metrics_bridge};
//! let registry = Registry::new();
//! metrics_bridge::describe();
//! metrics_bridge::publish_registry(&registry); // no recorder installed: a no-op
//! ```

use metrics::{Label, Unit, counter, describe_counter, describe_gauge, gauge};

use crate::metric_families::{FAMILIES, MetricType, Series, Sources, Value};
use crate::{BulkheadSnapshot, HistogramSnapshot, Registry, ReloadStatus};

/// Registers the description and unit of every metric with the installed recorder.
pub fn describe() {
    for family in &FAMILIES {
        let (name, help) = (family.name, family.help);
        match family.metric_type {
            MetricType::Gauge => describe_gauge!(name, Unit::Count, help),
            MetricType::Counter => describe_counter!(name, Unit::Count, help),
            MetricType::Histogram => {
                describe_counter!(format!("{name}_bucket"), Unit::Count, help);
                describe_counter!(format!("{name}_count"), Unit::Count, help);
                describe_gauge!(format!("{name}_sum"), Unit::Seconds, help);
            }
        }
    }
}

/// Publishes every bulkhead of `registry`, and its reloads.
pub fn publish_registry(registry: &Registry) {
    let snapshots = registry.snapshot();
    let reloads = registry.reload_status();
    publish_sources(Sources {
        snapshots: &snapshots,
        reloads: Some(&reloads),
    });
}

/// Publishes `snapshots` to the installed recorder (a no-op without one).
pub fn publish(snapshots: &[BulkheadSnapshot]) {
    publish_sources(Sources {
        snapshots,
        reloads: None,
    });
}

/// Publishes `snapshots` and the reloads `status` to the installed recorder.
pub fn publish_with_reloads(snapshots: &[BulkheadSnapshot], status: &ReloadStatus) {
    publish_sources(Sources {
        snapshots,
        reloads: Some(status),
    });
}

fn publish_sources(sources: Sources<'_>) {
    for family in &FAMILIES {
        family.series(sources, &mut |series: Series<'_>| {
            let labels: Vec<Label> = family
                .labels
                .iter()
                .zip(series.labels)
                .map(|(key, value)| Label::new(*key, (*value).to_owned()))
                .collect();
            match series.value {
                Value::Gauge(n) => gauge!(family.name, labels).set(n as f64),
                Value::Counter(n) => counter!(family.name, labels).absolute(n),
                Value::Histogram(h) => histogram(family.name, labels, h),
            }
        });
    }
}

fn histogram(name: &str, labels: Vec<Label>, h: &HistogramSnapshot) {
    for (bound, cumulative) in h.cumulative() {
        let le = bound.map_or_else(|| "+Inf".to_owned(), |b| b.as_secs_f64().to_string());
        let mut with_le = labels.clone();
        with_le.push(Label::new("le", le));
        counter!(format!("{name}_bucket"), with_le).absolute(cumulative);
    }
    gauge!(format!("{name}_sum"), labels.clone()).set(h.sum().as_secs_f64());
    counter!(format!("{name}_count"), labels).absolute(h.count());
}

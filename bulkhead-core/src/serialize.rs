//! `serde::Serialize` (feature `serde`) for what an operator reads: snapshots, their
//! histograms, reload reports and statuses, shutdown reports (`BulkheadShutdown` tagged
//! with `kind`), as JSON for an admin endpoint or a log.
//!
//! Structs serialize field by field under their Rust names; the types below are written
//! by hand:
//!
//! * [`BulkheadName`] and [`SaturationLevel`]: strings (`"payment"`, `"warning"`).
//! * [`HistogramSnapshot`]: `{ "count", "sum_seconds", "p50_seconds", "p99_seconds",
//!   "buckets": [{ "le_seconds", "count" }] }`, buckets cumulative as in Prometheus, the
//!   last one's `le_seconds` `null` (`+Inf`); quantiles `null` when nothing was recorded.
//!
//! ```
//! use bulkhead::config::SemaphoreConfig;
//! use bulkhead::SemaphoreBulkhead;
//!
//! let search = SemaphoreBulkhead::new("search", &SemaphoreConfig::default());
//! search.call(|| ()).unwrap();
//! let json = serde_json::to_value(search.snapshot()).unwrap();
//! assert_eq!(json["name"], "search");
//! assert_eq!(json["kind"], "semaphore");
//! assert_eq!(json["calls"]["permitted"], 1);
//! assert_eq!(json["wait_time"]["count"], 1);
//! assert_eq!(json["saturation"], "ok");
//! ```

use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::{BulkheadName, HistogramSnapshot, SaturationLevel};

impl Serialize for BulkheadName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl Serialize for SaturationLevel {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One cumulative bucket of a serialized histogram.
#[derive(serde::Serialize)]
struct Bucket {
    le_seconds: Option<f64>,
    count: u64,
}

impl Serialize for HistogramSnapshot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let seconds = |d: Option<std::time::Duration>| d.map(|d| d.as_secs_f64());
        let buckets: Vec<Bucket> = self
            .cumulative()
            .map(|(bound, count)| Bucket {
                le_seconds: seconds(bound),
                count,
            })
            .collect();
        let mut s = serializer.serialize_struct("HistogramSnapshot", 5)?;
        s.serialize_field("count", &self.count())?;
        s.serialize_field("sum_seconds", &self.sum().as_secs_f64())?;
        s.serialize_field("p50_seconds", &seconds(self.p50()))?;
        s.serialize_field("p99_seconds", &seconds(self.p99()))?;
        s.serialize_field("buckets", &buckets)?;
        s.end()
    }
}

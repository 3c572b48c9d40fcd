//! The one table of metric families: name, type, help, labels, and where each value comes
//! from. Both the Prometheus text ([`crate::prometheus`]) and the `metrics` crate bridge
//! (`metrics_bridge`, feature `metrics`) are written from [`FAMILIES`], so the two cannot
//! publish different names, types or labels.
//!
//! Every per-bulkhead series carries the label `bulkhead="<name>"` first; the table lists
//! the labels beside it. A histogram's series are `<name>_bucket` (with `le`, cumulative,
//! bounds [`BUCKETS`](crate::BUCKETS)), `<name>_sum` (seconds) and `<name>_count`.
//!
//! | family | type | labels | meaning |
//! |---|---|---|---|
//! | `bulkhead_info` | gauge | `bulkhead`, `kind` | always 1; `kind` is `semaphore` or `thread-pool` |
//! | `bulkhead_limit` | gauge | `bulkhead` | concurrency limit in force (`max_concurrent_calls` / `max_threads`, or the adaptive limit within it) |
//! | `bulkhead_active_calls` | gauge | `bulkhead` | calls running now |
//! | `bulkhead_available_calls` | gauge | `bulkhead` | calls that could start now without waiting |
//! | `bulkhead_waiting_calls` | gauge | `bulkhead` | callers blocked or awaiting admission |
//! | `bulkhead_queue_depth` | gauge | `bulkhead` | tasks in a pool's queue (the figure to page on) |
//! | `bulkhead_queue_capacity` | gauge | `bulkhead` | a pool's `queue_capacity` |
//! | `bulkhead_pool_threads` | gauge | `bulkhead` | a pool's worker threads alive |
//! | `bulkhead_pool_threads_largest` | gauge | `bulkhead` | most worker threads ever alive at once |
//! | `bulkhead_saturation_level` | gauge | `bulkhead` | 0 ok, 1 warning, 2 critical |
//! | `bulkhead_permitted_calls_total` | counter | `bulkhead` | calls admitted |
//! | `bulkhead_calls_total` | counter | `bulkhead`, `outcome` | `completed`, `panicked`, `cancelled`, `refused`, `reentrant` |
//! | `bulkhead_refusals_total` | counter | `bulkhead`, `reason` | `full`, `timeout`, `queue_timeout`, `rate_limited`, `shut_down`, `key_limit` |
//! | `bulkhead_rate_limit_store_errors_total` | counter | `bulkhead` | decisions a `scope: cluster` rate limit's store could not make (only bulkheads with one) |
//! | `bulkhead_cluster_leases_held` | gauge | `bulkhead` | calls of this process running on a lease of a cluster-wide concurrency limit (`cluster:` only) |
//! | `bulkhead_cluster_leases_unleased` | gauge | `bulkhead` | calls admitted by `on_store_error` without a lease while Redis could not answer |
//! | `bulkhead_cluster_leases_renewed_total` | counter | `bulkhead` | leases extended by the heartbeat |
//! | `bulkhead_cluster_leases_expired_total` | counter | `bulkhead` | leases found gone while their call ran (a stall longer than `lease_ttl`, Redis restarted), added again |
//! | `bulkhead_cluster_leases_reclaimed_total` | counter | `bulkhead` | expired leases (a crashed process's) removed by this process |
//! | `bulkhead_cluster_lease_store_errors_total` | counter | `bulkhead` | lease requests Redis could not answer (calls among them followed `on_store_error`) |
//! | `bulkhead_fallbacks_total` | counter | `bulkhead` | refused calls answered by a fallback |
//! | `bulkhead_call_timeouts_total` | counter | `bulkhead` | admitted calls whose caller got `CallTimeout` (also in their outcome) |
//! | `bulkhead_discarded_results_total` | counter | `bulkhead` | sync pool calls finished after their caller's call timeout: result thrown away |
//! | `bulkhead_wait_seconds` | histogram | `bulkhead` | wait of admitted calls for a permit or for room |
//! | `bulkhead_queue_time_seconds` | histogram | `bulkhead` | time tasks spent in a pool's queue (sampled: [`BulkheadSnapshot::queue_time`](crate::BulkheadSnapshot::queue_time)) |
//! | `bulkhead_call_duration_seconds` | histogram | `bulkhead` | how long timed calls ran ([`events::time_calls`](crate::events::time_calls)) |
//! | `bulkhead_partition_guaranteed_calls` | gauge | `bulkhead`, `partition` | calls a partition is guaranteed (a semaphore's permits, a pool's running-or-queued slots): `floor(share × limit)` (partitioned bulkheads only; at most 16 partitions each) |
//! | `bulkhead_partition_in_flight_calls` | gauge | `bulkhead`, `partition` | a partition's calls holding or waiting for a permit |
//! | `bulkhead_partition_admitted_calls_total` | counter | `bulkhead`, `partition` | a partition's calls admitted |
//! | `bulkhead_partition_borrowed_calls_total` | counter | `bulkhead`, `partition` | of those, admitted at or above the guarantee (borrowed) |
//! | `bulkhead_partition_refusals_total` | counter | `bulkhead`, `partition` | a partition's calls refused, any reason |
//! | `bulkhead_keys_tracked` | gauge | `bulkhead` | keys with a call in flight (`per_key` only; never a label per key) |
//! | `bulkhead_keys_at_limit` | gauge | `bulkhead` | of those, keys holding their whole `per_key` cap |
//! | `bulkhead_config_reloads_total` | counter | `result` | config reloads, `ok` (applied) or `error` (refused, nothing applied) |
//!
//! ```
//! use bulkhead::metric_families::{FAMILIES, MetricType};
//! let wait = FAMILIES.iter().find(|f| f.name == "bulkhead_wait_seconds").unwrap();
//! assert_eq!(wait.metric_type, MetricType::Histogram);
//! ```

use crate::{BulkheadSnapshot, HistogramSnapshot, ReloadStatus};

/// The type of a metric family, as Prometheus names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricType {
    /// A value that goes up and down.
    Gauge,
    /// A count that only grows.
    Counter,
    /// A distribution of durations, in seconds, over [`BUCKETS`](crate::BUCKETS).
    Histogram,
}

impl MetricType {
    /// `gauge`, `counter` or `histogram`.
    pub const fn as_str(self) -> &'static str {
        match self {
            MetricType::Gauge => "gauge",
            MetricType::Counter => "counter",
            MetricType::Histogram => "histogram",
        }
    }
}

/// One metric family of the table.
#[derive(Debug)]
#[non_exhaustive]
pub struct MetricFamily {
    /// The family's name (`bulkhead_…`).
    pub name: &'static str,
    /// Gauge, counter or histogram.
    pub metric_type: MetricType,
    /// One sentence saying what it measures.
    pub help: &'static str,
    /// Its labels, `bulkhead` first for per-bulkhead families (a histogram's `le` not
    /// included).
    pub labels: &'static [&'static str],
    source: Source,
}

/// Receives one series: its label values beside `bulkhead`, and its value.
type Emit<'e> = &'e mut dyn FnMut(&[&str], Value<'_>);

/// Where a family's values come from.
#[derive(Debug)]
enum Source {
    /// One series per bulkhead snapshot with a value (`None`: not this kind of bulkhead).
    Gauge(fn(&BulkheadSnapshot) -> Option<u32>),
    /// One or more series per bulkhead snapshot.
    Bulkhead(fn(&BulkheadSnapshot, Emit<'_>)),
    /// One counter per bulkhead snapshot with a cluster-wide concurrency limit.
    Leases(fn(&crate::LeaseSnapshot) -> u64),
    /// One series per partition of each bulkhead snapshot.
    Partitions(fn(&crate::PartitionSnapshot) -> Value<'static>),
    /// The registry's reload counters.
    Reloads(fn(&ReloadStatus, Emit<'_>)),
}

/// One value of a series.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Value<'a> {
    Gauge(u64),
    Counter(u64),
    Histogram(&'a HistogramSnapshot),
}

/// One series of a family: its label values (in the order of [`MetricFamily::labels`])
/// and its value.
pub(crate) struct Series<'a> {
    pub labels: &'a [&'a str],
    pub value: Value<'a>,
}

/// What the families are read from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sources<'a> {
    pub snapshots: &'a [BulkheadSnapshot],
    /// `None` for an exposition of snapshots alone.
    pub reloads: Option<&'a ReloadStatus>,
}

impl MetricFamily {
    /// Calls `each` with every series of this family, bulkhead by bulkhead.
    pub(crate) fn series(&self, sources: Sources<'_>, each: &mut dyn FnMut(Series<'_>)) {
        match self.source {
            Source::Gauge(value) => {
                for snapshot in sources.snapshots {
                    if let Some(v) = value(snapshot) {
                        each(Series {
                            labels: &[snapshot.name.as_str()],
                            value: Value::Gauge(u64::from(v)),
                        });
                    }
                }
            }
            Source::Bulkhead(values) => {
                for snapshot in sources.snapshots {
                    let name = snapshot.name.as_str();
                    values(snapshot, &mut |labels, value| {
                        let mut all = [name; 2];
                        let labels: &[&str] = match labels {
                            [] => &all[..1],
                            [one] => {
                                all[1] = one;
                                &all[..]
                            }
                            // No family has more than one label beside `bulkhead`.
                            _ => return,
                        };
                        each(Series { labels, value });
                    });
                }
            }
            Source::Leases(value) => {
                for snapshot in sources.snapshots {
                    if let Some(leases) = &snapshot.leases {
                        each(Series {
                            labels: &[snapshot.name.as_str()],
                            value: Value::Counter(value(leases)),
                        });
                    }
                }
            }
            Source::Partitions(value) => {
                for snapshot in sources.snapshots {
                    for partition in &snapshot.partitions {
                        each(Series {
                            labels: &[snapshot.name.as_str(), partition.name.as_str()],
                            value: value(partition),
                        });
                    }
                }
            }
            Source::Reloads(values) => {
                if let Some(status) = sources.reloads {
                    values(status, &mut |labels, value| each(Series { labels, value }));
                }
            }
        }
    }
}

const fn gauge(
    name: &'static str,
    help: &'static str,
    value: fn(&BulkheadSnapshot) -> Option<u32>,
) -> MetricFamily {
    MetricFamily {
        name,
        metric_type: MetricType::Gauge,
        help,
        labels: &["bulkhead"],
        source: Source::Gauge(value),
    }
}

const fn per_bulkhead(
    name: &'static str,
    metric_type: MetricType,
    help: &'static str,
    labels: &'static [&'static str],
    values: fn(&BulkheadSnapshot, Emit<'_>),
) -> MetricFamily {
    MetricFamily {
        name,
        metric_type,
        help,
        labels,
        source: Source::Bulkhead(values),
    }
}

/// A counter of a cluster-wide concurrency limit's leases (only bulkheads with one).
const fn lease_counter(
    name: &'static str,
    help: &'static str,
    value: fn(&crate::LeaseSnapshot) -> u64,
) -> MetricFamily {
    MetricFamily {
        name,
        metric_type: MetricType::Counter,
        help,
        labels: &["bulkhead"],
        source: Source::Leases(value),
    }
}

/// One series per partition of each partitioned bulkhead (bounded: at most 16 each).
const fn per_partition(
    name: &'static str,
    metric_type: MetricType,
    help: &'static str,
    value: fn(&crate::PartitionSnapshot) -> Value<'static>,
) -> MetricFamily {
    MetricFamily {
        name,
        metric_type,
        help,
        labels: &["bulkhead", "partition"],
        source: Source::Partitions(value),
    }
}

/// Every metric family, in the order they are published.
pub static FAMILIES: [MetricFamily; 34] = [
    per_bulkhead(
        "bulkhead_info",
        MetricType::Gauge,
        "A bulkhead and its kind; always 1.",
        &["bulkhead", "kind"],
        |s, each| each(&[s.kind.as_str()], Value::Gauge(1)),
    ),
    gauge(
        "bulkhead_limit",
        "Concurrency limit in force: max_concurrent_calls (semaphore) or max_threads (thread pool), or the adaptive limit within it.",
        |s| Some(s.limit),
    ),
    gauge(
        "bulkhead_active_calls",
        "Calls running now: permits held, or tasks running on workers.",
        |s| Some(s.active),
    ),
    gauge(
        "bulkhead_available_calls",
        "Calls that could start now without waiting.",
        |s| Some(s.available),
    ),
    gauge(
        "bulkhead_waiting_calls",
        "Callers blocked or awaiting admission (max_wait, on_full: wait).",
        |s| Some(s.waiting),
    ),
    gauge(
        "bulkhead_queue_depth",
        "Tasks waiting in the thread pool's queue.",
        |s| s.queue_capacity.map(|_| s.queued),
    ),
    gauge(
        "bulkhead_queue_capacity",
        "The thread pool's queue capacity.",
        |s| s.queue_capacity,
    ),
    gauge("bulkhead_pool_threads", "Worker threads alive.", |s| {
        s.pool_size
    }),
    gauge(
        "bulkhead_pool_threads_largest",
        "The most worker threads ever alive at once.",
        |s| s.largest_pool_size,
    ),
    gauge(
        "bulkhead_saturation_level",
        "Saturation against the configured thresholds: 0 ok, 1 warning, 2 critical.",
        |s| Some(s.saturation as u32),
    ),
    per_bulkhead(
        "bulkhead_permitted_calls_total",
        MetricType::Counter,
        "Calls admitted: given a permit, or accepted by the thread pool.",
        &["bulkhead"],
        |s, each| each(&[], Value::Counter(s.calls.permitted)),
    ),
    per_bulkhead(
        "bulkhead_calls_total",
        MetricType::Counter,
        "Calls by outcome: completed, panicked, cancelled, refused, reentrant.",
        &["bulkhead", "outcome"],
        |s, each| {
            for (outcome, n) in s.calls.by_outcome() {
                each(&[outcome], Value::Counter(n));
            }
        },
    ),
    per_bulkhead(
        "bulkhead_refusals_total",
        MetricType::Counter,
        "Refused calls by reason: full, timeout, queue_timeout, rate_limited, shut_down, key_limit.",
        &["bulkhead", "reason"],
        |s, each| {
            for (reason, n) in s.calls.refused.by_reason() {
                each(&[reason], Value::Counter(n));
            }
        },
    ),
    per_bulkhead(
        "bulkhead_rate_limit_store_errors_total",
        MetricType::Counter,
        "Decisions a cluster-wide rate limit's store (Redis) could not make; each followed on_store_error.",
        &["bulkhead"],
        |s, each| {
            if let Some(errors) = s.rate_limit_store_errors {
                each(&[], Value::Counter(errors));
            }
        },
    ),
    gauge(
        "bulkhead_cluster_leases_held",
        "Calls of this process running on a lease of a cluster-wide concurrency limit (cluster:).",
        |s| s.leases.as_ref().map(|l| l.held),
    ),
    gauge(
        "bulkhead_cluster_leases_unleased",
        "Calls of this process admitted by on_store_error without a lease (Redis could not answer).",
        |s| s.leases.as_ref().map(|l| l.unleased),
    ),
    lease_counter(
        "bulkhead_cluster_leases_renewed_total",
        "Leases of a cluster-wide concurrency limit extended by the heartbeat.",
        |l| l.renewed,
    ),
    lease_counter(
        "bulkhead_cluster_leases_expired_total",
        "Leases the heartbeat found gone while their call ran (a stall longer than lease_ttl, or Redis restarted); each was added again.",
        |l| l.expired,
    ),
    lease_counter(
        "bulkhead_cluster_leases_reclaimed_total",
        "Expired leases (of a crashed or stalled process) removed from the store by this process.",
        |l| l.reclaimed,
    ),
    lease_counter(
        "bulkhead_cluster_lease_store_errors_total",
        "Requests a cluster-wide concurrency limit's store (Redis) could not answer; the calls among them followed on_store_error.",
        |l| l.store_errors,
    ),
    per_bulkhead(
        "bulkhead_fallbacks_total",
        MetricType::Counter,
        "Refused calls answered by a fallback.",
        &["bulkhead"],
        |s, each| each(&[], Value::Counter(s.calls.fallbacks)),
    ),
    per_bulkhead(
        "bulkhead_call_timeouts_total",
        MetricType::Counter,
        "Admitted calls whose caller got CallTimeout (also counted in their outcome).",
        &["bulkhead"],
        |s, each| each(&[], Value::Counter(s.calls.timed_out)),
    ),
    per_bulkhead(
        "bulkhead_discarded_results_total",
        MetricType::Counter,
        "Synchronous pool calls that finished after their caller's call timeout; the result was thrown away.",
        &["bulkhead"],
        |s, each| each(&[], Value::Counter(s.calls.discarded)),
    ),
    per_bulkhead(
        "bulkhead_wait_seconds",
        MetricType::Histogram,
        "How long admitted calls waited for a permit or for room in the pool.",
        &["bulkhead"],
        |s, each| each(&[], Value::Histogram(&s.wait_time)),
    ),
    per_bulkhead(
        "bulkhead_queue_time_seconds",
        MetricType::Histogram,
        "How long tasks waited in the thread pool's queue before a worker took them.",
        &["bulkhead"],
        |s, each| {
            if let Some(queue_time) = &s.queue_time {
                each(&[], Value::Histogram(queue_time));
            }
        },
    ),
    per_bulkhead(
        "bulkhead_call_duration_seconds",
        MetricType::Histogram,
        "How long admitted calls ran (calls admitted while call timing was on).",
        &["bulkhead"],
        |s, each| each(&[], Value::Histogram(&s.call_duration)),
    ),
    per_partition(
        "bulkhead_partition_guaranteed_calls",
        MetricType::Gauge,
        "Calls a partition is guaranteed (a semaphore's permits, a pool's running-or-queued slots): floor(share x limit) of the limit in force.",
        |p| Value::Gauge(u64::from(p.guaranteed)),
    ),
    per_partition(
        "bulkhead_partition_in_flight_calls",
        MetricType::Gauge,
        "A partition's calls holding a permit or slot, or waiting for one.",
        |p| Value::Gauge(u64::from(p.in_flight)),
    ),
    per_partition(
        "bulkhead_partition_admitted_calls_total",
        MetricType::Counter,
        "A partition's calls admitted.",
        |p| Value::Counter(p.admitted),
    ),
    per_partition(
        "bulkhead_partition_borrowed_calls_total",
        MetricType::Counter,
        "A partition's calls admitted at or above its guarantee, on borrowed capacity.",
        |p| Value::Counter(p.borrowed),
    ),
    per_partition(
        "bulkhead_partition_refusals_total",
        MetricType::Counter,
        "A partition's calls refused, for any reason.",
        |p| Value::Counter(p.refused),
    ),
    per_bulkhead(
        "bulkhead_keys_tracked",
        MetricType::Gauge,
        "Keys with a call in flight, tracked by a per-key cap (at most max_keys).",
        &["bulkhead"],
        |s, each| {
            if let Some(per_key) = &s.per_key {
                each(&[], Value::Gauge(u64::from(per_key.keys_tracked)));
            }
        },
    ),
    per_bulkhead(
        "bulkhead_keys_at_limit",
        MetricType::Gauge,
        "Keys holding their whole per-key cap.",
        &["bulkhead"],
        |s, each| {
            if let Some(per_key) = &s.per_key {
                each(&[], Value::Gauge(u64::from(per_key.keys_at_limit)));
            }
        },
    ),
    MetricFamily {
        name: "bulkhead_config_reloads_total",
        metric_type: MetricType::Counter,
        help: "Config reloads: ok (applied) or error (refused, nothing applied).",
        labels: &["result"],
        source: Source::Reloads(|status, each| {
            each(&["ok"], Value::Counter(status.applied));
            each(&["error"], Value::Counter(status.refused));
        }),
    },
];

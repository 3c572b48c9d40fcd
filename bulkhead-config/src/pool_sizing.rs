//! Sizing a thread pool from numbers (a production sizing rule: concurrency × 1.5 headroom), capped by the client's timeout.
//!
//! core = QPS × latency × 1.5, max = 2 × core, queue = 2 s of burst at the expected QPS;
//! then, if a client timeout is given, the queue is shrunk until the worst-case wait
//! (queue × latency / max) fits within it. Invariant: with a timeout, the
//! suggestion never has a worst-case wait above it.

use crate::{Duration, ThreadPoolConfig};

/// Seconds of burst the queue absorbs (2–3 s is usual).
const BURST_SECONDS: f64 = 2.0;
/// Headroom over the average concurrency (the average concurrency × 1.5).
const CORE_HEADROOM: f64 = 1.5;

/// A suggested thread-pool size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suggestion {
    /// QPS × latency × 1.5, rounded up.
    pub core_threads: u32,
    /// Twice `core_threads`.
    pub max_threads: u32,
    /// Two seconds of burst, capped so the worst-case wait fits the timeout.
    pub queue_capacity: u32,
    /// The worst-case wait of a task at the back of a full queue, rounded up to a millisecond.
    pub worst_case_wait: Duration,
    /// True when the timeout made the queue smaller than the burst rule.
    pub capped_by_timeout: bool,
    /// The latency it was sized for.
    pub latency: Duration,
    /// The client timeout it was capped by.
    pub client_timeout: Option<Duration>,
}

/// Sizes a pool for `qps` calls per second that take `latency` each.
///
/// ```
/// use bulkhead_config::{suggest, Duration};
/// // A product-detail page, 200 QPS at 80ms → 24 core threads, 48 max.
/// let s = suggest(200.0, Duration::from_millis(80), Some(Duration::from_millis(800)));
/// assert_eq!((s.core_threads, s.max_threads), (24, 48));
/// assert!(s.worst_case_wait <= Duration::from_millis(800));
/// ```
pub fn suggest(qps: f64, latency: Duration, client_timeout: Option<Duration>) -> Suggestion {
    let qps = if qps.is_finite() { qps.max(0.0) } else { 0.0 };
    let latency_s = latency.as_std().as_secs_f64();
    let core = (qps * latency_s * CORE_HEADROOM).ceil().clamp(1.0, 5_000.0) as u32;
    let max = core * 2;
    let burst = (qps * BURST_SECONDS)
        .ceil()
        .clamp(0.0, f64::from(crate::MAX_QUEUE_CAPACITY)) as u32;
    let mut pool = ThreadPoolConfig {
        core_threads: core,
        max_threads: max,
        queue_capacity: burst,
        ..ThreadPoolConfig::default()
    };
    let mut capped = false;
    if let Some(timeout) = client_timeout {
        let fits = crate::lint::fitting_queue(&pool, latency, timeout);
        if u64::from(pool.queue_capacity) > fits {
            pool.queue_capacity = u32::try_from(fits).unwrap_or(u32::MAX);
            capped = true;
        }
    }
    Suggestion {
        core_threads: pool.core_threads,
        max_threads: pool.max_threads,
        queue_capacity: pool.queue_capacity,
        worst_case_wait: whole_millis(
            crate::worst_case_queue_wait(&pool, latency).unwrap_or_default(),
        ),
        capped_by_timeout: capped,
        latency,
        client_timeout,
    }
}

/// Rounds up to whole milliseconds, for display.
fn whole_millis(d: Duration) -> Duration {
    let millis = d.as_std().as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
}

impl Suggestion {
    /// The suggestion as a `bulkheads:` entry named `name`, with comments that show the
    /// arithmetic.
    pub fn to_yaml(&self, name: &str) -> String {
        let mut out = format!(
            "bulkheads:\n  {name}:\n    kind: thread-pool\n    core_threads: {}      # QPS × latency × 1.5\n    max_threads: {}       # 2 × core_threads\n    queue_capacity: {}    # 2s of burst{}; worst-case wait {}\n",
            self.core_threads,
            self.max_threads,
            self.queue_capacity,
            if self.capped_by_timeout {
                ", capped by the client timeout"
            } else {
                ""
            },
            self.worst_case_wait,
        );
        if let Some(timeout) = self.client_timeout {
            out.push_str(&format!("    max_queue_wait: {timeout}\n"));
        }
        out.push_str(&format!("    expected:\n      latency: {}\n", self.latency));
        if let Some(timeout) = self.client_timeout {
            out.push_str(&format!("      client_timeout: {timeout}\n"));
        }
        out
    }
}

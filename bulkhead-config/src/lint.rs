//! Lints: sizes that work but will hurt under load. Always warnings, never errors.
//!
//! Each lint carries a lesson of a real incident:
//!
//! - queue size is a latency decision — queue / throughput (throughput =
//!   `max_threads` / latency) is the worst-case wait, and waiting longer than the client's
//!   timeout is pure waste ([`worst_case_queue_wait`]);
//! - `caller-runs` makes the submitting thread a worker; when that thread is
//!   itself needed by the pool, it deadlocks;
//! - isolated pools add up (1 200 threads over all pools);
//! - a rate-limit period below a millisecond is Resilience4j's `500` = 500 ns trap;
//! - a partition's share is a guarantee only if it rounds to a slot, and only if a call
//!   below it may wait for one (`shares_lint`).

use crate::diagnostic::{Diagnostic, Diagnostics, Location, Severity};
use crate::{Config, Limits, OnFull, OnStoreError, RateLimitScope, ThreadPoolConfig};

/// Above this many threads over all pools, `lint` warns (1 200 threads on 8 cores took a service down).
pub const TOTAL_THREADS_WARNING: u64 = 1_000;
/// A queue this long without `max_queue_wait` or `expected` gets a warning.
pub const LONG_QUEUE_WARNING: u32 = 10_000;

/// The longest a task at the back of a full queue waits for a thread:
/// `queue_capacity × latency / max_threads`. `None` without threads.
///
/// ```
/// use bulkhead_config::{Duration, ThreadPoolConfig, worst_case_queue_wait};
/// let pool = ThreadPoolConfig { max_threads: 8, queue_capacity: 200, ..Default::default() };
/// // 8 threads at 100ms each serve 80 tasks/s: the 200th queued task waits 2.5s.
/// assert_eq!(
///     worst_case_queue_wait(&pool, Duration::from_millis(100)),
///     Some(Duration::from_millis(2500))
/// );
/// ```
pub fn worst_case_queue_wait(
    pool: &ThreadPoolConfig,
    latency: crate::Duration,
) -> Option<crate::Duration> {
    if pool.max_threads == 0 {
        return None;
    }
    let nanos = latency.as_std().as_nanos() * u128::from(pool.queue_capacity)
        / u128::from(pool.max_threads);
    let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
    Some(crate::Duration::from_std(std::time::Duration::from_nanos(
        nanos,
    )))
}

/// Finds where a key of a bulkhead was written: (key path, location).
pub(crate) type Locate<'a> = dyn Fn(&str, &[&str]) -> (String, Location) + 'a;

/// The warnings for a resolved config.
pub(crate) fn lint(config: &Config, locate: &Locate<'_>, document: &Location) -> Diagnostics {
    let mut out = Diagnostics::new();
    let mut warn = |name: &str, key: &[&str], message: String| {
        let (path, location) = locate(name, key);
        out.push(Diagnostic::at(Severity::Warning, &location, path, message));
    };
    let mut total_threads: u64 = 0;
    for (name, bulkhead) in &config.bulkheads {
        let expected = bulkhead.expected;
        let client_timeout = expected.and_then(|e| e.client_timeout);
        if let Some(adaptive) = &bulkhead.adaptive {
            for (key, message) in crate::adaptive::adaptive_lints(adaptive) {
                warn(name, &["adaptive", key], message);
            }
        }
        for (path, message) in crate::shares_lint::shares_lints(bulkhead) {
            warn(name, &path, message);
        }
        match &bulkhead.limits {
            Limits::ThreadPool(pool) => {
                total_threads += u64::from(pool.max_threads);
                if let Some(wait) = expected.and_then(|e| worst_case_queue_wait(pool, e.latency))
                    && let Some(timeout) = client_timeout.filter(|t| wait > *t)
                {
                    let latency = expected.map(|e| e.latency).unwrap_or_default();
                    let fits = fitting_queue(pool, latency, timeout);
                    warn(
                        name,
                        &["queue_capacity"],
                        format!(
                            "the worst-case queue wait is {wait} ({} queued × {latency} / {} threads), \
                             longer than the client timeout {timeout}: the last tasks run after \
                             their clients gave up; lower `queue_capacity` to {fits} or less, or \
                             set `max_queue_wait`",
                            pool.queue_capacity, pool.max_threads
                        ),
                    );
                }
                if let (Some(max), Some(timeout)) = (pool.max_queue_wait, client_timeout)
                    && max > timeout
                {
                    warn(
                        name,
                        &["max_queue_wait"],
                        format!(
                            "is {max}, longer than the client timeout {timeout}: a task may start \
                             after its client gave up; set it below {timeout}"
                        ),
                    );
                }
                if let (OnFull::Wait(wait), Some(timeout)) = (pool.on_full, client_timeout)
                    && wait > timeout
                {
                    warn(
                        name,
                        &["on_full", "wait"],
                        format!(
                            "waits {wait} for room, longer than the client timeout {timeout}: \
                             set it below {timeout}"
                        ),
                    );
                }
                if pool.on_full == OnFull::CallerRuns {
                    warn(
                        name,
                        &["on_full"],
                        "`caller-runs` runs the task on the submitting thread when the pool \
                          is full: if that thread is a worker of this pool, or the task waits for \
                          work queued on this pool, it deadlocks; use `abort` or \
                          `{ wait: … }` with a fallback unless callers are plain request threads"
                            .to_owned(),
                    );
                }
                if pool.max_queue_wait.is_some() && pool.queue_capacity == 0 {
                    warn(
                        name,
                        &["max_queue_wait"],
                        "has no effect: `queue_capacity` is 0, so no task ever \
                          waits in the queue; remove it or give the pool a queue"
                            .to_owned(),
                    );
                }
                if pool.queue_capacity > LONG_QUEUE_WARNING
                    && pool.max_queue_wait.is_none()
                    && expected.is_none()
                {
                    warn(
                        name,
                        &["queue_capacity"],
                        format!(
                            "a queue of {} with no `max_queue_wait`: queue / throughput is the \
                         worst-case wait; add `max_queue_wait`, or `expected: {{ \
                         latency, client_timeout }}` so the wait can be checked",
                            pool.queue_capacity
                        ),
                    );
                }
                if let Some(codel) = pool.codel
                    && codel.target >= codel.interval
                {
                    warn(
                        name,
                        &["codel", "target"],
                        format!(
                            "is {}, not shorter than `interval` {}: CoDel sheds work that queued \
                             longer than `target` while the queue stood for `interval`; use a \
                             target well below the interval (5ms / 100ms)",
                            codel.target, codel.interval
                        ),
                    );
                }
            }
            Limits::Semaphore(semaphore) => {
                if let Some(timeout) = client_timeout.filter(|t| semaphore.max_wait > *t) {
                    warn(
                        name,
                        &["max_wait"],
                        format!(
                            "is {}, longer than the client timeout {timeout}: callers wait for a \
                         permit after their client gave up; set it below {timeout}",
                            semaphore.max_wait
                        ),
                    );
                }
            }
            _ => {}
        }
        if let Some(rate) = &bulkhead.rate_limit {
            if !rate.refresh_period.is_zero()
                && rate.refresh_period < crate::Duration::from_millis(1)
            {
                warn(
                    name,
                    &["rate_limit", "refresh_period"],
                    format!(
                        "is {}, under a millisecond: Resilience4j's `500` meant 500 nanoseconds; \
                     did you mean {}ms?",
                        rate.refresh_period,
                        rate.refresh_period.as_std().as_nanos()
                    ),
                );
            }
            if let Some(timeout) = client_timeout.filter(|t| rate.timeout >= *t) {
                warn(
                    name,
                    &["rate_limit", "timeout"],
                    format!(
                        "is {}, not shorter than the client timeout {timeout}: a rate-limited call \
                     should fail fast (`0ms`) and answer 429 with `Retry-After`",
                        rate.timeout
                    ),
                );
            }
            match (rate.scope, &rate.store) {
                (RateLimitScope::Process, Some(_)) => warn(
                    name,
                    &["rate_limit", "store"],
                    "is set but `scope` is `process`: each process counts its own calls and \
                     the store is not used; add `scope: cluster` to share the limit"
                        .into(),
                ),
                (RateLimitScope::Cluster, Some(store))
                    if store.on_store_error == OnStoreError::Local && store.replicas == 1 =>
                {
                    warn(
                        name,
                        &["rate_limit", "store", "replicas"],
                        format!(
                            "is 1: while Redis is unreachable (`on_store_error: local`) every \
                             process admits the whole limit of {}; set `replicas` to the number \
                             of processes so each falls back to its share",
                            rate.limit_for_period
                        ),
                    );
                }
                _ => {}
            }
        }
        if let (Some(cluster), Limits::Semaphore(semaphore)) = (&bulkhead.cluster, &bulkhead.limits)
            && cluster.store.on_store_error == OnStoreError::Local
            && cluster.store.replicas == 1
        {
            warn(
                name,
                &["cluster", "store", "replicas"],
                format!(
                    "is 1: while Redis is unreachable (`on_store_error: local`) every process \
                     runs the whole limit of {} calls; set `replicas` to the number of \
                     processes so each falls back to its share",
                    semaphore.max_concurrent_calls
                ),
            );
        }
    }
    if total_threads > TOTAL_THREADS_WARNING {
        out.push(Diagnostic::at(
            Severity::Warning,
            document,
            "bulkheads",
            format!(
                "the pools may run {total_threads} threads in all (more than \
                 {TOTAL_THREADS_WARNING}): check the host's memory and cores, or use semaphores \
                 for calls that do not block"
            ),
        ));
    }
    out
}

/// The largest queue whose worst-case wait stays within `timeout`.
pub(crate) fn fitting_queue(
    pool: &ThreadPoolConfig,
    latency: crate::Duration,
    timeout: crate::Duration,
) -> u64 {
    let latency = latency.as_std().as_nanos().max(1);
    let fits = timeout.as_std().as_nanos() * u128::from(pool.max_threads) / latency;
    u64::try_from(fits).unwrap_or(u64::MAX)
}

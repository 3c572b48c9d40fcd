//! The rules every bulkhead config keeps, whichever way it arrives: a `bulkheads.yaml`
//! (checked at compile time and by `bulkhead check`), a deploy file or `BULKHEAD_…`
//! variable layered over it, or a config built in code and given to the registry. All of
//! them call [`validate_name`] and [`BulkheadConfig::problems`], so the rules and their
//! messages are the same everywhere.

use std::fmt;

use crate::{BulkheadConfig, ClusterLimitConfig, Limits, RateLimitScope, RateLimitStore};

/// The most threads one pool may have; more is a typo (a pool is sized from QPS × latency).
pub const MAX_THREADS_PER_POOL: u32 = 10_000;
/// The largest queue a pool may have: a queue is a latency decision, not a buffer.
pub const MAX_QUEUE_CAPACITY: u32 = 1_000_000;
/// The most permits a semaphore may have.
pub const MAX_CONCURRENT_CALLS: u32 = 1_000_000;
/// The most partitions one bulkhead may have (each is a metric series of its own).
pub const MAX_PARTITIONS: usize = 16;
/// The most keys a `per_key` limit may track at once (its memory bound).
pub const MAX_KEYS: u32 = 1_000_000;

/// One broken rule: the key it is about, inside the bulkhead, and what to do.
///
/// ```
/// use bulkhead::config::{BulkheadConfig, SemaphoreConfig};
/// let zero = BulkheadConfig::semaphore(SemaphoreConfig { max_concurrent_calls: 0, ..Default::default() });
/// let problems = zero.problems();
/// assert_eq!(problems[0].key, ["max_concurrent_calls"]);
/// assert_eq!(problems[0].to_string(), "max_concurrent_calls: is 0: no call could ever run; set it to at least 1");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// The key path inside the bulkhead (`["rate_limit", "limit_for_period"]`); empty for
    /// the name.
    pub key: Vec<&'static str>,
    /// What is wrong and what to do about it.
    pub message: String,
    /// The other key a rule between two keys compares `key` with (`core_threads` for
    /// `max_threads`), empty for a rule on `key` alone: a checker that knows where each was
    /// written points at this one when `key` was not written (a default, or a declaration
    /// a deploy is layered over) and this one was.
    pub also: Vec<&'static str>,
}

impl Problem {
    fn new(key: &[&'static str], message: impl Into<String>) -> Self {
        Problem {
            key: key.to_vec(),
            message: message.into(),
            also: Vec::new(),
        }
    }

    /// The same problem, comparing `key` with `also`.
    fn with_also(mut self, also: &[&'static str]) -> Self {
        self.also = also.to_vec();
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key.join("."))?;
        }
        f.write_str(&self.message)
    }
}

/// Why a bulkhead config was refused: its name and every rule it breaks.
///
/// `Display` writes each problem as `bulkheads.<name>.<key>: <message>`, the key paths a
/// config file would use, joined by `; `. Control characters in the name are escaped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct InvalidConfig {
    /// The bulkhead's name, as given.
    pub name: String,
    /// Every broken rule, the name's first.
    pub problems: Vec<Problem>,
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "bulkheads.{}", escape_controls(&self.name))?;
            if !problem.key.is_empty() {
                write!(f, ".{}", problem.key.join("."))?;
            }
            write!(f, ": {}", escape_controls(&problem.message))?;
        }
        Ok(())
    }
}

/// `text` with control characters written as escapes (`\n`, `\u{1b}`), so a name quoted
/// in a message keeps it on one line.
pub(crate) fn escape_controls(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escape = c.is_control();
            c.escape_debug()
                .filter(move |_| escape)
                .chain(Some(c).filter(|_| !escape))
        })
        .collect()
}

/// Checks a bulkhead's name: letters, digits, `-` and `_`, at least one. Names become
/// thread names, metric labels and `BULKHEAD_…` variable names, so nothing else is safe.
///
/// ```
/// assert!(bulkhead::config::validate_name("product-detail").is_ok());
/// let err = bulkhead::config::validate_name("../etc/passwd").unwrap_err();
/// assert!(err.message.contains("is not a valid name"));
/// ```
///
/// # Errors
///
/// A [`Problem`] when the name is empty or holds anything but letters, digits, `-` and `_`.
pub fn validate_name(name: &str) -> Result<(), Problem> {
    if name.is_empty() {
        return Err(Problem::new(
            &[],
            "the name is empty: give it the name `#[bulkhead(\"…\")]` uses",
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Problem::new(
            &[],
            format!(
                "`{name}` is not a valid name: use letters, digits, `-` and `_` (they become \
                 thread names, metric labels and `BULKHEAD_…` variables)"
            ),
        ));
    }
    Ok(())
}

impl BulkheadConfig {
    /// Checks `name` and every rule on the values; the error lists every problem.
    ///
    /// The registry calls it before building or resizing a bulkhead, and a config file is
    /// checked by the same rules, with the same messages.
    ///
    /// ```
    /// use bulkhead::config::{BulkheadConfig, ThreadPoolConfig};
    /// let pool = BulkheadConfig::thread_pool(ThreadPoolConfig { core_threads: 8, max_threads: 4, ..Default::default() });
    /// let err = pool.validate("search").unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "bulkheads.search.max_threads: is 4 but `core_threads` is 8: `max_threads` must be at \
    ///      least `core_threads`; raise it to 8 or lower `core_threads`"
    /// );
    /// ```
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] with every problem found: the name's and the values'.
    pub fn validate(&self, name: &str) -> Result<(), InvalidConfig> {
        let mut problems: Vec<Problem> = validate_name(name).err().into_iter().collect();
        problems.extend(self.problems());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InvalidConfig {
                name: name.to_owned(),
                problems,
            })
        }
    }

    /// Every rule the values break (the name is [`validate_name`]'s), in key order.
    pub fn problems(&self) -> Vec<Problem> {
        let out = std::cell::RefCell::new(Vec::new());
        let mut rule = |key: &[&'static str], message: String| {
            out.borrow_mut().push(Problem::new(key, message))
        };
        // A rule between two keys: `key` compared with `also`.
        let compare = |key: &[&'static str], also: &[&'static str], message: String| {
            out.borrow_mut()
                .push(Problem::new(key, message).with_also(also));
        };
        match &self.limits {
            Limits::Semaphore(s) => {
                if s.max_concurrent_calls == 0 {
                    rule(
                        &["max_concurrent_calls"],
                        "is 0: no call could ever run; set it to at least 1".into(),
                    );
                } else if s.max_concurrent_calls > MAX_CONCURRENT_CALLS {
                    rule(
                        &["max_concurrent_calls"],
                        format!(
                            "{} is absurd (the limit is {MAX_CONCURRENT_CALLS}): a bulkhead that \
                             never fills protects nothing; size it from QPS × latency \
                             (`bulkhead suggest`)",
                            s.max_concurrent_calls
                        ),
                    );
                }
            }
            Limits::ThreadPool(t) => {
                if t.max_threads == 0 {
                    rule(
                        &["max_threads"],
                        "is 0: no task could ever run; set it to at least 1".into(),
                    );
                }
                for (key, value) in [
                    ("core_threads", t.core_threads),
                    ("max_threads", t.max_threads),
                ] {
                    if value > MAX_THREADS_PER_POOL {
                        rule(
                            &[key],
                            format!(
                                "{value} threads is absurd (the limit is {MAX_THREADS_PER_POOL} \
                                 per pool): size it from QPS × latency (`bulkhead suggest`)"
                            ),
                        );
                    }
                }
                if t.max_threads < t.core_threads {
                    compare(
                        &["max_threads"],
                        &["core_threads"],
                        format!(
                            "is {} but `core_threads` is {}: `max_threads` must be at least \
                             `core_threads`; raise it to {} or lower `core_threads`",
                            t.max_threads, t.core_threads, t.core_threads
                        ),
                    );
                }
                if t.queue_capacity > MAX_QUEUE_CAPACITY {
                    rule(
                        &["queue_capacity"],
                        format!(
                            "{} is absurd (the limit is {MAX_QUEUE_CAPACITY}): a queue is a \
                             latency decision — queue / throughput is the worst-case wait",
                            t.queue_capacity
                        ),
                    );
                }
                if let Some(prefix) = &t.thread_name_prefix
                    && prefix.contains('\0')
                {
                    rule(
                        &["thread_name_prefix"],
                        "contains a NUL character, which a thread name cannot hold: remove it"
                            .into(),
                    );
                }
                if let Some(codel) = t.codel {
                    for (key, value) in [("target", codel.target), ("interval", codel.interval)] {
                        if value.is_zero() {
                            rule(
                                &["codel", key],
                                "is 0: CoDel needs a positive duration (Facebook uses 5ms \
                                 target, 100ms interval)"
                                    .into(),
                            );
                        }
                    }
                }
            }
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            rule(
                &["timeout"],
                "is 0: every call would time out at once; give the longest a call may run, such as `2s`, or remove the key"
                    .into(),
            );
        }
        if let Some(rate) = &self.rate_limit {
            if rate.limit_for_period == 0 {
                rule(
                    &["rate_limit", "limit_for_period"],
                    "is 0: no call would ever be admitted; set it to at least 1".into(),
                );
            }
            if rate.refresh_period.is_zero() {
                rule(
                    &["rate_limit", "refresh_period"],
                    "is 0: the period must be positive, such as `1s`".into(),
                );
            }
            match (rate.scope, &rate.store) {
                (RateLimitScope::Cluster, None) => rule(
                    &["rate_limit", "scope"],
                    "is `cluster`, but no `store` says where the shared count lives: add \
                     `store: { redis: \"redis://host:6379\" }` (or `redis: \"${REDIS_URL}\"`)"
                        .into(),
                ),
                (_, Some(store)) => store_problems(&["rate_limit", "store"], store, &mut rule),
                (RateLimitScope::Process, None) => {}
            }
        }
        if let Some(cluster) = &self.cluster {
            store_problems(&["cluster", "store"], &cluster.store, &mut rule);
            if !matches!(self.limits, Limits::Semaphore(_)) {
                rule(
                    &["cluster"],
                    "applies to a semaphore's `max_concurrent_calls`: a thread pool's threads \
                     are this process's own; use `kind: semaphore` for a limit shared by every \
                     replica"
                        .into(),
                );
            }
            let floor = ClusterLimitConfig::MIN_LEASE_TTL;
            let heartbeat = cluster.store.response_timeout.as_std().saturating_mul(3);
            if cluster.lease_ttl < floor || cluster.lease_ttl.as_std() < heartbeat {
                rule(
                    &["cluster", "lease_ttl"],
                    format!(
                        "is {}: a lease must outlive its heartbeat (every `lease_ttl / 3`, each \
                         waiting up to `store.response_timeout`, {}); give at least {floor} and \
                         3 × `response_timeout`, such as `10s`",
                        cluster.lease_ttl, cluster.store.response_timeout
                    ),
                );
            }
        }
        let s = self.saturation;
        for (key, value) in [
            ("active_warning", s.active_warning),
            ("active_critical", s.active_critical),
            ("queue_warning", s.queue_warning),
            ("queue_critical", s.queue_critical),
        ] {
            if !(value > 0.0 && value <= 1.0) {
                rule(
                    &["saturation", key],
                    format!(
                        "is {value}: a threshold is a fraction of capacity above 0 and at most 1, \
                         such as 0.8"
                    ),
                );
            }
        }
        for (warning, critical, w, c) in [
            (
                "active_warning",
                "active_critical",
                s.active_warning,
                s.active_critical,
            ),
            (
                "queue_warning",
                "queue_critical",
                s.queue_warning,
                s.queue_critical,
            ),
        ] {
            if w > c && c <= 1.0 && w <= 1.0 {
                compare(
                    &["saturation", warning],
                    &["saturation", critical],
                    format!("is {w}, above `{critical}` ({c}): warning must come before critical"),
                );
            }
        }
        if let Some(adaptive) = &self.adaptive {
            for (key, message) in crate::adaptive::adaptive_problems(adaptive, self) {
                rule(&["adaptive", key], message);
            }
        }
        for (key, message) in self.share_problems() {
            rule(key, message);
        }
        out.into_inner()
    }

    /// The rules on `partitions` and `per_key`.
    fn share_problems(&self) -> Vec<(&'static [&'static str], String)> {
        let mut out: Vec<(&'static [&'static str], String)> = Vec::new();
        let shares = &self.partitions.shares;
        if shares.len() > MAX_PARTITIONS {
            out.push((
                &["partitions"],
                format!(
                    "has {} partitions; at most {MAX_PARTITIONS} are allowed (each is a metric \
                     series): merge the small ones",
                    shares.len()
                ),
            ));
        }
        for (name, share) in shares {
            if validate_name(name).is_err() {
                out.push((
                    &["partitions"],
                    format!(
                        "`{}` is not a valid partition name: use letters, digits, `-` and `_` \
                         (it becomes a metric label and is named in code)",
                        escape_controls(name)
                    ),
                ));
            }
            if !(share.is_finite() && *share > 0.0 && *share <= 1.0) {
                out.push((
                    &["partitions"],
                    format!(
                        "`{}` has share {share}: a share is a fraction of the limit above 0 and \
                         at most 1, such as 0.2",
                        escape_controls(name)
                    ),
                ));
            }
        }
        let sum: f64 = shares.values().filter(|s| s.is_finite()).sum();
        if sum > 1.0 + 1e-9 {
            let each: Vec<String> = shares
                .iter()
                .map(|(name, share)| format!("{} {share}", escape_controls(name)))
                .collect();
            out.push((
                &["partitions"],
                format!(
                    "the shares add up to {} ({}): they divide one limit, so their sum is at \
                     most 1 (what is left over is guaranteed to no partition and any may \
                     borrow it)",
                    (sum * 1e6).round() / 1e6,
                    each.join(", ")
                ),
            ));
        }
        if let Limits::Semaphore(s) = &self.limits
            && !shares.is_empty()
            && !s.fair
        {
            out.push((
                &["fair"],
                "is false on a partitioned bulkhead: a partition below its share must get the \
                 next released permit, which only a fair bulkhead guarantees; remove `fair: \
                 false` or the partitions"
                    .into(),
            ));
        }
        if let Some(per_key) = &self.per_key {
            if per_key.max_concurrent_calls == 0 {
                out.push((
                    &["per_key", "max_concurrent_calls"],
                    "is 0: no key could ever run a call; set it to at least 1".into(),
                ));
            }
            if per_key.max_keys == 0 || per_key.max_keys > MAX_KEYS {
                out.push((
                    &["per_key", "max_keys"],
                    format!(
                        "is {}: it bounds the memory of the per-key counts; set it between 1 \
                         and {MAX_KEYS}",
                        per_key.max_keys
                    ),
                ));
            }
        }
        out
    }
}

/// The rules on a store (of a cluster rate limit or a cluster limit), at key path `at`.
fn store_problems(
    at: &[&'static str; 2],
    store: &RateLimitStore,
    rule: &mut impl FnMut(&[&'static str], String),
) {
    let key = |name: &'static str| [at[0], at[1], name];
    if let Some(problem) = redis_address_problem(&store.redis) {
        rule(&key("redis"), problem);
    }
    if store.replicas == 0 {
        rule(
            &key("replicas"),
            "is 0: it counts the processes that share the limit; set it to at least 1".into(),
        );
    }
    if store.response_timeout.is_zero() {
        rule(
            &key("response_timeout"),
            "is 0: no answer from Redis could arrive in time; set it to a few round trips, such \
             as `50ms`"
                .into(),
        );
    }
}

/// Why `redis` (a store's `redis` setting) is not a Redis URL nor `${NAME}`, if it is not.
fn redis_address_problem(redis: &str) -> Option<String> {
    if let Some(var) = redis.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
        let valid = var
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        return (!valid).then(|| {
            format!(
                "is `{}`: `${{…}}` must hold an environment variable name (letters, digits and \
                 `_`), such as `${{REDIS_URL}}`",
                escape_controls(redis)
            )
        });
    }
    crate::rate_limit::url_problem(redis).map(|problem| {
        format!(
            "is `{}`: it {problem}; or `${{NAME}}` reads the URL from the environment variable NAME",
            escape_controls(&crate::redact_url(redis))
        )
    })
}

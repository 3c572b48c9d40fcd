//! The kind-specific part of a bulkhead's config ([`Limits`]): a semaphore's permits and
//! wait, a thread pool's threads, queue and what it does when full.

use serde::{Deserialize, Serialize};

use crate::Duration;

/// The kind-specific part of a bulkhead's config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Limits {
    /// `kind: semaphore`.
    Semaphore(SemaphoreConfig),
    /// `kind: thread-pool`.
    ThreadPool(ThreadPoolConfig),
}

/// Limits of a semaphore bulkhead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct SemaphoreConfig {
    /// How many calls may run at once (at least 1). Default 25.
    pub max_concurrent_calls: u32,
    /// How long a caller waits for a permit before `Timeout`. Default `0ms`: fail fast with `Full`.
    pub max_wait: Duration,
    /// Waiters get permits in arrival order (FIFO). Default true.
    pub fair: bool,
}

impl Default for SemaphoreConfig {
    fn default() -> Self {
        SemaphoreConfig {
            max_concurrent_calls: 25,
            max_wait: Duration::ZERO,
            fair: true,
        }
    }
}

/// Limits of a thread-pool bulkhead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct ThreadPoolConfig {
    /// Threads kept alive even when idle. Default 4.
    pub core_threads: u32,
    /// The most threads the pool runs (at least `core_threads`). Default 4.
    pub max_threads: u32,
    /// How many submitted tasks may wait for a thread; 0 is a direct hand-off. Default 100.
    pub queue_capacity: u32,
    /// How long a thread above `core_threads` stays idle before it retires. Default `60s`.
    pub keep_alive: Duration,
    /// What a submission does when every thread is busy and the queue is full. Default `abort`.
    pub on_full: OnFull,
    /// The longest a call waits in the queue: at this deadline its caller gets `QueueTimeout`
    /// even while every worker is busy, and the task is taken out of the queue (it never
    /// runs). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queue_wait: Option<Duration>,
    /// Worker threads are named `<prefix><n>`. Default: the bulkhead's name followed by `-`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_name_prefix: Option<String>,
    /// The order queued tasks are taken in. Default `fifo`.
    pub queue_order: QueueOrder,
    /// Controlled-delay queue management (off by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codel: Option<CodelConfig>,
}

impl Default for ThreadPoolConfig {
    fn default() -> Self {
        ThreadPoolConfig {
            core_threads: 4,
            max_threads: 4,
            queue_capacity: 100,
            keep_alive: Duration::from_secs(60),
            on_full: OnFull::Abort,
            max_queue_wait: None,
            thread_name_prefix: None,
            queue_order: QueueOrder::Fifo,
            codel: None,
        }
    }
}

/// What a thread-pool submission does when every thread is busy and the queue is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum OnFull {
    /// Refuse at once with `Full`.
    #[default]
    Abort,
    /// Run the task on the caller's thread (back-pressure on the caller).
    CallerRuns,
    /// Wait up to this long for room, then refuse with `Timeout`: `{ wait: 2s }`.
    Wait(Duration),
}

/// The order a thread pool takes queued tasks in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum QueueOrder {
    /// Oldest first.
    #[default]
    Fifo,
    /// Oldest first while the queue drains; newest first while a queue is standing
    /// (Facebook's "Fail at Scale"), so fresh requests are served before stale ones.
    AdaptiveLifo,
}

/// Controlled delay (CoDel) for a thread pool's queue: while the queue has not been empty
/// for `interval`, queued work older than `target` is failed with `QueueTimeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CodelConfig {
    /// The queueing delay tolerated while the queue is standing (Facebook: 5ms).
    pub target: Duration,
    /// How long the queue must stay non-empty before CoDel sheds (Facebook: 100ms).
    pub interval: Duration,
}

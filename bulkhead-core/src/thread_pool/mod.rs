//! The thread-pool bulkhead: the public handle (see [`ThreadPoolBulkhead`] for its
//! semantics and invariants).
//!
//! Files: `shared` (what handles and workers share, and the lock order), `admission`
//! (slots, waiting for room, queueing an admitted call), `worker` (a worker thread's loop),
//! `lifecycle` (spawning workers, resize, shutdown), `queue` (order and staleness),
//! `room_waiters` (callers waiting for room), `job` (run-or-fail jobs and the crate's one
//! lifetime erasure), `call` (the sync call's paths), `async_job` (an async call's job),
//! `call_async` (the async call's future), `timed` (calls under the call timeout).

mod admission;
mod async_job;
mod call;
mod call_async;
mod inbox;
mod job;
mod lifecycle;
mod queue;
mod room_waiters;
mod shared;
mod shares;
mod timed;
mod worker;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod pool_tests;

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bulkhead_config_types::{AdaptiveConfig, Kind, RateLimitConfig, ThreadPoolConfig};

pub use call_async::CallAsync;
use shared::Shared;
pub use shares::PoolAdmission;
pub use timed::Timed;
pub(crate) use timed::cut_at_deadline;

use crate::async_caller::Caller;
use crate::clock::{Clock, system_clock};
use crate::rate_limit::RateLimiter;
use crate::snapshot::BulkheadSnapshot;
use crate::sync::Arc;
use crate::telemetry::Telemetry;
use crate::{BulkheadName, Refused};

/// A thread-pool bulkhead: a named pool of worker threads with a bounded queue.
///
/// Cheap to clone (an `Arc` inside); clones share the pool.
///
/// Calls run on worker threads named `<prefix><n>` (prefix default `<name>-`, `n` from 1).
/// A blocking caller waits for its body to finish, so the body may borrow the caller's
/// data; an async caller awaits the result without blocking its executor.
///
/// # Admission
///
/// A lock-free counter holds the calls admitted and not finished (running + queued); a call
/// is admitted only while it is below `max_threads + queue_capacity`. A refusal touches only
/// that counter and never allocates. An admitted call is handed to an idle worker if there
/// is one, else to a new worker while the pool has fewer than `max_threads`, else it waits
/// in the queue. Threads start lazily.
///
/// **Growth above `core_threads`.** Unlike Java's `ThreadPoolExecutor`, which starts threads
/// above core only once the queue is *full* (so a pool with a large queue effectively never
/// grows and tasks wait behind a few busy threads), this pool starts a thread whenever no
/// worker is idle, up to `max_threads`, and queues only when all `max_threads` are busy
/// (Tomcat's executor behaves the same way). `core_threads` is the number kept alive while
/// idle; threads above it retire after `keep_alive` idle, measured by the pool's clock.
/// `queue_capacity: 0` is a direct hand-off: a call runs at once or is refused.
///
/// **When full** (`on_full`): `abort` refuses with [`BulkheadError::Full`](crate::BulkheadError::Full); `caller-runs`
/// runs the body on the calling thread (counted as permitted and completed; after shutdown
/// such a call is refused with `ShutDown`, never silently discarded as Java's
/// `CallerRunsPolicy` does); `{ wait: d }` waits up to `d` on the clock for room, then
/// refuses with [`BulkheadError::Timeout`](crate::BulkheadError::Timeout) (a zero wait refuses with `Full`). Waiting callers
/// are woken one per freed slot, oldest first; a new caller that finds room takes it.
///
/// # Overload control (off by default)
///
/// * `max_queue_wait`: a task found older than this when a worker takes it is failed with
///   [`BulkheadError::QueueTimeout`](crate::BulkheadError::QueueTimeout) and never runs; its caller gets its input back. Use it
///   when callers have a deadline (a client timeout): work they have given up on is wasted.
/// * `codel { target, interval }`: while the queue has not been empty for `interval`, tasks
///   older than `target` are failed the same way (Facebook's "Fail at Scale": 5 ms / 100 ms).
///   Use it when load can exceed capacity for long: it keeps a standing queue short without
///   shedding during short bursts.
/// * `queue_order: adaptive-lifo`: FIFO normally, newest first while a queue is standing
///   (not empty for CoDel's `interval`, or 100 ms without CoDel). Use it with CoDel or
///   `max_queue_wait`: during overload the newest requests, whose clients still wait, are
///   served first, and the oldest age out.
///
/// # Invariants
///
/// * running ≤ `max_threads` (after a shrink, excess threads retire when their task ends);
/// * running + queued ≤ `max_threads + queue_capacity` (after a shrink, new work is refused
///   until the pool is back under the new limit);
/// * a shrink never cancels admitted work: running tasks finish, queued ones stay queued
///   and run (a call admitted just before the shrink may be queued above the new
///   capacity; that excess only drains);
/// * every admitted call runs exactly once or is failed exactly once, its input handed
///   back, never both, never neither. It is failed only with `QueueTimeout` (overload
///   control), `ShutDown`, or `Full` when no worker thread could be started for it (the OS
///   refused to spawn one);
/// * at rest, `permitted == completed + panicked + cancelled`, where `cancelled` counts
///   admitted calls that never ran: dropped async callers, and tasks failed from the queue
///   (which are also counted under their refusal reason).
///
/// # Re-entry
///
/// A worker is marked as inside its bulkhead; a call into the same bulkhead from a worker
/// (or from a caller-runs body) runs inline on the current thread, takes no slot and is
/// counted as `reentrant`, so a task waiting on its own full pool cannot deadlock.
///
/// # Live resize and shutdown
///
/// [`ThreadPoolBulkhead::resize`] changes every size and policy without blocking callers and
/// without cancelling admitted work. [`ThreadPoolBulkhead::shutdown`] stops admission, lets
/// running and queued work finish within a timeout, fails what remains with `ShutDown`,
/// joins the threads and reports counts. Dropping the last handle starts a shutdown without
/// waiting: workers finish the queue and exit.
///
/// # Example
///
/// ```
/// use bulkhead::config::ThreadPoolConfig;
/// use bulkhead::ThreadPoolBulkhead;
///
/// let pool = ThreadPoolBulkhead::new("payment", &ThreadPoolConfig::default());
/// let order = vec![3, 4];
/// // The body may borrow: the caller blocks until it has run on a worker.
/// let total = pool.call(&order, |order| order.iter().sum::<i32>()).unwrap();
/// assert_eq!(total, 7);
/// let name = pool.call((), |()| std::thread::current().name().map(String::from));
/// assert_eq!(name.unwrap().as_deref(), Some("payment-1"));
/// ```
#[derive(Clone)]
pub struct ThreadPoolBulkhead {
    handle: Arc<Handle>,
}

/// The user-side owner: dropping the last one shuts the pool down (workers hold `Shared`).
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.begin_shutdown();
    }
}

/// What [`ThreadPoolBulkhead::shutdown`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Tasks that finished (returned or panicked) while the shutdown waited.
    pub completed: u64,
    /// Queued tasks still waiting at the timeout, failed with `ShutDown` (their callers got
    /// their input back).
    pub failed_queued: u64,
    /// Tasks still running at the timeout (0: everything finished). They are not
    /// interrupted; their workers exit when they end.
    pub still_running: u32,
    /// Worker threads joined.
    pub threads_joined: u32,
}

impl ThreadPoolBulkhead {
    /// A pool named `name` with the given limits, on the system clock.
    ///
    /// `max_threads` below `core_threads` (or 0) is raised to `core_threads` (at least 1).
    pub fn new(name: impl Into<BulkheadName>, config: &ThreadPoolConfig) -> Self {
        Self::with_clock(name, config, system_clock())
    }

    /// A pool whose waits, queue ages and keep-alive are measured by `clock` (tests use
    /// [`ManualClock`](crate::ManualClock)).
    pub fn with_clock(
        name: impl Into<BulkheadName>,
        config: &ThreadPoolConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        ThreadPoolBulkhead {
            handle: Arc::new(Handle {
                shared: Arc::new(Shared::new(name.into(), config, clock)),
            }),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &BulkheadName {
        &self.shared().name
    }

    /// Runs `body(input)` on a worker and blocks until it has finished, returning its result.
    ///
    /// Because the caller blocks, `input` and `body` may borrow the caller's data. A panic
    /// in the body is resumed on the caller (the worker survives). If the call is refused,
    /// or admitted but failed before it ran (`QueueTimeout`, `ShutDown`, or `Full` when no
    /// worker thread could be started), `input` comes back
    /// in the [`Refused`], untouched, so a fallback can use it. A call made from inside this
    /// bulkhead (from one of its workers) runs inline on the current thread.
    ///
    /// ```
    /// use bulkhead::config::{ThreadPoolConfig, OnFull};
    /// use bulkhead::{BulkheadError, ThreadPoolBulkhead};
    ///
    /// let pool = ThreadPoolBulkhead::new("db", &ThreadPoolConfig::default());
    /// let greeting = String::from("hello");
    /// let len = pool.call(greeting.as_str(), |s| s.len());
    /// assert_eq!(len.unwrap(), 5);
    /// pool.shutdown(std::time::Duration::from_secs(1));
    /// let refused = pool.call(41, |n| n + 1).unwrap_err();
    /// assert_eq!(refused.input, 41);
    /// assert!(matches!(refused.error, BulkheadError::ShutDown { .. }));
    /// ```
    ///
    /// Called from a task on tokio's multi-thread runtime (feature `tokio`), the wait is
    /// handed to the runtime (`block_in_place`) so the worker's other tasks keep running;
    /// see [`async_caller`](crate::async_caller). Async code should prefer
    /// [`call_async`](Self::call_async), which awaits without blocking.
    ///
    /// # Errors
    ///
    /// [`Refused`] with the input when the call did not run: [`BulkheadError::Full`](crate::BulkheadError::Full) (a
    /// full pool under `on_full: abort`, or no worker could be started),
    /// [`BulkheadError::Timeout`](crate::BulkheadError::Timeout) (no room within `on_full: { wait }`),
    /// [`BulkheadError::QueueTimeout`](crate::BulkheadError::QueueTimeout) (stale in the queue), [`BulkheadError::RateLimited`](crate::BulkheadError::RateLimited)
    /// or [`BulkheadError::ShutDown`](crate::BulkheadError::ShutDown).
    pub fn call<I, R>(&self, input: I, body: impl FnOnce(I) -> R + Send) -> Result<R, Refused<I>>
    where
        I: Send,
        R: Send,
    {
        match crate::async_caller::caller() {
            Caller::Thread => self.call_here(input, body),
            caller => crate::async_caller::block(caller, || self.call_here(input, body)),
        }
    }

    /// Runs the future `body(input)` to completion on a worker; the returned future resolves
    /// to its output without blocking the caller's executor.
    ///
    /// Admission happens at the first poll; a full pool under `on_full: abort` refuses when
    /// the call is made, as a sync call does, before anything is cloned. With feature `tokio`, the tokio runtime current
    /// at that poll (if any) is entered on the worker, so the body can use tokio timers and
    /// I/O. Dropping the returned future while the task is queued cancels it (it never runs);
    /// while it runs, it finishes and its result is discarded. `on_full: { wait }` awaits
    /// room on the pool's clock. Works on any executor.
    ///
    /// ```
    /// use bulkhead::config::ThreadPoolConfig;
    /// use bulkhead::ThreadPoolBulkhead;
    ///
    /// let pool = ThreadPoolBulkhead::new("recs", &ThreadPoolConfig::default());
    /// let out = futures_executor::block_on(pool.call_async(20, |n| async move { n + 1 }));
    /// assert_eq!(out.unwrap(), 21);
    /// ```
    pub fn call_async<I, F, Fut>(&self, input: I, body: F) -> CallAsync<I, F, Fut>
    where
        I: Send + 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: std::future::Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        CallAsync::new(self, input, body)
    }

    /// Changes the rate limit live (`None` removes it; `configure`). It is checked after
    /// the re-entry check, before the queue: a sync call waits up to the limit's `timeout`
    /// on the pool's clock for a permission; an async call awaits it without blocking.
    pub(crate) fn set_rate_limit(&self, config: Option<&RateLimitConfig>) {
        self.shared().rate.reconfigure(config);
    }

    /// The rate limiter checked before each admission (the crates' tests look at it; not
    /// part of the facade's documented surface).
    #[doc(hidden)]
    pub fn rate_limiter(&self) -> &RateLimiter {
        &self.shared().rate
    }

    /// Applies new limits and policies live: `core_threads`, `max_threads`, `queue_capacity`,
    /// `keep_alive`, `on_full`, `max_queue_wait`, `queue_order` and `codel`. Never blocks on
    /// running work and never cancels admitted work: threads above a smaller `max_threads`
    /// retire when their current task ends, and a smaller queue refuses new work until it
    /// drains below its capacity. A new `max_queue_wait` bounds the calls queued after it;
    /// a call already queued keeps the deadline it was queued with (none, if there was
    /// none). The thread name prefix is fixed at construction.
    ///
    /// ```
    /// use bulkhead::config::ThreadPoolConfig;
    /// use bulkhead::ThreadPoolBulkhead;
    ///
    /// let pool = ThreadPoolBulkhead::new("search", &ThreadPoolConfig::default());
    /// pool.resize(&ThreadPoolConfig {
    ///     core_threads: 8,
    ///     max_threads: 16,
    ///     queue_capacity: 50,
    ///     ..ThreadPoolConfig::default()
    /// });
    /// let snapshot = pool.snapshot();
    /// assert_eq!((snapshot.limit, snapshot.queue_capacity), (16, Some(50)));
    /// ```
    pub fn resize(&self, config: &ThreadPoolConfig) {
        self.shared().resize_declared(config);
    }

    /// Changes the adaptive limit live (`None`: back to the declared `max_threads`;
    /// `configure`). The pool then runs at most that many threads, between the configured
    /// bounds and never above `max_threads`; the queue keeps its declared capacity.
    pub(crate) fn set_adaptive(&self, config: Option<&AdaptiveConfig>) {
        self.shared().set_adaptive(config);
    }

    /// Stops admission (new calls are refused with `ShutDown`), lets running and queued
    /// work finish for up to `timeout` on the pool's clock, fails what is still queued with
    /// `ShutDown` (its callers get their input back), joins the workers that have exited and
    /// reports what happened.
    ///
    /// Any number of threads may call it at once: each returns by its own deadline (the
    /// first to reach its deadline, or to see every worker leave, closes the pool) and all
    /// return the same report.
    pub fn shutdown(&self, timeout: Duration) -> ShutdownReport {
        let counts = self.shared().shutdown(timeout);
        ShutdownReport {
            completed: counts.completed,
            failed_queued: counts.failed_queued,
            still_running: counts.still_running,
            threads_joined: counts.joined,
        }
    }

    /// True once [`shutdown`](Self::shutdown) has been called.
    pub fn is_shut_down(&self) -> bool {
        self.shared().is_shut_down()
    }

    /// The most tasks that were ever waiting in the queue at once (without a worker).
    pub fn largest_queued(&self) -> u32 {
        self.shared().gauges().largest_queued
    }

    /// Calls that ran on their caller's thread because the pool was full
    /// (`on_full: caller-runs`).
    pub fn caller_runs(&self) -> u64 {
        self.shared().caller_runs.load(Relaxed)
    }

    /// A point-in-time view of the pool's limits, load and counters.
    pub fn snapshot(&self) -> BulkheadSnapshot {
        let shared = self.shared();
        let g = shared.gauges();
        let calls = shared.counters.counts();
        BulkheadSnapshot {
            name: shared.name.clone(),
            kind: Kind::ThreadPool,
            limit: g.max,
            active: g.active,
            available: g.max.saturating_sub(g.active),
            waiting: u32::try_from(shared.room.len()).unwrap_or(u32::MAX),
            queued: g.queued,
            queue_capacity: Some(g.capacity),
            pool_size: Some(g.threads),
            largest_pool_size: Some(g.largest_pool_size),
            calls,
            wait_time: shared.telemetry.wait_time(calls.permitted),
            queue_time: Some(shared.telemetry.queue_time()),
            call_duration: shared.telemetry.call_duration(),
            saturation: shared
                .telemetry
                .saturation(g.active, g.max, g.queued, g.capacity),
            adaptive: shared.adaptive_snapshot(),
            rate_limit_store_errors: shared.rate.store_errors(),
            leases: shared.rate.leases(),
            partitions: shared.shares.partition_snapshots(shared.admission_limit()),
            per_key: shared.shares.per_key_snapshot(),
        }
    }

    /// Counts a call this bulkhead refused that a fallback answered instead
    /// (`bulkhead_fallbacks_total`). `#[bulkhead(…, fallback = …)]` calls it; call it
    /// from a fallback of your own.
    pub fn record_fallback(&self) {
        self.shared().counters.fallbacks.fetch_add(1, Relaxed);
    }

    /// Spans, histograms, saturation thresholds and events of this bulkhead.
    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.shared().telemetry
    }
}

impl fmt::Debug for ThreadPoolBulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.shared().gauges();
        f.debug_struct("ThreadPoolBulkhead")
            .field("name", &self.shared().name)
            .field("max_threads", &g.max)
            .field("queue_capacity", &g.capacity)
            .field("active", &g.active)
            .field("queued", &g.queued)
            .field("pool_size", &g.threads)
            .finish()
    }
}

//! Shares inside a thread pool (`crate::shares`, written once for both kinds over
//! [`Host`]): the same partitions and per-key caps as on a semaphore,
//! dividing what the pool admits, **calls running plus queued** (`max_threads +
//! queue_capacity`), the limit its own admission counts against.
//!
//! A call's way: the key's cap (refused `KeyLimit` at it), then the partition's count
//! (`partition.rs`): below its guarantee the call is admitted as any call of the pool is
//! (its `on_full` applies: it may wait for room or run on its caller); at or above it, the
//! call **borrows**: it takes a slot only if one is free and nobody waits for room, and is
//! refused `Full` otherwise, never waiting and never running on its caller. Only the pool's
//! own compare-and-swap admits, so its bound is never exceeded. A call already inside the
//! pool (a nested call on a worker) runs inline, counted under nothing.
//!
//! The counts are taken back when the call ends: the sync call when it returns, the async
//! one when its future finishes or is dropped. A partition's `borrowed` and `refused` are
//! counted then too (on a semaphore, at admission).

use std::borrow::Borrow;
use std::fmt;
use std::future::Future;
use std::hash::Hash;

use bulkhead_config_types::{Partitions, PerKeyConfig};

use super::{CallAsync, ThreadPoolBulkhead, Timed};
use crate::shares::{Counted, Holds, Host, Layers, PartitionNamesChanged, key_id};
use crate::{BulkheadError, Refused};

/// The shares of a pool divide what it admits, running plus queued.
impl Host for ThreadPoolBulkhead {
    fn layers(&self) -> &Layers {
        &self.shared().shares
    }

    fn inside_here(&self) -> bool {
        crate::frame::is_inside(self.shared().id())
    }

    fn share_limit(&self) -> u32 {
        self.shared().admission_limit()
    }

    #[cold]
    fn key_limit(&self) -> BulkheadError {
        let shared = self.shared();
        let name = shared.name.clone();
        shared.refuse(BulkheadError::KeyLimit { name })
    }
}

/// A call about to enter a thread pool under a partition, a key, both or neither:
/// [`ThreadPoolBulkhead::in_partition`], [`ThreadPoolBulkhead::keyed`],
/// [`ThreadPoolBulkhead::unpartitioned`].
///
/// ```
/// use bulkhead::config::{BulkheadConfig, Partitions, ThreadPoolConfig};
/// use bulkhead::ThreadPoolBulkhead;
///
/// let limits = ThreadPoolConfig { core_threads: 2, max_threads: 2, queue_capacity: 8, ..Default::default() };
/// // 10 calls admitted at most (2 running + 8 queued): `live` is guaranteed 8 of them.
/// let reports = ThreadPoolBulkhead::new("reports", &limits);
/// reports.configure(&BulkheadConfig {
///     partitions: Partitions::new([("live", 0.8), ("batch", 0.2)]),
///     ..BulkheadConfig::thread_pool(limits)
/// }).unwrap();
/// assert_eq!(reports.in_partition("batch").call(3, |n| n * 2).ok(), Some(6));
/// let live = reports.snapshot().partitions.into_iter().find(|p| p.name == "live").unwrap();
/// assert_eq!(live.guaranteed, 8);
/// ```
#[derive(Clone, Copy)]
#[must_use = "an admission does nothing until it calls"]
pub struct PoolAdmission<'a> {
    pool: &'a ThreadPoolBulkhead,
    partition: Option<usize>,
    key: Option<u64>,
}

/// What one pool admission counted, given back when dropped; `P` is the pool, borrowed by
/// a sync call, owned (a clone of its handle) by an async one, whose future is `'static`.
struct PoolHolds<P: Borrow<ThreadPoolBulkhead>> {
    pool: P,
    counted: Counted,
}

impl<P: Borrow<ThreadPoolBulkhead>> PoolHolds<P> {
    /// Counts the call's outcome under its partition.
    fn settle(&self, borrowed: bool, admitted: bool) {
        let layers = &self.pool.borrow().shared().shares;
        self.counted.settle(layers, borrowed, admitted);
    }
}

impl<P: Borrow<ThreadPoolBulkhead>> Drop for PoolHolds<P> {
    fn drop(&mut self) {
        self.counted.release(&self.pool.borrow().shared().shares);
    }
}

impl<'a> PoolAdmission<'a> {
    /// The same admission, counted under `key` too (any `Hash` value: a tenant id, a
    /// user). Without `per_key` on the pool the key limits nothing.
    pub fn key<K: Hash + ?Sized>(self, key: &K) -> Self {
        self.key_id(key_id(key))
    }

    /// The same admission, counted under the key whose id is `id`
    /// ([`SemaphoreBulkhead::key_id`](crate::SemaphoreBulkhead::key_id)).
    pub fn key_id(mut self, id: u64) -> Self {
        self.key = Some(id);
        self
    }

    /// The key's cap, then the partition's count, held by `pool` (this admission's pool,
    /// borrowed or owned); whether the call may wait (or run on its caller) as any call of
    /// the pool may.
    fn enter<P: Borrow<ThreadPoolBulkhead>>(
        &self,
        pool: P,
    ) -> Result<(PoolHolds<P>, bool), BulkheadError> {
        let mut holds = Holds::default();
        let may_wait = holds.enter(self.pool, self.partition, self.key)?;
        let counted = holds.into_counted();
        Ok((PoolHolds { pool, counted }, may_wait))
    }

    /// Runs `body(input)` on a worker once admitted, blocking the caller (as
    /// [`ThreadPoolBulkhead::call`]).
    ///
    /// # Errors
    ///
    /// [`BulkheadError::KeyLimit`] when the key holds its cap; [`BulkheadError::Full`] when
    /// a borrowing call finds no free slot (or others waiting for one); otherwise what
    /// [`ThreadPoolBulkhead::call`] refuses with. The input comes back in [`Refused`].
    pub fn call<I, R>(&self, input: I, body: impl FnOnce(I) -> R + Send) -> Result<R, Refused<I>>
    where
        I: Send,
        R: Send,
    {
        let (holds, may_wait) = match self.enter(self.pool) {
            Ok(entered) => entered,
            Err(error) => return Err(Refused { input, error }),
        };
        let result = if may_wait {
            self.pool.call(input, body)
        } else {
            self.pool.call_borrowing(input, body)
        };
        holds.settle(!may_wait, result.is_ok());
        result
    }

    /// Runs the future `body(input)` on a worker once admitted (as
    /// [`ThreadPoolBulkhead::call_async`]); the counts are taken now and given back when
    /// the returned future finishes or is dropped.
    ///
    /// # Errors
    ///
    /// As [`call`](Self::call).
    pub fn call_async<I, F, Fut>(
        self,
        input: I,
        body: F,
    ) -> impl Future<Output = Result<Fut::Output, Refused<I>>> + Send + 'static
    where
        I: Send + 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        // The holds own a handle of the pool, which the future calls through.
        let entered = self.enter(self.pool.clone());
        async move {
            let (holds, may_wait) = match entered {
                Ok(entered) => entered,
                Err(error) => return Err(Refused { input, error }),
            };
            let pool = &holds.pool;
            let result = if may_wait {
                pool.call_async(input, body).await
            } else {
                CallAsync::borrowing(pool, input, body).await
            };
            holds.settle(!may_wait, result.is_ok());
            result
        }
    }
}

impl PoolAdmission<'_> {
    /// [`call_async`](Self::call_async) under the pool's call timeout, as
    /// [`ThreadPoolBulkhead::call_async_timed`]: at the deadline the call returns
    /// `Ok(Err(CallTimeout))`, whether or not the body yields (one that does is dropped
    /// on its worker there).
    ///
    /// # Errors
    ///
    /// `Err(Refused)` with the input when the call did not run (as [`call`](Self::call));
    /// `Ok(Err(BulkheadError::CallTimeout))` when it ran past the deadline.
    pub fn call_async_timed<I, F, Fut>(
        self,
        input: I,
        body: F,
    ) -> impl Future<Output = Timed<Fut::Output, I>> + Send + 'static
    where
        I: Send + 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let pool = self.pool.clone();
        // Without a timeout the deadline is none and the body is never cut short.
        let timeout = pool.shared().call_timeout.get();
        let body = crate::thread_pool::cut_at_deadline(&pool, body);
        let (on_worker, caller) = pool.timed_parts(timeout, body);
        caller.wait(self.call_async(input, on_worker))
    }
}

impl fmt::Debug for PoolAdmission<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolAdmission")
            .field("bulkhead", &self.pool.name())
            .field("partition", &self.partition)
            .field("key_id", &self.key)
            .finish()
    }
}

/// Partitions and per-key caps on the thread pool (see [`PoolAdmission`]).
impl ThreadPoolBulkhead {
    /// Divides what the pool admits (running + queued) into `partitions`, live
    /// (`configure`). The names are fixed by the first non-empty set, as on a semaphore.
    ///
    /// # Errors
    ///
    /// [`PartitionNamesChanged`] when the names differ from the running ones; nothing is
    /// changed then.
    pub(crate) fn set_partitions(
        &self,
        partitions: &Partitions,
    ) -> Result<(), PartitionNamesChanged> {
        self.shared().shares.set_partitions(partitions)
    }

    /// Changes the per-key cap live (`configure`); `None` removes it.
    pub(crate) fn set_per_key(&self, config: Option<&PerKeyConfig>) {
        self.shared().shares.set_per_key(config);
    }

    /// A call of the partition `name`; a name the pool has no partition for counts as
    /// none (see [`unpartitioned`](Self::unpartitioned)).
    pub fn in_partition(&self, name: &str) -> PoolAdmission<'_> {
        let partition = self
            .shared()
            .shares
            .partitions()
            .and_then(|t| t.index_of(name));
        PoolAdmission {
            pool: self,
            partition,
            key: None,
        }
    }

    /// Whether a reload may set `partitions`: the running names, or none on a bulkhead
    /// built without partitions (a reload may change the shares only).
    pub(crate) fn check_partitions(
        &self,
        partitions: &Partitions,
    ) -> Result<(), PartitionNamesChanged> {
        self.shared().shares.check_partitions(partitions)
    }

    /// A call of the partition at `index` among the names resolved when the code was
    /// built, trusted when the running names have the same `fingerprint`
    /// ([`Partitions::fingerprint`]), else looked up by name. For the attribute's expansion.
    #[doc(hidden)]
    #[inline]
    pub fn in_partition_at(&self, index: usize, name: &str, fingerprint: u64) -> PoolAdmission<'_> {
        let partition = self
            .shared()
            .shares
            .partitions()
            .and_then(|t| t.resolve(index, name, fingerprint));
        PoolAdmission {
            pool: self,
            partition,
            key: None,
        }
    }

    /// True when the pool has partitions, so that a call naming none only borrows
    /// ([`unpartitioned`](Self::unpartitioned)). For the attribute's expansion, which
    /// calls the pool plainly otherwise.
    #[doc(hidden)]
    #[inline]
    pub fn is_partitioned(&self) -> bool {
        self.shared().shares.partitions().is_some()
    }

    /// A call that names no partition: on a partitioned pool it only borrows a free slot;
    /// otherwise it is admitted as [`call`](Self::call) is.
    pub fn unpartitioned(&self) -> PoolAdmission<'_> {
        PoolAdmission {
            pool: self,
            partition: None,
            key: None,
        }
    }

    /// A call counted under `key` (and no partition; see
    /// [`unpartitioned`](Self::unpartitioned)).
    pub fn keyed<K: Hash + ?Sized>(&self, key: &K) -> PoolAdmission<'_> {
        self.unpartitioned().key(key)
    }
}

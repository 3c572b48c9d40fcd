//! One call's way through the shares: its key's cap, its partition's rules, then the
//! bulkhead's own permit (the order and the rules are in the [module docs](super)).
//!
//! Invariant: what [`Admission::enter`] counts is held by a `Holds`, which takes it back
//! exactly once — on a refusal, at once for a re-entrant permit, or after the permit it
//! travels with has been returned (the permit is the first field of every permit type
//! here, so it drops first). A `Holds` keeps references to what it counted in (the
//! partition's state, the key's place), so giving the counts back looks nothing up.

use std::fmt;
use std::future::Future;
use std::hash::Hash;

use super::partition::PartitionState;
use super::per_key::{KeyHold, KeyTable};
use super::permits::{AsyncSharePermit, SharePermit};
use super::{Layers, key_id};
use crate::BulkheadError;
use crate::semaphore::{AsyncPermit, OwnedPermit, Permit, SemaphoreBulkhead};

/// A call about to enter a semaphore bulkhead under a partition, a key, both or neither:
/// [`SemaphoreBulkhead::keyed`], [`SemaphoreBulkhead::unpartitioned`],
/// [`Partition::admission`](super::Partition::admission), [`Partition::keyed`](super::Partition::keyed).
///
/// ```
/// use bulkhead_config_types::{PerKeyConfig, SemaphoreConfig};
/// use bulkhead_core::{BulkheadError, SemaphoreBulkhead};
///
/// let search = SemaphoreBulkhead::new("search", &SemaphoreConfig::default())
///     .with_per_key(Some(&PerKeyConfig::new(1)));
/// let held = search.keyed("tenant-a").try_acquire().unwrap();
/// // tenant-a holds its one call; tenant-b is admitted.
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         assert!(matches!(search.keyed("tenant-a").call(|| ()), Err(BulkheadError::KeyLimit { .. })));
///         assert_eq!(search.keyed("tenant-b").call(|| 7), Ok(7));
///     });
/// });
/// drop(held);
/// ```
#[derive(Clone, Copy)]
#[must_use = "an admission does nothing until it acquires or calls"]
pub struct Admission<'a> {
    bulkhead: &'a SemaphoreBulkhead,
    partition: Option<usize>,
    key: Option<u64>,
}

/// What one admission counted, by index into its bulkhead's [`Layers`], for an owned
/// permit: taken back once, by [`release`](Counted::release).
#[derive(Debug, Default)]
pub(crate) struct Counted {
    partition: Option<usize>,
    key: Option<KeyHold>,
}

impl Counted {
    /// What a pool's admission counted (`pool.rs`).
    pub(super) fn new(partition: Option<usize>, key: Option<KeyHold>) -> Self {
        Counted { partition, key }
    }

    pub(super) fn partition(&self) -> Option<usize> {
        self.partition
    }

    /// Takes the counts back (invariant 4 of `partition`, 1 of `per_key`); a second call
    /// does nothing.
    #[inline]
    pub(crate) fn release(&mut self, layers: &Layers) {
        if let Some(partition) = self.partition.take().and_then(|i| layers.partition_at(i)) {
            partition.leave();
        }
        if let (Some(hold), Some(table)) = (self.key.take(), layers.key_table()) {
            table.leave(hold);
        }
    }
}

/// What one admission counted, with references to where, released when dropped.
#[derive(Default)]
pub(super) struct Holds<'a> {
    partition: Option<(usize, &'a PartitionState)>,
    key: Option<(&'a KeyTable, KeyHold)>,
}

impl Holds<'_> {
    #[inline]
    fn release(&mut self) {
        if let Some((_, partition)) = self.partition.take() {
            partition.leave();
        }
        if let Some((table, hold)) = self.key.take() {
            table.leave(hold);
        }
    }

    /// The counts, to travel with an owned permit; this `Holds` releases nothing more.
    fn into_counted(mut self) -> Counted {
        Counted {
            partition: self.partition.take().map(|(index, _)| index),
            key: self.key.take().map(|(_, hold)| hold),
        }
    }
}

impl fmt::Debug for Holds<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holds")
            .field("partition", &self.partition.map(|(index, _)| index))
            .field("key", &self.key.map(|(_, hold)| hold))
            .finish()
    }
}

impl Drop for Holds<'_> {
    #[inline]
    fn drop(&mut self) {
        self.release();
    }
}

impl<'a> Admission<'a> {
    #[inline]
    pub(super) fn new(bulkhead: &'a SemaphoreBulkhead, partition: Option<usize>) -> Self {
        Admission {
            bulkhead,
            partition,
            key: None,
        }
    }

    /// The same admission, counted under `key` too (any `Hash` value: a tenant id, a
    /// user). Without `per_key` on the bulkhead the key limits nothing.
    #[inline]
    pub fn key<K: Hash + ?Sized>(self, key: &K) -> Self {
        self.key_id(key_id(key))
    }

    /// The same admission, counted under the key whose id is `id`
    /// ([`SemaphoreBulkhead::key_id`]).
    #[inline]
    pub fn key_id(mut self, id: u64) -> Self {
        self.key = Some(id);
        self
    }

    /// Steps 1 and 2: the key's cap, then the partition's count; whether the call may wait.
    /// `None` when the key holds its cap ([`key_limit`](Self::key_limit) builds the error).
    #[inline(always)]
    fn enter(&self) -> Option<(Holds<'a>, bool)> {
        let layers = self.bulkhead.shares();
        let mut holds = Holds::default();
        // A call already inside this bulkhead (a nested call) runs inline on the permit
        // it holds: it is not refused for its key, nor counted under it.
        if let Some(id) = self.key
            && let Some(table) = layers.per_key()
            && !self.bulkhead.entered_here()
        {
            holds.key = Some((table, table.enter(id)?));
        }
        let may_wait = match layers.partitions() {
            None => true,
            Some(table) => match self.partition.and_then(|i| Some((i, table.get(i)?))) {
                Some((index, partition)) => {
                    holds.partition = Some((index, partition));
                    partition.enter(self.bulkhead.limit())
                }
                // A call that names no partition only borrows.
                None => false,
            },
        };
        Some((holds, may_wait))
    }

    /// The refusal of a key at its cap, counted and reported (out of the hot path).
    #[cold]
    #[inline(never)]
    fn key_limit(&self) -> BulkheadError {
        let name = self.bulkhead.name().clone();
        self.bulkhead.refuse(BulkheadError::KeyLimit { name })
    }

    /// Step 3's outcome: counts it and keeps (or takes back) the holds.
    #[inline(always)]
    fn settle<P>(
        mut holds: Holds<'a>,
        borrowed: bool,
        permit: Result<P, BulkheadError>,
        reentrant: impl FnOnce(&P) -> bool,
    ) -> Result<(P, Holds<'a>), BulkheadError> {
        match permit {
            Ok(permit) => {
                if let (true, Some((_, partition))) = (borrowed, holds.partition) {
                    partition.borrowed();
                }
                if reentrant(&permit) {
                    holds.release();
                }
                Ok((permit, holds))
            }
            Err(err) => {
                if let Some((_, partition)) = holds.partition {
                    partition.refused();
                }
                Err(err)
            }
        }
    }

    /// Takes a permit without waiting, whatever the partition's share.
    ///
    /// # Errors
    ///
    /// [`BulkheadError::KeyLimit`] when the key holds its cap; otherwise what
    /// [`SemaphoreBulkhead::try_acquire`] refuses with.
    #[inline]
    pub fn try_acquire(&self) -> Result<SharePermit<'a>, BulkheadError> {
        self.permit(false)
    }

    /// Takes a permit, blocking at most `max_wait` when the partition is below its
    /// guarantee (or the bulkhead is not partitioned); a call that borrows never waits.
    ///
    /// # Errors
    ///
    /// [`BulkheadError::KeyLimit`] when the key holds its cap; [`BulkheadError::Full`]
    /// when a borrowing call finds no free permit; otherwise what
    /// [`SemaphoreBulkhead::acquire`] refuses with.
    #[inline]
    pub fn acquire(&self) -> Result<SharePermit<'a>, BulkheadError> {
        self.permit(true)
    }

    /// Steps 1 to 3 for a thread: waits only when `may_block` and the partition's share
    /// lets the call wait; a call beyond its share borrows (counted as borrowed) either way.
    #[inline(always)]
    fn permit(&self, may_block: bool) -> Result<SharePermit<'a>, BulkheadError> {
        let Some((holds, may_wait)) = self.enter() else {
            return Err(self.key_limit());
        };
        let permit = self.bulkhead.permit(may_block && may_wait);
        let (permit, holds) = Self::settle(holds, !may_wait, permit, Permit::is_reentrant)?;
        Ok(SharePermit::new(permit, holds))
    }

    /// [`acquire`](Self::acquire) for async callers, on any executor. Dropping the future
    /// gives back its place and its counts.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_async(self) -> Result<AsyncSharePermit<'a>, BulkheadError> {
        let Some((holds, may_wait)) = self.enter() else {
            return Err(self.key_limit());
        };
        let permit = if may_wait {
            self.bulkhead.acquire_async().await
        } else {
            self.bulkhead.try_acquire_async().await
        };
        let (permit, holds) = Self::settle(holds, !may_wait, permit, AsyncPermit::is_reentrant)?;
        Ok(AsyncSharePermit::new(permit, holds, self.bulkhead))
    }

    /// [`acquire_async`](Self::acquire_async) as an [`OwnedPermit`] (`'static`, `Send`),
    /// which holds the counts too and returns them after its permit (for tower and axum).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn acquire_owned(
        &self,
    ) -> impl Future<Output = Result<OwnedPermit, BulkheadError>> + Send + 'static {
        let (bulkhead, partition, key) = (self.bulkhead.clone(), self.partition, self.key);
        async move {
            let admission = Admission {
                bulkhead: &bulkhead,
                partition,
                key,
            };
            let (permit, holds) = admission.acquire_async().await?.into_parts();
            Ok(bulkhead.own(permit).with_counted(holds.into_counted()))
        }
    }

    /// Runs `body` on this thread once admitted ([`acquire`](Self::acquire)).
    ///
    /// # Errors
    ///
    /// The refusal, as [`acquire`](Self::acquire); `body` did not run.
    #[inline]
    pub fn call<R>(&self, body: impl FnOnce() -> R) -> Result<R, BulkheadError> {
        let Some((holds, may_wait)) = self.enter() else {
            return Err(self.key_limit());
        };
        let (permit, holds) = Self::settle(
            holds,
            !may_wait,
            self.bulkhead.permit(may_wait),
            Permit::is_reentrant,
        )?;
        let result = body();
        drop(permit);
        drop(holds);
        Ok(result)
    }

    /// Awaits `body` once admitted ([`acquire_async`](Self::acquire_async)), under the
    /// bulkhead's call timeout, as [`SemaphoreBulkhead::call_async`] does.
    ///
    /// # Errors
    ///
    /// The refusal, as [`acquire`](Self::acquire), or [`BulkheadError::CallTimeout`].
    pub async fn call_async<F: Future>(self, body: F) -> Result<F::Output, BulkheadError> {
        self.acquire_async().await?.run_timed(body).await
    }
}

impl fmt::Debug for Admission<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let partition = self.partition.and_then(|i| {
            let table = self.bulkhead.shares().partitions()?;
            table.names().nth(i)
        });
        f.debug_struct("Admission")
            .field("bulkhead", self.bulkhead.name())
            .field("partition", &partition)
            .field("key_id", &self.key)
            .finish()
    }
}

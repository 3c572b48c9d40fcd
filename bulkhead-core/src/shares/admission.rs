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
/// use bulkhead::config::{PerKeyConfig, SemaphoreConfig};
/// use bulkhead::{BulkheadError, SemaphoreBulkhead};
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
    partition: Option<&'a PartitionState>,
    key: Option<(&'a KeyTable, KeyHold)>,
}

impl Holds<'_> {
    #[inline]
    fn release(&mut self) {
        if let Some(partition) = self.partition.take() {
            partition.leave();
        }
        if let Some((table, hold)) = self.key.take() {
            table.leave(hold);
        }
    }

    /// The counts, to travel with an owned permit; this `Holds` releases nothing more.
    fn into_counted(mut self) -> Counted {
        Counted {
            partition: self.partition.take().map(PartitionState::index),
            key: self.key.take().map(|(_, hold)| hold),
        }
    }
}

impl fmt::Debug for Holds<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holds")
            .field("partition", &self.partition.map(PartitionState::index))
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

    /// Steps 1 and 2 into `holds`: the key's cap, then the partition's count; whether the
    /// call may wait. `None` when the key holds its cap ([`key_limit`](Self::key_limit)
    /// builds the error).
    #[inline(always)]
    fn enter(&self, holds: &mut Holds<'a>) -> Option<bool> {
        self.enter_key(holds)?;
        Some(self.enter_partition(holds))
    }

    /// Step 1 into `holds`: the key's cap. `None` when the key holds its cap.
    #[inline(always)]
    fn enter_key(&self, holds: &mut Holds<'a>) -> Option<()> {
        // A call already inside this bulkhead (a nested call) runs inline on the permit
        // it holds: it is not refused for its key, nor counted under it.
        if let Some(id) = self.key
            && let Some(table) = self.bulkhead.shares().per_key()
            && !self.bulkhead.entered_here()
        {
            holds.key = Some((table, table.enter(id)?));
        }
        Some(())
    }

    /// The partition the call names, if the bulkhead has it.
    #[inline(always)]
    fn partition_state(&self) -> Option<&'a PartitionState> {
        self.bulkhead.shares().partitions()?.get(self.partition?)
    }

    /// Step 2 before the permit: the partition's count (not for a nested call, which
    /// holds no permit of its own); whether the call may wait.
    #[inline(always)]
    fn enter_partition(&self, holds: &mut Holds<'a>) -> bool {
        let Some(table) = self.bulkhead.shares().partitions() else {
            return true;
        };
        match self.partition.and_then(|index| table.get(index)) {
            Some(_) if self.bulkhead.entered_here() => true,
            Some(partition) => {
                holds.partition = Some(partition);
                partition.enter(self.bulkhead.limit())
            }
            // A call that names no partition only borrows.
            None => false,
        }
    }

    /// The refusal of a key at its cap, counted and reported (out of the hot path).
    #[cold]
    #[inline(never)]
    fn key_limit(&self) -> BulkheadError {
        let name = self.bulkhead.name().clone();
        self.bulkhead.refuse(BulkheadError::KeyLimit { name })
    }

    /// Step 3's outcome: counts it, and takes back the holds of a re-entrant permit (a
    /// refusal's go back when the caller drops them).
    #[inline(always)]
    fn settle<P>(
        holds: &mut Holds<'a>,
        borrowed: bool,
        permit: Result<P, BulkheadError>,
        reentrant: impl FnOnce(&P) -> bool,
    ) -> Result<P, BulkheadError> {
        match permit {
            Ok(permit) => {
                if let (true, Some(partition)) = (borrowed, holds.partition) {
                    partition.borrowed();
                }
                if reentrant(&permit) {
                    holds.release();
                }
                Ok(permit)
            }
            Err(err) => {
                if let Some(partition) = holds.partition {
                    partition.refused();
                }
                Err(err)
            }
        }
    }

    /// Takes a permit without waiting, whatever the partition's share.
    ///
    /// As [`SemaphoreBulkhead::try_acquire`], the permit marks this thread as inside the
    /// bulkhead until it drops: a further `try_acquire` or `acquire` on the same thread
    /// while it is held is **re-entrant** ([`SharePermit::is_reentrant`]) — it takes no
    /// permit and is counted by neither its partition nor its key. To hold several calls
    /// at once (a test, a batch), take each permit on its own thread.
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
    /// The permit marks this thread as inside the bulkhead, as
    /// [`try_acquire`](Self::try_acquire) says.
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
        let mut holds = Holds::default();
        let permit = self.permit_into(&mut holds, may_block)?;
        Ok(SharePermit::new(permit, holds))
    }

    /// [`permit`](Self::permit), its counts kept in `holds` (in place: the caller's frame,
    /// so nothing is moved between the steps). A call of a partition first takes a permit
    /// that is free at once, counted by its partition alone (`partition.rs`, invariant 5);
    /// only without one is it counted in before its permit, to decide whether it may wait.
    #[inline(always)]
    fn permit_into(
        &self,
        holds: &mut Holds<'a>,
        may_block: bool,
    ) -> Result<Permit<'a>, BulkheadError> {
        if self.enter_key(holds).is_none() {
            return Err(self.key_limit());
        }
        if let Some(partition) = self.partition_state() {
            let Some(permit) = self.bulkhead.permit_at_once_uncounted() else {
                return self.counted_permit_slow(holds, may_block);
            };
            // A re-entrant permit holds nothing: its call is not counted.
            if !permit.is_reentrant() {
                partition.admit(self.bulkhead.limit());
                holds.partition = Some(partition);
            }
            return Ok(permit);
        }
        self.counted_permit(holds, may_block)
    }

    /// A call of a partition that found no free permit (out of line: it may wait).
    #[cold]
    #[inline(never)]
    fn counted_permit_slow(
        &self,
        holds: &mut Holds<'a>,
        may_block: bool,
    ) -> Result<Permit<'a>, BulkheadError> {
        self.counted_permit(holds, may_block)
    }

    /// Step 2 counted before the permit, then step 3: the bulkhead's permit, waiting if
    /// `may_block` and the partition's share lets the call wait.
    #[inline(always)]
    fn counted_permit(
        &self,
        holds: &mut Holds<'a>,
        may_block: bool,
    ) -> Result<Permit<'a>, BulkheadError> {
        let may_wait = self.enter_partition(holds);
        let permit = self.bulkhead.permit(may_block && may_wait);
        Self::settle(holds, !may_wait, permit, Permit::is_reentrant)
    }

    /// [`acquire`](Self::acquire) for async callers, on any executor. Dropping the future
    /// gives back its place and its counts.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_async(self) -> Result<AsyncSharePermit<'a>, BulkheadError> {
        let mut holds = Holds::default();
        let Some(may_wait) = self.enter(&mut holds) else {
            return Err(self.key_limit());
        };
        let permit = if may_wait {
            self.bulkhead.acquire_async().await
        } else {
            self.bulkhead.try_acquire_async().await
        };
        let permit = Self::settle(&mut holds, !may_wait, permit, AsyncPermit::is_reentrant)?;
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
        let mut holds = Holds::default();
        let permit = self.permit_into(&mut holds, true)?;
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

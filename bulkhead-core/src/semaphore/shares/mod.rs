//! A semaphore's calls through its shares: its key's cap and its partition's rules
//! (`crate::shares`, written once for both kinds over [`Host`]), then the semaphore's own
//! permit. [`Admission`] here; the permits it hands out (`permits`); [`Partition`] handles
//! and the semaphore's methods that start admissions (`handle`).

mod handle;
mod permits;

use std::fmt;
use std::future::Future;
use std::hash::Hash;

pub use handle::Partition;
pub use permits::{AsyncSharePermit, SharePermit};

use super::{AsyncPermit, OwnedPermit, Permit, SemaphoreBulkhead};
use crate::BulkheadError;
use crate::shares::{Holds, Host, Layers, PartitionState, key_id};

/// The shares of a semaphore divide its permits.
impl Host for SemaphoreBulkhead {
    #[inline(always)]
    fn layers(&self) -> &Layers {
        self.shares()
    }

    #[inline(always)]
    fn inside_here(&self) -> bool {
        self.entered_here()
    }

    #[inline(always)]
    fn share_limit(&self) -> u32 {
        self.limit()
    }

    #[cold]
    #[inline(never)]
    fn key_limit(&self) -> BulkheadError {
        let name = self.name().clone();
        self.refuse(BulkheadError::KeyLimit { name })
    }
}

/// A call about to enter a semaphore bulkhead under a partition, a key, both or neither:
/// [`SemaphoreBulkhead::keyed`], [`SemaphoreBulkhead::unpartitioned`],
/// [`Partition::admission`](super::Partition::admission), [`Partition::keyed`](super::Partition::keyed).
///
/// ```
/// use bulkhead::config::{BulkheadConfig, PerKeyConfig, SemaphoreConfig};
/// use bulkhead::{BulkheadError, SemaphoreBulkhead};
///
/// let search = SemaphoreBulkhead::new("search", &SemaphoreConfig::default());
/// search.configure(&BulkheadConfig {
///     per_key: Some(PerKeyConfig::new(1)),
///     ..BulkheadConfig::semaphore(SemaphoreConfig::default())
/// }).unwrap();
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
    /// The partition the call names, looked up once when the admission is made (the
    /// names are fixed once set: `crate::shares`).
    partition: Option<&'a PartitionState>,
    key: Option<u64>,
}

impl<'a> Admission<'a> {
    #[inline]
    pub(super) fn new(
        bulkhead: &'a SemaphoreBulkhead,
        partition: Option<&'a PartitionState>,
    ) -> Self {
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

    /// Step 3's outcome: counts it, and takes back the holds of a re-entrant permit (a
    /// refusal's go back when the caller drops them).
    #[inline(always)]
    fn settle<P>(
        holds: &mut Holds<'a>,
        borrowed: bool,
        permit: Result<P, BulkheadError>,
        reentrant: impl FnOnce(&P) -> bool,
    ) -> Result<P, BulkheadError> {
        holds.settle(borrowed, permit.is_ok());
        if let Ok(permit) = &permit
            && reentrant(permit)
        {
            holds.release();
        }
        permit
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
        holds.enter_key(self.bulkhead, self.key)?;
        if let Some(partition) = self.partition {
            let Some(permit) = self.bulkhead.permit_at_once_uncounted() else {
                // The counts go and come back by value, so the fast path's stay in
                // registers (its `holds` never has its address taken).
                let taken = std::mem::take(holds);
                let (permit, counted) =
                    Self::counted_permit_slow(self.bulkhead, partition, taken, may_block)?;
                *holds = counted;
                return Ok(permit);
            };
            // A re-entrant permit holds nothing: its call is not counted.
            if !permit.is_reentrant() {
                holds.admitted_at_once(partition, self.bulkhead.limit());
            }
            return Ok(permit);
        }
        self.counted_permit(holds, may_block)
    }

    /// A call of a partition that found no free permit (out of line: it may wait). Takes
    /// the admission's parts, not the admission: nothing of it is kept in memory for it.
    /// Its counts are dropped (given back) with a refusal.
    #[cold]
    #[inline(never)]
    fn counted_permit_slow(
        bulkhead: &'a SemaphoreBulkhead,
        partition: &'a PartitionState,
        mut holds: Holds<'a>,
        may_block: bool,
    ) -> Result<(Permit<'a>, Holds<'a>), BulkheadError> {
        let permit =
            Admission::new(bulkhead, Some(partition)).counted_permit(&mut holds, may_block)?;
        Ok((permit, holds))
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

    /// Step 2 before the permit ([`Holds::enter_partition`], the partition already looked
    /// up): whether the call may wait.
    #[inline(always)]
    fn enter_partition(&self, holds: &mut Holds<'a>) -> bool {
        if self.partition.is_none() && self.bulkhead.shares().partitions().is_none() {
            return true;
        }
        holds.enter_resolved(self.bulkhead, self.partition)
    }

    /// [`acquire`](Self::acquire) for async callers, on any executor. Dropping the future
    /// gives back its place and its counts.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_async(self) -> Result<AsyncSharePermit<'a>, BulkheadError> {
        let mut holds = Holds::default();
        holds.enter_key(self.bulkhead, self.key)?;
        let may_wait = self.enter_partition(&mut holds);
        let permit = if may_wait {
            self.bulkhead.acquire_async().await
        } else {
            self.bulkhead.try_acquire_async().await
        };
        let permit = Self::settle(&mut holds, !may_wait, permit, AsyncPermit::is_reentrant)?;
        Ok(AsyncSharePermit::new(permit, holds))
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
        let partition = self.partition.map(PartitionState::index);
        let (bulkhead, key) = (self.bulkhead.clone(), self.key);
        async move {
            let admission = Admission {
                partition: partition.and_then(|i| bulkhead.shares().partition_at(i)),
                bulkhead: &bulkhead,
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
        let partition = self.partition.and_then(|p| {
            let table = self.bulkhead.shares().partitions()?;
            table.names().nth(p.index())
        });
        f.debug_struct("Admission")
            .field("bulkhead", self.bulkhead.name())
            .field("partition", &partition)
            .field("key_id", &self.key)
            .finish()
    }
}

//! One call's way through the shares: its key's cap, its partition's rules, then the
//! bulkhead's own permit (the order and the rules are in the [module docs](super)).
//!
//! Invariant: what [`Admission::enter`] counts is held by a `Holds`, which takes it back
//! exactly once — on a refusal, at once for a re-entrant permit, or after the permit it
//! travels with has been returned (the permit is the first field of every permit type
//! here, so it drops first).

use std::fmt;
use std::future::Future;
use std::hash::Hash;

use bulkhead_config_types::{Partitions, PerKeyConfig};

use super::partition::PartitionState;
use super::per_key::KeyHold;
use super::{Layers, PartitionNamesChanged, PartitionSnapshot, key_id};
use crate::BulkheadError;
use crate::semaphore::{AsyncPermit, OwnedPermit, Permit, SemaphoreBulkhead};

/// A call about to enter a semaphore bulkhead under a partition, a key, both or neither:
/// [`SemaphoreBulkhead::keyed`], [`SemaphoreBulkhead::unpartitioned`],
/// [`Partition::admission`], [`Partition::keyed`].
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

/// What one admission counted, by index into its bulkhead's [`Layers`]: taken back once,
/// by [`release`](Counted::release) (a [`Holds`], or an owned permit, calls it).
#[derive(Debug, Default)]
pub(crate) struct Counted {
    partition: Option<usize>,
    key: Option<KeyHold>,
}

impl Counted {
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

/// [`Counted`] with the layers it was counted in, released when dropped.
struct Holds<'a> {
    layers: &'a Layers,
    counted: Counted,
}

impl Holds<'_> {
    fn release(&mut self) {
        self.counted.release(self.layers);
    }

    fn partition(&self) -> Option<&PartitionState> {
        self.counted
            .partition
            .and_then(|i| self.layers.partition_at(i))
    }

    /// The counts, to travel with an owned permit; this `Holds` releases nothing more.
    fn into_counted(mut self) -> Counted {
        std::mem::take(&mut self.counted)
    }
}

impl Drop for Holds<'_> {
    #[inline]
    fn drop(&mut self) {
        self.release();
    }
}

impl<'a> Admission<'a> {
    fn new(bulkhead: &'a SemaphoreBulkhead, partition: Option<usize>) -> Self {
        Admission {
            bulkhead,
            partition,
            key: None,
        }
    }

    /// The same admission, counted under `key` too (any `Hash` value: a tenant id, a
    /// user). Without `per_key` on the bulkhead the key limits nothing.
    pub fn key<K: Hash + ?Sized>(self, key: &K) -> Self {
        self.key_id(key_id(key))
    }

    /// The same admission, counted under the key whose id is `id`
    /// ([`SemaphoreBulkhead::key_id`]).
    pub fn key_id(mut self, id: u64) -> Self {
        self.key = Some(id);
        self
    }

    /// Steps 1 and 2: the key's cap, then the partition's count; whether the call may wait.
    #[inline(always)]
    fn enter(&self) -> Result<(Holds<'a>, bool), BulkheadError> {
        let layers = self.bulkhead.shares();
        let mut holds = Holds {
            layers,
            counted: Counted::default(),
        };
        if let (Some(id), Some(table)) = (self.key, layers.per_key()) {
            match table.enter(id) {
                Some(hold) => holds.counted.key = Some(hold),
                None => return Err(self.key_limit()),
            }
        }
        let may_wait = match layers.partitions() {
            None => true,
            Some(table) => match self.partition.and_then(|i| table.get(i)) {
                Some(partition) => {
                    holds.counted.partition = self.partition;
                    partition.enter(self.bulkhead.limit())
                }
                // A call that names no partition only borrows.
                None => false,
            },
        };
        Ok((holds, may_wait))
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
                if let Some(partition) = holds.partition() {
                    partition.admitted(borrowed);
                }
                if reentrant(&permit) {
                    holds.release();
                }
                Ok((permit, holds))
            }
            Err(err) => {
                if let Some(partition) = holds.partition() {
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
        let (holds, may_wait) = self.enter()?;
        let permit = if may_block && may_wait {
            self.bulkhead.acquire()
        } else {
            self.bulkhead.try_acquire()
        };
        let (permit, holds) = Self::settle(holds, !may_wait, permit, Permit::is_reentrant)?;
        Ok(SharePermit { permit, holds })
    }

    /// [`acquire`](Self::acquire) for async callers, on any executor. Dropping the future
    /// gives back its place and its counts.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_async(self) -> Result<AsyncSharePermit<'a>, BulkheadError> {
        let (holds, may_wait) = self.enter()?;
        let permit = if may_wait {
            self.bulkhead.acquire_async().await
        } else {
            self.bulkhead.try_acquire_async().await
        };
        let (permit, holds) = Self::settle(holds, !may_wait, permit, AsyncPermit::is_reentrant)?;
        Ok(AsyncSharePermit {
            permit,
            holds,
            bulkhead: self.bulkhead,
        })
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
            let AsyncSharePermit { permit, holds, .. } = admission.acquire_async().await?;
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
        let permit = self.acquire()?;
        let result = body();
        drop(permit);
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

/// A permit taken through an [`Admission`]: the bulkhead's [`Permit`] and the counts of
/// its partition and key, all returned when it drops (the permit first).
#[must_use = "the call is admitted only while the permit is held"]
pub struct SharePermit<'a> {
    permit: Permit<'a>,
    holds: Holds<'a>,
}

impl SharePermit<'_> {
    /// True when the thread was already inside the bulkhead: nothing is held or counted.
    pub fn is_reentrant(&self) -> bool {
        self.permit.is_reentrant()
    }
}

impl fmt::Debug for SharePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharePermit")
            .field("reentrant", &self.is_reentrant())
            .field("counted", &self.holds.counted)
            .finish()
    }
}

/// The async form of [`SharePermit`]: `Send`; run the body with
/// [`run_async`](Self::run_async).
#[must_use = "the call is admitted only while the permit is held"]
pub struct AsyncSharePermit<'a> {
    permit: AsyncPermit<'a>,
    holds: Holds<'a>,
    bulkhead: &'a SemaphoreBulkhead,
}

impl AsyncSharePermit<'_> {
    /// True when the task was already inside the bulkhead: nothing is held or counted.
    pub fn is_reentrant(&self) -> bool {
        self.permit.is_reentrant()
    }

    /// Awaits `body` while holding the permit and the counts (see
    /// [`AsyncPermit::run_async`]); all are returned when it finishes or is dropped.
    pub async fn run_async<F: Future>(self, body: F) -> F::Output {
        let AsyncSharePermit { permit, holds, .. } = self;
        let output = permit.run_async(body).await;
        drop(holds);
        output
    }

    /// [`run_async`](Self::run_async) under the bulkhead's call timeout, as
    /// [`SemaphoreBulkhead::run_admitted`] does.
    ///
    /// # Errors
    ///
    /// [`BulkheadError::CallTimeout`] when `body` ran past the bulkhead's `timeout`.
    pub async fn run_timed<F: Future>(self, body: F) -> Result<F::Output, BulkheadError> {
        let AsyncSharePermit {
            permit,
            holds,
            bulkhead,
        } = self;
        let output = bulkhead.run_admitted(permit, body).await;
        drop(holds);
        output
    }
}

impl fmt::Debug for AsyncSharePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncSharePermit")
            .field("reentrant", &self.is_reentrant())
            .finish()
    }
}

/// A handle on one partition of a semaphore bulkhead ([`SemaphoreBulkhead::partition`]):
/// cheap to clone, and every clone admits through the same shares.
///
/// ```
/// use bulkhead_config_types::{Partitions, SemaphoreConfig};
/// use bulkhead_core::SemaphoreBulkhead;
///
/// let config = SemaphoreConfig { max_concurrent_calls: 10, ..SemaphoreConfig::default() };
/// let search = SemaphoreBulkhead::new("search", &config)
///     .with_partitions(&Partitions::new([("live", 0.8), ("batch", 0.2)]));
/// let batch = search.partition("batch").expect("declared above");
/// assert_eq!(batch.guaranteed(), 2);
/// assert_eq!(batch.call(|| "indexed"), Ok("indexed"));
/// assert!(search.partition("bulk").is_none());
/// ```
#[derive(Clone)]
pub struct Partition {
    bulkhead: SemaphoreBulkhead,
    index: usize,
}

impl Partition {
    /// The partition's name.
    pub fn name(&self) -> &str {
        self.bulkhead
            .shares()
            .partitions()
            .and_then(|t| t.names().nth(self.index))
            .unwrap_or_default()
    }

    /// The bulkhead it is a partition of.
    pub fn bulkhead(&self) -> &SemaphoreBulkhead {
        &self.bulkhead
    }

    /// The permits it is guaranteed under the limit in force now.
    pub fn guaranteed(&self) -> u32 {
        self.snapshot().map_or(0, |s| s.guaranteed)
    }

    /// Its share and counters now.
    pub fn snapshot(&self) -> Option<PartitionSnapshot> {
        self.bulkhead
            .shares()
            .partition_snapshots(self.bulkhead.limit())
            .into_iter()
            .nth(self.index)
    }

    /// A call of this partition.
    #[inline]
    pub fn admission(&self) -> Admission<'_> {
        Admission::new(&self.bulkhead, Some(self.index))
    }

    /// A call of this partition, counted under `key` too.
    pub fn keyed<K: Hash + ?Sized>(&self, key: &K) -> Admission<'_> {
        self.admission().key(key)
    }

    /// [`Admission::try_acquire`] for this partition.
    ///
    /// # Errors
    ///
    /// As [`Admission::try_acquire`].
    #[inline]
    pub fn try_acquire(&self) -> Result<SharePermit<'_>, BulkheadError> {
        self.admission().try_acquire()
    }

    /// [`Admission::acquire`] for this partition.
    ///
    /// # Errors
    ///
    /// As [`Admission::acquire`].
    #[inline]
    pub fn acquire(&self) -> Result<SharePermit<'_>, BulkheadError> {
        self.admission().acquire()
    }

    /// [`Admission::acquire_async`] for this partition.
    ///
    /// # Errors
    ///
    /// As [`Admission::acquire`].
    pub async fn acquire_async(&self) -> Result<AsyncSharePermit<'_>, BulkheadError> {
        self.admission().acquire_async().await
    }

    /// [`Admission::call`] for this partition.
    ///
    /// # Errors
    ///
    /// As [`Admission::acquire`].
    #[inline]
    pub fn call<R>(&self, body: impl FnOnce() -> R) -> Result<R, BulkheadError> {
        self.admission().call(body)
    }

    /// [`Admission::call_async`] for this partition.
    ///
    /// # Errors
    ///
    /// As [`Admission::call_async`].
    pub async fn call_async<F: Future>(&self, body: F) -> Result<F::Output, BulkheadError> {
        self.admission().call_async(body).await
    }
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partition")
            .field("bulkhead", self.bulkhead.name())
            .field("name", &self.name())
            .finish()
    }
}

/// Partitions and per-key caps on the semaphore bulkhead.
impl SemaphoreBulkhead {
    /// Divides the limit into `partitions` (see [`Partitions`] for the rules); for building.
    /// The names are fixed by the first non-empty set: a later one with other names is
    /// ignored here (use [`set_partitions`](Self::set_partitions) to see the refusal).
    pub fn with_partitions(self, partitions: &Partitions) -> Self {
        // A fresh bulkhead takes any names; see the doc comment for a used one.
        let _ = self.shares().set_partitions(partitions);
        self
    }

    /// Changes the partitions' shares live (a reload).
    ///
    /// # Errors
    ///
    /// [`PartitionNamesChanged`] when the names differ from the running ones; nothing is
    /// changed then.
    pub fn set_partitions(&self, partitions: &Partitions) -> Result<(), PartitionNamesChanged> {
        self.shares().set_partitions(partitions)
    }

    /// Whether [`set_partitions`](Self::set_partitions) would accept `partitions`.
    ///
    /// # Errors
    ///
    /// As [`set_partitions`](Self::set_partitions).
    pub fn check_partitions(&self, partitions: &Partitions) -> Result<(), PartitionNamesChanged> {
        self.shares().check_partitions(partitions)
    }

    /// The partition named `name`, if the bulkhead has one.
    pub fn partition(&self, name: &str) -> Option<Partition> {
        let index = self.shares().partitions()?.index_of(name)?;
        Some(Partition {
            bulkhead: self.clone(),
            index,
        })
    }

    /// A call that names no partition: on a partitioned bulkhead it only borrows a free
    /// permit and never waits; otherwise it is admitted as [`acquire`](Self::acquire) is.
    pub fn unpartitioned(&self) -> Admission<'_> {
        Admission::new(self, None)
    }

    /// A call of the partition `name`; a name the bulkhead has no partition for counts as
    /// none (see [`unpartitioned`](Self::unpartitioned)).
    pub fn in_partition(&self, name: &str) -> Admission<'_> {
        let index = self.shares().partitions().and_then(|t| t.index_of(name));
        Admission::new(self, index)
    }

    /// A call counted under `key` (and no partition; see
    /// [`unpartitioned`](Self::unpartitioned)).
    pub fn keyed<K: Hash + ?Sized>(&self, key: &K) -> Admission<'_> {
        self.unpartitioned().key(key)
    }

    /// Caps the calls per key (`None`: no cap); for building.
    pub fn with_per_key(self, config: Option<&PerKeyConfig>) -> Self {
        self.set_per_key(config);
        self
    }

    /// Changes the per-key cap live (a reload); `None` removes it.
    pub fn set_per_key(&self, config: Option<&PerKeyConfig>) {
        self.shares().set_per_key(config);
    }

    /// The id `key` is counted and reported under (the snapshot's busiest keys,
    /// [`PerKeySnapshot::top_keys`](crate::PerKeySnapshot::top_keys)): the same
    /// for every bulkhead of this process.
    pub fn key_id<K: Hash + ?Sized>(key: &K) -> u64 {
        key_id(key)
    }
}

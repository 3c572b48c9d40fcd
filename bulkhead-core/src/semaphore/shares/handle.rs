//! Handles on the shares of a semaphore bulkhead: [`Partition`] (one partition, resolved
//! once) and the bulkhead's own methods that configure the shares and start admissions.

use std::fmt;
use std::future::Future;
use std::hash::Hash;

use bulkhead_config_types::{Partitions, PerKeyConfig};

use super::Admission;
use super::permits::{AsyncSharePermit, SharePermit};
use crate::BulkheadError;
use crate::semaphore::SemaphoreBulkhead;
use crate::shares::{PartitionNamesChanged, PartitionSnapshot, key_id};

/// A handle on one partition of a semaphore bulkhead ([`SemaphoreBulkhead::partition`]):
/// cheap to clone, and every clone admits through the same shares.
///
/// ```
/// use bulkhead::config::{BulkheadConfig, Partitions, SemaphoreConfig};
/// use bulkhead::SemaphoreBulkhead;
///
/// let limits = SemaphoreConfig { max_concurrent_calls: 10, ..SemaphoreConfig::default() };
/// let search = SemaphoreBulkhead::new("search", &limits);
/// search.configure(&BulkheadConfig {
///     partitions: Partitions::new([("live", 0.8), ("batch", 0.2)]),
///     ..BulkheadConfig::semaphore(limits)
/// }).unwrap();
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
        let partition = self.bulkhead.shares().partition_at(self.index);
        Admission::new(&self.bulkhead, partition)
    }

    /// A call of this partition, counted under `key` too.
    #[inline]
    pub fn keyed<K: Hash + ?Sized>(&self, key: &K) -> Admission<'_> {
        self.admission().key(key)
    }

    /// [`Admission::try_acquire`] for this partition (a second permit on a thread that
    /// holds one is re-entrant and counts nothing: see there).
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
    /// Divides the limit into `partitions`, live (`configure`); the names are fixed by the
    /// first non-empty set. Partitions need a fair semaphore (`fair: true`): only then does
    /// a permit freed by a borrower go to a waiting call of a partition below its share.
    pub(crate) fn set_partitions(
        &self,
        partitions: &Partitions,
    ) -> Result<(), PartitionNamesChanged> {
        self.shares().set_partitions(partitions)
    }

    /// Whether a reload may set `partitions`: the running names, or none on a bulkhead
    /// built without partitions (a reload may change the shares only).
    pub(crate) fn check_partitions(
        &self,
        partitions: &Partitions,
    ) -> Result<(), PartitionNamesChanged> {
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
    /// none (see [`unpartitioned`](Self::unpartitioned)). Looks the name up on each call:
    /// a [`Partition`] handle, or the attribute's `partition = "…"`, resolves it once.
    pub fn in_partition(&self, name: &str) -> Admission<'_> {
        let table = self.shares().partitions();
        let partition = table.and_then(|t| t.get(t.index_of(name)?));
        Admission::new(self, partition)
    }

    /// [`in_partition`](Self::in_partition) with the partition's place among the sorted
    /// names resolved when the code was built, trusted when the running names have the
    /// same `fingerprint` ([`Partitions::fingerprint`]: one comparison), else looked up
    /// by name. For the attribute's expansion.
    #[doc(hidden)]
    #[inline]
    pub fn in_partition_at(&self, index: usize, name: &str, fingerprint: u64) -> Admission<'_> {
        let partition = self
            .shares()
            .partitions()
            .and_then(|t| t.resolve_state(index, name, fingerprint));
        Admission::new(self, partition)
    }

    /// A call counted under `key` (and no partition; see
    /// [`unpartitioned`](Self::unpartitioned)).
    #[inline]
    pub fn keyed<K: Hash + ?Sized>(&self, key: &K) -> Admission<'_> {
        self.unpartitioned().key(key)
    }

    /// Changes the per-key cap live (`configure`); `None` removes it.
    pub(crate) fn set_per_key(&self, config: Option<&PerKeyConfig>) {
        self.shares().set_per_key(config);
    }

    /// The id `key` is counted and reported under (the snapshot's busiest keys,
    /// [`PerKeySnapshot::top_keys`](crate::PerKeySnapshot::top_keys)): the same
    /// for every bulkhead of this process.
    #[must_use]
    pub fn key_id<K: Hash + ?Sized>(key: &K) -> u64 {
        key_id(key)
    }
}

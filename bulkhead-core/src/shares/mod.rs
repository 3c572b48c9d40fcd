//! Shares inside one bulkhead, a semaphore or a thread pool: **partitions** (named shares
//! of its limit) and **per-key caps** (no tenant takes more than N), an admission layer in
//! front of the bulkhead's own. This module knows neither kind: both implement [`Host`]
//! (`semaphore/shares/`, `thread_pool/shares.rs`), and steps 1 and 2 below are written once
//! over it ([`Holds::enter`], `hold.rs`).
//!
//! An [`Admission`](crate::Admission) names what a call is counted under — a partition, a key, both or
//! neither — and then takes one of the bulkhead's own permits. In order:
//!
//! 1. **Key** (`per_key`): the key's count goes up, or the call is refused with
//!    [`BulkheadError::KeyLimit`] (reason `key_limit`) when the key holds its cap.
//! 2. **Partition** (`partitions`): the partition's count goes up; the value it replaced
//!    says whether the call may wait (below its guarantee) or only borrows a permit that is
//!    free at once ([`partition`] has the rules and their invariants). On a partitioned
//!    bulkhead a call that names no partition only borrows.
//! 3. **Permit**: the bulkhead's `acquire` (may wait `max_wait`) or `try_acquire`
//!    (never waits). The bulkhead's limit is never exceeded: only its permits admit.
//!
//! A sync call of a partition takes steps 2 and 3 the other way round when a permit is
//! free at once: it takes the permit first (either path would), then its partition counts
//! it, in place of the bulkhead's `permitted` (one atomic add less per call).
//!
//! A refusal at any step takes back what earlier steps counted; an admitted call's
//! counts go back when its permit drops (the permit is returned first). A re-entrant call
//! (already inside this bulkhead on this thread) holds no permit and keeps no count.
//!
//! Everything lives in the bulkhead's [`Layers`], set once from its config and changed
//! live by a reload; a bulkhead with neither setting pays nothing on its plain calls. A
//! thread pool holds the same `Layers` in front of its own admission
//! ([`PoolAdmission`](crate::PoolAdmission): its shares divide the calls it admits, running
//! plus queued).

mod hold;
mod partition;
mod per_key;

use std::sync::OnceLock;

use bulkhead_config_types::{Partitions, PerKeyConfig};

pub(crate) use hold::{Counted, Holds, Host};
pub(crate) use partition::PartitionState;
use partition::PartitionTable;
pub use partition::{PartitionNamesChanged, PartitionSnapshot};
use per_key::KeyTable;
pub(crate) use per_key::key_id;
pub use per_key::{KeyLoad, PerKeySnapshot, TOP_KEYS};

/// The partitions and per-key caps of one bulkhead (a semaphore or a thread pool).
#[derive(Default)]
pub(crate) struct Layers {
    partitions: OnceLock<PartitionTable>,
    per_key: OnceLock<KeyTable>,
    /// Set while `per_key` is configured (a reload may remove it; the table stays, unused).
    per_key_on: std::sync::atomic::AtomicBool,
}

impl Layers {
    #[inline]
    pub(crate) fn partitions(&self) -> Option<&PartitionTable> {
        self.partitions.get()
    }

    #[inline]
    pub(crate) fn partition_at(&self, index: usize) -> Option<&partition::PartitionState> {
        self.partitions()?.get(index)
    }

    /// The per-key table, configured or not (counts taken while it was configured are
    /// given back to it after a reload removed the cap).
    #[inline]
    pub(crate) fn key_table(&self) -> Option<&KeyTable> {
        self.per_key.get()
    }

    #[inline]
    pub(crate) fn per_key(&self) -> Option<&KeyTable> {
        self.per_key
            .get()
            .filter(|_| self.per_key_on.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Sets the partitions: the first non-empty set fixes the names; later ones may change
    /// the shares only.
    pub(crate) fn set_partitions(
        &self,
        partitions: &Partitions,
    ) -> Result<(), PartitionNamesChanged> {
        match self.partitions.get() {
            Some(table) => table.set_shares(partitions),
            None if partitions.is_empty() => Ok(()),
            None => {
                let table = self
                    .partitions
                    .get_or_init(|| PartitionTable::new(partitions));
                table.set_shares(partitions)
            }
        }
    }

    /// Would [`set_partitions`](Self::set_partitions) accept `partitions`?
    pub(crate) fn check_partitions(
        &self,
        partitions: &Partitions,
    ) -> Result<(), PartitionNamesChanged> {
        match self.partitions.get() {
            Some(table) => table.check_names(partitions),
            None if partitions.is_empty() => Ok(()),
            None => Err(PartitionNamesChanged {
                running: Vec::new(),
                configured: partitions.names().map(str::to_owned).collect(),
            }),
        }
    }

    pub(crate) fn set_per_key(&self, config: Option<&PerKeyConfig>) {
        use std::sync::atomic::Ordering::Relaxed;
        match config {
            Some(config) => {
                self.per_key
                    .get_or_init(|| KeyTable::new(config))
                    .configure(config);
                self.per_key_on.store(true, Relaxed);
            }
            None => self.per_key_on.store(false, Relaxed),
        }
    }

    /// The calls admitted through partitions that the bulkhead's `permitted` does not
    /// count (`partition.rs`, invariant 5).
    pub(crate) fn admitted_at_once(&self) -> u64 {
        self.partitions()
            .map_or(0, PartitionTable::admitted_at_once)
    }

    pub(crate) fn partition_snapshots(&self, limit: u32) -> Vec<PartitionSnapshot> {
        self.partitions()
            .map(|table| table.snapshot(limit))
            .unwrap_or_default()
    }

    pub(crate) fn per_key_snapshot(&self) -> Option<PerKeySnapshot> {
        self.per_key().map(KeyTable::snapshot)
    }
}

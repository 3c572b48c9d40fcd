//! Steps 1 and 2 of an admission, written once for both kinds: the key's cap, then the
//! partition's count, over the [`Host`] the shares sit in front of (a semaphore or a
//! pool: `semaphore/shares/`, `thread_pool/shares.rs`). Step 3, the host's own slot, is
//! the host's.
//!
//! Invariant: what [`Holds::enter`] counts is held by a `Holds`, which takes it back
//! exactly once — on a refusal, at once for a re-entrant call, or after the permit or slot
//! it travels with has been returned (the permit is the first field of every permit type
//! that holds one, so it drops first). A `Holds` keeps references to what it counted in
//! (the partition's state, the key's place), so giving the counts back looks nothing up;
//! [`Counted`] is the same by index, for what must be `'static` (an owned permit, a pool's
//! async call).

use std::fmt;

use super::Layers;
use super::partition::PartitionState;
use super::per_key::{KeyHold, KeyTable};
use crate::BulkheadError;

/// What the shares need of the bulkhead they divide: its layers, whether this thread is
/// already inside it, the limit its partitions divide, and how it counts a refusal.
pub(crate) trait Host {
    /// The bulkhead's partitions and per-key caps.
    fn layers(&self) -> &Layers;
    /// True when this thread is already inside the bulkhead (a nested call, which runs on
    /// the place it holds and is counted under nothing).
    fn inside_here(&self) -> bool;
    /// The limit the partitions divide (a semaphore's permits; a pool's running + queued).
    fn share_limit(&self) -> u32;
    /// The refusal of a key at its cap, counted and reported (cold: out of the hot path).
    fn key_limit(&self) -> BulkheadError;
}

/// What one admission counted, by index into its bulkhead's [`Layers`], for an owned
/// permit or a pool's async call: taken back once, by [`release`](Counted::release).
#[derive(Debug, Default)]
pub(crate) struct Counted {
    partition: Option<usize>,
    key: Option<KeyHold>,
}

impl Counted {
    /// Counts the call's outcome under its partition (a pool counts it when the call ends).
    pub(crate) fn settle(&self, layers: &Layers, borrowed: bool, admitted: bool) {
        settle(
            self.partition.and_then(|i| layers.partition_at(i)),
            borrowed,
            admitted,
        );
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

/// Counts an admission's outcome under its partition: refused, or admitted by borrowing.
#[inline(always)]
fn settle(partition: Option<&PartitionState>, borrowed: bool, admitted: bool) {
    if let Some(partition) = partition {
        if !admitted {
            partition.refused();
        } else if borrowed {
            partition.borrowed();
        }
    }
}

/// What one admission counted, with references to where, released when dropped.
#[derive(Default)]
pub(crate) struct Holds<'a> {
    partition: Option<&'a PartitionState>,
    key: Option<(&'a KeyTable, KeyHold)>,
}

impl<'a> Holds<'a> {
    /// Steps 1 and 2: the key's cap, then the partition's count; whether the call may
    /// wait (below its guarantee, or no partitions), as any call of the host may.
    ///
    /// # Errors
    ///
    /// [`BulkheadError::KeyLimit`] (counted) when the key holds its cap.
    #[inline(always)]
    pub(crate) fn enter<H: Host>(
        &mut self,
        host: &'a H,
        partition: Option<usize>,
        key: Option<u64>,
    ) -> Result<bool, BulkheadError> {
        self.enter_key(host, key)?;
        Ok(self.enter_partition(host, partition))
    }

    /// Step 1: the key's cap. A call already inside the bulkhead (a nested call) runs
    /// inline on the place it holds: it is not refused for its key, nor counted under it.
    ///
    /// # Errors
    ///
    /// [`BulkheadError::KeyLimit`] (counted) when the key holds its cap.
    #[inline(always)]
    pub(crate) fn enter_key<H: Host>(
        &mut self,
        host: &'a H,
        key: Option<u64>,
    ) -> Result<(), BulkheadError> {
        if let Some(id) = key
            && let Some(table) = host.layers().per_key()
            && !host.inside_here()
        {
            let hold = table.enter(id).ok_or_else(|| host.key_limit())?;
            self.key = Some((table, hold));
        }
        Ok(())
    }

    /// Step 2 before the slot: the partition's count (not for a nested call, which holds
    /// no place of its own); whether the call may wait. On a partitioned bulkhead a call
    /// that names no partition only borrows.
    #[inline(always)]
    pub(crate) fn enter_partition<H: Host>(
        &mut self,
        host: &'a H,
        partition: Option<usize>,
    ) -> bool {
        let Some(table) = host.layers().partitions() else {
            return true;
        };
        self.enter_resolved(host, partition.and_then(|index| table.get(index)))
    }

    /// [`enter_partition`](Self::enter_partition) on a partitioned host, the partition
    /// already looked up (`None`: the call names none, so it only borrows).
    #[inline(always)]
    pub(crate) fn enter_resolved<H: Host>(
        &mut self,
        host: &'a H,
        partition: Option<&'a PartitionState>,
    ) -> bool {
        match partition {
            Some(_) if host.inside_here() => true,
            Some(state) => {
                self.partition = Some(state);
                state.enter(host.share_limit())
            }
            None => false,
        }
    }

    /// Step 2 after the slot, for a call of `partition` that took a place free at once
    /// (`partition.rs`, invariant 5): counted by its partition alone.
    #[inline(always)]
    pub(crate) fn admitted_at_once(&mut self, partition: &'a PartitionState, limit: u32) {
        partition.admit(limit);
        self.partition = Some(partition);
    }

    /// Counts the outcome of step 3 under the partition: refused, or admitted by
    /// borrowing.
    #[inline(always)]
    pub(crate) fn settle(&self, borrowed: bool, admitted: bool) {
        settle(self.partition, borrowed, admitted);
    }

    /// Takes the counts back now (a re-entrant call's, which holds nothing). The key's
    /// out of line: the permits that hold these are dropped by glue the compiler inlines
    /// only while it is small.
    #[inline]
    pub(crate) fn release(&mut self) {
        if let Some(partition) = self.partition.take() {
            partition.leave();
        }
        if let Some((table, hold)) = self.key.take() {
            leave_key(table, hold);
        }
    }

    /// The counts, to travel by index (`'static`); this `Holds` releases nothing more.
    pub(crate) fn into_counted(mut self) -> Counted {
        Counted {
            partition: self.partition.take().map(PartitionState::index),
            key: self.key.take().map(|(_, hold)| hold),
        }
    }
}

/// [`KeyTable::leave`], out of line (see [`Holds::release`]).
#[inline(never)]
fn leave_key(table: &KeyTable, hold: KeyHold) {
    table.leave(hold);
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

//! Partitions: named shares of one bulkhead's limit (`partitions: { live: 0.8, batch: 0.2
//! }`; a semaphore's permits, or a thread pool's running-or-queued slots: `pool.rs`), decided
//! in front of the bulkhead's own admission.
//!
//! Each partition counts its calls *in flight* (holding a permit or waiting for one) as
//! three monotonic counters on one cache line: `admitted` (calls that found a free permit
//! and took it before being counted), `entered` (calls counted in *before* their permit:
//! those that found none, async calls, a pool's calls) and `left`; in flight is
//! `admitted + entered - left`. A sync call first tries for a free permit without counting
//! it `permitted`; if it gets one, one `fetch_add` on `admitted` counts it both in flight
//! and admitted (the bulkhead's snapshot adds `admitted` to its `permitted`), and whether
//! it borrowed. Otherwise it loads `left` and `admitted`, counts itself in with one
//! `fetch_add` on `entered`, and the difference decides its path (wait or borrow). A
//! call's end is one `fetch_add` on `left`. So an uncontended partitioned call costs two
//! read-modify-writes beyond the plain call's, one of which replaces the plain call's
//! `permitted` add. The counters are `u64`: at a billion calls a second they wrap after
//! some 580 years, so none is expected to.
//!
//! # Invariants
//!
//! 1. The bulkhead's limit is never exceeded: every admitted call holds one of the
//!    bulkhead's own permits, taken by its compare-and-swap. Nothing here reads an
//!    in-flight total and then acts on it, the check-then-act race by which partitioned
//!    limiters have let partitions together exceed their global limit.
//! 2. At most `guaranteed` calls of a partition take the waiting path at a time. Only a
//!    call counted under `entered` may wait, and it reads `left` *before* `admitted` and
//!    its `fetch_add` on `entered`, so every end it sees is of a call it counts (in
//!    `admitted`, or in `entered` before it): `admitted seen + entered before it − left
//!    seen` is never below the calls in flight ahead of it that may wait, and the
//!    `fetch_add` hands out distinct previous values. An old `left` only makes a call
//!    borrow when it could have waited, never the reverse. (A call that found a free
//!    permit never waits; until its `fetch_add` on `admitted` others may count it out,
//!    which can only let them wait within the guarantee, as if it had come after them.)
//! 3. Only calls below their guarantee wait. The bulkhead is fair (validation requires it
//!    with partitions): while anyone waits, newcomers find no free permit, and a released
//!    permit — borrowed or not — goes to the longest waiter. Borrowed capacity is thus
//!    given back at the borrower's next release.
//! 4. A call's count is taken back exactly once: when it is refused, when its permit is
//!    re-entrant (it holds nothing), or when its permit drops. A call already inside the
//!    bulkhead on its thread is not counted at all.
//! 5. `admitted` counts an admitted call the bulkhead's `permitted` does not: exactly the
//!    calls admitted at once through [`PartitionState::admit`], each once, after its
//!    permit was taken (as `permitted` is counted), so the bulkhead's snapshot stays exact
//!    and never runs backwards.
//!
//! The names are fixed when the partitions are first set; their shares may change live.

use std::sync::atomic::Ordering::{AcqRel, Acquire as AcquireOrd, Relaxed, Release};

use bulkhead_config_types::{Partitions, guaranteed_slots};
use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU32, AtomicU64};

/// The partitions of one bulkhead: a fixed list of names, each with its live state.
pub(crate) struct PartitionTable {
    partitions: Box<[PartitionState]>,
    /// [`Partitions::fingerprint`] of the names.
    fingerprint: u64,
}

/// One partition's share and counters.
pub(crate) struct PartitionState {
    /// Its place in the table (what an owned permit keeps: `Counted`).
    index: usize,
    name: Box<str>,
    /// The share, as `f64` bits, finite and within 0..=1 (changed live by a reload).
    share: AtomicU64,
    /// The same share in 65 536ths, rounded down (stored after `share`): an integer lower
    /// bound of the guarantee ([`PartitionState::within_guarantee`]).
    share_floor: AtomicU32,
    /// Calls in flight: `admitted + entered - left` (see the module docs).
    counts: CachePadded<Counts>,
    borrowed: AtomicU64,
    refused: AtomicU64,
}

/// A partition's three monotonic call counters, on one cache line.
struct Counts {
    /// Calls admitted at once (a free permit), counted after taking it; the bulkhead's
    /// `permitted` does not count them (invariant 5).
    admitted: AtomicU64,
    /// Calls counted in before their permit (then admitted or refused by the bulkhead).
    entered: AtomicU64,
    /// Calls whose count was taken back (invariant 4).
    left: AtomicU64,
}

/// Why new partitions could not replace the running ones: their names differ.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the partitions are named {running:?} and the new config names {configured:?}: a running \
     bulkhead's partition names are fixed (the code checks them when it is built); a deploy \
     may change their shares only"
)]
#[non_exhaustive]
pub struct PartitionNamesChanged {
    /// The names in force.
    pub running: Vec<String>,
    /// The names of the refused config.
    pub configured: Vec<String>,
}

/// A point-in-time view of one partition.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct PartitionSnapshot {
    /// The partition's name.
    pub name: String,
    /// Its share of the limit.
    pub share: f64,
    /// The permits it is guaranteed under the limit in force: `floor(share × limit)`.
    pub guaranteed: u32,
    /// Its calls holding a permit or waiting for one, right now.
    pub in_flight: u32,
    /// Its calls admitted so far: every call counted in and not refused, so a call still
    /// waiting for a permit (below its guarantee, within `max_wait`) is included until it
    /// is refused; a call already inside the bulkhead on its thread is not counted.
    /// (Derived from the in-flight counters: admission counts nothing more.)
    pub admitted: u64,
    /// Of those, the calls admitted while the partition was at or above its guarantee
    /// (capacity borrowed from the others or from the unshared remainder).
    pub borrowed: u64,
    /// Its calls refused so far by the bulkhead or the partition (`Full`, `Timeout`,
    /// `RateLimited`, `ShutDown`). A call refused for its key (`KeyLimit`) is refused
    /// before its partition counts it: it is in the bulkhead's `refused.key_limit`.
    pub refused: u64,
}

impl PartitionTable {
    pub(crate) fn new(partitions: &Partitions) -> Self {
        PartitionTable {
            fingerprint: partitions.fingerprint(),
            partitions: partitions
                .shares
                .iter()
                .enumerate()
                .map(|(index, (name, share))| PartitionState {
                    index,
                    name: name.as_str().into(),
                    share: AtomicU64::new(sane(*share).to_bits()),
                    share_floor: AtomicU32::new(share_floor(sane(*share))),
                    counts: CachePadded::new(Counts {
                        admitted: AtomicU64::new(0),
                        entered: AtomicU64::new(0),
                        left: AtomicU64::new(0),
                    }),
                    borrowed: AtomicU64::new(0),
                    refused: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// The index of the partition named `name`.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.partitions.iter().position(|p| &*p.name == name)
    }

    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&PartitionState> {
        self.partitions.get(index)
    }

    /// `index` when the running names have `fingerprint` (the index was resolved among
    /// them when the code was built), else the place of `name`.
    #[inline]
    pub(crate) fn resolve(&self, index: usize, name: &str, fingerprint: u64) -> Option<usize> {
        if self.fingerprint == fingerprint {
            Some(index)
        } else {
            self.index_of(name)
        }
    }

    /// The partition [`resolve`](Self::resolve) names.
    #[inline]
    pub(crate) fn resolve_state(
        &self,
        index: usize,
        name: &str,
        fingerprint: u64,
    ) -> Option<&PartitionState> {
        self.get(self.resolve(index, name, fingerprint)?)
    }

    /// The calls its partitions admitted at once, which the bulkhead's `permitted` does
    /// not count (invariant 5).
    pub(crate) fn admitted_at_once(&self) -> u64 {
        self.partitions
            .iter()
            .map(PartitionState::admitted_at_once)
            .sum()
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.partitions.iter().map(|p| &*p.name)
    }

    /// `Ok` when `partitions` has the running names (their shares may differ).
    pub(crate) fn check_names(&self, partitions: &Partitions) -> Result<(), PartitionNamesChanged> {
        let same = partitions.shares.len() == self.partitions.len()
            && partitions.names().zip(self.names()).all(|(a, b)| a == b);
        if same {
            return Ok(());
        }
        Err(PartitionNamesChanged {
            running: self.names().map(str::to_owned).collect(),
            configured: partitions.names().map(str::to_owned).collect(),
        })
    }

    /// Takes the new shares when the names are the same.
    pub(crate) fn set_shares(&self, partitions: &Partitions) -> Result<(), PartitionNamesChanged> {
        self.check_names(partitions)?;
        for (state, share) in self.partitions.iter().zip(partitions.shares.values()) {
            let share = sane(*share);
            state.share.store(share.to_bits(), Relaxed);
            state.share_floor.store(share_floor(share), Relaxed);
        }
        Ok(())
    }

    pub(crate) fn snapshot(&self, limit: u32) -> Vec<PartitionSnapshot> {
        self.partitions
            .iter()
            .map(|p| {
                let share = f64::from_bits(p.share.load(Relaxed));
                // `left` first: it never passes the counts read after it.
                let refused = p.refused.load(Relaxed);
                let left = p.counts.left.load(AcquireOrd);
                let counted =
                    p.counts.admitted.load(AcquireOrd) + p.counts.entered.load(AcquireOrd);
                PartitionSnapshot {
                    name: p.name.to_string(),
                    share,
                    guaranteed: guaranteed_slots(share, limit),
                    in_flight: u32::try_from(counted.saturating_sub(left)).unwrap_or(u32::MAX),
                    admitted: counted.saturating_sub(refused),
                    borrowed: p.borrowed.load(Relaxed),
                    refused,
                }
            })
            .collect()
    }
}

/// A share as stored: finite and within 0..=1 (0 for anything else), so
/// [`PartitionState::enter`] needs no checks and truncation is `floor`.
fn sane(share: f64) -> f64 {
    if share.is_finite() && share > 0.0 {
        share.min(1.0)
    } else {
        0.0
    }
}

/// A `sane` share in 65 536ths, rounded down (at most 65 536).
fn share_floor(share: f64) -> u32 {
    // Exact: a power-of-two product, then `floor`, within 0..=65 536.
    (share * 65_536.0) as u32
}

impl PartitionState {
    /// Its place in the table.
    #[inline]
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// The permits it is guaranteed under `limit`.
    #[inline]
    fn guaranteed(&self, limit: u32) -> u64 {
        let share = f64::from_bits(self.share.load(Relaxed));
        // `sane` shares: the product is within 0..=limit and truncation is `floor`,
        // as `guaranteed_slots` computes it for the snapshot.
        u64::from((share * f64::from(limit)) as u32)
    }

    /// Whether a call with `ahead` of the partition's calls in flight before it is within
    /// the guarantee under `limit`. Below the integer bound `share_floor × limit / 65 536`
    /// it is, without the float product: `share_floor / 65 536` is at most the share, and
    /// the float product, rounded to nearest, is not below the largest integer under the
    /// exact one, so that bound is at most `guaranteed(limit)`. (The share may change
    /// between the two loads: each answer is right for one of the two shares.)
    #[inline(always)]
    fn within_guarantee(&self, ahead: u64, limit: u32) -> bool {
        let floor = u64::from(self.share_floor.load(Relaxed));
        ahead < (floor * u64::from(limit)) >> 16 || ahead < self.guaranteed(limit)
    }

    /// Counts a call in under `limit` before it takes a permit; `true` when it is within
    /// the guarantee (it may wait), `false` when it borrows (invariant 2).
    #[inline]
    pub(crate) fn enter(&self, limit: u32) -> bool {
        let left = self.counts.left.load(AcquireOrd);
        let admitted = self.counts.admitted.load(AcquireOrd);
        let ahead = self.counts.entered.fetch_add(1, AcqRel);
        self.within_guarantee((ahead + admitted).saturating_sub(left), limit)
    }

    /// Counts in (and as admitted: invariant 5) a call that has just taken a free permit
    /// under `limit`, and as borrowed when the partition was at or above its guarantee.
    #[inline]
    pub(crate) fn admit(&self, limit: u32) {
        let left = self.counts.left.load(AcquireOrd);
        let entered = self.counts.entered.load(AcquireOrd);
        let ahead = self.counts.admitted.fetch_add(1, AcqRel);
        if !self.within_guarantee((ahead + entered).saturating_sub(left), limit) {
            self.borrowed();
        }
    }

    /// The calls it admitted at once (invariant 5), for the bulkhead's `permitted`.
    #[inline]
    fn admitted_at_once(&self) -> u64 {
        self.counts.admitted.load(Relaxed)
    }

    /// Takes a call's count back (invariant 4).
    #[inline]
    pub(crate) fn leave(&self) {
        self.counts.left.fetch_add(1, Release);
    }

    /// Counts an admission that borrowed (admitted at or above the guarantee); every
    /// call counted in and not refused is admitted.
    #[inline]
    pub(crate) fn borrowed(&self) {
        self.borrowed.fetch_add(1, Relaxed);
    }

    #[inline]
    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn table() -> PartitionTable {
        PartitionTable::new(&Partitions::new([("live", 0.8), ("batch", 0.2)]))
    }

    #[test]
    fn calls_below_the_guarantee_may_wait_and_the_rest_borrow() {
        let table = table();
        let batch = table.get(table.index_of("batch").unwrap()).unwrap();
        // A limit of 10 guarantees batch 2.
        assert!(batch.enter(10));
        assert!(batch.enter(10));
        assert!(!batch.enter(10), "the third batch call borrows");
        batch.leave();
        assert!(!batch.enter(10), "two are still in flight");
        batch.leave();
        batch.leave();
        assert!(batch.enter(10), "one in flight: below the guarantee again");
    }

    #[test]
    fn the_guarantee_follows_the_limit() {
        let table = table();
        let live = table.get(table.index_of("live").unwrap()).unwrap();
        for _ in 0..4 {
            assert!(live.enter(5), "0.8 of 5 is 4");
        }
        assert!(!live.enter(5));
        assert!(
            live.enter(10),
            "0.8 of 10 is 8: the sixth call is guaranteed again"
        );
    }

    /// The integer bound never passes the guarantee the snapshot reports, so it never
    /// lets a call past its guarantee wait: every share in hundredths and thousandths (and
    /// a few awkward ones) under every limit up to 2 000 and the largest ones.
    #[test]
    fn the_integer_bound_is_never_above_the_guarantee() {
        let mut shares: Vec<f64> = (0..=1_000).map(|k| f64::from(k) / 1_000.0).collect();
        shares.extend([
            1.0 / 3.0,
            2.0 / 3.0,
            0.1 + 0.2,
            1e-9,
            1.0 - 1e-12,
            0.999_999,
        ]);
        let limits = (0..=2_000).chain([u32::MAX - 1, u32::MAX]);
        for limit in limits {
            for &share in &shares {
                let bound = (u64::from(share_floor(share)) * u64::from(limit)) >> 16;
                let guaranteed = u64::from(guaranteed_slots(share, limit));
                assert!(
                    bound <= guaranteed,
                    "share {share}, limit {limit}: {bound} > {guaranteed}"
                );
            }
        }
    }

    #[test]
    fn shares_change_live_but_names_do_not() {
        let table = table();
        table
            .set_shares(&Partitions::new([("live", 0.5), ("batch", 0.5)]))
            .unwrap();
        assert_eq!(table.snapshot(10)[0].guaranteed, 5, "batch sorts first");
        let err = table
            .set_shares(&Partitions::new([("live", 0.5), ("bulk", 0.5)]))
            .unwrap_err();
        assert_eq!(err.running, ["batch", "live"]);
        assert!(err.to_string().contains("may change their shares only"));
    }
}

//! Per-key caps: no key (a tenant, a user) holds more than `max_concurrent_calls` of a
//! bulkhead at once, with memory bounded by `max_keys`.
//!
//! A key is any `Hash` value; it is reduced to a 64-bit *key id* with a hasher seeded once
//! per process, and only ids are stored (two keys with one id would share a cap; with 64
//! bits that is negligible). The table maps id → calls in flight in a sharded map
//! (`dashmap`), so keys on different shards never contend.
//!
//! # Invariants
//!
//! 1. An entry exists only while its key has a call in flight: the call that takes its
//!    count to 0 removes it, under the shard's lock, so an idle key costs nothing.
//! 2. At most `max_keys` entries exist: a new key reserves its place in `tracked` before
//!    inserting. A new key that finds the table full joins the **overflow** entry, one
//!    count shared by every such key and capped at `max_concurrent_calls` like any key.
//! 3. No entry's count (nor the overflow's) exceeds `max_concurrent_calls` as it was
//!    when each call was counted in; a call over it is refused before it reaches the
//!    bulkhead, and counts nothing.

use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};

use bulkhead_config_types::PerKeyConfig;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

/// How many of the busiest keys a snapshot lists.
pub const TOP_KEYS: usize = 10;

/// The per-key counts of one bulkhead.
pub(crate) struct KeyTable {
    max_per_key: AtomicU32,
    max_keys: AtomicU32,
    /// Key id → calls in flight (never 0: invariant 1).
    entries: DashMap<u64, u32, BuildHasherDefault<KeyIdHasher>>,
    /// Entries in `entries` plus places reserved for ones being inserted.
    tracked: AtomicU32,
    /// Calls in flight of keys that found the table full (invariant 2).
    overflow: AtomicU32,
}

/// Where one admitted call is counted.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeyHold {
    Tracked(u64),
    Overflow,
}

/// A point-in-time view of a bulkhead's per-key caps: aggregates, never one series per key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct PerKeySnapshot {
    /// The cap per key in force.
    pub max_concurrent_calls: u32,
    /// The most keys tracked at once.
    pub max_keys: u32,
    /// Keys with a call in flight, tracked now (at most `max_keys`).
    pub keys_tracked: u32,
    /// Of those, the keys holding their whole cap.
    pub keys_at_limit: u32,
    /// Calls in flight of keys that found the table full and share the overflow entry.
    pub overflow_in_flight: u32,
    /// The busiest keys, most calls first (at most [`TOP_KEYS`]).
    pub top_keys: Vec<KeyLoad>,
}

/// One key's calls in flight, for the snapshot's top keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct KeyLoad {
    /// The key's id: [`SemaphoreBulkhead::key_id`](crate::SemaphoreBulkhead::key_id) of the
    /// key, so a program can tell which of its keys this is.
    pub key_id: u64,
    /// Its calls holding a permit or waiting for one.
    pub in_flight: u32,
}

impl KeyTable {
    pub(crate) fn new(config: &PerKeyConfig) -> Self {
        KeyTable {
            max_per_key: AtomicU32::new(config.max_concurrent_calls),
            max_keys: AtomicU32::new(config.max_keys),
            entries: DashMap::default(),
            tracked: AtomicU32::new(0),
            overflow: AtomicU32::new(0),
        }
    }

    /// Takes a new cap and bound; entries above a lowered bound leave as their calls end.
    pub(crate) fn configure(&self, config: &PerKeyConfig) {
        self.max_per_key.store(config.max_concurrent_calls, Relaxed);
        self.max_keys.store(config.max_keys, Relaxed);
    }

    /// Counts a call of key `id` in; `None` when the key (or the overflow entry) already
    /// holds its cap (invariant 3).
    pub(crate) fn enter(&self, id: u64) -> Option<KeyHold> {
        let cap = self.max_per_key.load(Relaxed);
        match self.entries.entry(id) {
            Entry::Occupied(mut entry) => {
                let count = entry.get_mut();
                if *count >= cap {
                    return None;
                }
                *count += 1;
                Some(KeyHold::Tracked(id))
            }
            Entry::Vacant(entry) => {
                if cap == 0 {
                    return None;
                }
                let max_keys = self.max_keys.load(Relaxed);
                if self.tracked.fetch_add(1, AcqRel) < max_keys {
                    entry.insert(1);
                    return Some(KeyHold::Tracked(id));
                }
                self.tracked.fetch_sub(1, AcqRel);
                drop(entry);
                self.overflow
                    .fetch_update(AcqRel, Relaxed, |n| (n < cap).then_some(n + 1))
                    .ok()
                    .map(|_| KeyHold::Overflow)
            }
        }
    }

    /// Takes a call's count back, removing its key's entry at 0 (invariant 1).
    pub(crate) fn leave(&self, hold: KeyHold) {
        match hold {
            KeyHold::Overflow => {
                self.overflow.fetch_sub(1, AcqRel);
            }
            KeyHold::Tracked(id) => {
                if let Entry::Occupied(mut entry) = self.entries.entry(id) {
                    let count = entry.get_mut();
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        entry.remove();
                        self.tracked.fetch_sub(1, AcqRel);
                    }
                }
            }
        }
    }

    /// Aggregates and the busiest keys; walks the table (at most `max_keys` entries).
    pub(crate) fn snapshot(&self) -> PerKeySnapshot {
        let cap = self.max_per_key.load(Relaxed);
        let mut keys_tracked = 0u32;
        let mut keys_at_limit = 0u32;
        let mut top: Vec<KeyLoad> = Vec::with_capacity(TOP_KEYS + 1);
        for entry in self.entries.iter() {
            let load = KeyLoad {
                key_id: *entry.key(),
                in_flight: *entry.value(),
            };
            keys_tracked += 1;
            keys_at_limit += u32::from(load.in_flight >= cap);
            let at = top.partition_point(|k| k.in_flight >= load.in_flight);
            if at < TOP_KEYS {
                top.insert(at, load);
                top.truncate(TOP_KEYS);
            }
        }
        PerKeySnapshot {
            max_concurrent_calls: cap,
            max_keys: self.max_keys.load(Relaxed),
            keys_tracked,
            keys_at_limit,
            overflow_in_flight: self.overflow.load(Relaxed),
            top_keys: top,
        }
    }
}

/// The id `key` is counted under: one hasher, seeded once per process, for every bulkhead.
pub(crate) fn key_id<K: Hash + ?Sized>(key: &K) -> u64 {
    static SEED: OnceLock<RandomState> = OnceLock::new();
    SEED.get_or_init(RandomState::new).hash_one(key)
}

/// The map's hasher: key ids are already uniform hashes, so it passes them through.
#[derive(Default)]
pub(crate) struct KeyIdHasher(u64);

impl Hasher for KeyIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (the map's keys are `u64`); fold anything else in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(cap: u32, max_keys: u32) -> KeyTable {
        KeyTable::new(&PerKeyConfig {
            max_concurrent_calls: cap,
            max_keys,
        })
    }

    #[test]
    fn a_key_is_refused_at_its_cap_while_others_are_admitted() {
        let t = table(2, 100);
        let (a, b) = (key_id("tenant-a"), key_id("tenant-b"));
        let held = [t.enter(a).unwrap(), t.enter(a).unwrap()];
        assert!(
            t.enter(a).is_none(),
            "the third call of tenant-a is over its cap"
        );
        assert!(
            t.enter(b).is_some(),
            "tenant-b is not held back by tenant-a"
        );
        assert_eq!(t.snapshot().keys_at_limit, 1);
        t.leave(held[0]);
        assert!(t.enter(a).is_some(), "a slot of tenant-a came back");
    }

    #[test]
    fn idle_keys_leave_no_entry() {
        let t = table(1, 100);
        for n in 0..1000u32 {
            let hold = t.enter(key_id(&n)).unwrap();
            t.leave(hold);
        }
        assert_eq!(t.snapshot().keys_tracked, 0);
        assert!(t.entries.is_empty());
    }

    #[test]
    fn keys_beyond_max_keys_share_one_overflow_entry() {
        let t = table(2, 3);
        let held: Vec<KeyHold> = (0..3u32).map(|n| t.enter(key_id(&n)).unwrap()).collect();
        let over = [t.enter(key_id(&10u32)), t.enter(key_id(&11u32))];
        assert!(over.iter().all(|h| matches!(h, Some(KeyHold::Overflow))));
        assert!(
            t.enter(key_id(&12u32)).is_none(),
            "the overflow entry is at its cap"
        );
        let s = t.snapshot();
        assert_eq!((s.keys_tracked, s.overflow_in_flight), (3, 2));
        assert_eq!(t.entries.len(), 3, "never more than max_keys entries");
        for hold in held.into_iter().chain(over.into_iter().flatten()) {
            t.leave(hold);
        }
        assert_eq!(t.snapshot().overflow_in_flight, 0);
        assert!(t.entries.is_empty());
    }

    #[test]
    fn the_snapshot_lists_the_busiest_keys_first() {
        let t = table(20, 100);
        for n in 0..15u32 {
            for _ in 0..=n {
                t.enter(key_id(&n)).unwrap();
            }
        }
        let top = t.snapshot().top_keys;
        assert_eq!(top.len(), TOP_KEYS);
        assert_eq!(top[0].key_id, key_id(&14u32));
        assert_eq!(top[0].in_flight, 15);
        assert!(top.windows(2).all(|w| w[0].in_flight >= w[1].in_flight));
    }
}

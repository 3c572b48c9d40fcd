//! Per-key caps: no key (a tenant, a user) holds more than `max_concurrent_calls` of a
//! bulkhead at once, with memory bounded by `max_keys`.
//!
//! A key is any `Hash` value; it is reduced to a 64-bit *key id* with `foldhash` (the
//! default hasher of `hashbrown`, already in the dependency tree), seeded once per process,
//! and only ids are stored (two keys with one id would share a cap; with 64 bits that is
//! negligible).
//!
//! Each tracked key has a *place*: an atomic word at a fixed index of [`Places`] (never
//! moved) holding the count of its calls in flight, a *retired* flag and a generation.
//! Shards (a lock each, so keys on different shards never contend) map ids to places: they
//! are the truth. A key's *home* is a place picked by its mixed id among a fixed array of
//! home places; a new key takes its home if no other key holds it, else another place (in
//! buckets grown as needed). Beside the homes, a fixed array of *hints* (indexed like
//! them) remembers where a key not at its home was last found. A call of a key at its home,
//! or whose hint is right, counts itself in with one compare-and-swap on its place's word,
//! without a lock (the place's id is checked, and the swap fails if the place was retired
//! or reused since the word was read); a key at its home is found with one memory access,
//! its place's cache line. Any other call takes its key's shard lock once, to find or make
//! the place, count itself in and leave a hint. Its permit keeps the place's index, and
//! the call's end is one atomic subtraction there, with no lookup and no lock.
//!
//! # Invariants
//!
//! 1. Counts go up only by a compare-and-swap on a word that is not retired, and down by
//!    a subtraction. A place is retired only under its key's shard lock, by a
//!    compare-and-swap from a count of 0, and unmapped before that lock is released; a
//!    place is reused only with a new generation, its new id stored before. So a retired
//!    place's count stays 0, and a swap made on a word read before a retirement or a
//!    reuse fails: a call is never counted under a place that is not its key's.
//! 2. At most `max_keys` ids are mapped (busy or idle): a new key reserves its place in
//!    `tracked` before mapping. An idle key (count 0) keeps its place until a new key
//!    needs it. The first new key to find the table full sets `pressure` and *sweeps*
//!    every shard, retiring and unmapping idle keys (under their shard's lock; a key that
//!    a lock-free call made busy first is not retired: invariant 1) and freeing their
//!    places, under the `sweeping` lock, which every new key that finds the table full
//!    takes first: none goes on before that sweep is over. From then on, a key whose count
//!    falls to 0 puts its place on the `idle` list (once), and a new key that finds the
//!    table full unmaps one from there instead of sweeping. Each step is sequentially
//!    consistent, so a key going idle either is seen by the sweep or sees `pressure`: a
//!    new key joins the **overflow** entry (one count shared by every such key, capped
//!    like any key) only while `max_keys` keys are busy.
//! 3. A key with calls in the overflow entry gets no place until they end: its further
//!    calls join the overflow entry too (so its calls are counted under one count, never
//!    split between the overflow and a place). The overflow's keys are listed with their
//!    calls; a key is mapped, and joins the overflow, only under its shard lock, where it
//!    first looks at that list.
//! 4. No count (nor the overflow's) exceeds `max_concurrent_calls` as it was when each
//!    call was counted in; a call over it is refused before it reaches the bulkhead, and
//!    counts nothing. With invariant 3, no key's calls exceed it either.
//! 5. A place is reused only once unmapped with count 0, so a permit's index names its
//!    key's place until that permit's subtraction, its last use of it. A home place is
//!    handed out by a compare-and-swap of its `vacant` flag, set again (never put on the
//!    free list) when a sweep or a reclaim frees it under its key's shard lock: one key
//!    claims it at a time.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};

use bulkhead_config_types::PerKeyConfig;
use crossbeam_utils::CachePadded;

// The table's own loom models (`--cfg loom --cfg loom_per_key`: the lock-free count-in
// racing a retirement and a reuse of its place) run it on loom's primitives. Every other
// build, the other loom models included, runs it on std's atomics and parking_lot's lock:
// those models check their own protocols, and the table's explored with theirs grows
// past what a model can run (one pool model went from seconds to over ten minutes).
#[cfg(not(all(loom, loom_per_key)))]
use parking_lot::Mutex;
#[cfg(not(all(loom, loom_per_key)))]
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

#[cfg(all(loom, loom_per_key))]
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Mutex};

/// How many of the busiest keys a snapshot lists.
pub const TOP_KEYS: usize = 10;

/// The per-key counts of one bulkhead.
pub(crate) struct KeyTable {
    max_per_key: AtomicU32,
    max_keys: AtomicU32,
    /// Key id → place, by shard (the id's middle bits pick the shard).
    shards: Box<[CachePadded<Mutex<Ids>>]>,
    /// Place + 1 where a key was last found (0: none), by the mixed id's low bits: only a
    /// hint, checked against the place (invariant 1); `hints.len()` is a power of two, and
    /// the number of home places.
    hints: Box<[AtomicU32]>,
    places: Places,
    /// Ids mapped in `shards` plus places reserved for ones being mapped.
    tracked: AtomicU32,
    /// Set once a new key found the table full (until a reload changes the bounds): keys
    /// going idle then list their places in `idle`.
    pressure: AtomicBool,
    /// Held by the sweep that follows `pressure`'s setting: a new key that finds the table
    /// full takes it, so it waits for a sweep under way instead of finding its places not
    /// yet freed (and joining the overflow entry, or being refused, with idle keys mapped).
    sweeping: Mutex<()>,
    /// Places whose key went idle under `pressure` (each at most once: `Place::queued`).
    idle: Mutex<Vec<u32>>,
    /// Calls in flight of keys that found the table full (invariant 2). Written under
    /// `overflow_keys`' lock; read without it (0: no key is in the overflow).
    overflow: AtomicU32,
    /// The keys with calls in the overflow entry (invariant 3).
    overflow_keys: Mutex<OverflowKeys>,
}

/// The keys with calls in the overflow entry, each at a slot (which its calls' holds keep)
/// with its count of calls there. At most as many keys as the overflow's calls, so the
/// slots are bounded by the cap; a slot is reused once its key's calls are over.
#[derive(Default)]
struct OverflowKeys {
    /// Key id → slot.
    slots: Ids,
    /// By slot: its key's id and calls in the overflow (0: free).
    keys: Vec<(u64, u32)>,
    /// Slots free to reuse.
    free: Vec<u32>,
}

type Ids = HashMap<u64, u32, BuildHasherDefault<KeyIdHasher>>;

/// Where one admitted call is counted: its key's place, or the overflow entry (with its
/// key's slot there).
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeyHold {
    Tracked(u32),
    Overflow(u32),
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
    /// Keys with a call in flight now: at most `max_keys`, or, after a live change
    /// lowered `max_keys`, the keys busy then until their calls end. Counted at one
    /// moment.
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
        let threads = std::thread::available_parallelism().map_or(4, usize::from);
        let shards = (threads * 4).next_power_of_two().clamp(4, 256);
        let hints = hint_slots(config.max_keys);
        KeyTable {
            hints: (0..hints).map(|_| AtomicU32::new(0)).collect(),
            max_per_key: AtomicU32::new(config.max_concurrent_calls),
            max_keys: AtomicU32::new(config.max_keys),
            shards: (0..shards)
                .map(|_| CachePadded::new(Mutex::new(Ids::default())))
                .collect(),
            places: Places::with_homes(hints as u32),
            tracked: AtomicU32::new(0),
            pressure: AtomicBool::new(false),
            sweeping: Mutex::new(()),
            idle: Mutex::new(Vec::new()),
            overflow: AtomicU32::new(0),
            overflow_keys: Mutex::new(OverflowKeys::default()),
        }
    }

    /// The table of `config`, its home places made (the loom models: see `Places::homes`).
    #[cfg(all(loom, loom_per_key, test))]
    fn with_homes_made(config: &PerKeyConfig) -> Self {
        let table = Self::new(config);
        table.places.homes();
        table
    }

    /// Takes a new cap and bound; ids above a lowered bound are unmapped by sweeps.
    pub(crate) fn configure(&self, config: &PerKeyConfig) {
        self.max_per_key.store(config.max_concurrent_calls, Relaxed);
        self.max_keys.store(config.max_keys, Relaxed);
        self.pressure.store(false, SeqCst);
    }

    /// The home place of `id`: the place it is given if that is vacant when it is mapped,
    /// found with no hint; also the index of its hint.
    #[inline]
    fn home_of(&self, id: u64) -> u32 {
        (mix(id) as usize & (self.hints.len() - 1)) as u32
    }

    #[inline]
    fn shard(&self, id: u64) -> &Mutex<Ids> {
        &self.shards[shard_index(id, self.shards.len())]
    }

    /// Counts a call of key `id` in; `None` when the key (or the overflow entry) already
    /// holds its cap (invariant 4). Without a lock when the key is at its home or its hint
    /// is right ([`enter_here`](Self::enter_here)); the call's hold is then the index of
    /// the place it counted at.
    #[inline]
    pub(crate) fn enter(&self, id: u64) -> Option<KeyHold> {
        match self.enter_here(id) {
            Some(p) => Some(KeyHold::Tracked(p.index)),
            None => self.enter_locked(id),
        }
    }

    /// The lock-free count-in of a call of key `id`, at its home or at the place its hint
    /// names: the place, or `None` when neither is the key's below its cap, counting
    /// nothing (the caller then takes [`enter_locked`](Self::enter_locked), which also
    /// refuses). The place knows its own index: no hint to decode, no lookup of which
    /// kind of place an index names.
    #[inline]
    fn enter_here(&self, id: u64) -> Option<&Place> {
        let cap = self.max_per_key.load(Relaxed);
        let home = self.home_of(id);
        // A key at its home: one cache line, no hint.
        if let Some(p) = self.places.home_place(home)
            && Self::count_in_if_mapped(p, id, cap)
        {
            return Some(p);
        }
        // Acquire, pairing with the hint's Release store: the place it names (and its
        // bucket) was made before the hint was left.
        let p = self
            .places
            .get(self.hints[home as usize].load(Acquire).checked_sub(1)?)?;
        Self::count_in_if_mapped(p, id, cap).then_some(p)
    }

    /// The lock-free count-in at the place `hint` names (place + 1), as
    /// [`enter_here`](Self::enter_here) takes it (the tests' form).
    #[cfg(test)]
    fn enter_hinted(&self, hint: u32, id: u64, cap: u32) -> Option<KeyHold> {
        let place = hint.checked_sub(1)?;
        let p = self.places.get(place)?;
        Self::count_in_if_mapped(p, id, cap).then_some(KeyHold::Tracked(place))
    }

    /// The count-in at `p` if it is `id`'s and below `cap`: one compare-and-swap
    /// (invariant 1). False otherwise, counting nothing.
    #[inline]
    fn count_in_if_mapped(p: &Place, id: u64, cap: u32) -> bool {
        let word = p.word.load(Acquire);
        // The id stored before the word's generation was published (`Place::reuse`).
        if word & RETIRED != 0 || count_of(word) >= cap || p.id.load(Relaxed) != id {
            return false;
        }
        p.word
            .compare_exchange(word, word + 1, SeqCst, Relaxed)
            .is_ok()
    }

    /// A call of key `id` counted in under its shard lock, leaving the hint (after
    /// [`enter_here`](Self::enter_here) found no place); `None` when the key (or the
    /// overflow entry) holds its cap (invariant 4).
    #[cold]
    #[inline(never)]
    fn enter_locked(&self, id: u64) -> Option<KeyHold> {
        let cap = self.max_per_key.load(Relaxed);
        let hint = &self.hints[self.home_of(id) as usize];
        let shard = self.shard(id);
        {
            let mut ids = shard.lock();
            if let Some(&place) = ids.get(&id) {
                hint.store(place + 1, Release);
                return self.count_in(place, cap);
            }
            if self.in_overflow(id) {
                return self.join_overflow(id, cap);
            }
            if let Some(hold) = self.map(&mut ids, id, cap) {
                if let Some(KeyHold::Tracked(place)) = hold {
                    hint.store(place + 1, Release);
                }
                return hold;
            }
        }
        self.enter_full(id, cap)
    }

    /// Counts a call in at `place`, mapped to its key under the shard lock held (so not
    /// retired: invariant 1), unless its count is at `cap`.
    #[inline]
    fn count_in(&self, place: u32, cap: u32) -> Option<KeyHold> {
        let word = &self.places.get(place)?.word;
        word.fetch_update(SeqCst, Relaxed, |w| (count_of(w) < cap).then_some(w + 1))
            .ok()
            .map(|_| KeyHold::Tracked(place))
    }

    /// Maps `id` to a place with its first call counted in, if the table has room;
    /// `None` when it is full.
    fn map(&self, ids: &mut Ids, id: u64, cap: u32) -> Option<Option<KeyHold>> {
        if cap == 0 {
            return Some(None);
        }
        if self.tracked.fetch_add(1, AcqRel) >= self.max_keys.load(Relaxed) {
            self.tracked.fetch_sub(1, AcqRel);
            return None;
        }
        let place = self
            .places
            .claim_home(self.home_of(id))
            .unwrap_or_else(|| self.places.take());
        if let Some(p) = self.places.get(place) {
            p.reuse(id);
        }
        ids.insert(id, place);
        Some(self.count_in(place, cap))
    }

    /// A new key found the table full: the first such key sweeps, later ones unmap a key
    /// gone idle since; else the overflow entry (invariant 2).
    #[cold]
    fn enter_full(&self, id: u64, cap: u32) -> Option<KeyHold> {
        {
            // Waits for a sweep under way; the first key to find the table full sweeps.
            let _sweep = self.sweeping.lock();
            if !self.pressure.load(SeqCst) {
                self.pressure.store(true, SeqCst);
                self.sweep();
            }
        }
        loop {
            {
                let mut ids = self.shard(id).lock();
                // Another call of this key may have mapped it, or put it in the overflow,
                // meanwhile.
                if let Some(&place) = ids.get(&id) {
                    return self.count_in(place, cap);
                }
                if self.in_overflow(id) {
                    return self.join_overflow(id, cap);
                }
                if let Some(hold) = self.map(&mut ids, id, cap) {
                    return hold;
                }
            }
            let Some(place) = self.idle.lock().pop() else {
                break;
            };
            self.reclaim(place);
        }
        // Under the key's shard lock, as a mapping is (invariant 3).
        let ids = self.shard(id).lock();
        if let Some(&place) = ids.get(&id) {
            return self.count_in(place, cap);
        }
        self.join_overflow(id, cap)
    }

    /// Whether key `id` has calls in the overflow entry (looked at under its shard lock).
    fn in_overflow(&self, id: u64) -> bool {
        // 0 (the common case: no key in the overflow) skips the lock. A key's calls joined
        // under its shard lock, held now, so a count that includes them is seen.
        self.overflow.load(Acquire) != 0 && self.overflow_keys.lock().slots.contains_key(&id)
    }

    /// Counts a call of key `id` in under the overflow entry (under its shard lock), unless
    /// the entry holds `cap` calls.
    fn join_overflow(&self, id: u64, cap: u32) -> Option<KeyHold> {
        let mut guard = self.overflow_keys.lock();
        let calls = self.overflow.load(Relaxed);
        if calls >= cap {
            return None;
        }
        let OverflowKeys { slots, keys, free } = &mut *guard;
        let slot = *slots.entry(id).or_insert_with(|| {
            free.pop().unwrap_or_else(|| {
                keys.push((id, 0));
                u32::try_from(keys.len() - 1).unwrap_or(u32::MAX)
            })
        });
        let entry = keys.get_mut(slot as usize)?;
        *entry = (id, entry.1 + 1);
        self.overflow.store(calls + 1, Release);
        Some(KeyHold::Overflow(slot))
    }

    /// Unmaps the key of an `idle` place if it is still mapped there and still idle.
    fn reclaim(&self, place: u32) {
        let Some(p) = self.places.get(place) else {
            return;
        };
        p.queued.store(false, SeqCst);
        let victim = p.id.load(Relaxed);
        let mut ids = self.shard(victim).lock();
        if ids.get(&victim) == Some(&place) && p.retire() {
            ids.remove(&victim);
            self.places.release(place, &mut self.places.free.lock());
            self.tracked.fetch_sub(1, AcqRel);
        }
    }

    /// Unmaps every idle id and frees its place; how many were freed. Locks one shard at
    /// a time, then the free list (the order `map` takes them in too).
    fn sweep(&self) -> u32 {
        let mut freed = 0u32;
        for shard in &*self.shards {
            let mut ids = shard.lock();
            let mut free = self.places.free.lock();
            ids.retain(|_, &mut place| {
                let idle = self.places.get(place).is_none_or(Place::retire);
                if idle {
                    self.places.release(place, &mut free);
                    freed += 1;
                }
                !idle
            });
        }
        self.tracked.fetch_sub(freed, AcqRel);
        freed
    }

    /// Takes a call's count back: one subtraction at its place (invariant 5).
    #[inline]
    pub(crate) fn leave(&self, hold: KeyHold) {
        match hold {
            KeyHold::Overflow(slot) => self.leave_overflow(slot),
            KeyHold::Tracked(place) => {
                if let Some(p) = self.places.get(place) {
                    // Sequentially consistent with `pressure` and the sweep (invariant 2).
                    if count_of(p.word.fetch_sub(1, SeqCst)) == 1 && self.pressure.load(SeqCst) {
                        self.went_idle(p);
                    }
                }
            }
        }
    }

    /// Takes back a call counted under the overflow entry at `slot` (out of line: rare,
    /// and under a lock).
    #[cold]
    #[inline(never)]
    fn leave_overflow(&self, slot: u32) {
        let mut guard = self.overflow_keys.lock();
        let OverflowKeys { slots, keys, free } = &mut *guard;
        if let Some((id, calls)) = keys.get_mut(slot as usize) {
            *calls -= 1;
            if *calls == 0 {
                slots.remove(id);
                free.push(slot);
            }
        }
        self.overflow.fetch_sub(1, Release);
    }

    /// Lists a place whose key went idle under pressure, unless it is listed already.
    #[cold]
    fn went_idle(&self, p: &Place) {
        if !p.queued.swap(true, SeqCst) {
            self.idle.lock().push(p.index);
        }
    }

    /// Aggregates and the busiest keys; walks the table (at most `max_keys` ids) under
    /// every shard's lock at once, so the keys it counts are ones mapped at one moment
    /// (a shard at a time could count a key that went idle and was unmapped, and the key
    /// mapped in its place). Only calls on the locked path wait for them: a key's first
    /// call, one away from a home or hint naming it, one at its cap.
    pub(crate) fn snapshot(&self) -> PerKeySnapshot {
        let cap = self.max_per_key.load(Relaxed);
        let mut keys_tracked = 0u32;
        let mut keys_at_limit = 0u32;
        let mut top: Vec<KeyLoad> = Vec::with_capacity(TOP_KEYS + 1);
        // In index order; every other path holds at most one shard lock at a time.
        let shards: Vec<_> = self.shards.iter().map(|shard| shard.lock()).collect();
        for ids in &shards {
            for (&key_id, &place) in ids.iter() {
                let in_flight = self.places.get(place).map_or(0, Place::count);
                if in_flight == 0 {
                    continue;
                }
                keys_tracked += 1;
                keys_at_limit += u32::from(in_flight >= cap);
                let at = top.partition_point(|k| k.in_flight >= in_flight);
                if at < TOP_KEYS {
                    top.insert(at, KeyLoad { key_id, in_flight });
                    top.truncate(TOP_KEYS);
                }
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

    /// Ids mapped now, busy or idle (tests: never above `max_keys`).
    #[cfg(test)]
    fn mapped(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

/// One tracked key's place.
#[derive(Default)]
struct Place {
    /// Its index in the table (fixed).
    index: u32,
    /// The generation (high 32 bits), [`RETIRED`], and its key's calls in flight (the
    /// low 31 bits): invariant 1.
    word: AtomicU64,
    /// On the `idle` list.
    queued: AtomicBool,
    /// The id mapped to it last (set under that id's shard lock, before the generation).
    id: AtomicU64,
    /// A home place free to claim (retired, count 0, unmapped); always false elsewhere.
    vacant: AtomicBool,
}

/// A place's flag: unmapped with count 0, to be reused only with a new generation.
const RETIRED: u64 = 1 << 31;
/// One generation, in a place's word.
const GENERATION: u64 = 1 << 32;

/// The calls in flight in a place's word.
#[inline]
fn count_of(word: u64) -> u32 {
    (word & (RETIRED - 1)) as u32
}

impl Place {
    /// Its key's calls in flight.
    fn count(&self) -> u32 {
        count_of(self.word.load(Relaxed))
    }

    /// Retires the place if its count is 0 and it is live (under its key's shard lock,
    /// which then unmaps it): from then on no call counts itself in here until
    /// [`reuse`](Self::reuse).
    fn retire(&self) -> bool {
        self.word
            .fetch_update(SeqCst, SeqCst, |w| {
                (w & RETIRED == 0 && count_of(w) == 0).then_some(w | RETIRED)
            })
            .is_ok()
    }

    /// Gives the place (retired, or new) to key `id`, under its shard lock: the id first,
    /// then a new generation with count 0, published to the lock-free readers.
    fn reuse(&self, id: u64) {
        self.id.store(id, Relaxed);
        let generation = (self.word.load(Relaxed) & !(GENERATION - 1)).wrapping_add(GENERATION);
        self.word.store(generation, Release);
    }
}

/// The hints and home places of a table of `max_keys` keys: as many, rounded up to a power
/// of two, between 64 and 2^14 (4 + 24 bytes each: at most 448 KiB, whatever `max_keys`
/// is). A home or hint shared by two busy keys only sends the one not named there to the
/// lock.
fn hint_slots(max_keys: u32) -> usize {
    (max_keys as usize).next_power_of_two().clamp(64, 1 << 14)
}

/// Bucket 0 holds `1 << FIRST_BITS` places; each next bucket twice the one before.
const FIRST_BITS: u32 = 6;
/// Enough buckets for every `u32` index.
const BUCKETS: usize = 27;

/// The keys' counts at fixed indexes, never moved or freed while the table lives. The first
/// `homes` indexes are *home places*, one array made at the first claim; a key whose home
/// (`KeyTable::home_of`) is vacant when it is mapped claims it, and is found there with
/// no hint. The indexes after them are other places, in buckets allocated as the table
/// first needs them; freed ones are reused first.
#[derive(Default)]
struct Places {
    homes: u32,
    home: OnceLock<Box<[Place]>>,
    buckets: [OnceLock<Box<[Place]>>; BUCKETS],
    /// Other places handed out so far (the next new one is `homes + next`).
    next: AtomicU32,
    /// Other places unmapped by a sweep, count 0, to be reused.
    free: Mutex<Vec<u32>>,
}

impl Places {
    /// Places with `homes` home places.
    fn with_homes(homes: u32) -> Self {
        Places {
            homes,
            ..Places::default()
        }
    }

    /// Bucket and offset of the other place `i` (counted from the first after the homes).
    #[inline]
    fn locate(i: u32) -> (usize, usize) {
        let j = u64::from(i) + (1 << FIRST_BITS);
        let bucket = 63 - j.leading_zeros() - FIRST_BITS;
        (
            bucket as usize,
            (j - ((1 << FIRST_BITS) << bucket)) as usize,
        )
    }

    /// Home place `i` (below `homes`), once the home places are made.
    #[inline]
    fn home_place(&self, i: u32) -> Option<&Place> {
        self.home.get()?.get(i as usize)
    }

    #[inline]
    fn get(&self, i: u32) -> Option<&Place> {
        match i.checked_sub(self.homes) {
            None => self.home.get()?.get(i as usize),
            Some(other) => {
                let (bucket, offset) = Self::locate(other);
                self.buckets.get(bucket)?.get()?.get(offset)
            }
        }
    }

    /// The home places, made (vacant, retired, count 0) if they were not. A call reads
    /// them through `OnceLock::get`, which sees them made; the loom models make them
    /// before any thread starts, as loom cannot see the `OnceLock`'s ordering.
    fn homes(&self) -> &[Place] {
        self.home.get_or_init(|| {
            (0..self.homes)
                .map(|index| Place {
                    index,
                    word: AtomicU64::new(RETIRED),
                    vacant: AtomicBool::new(true),
                    ..Place::default()
                })
                .collect()
        })
    }

    /// Home place `home`, if it is vacant: claimed, retired with count 0.
    fn claim_home(&self, home: u32) -> Option<u32> {
        self.homes()
            .get(home as usize)?
            .vacant
            .compare_exchange(true, false, Acquire, Relaxed)
            .ok()
            .map(|_| home)
    }

    /// Frees an unmapped, retired place: a home place turns vacant, another joins `free`.
    fn release(&self, place: u32, free: &mut Vec<u32>) {
        if place >= self.homes {
            free.push(place);
        } else if let Some(p) = self.get(place) {
            p.vacant.store(true, Release);
        }
    }

    /// A place other than a home with count 0: a freed one, or a new one.
    fn take(&self) -> u32 {
        if let Some(place) = self.free.lock().pop() {
            return place;
        }
        let i = self.next.fetch_add(1, Relaxed);
        let (bucket, _) = Self::locate(i);
        self.buckets[bucket].get_or_init(|| {
            // The bucket's first index: the other places of the buckets before it.
            let first = self.homes + ((1 << FIRST_BITS) << bucket) - (1 << FIRST_BITS);
            (0..(1u32 << FIRST_BITS) << bucket)
                .map(|offset| Place {
                    index: first + offset,
                    ..Place::default()
                })
                .collect()
        });
        self.homes + i
    }
}

/// The id `key` is counted under: one hasher, seeded once per process, for every bulkhead.
/// foldhash's `fast` variant: its `quality` variant only adds a bijective finisher, which
/// changes no collision, and every use of an id mixes it first ([`mix`]).
#[inline]
pub(crate) fn key_id<K: Hash + ?Sized>(key: &K) -> u64 {
    static SEED: OnceLock<foldhash::fast::RandomState> = OnceLock::new();
    SEED.get_or_init(foldhash::fast::RandomState::default)
        .hash_one(key)
}

/// The shard of `id` among `shards` (a power of two). The map's buckets use the mixed id's
/// low bits: the shard takes its high ones.
#[inline]
fn shard_index(id: u64, shards: usize) -> usize {
    (mix(id) >> 40) as usize & (shards - 1)
}

/// Spreads an id over all 64 bits: the full 128-bit product with an odd constant, its
/// halves folded together (the folded multiply of foldhash and wyhash; one multiplication
/// on the admission's path, where splitmix64's finaliser takes two in a row). Ids from
/// [`key_id`] are uniform already, but a caller may pass its own (`Admission::key_id`):
/// snowflake-style ids, whose low bits are all zero, would otherwise land in one bucket of
/// the map and one shard, making every lookup a scan. Only a hash: the map keeps the ids.
#[inline]
pub(crate) fn mix(id: u64) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let product = u128::from(id) * u128::from(K);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The map's hasher: the id, mixed ([`mix`]).
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
        self.0 = mix(id);
    }
}

#[cfg(test)]
#[path = "per_key_tests.rs"]
mod tests;

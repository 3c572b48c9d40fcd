//! Unit tests of the per-key table: caps, the overflow entry, reclaiming idle keys.

use super::*;

fn table(cap: u32, max_keys: u32) -> KeyTable {
    let config = PerKeyConfig {
        max_concurrent_calls: cap,
        max_keys,
    };
    #[cfg(all(loom, loom_per_key))]
    return KeyTable::with_homes_made(&config);
    #[cfg(not(all(loom, loom_per_key)))]
    KeyTable::new(&config)
}

/// The id of the first key named `{prefix}{n}` whose home in `t` is `home` (a key sharing
/// another's home place).
fn key_at_home(t: &KeyTable, prefix: &str, home: u32) -> u64 {
    (0u32..)
        .map(|n| key_id(&format!("{prefix}{n}")))
        .find(|&id| t.home_of(id) == home)
        .expect("some key has this home")
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
fn idle_keys_are_not_tracked_and_their_places_are_reused() {
    let t = table(1, 100);
    for n in 0..1000u32 {
        let hold = t.enter(key_id(&n)).unwrap();
        t.leave(hold);
    }
    assert_eq!(t.snapshot().keys_tracked, 0);
    assert!(t.mapped() <= 100, "{} ids mapped", t.mapped());
    let made = t.places.next.load(Relaxed);
    assert!(
        made <= 100,
        "places are reused: {made} made besides the homes"
    );
}

#[test]
fn a_new_key_sweeps_idle_keys_out_of_a_full_table() {
    let t = table(1, 2);
    let a = t.enter(key_id("a")).unwrap();
    t.leave(t.enter(key_id("b")).unwrap());
    // Full: `a` busy, `b` idle. A new key takes `b`'s place, not the overflow.
    let c = t.enter(key_id("c")).unwrap();
    assert!(matches!(c, KeyHold::Tracked(_)), "{c:?}");
    // Now both are busy: the next new key shares the overflow entry.
    let d = t.enter(key_id("d")).unwrap();
    assert!(matches!(d, KeyHold::Overflow(_)), "{d:?}");
    assert!(t.pressure.load(SeqCst));
    // `a` goes idle under pressure: listed, and the next new key gets its place.
    t.leave(a);
    assert_eq!(t.idle.lock().len(), 1);
    assert!(matches!(t.enter(key_id("e")), Some(KeyHold::Tracked(_))));
    assert_eq!(t.mapped(), 2, "`a` was unmapped for `e`");
}

#[test]
fn places_are_found_across_buckets() {
    let places = Places::default();
    let made: Vec<u32> = (0..1000).map(|_| places.take()).collect();
    for &i in &made {
        places.get(i).unwrap().word.fetch_add(u64::from(i), Relaxed);
    }
    for &i in &made {
        let count = places.get(i).unwrap().count();
        assert_eq!(count, i, "place {i} is its own");
    }
    assert_eq!(Places::locate(0), (0, 0));
    assert_eq!(Places::locate(63), (0, 63));
    assert_eq!(Places::locate(64), (1, 0));
    assert_eq!(Places::locate(u32::MAX).0, BUCKETS - 1);
}

#[test]
fn keys_beyond_max_keys_share_one_overflow_entry() {
    let t = table(2, 3);
    let held: Vec<KeyHold> = (0..3u32).map(|n| t.enter(key_id(&n)).unwrap()).collect();
    let over = [t.enter(key_id(&10u32)), t.enter(key_id(&11u32))];
    assert!(over.iter().all(|h| matches!(h, Some(KeyHold::Overflow(_)))));
    assert!(
        t.enter(key_id(&12u32)).is_none(),
        "the overflow entry is at its cap"
    );
    let s = t.snapshot();
    assert_eq!((s.keys_tracked, s.overflow_in_flight), (3, 2));
    assert_eq!(t.mapped(), 3, "never more than max_keys ids");
    for hold in held.into_iter().chain(over.into_iter().flatten()) {
        t.leave(hold);
    }
    let s = t.snapshot();
    assert_eq!((s.keys_tracked, s.overflow_in_flight), (0, 0));
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

/// 160 000 snowflake-style ids (a millisecond timestamp above 22 zero bits): where their
/// work goes is counted, not timed. Unmixed, every one of them had the same low bits (one
/// bucket of the map: each lookup a scan of all the others, quadratic in all) and the same
/// shard.
#[test]
fn snowflake_ids_spread_over_the_maps_buckets_and_the_shards() {
    const IDS: u64 = 160_000;
    const SHARDS: usize = 256;
    let ids = (0..IDS).map(|i| (1_700_000_000_000 + i) << 22);
    let mut buckets = std::collections::HashSet::new();
    let mut per_shard = [0u32; SHARDS];
    for id in ids {
        let mut hasher = KeyIdHasher::default();
        hasher.write_u64(id);
        // The bucket a table of 2^18 buckets would probe first.
        buckets.insert(hasher.finish() & ((1 << 18) - 1));
        per_shard[shard_index(id, SHARDS)] += 1;
    }
    // Uniform hashes fill about 1 - e^(-0.61) of 2^18 buckets: ~0.75 of the ids' count.
    assert!(
        buckets.len() as u64 > IDS * 7 / 10,
        "{} distinct first buckets for {IDS} ids",
        buckets.len()
    );
    let mean = IDS as u32 / SHARDS as u32;
    assert!(
        per_shard.iter().all(|&n| n > mean / 2 && n < mean * 2),
        "shards from {:?} to {:?} ids (mean {mean})",
        per_shard.iter().min(),
        per_shard.iter().max()
    );
}

#[test]
fn a_table_counts_160_000_snowflake_ids_each_under_its_own_place() {
    let t = table(1, 200_000);
    let ids: Vec<u64> = (0..160_000u64)
        .map(|i| (1_700_000_000_000 + i) << 22)
        .collect();
    let held: Vec<_> = ids.iter().map(|&id| t.enter(id).unwrap()).collect();
    assert_eq!(t.snapshot().keys_tracked, 160_000);
    assert_eq!(
        t.snapshot().keys_at_limit,
        160_000,
        "each id at its own cap of 1"
    );
    held.into_iter().for_each(|hold| t.leave(hold));
}

#[test]
fn a_key_found_once_is_counted_in_through_its_hint() {
    let t = table(2, 100);
    let a = key_id("tenant-a");
    let first = t.enter(a).unwrap();
    let KeyHold::Tracked(place) = first else {
        panic!("{first:?}");
    };
    let hint = t.hints[mix(a) as usize & (t.hints.len() - 1)].load(Relaxed);
    assert_eq!(hint, place + 1, "the lookup left its hint");
    let second = t
        .enter_hinted(hint, a, 2)
        .expect("counted in without the lock");
    assert!(matches!(second, KeyHold::Tracked(p) if p == place));
    assert!(
        t.enter_hinted(hint, a, 2).is_none(),
        "at its cap: the hint path counts nothing"
    );
    assert!(t.enter(a).is_none(), "and the locked path refuses");
    assert!(
        t.enter_hinted(hint, key_id("tenant-b"), 2).is_none(),
        "another key's id does not match the place"
    );
    t.leave(first);
    t.leave(second);
    assert_eq!(t.places.get(place).unwrap().count(), 0);
}

/// A place knows its own index (a call found without the lock is given back through it):
/// the home places and the first places of every bucket a table hands out.
#[test]
fn every_place_is_found_at_the_index_it_holds() {
    let t = table(1, 100);
    let homes = t.places.homes;
    for _ in 0..1_000 {
        t.places.take();
    }
    t.places.homes();
    for i in 0..homes + 1_000 {
        assert_eq!(t.places.get(i).map(|p| p.index), Some(i));
    }
}

#[test]
fn a_stale_hint_is_never_taken_for_another_keys_place() {
    let t = table(1, 1);
    let a = key_id("a");
    let b = key_at_home(&t, "b", t.home_of(a));
    t.leave(t.enter(a).unwrap());
    let a_hint = t.hints[mix(a) as usize & (t.hints.len() - 1)].load(Relaxed);
    // The table is full (one key): `b` retires `a`'s idle place and reuses it.
    let held_b = t.enter(b).unwrap();
    let KeyHold::Tracked(place) = held_b else {
        panic!("{held_b:?}");
    };
    assert_eq!(a_hint, place + 1, "a's hint names the place b holds now");
    assert!(
        t.enter_hinted(a_hint, a, 1).is_none(),
        "the place is b's: a is not counted there"
    );
    // With b busy, a shares the overflow entry; b's place keeps b's one call.
    assert!(matches!(t.enter(a), Some(KeyHold::Overflow(_))));
    assert_eq!(t.places.get(place).unwrap().count(), 1);
    t.leave(held_b);
}

/// A key whose call joined the overflow entry (the table full of a busy key) gets no place
/// of its own while that call runs, even once a place frees up: its calls stay counted
/// under one count, so it never holds more than its cap.
#[test]
fn a_key_in_the_overflow_gets_no_place_until_its_overflow_calls_end() {
    let t = table(1, 1);
    let (a, b) = (key_id("a"), key_id("b"));
    let held_a = t.enter(a).unwrap();
    let in_overflow = t.enter(b).unwrap();
    assert!(
        matches!(in_overflow, KeyHold::Overflow(_)),
        "{in_overflow:?}"
    );
    assert!(t.enter(b).is_none(), "b holds its cap in the overflow");
    // `a` goes idle: a place is free, but b's call is still in the overflow.
    t.leave(held_a);
    assert!(
        t.enter(b).is_none(),
        "b would hold two calls with a cap of 1"
    );
    assert_eq!(t.snapshot().keys_tracked, 0, "b was not given a place");
    // Another key takes the free place; b's overflow call ends, and b's next call gets
    // the overflow (the one place is busy) or a place, counted once either way.
    let held_c = t.enter(key_id("c")).unwrap();
    assert!(matches!(held_c, KeyHold::Tracked(_)), "{held_c:?}");
    t.leave(in_overflow);
    assert_eq!(t.overflow.load(Relaxed), 0);
    assert!(t.overflow_keys.lock().slots.is_empty(), "b's entry is gone");
    let again = t.enter(b).unwrap();
    assert!(matches!(again, KeyHold::Overflow(_)), "{again:?}");
    t.leave(held_c);
    t.leave(again);
    // Now b gets the free place.
    let placed = t.enter(b).unwrap();
    assert!(matches!(placed, KeyHold::Tracked(_)), "{placed:?}");
    t.leave(placed);
}

/// A key's first call claims its home place if it is vacant; its later calls count
/// themselves in there with no hint and no lock. A key whose home another key holds gets
/// another place and finds it through its hint.
#[test]
fn a_key_is_found_at_its_home_or_through_its_hint() {
    let t = table(3, 100);
    let a = key_id("tenant-a");
    let home = t.home_of(a);
    let first = t.enter(a).unwrap();
    assert!(
        matches!(first, KeyHold::Tracked(p) if p == home),
        "{first:?}"
    );
    let second = t
        .enter_hinted(home + 1, a, 3)
        .expect("counted in at its home without the lock");
    assert!(matches!(second, KeyHold::Tracked(p) if p == home));
    // Another key with the same home: placed elsewhere, found through the hint it left.
    let b = key_at_home(&t, "tenant-b", home);
    let held_b = t.enter(b).unwrap();
    let KeyHold::Tracked(elsewhere) = held_b else {
        panic!("{held_b:?}");
    };
    assert!(elsewhere >= t.places.homes, "not a home place: {elsewhere}");
    assert!(t.enter_hinted(home + 1, b, 3).is_none(), "the home is a's");
    let hint = t.hints[home as usize].load(Relaxed);
    assert_eq!(hint, elsewhere + 1, "b's lookup left its hint");
    let again = t.enter(b).unwrap();
    assert!(matches!(again, KeyHold::Tracked(p) if p == elsewhere));
    for hold in [first, second, held_b, again] {
        t.leave(hold);
    }
    assert_eq!(t.places.get(home).unwrap().count(), 0);
    assert_eq!(t.places.get(elsewhere).unwrap().count(), 0);
}

/// A home place freed by a sweep turns vacant (never joins the free list) and is claimed
/// again by the next key whose home it is.
#[test]
fn a_freed_home_place_is_vacant_for_the_next_key_of_that_home() {
    let t = table(1, 1);
    let a = key_id("a");
    let home = t.home_of(a);
    t.leave(t.enter(a).unwrap());
    let c = key_at_home(&t, "c", home);
    let held = t.enter(c).unwrap();
    assert!(matches!(held, KeyHold::Tracked(p) if p == home), "{held:?}");
    assert!(
        t.places.free.lock().is_empty(),
        "a home place is not on the free list"
    );
    t.leave(held);
}

/// The size `hint_slots` gives the home places' memory by.
#[cfg(not(loom))]
#[test]
fn a_place_is_24_bytes() {
    assert_eq!(std::mem::size_of::<Place>(), 24);
}

#[test]
fn a_retired_place_counts_nothing_until_it_is_reused() {
    let p = Place::default();
    p.reuse(7);
    let word = p.word.load(Relaxed);
    assert!(p.retire(), "idle: retired");
    assert!(!p.retire(), "retired once");
    assert_ne!(p.word.load(Relaxed) & RETIRED, 0);
    p.reuse(8);
    let reused = p.word.load(Relaxed);
    assert_eq!(count_of(reused), 0);
    assert_eq!(reused & RETIRED, 0, "live again");
    assert_ne!(reused, word, "under a new generation");
    p.word.fetch_add(1, Relaxed);
    assert!(!p.retire(), "busy: not retired");
}

/// Under loom: a key counting itself in through its hint, without a lock, while a new key
/// finds the table full, retires the first key's idle place and reuses it. In every
/// interleaving each call is counted under its own key's place, or refused, or shares the
/// overflow entry; nothing is left counted.
#[cfg(all(loom, loom_per_key))]
#[test]
fn loom_a_hinted_count_in_racing_a_retirement_and_a_reuse_stays_with_its_key() {
    loom::model(|| {
        let t = std::sync::Arc::new(table(1, 1));
        let a = key_id("a");
        // `b` shares `a`'s home, so it reuses the very place `a`'s call counts itself in at.
        let b = key_at_home(&t, "b", t.home_of(a));
        t.leave(t.enter(a).unwrap());
        let check = |t: &KeyTable, key: u64, hold: Option<KeyHold>| {
            if let Some(KeyHold::Tracked(place)) = hold {
                let p = t.places.get(place).unwrap();
                assert_eq!(p.id.load(Relaxed), key, "counted under another key's place");
                assert_eq!(p.count(), 1);
            }
            if let Some(hold) = hold {
                t.leave(hold);
            }
        };
        let other = {
            let t = std::sync::Arc::clone(&t);
            loom::thread::spawn(move || {
                let hold = t.enter(b);
                check(&t, b, hold);
            })
        };
        let hold = t.enter(a);
        check(&t, a, hold);
        other.join().unwrap();
        assert_eq!(t.places.get(t.home_of(a)).unwrap().count(), 0);
        assert_eq!(t.overflow.load(Relaxed), 0);
    });
}

/// Under loom: two calls of one key at its cap of 1, both through its hint: at most one is
/// counted in, whichever way they interleave.
#[cfg(all(loom, loom_per_key))]
#[test]
fn loom_two_hinted_count_ins_of_one_key_never_pass_its_cap() {
    loom::model(|| {
        let t = std::sync::Arc::new(table(1, 10));
        let a = key_id("a");
        t.leave(t.enter(a).unwrap());
        let admitted = std::sync::Arc::new(AtomicU32::new(0));
        let call = {
            let (t, admitted) = (std::sync::Arc::clone(&t), std::sync::Arc::clone(&admitted));
            move || {
                if let Some(hold) = t.enter(a) {
                    assert_eq!(
                        admitted.fetch_add(1, SeqCst),
                        0,
                        "two calls of a at its cap"
                    );
                    admitted.fetch_sub(1, SeqCst);
                    t.leave(hold);
                }
            }
        };
        let other = loom::thread::spawn(call.clone());
        call();
        other.join().unwrap();
        assert_eq!(t.places.get(t.home_of(a)).unwrap().count(), 0);
    });
}

/// Under loom: a key's call in the overflow entry ending, racing another call of that key
/// while the one busy key goes idle (which frees a place): with a cap of 1, the key never
/// holds two calls, in every interleaving, and nothing is left counted.
#[cfg(all(loom, loom_per_key))]
#[test]
fn loom_a_key_leaving_the_overflow_racing_its_next_call_never_passes_its_cap() {
    loom::model(|| {
        let t = std::sync::Arc::new(table(1, 1));
        let (a, b) = (key_id("a"), key_id("b"));
        let held_a = t.enter(a).unwrap();
        let first_b = t.enter(b).unwrap();
        assert!(matches!(first_b, KeyHold::Overflow(_)));
        // b's calls holding their count: the one in the overflow so far.
        let b_calls = std::sync::Arc::new(AtomicU32::new(1));
        let next = {
            let (t, b_calls) = (std::sync::Arc::clone(&t), std::sync::Arc::clone(&b_calls));
            loom::thread::spawn(move || {
                if let Some(hold) = t.enter(b) {
                    assert_eq!(b_calls.fetch_add(1, SeqCst), 0, "b holds two calls");
                    b_calls.fetch_sub(1, SeqCst);
                    t.leave(hold);
                }
            })
        };
        let ends = {
            let (t, b_calls) = (std::sync::Arc::clone(&t), std::sync::Arc::clone(&b_calls));
            loom::thread::spawn(move || {
                // The call's body ends, then its count is taken back.
                b_calls.fetch_sub(1, SeqCst);
                t.leave(first_b);
            })
        };
        t.leave(held_a);
        next.join().unwrap();
        ends.join().unwrap();
        assert_eq!(t.overflow.load(Relaxed), 0);
        assert_eq!(t.snapshot().keys_tracked, 0);
    });
}

/// New keys arriving together at a table full of idle keys: the first sweeps, and the
/// others wait for its sweep, so each gets a place of its own; none joins the overflow
/// entry or is refused while idle keys hold places. (Racy by nature: many rounds.)
#[test]
fn new_keys_arriving_together_at_a_table_of_idle_keys_all_get_places() {
    const IDLE: u32 = 8;
    const NEW: usize = 3;
    for round in 0..1_000 {
        let t = table(1, IDLE);
        for n in 0..IDLE {
            t.leave(t.enter(key_id(&format!("old-{n}"))).unwrap());
        }
        let start = std::sync::Barrier::new(NEW);
        let holds: Vec<Option<KeyHold>> = std::thread::scope(|s| {
            let calls: Vec<_> = (0..NEW)
                .map(|n| {
                    let (t, start) = (&t, &start);
                    s.spawn(move || {
                        start.wait();
                        t.enter(key_id(&format!("new-{round}-{n}")))
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        assert!(
            holds.iter().all(|h| matches!(h, Some(KeyHold::Tracked(_)))),
            "round {round}: {holds:?} with {IDLE} idle keys mapped"
        );
        holds.into_iter().flatten().for_each(|hold| t.leave(hold));
    }
}

/// Keys churning through a table of 2 while snapshots are taken: no snapshot counts more
/// busy keys than `max_keys` (a snapshot reads every shard at one moment). Racy by nature.
#[test]
fn a_snapshot_never_counts_more_keys_than_max_keys() {
    const THREADS: usize = 6;
    let t = table(1, 2);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for n in 0..THREADS {
            let (t, done) = (&t, &done);
            s.spawn(move || {
                for i in 0..20_000usize {
                    if let Some(hold) = t.enter(key_id(&((i + n) % 50))) {
                        std::thread::yield_now();
                        t.leave(hold);
                    }
                }
                done.store(true, Relaxed);
            });
        }
        let mut most = 0;
        while !done.load(Relaxed) {
            most = most.max(t.snapshot().keys_tracked);
        }
        assert!(most <= 2, "a snapshot counted {most} keys of a table of 2");
    });
}

/// Under loom: two new keys find a table of two idle keys full at once. The first to find
/// it full sweeps; the other waits for that sweep, so in every interleaving each gets a
/// place of its own: none joins the overflow entry while idle keys hold places.
#[cfg(all(loom, loom_per_key))]
#[test]
fn loom_new_keys_at_a_full_table_of_idle_keys_wait_for_its_sweep() {
    loom::model(|| {
        let t = std::sync::Arc::new(table(1, 2));
        t.leave(t.enter(key_id("idle-1")).unwrap());
        t.leave(t.enter(key_id("idle-2")).unwrap());
        let (b, c) = (key_id("b"), key_id("c"));
        let other = {
            let t = std::sync::Arc::clone(&t);
            loom::thread::spawn(move || t.enter(c))
        };
        let mine = t.enter(b);
        let theirs = other.join().unwrap();
        assert!(
            [mine, theirs]
                .iter()
                .all(|h| matches!(h, Some(KeyHold::Tracked(_)))),
            "two idle places, two new keys: {mine:?} {theirs:?}"
        );
    });
}

/// Under loom: two new keys with one home, mapped at once (each under its own shard
/// lock): one claims the home place, the other gets another place, and each call is
/// counted under its own key's place, never both at one.
#[cfg(all(loom, loom_per_key))]
#[test]
fn loom_two_new_keys_of_one_home_are_counted_at_places_of_their_own() {
    loom::model(|| {
        let t = std::sync::Arc::new(table(1, 10));
        let a = key_id("a");
        let b = key_at_home(&t, "b", t.home_of(a));
        let enter = |t: &KeyTable, key: u64| {
            let hold = t.enter(key).expect("below every cap");
            let KeyHold::Tracked(place) = hold else {
                panic!("{hold:?}");
            };
            let p = t.places.get(place).unwrap();
            assert_eq!(p.id.load(Relaxed), key, "counted under another key's place");
            assert_eq!(p.count(), 1);
            place
        };
        let other = {
            let t = std::sync::Arc::clone(&t);
            loom::thread::spawn(move || enter(&t, b))
        };
        let mine = enter(&t, a);
        let theirs = other.join().unwrap();
        assert_ne!(mine, theirs);
        assert!(
            mine.min(theirs) == t.home_of(a),
            "one of them is at the home"
        );
    });
}

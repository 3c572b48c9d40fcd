//! Per-key caps on a semaphore bulkhead: one key is refused at its cap while others are
//! admitted; memory is bounded by `max_keys`; idle keys are not counted, and give their
//! place to new keys.
//! Deterministic: barriers and async permits held on the test thread; no sleeps.

use std::collections::VecDeque;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::task::Poll;

use bulkhead_config_types::{PerKeyConfig, SemaphoreConfig};
use bulkhead_core::{AsyncSharePermit, BulkheadError, SemaphoreBulkhead};

mod support;

use support::{WithPolicies, poll_once};

fn keyed(limit: u32, per_key: u32, max_keys: u32) -> SemaphoreBulkhead {
    SemaphoreBulkhead::new(
        "tenants",
        &SemaphoreConfig {
            max_concurrent_calls: limit,
            ..SemaphoreConfig::default()
        },
    )
    .with_policies(|c| {
        c.per_key = Some(PerKeyConfig {
            max_concurrent_calls: per_key,
            max_keys,
        });
    })
}

fn try_hold<'a>(
    bulkhead: &'a SemaphoreBulkhead,
    key: &str,
) -> Result<AsyncSharePermit<'a>, BulkheadError> {
    match poll_once(&mut Box::pin(bulkhead.keyed(key).acquire_async())) {
        Poll::Ready(result) => result,
        Poll::Pending => panic!("a fail-fast bulkhead waited"),
    }
}

#[test]
fn a_key_hammering_at_a_hundred_times_its_cap_is_refused_at_the_cap() {
    let bulkhead = keyed(50, 2, 100);
    let noisy: Vec<_> = (0..2)
        .map(|_| try_hold(&bulkhead, "noisy").unwrap())
        .collect();
    for _ in 0..200 {
        assert!(matches!(
            try_hold(&bulkhead, "noisy"),
            Err(BulkheadError::KeyLimit { .. })
        ));
    }
    // Every other tenant still gets in, up to its own cap.
    let quiet: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .flat_map(|key| {
            [
                try_hold(&bulkhead, key).unwrap(),
                try_hold(&bulkhead, key).unwrap(),
            ]
        })
        .collect();
    let s = bulkhead.snapshot();
    assert_eq!(s.calls.refused.key_limit, 200);
    assert_eq!(s.active, 10);
    let per_key = s.per_key.unwrap();
    assert_eq!((per_key.keys_tracked, per_key.keys_at_limit), (5, 5));
    assert_eq!(per_key.top_keys.len(), 5);
    drop((noisy, quiet));
    assert_eq!(bulkhead.snapshot().per_key.unwrap().keys_tracked, 0);
}

#[test]
fn threads_of_one_key_are_admitted_at_most_to_its_cap() {
    const THREADS: usize = 16;
    let bulkhead = keyed(64, 3, 100);
    for _ in 0..100 {
        let start = Barrier::new(THREADS + 2);
        let tried = Barrier::new(THREADS + 2);
        let noisy = AtomicU32::new(0);
        let others = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    start.wait();
                    let permit = bulkhead.keyed("noisy").try_acquire();
                    match &permit {
                        Ok(_) => {
                            noisy.fetch_add(1, SeqCst);
                        }
                        Err(err) => assert!(matches!(err, BulkheadError::KeyLimit { .. })),
                    }
                    tried.wait();
                    drop(permit);
                });
            }
            s.spawn(|| {
                start.wait();
                for key in 0..8u32 {
                    if bulkhead.keyed(&key).call(|| ()).is_ok() {
                        others.fetch_add(1, SeqCst);
                    }
                }
                tried.wait();
            });
            start.wait();
            tried.wait();
        });
        assert_eq!(noisy.load(SeqCst), 3, "the noisy key got more than its cap");
        assert_eq!(others.load(SeqCst), 8, "another key was refused");
    }
}

/// More keys than `max_keys` at once, so some share the overflow entry while places free
/// up and are taken: each call checks how many calls of its key are inside, and none ever
/// sees more than the cap. (Racy by nature: many rounds of many threads.)
#[test]
fn keys_churning_through_a_full_table_and_the_overflow_never_pass_their_cap() {
    churn(16, 4, 20_000, |i, t, keys| (i * 7 + t * 3) % keys);
}

/// The same with 300 keys over a table of 100: the 128 home places are shared by several
/// keys each, so keys take homes others freed, live away from home behind hints, and are
/// swept, while their calls race, four threads on each of two keys at a time.
#[test]
fn keys_sharing_home_places_while_churning_never_pass_their_cap() {
    churn(300, 100, 5_000, |i, t, keys| (i + t % 2) % keys);
}

/// `THREADS` threads call `keys` keys through a table of `max_keys`, `calls` calls each,
/// the `i`th call of thread `t` with key `key_of(i, t, keys)`; no key ever has more than
/// its cap inside, and nothing is left counted.
fn churn(keys: usize, max_keys: u32, calls: usize, key_of: fn(usize, usize, usize) -> usize) {
    const THREADS: usize = 8;
    const CAP: u32 = 2;
    let bulkhead = keyed(64, CAP, max_keys);
    let inside: Vec<AtomicU32> = (0..keys).map(|_| AtomicU32::new(0)).collect();
    let most = AtomicU32::new(0);
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (bulkhead, inside, most, start) = (&bulkhead, &inside, &most, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..calls {
                    let key = key_of(i, t, keys);
                    let _ = bulkhead.keyed(&key).call(|| {
                        let now = inside[key].fetch_add(1, SeqCst) + 1;
                        most.fetch_max(now, SeqCst);
                        std::thread::yield_now();
                        inside[key].fetch_sub(1, SeqCst);
                    });
                }
            });
        }
    });
    assert!(
        most.load(SeqCst) <= CAP,
        "a key had {} calls inside with a cap of {CAP}",
        most.load(SeqCst)
    );
    let snapshot = bulkhead.snapshot().per_key.expect("per_key is configured");
    assert_eq!((snapshot.keys_tracked, snapshot.overflow_in_flight), (0, 0));
}

#[test]
fn a_million_distinct_keys_keep_at_most_max_keys_entries() {
    const MAX_KEYS: u32 = 1_000;
    let bulkhead = keyed(5_000, 1, MAX_KEYS);
    // A sliding window of about `MAX_KEYS` keys in flight at once, over a million
    // distinct keys: the table never holds more than `MAX_KEYS` entries, and each key's
    // entry leaves with its last call.
    let mut window = VecDeque::new();
    let mut admitted = 0u32;
    for n in 0..1_000_000u64 {
        match poll_once(&mut Box::pin(bulkhead.keyed(&n).acquire_async())) {
            Poll::Ready(Ok(permit)) => {
                admitted += 1;
                window.push_back(permit);
            }
            Poll::Ready(Err(BulkheadError::KeyLimit { .. })) => {}
            other => panic!("unexpected {other:?}"),
        }
        if window.len() >= MAX_KEYS as usize {
            window.pop_front();
        }
        if n % 10_000 == 0 {
            let per_key = bulkhead.snapshot().per_key.unwrap();
            assert!(per_key.keys_tracked <= MAX_KEYS, "{per_key:?}");
        }
    }
    assert_eq!(admitted, 1_000_000, "a new key was refused");
    drop(window);
    let per_key = bulkhead.snapshot().per_key.unwrap();
    assert_eq!((per_key.keys_tracked, per_key.overflow_in_flight), (0, 0));
}

#[test]
fn removing_the_cap_live_stops_counting_keys() {
    let bulkhead = keyed(10, 1, 10);
    let held = try_hold(&bulkhead, "a").unwrap();
    assert!(try_hold(&bulkhead, "a").is_err());
    bulkhead.configure(&support::policies(|_| {})).unwrap();
    let second = try_hold(&bulkhead, "a").unwrap();
    assert!(bulkhead.snapshot().per_key.is_none());
    drop((held, second));
    bulkhead
        .configure(&support::policies(|c| {
            c.per_key = Some(PerKeyConfig::new(1))
        }))
        .unwrap();
    assert_eq!(bulkhead.snapshot().per_key.unwrap().keys_tracked, 0);
}

#[test]
fn a_nested_call_of_a_key_at_its_cap_runs_inline_instead_of_being_refused() {
    let bulkhead = keyed(4, 1, 10);
    let outer = bulkhead.keyed("a").call(|| {
        // "a" holds its one call: a nested call of the same bulkhead and key runs inline
        // on the permit this thread holds, as any re-entrant call does.
        let nested = bulkhead.keyed("a").call(|| "inline");
        let per_key = bulkhead.snapshot().per_key.unwrap();
        (nested, per_key.keys_at_limit)
    });
    assert_eq!(outer, Ok((Ok("inline"), 1)));
    let s = bulkhead.snapshot();
    assert_eq!(s.calls.refused.key_limit, 0);
    assert_eq!(s.calls.reentrant, 1);
    assert_eq!(s.per_key.unwrap().keys_tracked, 0);
}

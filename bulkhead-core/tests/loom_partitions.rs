//! loom models of partitions racing for one semaphore bulkhead: the bulkhead's limit is
//! never exceeded, every partition count goes back to zero, and a waiter below its share
//! is always woken (a lost wake-up leaves a thread parked forever: loom reports it).
//!
//! Run as `.ci/run` does: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! -p bulkheads-core --release --test loom_partitions` (`LOOM_MAX_PREEMPTIONS=2`).
#![cfg(loom)]

use bulkhead_config_types::{Partitions, PerKeyConfig, SemaphoreConfig};
use bulkhead_core::{BulkheadError, Clock, Partition, SemaphoreBulkhead, Sleep};
use loom::sync::Arc as LoomArc;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};

#[path = "support/loom_model.rs"]
#[allow(dead_code)] // this model does not fire the clock
mod loom_model;
#[path = "support/policies.rs"]
mod policies;

use loom_model::{ModelClock, block_on, model};
use policies::WithPolicies;

/// A limit of 2 shared by `a` and `b`, one guaranteed permit each; waits up to 100ms.
fn partitioned(clock: &ModelClock) -> SemaphoreBulkhead {
    let config = SemaphoreConfig {
        max_concurrent_calls: 2,
        max_wait: bulkhead_config_types::Duration::from_millis(100),
        fair: true,
    };
    SemaphoreBulkhead::with_clock("model", &config, std::sync::Arc::new(clock.clone()))
        .with_policies(|c| c.partitions = Partitions::new([("a", 0.5), ("b", 0.5)]))
}

/// Takes a permit of `partition` (waiting if its share allows), checks the limit while
/// holding it, gives it back. `true` if admitted; a borrowing call may be refused `Full`.
fn hold_once(partition: &Partition, inside: &AtomicUsize) -> bool {
    match block_on(partition.acquire_async()) {
        Ok(permit) => {
            let now = inside.fetch_add(1, SeqCst) + 1;
            assert!(now <= 2, "{now} calls inside a limit of 2");
            inside.fetch_sub(1, SeqCst);
            drop(permit);
            true
        }
        Err(BulkheadError::Full { .. }) => false,
        Err(other) => panic!("unexpected {other:?}"),
    }
}

fn assert_at_rest(bulkhead: &SemaphoreBulkhead) {
    let s = bulkhead.snapshot();
    assert_eq!(s.available, 2, "a permit was lost or duplicated: {s:?}");
    assert_eq!(s.waiting, 0);
    for p in &s.partitions {
        assert_eq!(
            p.in_flight, 0,
            "a partition count was not taken back: {p:?}"
        );
    }
}

#[test]
fn two_partitions_racing_never_exceed_the_limit() {
    model(|| {
        let clock = ModelClock::new();
        let b = partitioned(&clock);
        let inside = LoomArc::new(AtomicUsize::new(0));
        let threads: Vec<_> = ["a", "a", "b"]
            .into_iter()
            .map(|name| {
                let (partition, inside) = (b.partition(name).unwrap(), inside.clone());
                loom::thread::spawn(move || hold_once(&partition, &inside))
            })
            .collect();
        let admitted: Vec<bool> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        // `b` is within its guarantee: it may wait and is always admitted in the end.
        assert!(admitted[2], "the partition below its share was refused");
        assert_at_rest(&b);
    });
}

#[test]
fn a_borrowed_permit_is_handed_to_the_waiting_partition() {
    model(|| {
        let clock = ModelClock::new();
        let b = partitioned(&clock);
        let a = b.partition("a").unwrap();
        // `a` takes its guaranteed permit and borrows the other.
        let first = block_on(a.acquire_async()).unwrap();
        let borrowed = block_on(a.acquire_async()).unwrap();
        let waiter = {
            let partition = b.partition("b").unwrap();
            loom::thread::spawn(move || {
                let permit = block_on(partition.acquire_async()).unwrap();
                drop(permit);
            })
        };
        let racer = {
            let a = a.clone();
            // A third `a` call borrows or is refused; it never waits.
            loom::thread::spawn(move || block_on(a.acquire_async()).map(drop).is_ok())
        };
        drop(borrowed);
        racer.join().unwrap();
        waiter.join().unwrap();
        drop(first);
        assert_at_rest(&b);
    });
}

/// Sync calls: a call that finds a free permit takes it first and is counted by its
/// partition alone (not the bulkhead's `permitted`); one that finds none is counted in
/// first and, within its share, waits. Racing both ways, the limit holds, every count goes
/// back, and the snapshot's `permitted` is exactly the calls admitted.
#[test]
fn sync_calls_admitted_at_once_or_counted_first_keep_the_limit_and_the_counts() {
    model(|| {
        let clock = ModelClock::new();
        let b = partitioned(&clock);
        let inside = LoomArc::new(AtomicUsize::new(0));
        let admitted = LoomArc::new(AtomicUsize::new(0));
        let threads: Vec<_> = ["a", "a", "b"]
            .into_iter()
            .map(|name| {
                let partition = b.partition(name).unwrap();
                let (inside, admitted) = (inside.clone(), admitted.clone());
                loom::thread::spawn(move || match partition.acquire() {
                    Ok(permit) => {
                        let now = inside.fetch_add(1, SeqCst) + 1;
                        assert!(now <= 2, "{now} calls inside a limit of 2");
                        inside.fetch_sub(1, SeqCst);
                        admitted.fetch_add(1, SeqCst);
                        drop(permit);
                    }
                    Err(BulkheadError::Full { .. }) => {}
                    Err(other) => panic!("unexpected {other:?}"),
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_at_rest(&b);
        let s = b.snapshot();
        let admitted = admitted.load(SeqCst) as u64;
        assert_eq!(s.calls.permitted, admitted, "{s:?}");
        let by_partition: u64 = s.partitions.iter().map(|p| p.admitted).sum();
        assert_eq!(by_partition, admitted, "{s:?}");
    });
}

/// One call of the model below: admitted, it is alone in the one permit released;
/// refused, it is refused `Full`.
fn alone_or_full<P>(permit: Result<P, BulkheadError>, inside: &AtomicUsize) {
    match permit {
        Ok(permit) => {
            let now = inside.fetch_add(1, SeqCst) + 1;
            assert!(now <= 1, "{now} calls in the one permit released");
            inside.fetch_sub(1, SeqCst);
            drop(permit);
        }
        Err(BulkheadError::Full { .. }) => {}
        Err(other) => panic!("unexpected {other:?}"),
    }
}

/// The shares-to-slot hand-off: two calls of one key (cap 2) in partition `a`, which holds
/// its guarantee and one borrowed permit, so each call is granted its key's and its
/// partition's share and then asks for a permit (one sync, never waiting; one async)
/// while the borrowed permit is released. Each call is admitted or refused `Full`; either
/// way every share it was granted is given back exactly once: at rest the partition and
/// the key count nothing, and no permit is lost or duplicated.
#[test]
fn shares_granted_then_a_permit_refused_or_taken_racing_a_release_are_given_back_once() {
    model(|| {
        let clock = ModelClock::new();
        let b = partitioned(&clock).with_policies(|c| {
            c.partitions = Partitions::new([("a", 0.5), ("b", 0.5)]);
            c.per_key = Some(PerKeyConfig::new(2));
        });
        let a = b.partition("a").unwrap();
        let first = block_on(a.acquire_async()).unwrap();
        let borrowed = block_on(a.acquire_async()).unwrap();
        let inside = LoomArc::new(AtomicUsize::new(0));
        let sync_call = {
            let (a, inside) = (a.clone(), inside.clone());
            loom::thread::spawn(move || alone_or_full(a.keyed("tenant").try_acquire(), &inside))
        };
        let async_call = {
            let (a, inside) = (a.clone(), inside.clone());
            loom::thread::spawn(move || {
                alone_or_full(block_on(a.keyed("tenant").acquire_async()), &inside);
            })
        };
        drop(borrowed);
        sync_call.join().unwrap();
        async_call.join().unwrap();
        drop(first);
        assert_at_rest(&b);
        let keys = b.snapshot().per_key.expect("per_key is configured");
        assert_eq!(
            keys.keys_tracked, 0,
            "a key's count was not taken back: {keys:?}"
        );
        assert_eq!(keys.overflow_in_flight, 0, "{keys:?}");
    });
}

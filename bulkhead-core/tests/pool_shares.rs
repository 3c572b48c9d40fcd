//! Partitions and per-key caps on a thread pool: they divide what the pool admits
//! (running + queued); a borrowing call takes only a free slot and never waits; the pool's
//! bound is never exceeded; a key at its cap is refused with its input handed back; a
//! nested call runs inline; a timed call is cut at its deadline. Deterministic: gates,
//! barriers, single polls and a manual clock; no sleeps.

use std::sync::Barrier;
use std::task::Poll;

use bulkhead_config_types::{Partitions, PerKeyConfig};
use bulkhead_core::{BulkheadError, PartitionSnapshot, ThreadPoolBulkhead};

mod support;

use support::{Gate, WithPolicies, poll_once, pool_config};

/// One worker and a queue of one: two calls admitted at most, one guaranteed per partition.
fn partitioned() -> ThreadPoolBulkhead {
    ThreadPoolBulkhead::new("pool-shares", &pool_config(1, 1, 1))
        .with_policies(|c| c.partitions = Partitions::new([("live", 0.5), ("batch", 0.5)]))
}

/// Opens the gate when dropped, so a failed assertion inside a scope cannot leave a
/// worker waiting on it (and the scope waiting for that worker).
struct OpenOnDrop(Gate);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Runs `call` on a thread, with `wait` for its body to call on a worker (it returns once
/// the test's `check` is done); runs `check` while that call holds its slot, and returns
/// both results.
fn while_held<R: Send, C>(
    call: impl FnOnce(&(dyn Fn() + Sync)) -> R + Send,
    check: impl FnOnce() -> C,
) -> (R, C) {
    let (gate, started) = (Gate::default(), Barrier::new(2));
    let wait = || {
        started.wait();
        gate.wait();
    };
    std::thread::scope(|s| {
        let _open = OpenOnDrop(gate.clone());
        let held = s.spawn(|| call(&wait));
        started.wait();
        let checked = check();
        gate.open();
        (held.join().unwrap(), checked)
    })
}

fn partition(pool: &ThreadPoolBulkhead, name: &str) -> PartitionSnapshot {
    let partitions = pool.snapshot().partitions;
    partitions.into_iter().find(|p| p.name == name).unwrap()
}

#[test]
fn a_partition_past_its_share_borrows_only_free_room_and_the_pool_bound_holds() {
    let pool = partitioned();
    assert_eq!(partition(&pool, "batch").guaranteed, 1);
    // Batch's guaranteed call runs on the only worker and waits there.
    let batch_call = |wait: &(dyn Fn() + Sync)| pool.in_partition("batch").call((), |()| wait());
    let (held, borrowed) = while_held(batch_call, || {
        // A second batch call is past the share: it borrows the free queue slot.
        let mut borrowed = Box::pin(
            pool.in_partition("batch")
                .call_async(2u32, |n| async move { n }),
        );
        assert!(
            poll_once(&mut borrowed).is_pending(),
            "queued behind the held call"
        );
        // The pool now admits nothing more: a third batch call is refused at once, its
        // input handed back, and so is live (within its share, but `on_full: abort`).
        let third = pool.in_partition("batch").call(3u32, |n| n);
        assert!(
            matches!(&third, Err(r) if r.input == 3 && matches!(r.error, BulkheadError::Full { .. }))
        );
        let mut live = Box::pin(
            pool.in_partition("live")
                .call_async(4u32, |n| async move { n }),
        );
        assert!(matches!(poll_once(&mut live), Poll::Ready(Err(r)) if r.input == 4));
        let s = pool.snapshot();
        assert_eq!(
            (s.active, s.queued),
            (1, 1),
            "never above running + queued = 2"
        );
        let batch = partition(&pool, "batch");
        assert_eq!((batch.in_flight, batch.refused), (2, 1));
        assert_eq!(partition(&pool, "live").refused, 1);
        borrowed
    });
    held.unwrap();
    assert_eq!(futures_executor::block_on(borrowed).ok(), Some(2));
    // A pool call's outcome is counted when it ends: the borrowed one is done now.
    assert_eq!(partition(&pool, "batch").borrowed, 1);
    for name in ["live", "batch"] {
        assert_eq!(
            partition(&pool, name).in_flight,
            0,
            "{name}'s count came back"
        );
    }
}

#[test]
fn calls_that_name_no_partition_only_borrow() {
    let pool = partitioned();
    let live_call = |wait: &(dyn Fn() + Sync)| pool.in_partition("live").call((), |()| wait());
    let (held, first) = while_held(live_call, || {
        // One slot is free: an unpartitioned call borrows it.
        let mut first = Box::pin(pool.unpartitioned().call_async(1u32, |n| async move { n }));
        assert!(poll_once(&mut first).is_pending());
        // None is left: it is refused rather than waiting or running on its caller.
        let second = pool.unpartitioned().call(2u32, |n| n);
        assert!(matches!(second, Err(r) if matches!(r.error, BulkheadError::Full { .. })));
        first
    });
    held.unwrap();
    assert_eq!(futures_executor::block_on(first).ok(), Some(1));
}

#[test]
fn a_key_at_its_cap_is_refused_with_its_input_while_other_keys_are_served() {
    let pool = ThreadPoolBulkhead::new("pool-keys", &pool_config(2, 2, 4))
        .with_policies(|c| c.per_key = Some(PerKeyConfig::new(1)));
    let tenant_a = |wait: &(dyn Fn() + Sync)| pool.keyed("tenant-a").call((), |()| wait());
    let (held, ()) = while_held(tenant_a, || {
        let refused = pool.keyed("tenant-a").call(7u32, |n| n);
        assert!(
            matches!(&refused, Err(r) if r.input == 7 && matches!(r.error, BulkheadError::KeyLimit { .. }))
        );
        assert_eq!(pool.keyed("tenant-b").call(8u32, |n| n).ok(), Some(8));
        let per_key = pool.snapshot().per_key.unwrap();
        assert_eq!((per_key.keys_tracked, per_key.keys_at_limit), (1, 1));
    });
    held.unwrap();
    let s = pool.snapshot();
    assert_eq!(s.calls.refused.key_limit, 1);
    assert_eq!(s.per_key.unwrap().keys_tracked, 0);
}

#[test]
fn a_nested_call_of_a_key_at_its_cap_runs_inline_on_the_worker() {
    let pool = ThreadPoolBulkhead::new("pool-nested", &pool_config(1, 1, 1))
        .with_policies(|c| c.per_key = Some(PerKeyConfig::new(1)));
    let outer = pool
        .keyed("a")
        .call((), |()| pool.keyed("a").call(5u32, |n| n + 1).ok());
    assert_eq!(outer.ok(), Some(Some(6)));
    let s = pool.snapshot();
    assert_eq!((s.calls.refused.key_limit, s.calls.reentrant), (0, 1));
}

#[test]
fn a_partitions_timed_async_call_is_cut_at_the_deadline_and_its_count_comes_back() {
    let (clock, shared_clock) = support::manual_clock();
    let timeout = std::time::Duration::from_secs(2);
    let pool = ThreadPoolBulkhead::with_clock("pool-timed", &pool_config(1, 1, 1), shared_clock)
        .with_policies(|c| {
            c.partitions = Partitions::new([("live", 0.5), ("batch", 0.5)]);
            c.timeout = Some(timeout.into());
        });
    std::thread::scope(|s| {
        let caller = s.spawn(|| {
            futures_executor::block_on(
                pool.in_partition("live")
                    .call_async_timed(1u32, |_| std::future::pending::<u32>()),
            )
        });
        // The worker started the body: its deadline sleeps on the clock.
        clock.wait_for_sleepers(1);
        assert_eq!(partition(&pool, "live").in_flight, 1);
        clock.advance(timeout);
        match caller.join().expect("caller") {
            Ok(Err(BulkheadError::CallTimeout { after, .. })) => assert_eq!(after, timeout),
            other => panic!("expected a call timeout, got {other:?}"),
        }
    });
    assert_eq!(partition(&pool, "live").in_flight, 0);
    // A body that finishes in time gives its output.
    let done = futures_executor::block_on(
        pool.in_partition("batch")
            .call_async_timed(2u32, |n| async move { n * 2 }),
    );
    assert!(matches!(done, Ok(Ok(4))));
    assert_eq!(pool.snapshot().calls.timed_out, 1);
}

#[test]
fn a_nested_call_of_a_partition_runs_inline_and_is_not_counted_by_it() {
    let pool = partitioned();
    let outer = pool.in_partition("live").call((), |()| {
        let nested = pool.in_partition("live").call(5u32, |n| n + 1).ok();
        (nested, partition(&pool, "live").in_flight)
    });
    // Inside the outer call only the outer call is in flight: the nested one holds nothing.
    assert_eq!(outer.ok(), Some((Some(6), 1)));
    let live = partition(&pool, "live");
    assert_eq!((live.admitted, live.borrowed, live.in_flight), (1, 0, 0));
    assert_eq!(pool.snapshot().calls.reentrant, 1);
}

//! Partitions of a semaphore bulkhead: guarantees, borrowing, giving back, live resize.
//! Deterministic: permits held as async permits on the test thread (they mark no thread
//! as inside the bulkhead), waiters polled by hand, a `ManualClock`, barriers; no sleeps.

use std::sync::{Arc, Barrier};
use std::task::Poll;

use bulkhead_config_types::{Partitions, SemaphoreConfig};
use bulkhead_core::{AsyncSharePermit, BulkheadError, Partition, SemaphoreBulkhead};

mod support;

use support::{Gate, WithPolicies, poll_once, semaphore as config};

/// `search`: a limit of 10, `live` 0.8 (8 guaranteed) and `batch` 0.2 (2), waiting up to
/// one second on a manual clock.
fn search() -> (SemaphoreBulkhead, Partition, Partition) {
    let (_clock, shared) = support::manual_clock();
    let bulkhead = SemaphoreBulkhead::with_clock("search", &config(10, 1000), shared)
        .with_policies(|c| c.partitions = Partitions::new([("live", 0.8), ("batch", 0.2)]));
    let live = bulkhead.partition("live").unwrap();
    let batch = bulkhead.partition("batch").unwrap();
    (bulkhead, live, batch)
}

/// Takes a permit of `partition` that must be granted at once.
fn hold(partition: &Partition) -> AsyncSharePermit<'_> {
    match poll_once(&mut Box::pin(partition.acquire_async())) {
        Poll::Ready(Ok(permit)) => permit,
        other => panic!("expected a permit at once for {partition:?}, got {other:?}"),
    }
}

fn refused_at_once(partition: &Partition) -> BulkheadError {
    match poll_once(&mut Box::pin(partition.acquire_async())) {
        Poll::Ready(Err(err)) => err,
        Poll::Ready(Ok(_)) => panic!("{partition:?} was admitted"),
        Poll::Pending => panic!("{partition:?} waits"),
    }
}

#[test]
fn a_partition_at_its_share_borrows_only_a_free_permit_and_never_waits() {
    let (bulkhead, live, batch) = search();
    let mut held: Vec<_> = (0..2).map(|_| hold(&batch)).collect();
    held.extend((0..7).map(|_| hold(&live)));
    // Batch is at its guarantee (2); one permit is free and nobody waits: it borrows it.
    held.push(hold(&batch));
    assert_eq!(bulkhead.available(), 0);
    // Batch is over its share: it may not wait, even with `max_wait` (1s) to spare.
    assert!(matches!(
        refused_at_once(&batch),
        BulkheadError::Full { .. }
    ));
    let s = batch.snapshot().unwrap();
    assert_eq!(
        (s.guaranteed, s.in_flight, s.admitted, s.borrowed, s.refused),
        (2, 3, 3, 1, 1)
    );
    drop(held);
    assert_eq!(bulkhead.available(), 10);
}

#[test]
fn a_released_permit_goes_to_the_partition_waiting_below_its_share() {
    let (bulkhead, live, batch) = search();
    // Live is idle: batch borrows the whole bulkhead.
    let mut borrowed: Vec<_> = (0..10).map(|_| hold(&batch)).collect();
    assert_eq!(batch.snapshot().unwrap().borrowed, 8);

    // A live call is below its share: it waits (up to max_wait) instead of being refused.
    let mut live_call = Box::pin(live.acquire_async());
    assert!(poll_once(&mut live_call).is_pending());
    assert_eq!(bulkhead.snapshot().waiting, 1);

    // Batch may not take the next permit ahead of it: it is over its share, never waits,
    // and a free permit (there is none) would go to the waiter first.
    assert!(matches!(
        refused_at_once(&batch),
        BulkheadError::Full { .. }
    ));

    // Batch gives one back: it goes to the live waiter, not to the count.
    drop(borrowed.pop());
    let live_permit = match poll_once(&mut live_call) {
        Poll::Ready(Ok(permit)) => permit,
        other => panic!("the live waiter was not given the permit: {other:?}"),
    };
    assert_eq!(bulkhead.available(), 0);
    assert_eq!(live.snapshot().unwrap().in_flight, 1);
    // Batch still borrows nothing more while live holds it.
    assert!(matches!(
        refused_at_once(&batch),
        BulkheadError::Full { .. }
    ));
    drop(live_permit);
    drop(borrowed);
    assert_eq!(bulkhead.available(), 10);
    assert_eq!(batch.snapshot().unwrap().in_flight, 0);
}

#[test]
fn a_batch_burst_cannot_delay_live_calls_within_their_share() {
    let (bulkhead, live, batch) = search();
    // Batch holds its guarantee and borrows what live leaves idle.
    let batch_held: Vec<_> = (0..2).map(|_| hold(&batch)).collect();
    let live_held: Vec<_> = (0..4).map(|_| hold(&live)).collect();
    let borrowed: Vec<_> = (0..4).map(|_| hold(&batch)).collect();
    assert_eq!(bulkhead.available(), 0);
    // Four live calls arrive: all within live's share, all queue; 20 more batch calls
    // arrive behind them and are refused at once, never queued ahead of live.
    let mut live_calls: Vec<_> = (0..4).map(|_| Box::pin(live.acquire_async())).collect();
    for call in &mut live_calls {
        assert!(poll_once(call).is_pending());
    }
    for _ in 0..20 {
        assert!(matches!(
            refused_at_once(&batch),
            BulkheadError::Full { .. }
        ));
    }
    assert_eq!(bulkhead.snapshot().waiting, 4);
    // Each borrowed permit batch returns is handed to a live waiter, in arrival order.
    let mut granted = Vec::new();
    for (returned, mut call) in borrowed.into_iter().zip(live_calls) {
        drop(returned);
        match poll_once(&mut call) {
            Poll::Ready(Ok(permit)) => granted.push(permit),
            other => panic!("a live call was delayed past a returned permit: {other:?}"),
        }
    }
    let live_now = live.snapshot().unwrap();
    assert_eq!((live_now.in_flight, live_now.borrowed), (8, 0));
    assert_eq!(
        batch.snapshot().unwrap().in_flight,
        2,
        "batch is back to its guarantee"
    );
    drop((batch_held, live_held, granted));
}

#[test]
fn calls_that_name_no_partition_only_borrow() {
    let (bulkhead, live, _batch) = search();
    let held: Vec<_> = (0..10).map(|_| hold(&live)).collect();
    let mut unnamed = Box::pin(bulkhead.unpartitioned().acquire_async());
    assert!(matches!(
        poll_once(&mut unnamed),
        Poll::Ready(Err(BulkheadError::Full { .. }))
    ));
    drop(held);
    assert_eq!(bulkhead.unpartitioned().call(|| 1), Ok(1));
    assert_eq!(bulkhead.in_partition("no-such").call(|| 2), Ok(2));
}

#[test]
fn guarantees_follow_a_live_resize() {
    let (bulkhead, live, batch) = search();
    assert_eq!((live.guaranteed(), batch.guaranteed()), (8, 2));
    bulkhead.resize(&config(20, 1000));
    assert_eq!((live.guaranteed(), batch.guaranteed()), (16, 4));
    // Batch's fourth call is within the new guarantee: it may wait.
    let held: Vec<_> = (0..16).map(|_| hold(&live)).collect();
    let batch_held: Vec<_> = (0..4).map(|_| hold(&batch)).collect();
    let mut fifth = Box::pin(batch.acquire_async());
    assert!(matches!(
        poll_once(&mut fifth),
        Poll::Ready(Err(BulkheadError::Full { .. }))
    ));
    drop((held, batch_held));
    bulkhead.resize(&config(5, 1000));
    assert_eq!((live.guaranteed(), batch.guaranteed()), (4, 1));
}

#[test]
fn shares_change_live_and_names_are_fixed() {
    let (bulkhead, live, batch) = search();
    bulkhead
        .configure(&support::policies(|c| {
            c.partitions = Partitions::new([("live", 0.5), ("batch", 0.5)]);
        }))
        .unwrap();
    assert_eq!((live.guaranteed(), batch.guaranteed()), (5, 5));
    let err = bulkhead
        .configure(&support::policies(|c| {
            c.partitions = Partitions::new([("live", 0.5), ("bulk", 0.5)]);
        }))
        .unwrap_err();
    assert_eq!(err.configured, ["bulk", "live"]);
    assert_eq!(live.guaranteed(), 5, "a refused change changes nothing");
}

#[test]
fn threads_racing_two_partitions_never_exceed_the_limit() {
    const THREADS: usize = 16;
    let bulkhead = SemaphoreBulkhead::new(
        "race",
        &SemaphoreConfig {
            max_concurrent_calls: 4,
            ..SemaphoreConfig::default()
        },
    )
    .with_policies(|c| c.partitions = Partitions::new([("live", 0.5), ("batch", 0.5)]));
    let inside = Arc::new(std::sync::atomic::AtomicU32::new(0));
    for _ in 0..200 {
        let start = Barrier::new(THREADS);
        let release = Gate::default();
        let tried = Barrier::new(THREADS + 1);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (bulkhead, inside, start, tried, release) =
                    (&bulkhead, &inside, &start, &tried, release.clone());
                s.spawn(move || {
                    let partition = bulkhead.partition(["live", "batch"][t % 2]).unwrap();
                    start.wait();
                    let permit = partition.try_acquire();
                    if permit.is_ok() {
                        let now = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                        assert!(now <= 4, "{now} calls inside a limit of 4");
                    }
                    tried.wait();
                    release.wait();
                    if permit.is_ok() {
                        inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    drop(permit);
                });
            }
            tried.wait();
            let admitted = inside.load(std::sync::atomic::Ordering::SeqCst);
            assert_eq!(
                admitted, 4,
                "free permits were left while callers were refused"
            );
            release.open();
        });
        assert_eq!(bulkhead.available(), 4);
    }
}

#[test]
fn sync_calls_are_counted_by_their_partition_once_and_nested_ones_not_at_all() {
    let (bulkhead, live, batch) = search();
    // batch (2 guaranteed) holds its share (async permits: the thread is not marked).
    let (first, second) = (hold(&batch), hold(&batch));
    let nested = live
        .call(|| {
            // Inside the bulkhead on this thread: re-entrant, not counted by `batch`.
            let inner = batch.call(|| 7).unwrap();
            (inner, live.snapshot().unwrap().in_flight)
        })
        .unwrap();
    assert_eq!(nested, (7, 1), "the nested call was not counted in flight");
    // A sync call that finds a free permit takes it, counted borrowed beyond the share.
    let third = batch.acquire().unwrap();
    drop(third);
    drop((first, second));
    let s = bulkhead.snapshot();
    assert_eq!(s.calls.permitted, 4, "each admitted call once: {s:?}");
    assert_eq!(s.calls.reentrant, 1);
    assert_eq!(s.calls.completed, 4);
    let by_name = |name: &str| s.partitions.iter().find(|p| p.name == name).unwrap();
    let (live, batch) = (by_name("live"), by_name("batch"));
    assert_eq!((live.admitted, live.borrowed, live.in_flight), (1, 0, 0));
    assert_eq!((batch.admitted, batch.borrowed, batch.in_flight), (3, 1, 0));
}

//! The order of every admission, the same on both kinds and every call shape: re-entry →
//! shut down → rate limit → slot. Deterministic: a `ManualClock`, futures polled by hand.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bulkhead_config_types::{Partitions, SemaphoreConfig};
use bulkhead_core::{BulkheadError, SemaphoreBulkhead, ThreadPoolBulkhead};
use support::{WithPolicies, manual_clock, poll_once, pool_config, rate_limit};

/// One permission per second; a caller may wait up to a second for the next one.
fn one_per_second(c: &mut bulkhead_config_types::BulkheadConfig) {
    c.rate_limit = Some(rate_limit(1, 1000, 1000));
}

fn boxed<'a, T>(fut: impl Future<Output = T> + 'a) -> Pin<Box<dyn Future<Output = T> + 'a>> {
    Box::pin(fut)
}

fn is_shut_down(error: &BulkheadError) -> bool {
    matches!(error, BulkheadError::ShutDown { .. })
}

#[test]
fn a_shut_down_semaphore_refuses_every_call_shape_before_its_rate_limit_spends_a_permission() {
    let (_clock, clock) = manual_clock();
    let config = SemaphoreConfig {
        max_concurrent_calls: 2,
        max_wait: Duration::from_secs(1).into(),
        fair: false,
    };
    let sem = SemaphoreBulkhead::with_clock("order-sem", &config, clock).with_policies(|c| {
        one_per_second(c);
        c.partitions = Partitions::new([("live", 0.5)]);
    });
    sem.shutdown(Duration::ZERO);

    assert!(is_shut_down(&sem.call(|| ()).unwrap_err()));
    assert!(is_shut_down(&sem.try_acquire().map(drop).unwrap_err()));
    let mut call = Box::pin(sem.call_async(async {}));
    assert!(matches!(poll_once(&mut call), Poll::Ready(Err(e)) if is_shut_down(&e)));
    let mut acquire = boxed(sem.acquire_async());
    assert!(matches!(poll_once(&mut acquire), Poll::Ready(Err(e)) if is_shut_down(&e)));
    // Through the shares: a call of a partition, and one that only borrows.
    assert!(is_shut_down(
        &sem.partition("live").unwrap().call(|| ()).unwrap_err()
    ));
    let mut borrowing = boxed(sem.unpartitioned().acquire_async());
    assert!(matches!(poll_once(&mut borrowing), Poll::Ready(Err(e)) if is_shut_down(&e)));

    assert_eq!(
        sem.rate_limiter().available_permissions(),
        1,
        "a refused call spent nothing"
    );
    let snap = sem.snapshot();
    assert_eq!(snap.calls.refused.shut_down, 6, "{snap:?}");
    assert_eq!(snap.calls.refused.rate_limited, 0, "{snap:?}");
}

#[test]
fn a_shut_down_pool_refuses_every_call_shape_before_its_rate_limit_spends_a_permission() {
    let (_clock, clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("order-pool", &pool_config(1, 1, 2), clock)
        .with_policies(|c| {
            one_per_second(c);
            c.partitions = Partitions::new([("live", 0.5)]);
        });
    pool.shutdown(Duration::ZERO);

    assert!(is_shut_down(&pool.call(1, |n| n).unwrap_err().error));
    let mut call = Box::pin(pool.call_async(2, |n| async move { n }));
    assert!(matches!(poll_once(&mut call), Poll::Ready(Err(r)) if is_shut_down(&r.error)));
    assert!(is_shut_down(
        &pool.in_partition("live").call(3, |n| n).unwrap_err().error
    ));
    assert!(is_shut_down(
        &pool.unpartitioned().call(4, |n| n).unwrap_err().error
    ));
    let mut borrowing = boxed(pool.unpartitioned().call_async(5, |n| async move { n }));
    assert!(matches!(poll_once(&mut borrowing), Poll::Ready(Err(r)) if is_shut_down(&r.error)));

    assert_eq!(
        pool.rate_limiter().available_permissions(),
        1,
        "a refused call spent nothing"
    );
    let snap = pool.snapshot();
    assert_eq!(snap.calls.refused.shut_down, 5, "{snap:?}");
    assert_eq!(snap.calls.refused.rate_limited, 0, "{snap:?}");
}

#[test]
fn a_call_that_only_borrows_never_waits_for_a_coming_rate_limit_period_on_either_kind() {
    let (clock, dyn_clock) = manual_clock();
    let config = SemaphoreConfig {
        max_concurrent_calls: 4,
        max_wait: Duration::from_secs(1).into(),
        fair: false,
    };
    let sem = SemaphoreBulkhead::with_clock("order-borrow-sem", &config, dyn_clock.clone())
        .with_policies(|c| {
            one_per_second(c);
            c.partitions = Partitions::new([("live", 0.5)]);
        });
    let pool =
        ThreadPoolBulkhead::with_clock("order-borrow-pool", &pool_config(1, 1, 3), dyn_clock)
            .with_policies(|c| {
                one_per_second(c);
                c.partitions = Partitions::new([("live", 0.5)]);
            });
    // This period's one permission is spent on each.
    assert_eq!(sem.call(|| 1), Ok(1));
    assert_eq!(pool.call(1, |n| n).ok(), Some(1));

    // A call below its partition's share may wait for the next period ...
    let live = sem.partition("live").unwrap();
    let mut waits = boxed(live.admission().acquire_async());
    assert!(poll_once(&mut waits).is_pending());
    let mut pool_waits = boxed(
        pool.in_partition("live")
            .call_async(2, |n| async move { n }),
    );
    assert!(poll_once(&mut pool_waits).is_pending());
    drop((waits, pool_waits));

    // ... one that only borrows is refused at once, sync or async.
    let limited = |e: &BulkheadError| matches!(e, BulkheadError::RateLimited { .. });
    let mut borrowing = boxed(sem.unpartitioned().acquire_async());
    assert!(matches!(poll_once(&mut borrowing), Poll::Ready(Err(e)) if limited(&e)));
    assert!(limited(&sem.unpartitioned().call(|| ()).unwrap_err()));
    let mut pool_borrowing = boxed(pool.unpartitioned().call_async(3, |n| async move { n }));
    assert!(matches!(poll_once(&mut pool_borrowing), Poll::Ready(Err(r)) if limited(&r.error)));
    assert!(limited(
        &pool.unpartitioned().call(4, |n| n).unwrap_err().error
    ));

    // The dropped waiters gave their reserved permissions back: the next period has one.
    clock.advance(Duration::from_secs(1));
    assert_eq!(sem.rate_limiter().available_permissions(), 1);
    assert_eq!(pool.rate_limiter().available_permissions(), 1);
    pool.shutdown(Duration::from_secs(5));
}

#[test]
fn a_nested_call_runs_inline_before_the_shutdown_and_rate_limit_are_checked() {
    let (_clock, clock) = manual_clock();
    let sem = SemaphoreBulkhead::with_clock("order-nested", &support::semaphore(1, 0), clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 1000, 0)));
    let nested = sem.call(|| {
        sem.shutdown(Duration::ZERO);
        // Inside: no permit, no permission, not refused for the shutdown.
        let sync = sem.call(|| "sync");
        let mut call = Box::pin(sem.call_async(async { "async" }));
        (sync, poll_once(&mut call))
    });
    let (sync, polled) = nested.expect("admitted before the shutdown");
    assert_eq!(sync, Ok("sync"));
    assert!(matches!(polled, Poll::Ready(Ok("async"))));
    let snap = sem.snapshot();
    assert_eq!(snap.calls.reentrant, 2, "{snap:?}");
    assert_eq!(snap.calls.permitted, 1, "{snap:?}");
    assert_eq!(
        sem.rate_limiter().available_permissions(),
        0,
        "the outer call's"
    );
}

#[test]
fn an_async_call_that_only_borrows_takes_no_free_slot_while_a_caller_waits_for_room() {
    let (_clock, clock) = manual_clock();
    // Two calls admitted at most (one running, one queued), both guaranteed to `live`.
    let limits = bulkhead_config_types::ThreadPoolConfig {
        on_full: bulkhead_config_types::OnFull::Wait(Duration::from_secs(10).into()),
        ..pool_config(1, 1, 1)
    };
    let pool = ThreadPoolBulkhead::with_clock("order-room", &limits, clock)
        .with_policies(|c| c.partitions = Partitions::new([("live", 1.0)]));
    let blocking = |gate: &support::Gate| {
        let gate = gate.clone();
        Box::pin(pool.call_async((), move |()| async move { gate.wait() }))
    };
    // Both slots taken: one body blocks the worker, another waits in the queue behind it.
    let (first_gate, second_gate) = (support::Gate::default(), support::Gate::default());
    let mut first = blocking(&first_gate);
    let mut second = blocking(&second_gate);
    assert!(poll_once(&mut first).is_pending());
    assert!(poll_once(&mut second).is_pending());
    // Two calls of `live`, below its share, wait for room.
    let mut waiters: Vec<_> = (0..2)
        .map(|n| {
            boxed(
                pool.in_partition("live")
                    .call_async(n, |n| async move { n }),
            )
        })
        .collect();
    for waiter in &mut waiters {
        assert!(poll_once(waiter).is_pending());
    }
    assert_eq!(pool.snapshot().waiting, 2);
    // The first body ends: its slot frees and one waiter is woken (not polled yet); the
    // other still waits for room while a slot is free.
    first_gate.open();
    support::wait_until(|| pool.snapshot().queued == 0 && pool.snapshot().waiting == 1);
    assert!(matches!(poll_once(&mut first), Poll::Ready(Ok(()))));

    // A call past its share borrows: it takes no slot while someone waits for room.
    let mut borrowing = boxed(pool.unpartitioned().call_async(7, |n| async move { n }));
    assert!(matches!(
        poll_once(&mut borrowing),
        Poll::Ready(Err(r)) if matches!(r.error, BulkheadError::Full { .. }) && r.input == 7
    ));
    second_gate.open();
    let answers: Vec<_> = waiters
        .into_iter()
        .map(|waiter| futures_executor::block_on(waiter).ok())
        .collect();
    assert_eq!(answers, [Some(0), Some(1)]);
    assert!(futures_executor::block_on(second).is_ok());
    pool.shutdown(Duration::from_secs(5));
}

//! The semaphore bulkhead's behaviour: admission, waiting, cancellation, fairness, resize,
//! re-entry and accounting. Deterministic: barriers, manual polling and a `ManualClock`,
//! never a sleep.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bulkhead_core::{Acquire, AsyncPermit, BulkheadError, ManualClock, SemaphoreBulkhead};

mod support;

use support::{XorShift, poll_once, semaphore as config, yield_once};

fn manual(name: &str, limit: u32, max_wait_ms: u64) -> (SemaphoreBulkhead, ManualClock) {
    let (clock, shared) = support::manual_clock();
    let bulkhead = SemaphoreBulkhead::with_clock(name, &config(limit, max_wait_ms), shared);
    (bulkhead, clock)
}

/// Takes a permit without marking this thread as inside the bulkhead (an async permit),
/// so the test thread can hold permits and still be treated as a newcomer.
fn hold(bulkhead: &SemaphoreBulkhead) -> AsyncPermit<'_> {
    match poll_once(&mut bulkhead.acquire_async()) {
        Poll::Ready(Ok(permit)) => permit,
        other => panic!("expected a free permit, got {other:?}"),
    }
}

/// Spins until `bulkhead` has `n` callers waiting for a permit.
fn wait_for_waiters(bulkhead: &SemaphoreBulkhead, n: u32) {
    while bulkhead.snapshot().waiting < n {
        std::thread::yield_now();
    }
}

#[test]
fn twenty_threads_racing_a_limit_of_five_admit_exactly_five() {
    const THREADS: usize = 20;
    let bulkhead = SemaphoreBulkhead::new("race", &config(5, 0));
    for iteration in 0..300 {
        let start = Barrier::new(THREADS);
        let tried = Barrier::new(THREADS);
        let admitted = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    start.wait();
                    let permit = bulkhead.try_acquire();
                    if permit.is_ok() {
                        admitted.fetch_add(1, SeqCst);
                    }
                    // Hold the permit until everyone has tried.
                    tried.wait();
                    drop(permit);
                });
            }
        });
        assert_eq!(admitted.load(SeqCst), 5, "iteration {iteration}");
        assert_eq!(bulkhead.available(), 5);
    }
    let calls = bulkhead.snapshot().calls;
    assert_eq!(calls.permitted, 300 * 5);
    assert_eq!(calls.completed, 300 * 5);
    assert_eq!(calls.refused.full, 300 * 15);
}

#[test]
fn zero_max_wait_fails_fast_with_full() {
    let (bulkhead, clock) = manual("fast", 1, 0);
    let _held = hold(&bulkhead);
    std::thread::scope(|s| {
        s.spawn(|| {
            let err = bulkhead.acquire().unwrap_err();
            assert!(matches!(err, BulkheadError::Full { ref name } if &**name == "fast"));
        });
    });
    assert_eq!(clock.sleepers(), 0);
    assert_eq!(bulkhead.snapshot().calls.refused.full, 1);
}

#[test]
fn max_wait_admits_when_a_permit_frees_within_the_wait() {
    let (bulkhead, clock) = manual("wait", 1, 100);
    let held = hold(&bulkhead);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| bulkhead.call(|| "ran"));
        clock.wait_for_sleepers(1);
        clock.advance(Duration::from_millis(99));
        wait_for_waiters(&bulkhead, 1);
        drop(held);
        assert_eq!(waiter.join().unwrap(), Ok("ran"));
    });
    assert_eq!(bulkhead.available(), 1);
    assert_eq!(bulkhead.snapshot().calls.refused.total(), 0);
}

#[test]
fn max_wait_fails_with_timeout_once_the_clock_passed_it() {
    let (bulkhead, clock) = manual("wait", 1, 100);
    let _held = hold(&bulkhead);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| bulkhead.call(|| "ran"));
        clock.wait_for_sleepers(1);
        clock.advance(Duration::from_millis(100));
        let err = waiter.join().unwrap().unwrap_err();
        assert_eq!(err.reason(), "timeout");
        assert!(
            matches!(err, BulkheadError::Timeout { waited, .. } if waited == Duration::from_millis(100))
        );
    });
    let snapshot = bulkhead.snapshot();
    assert_eq!(snapshot.waiting, 0);
    assert_eq!(snapshot.calls.refused.timeout, 1);
}

#[test]
fn async_acquire_waits_for_a_permit_on_futures_executor() {
    let (bulkhead, clock) = manual("async", 1, 1_000);
    let held = hold(&bulkhead);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| futures_executor::block_on(bulkhead.call_async(async { 7 })));
        clock.wait_for_sleepers(1);
        wait_for_waiters(&bulkhead, 1);
        drop(held);
        assert_eq!(waiter.join().unwrap(), Ok(7));
    });
    assert_eq!(bulkhead.available(), 1);
}

#[test]
fn async_acquire_times_out_on_futures_executor() {
    let (bulkhead, clock) = manual("async", 1, 250);
    let _held = hold(&bulkhead);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| futures_executor::block_on(bulkhead.call_async(async { 7 })));
        clock.wait_for_sleepers(1);
        clock.advance(Duration::from_millis(250));
        let err = waiter.join().unwrap().unwrap_err();
        assert!(
            matches!(err, BulkheadError::Timeout { waited, .. } if waited == Duration::from_millis(250))
        );
    });
    assert_eq!(bulkhead.snapshot().waiting, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_acquire_waits_for_a_permit_on_tokio() {
    let bulkhead = SemaphoreBulkhead::new("tokio", &config(2, 60_000));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let held = bulkhead.clone();
    let first = tokio::spawn(async move { held.call_async(async { rx.await.is_ok() }).await });
    // `first` holds its permit before the others come (else `third` could take it, run
    // and finish without ever waiting).
    while bulkhead.available() > 1 {
        tokio::task::yield_now().await;
    }
    let second = bulkhead.acquire_async().await.unwrap();
    // Both permits are taken; a third caller queues until one is released.
    let third = {
        let bulkhead = bulkhead.clone();
        tokio::spawn(async move { bulkhead.call_async(async { 3 }).await })
    };
    while bulkhead.snapshot().waiting < 1 {
        tokio::task::yield_now().await;
    }
    drop(second);
    assert_eq!(third.await.unwrap(), Ok(3));
    tx.send(()).unwrap();
    assert_eq!(first.await.unwrap(), Ok(true));
    assert_eq!(bulkhead.available(), 2);
}

/// Two async acquisitions, polled once each so they wait in arrival order.
fn queue_two(bulkhead: &SemaphoreBulkhead) -> [Acquire<'_>; 2] {
    let mut waiters = [bulkhead.acquire_async(), bulkhead.acquire_async()];
    for waiter in &mut waiters {
        assert!(poll_once(waiter).is_pending());
    }
    waiters
}

#[test]
fn dropped_acquire_future_gives_back_its_place_in_the_queue() {
    let (bulkhead, _clock) = manual("cancel", 1, 1_000);
    let held = hold(&bulkhead);
    let [first, mut second] = queue_two(&bulkhead);
    assert_eq!(bulkhead.snapshot().waiting, 2);
    drop(first);
    assert_eq!(bulkhead.snapshot().waiting, 1);
    drop(held);
    let Poll::Ready(Ok(permit)) = poll_once(&mut second) else {
        panic!("the second waiter should have the permit");
    };
    drop(permit);
    assert_eq!(bulkhead.available(), 1);
}

#[test]
fn dropped_acquire_future_passes_on_a_permit_already_handed_to_it() {
    let (bulkhead, _clock) = manual("cancel", 1, 1_000);
    let held = hold(&bulkhead);
    let [first, mut second] = queue_two(&bulkhead);
    // The released permit goes straight to `first`, which is dropped before it sees it.
    drop(held);
    assert_eq!(bulkhead.snapshot().waiting, 1);
    drop(first);
    let Poll::Ready(Ok(permit)) = poll_once(&mut second) else {
        panic!("the permit handed to the dropped waiter must reach the next one");
    };
    drop(permit);
    let snapshot = bulkhead.snapshot();
    assert_eq!((snapshot.available, snapshot.active), (1, 0));
    // The dropped waiter was never admitted.
    assert_eq!(snapshot.calls.permitted, 2);
}

#[test]
fn dropped_call_async_after_admission_counts_cancelled_and_returns_the_permit() {
    let (bulkhead, _clock) = manual("cancel", 1, 0);
    let mut call = Box::pin(bulkhead.call_async(yield_once()));
    assert!(poll_once(&mut call).is_pending());
    assert_eq!(bulkhead.available(), 0);
    drop(call);
    let snapshot = bulkhead.snapshot();
    assert_eq!(snapshot.available, 1);
    assert_eq!(snapshot.calls.cancelled, 1);
    assert_eq!(snapshot.calls.completed, 0);
}

#[test]
fn panic_in_the_body_returns_the_permit() {
    let (bulkhead, _clock) = manual("panic", 2, 0);
    let result = catch_unwind(AssertUnwindSafe(|| bulkhead.call(|| panic!("boom"))));
    assert!(result.is_err());
    let async_result = catch_unwind(AssertUnwindSafe(|| {
        futures_executor::block_on(bulkhead.call_async(async { panic!("async boom") }))
    }));
    assert!(async_result.is_err());
    let snapshot = bulkhead.snapshot();
    assert_eq!(snapshot.available, 2);
    assert_eq!(snapshot.calls.panicked, 2);
    assert_eq!(snapshot.calls.permitted, 2);
}

#[test]
fn a_call_async_whose_body_panicked_is_never_admitted_again() {
    let (bulkhead, _clock) = manual("panic-again", 1, 0);
    let mut call = Box::pin(bulkhead.call_async(async { panic!("async boom") }));
    assert!(catch_unwind(AssertUnwindSafe(|| poll_once(&mut call))).is_err());
    // Polled again: a panic of its own, not a second permit for the dead body.
    assert!(catch_unwind(AssertUnwindSafe(|| poll_once(&mut call))).is_err());
    drop(call);
    let snapshot = bulkhead.snapshot();
    assert_eq!((snapshot.available, snapshot.active), (1, 0));
    assert_eq!((snapshot.calls.permitted, snapshot.calls.panicked), (1, 1));
    assert_eq!(snapshot.calls.cancelled, 0);
}

#[test]
fn a_refused_call_async_drops_its_body_at_the_refusal_without_polling_it() {
    struct Flag<'a>(&'a AtomicBool);
    impl Drop for Flag<'_> {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }
    let (bulkhead, _clock) = manual("refused-body", 1, 0);
    let _held = hold(&bulkhead);
    let (dropped, polled) = (AtomicBool::new(false), AtomicBool::new(false));
    let flag = Flag(&dropped);
    let mut call = Box::pin(bulkhead.call_async(async {
        let _flag = flag;
        polled.store(true, SeqCst);
    }));
    let refused = poll_once(&mut call);
    assert!(matches!(
        refused,
        Poll::Ready(Err(BulkheadError::Full { .. }))
    ));
    // Dropped when refused, before the future itself is.
    assert!(dropped.load(SeqCst));
    assert!(!polled.load(SeqCst));
    drop(call);
    assert_eq!(bulkhead.snapshot().calls.refused.full, 1);
}

#[test]
fn a_finished_wait_keeps_no_waker_of_its_task() {
    struct Task;
    impl std::task::Wake for Task {
        fn wake(self: Arc<Self>) {}
    }
    let (bulkhead, _clock) = manual("spare", 1, 1_000);
    let task = Arc::new(Task);
    let waker = Waker::from(Arc::clone(&task));
    for _ in 0..3 {
        let mut cx = Context::from_waker(&waker);
        let held = hold(&bulkhead);
        let mut waiting = Box::pin(bulkhead.acquire_async());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        drop(held);
        let Poll::Ready(Ok(permit)) = waiting.as_mut().poll(&mut cx) else {
            panic!("the freed permit goes to the waiter");
        };
        drop(permit);
    }
    drop(waker);
    // The waits' waiter (kept for the next wait on this thread) holds no clone of it.
    assert_eq!(Arc::strong_count(&task), 1);
    let snapshot = bulkhead.snapshot();
    assert_eq!((snapshot.available, snapshot.calls.permitted), (1, 6));
}

#[test]
fn fair_waiters_are_admitted_in_arrival_order() {
    let (bulkhead, _clock) = manual("fair", 1, 1_000);
    let mut held = Some(hold(&bulkhead));
    let mut waiters: Vec<_> = (0..5).map(|_| bulkhead.acquire_async()).collect();
    for waiter in &mut waiters {
        assert!(poll_once(waiter).is_pending());
    }
    drop(held.take());
    let mut order = Vec::new();
    let mut permits = Vec::new();
    while order.len() < waiters.len() {
        for (i, waiter) in waiters.iter_mut().enumerate() {
            if order.contains(&i) {
                continue;
            }
            if let Poll::Ready(permit) = poll_once(waiter) {
                order.push(i);
                permits.push(permit.unwrap());
                // Only one permit exists: release it for the next waiter.
                drop(permits.pop());
            }
        }
    }
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
}

#[test]
fn newcomers_queue_behind_waiters_when_fair() {
    let (bulkhead, _clock) = manual("fair", 1, 1_000);
    let held = hold(&bulkhead);
    let mut waiter = bulkhead.acquire_async();
    assert!(poll_once(&mut waiter).is_pending());
    drop(held);
    // The released permit belongs to the waiter, not to whoever asks next.
    std::thread::scope(|s| {
        s.spawn(|| assert!(bulkhead.try_acquire().is_err()));
    });
    assert!(matches!(poll_once(&mut waiter), Poll::Ready(Ok(_))));
}

#[test]
fn growing_wakes_waiters() {
    let (bulkhead, clock) = manual("grow", 1, 1_000);
    let _held = hold(&bulkhead);
    std::thread::scope(|s| {
        let waiters: Vec<_> = (0..2).map(|_| s.spawn(|| bulkhead.call(|| ()))).collect();
        clock.wait_for_sleepers(2);
        wait_for_waiters(&bulkhead, 2);
        bulkhead.resize(&config(3, 1_000));
        for waiter in waiters {
            assert_eq!(waiter.join().unwrap(), Ok(()));
        }
    });
    assert_eq!(bulkhead.limit(), 3);
    assert_eq!(bulkhead.snapshot().active, 1);
}

#[test]
fn shrinking_retires_permits_as_they_are_released_without_blocking() {
    let (bulkhead, _clock) = manual("shrink", 4, 0);
    let mut held: Vec<_> = (0..4).map(|_| hold(&bulkhead)).collect();
    // Resize from the holding thread: it must not wait for the permits to come back.
    bulkhead.resize(&config(2, 0));
    let snapshot = bulkhead.snapshot();
    assert_eq!(
        (snapshot.limit, snapshot.active, snapshot.available),
        (2, 4, 0)
    );
    let try_from_another_thread =
        || std::thread::scope(|s| s.spawn(|| bulkhead.try_acquire().is_ok()).join().unwrap());
    held.pop();
    held.pop();
    // Two released, both retired: 2 running, limit 2.
    assert!(!try_from_another_thread());
    held.pop();
    assert!(try_from_another_thread());
    assert_eq!(bulkhead.available(), 1);
    held.clear();
    assert_eq!(bulkhead.available(), 2);
}

#[test]
fn resizing_under_load_keeps_running_calls_within_the_limit() {
    const THREADS: usize = 8;
    const MAX_LIMIT: u32 = 6;
    let bulkhead = SemaphoreBulkhead::new("resize", &config(MAX_LIMIT, 5));
    let running = AtomicU32::new(0);
    let overrun = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                while !stop.load(SeqCst) {
                    let _ = bulkhead.call(|| {
                        if running.fetch_add(1, SeqCst) + 1 > MAX_LIMIT {
                            overrun.store(true, SeqCst);
                        }
                        std::thread::yield_now();
                        running.fetch_sub(1, SeqCst);
                    });
                }
            });
        }
        for round in 0..500u32 {
            bulkhead.resize(&config(1 + round % MAX_LIMIT, 5));
            std::thread::yield_now();
        }
        // Settle on a small limit, then check it holds once old work drained.
        bulkhead.resize(&config(2, 5));
        while bulkhead.snapshot().active > 2 {
            std::thread::yield_now();
        }
        for _ in 0..2_000 {
            assert!(bulkhead.snapshot().active <= 2);
            std::thread::yield_now();
        }
        stop.store(true, SeqCst);
    });
    assert!(!overrun.load(SeqCst));
    assert_eq!(bulkhead.available(), 2);
    let calls = bulkhead.snapshot().calls;
    assert_eq!(calls.permitted, calls.completed);
}

#[test]
fn reentry_runs_inline_and_is_counted() {
    let (bulkhead, _clock) = manual("reentry", 1, 0);
    let nested = bulkhead.call(|| bulkhead.call(|| bulkhead.call(|| "inner")));
    assert_eq!(nested, Ok(Ok(Ok("inner"))));
    let calls = bulkhead.snapshot().calls;
    assert_eq!((calls.permitted, calls.reentrant), (1, 2));
    assert_eq!(calls.refused.total(), 0);
    assert_eq!(bulkhead.available(), 1);
}

#[test]
fn reentry_from_an_async_body_runs_inline_and_is_counted() {
    let (bulkhead, _clock) = manual("reentry", 1, 0);
    let result = futures_executor::block_on(bulkhead.call_async(async {
        yield_once().await;
        let inner_async = bulkhead.call_async(async { 1 }).await;
        let inner_sync = bulkhead.call(|| 2);
        (inner_async, inner_sync)
    }));
    assert_eq!(result, Ok((Ok(1), Ok(2))));
    let calls = bulkhead.snapshot().calls;
    assert_eq!((calls.permitted, calls.reentrant), (1, 2));
    assert_eq!(bulkhead.available(), 1);
}

#[test]
fn a_permit_held_elsewhere_is_not_reentry() {
    let (bulkhead, _clock) = manual("other", 1, 0);
    let _held = hold(&bulkhead);
    let from_another_thread =
        std::thread::scope(|s| s.spawn(|| bulkhead.call(|| ()).is_err()).join().unwrap());
    assert!(from_another_thread);
    assert_eq!(bulkhead.snapshot().calls.reentrant, 0);
}

#[test]
fn shutdown_refuses_waiters_and_new_calls_and_waits_for_running_ones() {
    let (bulkhead, clock) = manual("shut", 1, 1_000);
    let held = hold(&bulkhead);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| bulkhead.call(|| ()));
        wait_for_waiters(&bulkhead, 1);
        let shutdown = s.spawn(|| bulkhead.shutdown(Duration::from_secs(5)));
        let err = waiter.join().unwrap().unwrap_err();
        assert_eq!(err.reason(), "shut_down");
        // The shutdown waits for the running call; its waiter is parked on the clock.
        clock.wait_for_sleepers(1);
        drop(held);
        let report = shutdown.join().unwrap();
        assert_eq!((report.waiters_refused, report.still_running), (1, 0));
    });
    assert!(bulkhead.is_shut_down());
    assert!(matches!(
        bulkhead.try_acquire(),
        Err(BulkheadError::ShutDown { .. })
    ));
    assert_eq!(bulkhead.snapshot().calls.refused.shut_down, 2);
}

#[test]
fn shutdown_reports_calls_still_running_after_the_timeout() {
    let (bulkhead, clock) = manual("shut", 2, 0);
    let held = hold(&bulkhead);
    std::thread::scope(|s| {
        let shutdown = s.spawn(|| bulkhead.shutdown(Duration::from_secs(1)));
        clock.wait_for_sleepers(1);
        clock.advance(Duration::from_secs(1));
        assert_eq!(shutdown.join().unwrap().still_running, 1);
    });
    drop(held);
    assert_eq!(bulkhead.snapshot().active, 0);
}

#[test]
fn snapshot_reports_limits_load_and_counters() {
    let (bulkhead, _clock) = manual("snap", 3, 0);
    let held = hold(&bulkhead);
    let snapshot = bulkhead.snapshot();
    assert_eq!(&*snapshot.name, "snap");
    assert_eq!(snapshot.kind, bulkhead_config_types::Kind::Semaphore);
    assert_eq!(
        (
            snapshot.limit,
            snapshot.active,
            snapshot.available,
            snapshot.waiting
        ),
        (3, 1, 2, 0)
    );
    assert_eq!(snapshot.queue_capacity, None);
    assert_eq!(snapshot.pool_size, None);
    assert_eq!(snapshot.calls.permitted, 1);
    drop(held);
    assert_eq!(bulkhead.snapshot().calls.completed, 1);
}

#[test]
fn stress_with_panics_and_cancellations_keeps_every_invariant() {
    const THREADS: u64 = 12;
    const CALLS: u64 = 2_000;
    const LIMIT: u32 = 4;
    let bulkhead = SemaphoreBulkhead::new("stress", &config(LIMIT, 1));
    let running = AtomicU32::new(0);
    let overrun = AtomicBool::new(false);
    let refusals_seen = AtomicU64::new(0);
    let dropped = AtomicU64::new(0);
    let body = || {
        if running.fetch_add(1, SeqCst) + 1 > LIMIT {
            overrun.store(true, SeqCst);
        }
        std::thread::yield_now();
        running.fetch_sub(1, SeqCst);
    };
    // Keep the output readable: silence only the body's deliberate panics.
    let default_hook = Arc::new(std::panic::take_hook());
    let hook = Arc::clone(&default_hook);
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&"random failure") {
            hook(info);
        }
    }));
    std::thread::scope(|s| {
        for seed in 1..=THREADS {
            let (bulkhead, body, refusals_seen, dropped) =
                (&bulkhead, &body, &refusals_seen, &dropped);
            s.spawn(move || {
                let mut rng = XorShift::seeded(seed);
                for _ in 0..CALLS {
                    let refused = match rng.next() % 5 {
                        0 => catch_unwind(AssertUnwindSafe(|| {
                            bulkhead.call(|| {
                                body();
                                panic!("random failure");
                            })
                        }))
                        .is_ok_and(|r| r.is_err()),
                        1 => bulkhead.call(body).is_err(),
                        2 => bulkhead.try_acquire().map(|_p| body()).is_err(),
                        3 => futures_executor::block_on(bulkhead.call_async(async { body() }))
                            .is_err(),
                        _ => {
                            // Cancelled: while queued, or admitted with the body pending.
                            let mut call = pin!(bulkhead.call_async(async {
                                body();
                                yield_once().await;
                                yield_once().await;
                            }));
                            let poll = call.as_mut().poll(&mut Context::from_waker(Waker::noop()));
                            dropped.fetch_add(1, SeqCst);
                            matches!(poll, Poll::Ready(Err(_)))
                        }
                    };
                    if refused {
                        refusals_seen.fetch_add(1, SeqCst);
                    }
                }
            });
        }
    });
    let _ = std::panic::take_hook();
    assert!(!overrun.load(SeqCst), "more calls ran than the limit");
    let snapshot = bulkhead.snapshot();
    let calls = snapshot.calls;
    assert_eq!(
        calls.permitted,
        calls.completed + calls.panicked + calls.cancelled
    );
    assert!(calls.panicked > 0 && calls.cancelled > 0);
    // Every refusal the callers saw was counted, under its reason.
    assert_eq!(
        calls.refused.total(),
        refusals_seen.load(SeqCst),
        "{calls:?}"
    );
    // Every call was admitted or refused, except cancelled ones dropped while still queued.
    let settled = calls.permitted + calls.refused.total();
    assert!(settled <= THREADS * CALLS);
    assert!(settled >= THREADS * CALLS - dropped.load(SeqCst));
    assert_eq!(
        (snapshot.available, snapshot.active, snapshot.waiting),
        (LIMIT, 0, 0)
    );
}

// ---------------------------------------------------------------- owned permits

fn assert_send_static<T: Send + 'static>(_: &T) {}

#[test]
fn an_owned_permit_outlives_its_caller_and_returns_on_drop() {
    let (bulkhead, _clock) = manual("owned", 1, 0);
    let acquire = bulkhead.acquire_owned();
    assert_send_static(&acquire);
    let permit = futures_executor::block_on(acquire).unwrap();
    assert_send_static(&permit);
    assert!(!permit.is_reentrant());
    assert_eq!(bulkhead.available(), 0);
    // Held on another thread after the call that took it returned; the bulkhead is full.
    let holder = std::thread::spawn(move || permit);
    let permit = holder.join().unwrap();
    assert!(matches!(
        bulkhead.call(|| ()),
        Err(BulkheadError::Full { .. })
    ));
    drop(permit);
    assert_eq!(bulkhead.available(), 1);
    let calls = bulkhead.snapshot().calls;
    assert_eq!((calls.permitted, calls.completed), (1, 1), "{calls:?}");
}

#[test]
fn work_in_an_owned_permits_scope_calls_the_same_bulkhead_inline() {
    let (bulkhead, _clock) = manual("owned-scope", 1, 0);
    let permit = futures_executor::block_on(bulkhead.acquire_owned()).unwrap();
    // Inside: the nested call runs on the permit held, not refused for want of a second.
    assert_eq!(permit.in_scope(|| bulkhead.call(|| 7)), Ok(7));
    // Outside the scope the thread is a newcomer again.
    assert!(matches!(
        bulkhead.call(|| 7),
        Err(BulkheadError::Full { .. })
    ));
    drop(permit);
    let calls = bulkhead.snapshot().calls;
    assert_eq!((calls.permitted, calls.reentrant), (1, 1), "{calls:?}");
}

#[test]
fn an_owned_permit_dropped_by_a_panic_counts_panicked() {
    let (bulkhead, _clock) = manual("owned-panic", 1, 0);
    let permit = futures_executor::block_on(bulkhead.acquire_owned()).unwrap();
    let unwound = catch_unwind(AssertUnwindSafe(move || {
        let _permit = permit;
        panic!("the work under the permit failed");
    }));
    assert!(unwound.is_err());
    assert_eq!(bulkhead.available(), 1);
    let calls = bulkhead.snapshot().calls;
    assert_eq!((calls.permitted, calls.panicked), (1, 1), "{calls:?}");
}

#[test]
fn a_dropped_owned_acquire_leaves_the_queue_and_a_refused_one_gets_the_error() {
    let (bulkhead, clock) = manual("owned-wait", 1, 100);
    let held = hold(&bulkhead);
    let mut waiting = Box::pin(bulkhead.acquire_owned());
    assert!(poll_once(&mut waiting).is_pending());
    assert_eq!(bulkhead.snapshot().waiting, 1);
    drop(waiting);
    assert_eq!(bulkhead.snapshot().waiting, 0);
    let mut timing_out = Box::pin(bulkhead.acquire_owned());
    assert!(poll_once(&mut timing_out).is_pending());
    clock.advance(Duration::from_millis(100));
    match poll_once(&mut timing_out) {
        Poll::Ready(Err(BulkheadError::Timeout { .. })) => {}
        other => panic!("expected a Timeout, got {other:?}"),
    }
    drop(held);
    assert_eq!(bulkhead.available(), 1);
}

#[test]
fn async_waiters_share_one_max_wait_timer_and_time_out_together() {
    let (bulkhead, clock) = manual("one-timer", 1, 500);
    let held = hold(&bulkhead);
    let mut waiters: Vec<_> = (0..3).map(|_| Box::pin(bulkhead.acquire_async())).collect();
    for waiter in &mut waiters {
        assert!(poll_once(waiter).is_pending());
    }
    assert_eq!(bulkhead.snapshot().waiting, 3);
    // One timer for the queue, not one per waiting caller.
    assert_eq!(clock.sleepers(), 1);
    clock.advance(Duration::from_millis(499));
    for waiter in &mut waiters {
        assert!(poll_once(waiter).is_pending());
    }
    clock.advance(Duration::from_millis(1));
    for waiter in &mut waiters {
        match poll_once(waiter) {
            Poll::Ready(Err(BulkheadError::Timeout { waited, .. })) => {
                assert_eq!(waited, Duration::from_millis(500));
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
    let s = bulkhead.snapshot();
    assert_eq!((s.waiting, s.calls.refused.timeout), (0, 3));
    assert_eq!(clock.sleepers(), 0, "no timer left behind");
    drop(waiters);
    drop(held);
    assert_eq!(bulkhead.available(), 1);
}

#[test]
fn the_queue_timer_follows_the_earliest_deadline_when_max_wait_shrinks() {
    let (bulkhead, clock) = manual("earliest", 1, 1_000);
    let _held = hold(&bulkhead);
    let mut patient = Box::pin(bulkhead.acquire_async());
    assert!(poll_once(&mut patient).is_pending());
    bulkhead.resize(&config(1, 100));
    let mut hasty = Box::pin(bulkhead.acquire_async());
    assert!(poll_once(&mut hasty).is_pending());
    clock.advance(Duration::from_millis(100));
    assert!(matches!(
        poll_once(&mut hasty),
        Poll::Ready(Err(BulkheadError::Timeout { .. }))
    ));
    // The earlier waiter keeps its own, later deadline, and a timer for it.
    assert!(poll_once(&mut patient).is_pending());
    assert_eq!(clock.sleepers(), 1);
    clock.advance(Duration::from_millis(900));
    assert!(matches!(
        poll_once(&mut patient),
        Poll::Ready(Err(BulkheadError::Timeout { .. }))
    ));
    assert_eq!(clock.sleepers(), 0, "no timer left behind");
}

#[test]
fn the_queue_timer_goes_with_the_last_async_waiter_granted_or_dropped() {
    let (bulkhead, clock) = manual("timer-goes", 1, 1_000);
    let held = hold(&bulkhead);
    let mut granted = Box::pin(bulkhead.acquire_async());
    let mut dropped = Box::pin(bulkhead.acquire_async());
    assert!(poll_once(&mut granted).is_pending());
    assert!(poll_once(&mut dropped).is_pending());
    assert_eq!(clock.sleepers(), 1);
    drop(held);
    let permit = match poll_once(&mut granted) {
        Poll::Ready(Ok(permit)) => permit,
        other => panic!("expected the handed-off permit, got {other:?}"),
    };
    assert_eq!(clock.sleepers(), 1, "one async waiter still queued");
    drop(dropped);
    assert_eq!(clock.sleepers(), 0, "no timer left behind");
    drop(permit);
    let s = bulkhead.snapshot();
    assert_eq!((s.available, s.waiting, s.calls.refused.timeout), (1, 0, 0));
}

//! A listener that panics loses nothing: on either kind, sync or async, whichever event it
//! panics on (also while the body itself panics), the call goes on, and afterwards the
//! bulkhead fills to exactly its limit — no permit or worker lost, no re-entry mark left
//! set on the caller's thread. Each test uses bulkheads of its own names, and its
//! listener panics only for those.

mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::task::Poll;
use std::thread;

use bulkhead_core::events::{self, Event, EventKind, Subscription};
use bulkhead_core::{BulkheadError, Refused, SemaphoreBulkhead, ThreadPoolBulkhead};
use support::{Gate, poll_once, pool_config, semaphore, wait_until};

/// The events a listener may panic on.
const CASES: [&str; 2] = ["permitted", "finished"];

/// A listener that panics on `event` of the bulkhead `name`.
fn panics_on(name: &'static str, event: &'static str) -> Subscription {
    events::subscribe(move |e: &Event<'_>| {
        let kind = match e.kind {
            EventKind::Permitted => "permitted",
            EventKind::Finished { .. } => "finished",
            EventKind::Refused { .. } => "refused",
            _ => "other",
        };
        if e.bulkhead == name && kind == event {
            panic!("a hostile listener ({event})");
        }
    })
}

/// Takes every permit of `sem` (async permits: they mark no thread), then checks that one
/// more is refused on this thread — not run inline as a re-entrant call.
fn semaphore_fills_to_exactly(sem: &SemaphoreBulkhead, limit: u32) {
    let mut permits = Vec::new();
    for _ in 0..limit {
        let mut acquire = Box::pin(sem.acquire_async());
        match poll_once(&mut acquire) {
            Poll::Ready(Ok(permit)) => permits.push(permit),
            other => panic!("permit {} of {limit} missing: {other:?}", permits.len() + 1),
        }
    }
    assert!(
        matches!(sem.call(|| ()), Err(BulkheadError::Full { .. })),
        "full at exactly {limit}, and this thread is not marked inside"
    );
    assert_eq!(sem.snapshot().calls.reentrant, 0);
    drop(permits);
    assert_eq!(sem.available(), limit);
}

/// Occupies the pool's only worker, then checks that one more call is refused `Full`.
fn pool_fills_to_exactly_one(pool: &ThreadPoolBulkhead) {
    let gate = Gate::default();
    let running = {
        let (pool, gate) = (pool.clone(), gate.clone());
        thread::spawn(move || pool.call((), move |()| gate.wait()).is_ok())
    };
    wait_until(|| pool.snapshot().active == 1);
    assert!(matches!(
        pool.call((), |()| ()),
        Err(Refused {
            error: BulkheadError::Full { .. },
            ..
        })
    ));
    gate.open();
    assert!(running.join().unwrap(), "the worker runs calls as before");
    assert_eq!(pool.call(2, |n| n * 2).ok(), Some(4));
}

#[test]
fn semaphore_sync_calls_survive_a_panicking_listener() {
    const NAMES: [&str; 2] = ["lp-sem-sync-permitted", "lp-sem-sync-finished"];
    let before = events::listener_panics();
    for (name, event) in NAMES.into_iter().zip(CASES) {
        let sem = SemaphoreBulkhead::new(name, &semaphore(2, 0));
        let listener = panics_on(name, event);
        assert_eq!(sem.call(|| 7).ok(), Some(7), "{event}");
        // The body panics too: the listener's panic must not abort the unwinding thread.
        let body_panic = catch_unwind(AssertUnwindSafe(|| sem.call(|| panic!("the body"))));
        assert!(body_panic.is_err());
        drop(listener);
        semaphore_fills_to_exactly(&sem, 2);
        let calls = sem.snapshot().calls;
        // The call, then the two permits of the fill.
        assert_eq!((calls.panicked, calls.completed), (1, 3), "{event}");
    }
    assert!(events::listener_panics() >= before + 4);
}

#[test]
fn semaphore_async_calls_survive_a_panicking_listener() {
    const NAMES: [&str; 2] = ["lp-sem-async-permitted", "lp-sem-async-finished"];
    for (name, event) in NAMES.into_iter().zip(CASES) {
        let sem = SemaphoreBulkhead::new(name, &semaphore(2, 0));
        let listener = panics_on(name, event);
        let call = futures_executor::block_on(sem.call_async(async { 7 }));
        assert_eq!(call.ok(), Some(7), "{event}");
        let body_panic = catch_unwind(AssertUnwindSafe(|| {
            futures_executor::block_on(sem.call_async(async { panic!("the body") }))
        }));
        assert!(body_panic.is_err());
        drop(listener);
        semaphore_fills_to_exactly(&sem, 2);
    }
}

#[test]
fn semaphore_owned_and_plain_permits_survive_a_panicking_listener() {
    let sem = SemaphoreBulkhead::new("lp-sem-permits", &semaphore(1, 0));
    for event in CASES {
        let listener = panics_on("lp-sem-permits", event);
        drop(sem.try_acquire().unwrap());
        let mut acquire = pin!(sem.acquire_async());
        match poll_once(&mut acquire) {
            Poll::Ready(Ok(permit)) => drop(permit),
            other => panic!("{other:?}"),
        }
        drop(listener);
        semaphore_fills_to_exactly(&sem, 1);
    }
}

#[test]
fn pool_sync_calls_survive_a_panicking_listener() {
    const NAMES: [&str; 2] = ["lp-pool-sync-permitted", "lp-pool-sync-finished"];
    for (name, event) in NAMES.into_iter().zip(CASES) {
        let pool = ThreadPoolBulkhead::new(name, &pool_config(1, 1, 0));
        let listener = panics_on(name, event);
        assert_eq!(pool.call(3, |n| n + 1).ok(), Some(4), "{event}");
        let body_panic = catch_unwind(AssertUnwindSafe(|| {
            pool.call((), |()| -> u8 { panic!("the body") })
        }));
        assert!(body_panic.is_err());
        drop(listener);
        pool_fills_to_exactly_one(&pool);
    }
}

#[test]
fn pool_async_calls_survive_a_panicking_listener() {
    const NAMES: [&str; 2] = ["lp-pool-async-permitted", "lp-pool-async-finished"];
    for (name, event) in NAMES.into_iter().zip(CASES) {
        let pool = ThreadPoolBulkhead::new(name, &pool_config(1, 1, 0));
        let listener = panics_on(name, event);
        let call = futures_executor::block_on(pool.call_async(3, |n| async move { n + 1 }));
        assert_eq!(call.ok(), Some(4), "{event}");
        let body_panic = catch_unwind(AssertUnwindSafe(|| {
            futures_executor::block_on(pool.call_async((), |()| async { panic!("the body") as u8 }))
        }));
        assert!(body_panic.is_err());
        drop(listener);
        pool_fills_to_exactly_one(&pool);
    }
}

#[test]
fn a_listener_panicking_on_a_refusal_loses_nothing() {
    let sem = SemaphoreBulkhead::new("lp-refused", &semaphore(1, 0));
    let pool = ThreadPoolBulkhead::new("lp-refused-pool", &pool_config(1, 1, 0));
    let listeners = (
        panics_on("lp-refused", "refused"),
        panics_on("lp-refused-pool", "refused"),
    );
    let held = sem.try_acquire().unwrap();
    let other_thread = thread::scope(|s| s.spawn(|| sem.call(|| ()).is_err()).join());
    assert!(other_thread.unwrap());
    drop(held);
    let gate = Gate::default();
    thread::scope(|s| {
        let running = s.spawn(|| pool.call((), |()| gate.wait()).is_ok());
        wait_until(|| pool.snapshot().active == 1);
        assert!(pool.call((), |()| ()).is_err());
        gate.open();
        assert!(running.join().unwrap());
    });
    drop(listeners);
    semaphore_fills_to_exactly(&sem, 1);
    pool_fills_to_exactly_one(&pool);
}

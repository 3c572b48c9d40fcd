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

/// A `Finished` listener hears of a semaphore call after its permit is back and the
/// caller's thread has left the bulkhead: a call the listener makes to the same bulkhead
/// (limit 1) is admitted — not refused, and not run inline as if it were nested.
#[test]
fn a_finished_listener_calling_the_same_semaphore_is_admitted_not_run_inline() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};

    const NAME: &str = "lp-sem-listener-calls";
    let sem = SemaphoreBulkhead::new(NAME, &semaphore(1, 0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = {
        let (sem, seen) = (sem.clone(), Arc::clone(&seen));
        // The listener's own call finishes too: it checks only the calls it did not make.
        let checking = AtomicBool::new(false);
        events::subscribe(move |e: &Event<'_>| {
            let finished = matches!(e.kind, EventKind::Finished { .. });
            if e.bulkhead != NAME || !finished || checking.swap(true, SeqCst) {
                return;
            }
            let answer = match sem.try_acquire() {
                Ok(permit) if permit.is_reentrant() => "run inline",
                Ok(_) => "admitted",
                Err(_) => "refused",
            };
            seen.lock().unwrap().push(answer);
            checking.store(false, SeqCst);
        })
    };
    assert_eq!(sem.call(|| 1).ok(), Some(1));
    drop(sem.try_acquire().unwrap());
    let call = futures_executor::block_on(sem.call_async(async { 2 }));
    assert_eq!(call.ok(), Some(2));
    drop(listener);
    assert_eq!(
        *seen.lock().unwrap(),
        ["admitted"; 3],
        "sync call, sync permit, async call"
    );
    assert_eq!(sem.snapshot().calls.reentrant, 0);
    semaphore_fills_to_exactly(&sem, 1);
}

/// The same for a pool call run on its caller (`on_full: caller-runs`, the worker busy):
/// the listener hears of it after the caller's thread left the pool, so the listener's
/// own call is not taken for a nested one (none is counted re-entrant), sync or async.
#[test]
fn a_finished_listener_of_a_caller_runs_call_is_outside_the_pool() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};

    use bulkhead_config_types::{OnFull, ThreadPoolConfig};

    const NAME: &str = "lp-pool-caller-runs-listener";
    let pool = ThreadPoolBulkhead::new(
        NAME,
        &ThreadPoolConfig {
            on_full: OnFull::CallerRuns,
            ..pool_config(1, 1, 0)
        },
    );
    let gate = Gate::default();
    let busy = {
        let (pool, gate) = (pool.clone(), gate.clone());
        thread::spawn(move || pool.call((), move |()| gate.wait()).is_ok())
    };
    wait_until(|| pool.snapshot().active == 1);
    // Armed only while the worker is busy: the busy call's own `Finished` is heard on the
    // worker, which is inside the pool for good.
    let armed = Arc::new(AtomicBool::new(true));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = {
        let (pool, seen, armed) = (pool.clone(), Arc::clone(&seen), Arc::clone(&armed));
        let checking = AtomicBool::new(false);
        events::subscribe(move |e: &Event<'_>| {
            let finished = matches!(e.kind, EventKind::Finished { .. });
            if e.bulkhead != NAME || !finished || !armed.load(SeqCst) || checking.swap(true, SeqCst)
            {
                return;
            }
            seen.lock().unwrap().push(pool.call(3, |n| n + 1).ok());
            checking.store(false, SeqCst);
        })
    };
    assert_eq!(pool.call(1, |n| n * 10).ok(), Some(10), "run on the caller");
    let call = futures_executor::block_on(pool.call_async(2, |n| async move { n * 10 }));
    assert_eq!(call.ok(), Some(20), "run on the caller");
    armed.store(false, SeqCst);
    drop(listener);
    assert_eq!(*seen.lock().unwrap(), [Some(4), Some(4)], "sync, async");
    assert_eq!(
        pool.snapshot().calls.reentrant,
        0,
        "no call taken for a nested one"
    );
    gate.open();
    assert!(busy.join().unwrap());
}

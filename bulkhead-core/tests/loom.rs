//! loom models of the semaphore bulkhead's admission: the atomic state word, the FIFO
//! waiter queue with direct hand-off, resize, adaptive limit changes, shutdown and
//! timeouts, explored over every
//! interleaving (up to a preemption bound).
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p bulkheads-core
//! --release --test loom` (`LOOM_MAX_PREEMPTIONS` defaults to 2 here).
//!
//! The models drive the real code through the public async API (`acquire_async`, polled
//! with the models' `block_on`, whose waker notifies the waiting loom thread): a wake-up
//! that is lost leaves a thread waiting forever, which loom reports as a deadlock. Time is
//! a [`ModelClock`] whose deadlines all pass at once when a model thread fires it, so a
//! timeout can race anything.
//! (The blocking `acquire` shares the queue code modelled here, `take_or_enqueue` /
//! `leave_queue` / `release`; its permit marks a thread-local, which loom's threads would
//! share, so it is not driven directly.)
#![cfg(loom)]

use std::future::Future;
use std::task::{Context, Waker};
use std::time::Duration;

use bulkhead_config_types::{AdaptiveAlgorithm, AdaptiveConfig, SemaphoreConfig};
use bulkhead_core::adaptive::MIN_WINDOW;
use bulkhead_core::{BulkheadError, Clock, SemaphoreBulkhead, Sleep};
use loom::sync::Arc as LoomArc;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};

#[path = "support/loom_model.rs"]
mod loom_model;
#[path = "support/policies.rs"]
mod policies;

use loom_model::{ModelClock, block_on, model};
use policies::WithPolicies;

/// Spawns a thread that awaits a permit: `true` if it was admitted (and gave the permit
/// back), `false` if it was refused with an error `expected` accepts; any other error fails
/// the model.
fn spawn_waiter(
    b: &SemaphoreBulkhead,
    expected: fn(&BulkheadError) -> bool,
) -> loom::thread::JoinHandle<bool> {
    let b = b.clone();
    loom::thread::spawn(move || match block_on(b.acquire_async()) {
        Ok(permit) => {
            drop(permit);
            true
        }
        Err(error) if expected(&error) => false,
        Err(other) => panic!("unexpected {other:?}"),
    })
}

fn bulkhead(limit: u32, clock: &ModelClock) -> SemaphoreBulkhead {
    let config = SemaphoreConfig {
        max_concurrent_calls: limit,
        max_wait: bulkhead_config_types::Duration::from_millis(100),
        fair: true,
    };
    SemaphoreBulkhead::with_clock("model", &config, std::sync::Arc::new(clock.clone()))
}

/// Takes a permit (waiting if need be), checks the limit while holding it, returns it.
fn hold_once(bulkhead: &SemaphoreBulkhead, inside: &AtomicUsize, limit: usize) -> bool {
    match block_on(bulkhead.acquire_async()) {
        Ok(permit) => {
            let now_inside = inside.fetch_add(1, SeqCst) + 1;
            assert!(
                now_inside <= limit,
                "{now_inside} calls inside a limit of {limit}"
            );
            inside.fetch_sub(1, SeqCst);
            drop(permit);
            true
        }
        Err(_) => false,
    }
}

/// Every permit back, nobody waiting, every admitted call over exactly once.
fn assert_at_rest(bulkhead: &SemaphoreBulkhead, limit: u32) {
    let s = bulkhead.snapshot();
    assert_eq!(s.available, limit, "a permit was lost or duplicated: {s:?}");
    assert_eq!(s.waiting, 0, "{s:?}");
    let c = s.calls;
    assert_eq!(c.permitted, c.completed + c.panicked + c.cancelled, "{c:?}");
}

#[test]
fn contended_permits_stay_within_the_limit_and_every_waiter_is_woken() {
    model(|| {
        let clock = ModelClock::new();
        let b = bulkhead(1, &clock);
        let inside = LoomArc::new(AtomicUsize::new(0));
        let others: Vec<_> = (0..2)
            .map(|_| {
                let (b, inside) = (b.clone(), inside.clone());
                loom::thread::spawn(move || assert!(hold_once(&b, &inside, 1)))
            })
            .collect();
        assert!(hold_once(&b, &inside, 1));
        for t in others {
            t.join().unwrap();
        }
        assert_at_rest(&b, 1);
        assert_eq!(b.snapshot().calls.completed, 3);
    });
}

#[test]
fn growing_during_an_acquire_admits_the_waiter_without_a_release() {
    model(|| {
        let clock = ModelClock::new();
        let b = bulkhead(1, &clock);
        let held = block_on(b.acquire_async()).unwrap();
        let waiter = {
            let b = b.clone();
            loom::thread::spawn(move || {
                // Admitted by the resize alone: `held` is released only after the join.
                let permit = block_on(b.acquire_async()).unwrap();
                drop(permit);
            })
        };
        let mut config = SemaphoreConfig {
            max_concurrent_calls: 2,
            max_wait: bulkhead_config_types::Duration::from_millis(100),
            fair: true,
        };
        b.resize(&config);
        waiter.join().unwrap();
        drop(held);
        assert_at_rest(&b, 2);
        config.max_concurrent_calls = 1;
        b.resize(&config);
        assert_at_rest(&b, 1);
    });
}

#[test]
fn shrinking_during_an_acquire_never_admits_above_the_new_limit() {
    model(|| {
        let clock = ModelClock::new();
        let b = bulkhead(2, &clock);
        let inside = LoomArc::new(AtomicUsize::new(0));
        let other = {
            let (b, inside) = (b.clone(), inside.clone());
            loom::thread::spawn(move || hold_once(&b, &inside, 2))
        };
        b.resize(&SemaphoreConfig {
            max_concurrent_calls: 1,
            max_wait: bulkhead_config_types::Duration::from_millis(100),
            fair: true,
        });
        // After the shrink, one call at a time (the other thread's permit, if taken before
        // the shrink, is retired when it is released).
        let mine = hold_once(&b, &inside, 2);
        assert!(other.join().unwrap() && mine);
        assert_at_rest(&b, 1);
    });
}

#[test]
fn shutdown_during_an_acquire_refuses_or_admits_the_waiter_exactly_once() {
    model(|| {
        let clock = ModelClock::new();
        let b = bulkhead(1, &clock);
        let held = block_on(b.acquire_async()).unwrap();
        let waiter = spawn_waiter(&b, |e| matches!(e, BulkheadError::ShutDown { .. }));
        let closer = {
            let b = b.clone();
            loom::thread::spawn(move || b.shutdown(Duration::ZERO))
        };
        drop(held);
        let admitted = waiter.join().unwrap();
        closer.join().unwrap();
        assert_at_rest(&b, 1);
        let c = b.snapshot().calls;
        assert_eq!(c.permitted, 1 + u64::from(admitted), "{c:?}");
        assert_eq!(c.refused.shut_down, u64::from(!admitted), "{c:?}");
        assert!(b.try_acquire().is_err(), "closed for good");
    });
}

/// A waiter for `b` (admitted, or refused with a `Timeout`) and a thread that fires `clock`.
fn waiter_and_timer(
    b: &SemaphoreBulkhead,
    clock: &ModelClock,
) -> (loom::thread::JoinHandle<bool>, loom::thread::JoinHandle<()>) {
    let waiter = spawn_waiter(b, |e| matches!(e, BulkheadError::Timeout { .. }));
    let clock = clock.clone();
    (waiter, loom::thread::spawn(move || clock.fire()))
}

#[test]
fn a_timeout_racing_a_release_loses_no_permit() {
    model(|| a_timeout_racing_a_release(&ModelClock::new()));
}

/// An async waiter's `max_wait` timer fires (on `clock`) while the permit it waits for is
/// released: it is admitted or timed out, once, and the semaphore ends at rest.
fn a_timeout_racing_a_release(clock: &ModelClock) {
    let b = bulkhead(1, clock);
    let held = block_on(b.acquire_async()).unwrap();
    let (waiter, timer) = waiter_and_timer(&b, clock);
    drop(held);
    let admitted = waiter.join().unwrap();
    timer.join().unwrap();
    assert_at_rest(&b, 1);
    let c = b.snapshot().calls;
    assert_eq!(c.permitted, 1 + u64::from(admitted), "{c:?}");
    assert_eq!(c.refused.timeout, u64::from(!admitted), "{c:?}");
}

/// Two async waiters share the queue's one `max_wait` timer: its firing races a release,
/// the hand-off to the first waiter and the second giving up. Every waiter resolves once,
/// no permit is lost, and a timed-out waiter holds nothing.
#[test]
fn the_queue_timer_racing_a_release_and_a_waiter_giving_up_loses_nothing() {
    model(|| {
        let clock = ModelClock::new();
        let b = bulkhead(1, &clock);
        let held = block_on(b.acquire_async()).unwrap();
        let (waiter, timer) = waiter_and_timer(&b, &clock);
        let mut quitter = Box::pin(b.acquire_async());
        // Queued behind the waiter, or (the timer fired first) already timed out: a permit
        // held by the model's thread cannot go to it before the release below.
        let polled = quitter
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        let quitter_admitted = matches!(polled, std::task::Poll::Ready(Ok(_)));
        drop(polled);
        drop(held);
        drop(quitter);
        let admitted = waiter.join().unwrap();
        timer.join().unwrap();
        assert_at_rest(&b, 1);
        let c = b.snapshot().calls;
        let permitted = 1 + u64::from(admitted) + u64::from(quitter_admitted);
        assert_eq!(c.permitted, permitted, "{c:?}");
    });
}

/// The queue's timer is armed (polled) under the queue lock, and a timer that fires while
/// it registers may wake its waker from inside that poll, as futures-timer's does; a wake
/// from the timer's own thread may come at the same moment. Either is handed to the armer:
/// the waiter is timed out once (or admitted by the release), and no thread waits on the
/// lock it holds.
#[test]
fn the_queue_timer_woken_inside_its_own_poll_times_the_waiter_out_once() {
    model(|| a_timeout_racing_a_release(&ModelClock::waking_inside_poll()));
}

#[test]
fn a_dropped_acquire_racing_a_release_passes_the_permit_on() {
    model(|| {
        let clock = ModelClock::new();
        let b = bulkhead(1, &clock);
        let held = block_on(b.acquire_async()).unwrap();
        let quitter = {
            let b = b.clone();
            loom::thread::spawn(move || {
                let mut acquire = Box::pin(b.acquire_async());
                let mut cx = Context::from_waker(Waker::noop());
                // Queued (or, if the release came first, admitted), then given up.
                let _ = acquire.as_mut().poll(&mut cx);
                drop(acquire);
            })
        };
        drop(held);
        quitter.join().unwrap();
        assert_at_rest(&b, 1);
    });
}

/// An adaptive (AIMD) bulkhead declared `declared`, starting at `initial`, that has seen
/// all but the last call of its first window: the next call to finish changes the limit
/// (+1 if it completes, × `backoff` if it is marked overloaded).
fn adaptive_one_call_from_a_change(
    clock: &ModelClock,
    declared: u32,
    initial: u32,
    backoff: f64,
) -> SemaphoreBulkhead {
    let mut adaptive =
        AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, initial, declared);
    adaptive.backoff_ratio = Some(backoff);
    let b = bulkhead(declared, clock).with_policies(|c| c.adaptive = Some(adaptive));
    for _ in 1..MIN_WINDOW {
        drop(block_on(b.acquire_async()).unwrap());
    }
    assert_eq!(b.limit(), initial);
    b
}

/// Takes a permit, counted in `inside` while held, marks it overloaded and returns it.
/// If the limit already read 1 before asking, nobody else may be inside once admitted.
fn overloaded_call(b: &SemaphoreBulkhead, inside: &AtomicUsize) {
    let shrunk_before = b.limit() == 1;
    let mut permit = block_on(b.acquire_async()).unwrap();
    let now_inside = inside.fetch_add(1, SeqCst) + 1;
    assert!(now_inside <= 3, "{now_inside} inside a limit of 3");
    assert!(
        !shrunk_before || now_inside == 1,
        "{now_inside} inside, admitted after the limit fell to 1"
    );
    // Leaves `inside` before the permit goes back, so a call admitted with that permit
    // never counts this one.
    inside.fetch_sub(1, SeqCst);
    permit.mark_overloaded();
    drop(permit);
}

#[test]
fn an_adaptive_shrink_racing_acquires_never_admits_above_the_new_limit() {
    model(|| {
        let clock = ModelClock::new();
        // 3 → 1 at the first overloaded call that ends the window.
        let b = adaptive_one_call_from_a_change(&clock, 3, 3, 0.34);
        let inside = LoomArc::new(AtomicUsize::new(0));
        // Held while the others race: once the limit reads 1, nobody else may be admitted.
        let mut held = block_on(b.acquire_async()).unwrap();
        held.mark_overloaded();
        inside.fetch_add(1, SeqCst);
        let others: Vec<_> = (0..2)
            .map(|_| {
                let (b, inside) = (b.clone(), inside.clone());
                loom::thread::spawn(move || overloaded_call(&b, &inside))
            })
            .collect();
        // Released at any point of the race (before it, a waiter could wait for good).
        inside.fetch_sub(1, SeqCst);
        drop(held);
        for t in others {
            t.join().unwrap();
        }
        assert_eq!(b.limit(), 1);
        assert_at_rest(&b, 1);
    });
}

#[test]
fn an_adaptive_growth_admits_a_waiter_without_a_release() {
    model(|| {
        let clock = ModelClock::new();
        let b = adaptive_one_call_from_a_change(&clock, 2, 1, 0.5);
        let held = block_on(b.acquire_async()).unwrap();
        let (release_first, waiter) = {
            let b = b.clone();
            let second = LoomArc::new(AtomicUsize::new(0));
            let seen = second.clone();
            (
                second,
                loom::thread::spawn(move || {
                    let permit = block_on(b.acquire_async()).unwrap();
                    seen.store(1, SeqCst);
                    drop(permit);
                }),
            )
        };
        // The held call completes its window: +1, and the grown permit may go straight to
        // the waiter (or the waiter takes the released one).
        drop(held);
        waiter.join().unwrap();
        assert_eq!(release_first.load(SeqCst), 1);
        assert_eq!(b.limit(), 2);
        assert_at_rest(&b, 2);
    });
}

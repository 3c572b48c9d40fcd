//! Fault injection against the public API: bodies that panic at each stage, a worker
//! thread that dies, async calls dropped at every await point, a clock that jumps, a
//! shutdown racing a resize. The invariant everywhere: every call is accounted exactly once
//! (`permitted == completed + panicked + cancelled`, refusals counted by reason) and
//! permits and threads come back to their limits.
//!
//! Deterministic: gates, `ManualClock` and manual polling; nothing sleeps. Tests whose
//! failure mode is a hang run their body under [`no_hang`], which fails the test instead.

mod support;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use bulkhead_config_types::{OnFull, ThreadPoolConfig};
use bulkhead_core::{
    BulkheadError, BulkheadSnapshot, Clock, ManualClock, Refused, SemaphoreBulkhead, Sleep,
    ThreadPoolBulkhead,
};
use futures_executor::block_on;
use support::{
    Gate, PanickingNow, manual_clock, poll_once, pool_config, semaphore, wait_until, yield_once,
};

// ---------------------------------------------------------------- helpers

/// Runs `f` on its own thread and fails the test if it has not finished after a very long
/// time: a liveness guard for tests whose failure mode is a hang (not a timing assertion).
fn no_hang<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(value) => {
            handle.join().unwrap();
            value
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("sent nothing without panicking"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: hung (a lost call or thread)"),
    }
}

/// Every admitted call is over and counted exactly once.
fn assert_reconciled(s: &BulkheadSnapshot) {
    let c = s.calls;
    assert_eq!(
        c.permitted,
        c.completed + c.panicked + c.cancelled,
        "every admitted call ends exactly once: {c:?}"
    );
}

/// A semaphore at rest: every permit back, nobody waiting, every call accounted.
fn assert_semaphore_at_rest(bulkhead: &SemaphoreBulkhead) {
    let s = bulkhead.snapshot();
    assert_eq!(s.available, s.limit, "every permit is back: {s:?}");
    assert_eq!((s.active, s.waiting), (0, 0), "{s:?}");
    assert_reconciled(&s);
}

/// `n` threads each making one call to `bulkhead` (they wait while its permits are held).
fn blocking_callers(
    bulkhead: &SemaphoreBulkhead,
    n: usize,
) -> Vec<thread::JoinHandle<Result<(), BulkheadError>>> {
    (0..n)
        .map(|_| {
            let bulkhead = bulkhead.clone();
            thread::spawn(move || bulkhead.call(|| ()))
        })
        .collect()
}

/// Occupies one of `pool`'s threads with a call blocked on `gate`; returns once it runs.
fn occupy(pool: &ThreadPoolBulkhead, gate: &Gate) -> thread::JoinHandle<Result<(), Refused<()>>> {
    let busy = {
        let (pool, gate) = (pool.clone(), gate.clone());
        thread::spawn(move || pool.call((), move |()| gate.wait()))
    };
    wait_until(|| pool.snapshot().active == 1);
    busy
}

/// A pool at rest: nothing running or queued, nobody waiting for room, every call accounted.
fn assert_pool_at_rest(pool: &ThreadPoolBulkhead) {
    wait_until(|| {
        let s = pool.snapshot();
        s.active == 0
            && s.queued == 0
            && s.calls.permitted == s.calls.completed + s.calls.panicked + s.calls.cancelled
    });
    let s = pool.snapshot();
    assert_eq!(s.waiting, 0, "{s:?}");
    assert!(s.pool_size.unwrap() <= s.limit, "{s:?}");
    assert_reconciled(&s);
}

/// Where an async body panics.
#[derive(Clone, Copy, Debug)]
enum PanicAt {
    /// In the closure that builds the future (thread pool only).
    Closure,
    /// In the first poll, before any await point.
    FirstPoll,
    /// After an await point.
    AfterAwait,
}

async fn panicking_body(at: PanicAt) -> u32 {
    if matches!(at, PanicAt::AfterAwait) {
        yield_once().await;
    }
    panic!("injected panic at {at:?}")
}

/// Polls `fut` the way executors that survive a panicking task do (async-task, `futures`'
/// `catch_unwind`): the panic is caught around `poll`, and the future is dropped afterwards,
/// when the thread is no longer panicking.
fn poll_catching_then_drop<F: Future>(fut: F) -> bool {
    let mut fut = Box::pin(fut);
    let mut cx = Context::from_waker(Waker::noop());
    let panicked = loop {
        match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
            Ok(Poll::Ready(_)) => break false,
            Ok(Poll::Pending) => continue,
            Err(_) => break true,
        }
    };
    drop(fut);
    panicked
}

// ---------------------------------------------------------------- semaphore: panics

#[test]
fn semaphore_async_body_panicking_at_each_stage_returns_the_permit_and_counts_panicked() {
    for at in [PanicAt::FirstPoll, PanicAt::AfterAwait] {
        let bulkhead = SemaphoreBulkhead::new("panics", &semaphore(1, 0));
        let caught = catch_unwind(AssertUnwindSafe(|| {
            block_on(bulkhead.call_async(panicking_body(at)))
        }));
        assert!(caught.is_err(), "{at:?}: the panic reaches the caller");
        assert_semaphore_at_rest(&bulkhead);
        let c = bulkhead.snapshot().calls;
        assert_eq!((c.permitted, c.panicked, c.cancelled), (1, 1, 0), "{at:?}");
        assert_eq!(bulkhead.call(|| 7), Ok(7), "{at:?}: still serving");
    }
}

/// For each panic stage, `poll_caught` drives a body that panics, in a fresh one-permit
/// bulkhead, catching the panic around the poll (true if it did): the call is counted
/// `panicked`, not `cancelled`, and nothing is held.
fn caught_panic_counts_panicked(
    name: &str,
    poll_caught: impl Fn(&SemaphoreBulkhead, PanicAt) -> bool,
) {
    for at in [PanicAt::FirstPoll, PanicAt::AfterAwait] {
        let bulkhead = SemaphoreBulkhead::new(name, &semaphore(1, 0));
        assert!(poll_caught(&bulkhead, at), "{at:?}: the body panicked");
        assert_semaphore_at_rest(&bulkhead);
        let c = bulkhead.snapshot().calls;
        assert_eq!((c.panicked, c.cancelled), (1, 0), "{at:?}: {c:?}");
    }
}

#[test]
fn semaphore_async_body_panic_caught_around_poll_is_counted_panicked_not_cancelled() {
    caught_panic_counts_panicked("caught", |bulkhead, at| {
        poll_catching_then_drop(bulkhead.call_async(panicking_body(at)))
    });
}

#[test]
fn semaphore_run_async_body_panic_caught_around_poll_is_counted_panicked_not_cancelled() {
    caught_panic_counts_panicked("caught-run", |bulkhead, at| {
        let permit = block_on(bulkhead.acquire_async()).unwrap();
        poll_catching_then_drop(permit.run_async(panicking_body(at)))
    });
}

#[test]
fn semaphore_panicking_fallback_after_a_refusal_holds_nothing() {
    let bulkhead = SemaphoreBulkhead::new("fallback", &semaphore(1, 0));
    let held = block_on(bulkhead.acquire_async()).unwrap();
    let fallback_panicked = thread::scope(|s| {
        s.spawn(|| {
            catch_unwind(AssertUnwindSafe(|| match bulkhead.call(|| 1) {
                Ok(v) => v,
                Err(err) => panic!("fallback for {err} panics"),
            }))
            .is_err()
        })
        .join()
        .unwrap()
    });
    assert!(fallback_panicked);
    drop(held);
    assert_semaphore_at_rest(&bulkhead);
    let c = bulkhead.snapshot().calls;
    assert_eq!((c.permitted, c.completed, c.refused.full), (1, 1, 1));
}

// ---------------------------------------------------------------- semaphore: cancellation

/// Drops a `call_async` after `polls` polls, for every number of polls up to completion,
/// with the call first queued behind a held permit that is then handed to it.
#[test]
fn semaphore_call_async_dropped_at_every_await_point_releases_everything() {
    const AWAITS: usize = 3;
    for hand_over in [false, true] {
        for polls in 0..=AWAITS + 2 {
            let (clock, shared) = manual_clock();
            let bulkhead = SemaphoreBulkhead::with_clock("cancel", &semaphore(1, 100), shared);
            let mut held = Some(block_on(bulkhead.acquire_async()).unwrap());
            let mut call = Box::pin(bulkhead.call_async(async {
                for _ in 0..AWAITS {
                    yield_once().await;
                }
                5
            }));
            let mut finished = false;
            for poll in 0..polls {
                if poll == 1 && hand_over {
                    // Queued behind `held`: the release hands the permit straight to it.
                    held = None;
                }
                if poll_once(&mut call).is_ready() {
                    finished = true;
                    break;
                }
            }
            drop(call);
            drop(held);
            let s = bulkhead.snapshot();
            assert_eq!(s.available, 1, "hand_over={hand_over} polls={polls}: {s:?}");
            assert_eq!(s.waiting, 0, "hand_over={hand_over} polls={polls}: {s:?}");
            assert_reconciled(&s);
            assert_eq!(clock.sleepers(), 0, "no timer left behind");
            if finished {
                assert_eq!(s.calls.cancelled, 0);
            }
        }
    }
}

// ---------------------------------------------------------------- semaphore: clock jumps

#[test]
fn semaphore_waiters_time_out_once_when_the_clock_jumps_years_ahead() {
    let (clock, shared) = manual_clock();
    let bulkhead = SemaphoreBulkhead::with_clock("jump", &semaphore(1, 500), shared);
    let held = block_on(bulkhead.acquire_async()).unwrap();
    let waiters = blocking_callers(&bulkhead, 3);
    clock.wait_for_sleepers(3);
    clock.advance(Duration::from_secs(10 * 365 * 24 * 3600));
    for waiter in waiters {
        let err = waiter.join().unwrap().unwrap_err();
        assert!(matches!(err, BulkheadError::Timeout { .. }), "{err:?}");
    }
    drop(held);
    assert_semaphore_at_rest(&bulkhead);
    assert_eq!(bulkhead.snapshot().calls.refused.timeout, 3);
}

/// A clock whose timers wake their waker from inside every poll, then wait on a
/// [`ManualClock`]: a spurious wake the `Future` contract allows, and what futures-timer (the
/// system clock's timer) does when it fires while being registered.
#[derive(Debug)]
struct WakesInsidePoll(ManualClock);

impl Clock for WakesInsidePoll {
    fn now(&self) -> Instant {
        self.0.now()
    }

    fn park_until(&self, deadline: Instant) {
        self.0.park_until(deadline);
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let mut inner = self.0.sleep_until(deadline);
        Box::pin(std::future::poll_fn(move |cx| {
            cx.waker().wake_by_ref();
            inner.as_mut().poll(cx)
        }))
    }
}

#[test]
fn semaphore_queue_timer_waking_inside_its_own_poll_neither_deadlocks_nor_loses_the_timeout() {
    // The queue's one `max_wait` timer is armed under the queue lock; its waker expiring
    // waiters takes that lock. A wake from inside the arming poll used to take it again on
    // the same thread: the caller, and then every caller of the bulkhead, hung for good.
    let clock = ManualClock::new();
    let bulkhead = SemaphoreBulkhead::with_clock(
        "wakes-inside-poll",
        &semaphore(1, 100),
        Arc::new(WakesInsidePoll(clock.clone())),
    );
    let inside = bulkhead.clone();
    let outcomes = no_hang("async waiters queued behind a held permit", move || {
        let bulkhead = inside;
        // Held on another thread: a call on the holder's own thread would be re-entrant.
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let holder = thread::spawn({
            let bulkhead = bulkhead.clone();
            move || {
                let _permit = bulkhead.try_acquire().unwrap();
                held_tx.send(()).unwrap();
                let _ = release_rx.recv();
            }
        });
        held_rx.recv().unwrap();
        let mut waiters: Vec<_> = (0..3)
            .map(|_| Box::pin(bulkhead.call_async(async { 7 })))
            .collect();
        for waiter in &mut waiters {
            let polled = poll_once(waiter);
            assert!(
                polled.is_pending(),
                "queued behind the held permit: {polled:?}"
            );
        }
        assert_eq!(bulkhead.snapshot().waiting, 3);
        // Not yet due: the inline wakes expired nobody.
        clock.advance(Duration::from_millis(99));
        assert_eq!(bulkhead.snapshot().waiting, 3);
        // Due: the timer, armed through all those inline wakes, still fires.
        clock.advance(Duration::from_millis(1));
        let outcomes: Vec<_> = waiters.iter_mut().map(poll_once).collect();
        drop(release_tx);
        holder.join().unwrap();
        outcomes
    });
    for polled in outcomes {
        assert!(
            matches!(polled, Poll::Ready(Err(BulkheadError::Timeout { .. }))),
            "{polled:?}"
        );
    }
    assert_semaphore_at_rest(&bulkhead);
    assert_eq!(bulkhead.snapshot().calls.refused.timeout, 3);
}

#[test]
fn semaphore_shutdown_with_an_unbounded_timeout_does_not_overflow() {
    let bulkhead = SemaphoreBulkhead::new("forever", &semaphore(2, 0));
    let report = bulkhead.shutdown(Duration::MAX);
    assert_eq!(report.still_running, 0);
}

// ---------------------------------------------------------------- semaphore: shutdown vs resize

#[test]
fn semaphore_resize_racing_shutdown_refuses_or_admits_each_waiter_exactly_once() {
    for round in 0..50 {
        let bulkhead = SemaphoreBulkhead::new("race", &semaphore(1, 60_000));
        let held = block_on(bulkhead.acquire_async()).unwrap();
        let waiters = blocking_callers(&bulkhead, 3);
        wait_until(|| bulkhead.snapshot().waiting == 3);
        thread::scope(|s| {
            s.spawn(|| bulkhead.resize(&semaphore(3, 60_000)));
            s.spawn(|| bulkhead.shutdown(Duration::ZERO));
        });
        drop(held);
        let mut ran = 0;
        for waiter in waiters {
            match waiter.join().unwrap() {
                Ok(()) => ran += 1,
                Err(BulkheadError::ShutDown { .. }) => {}
                Err(other) => panic!("round {round}: {other:?}"),
            }
        }
        let s = bulkhead.snapshot();
        assert_eq!(s.available, s.limit, "round {round}: {s:?}");
        assert_eq!(s.calls.permitted, ran + 1, "round {round}: {s:?}");
        assert_eq!(s.calls.refused.shut_down, 3 - ran, "round {round}: {s:?}");
        assert_reconciled(&s);
    }
}

// ---------------------------------------------------------------- thread pool: panics

#[test]
fn pool_async_body_panicking_at_each_stage_reaches_the_caller_and_frees_the_thread() {
    let pool = ThreadPoolBulkhead::new("panics", &pool_config(1, 1, 0));
    for at in [PanicAt::Closure, PanicAt::FirstPoll, PanicAt::AfterAwait] {
        let caught = catch_unwind(AssertUnwindSafe(|| {
            block_on(pool.call_async(at, |at| {
                if matches!(at, PanicAt::Closure) {
                    panic!("injected panic building the future");
                }
                panicking_body(at)
            }))
        }));
        assert!(caught.is_err(), "{at:?}: the panic reaches the caller");
        assert_pool_at_rest(&pool);
        assert_eq!(
            pool.call(1, |n| n + 1).ok(),
            Some(2),
            "{at:?}: still serving"
        );
    }
    let c = pool.snapshot().calls;
    assert_eq!((c.panicked, c.completed, c.cancelled), (3, 3, 0), "{c:?}");
}

#[test]
fn pool_sync_body_panic_with_a_borrow_reaches_the_caller_and_frees_the_thread() {
    let pool = ThreadPoolBulkhead::new("sync-panic", &pool_config(1, 1, 0));
    let order = vec![1, 2, 3];
    let caught = catch_unwind(AssertUnwindSafe(|| {
        pool.call(&order, |order| -> usize {
            panic!("injected panic, {} items", order.len())
        })
    }));
    assert!(caught.is_err());
    assert_pool_at_rest(&pool);
    assert_eq!(pool.call(&order, |o| o.len()).ok(), Some(3));
}

#[test]
fn pool_caller_runs_async_body_panic_caught_around_poll_is_counted_panicked() {
    let gate = Gate::default();
    let pool = ThreadPoolBulkhead::new(
        "caller-runs",
        &ThreadPoolConfig {
            on_full: OnFull::CallerRuns,
            ..pool_config(1, 1, 0)
        },
    );
    let busy = occupy(&pool, &gate);
    let call = pool.call_async(PanicAt::FirstPoll, panicking_body);
    assert!(poll_catching_then_drop(call));
    gate.open();
    busy.join().unwrap().unwrap();
    assert_pool_at_rest(&pool);
    let c = pool.snapshot().calls;
    assert_eq!((c.panicked, c.cancelled), (1, 0), "{c:?}");
}

#[test]
fn pool_panicking_fallback_after_a_refusal_gets_the_input_and_holds_nothing() {
    let gate = Gate::default();
    let pool = ThreadPoolBulkhead::new("fallback", &pool_config(1, 1, 0));
    let busy = occupy(&pool, &gate);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        match pool.call(String::from("order-7"), |s| s) {
            Ok(s) => s,
            Err(Refused { input, error }) => panic!("fallback for {input} after {error} panics"),
        }
    }));
    assert!(caught.is_err());
    gate.open();
    busy.join().unwrap().unwrap();
    assert_pool_at_rest(&pool);
    let c = pool.snapshot().calls;
    assert_eq!(
        (c.permitted, c.completed, c.refused.full),
        (1, 1, 1),
        "{c:?}"
    );
}

// ---------------------------------------------------------------- thread pool: dying workers

/// A result whose `Drop` panics: dropped on the worker when its async caller has gone.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !thread::panicking() {
            panic!("injected panic in a discarded result's drop");
        }
    }
}

#[test]
fn pool_worker_dropping_a_discarded_result_that_panics_keeps_serving() {
    no_hang("pool after a worker's drop panicked", || {
        let gate = Gate::default();
        let pool = ThreadPoolBulkhead::new("dying", &pool_config(1, 1, 4));
        let mut call = Box::pin(pool.call_async(gate.clone(), |gate| async move {
            gate.wait();
            PanicsOnDrop
        }));
        assert!(poll_once(&mut call).is_pending());
        wait_until(|| pool.snapshot().active == 1);
        // The caller gives up while the body runs: the result is discarded on the worker.
        drop(call);
        gate.open();
        // The pool still runs work, on a worker that survived or on a replacement.
        for i in 0..4 {
            let result = pool.call(i, |i| i * 2).map_err(|r| r.error);
            assert_eq!(result, Ok(i * 2));
        }
        assert_pool_at_rest(&pool);
        assert!(pool.snapshot().pool_size.unwrap() <= 1);
    });
}

// A pool whose worker thread cannot start refuses instead of hanging: the OS refusing a
// thread is stood in for by a hook, in `thread_pool::pool_tests` (a NUL in the thread name,
// which this test used, no longer stops a thread from starting).

/// Blocks in `Drop` until `release` opens, after signalling `entered`: holds a worker inside
/// the failing of a stale task (which drops the task's body) for as long as the test needs.
struct BlockOnDrop {
    entered: Gate,
    release: Gate,
}

impl Drop for BlockOnDrop {
    fn drop(&mut self) {
        self.entered.open();
        self.release.wait();
    }
}

/// Found by the soak: while a worker fails a stale task (CoDel, decided when the worker
/// takes it; `max_queue_wait` is answered by the caller at its deadline) it is neither
/// running, idle nor claimed, so `enqueue` saw the queue as over capacity and refused calls
/// the admission counter had just admitted (counted `permitted`, `cancelled` and `full`).
#[test]
fn pool_admitted_calls_are_not_refused_while_a_worker_fails_a_stale_task() {
    no_hang("admission while a stale task is failed", || {
        let (clock, shared) = manual_clock();
        let config = ThreadPoolConfig {
            codel: Some(bulkhead_config_types::CodelConfig {
                target: bulkhead_config_types::Duration::from_millis(5),
                interval: bulkhead_config_types::Duration::from_millis(10),
            }),
            ..pool_config(1, 1, 1)
        };
        let pool = ThreadPoolBulkhead::with_clock("stale", &config, shared);
        let (busy_gate, entered, release) = (Gate::default(), Gate::default(), Gate::default());
        let busy = occupy(&pool, &busy_gate);
        let stale = {
            let pool = pool.clone();
            let guard = BlockOnDrop {
                entered: entered.clone(),
                release: release.clone(),
            };
            thread::spawn(move || {
                pool.call((), move |()| drop(guard))
                    .map_err(|refused| refused.error)
            })
        };
        wait_until(|| pool.snapshot().queued == 1);
        clock.advance(Duration::from_millis(11));
        busy_gate.open();
        // The worker has taken the stale task and is dropping its body: both slots are free.
        entered.wait();
        let calls: Vec<_> = (0..2u32)
            .map(|i| {
                let pool = pool.clone();
                thread::spawn(move || pool.call(i, |i| i).map_err(|r| r.error))
            })
            .collect();
        wait_until(|| {
            pool.snapshot().calls.permitted == 4 || calls.iter().any(|c| c.is_finished())
        });
        release.open();
        busy.join().unwrap().unwrap();
        let err = stale.join().unwrap().unwrap_err();
        assert!(matches!(err, BulkheadError::QueueTimeout { .. }), "{err:?}");
        for (i, call) in calls.into_iter().enumerate() {
            assert_eq!(call.join().unwrap(), Ok(i as u32), "admitted, so it runs");
        }
        assert_pool_at_rest(&pool);
        assert_eq!(pool.snapshot().calls.refused.full, 0);
    });
}

// ---------------------------------------------------------------- thread pool: cancellation

/// Drops an async pool call at every point: waiting for room, queued, running (each await
/// point of the body), and after it finished.
#[test]
fn pool_call_async_dropped_at_every_stage_releases_its_slot_and_is_counted_once() {
    const AWAITS: usize = 3;
    let (clock, shared) = manual_clock();
    let gate = Gate::default();
    let pool = ThreadPoolBulkhead::with_clock(
        "cancel",
        &ThreadPoolConfig {
            on_full: OnFull::Wait(bulkhead_config_types::Duration::from_millis(100)),
            ..pool_config(1, 1, 1)
        },
        shared,
    );
    // Occupy the only thread so the next call queues and the one after waits for room.
    let busy = occupy(&pool, &gate);
    let mut queued = Box::pin(pool.call_async(0u32, |n| async move { n }));
    assert!(poll_once(&mut queued).is_pending());
    let mut waiting = Box::pin(pool.call_async(1u32, |n| async move { n }));
    assert!(poll_once(&mut waiting).is_pending());
    wait_until(|| pool.snapshot().waiting == 1);
    drop(waiting);
    drop(queued);
    assert_eq!(pool.snapshot().waiting, 0);
    gate.open();
    busy.join().unwrap().unwrap();
    assert_pool_at_rest(&pool);
    // While running: the body's await points; the caller goes away after each.
    for drop_after in 0..=AWAITS {
        let (started, go) = (Gate::default(), Gate::default());
        let mut call = Box::pin(pool.call_async(
            (started.clone(), go.clone()),
            move |(s, g)| async move {
                s.open();
                g.wait();
                for _ in 0..AWAITS {
                    yield_once().await;
                }
                drop_after
            },
        ));
        assert!(poll_once(&mut call).is_pending());
        started.wait();
        drop(call);
        go.open();
        assert_pool_at_rest(&pool);
    }
    assert_eq!(clock.sleepers(), 0, "no timer left behind");
    let c = pool.snapshot().calls;
    assert_eq!(c.cancelled, 1, "only the queued call never ran: {c:?}");
    assert_eq!(c.refused.timeout, 0, "{c:?}");
}

// ---------------------------------------------------------------- thread pool: hostile clocks

/// A pool whose one slot is held (`occupy`) and whose calls wait for room, on a clock that
/// panics once armed.
fn hostile_room_pool() -> (ThreadPoolBulkhead, Arc<PanickingNow>) {
    let clock = Arc::new(PanickingNow::default());
    let shared: Arc<dyn bulkhead_core::Clock> = clock.clone();
    let pool = ThreadPoolBulkhead::with_clock(
        "hostile-room",
        &ThreadPoolConfig {
            on_full: OnFull::Wait(bulkhead_config_types::Duration::from_secs(10)),
            ..pool_config(1, 1, 0)
        },
        shared,
    );
    (pool, clock)
}

#[test]
fn a_blocking_room_waiter_whose_clock_panics_as_room_frees_takes_nothing_and_leaves() {
    let (pool, clock) = hostile_room_pool();
    let gate = Gate::default();
    let busy = occupy(&pool, &gate);
    let waiter = {
        let pool = pool.clone();
        thread::spawn(move || pool.call((), |()| ()))
    };
    wait_until(|| pool.snapshot().waiting == 1);
    clock.arm();
    gate.open();
    busy.join().unwrap().unwrap();
    assert!(
        waiter.join().is_err(),
        "the clock's panic reached the waiter"
    );
    clock.disarm();
    assert_pool_at_rest(&pool);
    assert_eq!(pool.call((), |()| 7).ok(), Some(7), "the slot is free");
}

#[test]
fn an_async_room_waiter_whose_clock_panics_as_room_frees_takes_nothing_and_leaves() {
    let (pool, clock) = hostile_room_pool();
    let gate = Gate::default();
    let busy = occupy(&pool, &gate);
    let mut waiting = Box::pin(pool.call_async((), |()| async {}));
    assert!(poll_once(&mut waiting).is_pending());
    wait_until(|| pool.snapshot().waiting == 1);
    clock.arm();
    gate.open();
    busy.join().unwrap().unwrap();
    let polled = catch_unwind(AssertUnwindSafe(|| poll_once(&mut waiting).is_ready()));
    assert!(polled.is_err(), "the clock's panic reached the poll");
    clock.disarm();
    assert_eq!(pool.snapshot().waiting, 0, "its registration left the room");
    drop(waiting);
    assert_pool_at_rest(&pool);
    assert_eq!(pool.call((), |()| 7).ok(), Some(7), "the slot is free");
}

// ---------------------------------------------------------------- thread pool: clock jumps

#[test]
fn pool_queue_and_keep_alive_survive_the_clock_jumping_years_ahead() {
    let (clock, shared) = manual_clock();
    let gate = Gate::default();
    let pool = ThreadPoolBulkhead::with_clock(
        "jump",
        &ThreadPoolConfig {
            max_queue_wait: Some(bulkhead_config_types::Duration::from_millis(50)),
            keep_alive: bulkhead_config_types::Duration::from_secs(1),
            ..pool_config(0, 1, 2)
        },
        shared,
    );
    let busy = occupy(&pool, &gate);
    let queued: Vec<_> = (0..2u32)
        .map(|i| {
            let pool = pool.clone();
            thread::spawn(move || pool.call(i, |i| i))
        })
        .collect();
    wait_until(|| pool.snapshot().queued == 2);
    clock.advance(Duration::from_secs(10 * 365 * 24 * 3600));
    gate.open();
    busy.join().unwrap().unwrap();
    for call in queued {
        let refused = call.join().unwrap().unwrap_err();
        assert!(
            matches!(refused.error, BulkheadError::QueueTimeout { .. }),
            "{refused:?}"
        );
    }
    assert_pool_at_rest(&pool);
    // The idle worker (above core 0) retires once its keep-alive passes on the clock.
    wait_until(|| {
        clock.advance(Duration::from_secs(2));
        pool.snapshot().pool_size == Some(0)
    });
    assert_eq!(pool.snapshot().calls.refused.queue_timeout, 2);
}

#[test]
fn pool_shutdown_with_an_unbounded_timeout_does_not_overflow() {
    let pool = ThreadPoolBulkhead::new("forever", &pool_config(1, 1, 0));
    assert_eq!(pool.call(1, |n| n).ok(), Some(1));
    let report = pool.shutdown(Duration::MAX);
    assert_eq!(report.still_running, 0);
}

// ---------------------------------------------------------------- thread pool: shutdown vs resize

#[test]
fn pool_resize_racing_shutdown_runs_or_refuses_each_call_exactly_once() {
    for round in 0..30 {
        no_hang("resize racing shutdown", move || {
            let gate = Gate::default();
            let pool = ThreadPoolBulkhead::new("race", &pool_config(1, 1, 4));
            let calls: Vec<_> = (0..5u32)
                .map(|i| {
                    let (pool, gate) = (pool.clone(), gate.clone());
                    thread::spawn(move || {
                        pool.call(i, move |i| {
                            gate.wait();
                            i
                        })
                    })
                })
                .collect();
            wait_until(|| {
                let s = pool.snapshot();
                s.active + s.queued == 5
            });
            let report = thread::scope(|s| {
                s.spawn(|| pool.resize(&pool_config(3, 3, 4)));
                let shutdown = s.spawn(|| pool.shutdown(Duration::ZERO));
                gate.open();
                shutdown.join().unwrap()
            });
            let (mut ran, mut refused) = (0, 0);
            for call in calls {
                match call.join().unwrap() {
                    Ok(_) => ran += 1,
                    Err(Refused {
                        error: BulkheadError::ShutDown { .. },
                        ..
                    }) => refused += 1,
                    Err(other) => panic!("round {round}: {other:?}"),
                }
            }
            assert_eq!(ran + refused, 5, "round {round}");
            assert_eq!(refused, report.failed_queued, "round {round}: {report:?}");
            assert_pool_at_rest(&pool);
            wait_until(|| pool.snapshot().pool_size == Some(0));
            let c = pool.snapshot().calls;
            assert_eq!(c.permitted, 5, "round {round}: {c:?}");
            assert_eq!(c.completed, ran, "round {round}: {c:?}");
            assert_eq!(c.refused.shut_down, refused, "round {round}: {c:?}");
        });
    }
}

#[test]
fn pool_resize_after_shutdown_starts_no_thread_and_admits_nothing() {
    let pool = ThreadPoolBulkhead::new("late-resize", &pool_config(1, 1, 0));
    pool.shutdown(Duration::ZERO);
    pool.resize(&pool_config(4, 8, 8));
    let refused = pool.call(9, |n| n).unwrap_err();
    assert_eq!(refused.input, 9);
    assert!(matches!(refused.error, BulkheadError::ShutDown { .. }));
    assert_eq!(pool.snapshot().pool_size, Some(0));
}

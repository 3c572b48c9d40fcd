//! Behaviour of the thread-pool bulkhead. Deterministic: saturation is proven with gates
//! (latches the bodies block on) and expiry with a `ManualClock`; nothing sleeps.

mod support;

use std::collections::BTreeSet;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::task::Poll;
use std::thread;
use std::time::Duration;

use bulkhead_config_types::{CodelConfig, OnFull, QueueOrder, ThreadPoolConfig};
use bulkhead_core::{BulkheadError, ManualClock, Refused, ShutdownReport, ThreadPoolBulkhead};
use support::{Gate, XorShift, poll_once, pool_config as config, wait_until};

// ---------------------------------------------------------------- helpers

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits until `n` calls are admitted and each is running or queued.
fn wait_for_admitted(pool: &ThreadPoolBulkhead, n: u64) {
    wait_until(|| {
        let s = pool.snapshot();
        s.calls.permitted == n && u64::from(s.active + s.queued) == n
    });
}

/// Starts `n` blocking calls that wait on `gate`, each returning its input on success.
fn blocked_calls(
    pool: &ThreadPoolBulkhead,
    gate: &Gate,
    inputs: impl IntoIterator<Item = u32>,
) -> Vec<thread::JoinHandle<Result<u32, Refused<u32>>>> {
    inputs
        .into_iter()
        .map(|i| {
            let (pool, gate) = (pool.clone(), gate.clone());
            thread::spawn(move || {
                pool.call(i, |i| {
                    gate.wait();
                    i
                })
            })
        })
        .collect()
}

fn is_full<T>(r: &Result<T, Refused<u32>>) -> bool {
    matches!(
        r,
        Err(Refused {
            error: BulkheadError::Full { .. },
            ..
        })
    )
}

/// A pool whose only worker is held by a call blocked on a gate, so later calls queue.
struct Busy {
    pool: ThreadPoolBulkhead,
    gate: Gate,
    blocker: thread::JoinHandle<Result<u32, Refused<u32>>>,
}

impl Busy {
    fn new(name: &str, clock: &ManualClock, config: ThreadPoolConfig) -> Self {
        let pool = ThreadPoolBulkhead::with_clock(name, &config, Arc::new(clock.clone()));
        let gate = Gate::default();
        let blocker = blocked_calls(&pool, &gate, [0]).remove(0);
        wait_until(|| pool.snapshot().active == 1);
        Busy {
            pool,
            gate,
            blocker,
        }
    }

    /// Submits an async call of `body` and polls it once, so it is queued.
    fn queue_call<T, R, B>(
        &self,
        value: T,
        body: B,
    ) -> impl Future<Output = Result<R, Refused<T>>> + Unpin + use<T, R, B>
    where
        T: Send + 'static,
        R: Send + 'static,
        B: FnOnce(T) -> R + Send + 'static,
    {
        let mut fut = self.pool.call_async(value, |v| async move { body(v) });
        assert!(poll_once(&mut fut).is_pending());
        fut
    }

    /// Queues an async call that returns its input.
    fn queue_echo<T: Send + 'static>(
        &self,
        value: T,
    ) -> impl Future<Output = Result<T, Refused<T>>> + Unpin + use<T> {
        self.queue_call(value, |v| v)
    }

    /// Opens the gate and checks the blocking call finished.
    fn release(self) -> ThreadPoolBulkhead {
        self.gate.open();
        assert_eq!(self.blocker.join().unwrap().unwrap(), 0);
        self.pool
    }
}

fn codel_config() -> ThreadPoolConfig {
    ThreadPoolConfig {
        codel: Some(CodelConfig {
            target: ms(5).into(),
            interval: ms(100).into(),
        }),
        ..config(1, 1, 8)
    }
}

// ---------------------------------------------------------------- one thread, a queue of 15

#[test]
fn one_thread_pool_with_queue_15_accepts_16_blocked_calls() {
    let pool = ThreadPoolBulkhead::new("one-thread", &config(1, 1, 15));
    let gate = Gate::default();
    let calls = blocked_calls(&pool, &gate, 0..16);
    wait_for_admitted(&pool, 16);
    let snap = pool.snapshot();
    assert_eq!((snap.active, snap.queued), (1, 15));
    assert!(is_full(&pool.call(99, |i| i)));
    gate.open();
    let mut results: Vec<u32> = calls
        .into_iter()
        .map(|c| c.join().unwrap().unwrap())
        .collect();
    results.sort();
    assert_eq!(results, (0..16).collect::<Vec<_>>());
}

#[test]
fn abort_admits_exactly_four_of_sixteen_simultaneous_calls() {
    for _ in 0..20 {
        let pool = ThreadPoolBulkhead::new("abort", &config(1, 1, 3));
        let gate = Gate::default();
        let start = Arc::new(Barrier::new(16));
        let calls: Vec<_> = (0..16u32)
            .map(|i| {
                let (pool, gate, start) = (pool.clone(), gate.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    pool.call(i, |i| {
                        gate.wait();
                        i
                    })
                })
            })
            .collect();
        wait_until(|| {
            let s = pool.snapshot();
            s.calls.refused.full + s.calls.permitted == 16
                && u64::from(s.active + s.queued) == s.calls.permitted
        });
        let snap = pool.snapshot();
        assert_eq!(snap.calls.permitted, 4);
        assert_eq!(snap.calls.refused.full, 12);
        assert_eq!((snap.active, snap.queued), (1, 3));
        gate.open();
        let results: Vec<_> = calls.into_iter().map(|c| c.join().unwrap()).collect();
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4);
        assert_eq!(results.iter().filter(|r| is_full(r)).count(), 12);
        // Refused calls got their own input back.
        for r in &results {
            if let Err(refused) = r {
                assert!(refused.input < 16);
            }
        }
        assert!(
            pool.largest_queued() <= 3,
            "queue held {}",
            pool.largest_queued()
        );
    }
}

#[test]
fn caller_runs_runs_the_extra_call_on_the_callers_thread() {
    let pool = ThreadPoolBulkhead::new(
        "cr",
        &ThreadPoolConfig {
            on_full: OnFull::CallerRuns,
            ..config(1, 1, 1)
        },
    );
    let gate = Gate::default();
    let calls = blocked_calls(&pool, &gate, 0..2);
    wait_for_admitted(&pool, 2);
    let pool2 = pool.clone();
    let ran_on = thread::Builder::new()
        .name("the-caller".into())
        .spawn(move || {
            pool2
                .call((), |()| thread::current().name().map(String::from))
                .unwrap()
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(ran_on.as_deref(), Some("the-caller"));
    assert_eq!(pool.caller_runs(), 1);
    gate.open();
    calls
        .into_iter()
        .for_each(|c| assert!(c.join().unwrap().is_ok()));
    let calls = pool.snapshot().calls;
    assert_eq!((calls.permitted, calls.completed), (3, 3));
}

#[test]
fn caller_runs_after_shutdown_is_refused_not_discarded() {
    let pool = ThreadPoolBulkhead::new(
        "cr-shut",
        &ThreadPoolConfig {
            on_full: OnFull::CallerRuns,
            ..config(1, 1, 0)
        },
    );
    pool.shutdown(ms(0));
    let refused = pool.call(7u32, |i| i).unwrap_err();
    assert_eq!(refused.input, 7);
    assert!(matches!(refused.error, BulkheadError::ShutDown { .. }));
    assert_eq!(pool.snapshot().calls.refused.shut_down, 1);
}

fn waiting_config() -> ThreadPoolConfig {
    ThreadPoolConfig {
        on_full: OnFull::Wait(Duration::from_secs(1).into()),
        ..config(1, 1, 0)
    }
}

/// Starts `pool.call(input, identity)` on another thread.
fn spawn_call(
    pool: &ThreadPoolBulkhead,
    input: u32,
) -> thread::JoinHandle<Result<u32, Refused<u32>>> {
    let pool = pool.clone();
    thread::spawn(move || pool.call(input, |i| i))
}

#[test]
fn wait_admits_when_a_slot_frees_within_the_wait() {
    let clock = ManualClock::new();
    let busy = Busy::new("wait", &clock, waiting_config());
    let waiter = spawn_call(&busy.pool, 2);
    clock.wait_for_sleepers(1);
    assert_eq!(busy.pool.snapshot().waiting, 1);
    clock.advance(ms(999));
    busy.release();
    assert_eq!(waiter.join().unwrap().unwrap(), 2);
}

#[test]
fn wait_fails_with_timeout_once_the_wait_has_passed_on_the_clock() {
    let clock = ManualClock::new();
    let busy = Busy::new("wait", &clock, waiting_config());
    let waiter = spawn_call(&busy.pool, 2);
    clock.wait_for_sleepers(1);
    clock.advance(Duration::from_secs(1));
    let refused = waiter.join().unwrap().unwrap_err();
    assert_eq!(refused.input, 2);
    assert_eq!(
        refused.error,
        BulkheadError::Timeout {
            name: "wait".into(),
            waited: Duration::from_secs(1)
        }
    );
    let pool = busy.release();
    assert_eq!(pool.snapshot().calls.refused.timeout, 1);
}

#[test]
fn async_wait_awaits_room_on_the_clock_then_times_out() {
    let clock = ManualClock::new();
    let busy = Busy::new("wait", &clock, waiting_config());
    let mut waiting = busy.pool.call_async(5u32, |i| async move { i });
    assert!(poll_once(&mut waiting).is_pending());
    assert_eq!(busy.pool.snapshot().waiting, 1);
    clock.advance(Duration::from_secs(1));
    let refused = futures_executor::block_on(waiting).unwrap_err();
    assert_eq!(refused.input, 5);
    assert!(matches!(refused.error, BulkheadError::Timeout { .. }));
    busy.release();
}

// ---------------------------------------------------------------- threads

#[test]
fn threads_are_named_prefix_and_number() {
    let named = ThreadPoolBulkhead::new(
        "ignored",
        &ThreadPoolConfig {
            thread_name_prefix: Some("pay-".into()),
            ..config(2, 2, 0)
        },
    );
    let barrier = Arc::new(Barrier::new(2));
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let (pool, barrier) = (named.clone(), barrier.clone());
            thread::spawn(move || {
                pool.call((), |()| {
                    barrier.wait(); // both run at once, so on two threads
                    thread::current().name().unwrap_or_default().to_owned()
                })
                .unwrap()
            })
        })
        .collect();
    let names: BTreeSet<String> = callers.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(names, BTreeSet::from(["pay-1".into(), "pay-2".into()]));

    let default = ThreadPoolBulkhead::new("inventory", &config(1, 1, 0));
    let name = default.call((), |()| thread::current().name().map(String::from));
    assert_eq!(name.unwrap().as_deref(), Some("inventory-1"));
}

#[test]
fn a_nul_in_the_name_or_prefix_of_a_pool_built_directly_does_not_stop_its_threads() {
    // The registry refuses such names; a pool built without it still starts its workers.
    let prefixed = ThreadPoolBulkhead::new(
        "ignored",
        &ThreadPoolConfig {
            thread_name_prefix: Some("pay\0-".into()),
            ..config(1, 1, 0)
        },
    );
    let name = prefixed.call((), |()| thread::current().name().map(String::from));
    assert_eq!(name.unwrap().as_deref(), Some("pay\u{fffd}-1"));
    let named = ThreadPoolBulkhead::new("inv\0", &config(1, 1, 0));
    assert_eq!(named.call(3, |i| i + 1).ok(), Some(4));
    let counts = named.snapshot().calls;
    assert_eq!(
        (
            counts.permitted,
            counts.completed,
            counts.cancelled,
            counts.refused.full
        ),
        (1, 1, 0, 0)
    );
}

#[test]
fn a_pool_with_core_below_max_runs_max_threads_before_it_refuses() {
    let pool = ThreadPoolBulkhead::new("grows", &config(2, 5, 3));
    let gate = Gate::default();
    // Five running on five threads (three above core), three queued: full.
    let calls = blocked_calls(&pool, &gate, 0..8);
    wait_until(|| {
        let s = pool.snapshot();
        s.active == 5 && s.queued == 3
    });
    let refused = pool.call(99, |i| i);
    assert!(is_full(&refused));
    let s = pool.snapshot();
    assert_eq!(
        (s.active, s.queued, s.pool_size, s.largest_pool_size),
        (5, 3, Some(5), Some(5))
    );
    assert_eq!(s.calls.refused.full, 1);
    gate.open();
    for call in calls {
        assert!(call.join().unwrap().is_ok());
    }
}

#[test]
fn keep_alive_retires_threads_above_core() {
    let clock = ManualClock::new();
    let pool = ThreadPoolBulkhead::with_clock(
        "ka",
        &ThreadPoolConfig {
            keep_alive: Duration::from_secs(10).into(),
            ..config(1, 3, 0)
        },
        Arc::new(clock.clone()),
    );
    let gate = Gate::default();
    let calls = blocked_calls(&pool, &gate, 0..3);
    wait_until(|| pool.snapshot().active == 3);
    assert_eq!(pool.snapshot().pool_size, Some(3));
    gate.open();
    calls
        .into_iter()
        .for_each(|c| assert!(c.join().unwrap().is_ok()));
    // Every idle worker above core waits on the clock for its keep-alive.
    clock.wait_for_sleepers(3);
    assert_eq!(pool.snapshot().pool_size, Some(3));
    clock.advance(Duration::from_secs(10));
    wait_until(|| pool.snapshot().pool_size == Some(1));
    let snap = pool.snapshot();
    assert_eq!(snap.largest_pool_size, Some(3));
    assert_eq!(pool.call(1u32, |i| i + 1).unwrap(), 2);
    assert_eq!(pool.snapshot().pool_size, Some(1));
}

#[test]
fn panic_in_body_reaches_the_caller_and_pool_keeps_serving() {
    let pool = ThreadPoolBulkhead::new("panics", &config(1, 1, 0));
    let caught = catch_unwind(AssertUnwindSafe(|| {
        pool.call((), |()| -> u32 { panic!("boom") })
    }))
    .unwrap_err();
    assert_eq!(caught.downcast_ref::<&str>(), Some(&"boom"));
    assert_eq!(pool.call(2u32, |i| i * 2).unwrap(), 4);
    let snap = pool.snapshot();
    assert_eq!((snap.calls.panicked, snap.calls.completed), (1, 1));
    assert_eq!(snap.pool_size, Some(1), "the worker survived the panic");
}

#[test]
fn borrowed_arguments_work() {
    let pool = ThreadPoolBulkhead::new("borrow", &config(2, 2, 4));
    let order = vec![String::from("a"), String::from("b")];
    let mut log = Vec::new();
    let n = pool
        .call((&order, &mut log), |(order, log)| {
            log.push(order.join("+"));
            order.len()
        })
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(log, ["a+b"]);
    // A refused call hands the borrowed input back.
    pool.shutdown(ms(0));
    let refused = pool.call(&mut log, |log| log.clear()).unwrap_err();
    refused.input.push("fallback".into());
    assert_eq!(log, ["a+b", "fallback"]);
}

#[test]
fn zero_queue_is_a_direct_hand_off() {
    let pool = ThreadPoolBulkhead::new("handoff", &config(1, 2, 0));
    let gate = Gate::default();
    let calls = blocked_calls(&pool, &gate, 0..2);
    wait_until(|| pool.snapshot().active == 2);
    assert!(is_full(&pool.call(9, |i| i)));
    assert_eq!(pool.snapshot().queued, 0);
    gate.open();
    calls
        .into_iter()
        .for_each(|c| assert!(c.join().unwrap().is_ok()));
}

// ---------------------------------------------------------------- async

#[tokio::test]
async fn async_call_on_tokio_runs_on_a_worker() {
    let pool = ThreadPoolBulkhead::new("tok", &config(1, 1, 4));
    let name = pool
        .call_async((), |()| async {
            thread::current().name().map(String::from)
        })
        .await
        .unwrap();
    assert_eq!(name.as_deref(), Some("tok-1"));
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_body_can_use_the_callers_tokio_runtime() {
    let pool = ThreadPoolBulkhead::new("tok-rt", &config(1, 1, 4));
    let out = pool
        .call_async(21u32, |n| async move {
            let on_worker = thread::current().name() == Some("tok-rt-1");
            let doubled = tokio::spawn(async move { n * 2 }).await.unwrap();
            let timed = tokio::time::timeout(Duration::from_secs(60), async { doubled }).await;
            (on_worker, timed.unwrap())
        })
        .await
        .unwrap();
    assert_eq!(out, (true, 42));
}

#[test]
fn an_async_body_using_tokio_without_a_runtime_panics_with_what_to_do() {
    let pool = ThreadPoolBulkhead::new("no-runtime", &config(1, 1, 0));
    // Awaited outside any tokio runtime, so none can be entered on the worker.
    let call = pool.call_async((), |()| async {
        tokio::time::sleep(ms(1)).await;
    });
    let payload = catch_unwind(AssertUnwindSafe(|| futures_executor::block_on(call)))
        .expect_err("the body panics");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("no reactor running"), "{message}");
    let help = if cfg!(feature = "tokio") {
        "this call was awaited outside any tokio runtime: await it from a tokio task"
    } else {
        "enable the `tokio` feature of the `bulkhead` crate"
    };
    assert!(message.contains(help), "{message}");
}

#[test]
fn async_call_on_futures_executor() {
    let pool = ThreadPoolBulkhead::new("fx", &config(1, 1, 4));
    let out = futures_executor::block_on(
        pool.call_async(vec![1, 2, 3], |v| async move { v.into_iter().sum::<i32>() }),
    );
    assert_eq!(out.unwrap(), 6);
}

#[test]
fn async_panic_reaches_the_awaiting_caller() {
    let pool = ThreadPoolBulkhead::new("apanic", &config(1, 1, 4));
    let caught = catch_unwind(AssertUnwindSafe(|| {
        futures_executor::block_on(pool.call_async((), |()| async { panic!("async boom") }))
    }))
    .unwrap_err();
    assert_eq!(caught.downcast_ref::<&str>(), Some(&"async boom"));
    assert_eq!(pool.call(1u32, |i| i).unwrap(), 1);
    assert_eq!(pool.snapshot().calls.panicked, 1);
}

#[test]
fn dropped_async_call_while_queued_never_runs() {
    let busy = Busy::new("cancel", &ManualClock::new(), config(1, 1, 4));
    let ran = Arc::new(AtomicBool::new(false));
    let fut = {
        let ran = ran.clone();
        busy.queue_call((), move |()| ran.store(true, SeqCst))
    };
    assert_eq!(busy.pool.snapshot().queued, 1);
    drop(fut);
    let snap = busy.pool.snapshot();
    assert_eq!((snap.queued, snap.calls.cancelled), (0, 1));
    let pool = busy.release();
    // A later task runs after the cancelled one would have: it did not run.
    pool.call((), |()| ()).unwrap();
    assert!(!ran.load(SeqCst));
    let calls = pool.snapshot().calls;
    assert_eq!(calls.permitted, calls.completed + calls.cancelled);
}

// ---------------------------------------------------------------- overload control

fn manual_pool(name: &str, clock: &ManualClock, config: ThreadPoolConfig) -> ThreadPoolBulkhead {
    ThreadPoolBulkhead::with_clock(name, &config, Arc::new(clock.clone()))
}

#[test]
fn max_queue_wait_fails_stale_work_with_queue_timeout_and_gives_the_input_back() {
    let clock = ManualClock::new();
    let pool = manual_pool(
        "mqw",
        &clock,
        ThreadPoolConfig {
            max_queue_wait: Some(ms(100).into()),
            ..config(1, 1, 4)
        },
    );
    let gate = Gate::default();
    let blocker = blocked_calls(&pool, &gate, [0]);
    wait_until(|| pool.snapshot().active == 1);
    let stale = blocked_calls(&pool, &gate, [1]);
    wait_until(|| pool.snapshot().queued == 1);
    // The queued caller sleeps on the clock until its deadline; the worker stays stuck.
    clock.wait_for_sleepers(1);
    clock.advance(ms(150));
    let refused = stale
        .into_iter()
        .next()
        .unwrap()
        .join()
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.input, 1);
    assert_eq!(
        refused.error,
        BulkheadError::QueueTimeout {
            name: "mqw".into(),
            waited: ms(150)
        }
    );
    assert_eq!(pool.snapshot().queued, 0, "the stale task was withdrawn");
    let fresh = blocked_calls(&pool, &gate, [2]);
    wait_until(|| pool.snapshot().queued == 1);
    gate.open();
    assert_eq!(
        fresh.into_iter().next().unwrap().join().unwrap().unwrap(),
        2
    );
    assert!(blocker.into_iter().next().unwrap().join().unwrap().is_ok());
    let calls = pool.snapshot().calls;
    assert_eq!(calls.refused.queue_timeout, 1);
    assert_eq!(calls.permitted, calls.completed + calls.cancelled);
}

#[test]
fn codel_fails_work_older_than_target_while_the_queue_stands() {
    let clock = ManualClock::new();
    let busy = Busy::new("codel", &clock, codel_config());
    let old = busy.queue_echo(String::from("old"));
    clock.advance(ms(120)); // queue not empty for 120 ms > interval: standing
    let young = busy.queue_echo(String::from("young"));
    let pool = busy.release();
    let refused = futures_executor::block_on(old).unwrap_err();
    assert_eq!(refused.input, "old");
    assert!(
        matches!(refused.error, BulkheadError::QueueTimeout { waited, .. } if waited == ms(120))
    );
    assert_eq!(futures_executor::block_on(young).unwrap(), "young");
    assert_eq!(pool.snapshot().calls.refused.queue_timeout, 1);
}

#[test]
fn codel_does_not_shed_a_queue_that_is_not_standing() {
    let clock = ManualClock::new();
    let busy = Busy::new("codel-burst", &clock, codel_config());
    let queued = busy.queue_echo(1u32);
    clock.advance(ms(50)); // older than target, but a burst: not standing for interval
    busy.release();
    assert_eq!(futures_executor::block_on(queued).unwrap(), 1);
}

fn ordered_run(clock: &ManualClock, order: QueueOrder, advance: Duration) -> Vec<u32> {
    let busy = Busy::new(
        "order",
        clock,
        ThreadPoolConfig {
            queue_order: order,
            ..config(1, 1, 8)
        },
    );
    let served = Arc::new(Mutex::new(Vec::new()));
    let queued: Vec<_> = (1..=3u32)
        .map(|i| {
            let served = served.clone();
            busy.queue_call(i, move |i| served.lock().unwrap().push(i))
        })
        .collect();
    clock.advance(advance);
    busy.release();
    for f in queued {
        futures_executor::block_on(f).unwrap();
    }
    served.lock().unwrap().clone()
}

#[test]
fn adaptive_lifo_serves_newest_first_while_the_queue_stands() {
    let clock = ManualClock::new();
    assert_eq!(
        ordered_run(&clock, QueueOrder::AdaptiveLifo, ms(100)),
        [3, 2, 1]
    );
}

#[test]
fn adaptive_lifo_is_fifo_while_the_queue_drains() {
    let clock = ManualClock::new();
    assert_eq!(
        ordered_run(&clock, QueueOrder::AdaptiveLifo, ms(10)),
        [1, 2, 3]
    );
    assert_eq!(ordered_run(&clock, QueueOrder::Fifo, ms(100)), [1, 2, 3]);
}

// ---------------------------------------------------------------- resize and shutdown

#[test]
fn resize_up_and_down_under_load_keeps_limits_and_loses_nothing() {
    let pool = ThreadPoolBulkhead::new("resize", &config(2, 2, 2));
    let gate = Gate::default();
    let mut calls = blocked_calls(&pool, &gate, 0..4);
    wait_for_admitted(&pool, 4);
    assert_eq!((pool.snapshot().active, pool.snapshot().queued), (2, 2));
    assert!(is_full(&pool.call(90, |i| i)));

    // Up: queued work gets the new threads at once, and there is room for more.
    pool.resize(&config(2, 4, 4));
    wait_until(|| pool.snapshot().active == 4);
    assert_eq!(pool.snapshot().queued, 0);
    calls.extend(blocked_calls(&pool, &gate, 4..8));
    wait_for_admitted(&pool, 8);
    let snap = pool.snapshot();
    assert_eq!(
        (snap.active, snap.queued, snap.queue_capacity),
        (4, 4, Some(4))
    );
    assert!(is_full(&pool.call(91, |i| i)));

    // Down: nothing admitted is cancelled; new work is refused until it drains.
    pool.resize(&config(1, 1, 1));
    let snap = pool.snapshot();
    assert_eq!((snap.active, snap.queued, snap.limit), (4, 4, 1));
    assert!(is_full(&pool.call(92, |i| i)));

    gate.open();
    let mut done: Vec<u32> = calls
        .into_iter()
        .map(|c| c.join().unwrap().unwrap())
        .collect();
    done.sort();
    assert_eq!(done, (0..8).collect::<Vec<_>>());
    wait_until(|| pool.snapshot().pool_size == Some(1));
    assert_eq!(pool.call(5u32, |i| i).unwrap(), 5);
    let calls = pool.snapshot().calls;
    assert_eq!(
        (calls.permitted, calls.completed, calls.refused.full),
        (9, 9, 3)
    );
}

/// A 1-thread pool with queue 3 holding four blocked calls, and `shutdown(30 s)` on
/// `clock` running on another thread.
#[allow(clippy::type_complexity)]
fn shutdown_with_four_blocked_calls(
    name: &str,
    clock: &ManualClock,
) -> (
    ThreadPoolBulkhead,
    Gate,
    Vec<thread::JoinHandle<Result<u32, Refused<u32>>>>,
    thread::JoinHandle<ShutdownReport>,
) {
    let pool = manual_pool(name, clock, config(1, 1, 3));
    let gate = Gate::default();
    let calls = blocked_calls(&pool, &gate, 0..4);
    wait_for_admitted(&pool, 4);
    let shutdown = {
        let pool = pool.clone();
        thread::spawn(move || pool.shutdown(Duration::from_secs(30)))
    };
    (pool, gate, calls, shutdown)
}

#[test]
fn shutdown_drains_running_and_queued_work_within_the_timeout() {
    let clock = ManualClock::new();
    let (pool, gate, calls, shutdown) = shutdown_with_four_blocked_calls("drain", &clock);
    wait_until(|| pool.is_shut_down());
    let refused = pool.call(50u32, |i| i).unwrap_err();
    assert!(matches!(refused.error, BulkheadError::ShutDown { .. }));
    gate.open();
    let report = shutdown.join().unwrap();
    assert_eq!(
        (report.completed, report.failed_queued, report.still_running),
        (4, 0, 0)
    );
    assert_eq!(report.threads_joined, 1);
    calls
        .into_iter()
        .for_each(|c| assert!(c.join().unwrap().is_ok()));
    assert_eq!(pool.snapshot().pool_size, Some(0));
}

#[test]
fn shutdown_fails_what_is_still_queued_at_the_timeout_with_shut_down() {
    let clock = ManualClock::new();
    let (pool, gate, calls, shutdown) = shutdown_with_four_blocked_calls("cut", &clock);
    clock.wait_for_sleepers(1);
    clock.advance(Duration::from_secs(30));
    let report = shutdown.join().unwrap();
    assert_eq!(
        (report.completed, report.failed_queued, report.still_running),
        (0, 3, 1)
    );
    gate.open();
    let mut inputs = Vec::new();
    let mut ran = 0;
    for call in calls {
        match call.join().unwrap() {
            Ok(i) => {
                ran += 1;
                inputs.push(i);
            }
            Err(refused) => {
                assert!(matches!(refused.error, BulkheadError::ShutDown { .. }));
                inputs.push(refused.input);
            }
        }
    }
    // The running call finished; the three queued ones came back with their inputs.
    assert_eq!(ran, 1);
    inputs.sort();
    assert_eq!(inputs, [0, 1, 2, 3]);
    wait_until(|| pool.snapshot().pool_size == Some(0));
    let calls = pool.snapshot().calls;
    assert_eq!(
        (calls.completed, calls.cancelled, calls.refused.shut_down),
        (1, 3, 3)
    );
}

// ---------------------------------------------------------------- re-entry

#[test]
fn reentrant_call_from_a_worker_runs_inline_and_is_counted() {
    // One thread and no queue: a nested call that hopped would be refused (or deadlock).
    let pool = ThreadPoolBulkhead::new("nested", &config(1, 1, 0));
    let inner = pool.clone();
    let out = pool
        .call(3u32, move |n| {
            let outer = thread::current().id();
            inner
                .call(n, |n| (n + 1, thread::current().id() == outer))
                .unwrap()
        })
        .unwrap();
    assert_eq!(out, (4, true));
    let calls = pool.snapshot().calls;
    assert_eq!((calls.reentrant, calls.permitted), (1, 1));

    let inner = pool.clone();
    let out = futures_executor::block_on(pool.call_async(1u32, move |n| async move {
        inner
            .call_async(n, |n| async move { n * 10 })
            .await
            .unwrap()
    }));
    assert_eq!(out.unwrap(), 10);
    assert_eq!(pool.snapshot().calls.reentrant, 2);
}

// ---------------------------------------------------------------- stress

#[test]
fn stress_random_panics_and_cancellations_keep_every_call_accounted() {
    const CALLERS: u64 = 8;
    const CALLS: u64 = 400;
    let pool = ThreadPoolBulkhead::new(
        "stress",
        &ThreadPoolConfig {
            keep_alive: ms(1).into(),
            ..config(2, 4, 8)
        },
    );
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (pool, stop) = (pool.clone(), stop.clone());
        thread::spawn(move || {
            let mut samples = 0u64;
            while !stop.load(SeqCst) {
                let s = pool.snapshot();
                assert!(s.active <= 4, "running {} > max_threads", s.active);
                assert!(s.queued <= 8, "queued {} > capacity", s.queued);
                assert!(s.pool_size.unwrap_or(0) <= 4);
                samples += 1;
            }
            samples
        })
    };
    let ok = Arc::new(AtomicU64::new(0));
    let panics = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let dropped = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..CALLERS)
        .map(|c| {
            let pool = pool.clone();
            let (ok, panics, refused, dropped) =
                (ok.clone(), panics.clone(), refused.clone(), dropped.clone());
            thread::spawn(move || {
                let mut rng = XorShift::seeded(c + 1);
                for i in 0..CALLS {
                    let roll = rng.next() % 10;
                    let spin = rng.next() % 200;
                    let body = move |i: u64| {
                        for _ in 0..spin {
                            std::hint::spin_loop();
                        }
                        if roll == 0 {
                            panic!("random panic");
                        }
                        i
                    };
                    if roll < 7 {
                        match catch_unwind(AssertUnwindSafe(|| pool.call(i, body))) {
                            Ok(Ok(_)) => ok.fetch_add(1, SeqCst),
                            Ok(Err(_)) => refused.fetch_add(1, SeqCst),
                            Err(_) => panics.fetch_add(1, SeqCst),
                        };
                    } else {
                        let mut fut = pool.call_async(i, move |i| async move { body(i) });
                        if roll == 9 {
                            // Give up after submitting: queued → cancelled, running → discarded.
                            match poll_once(&mut fut) {
                                Poll::Ready(Ok(_)) => ok.fetch_add(1, SeqCst),
                                Poll::Ready(Err(_)) => refused.fetch_add(1, SeqCst),
                                Poll::Pending => dropped.fetch_add(1, SeqCst),
                            };
                            drop(fut);
                        } else {
                            match futures_executor::block_on(fut) {
                                Ok(_) => ok.fetch_add(1, SeqCst),
                                Err(_) => refused.fetch_add(1, SeqCst),
                            };
                        }
                    }
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    // Dropped async calls may still be running: wait for the pool to be at rest.
    wait_until(|| {
        let s = pool.snapshot();
        s.active == 0 && s.queued == 0 && {
            let c = s.calls;
            c.permitted == c.completed + c.panicked + c.cancelled
        }
    });
    stop.store(true, SeqCst);
    assert!(monitor.join().unwrap() > 0);
    let calls = pool.snapshot().calls;
    let total = CALLERS * CALLS;
    let (ok, panics, refused, dropped) = (
        ok.load(SeqCst),
        panics.load(SeqCst),
        refused.load(SeqCst),
        dropped.load(SeqCst),
    );
    assert_eq!(
        ok + panics + refused + dropped,
        total,
        "every call has one outcome"
    );
    assert_eq!(calls.refused.total(), refused, "every refusal counted");
    assert_eq!(
        calls.permitted + calls.refused.full,
        total,
        "admitted or refused"
    );
    assert!(calls.completed >= ok);
    assert!(calls.panicked >= panics);
    assert_eq!(
        calls.completed + calls.panicked + calls.cancelled,
        ok + panics + dropped,
        "every admitted call ran once or was cancelled once"
    );
}

// ---------------------------------------------------------------- memory

#[test]
fn million_refusals_on_a_saturated_pool_keep_queue_and_memory_flat() {
    const CAPACITY: u32 = 200;
    let busy = Busy::new("mem", &ManualClock::new(), config(1, 1, CAPACITY));
    let queued: Vec<_> = (0..CAPACITY).map(|i| busy.queue_echo(i)).collect();
    let pool = busy.pool.clone();
    assert_eq!(pool.snapshot().queued, CAPACITY);

    let before = memory_stats::memory_stats().map(|m| m.physical_mem);
    let mut full = 0u32;
    for i in 0..1_000_000u32 {
        if let Err(refused) = pool.call(i, |i| i) {
            assert_eq!(refused.input, i);
            full += 1;
        }
    }
    let after = memory_stats::memory_stats().map(|m| m.physical_mem);
    assert_eq!(full, 1_000_000);
    assert_eq!(pool.snapshot().queued, CAPACITY);
    assert_eq!(pool.largest_queued(), CAPACITY);
    if let (Some(before), Some(after)) = (before, after) {
        let growth = after.saturating_sub(before);
        println!(
            "resident memory: {before} B before, {after} B after 1,000,000 refusals; growth {growth} B"
        );
        assert!(growth < 64 << 20, "resident memory grew by {growth} B");
    }

    busy.release();
    for (i, f) in queued.into_iter().enumerate() {
        assert_eq!(futures_executor::block_on(f).unwrap() as usize, i);
    }
    assert_eq!(pool.snapshot().calls.refused.full, 1_000_000);
}

// ---------------------------------------------------------------- edge cases

#[test]
fn unbounded_waits_and_timeouts_do_not_overflow_the_clock() {
    let pool = ThreadPoolBulkhead::new(
        "unbounded",
        &ThreadPoolConfig {
            on_full: OnFull::Wait(Duration::MAX.into()),
            keep_alive: Duration::MAX.into(),
            ..config(0, 1, 0)
        },
    );
    assert_eq!(pool.call(1u32, |i| i).unwrap(), 1);
    let report = pool.shutdown(Duration::MAX);
    assert_eq!((report.still_running, report.failed_queued), (0, 0));
}

#[test]
fn caller_runs_async_panic_caught_around_poll_is_counted_panicked() {
    let busy = Busy::new(
        "cr-async",
        &ManualClock::new(),
        ThreadPoolConfig {
            on_full: OnFull::CallerRuns,
            ..config(1, 1, 0)
        },
    );
    let mut call = busy
        .pool
        .call_async((), |()| async { panic!("on the caller") });
    assert!(catch_unwind(AssertUnwindSafe(|| poll_once(&mut call))).is_err());
    drop(call);
    let calls = busy.release().snapshot().calls;
    assert_eq!((calls.panicked, calls.cancelled), (1, 0));
    assert_eq!(calls.permitted, calls.completed + calls.panicked);
}

#[test]
fn an_async_call_to_a_full_aborting_pool_is_refused_when_made_and_frees_nothing_later() {
    let pool = ThreadPoolBulkhead::new("async-abort-when-made", &config(1, 1, 0));
    let gate = Gate::default();
    let busy = blocked_calls(&pool, &gate, [1]);
    wait_for_admitted(&pool, 1);
    // Refused (and counted) when the call is made, before any poll.
    let mut refused = pool.call_async(2u32, |i| async move { i });
    assert_eq!(pool.snapshot().calls.refused.full, 1);
    gate.open();
    for call in busy {
        assert_eq!(call.join().unwrap().unwrap(), 1);
    }
    // Room now, but the call was refused when made: it hands its input back.
    match poll_once(&mut refused) {
        Poll::Ready(Err(Refused {
            input: 2,
            error: BulkheadError::Full { .. },
        })) => {}
        other => panic!("expected the refusal made with the call, got {other:?}"),
    }
    drop(refused);
    let s = pool.snapshot();
    assert_eq!((s.calls.permitted, s.calls.refused.full), (1, 1));
    // A call made with room is admitted at its first poll, as before.
    assert_eq!(
        futures_executor::block_on(pool.call_async(3u32, |i| async move { i })).unwrap(),
        3
    );
    pool.shutdown(Duration::from_secs(10));
}

//! Every wait the config names is a bound: `max_queue_wait`, the call `timeout` on a
//! pool's `async` body that blocks, and `shutdown(timeout)` however many callers wait at
//! once. Deterministic: bodies block on gates, time moves only on a `ManualClock`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::task::Poll;
use std::thread;
use std::time::Duration;

use bulkhead_config_types::{
    BulkheadConfig, Duration as ConfigDuration, SemaphoreConfig, ThreadPoolConfig,
};
use bulkhead_core::{
    BulkheadError, BulkheadShutdown, Refused, Registry, SemaphoreBulkhead, SemaphoreShutdown,
    ShutdownReport, ThreadPoolBulkhead,
};
use support::{
    Gate, PanickingNow, WithPolicies, manual_clock, poll_once, pool_config, semaphore, wait_until,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------- max_queue_wait

#[test]
fn queued_callers_are_answered_at_max_queue_wait_while_the_body_is_stuck() {
    let (clock, shared_clock) = manual_clock();
    let config = ThreadPoolConfig {
        max_queue_wait: Some(ConfigDuration::from_millis(300)),
        ..pool_config(1, 1, 4)
    };
    let pool = ThreadPoolBulkhead::with_clock("p", &config, shared_clock);
    let gate = Gate::default();
    let stuck = {
        let (pool, gate) = (pool.clone(), gate.clone());
        thread::spawn(move || pool.call((), move |()| gate.wait()).map_err(|r| r.error))
    };
    wait_until(|| pool.snapshot().active == 1);
    let ran = Arc::new(AtomicU64::new(0));
    let sync_callers: Vec<_> = (0..2)
        .map(|i| {
            let (pool, ran) = (pool.clone(), Arc::clone(&ran));
            thread::spawn(move || {
                pool.call(i, |i| {
                    ran.fetch_add(1, SeqCst);
                    i
                })
            })
        })
        .collect();
    wait_until(|| pool.snapshot().queued == 2);
    let mut async_callers: Vec<_> = (2..4)
        .map(|i| {
            let ran = Arc::clone(&ran);
            pool.call_async(i, move |i| async move {
                ran.fetch_add(1, SeqCst);
                i
            })
        })
        .collect();
    for call in &mut async_callers {
        assert!(poll_once(call).is_pending());
    }
    // Each queued caller waits on the clock for its own deadline.
    clock.wait_for_sleepers(4);
    clock.advance(Duration::from_millis(299));
    assert_eq!(pool.snapshot().queued, 4, "not yet");
    clock.advance(Duration::from_millis(1));
    for (i, caller) in sync_callers.into_iter().enumerate() {
        match caller.join().unwrap() {
            Err(Refused {
                input,
                error: BulkheadError::QueueTimeout { waited, .. },
            }) => {
                assert_eq!(input, i as u32, "the input comes back");
                assert_eq!(waited, Duration::from_millis(300));
            }
            other => panic!("expected QueueTimeout, got {other:?}"),
        }
    }
    for (i, call) in async_callers.iter_mut().enumerate() {
        match poll_once(call) {
            Poll::Ready(Err(Refused {
                input,
                error: BulkheadError::QueueTimeout { .. },
            })) => assert_eq!(input, i as u32 + 2),
            other => panic!("expected QueueTimeout, got {other:?}"),
        }
    }
    let snapshot = pool.snapshot();
    assert_eq!(snapshot.queued, 0, "withdrawn tasks leave the queue");
    assert_eq!(snapshot.calls.refused.queue_timeout, 4);
    assert_eq!(snapshot.calls.cancelled, 4);
    // The body stays stuck for 2 s in all; a new call finds the queue's room again.
    clock.advance(Duration::from_millis(1_700));
    let later = {
        let (pool, ran) = (pool.clone(), Arc::clone(&ran));
        thread::spawn(move || {
            pool.call(9, |i| {
                ran.fetch_add(1, SeqCst);
                i
            })
        })
    };
    wait_until(|| pool.snapshot().queued == 1);
    gate.open();
    assert!(stuck.join().unwrap().is_ok());
    assert_eq!(later.join().unwrap().ok(), Some(9));
    assert_eq!(ran.load(SeqCst), 1, "no withdrawn task ever ran");
}

// ---------------------------------------------------------------- call timeout

#[test]
fn a_pool_async_body_that_blocks_is_answered_call_timeout_at_the_deadline() {
    let (clock, shared_clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("p", &pool_config(1, 1, 0), shared_clock)
        .with_policies(|c| c.timeout = Some(secs(1).into()));
    let gate = Gate::default();
    let caller = {
        let (pool, gate) = (pool.clone(), gate.clone());
        thread::spawn(move || {
            futures_executor::block_on(pool.call_async_timed((), move |()| async move {
                // Blocks its worker: never yields, so nothing on the worker can cut it.
                gate.wait();
                7
            }))
        })
    };
    // The caller's deadline and the worker's, both from when the worker started the body.
    clock.wait_for_sleepers(2);
    clock.advance(Duration::from_millis(999));
    assert!(!caller.is_finished());
    clock.advance(Duration::from_millis(1));
    match caller.join().unwrap() {
        Ok(Err(BulkheadError::CallTimeout { after, .. })) => assert_eq!(after, secs(1)),
        other => panic!("expected CallTimeout, got {other:?}"),
    }
    let snapshot = pool.snapshot();
    assert_eq!(snapshot.calls.timed_out, 1);
    assert_eq!(
        snapshot.active, 1,
        "the slot is held until the body returns"
    );
    // Stuck 2 s in all, then the body returns: its late result is discarded, the slot freed.
    clock.advance(secs(1));
    gate.open();
    wait_until(|| pool.snapshot().active == 0);
    let calls = pool.snapshot().calls;
    assert_eq!(
        (calls.discarded, calls.completed, calls.cancelled),
        (1, 1, 0)
    );
    assert_eq!(
        pool.call(1, |n| n + 1).ok(),
        Some(2),
        "the slot is free again"
    );
}

#[test]
fn a_pool_async_body_cut_at_its_deadline_is_counted_timed_out_and_cancelled() {
    let (clock, shared_clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("p", &pool_config(1, 1, 0), shared_clock)
        .with_policies(|c| c.timeout = Some(secs(1).into()));
    let caller = {
        let pool = pool.clone();
        thread::spawn(move || {
            futures_executor::block_on(
                pool.call_async_timed((), |()| std::future::pending::<u32>()),
            )
        })
    };
    clock.wait_for_sleepers(2);
    clock.advance(secs(1));
    assert!(matches!(
        caller.join().unwrap(),
        Ok(Err(BulkheadError::CallTimeout { .. }))
    ));
    wait_until(|| pool.snapshot().active == 0);
    let calls = pool.snapshot().calls;
    assert_eq!(
        (
            calls.timed_out,
            calls.cancelled,
            calls.completed,
            calls.discarded
        ),
        (1, 1, 0, 0)
    );
}

// ---------------------------------------------------------------- shutdown

/// `n` threads calling `shutdown(timeout)` on clones of one bulkhead at once.
fn concurrent_shutdowns<B: Clone + Send + 'static, R: Send + 'static>(
    bulkhead: &B,
    timeouts: &[Duration],
    shutdown: fn(&B, Duration) -> R,
) -> Vec<thread::JoinHandle<R>> {
    timeouts
        .iter()
        .map(|&timeout| {
            let bulkhead = bulkhead.clone();
            thread::spawn(move || shutdown(&bulkhead, timeout))
        })
        .collect()
}

fn semaphore_shutdown_callers_each_return_at_the_deadline_with_the_same_report(n: usize) {
    let (clock, shared_clock) = manual_clock();
    let sem = SemaphoreBulkhead::with_clock("s", &semaphore(1, 10_000), shared_clock);
    let held = sem.try_acquire().unwrap();
    // A waiter the shutdown refuses: every caller reports it.
    let waiter = {
        let sem = sem.clone();
        thread::spawn(move || sem.acquire().map(drop))
    };
    clock.wait_for_sleepers(1);
    let callers = concurrent_shutdowns(&sem, &vec![secs(1); n], SemaphoreBulkhead::shutdown);
    assert!(matches!(
        waiter.join().unwrap(),
        Err(BulkheadError::ShutDown { .. })
    ));
    // Every caller parks on the clock until its own deadline.
    clock.wait_for_sleepers(n);
    clock.advance(secs(1));
    let reports: Vec<SemaphoreShutdown> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(reports.len(), n);
    for report in &reports {
        assert_eq!((report.waiters_refused, report.still_running), (1, 1));
    }
    drop(held);
}

#[test]
fn two_semaphore_shutdown_callers_each_return_at_the_deadline_with_the_same_report() {
    semaphore_shutdown_callers_each_return_at_the_deadline_with_the_same_report(2);
}

#[test]
fn eight_semaphore_shutdown_callers_each_return_at_the_deadline_with_the_same_report() {
    semaphore_shutdown_callers_each_return_at_the_deadline_with_the_same_report(8);
}

#[test]
fn semaphore_shutdown_callers_all_return_when_the_last_call_ends() {
    let (clock, shared_clock) = manual_clock();
    let sem = SemaphoreBulkhead::with_clock("s", &semaphore(1, 0), shared_clock);
    let held = sem.try_acquire().unwrap();
    // One caller without a deadline (the old code left all but the latest caller parked).
    let callers = concurrent_shutdowns(
        &sem,
        &[Duration::MAX, secs(5), secs(5)],
        SemaphoreBulkhead::shutdown,
    );
    wait_until(|| clock.sleepers() == 2);
    // The deadline-free caller parks without the clock; give it time to register.
    wait_until(|| sem.is_shut_down());
    drop(held);
    for caller in callers {
        assert_eq!(caller.join().unwrap().still_running, 0);
    }
}

fn pool_shutdown_callers_each_return_at_the_deadline_with_the_same_report(n: usize) {
    let (clock, shared_clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("p", &pool_config(1, 1, 1), shared_clock);
    let gate = Gate::default();
    let running = {
        let (pool, gate) = (pool.clone(), gate.clone());
        thread::spawn(move || pool.call((), move |()| gate.wait()).map_err(|r| r.error))
    };
    wait_until(|| pool.snapshot().active == 1);
    let queued = {
        let pool = pool.clone();
        thread::spawn(move || pool.call((), |()| ()).map_err(|r| r.error))
    };
    wait_until(|| pool.snapshot().queued == 1);
    let callers = concurrent_shutdowns(&pool, &vec![secs(1); n], ThreadPoolBulkhead::shutdown);
    clock.wait_for_sleepers(n);
    clock.advance(secs(1));
    let reports: Vec<ShutdownReport> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(reports.len(), n);
    for report in &reports {
        assert_eq!(
            (
                report.completed,
                report.failed_queued,
                report.still_running,
                report.threads_joined
            ),
            (0, 1, 1, 0),
            "every caller reports the one shutdown"
        );
    }
    assert!(matches!(
        queued.join().unwrap(),
        Err(BulkheadError::ShutDown { .. })
    ));
    gate.open();
    assert!(running.join().unwrap().is_ok());
}

#[test]
fn two_pool_shutdown_callers_each_return_at_the_deadline_with_the_same_report() {
    pool_shutdown_callers_each_return_at_the_deadline_with_the_same_report(2);
}

#[test]
fn eight_pool_shutdown_callers_each_return_at_the_deadline_with_the_same_report() {
    pool_shutdown_callers_each_return_at_the_deadline_with_the_same_report(8);
}

#[test]
fn a_pool_shutdown_caller_with_a_later_deadline_returns_the_first_callers_report() {
    let (clock, shared_clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("p", &pool_config(1, 1, 0), shared_clock);
    let gate = Gate::default();
    let running = {
        let (pool, gate) = (pool.clone(), gate.clone());
        thread::spawn(move || pool.call((), move |()| gate.wait()).map_err(|r| r.error))
    };
    wait_until(|| pool.snapshot().active == 1);
    let early = concurrent_shutdowns(&pool, &[secs(1)], ThreadPoolBulkhead::shutdown);
    let late = concurrent_shutdowns(&pool, &[secs(60)], ThreadPoolBulkhead::shutdown);
    clock.wait_for_sleepers(2);
    clock.advance(secs(1));
    let first = early.into_iter().next().unwrap().join().unwrap();
    // The later caller is woken by the close and reports the same, long before its deadline.
    let second = late.into_iter().next().unwrap().join().unwrap();
    assert_eq!(first, second);
    assert_eq!(first.still_running, 1);
    gate.open();
    assert!(running.join().unwrap().is_ok());
}

fn registry_shutdown_callers_each_return_at_the_deadline_with_the_same_report(n: usize) {
    let (clock, shared_clock) = manual_clock();
    let registry = Registry::with_clock(shared_clock);
    let busy = registry
        .register("busy", &BulkheadConfig::semaphore(semaphore(1, 0)))
        .unwrap();
    registry
        .register("pool", &BulkheadConfig::thread_pool(pool_config(0, 1, 1)))
        .unwrap();
    let busy = busy.as_semaphore().unwrap().clone();
    let held = busy.try_acquire().unwrap();
    let registry = Arc::new(registry);
    let callers = concurrent_shutdowns(&registry, &vec![secs(1); n], |r, t| r.shutdown(t));
    // Each caller waits for the busy semaphore on the clock, until its own deadline.
    clock.wait_for_sleepers(n);
    clock.advance(secs(1));
    let reports: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(reports.len(), n);
    for report in &reports {
        assert_eq!(report.len(), 2, "{report:?}");
        assert!(
            matches!(&report["busy"], BulkheadShutdown::Semaphore(s) if s.still_running == 1),
            "{report:?}"
        );
        assert!(
            matches!(&report["pool"], BulkheadShutdown::ThreadPool(_)),
            "{report:?}"
        );
    }
    drop(held);
}

#[test]
fn two_registry_shutdown_callers_each_return_at_the_deadline_with_the_same_report() {
    registry_shutdown_callers_each_return_at_the_deadline_with_the_same_report(2);
}

#[test]
fn eight_registry_shutdown_callers_each_return_at_the_deadline_with_the_same_report() {
    registry_shutdown_callers_each_return_at_the_deadline_with_the_same_report(8);
}

/// Threads of this process right now (Linux).
fn process_threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

#[test]
fn registry_shutdown_of_100_000_bulkheads_waits_on_a_bounded_number_of_threads() {
    const BULKHEADS: usize = 100_000;
    const BUSY: usize = 20;
    let (clock, shared_clock) = manual_clock();
    let registry = Registry::with_clock(shared_clock);
    let semaphore_config = BulkheadConfig::semaphore(SemaphoreConfig {
        max_concurrent_calls: 1,
        ..SemaphoreConfig::default()
    });
    let pool = BulkheadConfig::thread_pool(pool_config(0, 1, 1));
    let mut held = Vec::new();
    for i in 0..BULKHEADS {
        let config = if i % 2 == 0 { &semaphore_config } else { &pool };
        let bulkhead = registry.register(&format!("b{i}"), config).unwrap();
        if i % 2 == 0 && held.len() < BUSY {
            // Busy semaphores: their shutdown waits for the deadline.
            held.push(bulkhead.as_semaphore().unwrap().clone());
        }
    }
    let permits: Vec<_> = held.iter().map(|s| s.try_acquire().unwrap()).collect();
    let before = process_threads();
    let shutdown = {
        let registry = Arc::new(registry);
        let waiting = Arc::clone(&registry);
        (
            registry,
            thread::spawn(move || waiting.shutdown(Duration::from_secs(2))),
        )
    };
    // Eight threads at most wait (one per busy bulkhead at a time), each parked on the clock.
    clock.wait_for_sleepers(8);
    let during = process_threads();
    assert!(
        during <= before + 8,
        "{during} threads while shutting down, {before} before"
    );
    assert_eq!(clock.sleepers(), 8, "the others wait for a thread");
    clock.advance(Duration::from_secs(2));
    let reports = shutdown.1.join().unwrap();
    assert_eq!(reports.len(), BULKHEADS);
    let busy = reports
        .values()
        .filter(|r| matches!(r, BulkheadShutdown::Semaphore(s) if s.still_running == 1))
        .count();
    assert_eq!(busy, BUSY);
    let registry = shutdown.0;
    let all_shut = registry
        .names()
        .iter()
        .all(|name| match registry.get(name) {
            Some(bulkhead_core::Bulkhead::Semaphore(s)) => s.is_shut_down(),
            Some(bulkhead_core::Bulkhead::ThreadPool(p)) => p.is_shut_down(),
            _ => false,
        });
    assert!(all_shut, "every bulkhead stopped admission");
    drop(permits);
}

#[test]
fn concurrent_registry_shutdowns_share_the_helper_threads() {
    const CALLERS: usize = 4;
    const BUSY: usize = 40;
    let (clock, shared_clock) = manual_clock();
    let registry = Registry::with_clock(shared_clock);
    let config = BulkheadConfig::semaphore(semaphore(1, 0));
    let busy: Vec<_> = (0..1000)
        .map(|i| registry.register(&format!("s{i}"), &config).unwrap())
        .step_by(1000 / BUSY)
        .map(|b| b.as_semaphore().unwrap().clone())
        .collect();
    let permits: Vec<_> = busy.iter().map(|s| s.try_acquire().unwrap()).collect();
    let registry = Arc::new(registry);
    let callers = concurrent_shutdowns(&registry, &[secs(2); CALLERS], |r, t| r.shutdown(t));
    // Every caller's thread and the seven helpers between them park on a busy semaphore
    // (with seven helpers each, 32 threads would).
    clock.wait_for_sleepers(CALLERS + 7);
    thread::sleep(Duration::from_millis(50)); // time for any further thread to park
    assert_eq!(
        clock.sleepers(),
        CALLERS + 7,
        "no caller has helpers of its own"
    );
    clock.advance(secs(2));
    for caller in callers {
        let report = caller.join().unwrap();
        assert_eq!(report.len(), 1000);
        let still_running = report
            .values()
            .filter(|r| matches!(r, BulkheadShutdown::Semaphore(s) if s.still_running == 1))
            .count();
        assert_eq!(still_running, BUSY);
    }
    drop(permits);
}

// ---------------------------------------------------------------- hostile clocks

/// A clock whose parking panics (a bug in a user's `Clock`): time comes from a manual one.
#[derive(Debug)]
struct PanickingPark(bulkhead_core::ManualClock);

impl bulkhead_core::Clock for PanickingPark {
    fn now(&self) -> std::time::Instant {
        self.0.now()
    }
    fn park_until(&self, _deadline: std::time::Instant) {
        panic!("a hostile clock");
    }
    fn sleep_until(&self, deadline: std::time::Instant) -> bulkhead_core::Sleep {
        self.0.sleep_until(deadline)
    }
}

#[test]
fn a_waiter_unwinding_out_of_its_wait_leaves_the_queue_and_swallows_no_permit() {
    let clock: Arc<dyn bulkhead_core::Clock> =
        Arc::new(PanickingPark(bulkhead_core::ManualClock::new()));
    let sem = SemaphoreBulkhead::with_clock("hostile", &semaphore(1, 1_000), clock);
    let held = sem.try_acquire().unwrap();
    let waiter = {
        let sem = sem.clone();
        thread::spawn(move || sem.acquire().map(drop))
    };
    assert!(
        waiter.join().is_err(),
        "the clock's panic reached the waiter"
    );
    assert_eq!(sem.snapshot().waiting, 0, "it left the queue");
    drop(held);
    assert_eq!(sem.available(), 1);
    assert!(
        sem.try_acquire().is_ok(),
        "the released permit went to nobody"
    );
}

#[test]
fn an_async_waiter_whose_clock_panics_after_its_grant_passes_the_permit_on() {
    let clock = Arc::new(PanickingNow::default());
    let shared: Arc<dyn bulkhead_core::Clock> = clock.clone();
    let sem = SemaphoreBulkhead::with_clock("hostile-async", &semaphore(1, 1_000), shared);
    // The permit is held on another thread (on this one, a further acquire would be
    // re-entrant).
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (taken, is_taken) = std::sync::mpsc::channel::<()>();
    let holder = {
        let sem = sem.clone();
        thread::spawn(move || {
            let held = sem.try_acquire().unwrap();
            taken.send(()).unwrap();
            released.recv().unwrap();
            drop(held);
        })
    };
    is_taken.recv().unwrap();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut waiting = Box::pin(sem.acquire_async());
    assert!(waiting.as_mut().poll(&mut cx).is_pending(), "queued");
    assert_eq!(sem.snapshot().waiting, 1);
    release.send(()).unwrap();
    holder.join().unwrap(); // its permit was granted to the waiter
    clock.arm();
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        waiting.as_mut().poll(&mut cx).is_ready()
    }));
    assert!(polled.is_err(), "the clock's panic reached the poll");
    drop(waiting);
    clock.disarm();
    assert_eq!(sem.snapshot().waiting, 0);
    assert_eq!(sem.available(), 1, "the granted permit was passed on");
    assert!(sem.try_acquire().is_ok());
}

#[test]
fn a_max_wait_too_long_for_an_instant_waits_without_overflowing() {
    let (clock, shared_clock) = manual_clock();
    let config = SemaphoreConfig {
        max_concurrent_calls: 1,
        max_wait: ConfigDuration::from_secs(u64::MAX),
        fair: true,
    };
    let sem = SemaphoreBulkhead::with_clock("forever", &config, shared_clock);
    let held = sem.try_acquire().unwrap();
    let waiter = {
        let sem = sem.clone();
        thread::spawn(move || sem.acquire().map(drop))
    };
    wait_until(|| sem.snapshot().waiting == 1);
    clock.advance(Duration::from_secs(1_000_000));
    drop(held);
    assert!(
        waiter.join().unwrap().is_ok(),
        "granted the released permit"
    );
}

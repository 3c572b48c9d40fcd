//! Deterministic tests of the pool's private life cycle, with a hook inside `spawn_worker`.

use std::cell::RefCell;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::time::Duration;

use bulkhead_config_types::ThreadPoolConfig;

use super::shared::Shared;
use crate::ThreadPoolBulkhead;
use crate::sync::Arc;

type Hook = Box<dyn FnMut(&Shared)>;

thread_local! {
    /// Run by `spawn_worker` on the spawning thread, after `spawn` returned and before the
    /// join handle is recorded.
    static AFTER_SPAWN: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

thread_local! {
    /// When set, `spawn_worker` on this thread fails as if the OS refused a thread.
    static SPAWN_FAILS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(super) fn spawn_fails() -> bool {
    SPAWN_FAILS.with(std::cell::Cell::get)
}

/// A worker that cannot start (the OS refuses a thread) fails the call it was spawned
/// for with `Full` and gives the input back, never hangs; the call counts as permitted and
/// cancelled, and no phantom thread is counted.
#[test]
fn a_worker_that_cannot_start_refuses_the_call_with_its_input() {
    let config = ThreadPoolConfig {
        core_threads: 1,
        max_threads: 1,
        queue_capacity: 4,
        ..ThreadPoolConfig::default()
    };
    let pool = ThreadPoolBulkhead::new("no-threads", &config);
    SPAWN_FAILS.with(|f| f.set(true));
    let refused = pool.call(3u32, |i| i).unwrap_err();
    SPAWN_FAILS.with(|f| f.set(false));
    assert_eq!(refused.input, 3);
    assert!(matches!(refused.error, crate::BulkheadError::Full { .. }));
    let snap = pool.snapshot();
    assert_eq!((snap.active, snap.queued, snap.pool_size), (0, 0, Some(0)));
    assert_eq!(snap.calls.permitted, snap.calls.cancelled);
    // The next call starts a worker and runs.
    assert_eq!(pool.call(4u32, |i| i + 1).ok(), Some(5));
}

pub(super) fn after_spawn(shared: &Shared) {
    let hook = AFTER_SPAWN.with(|h| h.borrow_mut().take());
    if let Some(mut hook) = hook {
        hook(shared);
    }
}

/// A shutdown that runs while a just-started worker's handle is not yet recorded (the
/// worker has run its task and exited) must still join it, not see `threads == 0`, take the
/// handles without this one and report `threads_joined: 0`.
#[test]
fn shutdown_in_the_spawn_window_joins_the_new_worker() {
    let config = ThreadPoolConfig {
        core_threads: 0,
        max_threads: 1,
        queue_capacity: 0,
        ..ThreadPoolConfig::default()
    };
    let pool = ThreadPoolBulkhead::new("spawn-window", &config);
    let shutdown_returned = Arc::new(AtomicBool::new(false));
    let (spawned_tx, spawned_rx) = mpsc::channel::<()>();
    let caller = {
        let (pool, shutdown_returned) = (pool.clone(), Arc::clone(&shutdown_returned));
        std::thread::spawn(move || {
            AFTER_SPAWN.with(|h| {
                *h.borrow_mut() = Some(Box::new(move |shared: &Shared| {
                    let _ = spawned_tx.send(());
                    // Hold the window open until the shutdown has either returned (the bug)
                    // or is waiting with no thread alive (waiting for this handle).
                    loop {
                        if shutdown_returned.load(SeqCst) {
                            break;
                        }
                        {
                            let st = shared.lock_state();
                            if st.threads == 0 && !st.shutdown_waiters.is_empty() {
                                break;
                            }
                        }
                        std::thread::yield_now();
                    }
                }));
            });
            pool.call(7u32, |i| i).map_err(|r| r.error)
        })
    };
    spawned_rx.recv().unwrap();
    let report = pool.shutdown(Duration::from_secs(30));
    shutdown_returned.store(true, SeqCst);
    assert_eq!(caller.join().unwrap().unwrap(), 7);
    assert_eq!(report.threads_joined, 1, "{report:?}");
    assert_eq!(report.still_running, 0, "{report:?}");
}

/// Polls `done` until it holds, yielding in between (no timing assumption: a hang is a
/// test timeout, not a wrong answer).
fn wait_until(mut done: impl FnMut() -> bool) {
    while !done() {
        std::thread::yield_now();
    }
}

/// A call admitted while the pool still has a surplus idle thread (above a shrunk
/// `max_threads`, not yet retired) is queued for it and runs, never failed with `Full`
/// after admission as if the queue (of 0) were over capacity. The shrink is applied to the state without waking the idle
/// workers, which holds the pool in that window for as long as the test needs.
#[test]
fn a_call_admitted_while_a_surplus_thread_is_idle_runs() {
    let config = |max_threads| ThreadPoolConfig {
        core_threads: max_threads,
        max_threads,
        queue_capacity: 0,
        ..ThreadPoolConfig::default()
    };
    for round in 0..20 {
        let pool = ThreadPoolBulkhead::new("surplus-idle", &config(2));
        // Two workers, both idle: start two calls that meet, so both threads exist.
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let warm: Vec<_> = (0..2)
            .map(|_| {
                let (pool, barrier) = (pool.clone(), Arc::clone(&barrier));
                std::thread::spawn(move || pool.call((), |()| barrier.wait()).is_ok())
            })
            .collect();
        assert!(warm.into_iter().all(|t| t.join().unwrap()));
        let shared = pool.shared();
        wait_until(|| shared.lock_state().idle.len() == 2);
        // Shrink to one thread and no queue, as `resize` does, minus the wake-up.
        {
            let mut st = shared.lock_state();
            st.max = 1;
            st.core = 1;
            shared.limit.store(1, SeqCst);
        }
        let result = pool.call(round, |n| n + 1).map_err(|r| r.error);
        assert_eq!(result.ok(), Some(round + 1), "round {round}");
        let c = shared.counters.counts();
        assert_eq!((c.cancelled, c.refused.full), (0, 0), "{c:?}");
        // The surplus thread retired; the one left is idle.
        wait_until(|| {
            let st = shared.lock_state();
            st.threads == 1 && st.idle.len() == 1
        });
        pool.shutdown(Duration::from_secs(30));
    }
}

/// A refusal's load counts the workers claimed for queued tasks (spawned or woken, not yet
/// started) as busy: the pool has grown to `max_threads` even while two of its six workers
/// are starting. The window is held by setting the claim under the lock, which is what
/// `enqueue` does before the worker runs.
#[test]
fn a_refusal_counts_workers_claimed_for_queued_tasks_as_busy() {
    let config = ThreadPoolConfig {
        core_threads: 4,
        max_threads: 6,
        queue_capacity: 30,
        ..ThreadPoolConfig::default()
    };
    let pool = ThreadPoolBulkhead::new("claimed", &config);
    let shared = pool.shared();
    let mut st = shared.lock_state();
    // Four workers running, two spawned for queued tasks and not yet started.
    st.threads = 6;
    st.active = 4;
    st.pending = 2;
    let load = super::shared::refusal_load(&st, &shared.settled);
    assert_eq!((load.active, load.limit), (6, 6));
    st.threads = 0;
    st.active = 0;
    st.pending = 0;
    drop(st);
    pool.shutdown(Duration::from_secs(30));
}

/// A caller answered by a busy pool (every worker busy, at `max_threads`, plain FIFO, so the
/// worker takes and settles tasks without the lock) reads its call as finished — nothing
/// running, nothing queued — although the worker that ran it may still be counted in
/// `active` while it watches the inbox: a settled worker never reads as running. Where the
/// worker is when the caller looks is a race, so in a loop.
#[test]
fn a_caller_answered_by_a_busy_pool_sees_nothing_running() {
    let config = ThreadPoolConfig {
        core_threads: 1,
        max_threads: 1,
        queue_capacity: 4,
        ..ThreadPoolConfig::default()
    };
    let pool = ThreadPoolBulkhead::new("settled", &config);
    let shared = pool.shared();
    for round in 0..200u32 {
        // The worker busy on a task held by a latch, a second call queued behind it.
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let held = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                pool.call((), move |()| {
                    started_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                })
            })
        };
        started_rx.recv().unwrap();
        let queued = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.call(round, |n| n + 1).ok())
        };
        // Queued without the lock, for a worker that takes without it.
        wait_until(|| !shared.inbox.is_empty());
        assert!(shared.take_free.load(SeqCst), "round {round}");
        release_tx.send(()).unwrap();
        held.join().unwrap().unwrap();
        assert_eq!(queued.join().unwrap(), Some(round + 1));
        let snap = pool.snapshot();
        assert_eq!(
            (snap.active, snap.queued),
            (0, 0),
            "round {round}: {snap:?}"
        );
    }
    pool.shutdown(Duration::from_secs(30));
}

//! loom models of the pool's admission and queue: the running + queued counter, the room
//! waiters of `on_full: { wait }`, the queue bound after a shrink, cancellation, timeouts,
//! shutdown, a task queued without the lock (the inbox) racing the last busy worker going
//! idle, a worker that settled its task without the lock racing a caller's lock-free
//! enqueue and a snapshot, an async caller's lock-free re-poll racing the delivery of its outcome, a queued
//! task withdrawn at `max_queue_wait` racing the worker that takes it, a partition's and
//! a key's shares handed on to the pool's slot racing a freed one, and the async job's
//! state word (the caller going away racing the run, a failure racing a run), over every
//! interleaving (up to `LOOM_MAX_PREEMPTIONS`, default 2). The job's cells are loom's
//! `UnsafeCell` there, so a use of one by two sides at once fails the model.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p bulkheads-core
//! --release --lib thread_pool::loom_tests` (a child module of `thread_pool`, for the pool's
//! private state).
//!
//! The real code runs: `ThreadPoolBulkhead::call_async` (admission, waiting for room with a
//! loom-aware waker, submission, cancellation on drop), `resize`, `shutdown`. What loom
//! cannot run is a worker thread (it parks through the OS), so the pool is built with its
//! `max_threads` already counted as started, and the model plays the worker with
//! [`work_one`], the same steps a worker (`worker`) takes around a task. Time is a [`ModelClock`]
//! whose deadlines all pass when a model thread fires it.
//!
//! loom treats `SeqCst` accesses as `AcqRel` (its documented limit). The room waiters rely
//! on a store-load pair in the single `SeqCst` order (a waiter bumps `count` then reads
//! `admitted`; a releaser lowers `admitted` then reads `count`); without a fence loom reports
//! lost wake-ups there that the real memory model rules out, so `room` calls
//! `sync::seq_cst_fence_for_loom` (a no-op outside loom) between the two.

use std::future::Future;
use std::sync::atomic::Ordering::SeqCst;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bulkhead_config_types::{OnFull, ThreadPoolConfig};
use loom::sync::atomic::AtomicBool;

#[path = "../../tests/support/loom_model.rs"]
mod loom_model;

use loom_model::{ModelClock, block_on, model};

use super::ThreadPoolBulkhead;
use super::queue::Taken;
use super::worker::Step;
use crate::clock::{Clock, Sleep};
use crate::{BulkheadError, Refused};

/// A pool of `max` threads (counted as started and busy: the model plays the worker) and a
/// queue of `queue`, doing `on_full` when the queue is full.
fn pool(max: u32, queue: u32, on_full: OnFull, clock: &ModelClock) -> ThreadPoolBulkhead {
    let config = ThreadPoolConfig {
        core_threads: max,
        max_threads: max,
        queue_capacity: queue,
        on_full,
        ..ThreadPoolConfig::default()
    };
    let pool = ThreadPoolBulkhead::with_clock("model", &config, std::sync::Arc::new(clock.clone()));
    // The threads count as started and busy, each with a task holding its slot, so every
    // admitted task is queued for the model's worker and admission is left the queue's.
    let shared = pool.shared();
    let mut st = shared.lock_state();
    st.threads = max;
    st.active = max;
    drop(st);
    shared.admitted.store(u64::from(max), SeqCst);
    pool
}

/// The slots held by the busy threads' tasks (see [`pool`]), which never finish.
fn busy(pool: &ThreadPoolBulkhead) -> u64 {
    u64::from(pool.shared().lock_state().threads)
}

fn wait(ms: u64) -> OnFull {
    OnFull::Wait(bulkhead_config_types::Duration::from_millis(ms))
}

/// One step of a worker: takes the next queued task, runs it, frees its slot, counts it,
/// wakes its caller and one caller waiting for room — a worker's steps around a task.
/// Returns false when the queue was empty.
fn work_one(pool: &ThreadPoolBulkhead) -> bool {
    let shared = pool.shared();
    let taken = {
        let mut st = shared.lock_state();
        let policy = st.policy;
        let taken = st.queue.take(&policy, || shared.clock.now());
        if matches!(taken, Some(Taken::Run(_))) {
            st.active += 1;
        }
        taken
    };
    match taken {
        None => false,
        Some(Taken::Stale(entry, waited)) => {
            let name = shared.name.clone();
            shared.fail_admitted(entry.job, BulkheadError::QueueTimeout { name, waited });
            true
        }
        Some(Taken::Run(entry)) => {
            run_taken_entry(pool, entry);
            true
        }
    }
}

/// Admitted calls are all over and counted once; no slot is held; nobody waits for room.
fn assert_at_rest(pool: &ThreadPoolBulkhead) {
    let shared = pool.shared();
    assert_eq!(shared.admitted.load(SeqCst), busy(pool), "a slot was lost");
    assert_eq!(shared.room.len(), 0, "a room waiter was left behind");
    assert_eq!(shared.lock_state().queue.len(), 0);
    let c = shared.counters.counts();
    assert_eq!(c.permitted, c.completed + c.panicked + c.cancelled, "{c:?}");
}

/// Submits a call whose body returns `n`, checking the running + queued bound on admission.
async fn submit(pool: &ThreadPoolBulkhead, n: u32) -> Result<u32, Refused<u32>> {
    let shared = pool.shared();
    let admitted = pool.call_async(n, |n| async move { n });
    let limit = shared.limit.load(SeqCst);
    let result = admitted.await;
    assert!(
        shared.admitted.load(SeqCst) <= limit,
        "running + queued above the limit"
    );
    result
}

#[test]
fn a_freed_slot_wakes_a_caller_waiting_for_room() {
    model(|| {
        let clock = ModelClock::new();
        // One thread (busy: the model is the worker) and one queue slot.
        let pool = pool(1, 1, wait(100), &clock);
        let first = loom::thread::spawn({
            let pool = pool.clone();
            move || block_on(submit(&pool, 1))
        });
        let second = loom::thread::spawn({
            let pool = pool.clone();
            move || block_on(submit(&pool, 2))
        });
        // Run tasks until both callers are served; a lost wake-up is a loom deadlock.
        let mut done = 0;
        while done < 2 {
            if work_one(&pool) {
                done += 1;
            } else {
                loom::thread::yield_now();
            }
        }
        assert_eq!(first.join().unwrap().unwrap(), 1);
        assert_eq!(second.join().unwrap().unwrap(), 2);
        assert_at_rest(&pool);
    });
}

/// Admits and queues one call for the model's worker, and lets its caller go without
/// cancelling it (the model only needs the slot taken).
fn take_the_slot(pool: &ThreadPoolBulkhead) {
    let mut call = Box::pin(pool.call_async(0u32, |n| async move { n }));
    let polled = call.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(polled.is_pending(), "queued for the (model) worker");
    std::mem::forget(call);
}

#[test]
fn a_room_waiter_that_gives_up_passes_its_wake_up_on() {
    model(|| {
        let clock = ModelClock::new();
        let pool = pool(1, 1, wait(100), &clock);
        take_the_slot(&pool);
        // One caller waits for room and then gives up (its future is dropped) while the
        // slot frees: if the release woke it, it must pass the wake-up to the next waiter.
        let quitter = loom::thread::spawn({
            let pool = pool.clone();
            move || {
                let mut call = Box::pin(pool.call_async(1u32, |n| async move { n }));
                let _ = call.as_mut().poll(&mut Context::from_waker(Waker::noop()));
                drop(call);
            }
        });
        let answered = std::sync::Arc::new(AtomicBool::new(false));
        let patient = loom::thread::spawn({
            let (pool, answered) = (pool.clone(), answered.clone());
            move || {
                let result = block_on(submit(&pool, 2));
                answered.store(true, SeqCst);
                result
            }
        });
        // The worker: runs whatever is queued until the patient caller has its answer.
        while !answered.load(SeqCst) {
            if !work_one(&pool) {
                loom::thread::yield_now();
            }
        }
        quitter.join().unwrap();
        assert_eq!(patient.join().unwrap().unwrap(), 2);
        while work_one(&pool) {}
        assert_at_rest(&pool);
    });
}

/// `call` on a thread of its own while another fires the clock and this one plays the
/// worker until the call is answered; the answer. `call` is also handed the flag set once
/// it is answered (set right after it returns), for a body that checks it never runs late.
fn answered_while_the_clock_fires<R: Send + 'static>(
    pool: &ThreadPoolBulkhead,
    clock: &ModelClock,
    call: impl FnOnce(&ThreadPoolBulkhead, std::sync::Arc<AtomicBool>) -> R + Send + 'static,
) -> R {
    let answered = std::sync::Arc::new(AtomicBool::new(false));
    let caller = loom::thread::spawn({
        let (pool, answered) = (pool.clone(), answered.clone());
        move || {
            let result = call(&pool, answered.clone());
            answered.store(true, SeqCst);
            result
        }
    });
    let timer = loom::thread::spawn({
        let clock = clock.clone();
        move || clock.fire()
    });
    while !answered.load(SeqCst) {
        if !work_one(pool) {
            loom::thread::yield_now();
        }
    }
    timer.join().unwrap();
    caller.join().unwrap()
}

#[test]
fn a_room_wait_timing_out_racing_a_freed_slot_is_answered_once() {
    model(|| {
        let clock = ModelClock::new();
        let pool = pool(1, 1, wait(100), &clock);
        take_the_slot(&pool);
        let answer =
            answered_while_the_clock_fires(&pool, &clock, |pool, _| block_on(submit(pool, 2)));
        match answer {
            Ok(n) => assert_eq!(n, 2),
            Err(Refused { input, error }) => {
                assert_eq!(input, 2);
                assert!(matches!(error, BulkheadError::Timeout { .. }), "{error:?}");
            }
        }
        while work_one(&pool) {}
        assert_at_rest(&pool);
    });
}

#[test]
fn a_shrink_racing_admission_never_fails_admitted_work_nor_queues_later_calls() {
    model(|| {
        let clock = ModelClock::new();
        // One (busy) thread, a queue of 2; shrunk to a queue of 0 while two callers submit.
        let pool = pool(1, 2, OnFull::Abort, &clock);
        let resized = std::sync::Arc::new(AtomicBool::new(false));
        let callers: Vec<_> = (0..2)
            .map(|n| {
                let (pool, resized) = (pool.clone(), resized.clone());
                loom::thread::spawn(move || {
                    let after_resize = resized.load(SeqCst);
                    let mut call = Box::pin(pool.call_async(n, |n| async move { n }));
                    let polled = call.as_mut().poll(&mut Context::from_waker(Waker::noop()));
                    if let Poll::Ready(Err(refused)) = &polled {
                        assert!(matches!(refused.error, BulkheadError::Full { .. }));
                    }
                    (after_resize, polled.is_pending(), call)
                })
            })
            .collect();
        pool.resize(&ThreadPoolConfig {
            core_threads: 1,
            max_threads: 1,
            queue_capacity: 0,
            ..ThreadPoolConfig::default()
        });
        resized.store(true, SeqCst);
        let outcomes: Vec<_> = callers.into_iter().map(|t| t.join().unwrap()).collect();
        // With the one thread busy and no queue left, a call made after the shrink is
        // refused at the door; a call admitted before it stays queued, within the old
        // bound (a shrink never cancels admitted work).
        for (after_resize, queued, _) in &outcomes {
            assert!(
                !(*after_resize && *queued),
                "queued beyond the shrunk queue"
            );
        }
        let shared = pool.shared();
        let queued = shared.lock_state().queue.len();
        assert_eq!(
            queued,
            outcomes.iter().filter(|(_, queued, _)| *queued).count()
        );
        assert_eq!(shared.admitted.load(SeqCst), busy(&pool) + queued as u64);
        let c = shared.counters.counts();
        assert_eq!(c.cancelled, 0, "an admitted call was failed: {c:?}");
        assert_eq!(c.refused.full as usize, 2 - queued, "{c:?}");
        // The queued calls run, each once, and their callers get their results.
        while work_one(&pool) {}
        for (n, (_, queued, mut call)) in (0u32..).zip(outcomes) {
            if queued {
                let polled = call.as_mut().poll(&mut Context::from_waker(Waker::noop()));
                assert!(matches!(polled, Poll::Ready(Ok(m)) if m == n), "{polled:?}");
            }
        }
        assert_at_rest(&pool);
    });
}

#[test]
fn shutdown_during_admission_runs_or_refuses_each_call_exactly_once() {
    model(|| {
        let clock = ModelClock::new();
        let pool = pool(1, 1, OnFull::Abort, &clock);
        let caller = loom::thread::spawn({
            let pool = pool.clone();
            move || block_on(pool.call_async(7u32, |n| async move { n }))
        });
        let report = pool.shutdown(Duration::ZERO);
        // Whatever was queued at the shutdown was failed by it; a call admitted later is
        // failed by `enqueue`. Either way the caller gets exactly one answer.
        match caller.join().unwrap() {
            Ok(_) => panic!("nothing runs the queue after shutdown"),
            Err(Refused { input, error }) => {
                assert_eq!(input, 7);
                assert!(matches!(error, BulkheadError::ShutDown { .. }), "{error:?}");
            }
        }
        assert!(report.failed_queued <= 1);
        assert!(!work_one(&pool), "the queue is empty");
        assert_at_rest(&pool);
        let c = pool.shared().counters.counts();
        assert_eq!(c.refused.shut_down, 1, "{c:?}");
    });
}

#[test]
fn a_task_queued_without_the_lock_as_the_last_worker_goes_idle_is_never_left_behind() {
    model(|| {
        let clock = ModelClock::new();
        // One thread, busy: `direct` is set, so the caller queues into the inbox without
        // the lock, while the worker finishes its task and (finding nothing) goes idle.
        let pool = pool(1, 1, OnFull::Abort, &clock);
        let shared = pool.shared();
        assert!(shared.direct.load(SeqCst));
        let caller = caller_of_five(&pool);
        // The worker, as `worker_main` does it: its task ends (slot freed), it looks at the
        // queue, and, finding nothing, registers idle and looks at the inbox once more.
        let me = std::thread::current();
        let mut st = shared.lock_state_for_worker();
        st.active -= 1;
        shared.release();
        let step = shared.next_step(&mut st, 1, None, &me);
        drop(st);
        let parks = match step {
            Step::Run(entry, _) => {
                run_taken_entry(&pool, entry);
                false
            }
            Step::Park { .. } => !shared.inbox_has_work_after_idle(),
            Step::FailStale(..) | Step::Retire(_) => panic!("nothing stale, nothing surplus"),
        };
        let call = caller.join().unwrap();
        {
            // Whoever moved the task out of the inbox claimed the idle worker for it: a
            // snapshot never counts a task queued beside an idle worker.
            let st = shared.lock_state();
            assert!(
                st.idle.is_empty() || st.unassigned() == 0,
                "a task counted queued while a worker is idle"
            );
            if parks {
                // It would sleep: the caller must have seen it idle and claimed it.
                assert!(
                    st.idle.is_empty() && st.pending == 1,
                    "a task left without a worker"
                );
            }
        }
        while work_one(&pool) {}
        if let Some(call) = call {
            assert_answered_five(call);
        }
        let c = shared.counters.counts();
        assert_eq!(c.permitted, c.completed, "{c:?}");
    });
}

/// A call left pending by [`caller_of_five`].
type PendingCall = std::pin::Pin<Box<dyn Future<Output = Result<u32, Refused<u32>>> + Send>>;

/// A model thread that submits a call whose body returns 5 and polls it once: its pending
/// future, or `None` when it was answered at once (a worker took it and ran it meanwhile).
fn caller_of_five(pool: &ThreadPoolBulkhead) -> loom::thread::JoinHandle<Option<PendingCall>> {
    let pool = pool.clone();
    loom::thread::spawn(move || {
        let mut call: PendingCall = Box::pin(pool.call_async(5u32, |n| async move { n }));
        match call.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Pending => Some(call),
            Poll::Ready(result) => {
                assert_eq!(result.ok(), Some(5));
                None
            }
        }
    })
}

/// Polls a call [`caller_of_five`] left pending, once its task has run: answered 5.
fn assert_answered_five(mut call: PendingCall) {
    let polled = call.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(matches!(polled, Poll::Ready(Ok(5))), "{polled:?}");
}

/// Runs a task a model worker took and delivers it, as `work_one` does.
fn run_taken_entry(pool: &ThreadPoolBulkhead, entry: super::queue::Entry) {
    let shared = pool.shared();
    let (outcome, finished) = entry.job.run();
    {
        let mut st = shared.lock_state();
        st.active -= 1;
        shared.release();
        shared.count(outcome);
    }
    finished.deliver();
    shared.room.wake_one();
}

/// The async caller's poll that skips the job's lock (same waker as last time, `delivered`
/// not set) racing the worker that runs the job and delivers its outcome: the caller is
/// always woken and gets the outcome once (a lost wake-up would leave `block_on` waiting
/// for ever, which loom reports).
#[test]
fn an_async_caller_polling_without_the_job_lock_is_woken_by_the_delivery() {
    use super::async_job::AsyncTask;
    use super::job::Outcome;

    model(|| {
        let (job, task) = AsyncTask::job(20, |n: u64| async move { n + 1 });
        let worker = loom::thread::spawn(move || {
            assert_eq!(job.run(), crate::events::CallOutcome::Completed);
            job.deliver();
        });
        let mut polls = 0;
        let outcome = block_on(std::future::poll_fn(|cx| {
            polls += 1;
            task.poll_outcome(cx)
        }));
        assert!(matches!(outcome, Outcome::Ran(21)));
        assert!(polls >= 1);
        worker.join().unwrap();
    });
}

/// The delivery takes the caller's waker once `READY` is published, drops the pool's
/// handle, and only then wakes: a caller that polls again with another waker (a new
/// registration) racing it is still woken, and gets the outcome once (a lost wake-up would
/// leave `block_on` waiting for ever, which loom reports).
#[test]
fn an_async_caller_changing_its_waker_racing_the_delivery_is_woken() {
    use super::async_job::AsyncTask;
    use super::job::Outcome;

    model(|| {
        let (job, task) = AsyncTask::job(20, |n: u64| async move { n + 1 });
        // Before the worker starts: pending, leaving a waker that does nothing.
        let first = task.poll_outcome(&mut Context::from_waker(Waker::noop()));
        assert!(first.is_pending());
        let worker = loom::thread::spawn(move || {
            assert_eq!(job.run(), crate::events::CallOutcome::Completed);
            job.deliver();
        });
        let outcome = block_on(std::future::poll_fn(|cx| task.poll_outcome(cx)));
        assert!(matches!(outcome, Outcome::Ran(21)));
        drop(task);
        worker.join().unwrap();
    });
}

/// A queued caller withdrawing its task at `max_queue_wait` (the clock fired by another
/// thread) racing the worker that takes it: the task runs or is failed with
/// `QueueTimeout`, never both, its body never runs after the caller was answered, and the
/// slot is given back exactly once.
#[test]
fn a_queued_task_withdrawn_at_its_deadline_racing_a_worker_runs_or_fails_once() {
    model(|| {
        let clock = ModelClock::new();
        let pool = pool(1, 1, OnFull::Abort, &clock);
        let config = ThreadPoolConfig {
            max_queue_wait: Some(bulkhead_config_types::Duration::from_millis(10)),
            ..ThreadPoolConfig::default()
        };
        pool.shared().store_max_queue_wait(&config);
        pool.shared().lock_state().policy = super::queue::QueuePolicy::from_config(&config);
        let ran = std::sync::Arc::new(AtomicBool::new(false));
        let answer = answered_while_the_clock_fires(&pool, &clock, {
            let ran = ran.clone();
            move |pool, seen| {
                block_on(pool.call_async(3u32, move |n| async move {
                    assert!(
                        !seen.load(SeqCst),
                        "the body ran after its caller was answered"
                    );
                    ran.store(true, SeqCst);
                    n
                }))
            }
        });
        match answer {
            Ok(n) => {
                assert_eq!(n, 3);
                assert!(ran.load(SeqCst));
            }
            Err(Refused { input, error }) => {
                assert_eq!(input, 3);
                assert!(
                    matches!(error, BulkheadError::QueueTimeout { .. }),
                    "{error:?}"
                );
            }
        }
        while work_one(&pool) {}
        let c = pool.shared().counters.counts();
        if ran.load(SeqCst) {
            assert_eq!(c.refused.queue_timeout, 0, "ran and failed: {c:?}");
        } else {
            assert_eq!(c.refused.queue_timeout, 1, "{c:?}");
        }
        assert_at_rest(&pool);
    });
}

/// The shares-to-slot hand-off on a pool: a queue slot for one task (the thread is busy),
/// partitions `a` and `b` of one guaranteed slot each, a cap of 2 per key. Two calls of
/// one key in `a`: the first is within `a`'s guarantee and takes the queue slot; the
/// second borrows, so it takes a slot only if the model's worker has freed one meanwhile,
/// and is refused `Full` otherwise. Whichever way, every share granted is given back
/// exactly once: at rest the partitions and the key count nothing and no slot is held.
#[test]
fn pool_shares_granted_then_a_slot_refused_or_taken_racing_a_release_are_given_back_once() {
    use bulkhead_config_types::{Partitions, PerKeyConfig};

    model(|| {
        let clock = ModelClock::new();
        let pool = pool(1, 1, OnFull::Abort, &clock);
        pool.set_partitions(&Partitions::new([("a", 0.5), ("b", 0.5)]))
            .unwrap();
        pool.set_per_key(Some(&PerKeyConfig::new(2)));
        let answered = std::sync::Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let callers: Vec<_> = (0..2u32)
            .map(|n| {
                let (pool, answered) = (pool.clone(), answered.clone());
                loom::thread::spawn(move || {
                    let call = pool
                        .in_partition("a")
                        .key("tenant")
                        .call_async(n, |n| async move { n });
                    let result = block_on(call);
                    answered.fetch_add(1, SeqCst);
                    match result {
                        Ok(m) => assert_eq!(m, n),
                        Err(Refused { input, error }) => {
                            assert_eq!(input, n);
                            assert!(matches!(error, BulkheadError::Full { .. }), "{error:?}");
                        }
                    }
                })
            })
            .collect();
        while answered.load(SeqCst) < 2 {
            if !work_one(&pool) {
                loom::thread::yield_now();
            }
        }
        for caller in callers {
            caller.join().unwrap();
        }
        while work_one(&pool) {}
        assert_at_rest(&pool);
        let s = pool.snapshot();
        for p in &s.partitions {
            assert_eq!(
                p.in_flight, 0,
                "a partition count was not taken back: {p:?}"
            );
        }
        let keys = s.per_key.expect("per_key is configured");
        assert_eq!(
            keys.keys_tracked, 0,
            "a key's count was not taken back: {keys:?}"
        );
        assert_eq!(keys.overflow_in_flight, 0, "{keys:?}");
    });
}

/// Counts its drops (in the model's shared counter): a value the job holds is dropped once.
struct Counted(std::sync::Arc<loom::sync::atomic::AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// The async job's state word: the caller dropping its future (`caller_gone`) racing the
/// worker that runs the job and delivers it. The caller's input — moved into the body's
/// output when the body runs — is dropped exactly once, by whichever side ends up owning it
/// (the payload or the outcome cell: loom checks that the two sides never use a cell at
/// once), and a job whose caller was gone before it was claimed never runs.
#[test]
fn an_async_caller_going_away_racing_the_run_and_delivery_drops_its_value_once() {
    use super::async_job::AsyncTask;
    use crate::events::CallOutcome;

    model(|| {
        let drops = std::sync::Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let ran = std::sync::Arc::new(AtomicBool::new(false));
        let body_ran = std::sync::Arc::clone(&ran);
        let (job, task) = AsyncTask::job(Counted(drops.clone()), move |value: Counted| {
            body_ran.store(true, SeqCst);
            async move { value }
        });
        let worker = loom::thread::spawn(move || {
            let outcome = job.run();
            job.deliver();
            outcome
        });
        task.caller_gone();
        let outcome = worker.join().unwrap();
        drop(task);
        assert_eq!(drops.load(SeqCst), 1, "the caller's value was dropped once");
        // Ran only if claimed before the caller left; a job never run counts `Cancelled`.
        assert_eq!(ran.load(SeqCst), outcome == CallOutcome::Completed);
    });
}

/// The job's claim: a failure (the queue's withdrawal, a shutdown) racing a worker's run of
/// the same job. Exactly one of them takes the payload; the caller gets that one's outcome
/// — the body's result or its input back — exactly once, and is woken for it.
#[test]
fn a_failure_racing_a_run_of_the_same_job_is_answered_once() {
    use super::async_job::AsyncTask;
    use super::job::Outcome;
    use crate::events::CallOutcome;

    model(|| {
        let (job, task) = AsyncTask::job(20, |n: u64| async move { n + 1 });
        let failer = std::sync::Arc::clone(&job);
        let worker = loom::thread::spawn(move || {
            let outcome = job.run();
            job.deliver();
            outcome
        });
        let fail = loom::thread::spawn(move || {
            failer.fail(BulkheadError::ShutDown {
                name: "model".into(),
            });
        });
        let outcome = block_on(std::future::poll_fn(|cx| task.poll_outcome(cx)));
        let ran = worker.join().unwrap();
        fail.join().unwrap();
        match outcome {
            Outcome::Ran(21) => assert_eq!(ran, CallOutcome::Completed),
            Outcome::Refused(20, error) if matches!(*error, BulkheadError::ShutDown { .. }) => {
                assert_eq!(ran, CallOutcome::Cancelled)
            }
            _ => panic!("one outcome: the body's or the refusal with the input"),
        }
    });
}

/// A worker taking the next task from the inbox without the lock (`Shared::take_free`, as
/// a worker that has just run a task does) racing the caller that queued it there and then
/// drops its future (its cancellation removes the task under the lock if still queued): the
/// task is run or cancelled, counted once, its slot freed once, nothing left queued. Under
/// loom the inbox is a loom mutex around a `VecDeque` (`inbox.rs`): crossbeam's `ArrayQueue` ring
/// is not modelled, so this checks the protocol around the queue, not its algorithm.
#[test]
fn a_task_taken_without_the_lock_racing_its_cancellation_is_settled_once() {
    use crate::events::CallOutcome;

    model(|| {
        let clock = ModelClock::new();
        let pool = pool(1, 2, OnFull::Abort, &clock);
        assert!(
            pool.shared().take_free.load(SeqCst),
            "a busy FIFO pool at max takes free"
        );
        let worker_pool = pool.clone();
        let worker = loom::thread::spawn(move || {
            let shared = worker_pool.shared();
            match shared.take_free() {
                Some(entry) => {
                    let (outcome, finished) = entry.job.run();
                    shared.settle_free(outcome, finished);
                    outcome != CallOutcome::Cancelled
                }
                None => work_one(&worker_pool),
            }
        });
        let mut call = Box::pin(pool.call_async(5u32, |n| async move { n }));
        let waker = Waker::noop();
        let first = call.as_mut().poll(&mut Context::from_waker(waker));
        drop(call);
        let _ = worker.join().unwrap();
        // The worker may have run it before the first poll looked for the outcome.
        if let Poll::Ready(result) = first {
            assert_eq!(result.ok(), Some(5));
        }
        // Whatever the worker did not take is still queued (cancelled above, or left).
        while work_one(&pool) {}
        assert!(pool.shared().inbox.is_empty());
        assert_at_rest(&pool);
        let c = pool.shared().counters.counts();
        assert_eq!((c.permitted, c.completed + c.cancelled), (1, 1), "{c:?}");
    });
}

/// A worker that settled its task without the lock (the pool busy, at `max_threads`, FIFO)
/// and found the inbox empty, racing a caller queueing into the inbox without the lock and
/// a snapshot (whose lock moves the inbox into the queue): the task is taken by the settled
/// worker, or by it under the lock, or — the worker gone idle — the caller or the snapshot
/// claimed it; never left without a worker. The settled worker never reads as running a
/// task, and at rest nothing is counted running or settled.
#[test]
fn a_worker_settled_without_the_lock_racing_a_caller_and_a_snapshot_leaves_no_task_behind() {
    model(|| {
        let clock = ModelClock::new();
        let pool = pool(1, 1, OnFull::Abort, &clock);
        let shared = pool.shared();
        assert!(
            shared.take_free.load(SeqCst),
            "a busy FIFO pool at max takes free"
        );
        let caller = caller_of_five(&pool);
        let observer = loom::thread::spawn({
            let pool = pool.clone();
            move || {
                let gauges = pool.shared().gauges();
                assert!(gauges.active <= 1, "more running than threads");
            }
        });
        // The worker, as `worker_main` does it: its (busy) task ends and is settled without
        // the lock, then it looks at the inbox once (`await_free`'s look) and, finding
        // nothing, looks under the lock.
        shared.settled.fetch_add(1, SeqCst);
        shared.release();
        shared.room.wake_one();
        let me = std::thread::current();
        let parks = match shared.take_settled() {
            Some(entry) => {
                run_taken_entry(&pool, entry);
                false
            }
            None => {
                let mut st = shared.lock_state_for_worker();
                shared.leave_settled(&mut st);
                let step = shared.next_step(&mut st, 1, None, &me);
                drop(st);
                match step {
                    Step::Run(entry, _) => {
                        run_taken_entry(&pool, entry);
                        false
                    }
                    Step::Park { .. } => !shared.inbox_has_work_after_idle(),
                    Step::FailStale(..) | Step::Retire(_) => {
                        panic!("nothing stale, nothing surplus")
                    }
                }
            }
        };
        let call = caller.join().unwrap();
        observer.join().unwrap();
        if parks {
            // It would sleep: the task is queued (not in the inbox, which no one would
            // look at) with the worker claimed for it.
            assert!(shared.inbox.is_empty(), "a task left in the inbox");
            let st = shared.lock_state();
            assert!(
                st.queue.len() == 1 && st.idle.is_empty() && st.pending == 1,
                "a task left without a worker"
            );
        }
        while work_one(&pool) {}
        if let Some(call) = call {
            assert_answered_five(call);
        }
        assert_eq!(shared.settled.load(SeqCst), 0);
        assert_eq!(
            shared.gauges().active,
            0,
            "a settled worker counted running"
        );
        let c = shared.counters.counts();
        assert_eq!((c.permitted, c.completed), (1, 1), "{c:?}");
    });
}

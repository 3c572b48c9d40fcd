//! Overload control under a moving configuration: what `thread_pool.rs`, `semaphore.rs`,
//! `registry.rs`, `rate_limit.rs` and `faults.rs` do not already show.
//!
//! * live reloads through [`Registry::reload`] while many callers drive both kinds, with a
//!   sampler checking the limits and, at the end, every call accounted exactly once — on an
//!   independent registry (looped) and on the process-wide one;
//! * overload policies (`max_queue_wait`, `queue_order`) switched on by a reload apply to
//!   work that was already queued;
//! * an async caller-runs call after shutdown is refused with `ShutDown`, not discarded;
//! * the registry's shutdown reports counts per bulkhead and fails queued work.
//!
//! Deterministic where it proves saturation or expiry (gates, `ManualClock`); the load tests
//! use the system clock only so that the waits and queue timeouts they mix in can fire.

mod support;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use bulkhead_config_types::{
    BulkheadConfig, Config, Duration as ConfigDuration, OnFull, QueueOrder, RateLimitConfig,
    SemaphoreConfig, ThreadPoolConfig,
};
use bulkhead_core::{
    Bulkhead, BulkheadError, BulkheadShutdown, CallCounts, Refused, Registry, SemaphoreBulkhead,
    ThreadPoolBulkhead, registry,
};
use support::{Gate, XorShift, manual_clock, poll_once, wait_until};

// ---------------------------------------------------------------- helpers

fn ms(n: u64) -> ConfigDuration {
    ConfigDuration::from_millis(n)
}

fn tp(core: u32, max: u32, queue: u32) -> ThreadPoolConfig {
    ThreadPoolConfig {
        core_threads: core,
        max_threads: max,
        queue_capacity: queue,
        ..ThreadPoolConfig::default()
    }
}

fn config(entries: &[(&str, BulkheadConfig)]) -> Config {
    let mut config = Config::default();
    let entries = entries.iter().map(|(n, b)| ((*n).to_owned(), b.clone()));
    config.bulkheads.extend(entries);
    config
}

/// Injected panics carry this payload; the hook keeps them off the test output.
const INJECTED: &str = "overload: injected panic";

fn quiet_injected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&INJECTED) {
                previous(info);
            }
        }));
    });
}

// ---------------------------------------------------------------- reload under load

/// One step of the reload schedule: sizes, waits and policies of both bulkheads.
#[derive(Clone, Copy, Debug)]
struct Step {
    permits: u32,
    max_wait_ms: u64,
    rate: Option<u32>,
    core: u32,
    max: u32,
    queue: u32,
    on_full: OnFull,
    max_queue_wait_ms: Option<u64>,
    order: QueueOrder,
}

/// Sizes moving up and down, with every reloadable knob changing along the way.
const SCHEDULE: [Step; 8] = [
    Step {
        permits: 2,
        max_wait_ms: 0,
        rate: None,
        core: 1,
        max: 2,
        queue: 2,
        on_full: OnFull::Abort,
        max_queue_wait_ms: None,
        order: QueueOrder::Fifo,
    },
    Step {
        permits: 6,
        max_wait_ms: 1,
        rate: Some(10_000),
        core: 2,
        max: 5,
        queue: 6,
        on_full: OnFull::Wait(ConfigDuration::from_millis(1)),
        max_queue_wait_ms: Some(1),
        order: QueueOrder::AdaptiveLifo,
    },
    Step {
        permits: 1,
        max_wait_ms: 0,
        rate: Some(50),
        core: 1,
        max: 1,
        queue: 0,
        on_full: OnFull::Abort,
        max_queue_wait_ms: None,
        order: QueueOrder::Fifo,
    },
    Step {
        permits: 4,
        max_wait_ms: 2,
        rate: None,
        core: 3,
        max: 4,
        queue: 8,
        on_full: OnFull::Wait(ConfigDuration::from_millis(2)),
        max_queue_wait_ms: Some(2),
        order: QueueOrder::Fifo,
    },
    Step {
        permits: 1,
        max_wait_ms: 1,
        rate: None,
        core: 1,
        max: 1,
        queue: 1,
        on_full: OnFull::Abort,
        max_queue_wait_ms: Some(1),
        order: QueueOrder::AdaptiveLifo,
    },
    Step {
        permits: 5,
        max_wait_ms: 0,
        rate: Some(20_000),
        core: 2,
        max: 6,
        queue: 3,
        on_full: OnFull::Abort,
        max_queue_wait_ms: None,
        order: QueueOrder::Fifo,
    },
    Step {
        permits: 2,
        max_wait_ms: 1,
        rate: None,
        core: 1,
        max: 2,
        queue: 1,
        on_full: OnFull::Wait(ConfigDuration::from_millis(1)),
        max_queue_wait_ms: None,
        order: QueueOrder::AdaptiveLifo,
    },
    Step {
        permits: 3,
        max_wait_ms: 0,
        rate: None,
        core: 1,
        max: 3,
        queue: 4,
        on_full: OnFull::Abort,
        max_queue_wait_ms: Some(1),
        order: QueueOrder::Fifo,
    },
];

const MAX_PERMITS: u32 = 6;
const MAX_THREADS: u32 = 6;
const MAX_QUEUE: u32 = 8;

impl Step {
    fn semaphore(&self) -> BulkheadConfig {
        let mut config = BulkheadConfig::semaphore(SemaphoreConfig {
            max_concurrent_calls: self.permits,
            max_wait: ms(self.max_wait_ms),
            fair: true,
        });
        config.rate_limit = self
            .rate
            .map(|limit_for_period| RateLimitConfig::per_process(limit_for_period, ms(10)));
        config
    }

    fn thread_pool(&self) -> BulkheadConfig {
        BulkheadConfig::thread_pool(ThreadPoolConfig {
            on_full: self.on_full,
            max_queue_wait: self.max_queue_wait_ms.map(ms),
            queue_order: self.order,
            keep_alive: ms(1),
            ..tp(self.core, self.max, self.queue)
        })
    }
}

/// What the callers saw, added up.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    panicked: AtomicU64,
    full: AtomicU64,
    timeout: AtomicU64,
    queue_timeout: AtomicU64,
    rate_limited: AtomicU64,
    shut_down: AtomicU64,
}

impl Tally {
    fn add<T>(&self, outcome: std::thread::Result<Result<T, BulkheadError>>) {
        let counter = match outcome {
            Ok(Ok(_)) => &self.ok,
            Err(_) => &self.panicked,
            Ok(Err(BulkheadError::Full { .. })) => &self.full,
            Ok(Err(BulkheadError::Timeout { .. })) => &self.timeout,
            Ok(Err(BulkheadError::QueueTimeout { .. })) => &self.queue_timeout,
            Ok(Err(BulkheadError::RateLimited { .. })) => &self.rate_limited,
            Ok(Err(BulkheadError::ShutDown { .. })) => &self.shut_down,
            Ok(Err(other)) => panic!("unexpected refusal {other:?}"),
        };
        counter.fetch_add(1, SeqCst);
    }

    fn total(&self) -> u64 {
        [
            &self.ok,
            &self.panicked,
            &self.full,
            &self.timeout,
            &self.queue_timeout,
            &self.rate_limited,
            &self.shut_down,
        ]
        .iter()
        .map(|c| c.load(SeqCst))
        .sum()
    }
}

/// The limits in force, published by the reloader. `settled` is set once the bulkhead has
/// drained below the step's limits after the reload; from then until the next reload, no
/// new admission may take it above them.
struct Phase {
    epoch: AtomicU64,
    step: Mutex<Option<Step>>,
}

impl Phase {
    fn unsettle(&self) {
        *self.step.lock().unwrap() = None;
        self.epoch.fetch_add(1, SeqCst);
    }
    fn settle(&self, step: Step) {
        *self.step.lock().unwrap() = Some(step);
    }
    /// The settled step, if the phase did not change between the two reads around `look`.
    fn settled<T>(&self, look: impl FnOnce() -> T) -> Option<(Step, T)> {
        let before = self.epoch.load(SeqCst);
        let step = *self.step.lock().unwrap();
        let seen = look();
        let after = self.epoch.load(SeqCst);
        let still = *self.step.lock().unwrap();
        match (step, still) {
            (Some(step), Some(_)) if before == after => Some((step, seen)),
            _ => None,
        }
    }
}

/// Marks a caller done when dropped (also by a panic).
struct Done<'a>(&'a AtomicU64, &'a AtomicU64);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.1.store(u64::MAX, SeqCst);
        self.0.fetch_add(1, SeqCst);
    }
}

/// The body: a short spin, sometimes a panic. Counts itself running against `running`.
fn body(running: &AtomicU64, limit_ever: u32, seed: u64) -> u64 {
    let now = running.fetch_add(1, SeqCst) + 1;
    assert!(
        now <= u64::from(limit_ever),
        "{now} bodies running, more than any limit ever configured ({limit_ever})"
    );
    for _ in 0..(seed % 400) {
        std::hint::spin_loop();
    }
    if seed.is_multiple_of(3) {
        thread::yield_now();
    }
    running.fetch_sub(1, SeqCst);
    if seed.is_multiple_of(23) {
        std::panic::panic_any(INJECTED);
    }
    seed
}

/// Drives `sem` and `pool` in `registry` with `callers` threads each while a reloader walks
/// [`SCHEDULE`] up and down through [`Registry::reload`], and checks the invariants.
///
/// `strict_running`: also check the pool's running ≤ the new `max_threads` once settled
/// (see [`after_a_shrink_new_work_never_runs_on_a_retiring_thread`]); without
/// it the pool is held to running + queued ≤ `max_threads + queue_capacity` and
/// queued ≤ `queue_capacity`, which admission guarantees.
fn reload_under_load(
    registry: &Registry,
    sem_name: &str,
    pool_name: &str,
    seed: u64,
    strict_running: bool,
) {
    const CALLERS: u64 = 5;
    const CALLS: u64 = 300;
    quiet_injected_panics();
    let full_config = |step: &Step| {
        config(&[
            (sem_name, step.semaphore()),
            (pool_name, step.thread_pool()),
        ])
    };
    let first = SCHEDULE[0];
    let Ok(Bulkhead::Semaphore(sem)) = registry.register(sem_name, &first.semaphore()) else {
        panic!("a semaphore");
    };
    let Ok(Bulkhead::ThreadPool(pool)) = registry.register(pool_name, &first.thread_pool()) else {
        panic!("a thread pool");
    };
    registry.reload(&full_config(&first)).unwrap();
    let sem_before = sem.snapshot().calls;
    let pool_before = pool.snapshot().calls;

    let (sem_tally, pool_tally) = (Tally::default(), Tally::default());
    let (sem_running, pool_running) = (AtomicU64::new(0), AtomicU64::new(0));
    let (sem_phase, pool_phase) = (
        Phase {
            epoch: AtomicU64::new(0),
            step: Mutex::new(Some(first)),
        },
        Phase {
            epoch: AtomicU64::new(0),
            step: Mutex::new(Some(first)),
        },
    );
    let callers_done = AtomicU64::new(0);
    // Per caller: iterations started (u64::MAX once done). A caller that started a new
    // iteration has finished every call it made before.
    let started: Vec<AtomicU64> = (0..CALLERS).map(|_| AtomicU64::new(0)).collect();
    let progress = AtomicU64::new(0);
    let schedule_done = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let (checked, reloads) = thread::scope(|s| {
        for c in 0..CALLERS {
            let (sem, pool) = (&sem, &pool);
            let (sem_tally, pool_tally, sem_running, pool_running) =
                (&sem_tally, &pool_tally, &sem_running, &pool_running);
            let (callers_done, progress, schedule_done) =
                (&callers_done, &progress, &schedule_done);
            let started = &started[c as usize];
            s.spawn(move || {
                // Counts this caller done even if it panics, so the reloader stops waiting
                // and the scope reports the panic instead of hanging.
                let _done = Done(callers_done, started);
                let mut rng = XorShift::seeded(seed * 1_000 + c);
                // At least CALLS each, and on until the schedule went round twice.
                let mut made = 0;
                while made < CALLS || !schedule_done.load(SeqCst) {
                    made += 1;
                    started.fetch_add(1, SeqCst);
                    let n = rng.next();
                    sem_tally.add(catch_unwind(AssertUnwindSafe(|| {
                        sem.call(|| body(sem_running, MAX_PERMITS, n))
                    })));
                    pool_tally.add(catch_unwind(AssertUnwindSafe(|| {
                        pool.call(n, |n| body(pool_running, MAX_THREADS, n))
                            .map_err(|r: Refused<u64>| r.error)
                    })));
                    progress.fetch_add(1, SeqCst);
                }
            });
        }
        let callers_running = || callers_done.load(SeqCst) < CALLERS;

        // The sampler: always within the largest limits; once settled, within the current.
        let sampler = s.spawn(|| {
            let mut checked = 0u64;
            while !stop.load(SeqCst) {
                let snap = sem.snapshot();
                assert!(snap.active <= MAX_PERMITS, "{snap:?}");
                if let Some((step, snap)) = sem_phase.settled(|| sem.snapshot()) {
                    assert!(
                        snap.active <= step.permits,
                        "semaphore admitted above the new limit {}: {snap:?}",
                        step.permits
                    );
                    checked += 1;
                }
                let snap = pool.snapshot();
                assert!(snap.active <= MAX_THREADS, "{snap:?}");
                assert!(snap.queued <= MAX_QUEUE, "{snap:?}");
                assert!(snap.pool_size.unwrap() <= MAX_THREADS, "{snap:?}");
                if let Some((step, snap)) = pool_phase.settled(|| pool.snapshot()) {
                    assert!(
                        snap.active + snap.queued <= step.max + step.queue,
                        "pool admitted above the new max_threads + queue_capacity: {snap:?}"
                    );
                    assert!(
                        !strict_running || snap.active <= step.max,
                        "pool running above the new max_threads {}: {snap:?}",
                        step.max
                    );
                    assert!(
                        snap.queued <= step.queue,
                        "pool queued above the new capacity {}: {snap:?}",
                        step.queue
                    );
                    checked += 1;
                }
                thread::yield_now();
            }
            checked
        });

        // The reloader: up and down through the schedule until the callers are done.
        let mut reloads = 0u64;
        let mut at = 1;
        while callers_running() {
            let step = SCHEDULE[at % SCHEDULE.len()];
            at += 1;
            sem_phase.unsettle();
            pool_phase.unsettle();
            let report = registry.reload(&full_config(&step)).unwrap();
            assert!(report.resized.len() <= 2);
            reloads += 1;
            // Settled once every call admitted before the reload has finished (admitted work
            // finishes, it is never cancelled); every admission from then on is under the
            // new limits.
            let marks: Vec<u64> = started.iter().map(|n| n.load(SeqCst)).collect();
            wait_until(|| {
                let moved_on = |(n, m): (&AtomicU64, &u64)| {
                    let n = n.load(SeqCst);
                    n == u64::MAX || n > *m
                };
                started.iter().zip(&marks).all(moved_on)
            });
            sem_phase.settle(step);
            pool_phase.settle(step);
            // Let the callers make some progress under this step.
            let mark = progress.load(SeqCst);
            wait_until(|| !callers_running() || progress.load(SeqCst) >= mark + 40);
            if reloads >= 2 * SCHEDULE.len() as u64 {
                schedule_done.store(true, SeqCst);
            }
        }
        stop.store(true, SeqCst);
        (sampler.join().unwrap(), reloads)
    });
    assert!(reloads >= 2 * SCHEDULE.len() as u64, "{reloads} reloads");
    assert!(checked > 0, "the sampler never saw a settled phase");

    // Every call accounted exactly once, on both sides.
    wait_until(|| {
        let s = pool.snapshot();
        s.active == 0 && s.queued == 0
    });
    let total = progress.load(SeqCst);
    assert!(total >= CALLERS * CALLS);
    for (what, tally, calls, before) in [
        ("semaphore", &sem_tally, sem.snapshot().calls, sem_before),
        ("pool", &pool_tally, pool.snapshot().calls, pool_before),
    ] {
        let delta = |now: u64, then: u64| now - then;
        let permitted = delta(calls.permitted, before.permitted);
        let completed = delta(calls.completed, before.completed);
        let panicked = delta(calls.panicked, before.panicked);
        let cancelled = delta(calls.cancelled, before.cancelled);
        let queue_timeout = delta(calls.refused.queue_timeout, before.refused.queue_timeout);
        assert_eq!(tally.total(), total, "{what}: every call has one outcome");
        assert_eq!(
            permitted,
            completed + panicked + cancelled,
            "{what}: admitted = completed + panicked + cancelled: {calls:?}"
        );
        assert_eq!(completed, tally.ok.load(SeqCst), "{what}: {calls:?}");
        assert_eq!(panicked, tally.panicked.load(SeqCst), "{what}: {calls:?}");
        // Each refusal the callers saw is counted under its reason, and no other.
        let reasons = |c: &CallCounts| {
            let r = c.refused;
            [
                r.full,
                r.timeout,
                r.queue_timeout,
                r.rate_limited,
                r.shut_down,
            ]
        };
        let seen = [
            &tally.full,
            &tally.timeout,
            &tally.queue_timeout,
            &tally.rate_limited,
            &tally.shut_down,
        ];
        for ((now, then), seen) in reasons(&calls).into_iter().zip(reasons(&before)).zip(seen) {
            assert_eq!(now - then, seen.load(SeqCst), "{what}: {calls:?}");
        }
        // Sync callers never cancel: an admitted call that did not run timed out in the
        // queue. A shrink never fails admitted work (on either kind).
        assert_eq!(cancelled, queue_timeout, "{what}: {calls:?}");
        // Admitted, or refused at the door: each call exactly once.
        let at_the_door = tally.full.load(SeqCst)
            + tally.timeout.load(SeqCst)
            + tally.rate_limited.load(SeqCst)
            + tally.shut_down.load(SeqCst);
        assert_eq!(permitted + at_the_door, total, "{what}: {calls:?}");
    }
}

#[test]
fn registry_reload_under_load_keeps_both_kinds_within_limits_and_accounts_every_call() {
    for round in 0..6 {
        let registry = Registry::new();
        reload_under_load(&registry, "sem", "pool", round, false);
        let reports = registry.shutdown(Duration::from_secs(10));
        assert!(
            reports.values().all(|r| r.still_running() == 0),
            "{reports:?}"
        );
    }
}

#[test]
fn registry_reload_under_load_never_runs_new_work_above_the_new_max_threads() {
    for round in 0..20 {
        let registry = Registry::new();
        reload_under_load(&registry, "sem", "pool", 100 + round, true);
        registry.shutdown(Duration::from_secs(10));
    }
}

#[test]
fn process_wide_registry_reload_under_load_keeps_limits_and_accounts_every_call() {
    // The only test of this binary that touches the process-wide registry: a reload must
    // name every bulkhead registered there.
    reload_under_load(
        registry(),
        "overload-global-sem",
        "overload-global-pool",
        99,
        false,
    );
}

// ---------------------------------------------------------------- a shrink never admits above the new max

/// A pool shrunk from two threads to one while both run: work admitted after the shrink
/// must wait for the one thread the pool may now have, not run on the retiring one.
///
/// A worker (`thread_pool/worker.rs`) checks `threads > max` before it takes the next queued
/// task: were it the other way round, a thread above a shrunk `max_threads` would retire
/// only once the queue was empty, which under sustained load is never.
#[test]
fn after_a_shrink_new_work_never_runs_on_a_retiring_thread() {
    let pool = ThreadPoolBulkhead::new("shrink-new-work", &tp(1, 2, 4));
    let (old_gate, new_gate) = (Gate::default(), Gate::default());
    let running = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let call = |i: u64, gate: &Gate| {
        let (pool, gate, running, most) =
            (pool.clone(), gate.clone(), running.clone(), most.clone());
        thread::spawn(move || {
            pool.call(i, |i| {
                let now = running.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                gate.wait();
                running.fetch_sub(1, SeqCst);
                i
            })
        })
    };
    let old: Vec<_> = (0..2).map(|i| call(i, &old_gate)).collect();
    wait_until(|| pool.snapshot().active == 2);
    pool.resize(&tp(1, 1, 4));
    // Admitted after the shrink: limit 1 + 4 = 5, two are in.
    let new: Vec<_> = (2..5).map(|i| call(i, &new_gate)).collect();
    wait_until(|| pool.snapshot().queued == 3);
    most.store(0, SeqCst);
    old_gate.open();
    for c in old {
        c.join().unwrap().unwrap();
    }
    // One of the new calls runs; the retiring thread must not take a second one.
    wait_until(|| running.load(SeqCst) >= 1);
    let snap = pool.snapshot();
    new_gate.open();
    for c in new {
        c.join().unwrap().unwrap();
    }
    assert!(
        most.load(SeqCst) <= 1 && snap.active <= 1,
        "work admitted after shrinking to 1 thread ran {} at once (snapshot {snap:?})",
        most.load(SeqCst)
    );
}

// ---------------------------------------------------------------- policies reloaded live

type Call = thread::JoinHandle<Result<u32, Refused<u32>>>;

/// A blocking call of `input` on another thread, its body waiting for `gate`.
fn blocked_call(pool: &ThreadPoolBulkhead, gate: &Gate, input: u32) -> Call {
    let (pool, gate) = (pool.clone(), gate.clone());
    thread::spawn(move || {
        pool.call(input, move |i| {
            gate.wait();
            i
        })
    })
}

/// What [`queued_behind_a_blocker`] set up.
struct Queued {
    pool: ThreadPoolBulkhead,
    gate: Gate,
    blocker: Call,
    queued: Vec<Call>,
    served: Arc<Mutex<Vec<u32>>>,
}

/// A one-thread pool registered in `registry`, its thread held by a call blocked on the
/// returned gate, with `inputs` queued behind it in order; the bodies log what they serve.
fn queued_behind_a_blocker(
    registry: &Registry,
    name: &str,
    config: ThreadPoolConfig,
    inputs: std::ops::Range<u32>,
) -> Queued {
    let Ok(Bulkhead::ThreadPool(pool)) =
        registry.register(name, &BulkheadConfig::thread_pool(config))
    else {
        panic!("a thread pool");
    };
    let gate = Gate::default();
    let blocker = blocked_call(&pool, &gate, 0u32);
    wait_until(|| pool.snapshot().active == 1);
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut queued = Vec::new();
    for i in inputs {
        let (p, served) = (pool.clone(), served.clone());
        queued.push(thread::spawn(move || {
            p.call(i, move |i| {
                served.lock().unwrap().push(i);
                i
            })
        }));
        // One at a time, so the queue order is the input order.
        wait_until(|| pool.snapshot().queued == i);
    }
    Queued {
        pool,
        gate,
        blocker,
        queued,
        served,
    }
}

/// A FIFO pool of one thread and a queue of 4 on a manual clock, `inputs` queued behind a
/// blocked call; then the clock moves by `waited` and a reload applies `new` (same sizes).
fn queued_then_reloaded(
    name: &str,
    inputs: std::ops::Range<u32>,
    waited: Duration,
    new: ThreadPoolConfig,
) -> Queued {
    let (clock, shared) = manual_clock();
    let registry = Registry::with_clock(shared);
    let queued = queued_behind_a_blocker(&registry, name, tp(1, 1, 4), inputs);
    clock.advance(waited);
    let report = registry
        .reload(&config(&[(name, BulkheadConfig::thread_pool(new))]))
        .unwrap();
    assert_eq!(report.resized, [name]);
    queued
}

#[test]
fn reload_turning_on_max_queue_wait_fails_work_that_was_already_queued() {
    let new = ThreadPoolConfig {
        max_queue_wait: Some(ms(100)),
        ..tp(1, 1, 4)
    };
    let q = queued_then_reloaded("late-mqw", 1..3, Duration::from_millis(200), new);
    q.gate.open();
    assert_eq!(q.blocker.join().unwrap().unwrap(), 0);
    for (i, call) in (1..3).zip(q.queued) {
        let refused = call.join().unwrap().unwrap_err();
        assert_eq!(refused.input, i);
        assert!(
            matches!(refused.error, BulkheadError::QueueTimeout { waited, .. } if waited == Duration::from_millis(200)),
            "{refused:?}"
        );
    }
    assert!(q.served.lock().unwrap().is_empty(), "stale work never runs");
    let calls = q.pool.snapshot().calls;
    assert_eq!(
        (
            calls.permitted,
            calls.completed,
            calls.cancelled,
            calls.refused.queue_timeout
        ),
        (3, 1, 2, 2)
    );
}

#[test]
fn reload_switching_to_adaptive_lifo_serves_the_standing_queue_newest_first() {
    let new = ThreadPoolConfig {
        queue_order: QueueOrder::AdaptiveLifo,
        ..tp(1, 1, 4)
    };
    // Standing for the default interval (100 ms without CoDel) when the reload applies.
    let q = queued_then_reloaded("late-lifo", 1..4, Duration::from_millis(100), new);
    q.gate.open();
    q.blocker.join().unwrap().unwrap();
    for call in q.queued {
        call.join().unwrap().unwrap();
    }
    assert_eq!(*q.served.lock().unwrap(), [3, 2, 1]);
    assert_eq!(q.pool.snapshot().calls.completed, 4);
}

// ---------------------------------------------------------------- shutdown

#[test]
fn async_caller_runs_after_shutdown_is_refused_not_discarded() {
    let pool = ThreadPoolBulkhead::new(
        "cr-async-shut",
        &ThreadPoolConfig {
            on_full: OnFull::CallerRuns,
            ..tp(1, 1, 0)
        },
    );
    pool.shutdown(Duration::ZERO);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let mut call = pool.call_async(7u32, move |i| async move {
        flag.store(true, SeqCst);
        i
    });
    let refused = match poll_once(&mut call) {
        std::task::Poll::Ready(result) => result.unwrap_err(),
        std::task::Poll::Pending => panic!("a refusal is immediate"),
    };
    assert_eq!(refused.input, 7);
    assert!(matches!(refused.error, BulkheadError::ShutDown { .. }));
    assert!(!ran.load(SeqCst));
    let calls = pool.snapshot().calls;
    assert_eq!((calls.permitted, calls.refused.shut_down), (0, 1));
}

#[test]
fn caller_runs_while_shutting_down_with_a_full_pool_is_refused_not_run_or_dropped() {
    // Full pool: the next call would run on its caller; once shutdown has begun it must be
    // refused with ShutDown instead (Java's CallerRunsPolicy silently discards it).
    let (clock, shared) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock(
        "cr-full-shut",
        &ThreadPoolConfig {
            on_full: OnFull::CallerRuns,
            ..tp(1, 1, 0)
        },
        shared,
    );
    // A first call starts the worker and has recorded its join handle once it returns (a
    // worker whose spawner has not recorded it yet is not joined by a shutdown).
    assert_eq!(pool.call(0u32, |i| i).unwrap(), 0);
    let gate = Gate::default();
    let running = blocked_call(&pool, &gate, 1u32);
    wait_until(|| pool.snapshot().active == 1);
    // Before shutdown the extra call runs on the caller.
    assert_eq!(pool.call(2u32, |i| i).unwrap(), 2);
    let shutdown = {
        let pool = pool.clone();
        thread::spawn(move || pool.shutdown(Duration::from_secs(30)))
    };
    wait_until(|| pool.is_shut_down());
    let refused = pool.call(3u32, |i| i).unwrap_err();
    assert_eq!(refused.input, 3);
    assert!(matches!(refused.error, BulkheadError::ShutDown { .. }));
    gate.open();
    let report = shutdown.join().unwrap();
    drop(clock);
    assert_eq!(running.join().unwrap().unwrap(), 1);
    assert_eq!(
        (
            report.completed,
            report.failed_queued,
            report.still_running,
            report.threads_joined
        ),
        (1, 0, 0, 1)
    );
    assert_eq!(pool.caller_runs(), 1);
    let calls = pool.snapshot().calls;
    assert_eq!(
        (calls.permitted, calls.completed, calls.refused.shut_down),
        (3, 3, 1)
    );
}

#[test]
fn registry_shutdown_reports_counts_per_bulkhead_and_fails_queued_work() {
    let registry = Registry::new();
    let Ok(Bulkhead::ThreadPool(pool)) =
        registry.register("reports", &BulkheadConfig::thread_pool(tp(1, 1, 2)))
    else {
        panic!("a thread pool");
    };
    let Ok(Bulkhead::Semaphore(sem)) = registry.register(
        "payment",
        &BulkheadConfig::semaphore(SemaphoreConfig {
            max_concurrent_calls: 1,
            ..SemaphoreConfig::default()
        }),
    ) else {
        panic!("a semaphore");
    };
    let gate = Gate::default();
    let calls: Vec<_> = (0..3u32)
        .map(|i| {
            let call = blocked_call(&pool, &gate, i);
            wait_until(|| {
                let s = pool.snapshot();
                s.active + s.queued == i + 1
            });
            call
        })
        .collect();
    let holder = {
        let (sem, gate): (SemaphoreBulkhead, Gate) = (sem.clone(), gate.clone());
        thread::spawn(move || sem.call(|| gate.wait()))
    };
    wait_until(|| sem.snapshot().active == 1);
    let reports: BTreeMap<_, _> = registry.shutdown(Duration::ZERO);
    let Some(BulkheadShutdown::ThreadPool(pool_report)) = reports.get("reports").copied() else {
        panic!("{reports:?}");
    };
    assert_eq!(
        (
            pool_report.completed,
            pool_report.failed_queued,
            pool_report.still_running
        ),
        (0, 2, 1)
    );
    let Some(BulkheadShutdown::Semaphore(sem_report)) = reports.get("payment").copied() else {
        panic!("{reports:?}");
    };
    assert_eq!(sem_report.still_running, 1);
    gate.open();
    holder.join().unwrap().unwrap();
    let mut outcomes: Vec<Result<u32, u32>> = calls
        .into_iter()
        .map(|c| match c.join().unwrap() {
            Ok(i) => Ok(i),
            Err(Refused {
                input,
                error: BulkheadError::ShutDown { .. },
            }) => Err(input),
            Err(other) => panic!("{other:?}"),
        })
        .collect();
    outcomes.sort();
    // The running call finished; the two queued came back with their inputs.
    assert_eq!(outcomes, [Ok(0), Err(1), Err(2)]);
    wait_until(|| pool.snapshot().pool_size == Some(0));
    let c = pool.snapshot().calls;
    assert_eq!(
        (c.permitted, c.completed, c.cancelled, c.refused.shut_down),
        (3, 1, 2, 2)
    );
}

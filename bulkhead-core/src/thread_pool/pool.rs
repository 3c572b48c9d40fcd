//! The pool's shared state: admission, the queue, the workers and their life cycle.
//!
//! Lock order: `state` → clock (the clock never calls back into the pool). The room-waiter
//! list has its own lock and is never taken while `state` is held.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use bulkhead_config_types::{AdaptiveConfig, Kind, OnFull, ThreadPoolConfig};

use super::job::{Finished, JobRef, Outcome, Ran};
use super::queue::{Entry, QueuePolicy, Taken, TaskQueue};
use super::room::RoomWaiters;
use crate::adaptive::calls::{self, CallStart, Controller};
use crate::clock::Clock;
use crate::events::CallOutcome;
use crate::rate_limit::RateLimiter;
use crate::reentry::{self, BulkheadId};
use crate::stats::{self, Counters};
use crate::sync::{Arc, AtomicBool, AtomicU8, AtomicU64, Mutex};
use crate::telemetry::{Load, Telemetry};
use crate::{BulkheadError, BulkheadName, Refused};

const ON_FULL_ABORT: u8 = 0;
const ON_FULL_CALLER_RUNS: u8 = 1;
const ON_FULL_WAIT: u8 = 2;

/// How an admitted call proceeds.
pub(crate) enum Admit {
    /// A slot (running or queued) was taken: hand the job to the pool.
    Pool,
    /// `on_full: caller-runs`: run the body on the calling thread.
    CallerRuns,
}

/// Everything the workers and the handles share.
pub(crate) struct Inner {
    pub name: BulkheadName,
    pub clock: Arc<dyn Clock>,
    pub counters: Counters,
    /// Calls admitted to the pool and not finished: running + queued. Never above `limit`
    /// except transiently after a shrink, when it only goes down.
    admitted: AtomicU64,
    /// `max_threads + queue_capacity`.
    limit: AtomicU64,
    on_full_mode: AtomicU8,
    on_full_wait_nanos: AtomicU64,
    shut_down: AtomicBool,
    /// Calls run on their caller's thread by `on_full: caller-runs`.
    pub caller_runs: AtomicU64,
    pub room: RoomWaiters,
    /// The rate limit checked before admission (disabled unless set).
    pub rate: RateLimiter,
    /// Spans, refusal warnings, wait- and queue-time histograms, events.
    pub telemetry: Telemetry,
    /// How long a timed call may run (`timeout` in the config).
    pub call_timeout: crate::call_timeout::CallTimeout,
    state: Mutex<State>,
    thread_name_prefix: String,
    /// The adaptive limit on calls running on workers, if one is configured.
    adaptive: Controller,
    /// The sizes as declared (last `resize`): an adaptive limit runs at most
    /// `max_threads` of them; the queue keeps its declared capacity.
    declared: parking_lot::Mutex<ThreadPoolConfig>,
    /// Bumped (under `state`) each time `enqueue` claims an idle worker: a hint that lets
    /// an idle worker spinning before it parks (see `worker_main`) stop early. Not part of
    /// any decision (the worker still parks, and the unpark token wakes it), so a plain std
    /// atomic, outside the loom models.
    idle_claims: std::sync::atomic::AtomicU64,
}

pub(crate) struct State {
    core: u32,
    max: u32,
    capacity: u32,
    keep_alive: Duration,
    policy: QueuePolicy,
    queue: TaskQueue,
    next_job_id: u64,
    /// Worker threads alive (or being spawned).
    threads: u32,
    largest_pool_size: u32,
    /// Tasks a worker is running right now.
    active: u32,
    /// Workers claimed for queued tasks (woken from idle, or just spawned) that have not yet
    /// looked at the queue: that many queued tasks already have a worker.
    pending: u32,
    largest_queued: u32,
    /// Idle workers, parked; the last one to go idle is woken first.
    idle: Vec<(u64, Thread)>,
    next_worker: u64,
    handles: Vec<JoinHandle<()>>,
    /// Workers reserved whose `spawn` has not returned yet: their join handles are not in
    /// `handles` yet, so shutdown waits for this to reach 0 before it takes them.
    spawning: u32,
    shutting_down: bool,
    shutdown_waiter: Option<Thread>,
    /// Tasks finished since shutdown began.
    drained: u64,
}

impl State {
    /// Queued tasks no worker has been claimed for: the queue's occupancy.
    fn unassigned(&self) -> u32 {
        let queued = u32::try_from(self.queue.len()).unwrap_or(u32::MAX);
        queued.saturating_sub(self.pending)
    }

    /// Counts a new worker (spawned outside the lock) as alive and claimed.
    fn reserve_thread(&mut self) -> u64 {
        self.threads += 1;
        self.spawning += 1;
        self.pending += 1;
        self.largest_pool_size = self.largest_pool_size.max(self.threads);
        self.next_worker += 1;
        self.next_worker
    }

    fn remove_idle(&mut self, worker: u64) -> bool {
        match self.idle.iter().position(|(id, _)| *id == worker) {
            Some(pos) => {
                self.idle.swap_remove(pos);
                true
            }
            None => false,
        }
    }
}

/// The load a refusal is reported with, as admission sees it. `active` counts the workers
/// running a task *and* those claimed for a queued one — spawned or woken for it, not yet
/// started: admission counted their task's slot, and the pool has no other worker to give
/// it. Counting only the tasks already started made a full pool of 6 threads read
/// `active=4` in the refusal's WARN event while two just-spawned workers were starting,
/// as if it had refused before growing to `max_threads`.
pub(crate) fn refusal_load(st: &State) -> Load {
    Load {
        active: st
            .active
            .saturating_add(st.pending)
            .min(st.threads.max(st.active)),
        queued: st.unassigned(),
        limit: st.max,
    }
}

/// How long an idle worker stays awake for the next task before it parks. A caller that
/// submits again within it (the common case for a busy pool) hands its task over without a
/// futex wake-up on either side; a worker woken from its park takes far longer on a quiet
/// machine (in the bench, a sync round trip was 3.6–5.9 µs with a few µs of spinning,
/// 1.0 µs with this). Measured with the machine's clock, not the pool's: it decides no
/// outcome, only when to sleep.
const IDLE_SPIN: Duration = Duration::from_micros(20);

/// `now + wait`, or `None` ("never") when that is past what an `Instant` can hold
/// (`Duration::MAX` as an unbounded wait or timeout).
pub(crate) fn deadline(now: Instant, wait: Duration) -> Option<Instant> {
    now.checked_add(wait)
}

/// Parks until `deadline` on the clock, or until unparked when there is none.
fn park(clock: &dyn Clock, deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => clock.park_until(deadline),
        None => std::thread::park(),
    }
}

/// Normalised sizes: `max_threads` at least `core_threads` and at least 1.
pub(crate) fn sizes(config: &ThreadPoolConfig) -> (u32, u32, u32) {
    let max = config.max_threads.max(config.core_threads).max(1);
    (config.core_threads, max, config.queue_capacity)
}

impl Inner {
    pub(crate) fn new(
        name: BulkheadName,
        config: &ThreadPoolConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let (core, max, capacity) = sizes(config);
        let now = clock.now();
        let thread_name_prefix = config
            .thread_name_prefix
            .clone()
            .unwrap_or_else(|| format!("{name}-"));
        let rate = RateLimiter::for_bulkhead(name.clone(), None, Arc::clone(&clock));
        let inner = Inner {
            telemetry: Telemetry::new(name.clone(), Kind::ThreadPool, Arc::clone(&clock)),
            name,
            clock,
            counters: Counters::default(),
            admitted: AtomicU64::new(0),
            limit: AtomicU64::new(u64::from(max) + u64::from(capacity)),
            on_full_mode: AtomicU8::new(ON_FULL_ABORT),
            on_full_wait_nanos: AtomicU64::new(0),
            shut_down: AtomicBool::new(false),
            caller_runs: AtomicU64::new(0),
            room: RoomWaiters::default(),
            rate,
            call_timeout: Default::default(),
            state: Mutex::new(State {
                core,
                max,
                capacity,
                keep_alive: config.keep_alive.as_std(),
                policy: QueuePolicy::from_config(config),
                queue: TaskQueue::new(now),
                next_job_id: 0,
                threads: 0,
                largest_pool_size: 0,
                active: 0,
                pending: 0,
                largest_queued: 0,
                idle: Vec::new(),
                next_worker: 0,
                handles: Vec::new(),
                spawning: 0,
                shutting_down: false,
                shutdown_waiter: None,
                drained: 0,
            }),
            thread_name_prefix,
            idle_claims: std::sync::atomic::AtomicU64::new(0),
            adaptive: Controller::new(),
            declared: parking_lot::Mutex::new(config.clone()),
        };
        inner.store_on_full(config.on_full);
        inner
    }

    #[inline]
    pub(crate) fn id(&self) -> BulkheadId {
        self as *const Inner as BulkheadId
    }

    fn store_on_full(&self, on_full: OnFull) {
        let (mode, nanos) = match on_full {
            OnFull::Abort => (ON_FULL_ABORT, 0),
            OnFull::CallerRuns => (ON_FULL_CALLER_RUNS, 0),
            OnFull::Wait(d) => (
                ON_FULL_WAIT,
                u64::try_from(d.as_std().as_nanos()).unwrap_or(u64::MAX),
            ),
        };
        self.on_full_wait_nanos.store(nanos, Relaxed);
        self.on_full_mode.store(mode, Relaxed);
    }

    #[inline]
    pub(crate) fn on_full(&self) -> OnFull {
        match self.on_full_mode.load(Relaxed) {
            ON_FULL_CALLER_RUNS => OnFull::CallerRuns,
            ON_FULL_WAIT => {
                OnFull::Wait(Duration::from_nanos(self.on_full_wait_nanos.load(Relaxed)).into())
            }
            _ => OnFull::Abort,
        }
    }

    /// `on_full: abort`: a full pool refuses at once.
    #[inline]
    pub(crate) fn aborts_when_full(&self) -> bool {
        self.on_full_mode.load(Relaxed) == ON_FULL_ABORT
    }

    #[inline]
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Acquire)
    }

    #[inline]
    pub(crate) fn full(&self) -> BulkheadError {
        BulkheadError::Full {
            name: self.name.clone(),
        }
    }

    #[inline]
    pub(crate) fn shut_down_error(&self) -> BulkheadError {
        BulkheadError::ShutDown {
            name: self.name.clone(),
        }
    }

    /// Counts and reports a refusal (WARN event, listeners), handing the error back. Never
    /// called with the state locked.
    #[cold]
    pub(crate) fn refuse(&self, error: BulkheadError) -> BulkheadError {
        if self.telemetry.refusals_observed() {
            self.report_refusal(&error);
        }
        self.counters.refuse(error)
    }

    /// The WARN event and the listeners of one refusal, with the pool's load.
    #[cold]
    fn report_refusal(&self, error: &BulkheadError) {
        self.telemetry
            .on_refused(error, || refusal_load(&self.state.lock()));
    }

    /// The refusal of a call under `on_full: abort` when the pool is full, counted and
    /// reported: the error is built once, straight into the result (`refuse` would move it
    /// through every frame), and the report builds its own only when someone observes
    /// refusals. Like the semaphore's, the WARN event carries the bulkhead's name and kind
    /// as fields, outside a call span.
    #[inline]
    pub(crate) fn refused_full<I>(&self, input: I) -> Refused<I> {
        if self.telemetry.refusals_observed() {
            self.report_full();
        }
        self.counters.refused[stats::FULL].fetch_add(1, Relaxed);
        Refused {
            input,
            error: self.full(),
        }
    }

    #[cold]
    #[inline(never)]
    fn report_full(&self) {
        self.report_refusal(&self.full());
    }

    /// Takes a running-or-queued slot if one is free. Lock-free; never allocates.
    #[inline]
    pub(crate) fn try_admit(&self) -> bool {
        let limit = self.limit.load(Relaxed);
        // SeqCst load: pairs with the room waiters' registration (see `room`).
        let mut current = self.admitted.load(SeqCst);
        loop {
            if current >= limit {
                return false;
            }
            match self
                .admitted
                .compare_exchange_weak(current, current + 1, SeqCst, Relaxed)
            {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Gives a slot back and lets one waiting caller retry.
    fn release(&self) {
        self.admitted.fetch_sub(1, SeqCst);
    }

    /// Admission for a blocking caller: a slot, caller-runs, or a refusal (not yet counted).
    /// `on_full: { wait }` parks the caller through the clock.
    pub(crate) fn admit_blocking(&self) -> Result<Admit, BulkheadError> {
        if self.is_shut_down() {
            return Err(self.shut_down_error());
        }
        if self.try_admit() {
            return Ok(Admit::Pool);
        }
        match self.on_full() {
            OnFull::Abort => Err(self.full()),
            OnFull::CallerRuns => Ok(Admit::CallerRuns),
            OnFull::Wait(wait) if wait.is_zero() => Err(self.full()),
            OnFull::Wait(wait) => self.wait_for_room(wait.as_std()).map(|()| Admit::Pool),
        }
    }

    fn wait_for_room(&self, wait: Duration) -> Result<(), BulkheadError> {
        let started = self.clock.now();
        let deadline = deadline(started, wait);
        loop {
            let ticket = self.room.register_thread();
            if self.is_shut_down() {
                self.room.deregister(ticket);
                return Err(self.shut_down_error());
            }
            if self.try_admit() {
                self.room.deregister(ticket);
                let waited = self.clock.now().saturating_duration_since(started);
                self.telemetry.record_wait(waited);
                return Ok(());
            }
            let now = self.clock.now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                if !self.room.deregister(ticket) {
                    // A releaser woke us for a slot we will not use: pass it on.
                    self.room.wake_one();
                }
                return Err(BulkheadError::Timeout {
                    name: self.name.clone(),
                    waited: now - started,
                });
            }
            park(&*self.clock, deadline);
            self.room.deregister(ticket);
        }
    }

    /// Runs `body` on the caller's thread (`on_full: caller-runs`), counted like a pool task.
    pub(crate) fn run_on_caller<I, R>(&self, input: I, body: impl FnOnce(I) -> R) -> R {
        self.counters.permitted.fetch_add(1, Relaxed);
        self.caller_runs.fetch_add(1, Relaxed);
        let started = self.telemetry.on_permitted();
        let _inside = reentry::enter(self.id());
        match catch_unwind(AssertUnwindSafe(move || body(input))) {
            Ok(value) => {
                self.counters.completed.fetch_add(1, Relaxed);
                self.telemetry.on_finished(started, CallOutcome::Completed);
                value
            }
            Err(payload) => {
                self.counters.panicked.fetch_add(1, Relaxed);
                self.telemetry.on_finished(started, CallOutcome::Panicked);
                resume_unwind(payload)
            }
        }
    }

    /// Turns a job's outcome into the call's result: a panic is resumed on the caller.
    pub(crate) fn settle<I, R>(&self, outcome: Outcome<I, R>) -> Result<R, Refused<I>> {
        match outcome {
            Outcome::Ran(value) => Ok(value),
            Outcome::Panicked(payload) => resume_unwind(payload),
            // Already counted where the job was failed.
            Outcome::Refused(input, error) => Err(Refused { input, error }),
            Outcome::Abandoned(input) => Err(Refused {
                input,
                error: self.refuse(self.shut_down_error()),
            }),
        }
    }

    /// Fails an admitted job that will never run: its slot is freed, the refusal counted
    /// (also as `cancelled`, so `permitted = completed + panicked + cancelled` holds), and
    /// its caller gets the input back.
    fn fail_admitted(&self, job: JobRef, error: BulkheadError) {
        self.release();
        self.counters.cancelled.fetch_add(1, Relaxed);
        self.telemetry.on_cancelled();
        job.fail(self.refuse(error));
        self.room.wake_one();
    }

    /// Queues an admitted job and makes sure a worker will take it. Returns the job's id
    /// while it is queued (for cancellation), `None` if it was failed instead (only when
    /// the pool is shutting down).
    pub(crate) fn enqueue(self: &Arc<Self>, job: JobRef) -> Option<u64> {
        let enqueued = self.clock.now();
        let mut st = self.state.lock();
        if st.shutting_down {
            drop(st);
            self.fail_admitted(job, self.shut_down_error());
            return None;
        }
        let id = st.next_job_id;
        st.next_job_id += 1;
        st.queue.push(Entry { job, id, enqueued });
        // Any idle worker is claimed, also a surplus one (above a shrunk `max_threads`):
        // woken, it either takes the task (once it is no longer surplus) or retires and
        // passes the claim on to the next idle worker (`worker_main`). With no idle worker
        // the task waits for a busy one: each comes back for the queue when its task ends,
        // and the surplus ones retire first, so it runs on one of the `max_threads` left.
        // Never refused here: the call was admitted. Only a call admitted just before a
        // shrink can find the queue above the new capacity, and that excess only drains.
        if let Some((_, worker)) = st.idle.pop() {
            st.pending += 1;
            self.idle_claims.fetch_add(1, Relaxed);
            drop(st);
            worker.unpark();
        } else if st.threads < st.max {
            let number = st.reserve_thread();
            drop(st);
            self.spawn_worker(number);
        } else {
            st.largest_queued = st.largest_queued.max(st.unassigned());
        }
        Some(id)
    }

    /// Removes a queued job whose async caller went away. True if it was still queued.
    pub(crate) fn cancel_queued(&self, id: u64) -> bool {
        let now = self.clock.now();
        let entry = self.state.lock().queue.remove(id, now);
        match entry {
            Some(entry) => {
                self.release();
                self.counters.cancelled.fetch_add(1, Relaxed);
                self.telemetry.on_cancelled();
                drop(entry);
                self.room.wake_one();
                true
            }
            None => false,
        }
    }

    fn spawn_worker(self: &Arc<Self>, number: u64) {
        let inner = Arc::clone(self);
        // A thread name cannot hold NUL (`Builder::spawn` would fail every time, and the pool
        // would refuse every call): the registry refuses such a name or prefix, and a pool
        // built directly gets U+FFFD in its place.
        let name = format!("{}{number}", self.thread_name_prefix).replace('\0', "\u{fffd}");
        #[cfg(all(test, not(loom)))]
        let os_refuses = pool_tests::spawn_fails();
        #[cfg(not(all(test, not(loom))))]
        let os_refuses = false;
        let spawned = if os_refuses {
            Err(std::io::Error::other(
                "no thread (a test stands in for the OS)",
            ))
        } else {
            std::thread::Builder::new()
                .name(name)
                .spawn(move || worker_main(inner, number))
        };
        match spawned {
            Ok(handle) => {
                #[cfg(all(test, not(loom)))]
                pool_tests::after_spawn(self);
                let waiter = {
                    let mut st = self.state.lock();
                    st.handles.retain(|h| !h.is_finished());
                    st.handles.push(handle);
                    st.spawning -= 1;
                    st.shutdown_waiter.clone()
                };
                // A shutdown waiting for this handle re-checks (a spurious wake otherwise).
                if let Some(waiter) = waiter {
                    waiter.unpark();
                }
            }
            Err(error) => {
                tracing::warn!(bulkhead = %self.name, %error, "could not start a worker thread");
                let mut failed = Vec::new();
                let waiter = {
                    let mut st = self.state.lock();
                    st.threads -= 1;
                    st.spawning -= 1;
                    st.pending = st.pending.saturating_sub(1);
                    // Tasks left without a worker, or beyond capacity, are refused.
                    while (st.threads == 0 && st.queue.len() > 0) || st.unassigned() > st.capacity {
                        match st.queue.pop_newest() {
                            Some(entry) => failed.push(entry),
                            None => break,
                        }
                    }
                    st.shutdown_waiter.clone()
                };
                if let Some(waiter) = waiter {
                    waiter.unpark();
                }
                for entry in failed {
                    self.fail_admitted(entry.job, self.full());
                }
            }
        }
    }

    fn count(&self, ran: Ran) {
        let counter = match ran {
            Ran::Completed => &self.counters.completed,
            Ran::Panicked => &self.counters.panicked,
            Ran::Cancelled => &self.counters.cancelled,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// Applies declared sizes live: with an adaptive limit, at most that many threads of
    /// them (see [`apply_limit`](Self::apply_limit)).
    pub(crate) fn resize_declared(self: &Arc<Self>, config: &ThreadPoolConfig) {
        *self.declared.lock() = config.clone();
        let limit = self.adaptive.limit_for_declared(sizes(config).1);
        self.apply_limit(limit);
    }

    /// Adds, changes or (with `None`) removes the adaptive limit.
    pub(crate) fn set_adaptive(self: &Arc<Self>, config: Option<&AdaptiveConfig>) {
        let declared = sizes(&self.declared.lock()).1;
        self.adaptive
            .configure(config, declared, |limit| self.apply_limit(limit));
    }

    /// The adaptive part of the snapshot.
    pub(crate) fn adaptive_snapshot(&self) -> Option<crate::adaptive::AdaptiveSnapshot> {
        self.adaptive.snapshot()
    }

    /// Runs the declared sizes with at most `limit` threads (`core_threads` lowered with
    /// it): the resize path, so running work is never cancelled and surplus threads retire
    /// as their calls finish.
    fn apply_limit(self: &Arc<Self>, limit: u32) {
        let mut config = self.declared.lock().clone();
        let (_, max, _) = sizes(&config);
        config.max_threads = limit.clamp(1, max);
        config.core_threads = config.core_threads.min(config.max_threads);
        self.resize(&config);
    }

    /// Runs a task a worker took, `active` calls running with it: with an adaptive limit,
    /// timed by the pool's clock and fed to the limit (a panic, a cancellation or a mark
    /// of [`mark_overloaded`](crate::adaptive::mark_overloaded) is a drop).
    fn run_taken(self: &Arc<Self>, job: JobRef, active: u32) -> (Ran, Finished) {
        if !self.adaptive.is_enabled() {
            return job.run();
        }
        let start = CallStart {
            started: self.clock.now(),
            inflight: active,
        };
        let ((ran, delivery), overloaded) = calls::in_frame(self.id(), || job.run());
        let dropped = overloaded || !matches!(ran, Ran::Completed);
        let sample = start.finish(self.clock.now(), dropped);
        if let Some((from, to)) = self.adaptive.record(sample, |to| self.apply_limit(to)) {
            self.telemetry.on_limit_changed(from, to);
        }
        (ran, delivery)
    }

    /// Applies new sizes and policies live; never blocks on running work.
    pub(crate) fn resize(self: &Arc<Self>, config: &ThreadPoolConfig) {
        let (core, max, capacity) = sizes(config);
        self.store_on_full(config.on_full);
        let (spawn, idle) = {
            let mut st = self.state.lock();
            st.core = core;
            st.max = max;
            st.capacity = capacity;
            st.keep_alive = config.keep_alive.as_std();
            st.policy = QueuePolicy::from_config(config);
            self.limit
                .store(u64::from(max) + u64::from(capacity), SeqCst);
            let mut spawn = Vec::new();
            while !st.shutting_down && st.unassigned() > 0 && st.threads < st.max {
                spawn.push(st.reserve_thread());
            }
            // Idle workers re-check whether to retire (fewer threads, shorter keep-alive).
            let idle: Vec<Thread> = st.idle.iter().map(|(_, t)| t.clone()).collect();
            (spawn, idle)
        };
        for worker in idle {
            worker.unpark();
        }
        for number in spawn {
            self.spawn_worker(number);
        }
        // More room may exist now; waiters re-check (those still without room wait again).
        self.room.wake_all();
    }

    /// Stops admission and wakes idle workers so they exit once the queue is empty.
    pub(crate) fn begin_shutdown(&self) {
        self.shut_down.store(true, Release);
        let idle: Vec<Thread> = {
            let mut st = self.state.lock();
            if !st.shutting_down {
                st.shutting_down = true;
                st.drained = 0;
            }
            st.idle.iter().map(|(_, t)| t.clone()).collect()
        };
        for worker in idle {
            worker.unpark();
        }
        self.room.wake_all();
    }

    pub(crate) fn shutdown(&self, timeout: Duration) -> ShutdownCounts {
        let deadline = deadline(self.clock.now(), timeout);
        self.begin_shutdown();
        loop {
            {
                let mut st = self.state.lock();
                if st.threads == 0 && st.spawning == 0 {
                    break;
                }
                st.shutdown_waiter = Some(std::thread::current());
            }
            if deadline.is_some_and(|deadline| self.clock.now() >= deadline) {
                break;
            }
            park(&*self.clock, deadline);
        }
        let now = self.clock.now();
        let (remaining, still_running, completed, handles, all_exited) = {
            let mut st = self.state.lock();
            st.shutdown_waiter = None;
            let remaining = st.queue.drain_all(now);
            st.pending = 0;
            (
                remaining,
                st.active,
                st.drained,
                std::mem::take(&mut st.handles),
                st.threads == 0 && st.spawning == 0,
            )
        };
        let failed_queued = remaining.len() as u64;
        for entry in remaining {
            self.fail_admitted(entry.job, self.shut_down_error());
        }
        let mut joined = 0;
        for handle in handles {
            // Every worker that left its loop is about to end; one still running a task is
            // left to finish it (it exits afterwards) rather than blocking past the timeout.
            if all_exited || handle.is_finished() {
                let _ = handle.join();
                joined += 1;
            }
        }
        ShutdownCounts {
            completed,
            failed_queued,
            still_running,
            joined,
        }
    }

    pub(crate) fn gauges(&self) -> Gauges {
        let st = self.state.lock();
        Gauges {
            max: st.max,
            capacity: st.capacity,
            active: st.active,
            queued: st.unassigned(),
            threads: st.threads,
            largest_pool_size: st.largest_pool_size,
            largest_queued: st.largest_queued,
        }
    }
}

/// Counts gathered by [`Inner::shutdown`].
pub(crate) struct ShutdownCounts {
    pub completed: u64,
    pub failed_queued: u64,
    pub still_running: u32,
    pub joined: u32,
}

/// The pool's gauges at one instant (read under the lock).
pub(crate) struct Gauges {
    pub max: u32,
    pub capacity: u32,
    pub active: u32,
    pub queued: u32,
    pub threads: u32,
    pub largest_pool_size: u32,
    pub largest_queued: u32,
}

/// A worker: takes queued tasks until it retires (idle above core for `keep_alive`, above
/// `max_threads` after a shrink, or shutdown with an empty queue).
fn worker_main(inner: Arc<Inner>, worker: u64) {
    // Everything this thread runs is inside the bulkhead: nested calls run inline.
    let _inside = reentry::enter(inner.id());
    let me = std::thread::current();
    let mut claimed = true; // spawned for a queued task
    let mut registered = false;
    let mut idle_since = inner.clock.now();
    let mut finished: Option<(Ran, Finished)> = None;
    loop {
        let mut st = inner.state.lock();
        // The previous task's slot is freed and counted under the lock, together with
        // taking the next task (so admission never sees a slot whose task is neither queued
        // nor running), and before its caller is woken (so a caller that returns can call
        // again at once and sees its call counted).
        let delivery = finished.take().map(|(ran, delivery)| {
            st.active -= 1;
            inner.release();
            if st.shutting_down {
                st.drained += 1;
            }
            inner.count(ran);
            delivery
        });
        // Run once the lock is released: wake the caller, then one caller waiting for room.
        let after_unlock = move |inner: &Inner| {
            if let Some(delivery) = delivery {
                delivery.deliver();
                inner.room.wake_one();
            }
        };
        if registered && !st.idle.iter().any(|(id, _)| *id == worker) {
            registered = false;
            claimed = true;
        }
        if claimed {
            st.pending = st.pending.saturating_sub(1);
            claimed = false;
        }
        if st.threads > st.max {
            // Surplus after a shrink: retire before taking new work (the task just
            // finished, if any, has been counted above). A queued task this worker had
            // been claimed for is passed on to an idle worker, or stays queued for the
            // workers that remain (at least `max_threads` of them).
            if registered {
                st.remove_idle(worker);
            }
            st.threads -= 1;
            let pass_on = if st.unassigned() > 0 {
                st.idle.pop().map(|(_, thread)| {
                    st.pending += 1;
                    thread
                })
            } else {
                None
            };
            let waiter = (st.threads == 0)
                .then(|| st.shutdown_waiter.clone())
                .flatten();
            drop(st);
            after_unlock(&inner);
            if let Some(thread) = pass_on {
                thread.unpark();
            }
            if let Some(waiter) = waiter {
                waiter.unpark();
            }
            return;
        }
        let taken = if st.queue.len() > 0 {
            let now = if st.policy.needs_time() {
                inner.clock.now()
            } else {
                idle_since
            };
            let policy = st.policy;
            st.queue.take(now, &policy)
        } else {
            None
        };
        match taken {
            Some(Taken::Run(entry)) => {
                if registered {
                    st.remove_idle(worker);
                    registered = false;
                }
                st.active += 1;
                let active = st.active;
                drop(st);
                after_unlock(&inner);
                let telemetry = &inner.telemetry;
                let queued = inner.clock.now().saturating_duration_since(entry.enqueued);
                telemetry.record_queue_time(queued);
                let started = telemetry.run_started();
                let (ran, delivery) = inner.run_taken(entry.job, active);
                telemetry.on_finished(started, ran.outcome());
                finished = Some((ran, delivery));
                continue;
            }
            Some(Taken::Stale(entry, waited)) => {
                // While it fails this task the worker is neither running nor idle, yet it
                // comes straight back for the next one: count it as claimed, or `enqueue`
                // would see the queue over capacity and refuse calls admission just let in.
                if registered {
                    st.remove_idle(worker);
                    registered = false;
                }
                st.pending += 1;
                claimed = true;
                drop(st);
                after_unlock(&inner);
                inner.telemetry.record_queue_time(waited);
                inner.fail_admitted(
                    entry.job,
                    BulkheadError::QueueTimeout {
                        name: inner.name.clone(),
                        waited,
                    },
                );
                continue;
            }
            None => {}
        }
        // Nothing to run: retire, or park until woken (or until keep-alive runs out).
        let now = inner.clock.now();
        let above_core = st.threads > st.core;
        let retire_at = deadline(idle_since, st.keep_alive);
        let expired = registered && above_core && retire_at.is_some_and(|at| now >= at);
        if st.shutting_down || st.threads > st.max || expired {
            if registered {
                st.remove_idle(worker);
            }
            st.threads -= 1;
            let waiter = (st.threads == 0)
                .then(|| st.shutdown_waiter.clone())
                .flatten();
            drop(st);
            after_unlock(&inner);
            if let Some(waiter) = waiter {
                waiter.unpark();
            }
            return;
        }
        if !registered {
            st.idle.push((worker, me.clone()));
            registered = true;
            idle_since = now;
        }
        let retire_at = if above_core {
            deadline(idle_since, st.keep_alive)
        } else {
            None
        };
        let claims = inner.idle_claims.load(Relaxed);
        drop(st);
        after_unlock(&inner);
        // Registered idle, stay awake for up to `IDLE_SPIN` before parking (crossbeam's
        // `Backoff`: ~127 spin hints, then yielding the CPU to anything that wants it): a
        // task enqueued meanwhile claims this worker and unparks it before it sleeps,
        // which costs neither side a futex call. CPU for latency, bounded; stops as soon
        // as some idle worker is claimed.
        let backoff = crossbeam_utils::Backoff::new();
        let awake_until = std::time::Instant::now() + IDLE_SPIN;
        while inner.idle_claims.load(Relaxed) == claims {
            backoff.snooze();
            if backoff.is_completed() && std::time::Instant::now() >= awake_until {
                break;
            }
        }
        park(&*inner.clock, retire_at);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Workers hold the `Inner`, so none is left; fail anything still queued.
        let now = self.clock.now();
        let remaining = self.state.lock().queue.drain_all(now);
        for entry in remaining {
            entry.job.fail(self.shut_down_error());
        }
    }
}

#[cfg(all(test, loom))]
#[path = "loom_tests.rs"]
mod loom_tests;

#[cfg(all(test, not(loom)))]
#[path = "pool_tests.rs"]
mod pool_tests;

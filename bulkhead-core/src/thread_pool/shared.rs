//! What a pool's handles and workers share: the admission counter, the policies, and the
//! pool state (queue, idle workers, thread counts) under one lock.
//!
//! Invariants:
//! * `admitted` (running + queued) is never above `limit` except transiently after a
//!   shrink, when it only goes down;
//! * `PoolState::pending` counts the workers claimed for a queued task (spawned or woken
//!   for it) that have not looked at the queue yet, so `queue.len() - pending` tasks have
//!   no worker (the queue's occupancy) — less, as the gauges report it, the `settled`
//!   workers (see `worker`), each of which takes a queued task before it can go idle;
//! * `threads` counts workers alive or being spawned; `spawning` those whose join handle
//!   is not recorded yet.
//!
//! * `direct` is true only while every worker is busy or about to look at the queue (none
//!   idle), the pool cannot grow (`threads ≥ max`) and it is not shutting down: then a
//!   caller may queue into the inbox without the lock, since some worker will come back for
//!   the queue. It is written only under the lock (`StateGuard`'s drop);
//! * every holder of the lock first empties the inbox into the queue (`lock_state`),
//!   claiming an idle worker for each task moved while one is idle, as `enqueue` does —
//!   except a worker looking for its next task while the queue takes from the inbox (plain
//!   FIFO, no age limit, not shutting down: `lock_state_for_worker`), which takes the
//!   queue's front or, the queue empty, the inbox's oldest task;
//! * `take_free` is true only while `direct` is, no worker is surplus (`threads == max`),
//!   the queue is empty and its policy is plain FIFO with no age limit: then the inbox's
//!   oldest task is the one the lock would give next, and a worker that has just run a
//!   task takes it from the inbox without the lock (`worker::Shared::take_free`). Written
//!   only under the lock. A worker that read it just before a lock holder cleared it takes
//!   one task as if just before that holder's change (a shrink, a shutdown, a policy with
//!   an age limit), or one a few instants newer than tasks that holder is moving into the
//!   queue: FIFO is kept up to tasks taken at the same instant.
//!
//! Lock order: `state` → inbox, clock (neither calls back into the pool). The room-waiter
//! list has its own lock and is never taken while `state` is held.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use bulkhead_config_types::{Kind, OnFull, ThreadPoolConfig};
use crossbeam_utils::CachePadded;

use super::inbox::Inbox;
use super::queue::{QueuePolicy, TaskQueue};
use super::room_waiters::RoomWaiters;
use crate::adaptive::calls::Controller;
use crate::clock::Clock;
use crate::frame::BulkheadId;
use crate::rate_limit::RateLimiter;
use crate::stats::{self, Counters};
use crate::sync::{Arc, AtomicBool, AtomicU8, AtomicU32, AtomicU64, Mutex, MutexGuard};
use crate::telemetry::{Load, Telemetry};
use crate::{BulkheadError, BulkheadName, Refused};

const ON_FULL_ABORT: u8 = 0;
const ON_FULL_CALLER_RUNS: u8 = 1;
const ON_FULL_WAIT: u8 = 2;

/// Everything the workers and the handles of one pool share.
pub(crate) struct Shared {
    pub name: BulkheadName,
    pub clock: Arc<dyn Clock>,
    pub counters: Counters,
    /// Calls admitted to the pool and not finished: running + queued. On a cache line of
    /// its own, like `state`: callers and workers write both for every task, and the
    /// read-mostly fields every call reads (clock, limit, policies) would share their misses.
    pub(super) admitted: CachePadded<AtomicU64>,
    /// `max_threads + queue_capacity`.
    pub(super) limit: AtomicU64,
    on_full_mode: AtomicU8,
    on_full_wait_nanos: AtomicU64,
    /// `max_queue_wait` in nanoseconds (`NO_QUEUE_WAIT_LIMIT`: none), read by queued
    /// callers outside the lock: each stops waiting for a worker at its deadline.
    max_queue_wait_nanos: AtomicU64,
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
    pub(super) state: CachePadded<Mutex<PoolState>>,
    /// Tasks queued without the lock (see `direct`).
    pub(super) inbox: Inbox,
    /// A caller may queue into the inbox without the lock (see the module's invariants).
    pub(super) direct: AtomicBool,
    /// A worker that ran a task may take the next one from the inbox without the lock
    /// (see the module's invariants). Written only under the lock, like `direct`.
    pub(super) take_free: AtomicBool,
    /// Workers that settled their last task without the lock and are watching the inbox
    /// (`worker`'s `Settled`): still counted in `PoolState::active`, they are not running
    /// anything, so the gauges and refusals take them off it (`PoolState::running`). On a
    /// cache line of its own: workers write it as the inbox runs dry, and the fields every
    /// caller reads (`direct`, the name, the shutdown flag) would share the misses.
    pub(super) settled: CachePadded<AtomicU32>,
    pub(super) thread_name_prefix: String,
    /// The adaptive limit on calls running on workers, if one is configured.
    pub(super) adaptive: Controller,
    /// The sizes as declared (last `resize`): an adaptive limit runs at most
    /// `max_threads` of them; the queue keeps its declared capacity.
    pub(super) declared: parking_lot::Mutex<ThreadPoolConfig>,
    /// Bumped (under `state`) each time `enqueue` claims an idle worker: a hint that lets
    /// an idle worker staying awake before it parks (see `worker`) stop early. Not part of
    /// any decision (the worker still parks, and the unpark token wakes it), so a plain std
    /// atomic, outside the loom models.
    pub(super) idle_claims: std::sync::atomic::AtomicU64,
    /// The queue's policy needs the time (`QueuePolicy::needs_time`), as of the last
    /// unlock (`StateGuard`'s drop): `enqueue` then reads the clock for a task it queues
    /// without the lock. A hint, like `idle_claims`: a task queued untimed as a policy that
    /// ages tasks comes in is stamped when a lock holder moves it into the queue
    /// (`TaskQueue::push`), so no decision depends on it (a plain std atomic, outside the
    /// loom models).
    pub(super) queue_ages: std::sync::atomic::AtomicBool,
    /// Partitions and per-key caps in front of admission (`crate::shares`).
    pub shares: crate::shares::Layers,
}

/// The pool's sizes, queue, workers and shutdown progress (under `Shared::state`).
pub(crate) struct PoolState {
    pub(super) core: u32,
    pub(super) max: u32,
    pub(super) capacity: u32,
    pub(super) keep_alive: Duration,
    pub(super) policy: QueuePolicy,
    pub(super) queue: TaskQueue,
    /// Worker threads alive (or being spawned).
    pub(super) threads: u32,
    pub(super) largest_pool_size: u32,
    /// Tasks a worker is running right now.
    pub(super) active: u32,
    /// Workers claimed for queued tasks (woken from idle, or just spawned) that have not yet
    /// looked at the queue: that many queued tasks already have a worker.
    pub(super) pending: u32,
    pub(super) largest_queued: u32,
    /// Idle workers, parked; the last one to go idle is woken first.
    pub(super) idle: Vec<(u64, Thread)>,
    pub(super) next_worker: u64,
    pub(super) handles: Vec<JoinHandle<()>>,
    /// Workers reserved whose `spawn` has not returned yet: their join handles are not in
    /// `handles` yet, so shutdown waits for this to reach 0 before it takes them.
    pub(super) spawning: u32,
    pub(super) shutting_down: bool,
    /// The threads waiting in `shutdown` (any number of callers at once).
    pub(super) shutdown_waiters: Vec<Thread>,
    /// What the shutdown found, once the first caller to finish waiting closed the pool:
    /// every caller reports the same.
    pub(super) shutdown_report: Option<super::lifecycle::ShutdownCounts>,
    /// A caller is closing the pool (failing the queue, joining workers) and will set
    /// `shutdown_report`.
    pub(super) shutdown_closing: bool,
    /// Tasks finished since shutdown began.
    pub(super) drained: u64,
}

impl PoolState {
    /// Tasks a worker is running: `active` without the `settled` workers (see
    /// `Shared::settled`), as read under the lock.
    pub(super) fn running(&self, settled: &AtomicU32) -> u32 {
        self.active.saturating_sub(settled.load(Relaxed))
    }

    /// Queued tasks without a worker, as the gauges and refusals report them: `unassigned`
    /// less the `settled` workers, each of which takes a queued task before it can go idle.
    pub(super) fn queued(&self, settled: &AtomicU32) -> u32 {
        self.unassigned().saturating_sub(settled.load(Relaxed))
    }

    /// Takes `me` out of the threads a shutdown's progress wakes.
    pub(super) fn forget_shutdown_waiter(&mut self, me: &Thread) {
        self.shutdown_waiters.retain(|t| t.id() != me.id());
    }

    /// Queued tasks no worker has been claimed for: the queue's occupancy.
    pub(super) fn unassigned(&self) -> u32 {
        let queued = u32::try_from(self.queue.len()).unwrap_or(u32::MAX);
        queued.saturating_sub(self.pending)
    }

    /// Counts a new worker (spawned outside the lock) as alive and claimed.
    pub(super) fn reserve_thread(&mut self) -> u64 {
        self.threads += 1;
        self.spawning += 1;
        self.pending += 1;
        self.largest_pool_size = self.largest_pool_size.max(self.threads);
        self.next_worker += 1;
        self.next_worker
    }

    /// Whether `worker` is still in the idle list (nobody claimed it).
    pub(super) fn is_idle(&self, worker: u64) -> bool {
        self.idle.iter().any(|(id, _)| *id == worker)
    }

    pub(super) fn remove_idle(&mut self, worker: u64) {
        if let Some(pos) = self.idle.iter().position(|(id, _)| *id == worker) {
            self.idle.swap_remove(pos);
        }
    }

    /// Whether a caller may queue without the lock (`Shared::direct`).
    fn allows_direct(&self) -> bool {
        self.idle.is_empty() && self.threads >= self.max && !self.shutting_down
    }

    /// Whether the queue's next task may come straight from the inbox: its order is plain
    /// FIFO with no age limit (nothing to decide by age or order) and the pool is not
    /// shutting down (a shutdown fails what is queued, under the lock).
    pub(super) fn takes_from_inbox(&self) -> bool {
        !self.policy.needs_time() && !self.shutting_down
    }

    /// Whether a worker that ran a task may take the next one from the inbox without the
    /// lock (`Shared::take_free`): callers queue there without it, no worker is surplus,
    /// the queue is empty (so the inbox's oldest task is the queue's next) and takes from
    /// the inbox.
    fn allows_take_free(&self, direct: bool) -> bool {
        direct && self.threads == self.max && self.queue.len() == 0 && self.takes_from_inbox()
    }

    /// The idle workers' handles (to wake them all: a resize or a shutdown).
    pub(super) fn idle_threads(&self) -> Vec<Thread> {
        self.idle.iter().map(|(_, t)| t.clone()).collect()
    }
}

/// The load a refusal is reported with, as admission sees it. `active` counts the workers
/// running a task *and* those claimed for a queued one — spawned or woken for it, not yet
/// started: admission counted their task's slot, and the pool has no other worker to give
/// it, so a full pool whose last workers are starting reads as grown to `max_threads`.
pub(super) fn refusal_load(st: &PoolState, settled: &AtomicU32) -> Load {
    let running = st.running(settled);
    Load {
        active: running
            .saturating_add(st.pending)
            .min(st.threads.max(running)),
        queued: st.queued(settled),
        limit: st.max,
    }
}

/// `now + wait`, or `None` ("never") when that is past what an `Instant` can hold
/// (`Duration::MAX` as an unbounded wait or timeout).
pub(crate) fn deadline(now: Instant, wait: Duration) -> Option<Instant> {
    now.checked_add(wait)
}

/// `max_queue_wait_nanos` without a limit.
const NO_QUEUE_WAIT_LIMIT: u64 = u64::MAX;

fn queue_wait_nanos(config: &ThreadPoolConfig) -> u64 {
    config.max_queue_wait.map_or(NO_QUEUE_WAIT_LIMIT, |d| {
        crate::clock::duration_nanos(d.as_std()).min(NO_QUEUE_WAIT_LIMIT - 1)
    })
}

/// Parks until `deadline` on the clock, or until unparked when there is none.
pub(super) fn park(clock: &dyn Clock, deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => clock.park_until(deadline),
        None => std::thread::park(),
    }
}

/// Normalised sizes: `max_threads` at least `core_threads` and at least 1.
pub(super) fn sizes(config: &ThreadPoolConfig) -> (u32, u32, u32) {
    let max = config.max_threads.max(config.core_threads).max(1);
    (config.core_threads, max, config.queue_capacity)
}

impl Shared {
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
        let shared = Shared {
            telemetry: Telemetry::new(name.clone(), Kind::ThreadPool, Arc::clone(&clock)),
            name,
            clock,
            counters: Counters::default(),
            admitted: CachePadded::new(AtomicU64::new(0)),
            limit: AtomicU64::new(u64::from(max) + u64::from(capacity)),
            on_full_mode: AtomicU8::new(ON_FULL_ABORT),
            on_full_wait_nanos: AtomicU64::new(0),
            max_queue_wait_nanos: AtomicU64::new(queue_wait_nanos(config)),
            shut_down: AtomicBool::new(false),
            caller_runs: AtomicU64::new(0),
            room: RoomWaiters::default(),
            rate,
            call_timeout: Default::default(),
            state: CachePadded::new(Mutex::new(PoolState {
                core,
                max,
                capacity,
                keep_alive: config.keep_alive.as_std(),
                policy: QueuePolicy::from_config(config),
                queue: TaskQueue::new(now),
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
                shutdown_waiters: Vec::new(),
                shutdown_report: None,
                shutdown_closing: false,
                drained: 0,
            })),
            inbox: Inbox::new(u64::from(max) + u64::from(capacity)),
            direct: AtomicBool::new(false),
            take_free: AtomicBool::new(false),
            settled: CachePadded::new(AtomicU32::new(0)),
            thread_name_prefix,
            idle_claims: std::sync::atomic::AtomicU64::new(0),
            queue_ages: std::sync::atomic::AtomicBool::new(
                QueuePolicy::from_config(config).needs_time(),
            ),
            shares: crate::shares::Layers::default(),
            adaptive: Controller::new(),
            declared: parking_lot::Mutex::new(config.clone()),
        };
        shared.store_on_full(config.on_full);
        shared
    }

    /// Locks the pool state and moves the inbox into the queue (after a `SeqCst` fence:
    /// a caller that queued into the inbox and then saw `direct` still set has its task
    /// moved by every later holder of the lock).
    ///
    /// A task is put into the inbox while no worker is idle, but one may go idle before the
    /// task is moved (the race `enqueue` and the worker's last look at the inbox settle).
    /// Such a worker is claimed for the task here, as `enqueue` would have claimed it under
    /// the lock, so `queue.len() - pending` stays the tasks without a worker: a snapshot
    /// never reports a task queued beside an idle worker that is about to take it.
    pub(super) fn lock_state(&self) -> StateGuard<'_> {
        let state = self.state.lock();
        crate::sync::seq_cst_fence();
        self.absorb_inbox(state)
    }

    /// Locks the pool state for a worker's look at the queue: like `lock_state`, except
    /// that while the queue takes from the inbox
    /// (`PoolState::takes_from_inbox`) the inbox stays where it is: the worker takes its
    /// oldest task there once the queue is empty (`worker::Shared::next_step`), and the
    /// queue stays empty, so the next worker to finish a task may take without the lock
    /// (`take_free`).
    pub(super) fn lock_state_for_worker(&self) -> StateGuard<'_> {
        let state = self.state.lock();
        crate::sync::seq_cst_fence();
        if state.takes_from_inbox() {
            return StateGuard {
                state,
                shared: self,
            };
        }
        self.absorb_inbox(state)
    }

    /// Moves the inbox into the locked queue, claiming idle workers (see `lock_state`).
    fn absorb_inbox<'a>(&'a self, mut state: MutexGuard<'a, PoolState>) -> StateGuard<'a> {
        // No `is_empty` first: under load the inbox has tasks, and each look at it reads
        // the end the callers write.
        let mut moved = false;
        let policy = state.policy;
        while let Some(entry) = self.inbox.pop() {
            moved = true;
            state.queue.push(entry, &policy, || self.clock.now());
            if let Some((_, worker)) = state.idle.pop() {
                state.pending += 1;
                self.idle_claims.fetch_add(1, Relaxed);
                worker.unpark();
            }
        }
        if moved {
            state.largest_queued = state.largest_queued.max(state.queued(&self.settled));
        }
        StateGuard {
            state,
            shared: self,
        }
    }

    #[inline]
    pub(crate) fn id(&self) -> BulkheadId {
        self as *const Shared as BulkheadId
    }

    /// Stores `max_queue_wait` for queued callers (a resize changes it live).
    pub(super) fn store_max_queue_wait(&self, config: &ThreadPoolConfig) {
        self.max_queue_wait_nanos
            .store(queue_wait_nanos(config), Relaxed);
    }

    /// How long a task may wait in the queue, if the config limits it.
    #[inline]
    pub(super) fn max_queue_wait(&self) -> Option<Duration> {
        let nanos = self.max_queue_wait_nanos.load(Relaxed);
        (nanos != NO_QUEUE_WAIT_LIMIT).then(|| Duration::from_nanos(nanos))
    }

    pub(super) fn store_on_full(&self, on_full: OnFull) {
        let (mode, nanos) = match on_full {
            OnFull::Abort => (ON_FULL_ABORT, 0),
            OnFull::CallerRuns => (ON_FULL_CALLER_RUNS, 0),
            OnFull::Wait(d) => (
                ON_FULL_WAIT,
                u64::try_from(d.as_std().as_nanos()).unwrap_or(u64::MAX),
            ),
            // `abort`, and any policy a later release adds (the crates are pinned to one).
            _ => (ON_FULL_ABORT, 0),
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

    /// Every slot is taken: a call would not be admitted now.
    #[inline]
    pub(crate) fn is_full(&self) -> bool {
        self.admitted.load(Relaxed) >= self.limit.load(Relaxed)
    }

    #[inline]
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Acquire)
    }

    /// Stops admission (the flag only; see `lifecycle` for the rest of a shutdown).
    pub(super) fn stop_admission(&self) {
        self.shut_down
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Calls admitted at most (running + queued): what partitions divide on a pool.
    #[inline]
    pub(crate) fn admission_limit(&self) -> u32 {
        u32::try_from(self.limit.load(Relaxed)).unwrap_or(u32::MAX)
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
            .on_refused(error, || refusal_load(&self.lock_state(), &self.settled));
    }

    /// The refusal of a call under `on_full: abort` when the pool is full, counted and
    /// reported: the error is built once, straight into the result (`refuse` would move it
    /// through every frame), and the report builds its own only when someone observes
    /// refusals. Like the semaphore's, the WARN event carries the bulkhead's name and kind
    /// as fields, outside a call span.
    #[inline]
    pub(crate) fn refused_full<I>(&self, input: I) -> Refused<I> {
        Refused {
            input,
            error: BulkheadError::Full {
                name: self.count_full(),
            },
        }
    }

    /// Counts (and reports, if anyone observes refusals) a `Full` refusal whose error the
    /// caller makes, from the name returned.
    #[inline]
    pub(crate) fn count_full(&self) -> crate::BulkheadName {
        if self.telemetry.refusals_observed() {
            self.report_full();
        }
        self.counters.refused[stats::FULL].fetch_add(1, Relaxed);
        self.name.clone()
    }

    #[cold]
    #[inline(never)]
    fn report_full(&self) {
        self.report_refusal(&self.full());
    }

    /// Counts a task a worker ran (or found cancelled).
    pub(super) fn count(&self, outcome: crate::events::CallOutcome) {
        use crate::events::CallOutcome;
        let counter = match outcome {
            CallOutcome::Completed => &self.counters.completed,
            CallOutcome::Panicked => &self.counters.panicked,
            CallOutcome::Cancelled => &self.counters.cancelled,
        };
        counter.fetch_add(1, Relaxed);
    }

    pub(crate) fn gauges(&self) -> Gauges {
        let st = self.lock_state();
        Gauges {
            max: st.max,
            capacity: st.capacity,
            active: st.running(&self.settled),
            queued: st.queued(&self.settled),
            threads: st.threads,
            largest_pool_size: st.largest_pool_size,
            largest_queued: st.largest_queued,
        }
    }
}

/// The locked pool state (see [`Shared::lock_state`]); unlocking refreshes `direct`.
pub(crate) struct StateGuard<'a> {
    state: MutexGuard<'a, PoolState>,
    shared: &'a Shared,
}

impl Deref for StateGuard<'_> {
    type Target = PoolState;
    fn deref(&self) -> &PoolState {
        &self.state
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut PoolState {
        &mut self.state
    }
}

impl Drop for StateGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Still under the lock (the guard field drops after this).
        let direct = self.state.allows_direct();
        if self.shared.direct.load(Relaxed) != direct {
            self.shared.direct.store(direct, SeqCst);
        }
        let take_free = self.state.allows_take_free(direct);
        if self.shared.take_free.load(Relaxed) != take_free {
            self.shared.take_free.store(take_free, Relaxed);
        }
        let ages = self.state.policy.needs_time();
        if self.shared.queue_ages.load(Relaxed) != ages {
            self.shared.queue_ages.store(ages, Relaxed);
        }
    }
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

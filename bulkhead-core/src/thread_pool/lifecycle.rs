//! The pool's life cycle: starting workers, live resize (declared or adaptive), shutdown.
//!
//! Invariants:
//! * a resize never blocks on running work and never cancels admitted work: surplus
//!   threads retire as their tasks end, a smaller queue refuses new work until it drains;
//! * a worker is counted (`threads`, `spawning`, `pending`) before its thread is spawned,
//!   outside the lock; a spawn the OS refuses is undone, and the tasks left without a worker
//!   (or beyond capacity) are failed with `Full`, their input handed back;
//! * shutdown stops admission first, waits (up to its timeout) for every worker to leave,
//!   then fails what is still queued with `ShutDown` and joins the workers that exited.

use std::sync::atomic::Ordering::SeqCst;
use std::thread::Thread;
use std::time::Duration;

use bulkhead_config_types::{AdaptiveConfig, ThreadPoolConfig};

use super::queue::QueuePolicy;
use super::shared::{Shared, deadline, park, sizes};
use super::worker::worker_main;
use crate::sync::Arc;

/// Counts gathered by [`Shared::shutdown`].
#[derive(Clone, Copy)]
pub(crate) struct ShutdownCounts {
    pub completed: u64,
    pub failed_queued: u64,
    pub still_running: u32,
    pub joined: u32,
}

impl Shared {
    pub(super) fn spawn_worker(self: &Arc<Self>, number: u64) {
        let shared = Arc::clone(self);
        // A thread name cannot hold NUL (`Builder::spawn` would fail every time, and the pool
        // would refuse every call): the registry refuses such a name or prefix, and a pool
        // built directly gets U+FFFD in its place.
        let name = format!("{}{number}", self.thread_name_prefix).replace('\0', "\u{fffd}");
        #[cfg(all(test, not(loom)))]
        let os_refuses = super::pool_tests::spawn_fails();
        #[cfg(not(all(test, not(loom))))]
        let os_refuses = false;
        let spawned = if os_refuses {
            Err(std::io::Error::other(
                "no thread (a test stands in for the OS)",
            ))
        } else {
            std::thread::Builder::new()
                .name(name)
                .spawn(move || worker_main(shared, number))
        };
        match spawned {
            Ok(handle) => {
                #[cfg(all(test, not(loom)))]
                super::pool_tests::after_spawn(self);
                let waiter = {
                    let mut st = self.lock_state();
                    st.handles.retain(|h| !h.is_finished());
                    st.handles.push(handle);
                    st.spawning -= 1;
                    st.shutdown_waiters.clone()
                };
                // A shutdown waiting for this handle re-checks (a spurious wake otherwise).
                for waiter in waiter {
                    waiter.unpark();
                }
            }
            Err(error) => {
                tracing::warn!(bulkhead = %self.name, %error, "could not start a worker thread");
                let mut failed = Vec::new();
                let waiter = {
                    let mut st = self.lock_state();
                    st.threads -= 1;
                    st.spawning -= 1;
                    st.pending = st.pending.saturating_sub(1);
                    // Tasks left without a worker, or beyond capacity, are refused.
                    while (st.threads == 0 && st.queue.len() > 0)
                        || st.queued(&self.settled) > st.capacity
                    {
                        match st.queue.pop_newest() {
                            Some(entry) => failed.push(entry),
                            None => break,
                        }
                    }
                    st.shutdown_waiters.clone()
                };
                for waiter in waiter {
                    waiter.unpark();
                }
                for entry in failed {
                    self.fail_admitted(entry.job, self.full());
                }
            }
        }
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
    pub(super) fn apply_limit(self: &Arc<Self>, limit: u32) {
        let mut config = self.declared.lock().clone();
        let (_, max, _) = sizes(&config);
        config.max_threads = limit.clamp(1, max);
        config.core_threads = config.core_threads.min(config.max_threads);
        self.resize(&config);
    }

    /// Applies new sizes and policies live; never blocks on running work.
    pub(crate) fn resize(self: &Arc<Self>, config: &ThreadPoolConfig) {
        let (core, max, capacity) = sizes(config);
        self.store_on_full(config.on_full);
        self.store_max_queue_wait(config);
        let (spawn, idle) = {
            let mut st = self.lock_state();
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
            (spawn, st.idle_threads())
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
        self.stop_admission();
        let idle: Vec<Thread> = {
            let mut st = self.lock_state();
            if !st.shutting_down {
                st.shutting_down = true;
                st.drained = 0;
            }
            st.idle_threads()
        };
        for worker in idle {
            worker.unpark();
        }
        self.room.wake_all();
    }

    /// Stops admission, waits until every worker has left or `deadline` passes, then
    /// closes the pool once: fails what is still queued and joins the workers that exited.
    /// Any number of callers may wait at once: each returns by its own deadline (the first
    /// to get there closes the pool) and all return the same counts.
    pub(crate) fn shutdown(&self, timeout: Duration) -> ShutdownCounts {
        let deadline = deadline(self.clock.now(), timeout);
        self.begin_shutdown();
        let me = std::thread::current();
        loop {
            {
                let mut st = self.lock_state();
                if let Some(report) = st.shutdown_report {
                    st.forget_shutdown_waiter(&me);
                    return report;
                }
                if st.threads == 0 && st.spawning == 0 {
                    break;
                }
                if !st.shutdown_waiters.iter().any(|t| t.id() == me.id()) {
                    st.shutdown_waiters.push(me.clone());
                }
            }
            if deadline.is_some_and(|deadline| self.clock.now() >= deadline) {
                break;
            }
            park(&*self.clock, deadline);
        }
        self.close(&me)
    }

    /// Fails what is still queued and joins the workers that exited, once; a caller that
    /// finds another closing waits for its counts (the joins are of exited threads).
    fn close(&self, me: &Thread) -> ShutdownCounts {
        let now = self.clock.now();
        let (remaining, still_running, completed, handles, all_exited) = {
            let mut st = self.lock_state();
            loop {
                if let Some(report) = st.shutdown_report {
                    st.forget_shutdown_waiter(me);
                    return report;
                }
                if !st.shutdown_closing {
                    break;
                }
                if !st.shutdown_waiters.iter().any(|t| t.id() == me.id()) {
                    st.shutdown_waiters.push(me.clone());
                }
                drop(st);
                std::thread::park();
                st = self.lock_state();
            }
            st.shutdown_closing = true;
            st.forget_shutdown_waiter(me);
            let remaining = st.queue.drain_all(now);
            st.pending = 0;
            (
                remaining,
                st.running(&self.settled),
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
        let report = ShutdownCounts {
            completed,
            failed_queued,
            still_running,
            joined,
        };
        let waiters = {
            let mut st = self.lock_state();
            st.shutdown_report = Some(report);
            std::mem::take(&mut st.shutdown_waiters)
        };
        for waiter in waiters {
            waiter.unpark();
        }
        report
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Workers hold the `Shared`, so none is left; fail anything still queued.
        let now = self.clock.now();
        let remaining = self.lock_state().queue.drain_all(now);
        for entry in remaining {
            entry.job.fail(self.shut_down_error());
        }
    }
}

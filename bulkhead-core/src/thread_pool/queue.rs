//! The pool's task queue: bounded by the pool (not here), ordered FIFO or adaptive LIFO,
//! with the dequeue-time staleness checks of `max_queue_wait` and CoDel.
//!
//! The queue itself enforces no capacity: admission (the pool's running + queued counter)
//! does, so a capacity change never has to touch the queued tasks. Staleness is decided
//! when a task is taken, so an idle queue costs nothing — and, for `max_queue_wait`, also by
//! the task's caller at its deadline (`Shared::withdraw_stale`: a task still queued then is
//! removed and failed, so no caller waits past `max_queue_wait` for a worker to come).
//!
//! * **FIFO** (default): oldest first.
//! * **Adaptive LIFO**: oldest first while the queue drains; newest first while the queue is
//!   *standing* — it has not been empty for the standing interval (CoDel's `interval`, or
//!   [`DEFAULT_STANDING_INTERVAL`] without CoDel). Fresh requests, whose clients still wait,
//!   are served before stale ones (Facebook, "Fail at Scale").
//! * **`max_queue_wait`**: a task that waited longer is failed with `QueueTimeout` (by the
//!   worker that takes it, or by its caller at the deadline, whichever comes first).
//! * **CoDel** `{ target, interval }`: while the queue is standing, a task that waited
//!   longer than `target` is failed with `QueueTimeout`. (While the queue is not standing,
//!   every task in it arrived after the queue was last empty, less than `interval` ago, so
//!   Facebook's "otherwise limit the wait to `interval`" rule holds by construction.)

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bulkhead_config_types::{CodelConfig, QueueOrder, ThreadPoolConfig};

use super::job::JobRef;

/// The standing interval used by adaptive LIFO when CoDel is off (Facebook's 100 ms).
pub(crate) const DEFAULT_STANDING_INTERVAL: Duration = Duration::from_millis(100);

/// One queued task.
pub(crate) struct Entry {
    pub job: JobRef,
    /// Lets an async caller that gives up remove its own task.
    pub id: u64,
    /// When it was queued, on the pool's clock, if anything needed the time: a sampled
    /// queue time, its caller's `max_queue_wait` deadline, or an age policy of the queue
    /// (which stamps a task it receives without one: [`TaskQueue::push`]).
    pub enqueued: Option<Instant>,
}

/// How tasks are taken: order and staleness limits (live-reloadable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueuePolicy {
    pub order: QueueOrder,
    pub max_queue_wait: Option<Duration>,
    pub codel: Option<(Duration, Duration)>,
}

impl QueuePolicy {
    pub(crate) fn from_config(config: &ThreadPoolConfig) -> Self {
        QueuePolicy {
            order: config.queue_order,
            max_queue_wait: config.max_queue_wait.map(|d| d.as_std()),
            codel: config
                .codel
                .map(|CodelConfig { target, interval }| (target.as_std(), interval.as_std())),
        }
    }

    fn standing_interval(&self) -> Duration {
        self.codel
            .map_or(DEFAULT_STANDING_INTERVAL, |(_, interval)| interval)
    }

    /// True when some task may have to be failed or reordered by age, so the queue needs
    /// the time.
    pub(crate) fn needs_time(&self) -> bool {
        self.max_queue_wait.is_some()
            || self.codel.is_some()
            || self.order == QueueOrder::AdaptiveLifo
    }
}

/// What [`TaskQueue::take`] found.
pub(crate) enum Taken {
    /// Run this task.
    Run(Entry),
    /// This task waited too long (`waited`): fail it with `QueueTimeout`.
    Stale(Entry, Duration),
}

/// The queued tasks, oldest at the front.
pub(crate) struct TaskQueue {
    entries: VecDeque<Entry>,
    /// The last time the queue was seen empty (CoDel's and adaptive LIFO's "standing" clock).
    last_empty: Instant,
}

impl TaskQueue {
    pub(crate) fn new(now: Instant) -> Self {
        TaskQueue {
            entries: VecDeque::new(),
            last_empty: now,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Queues `entry`; under a `policy` that needs the time, a task not yet stamped is
    /// stamped `now()` (a task that came through the inbox untimed ages from here).
    #[inline]
    pub(crate) fn push(
        &mut self,
        mut entry: Entry,
        policy: &QueuePolicy,
        now: impl FnOnce() -> Instant,
    ) {
        if entry.enqueued.is_none() && policy.needs_time() {
            entry.enqueued = Some(now());
        }
        if self.entries.is_empty()
            && let Some(at) = entry.enqueued
        {
            // Empty until this very moment.
            self.last_empty = at;
        }
        self.entries.push_back(entry);
    }

    /// Takes the next task by `policy`; `now` is read only when the policy needs the time.
    /// Inlined: a plain FIFO (the common policy) is a pop from the front, the rest out of
    /// line.
    #[inline]
    pub(crate) fn take(
        &mut self,
        policy: &QueuePolicy,
        now: impl FnOnce() -> Instant,
    ) -> Option<Taken> {
        if !policy.needs_time() {
            return self.entries.pop_front().map(Taken::Run);
        }
        if self.entries.is_empty() {
            return None;
        }
        self.take_aged(policy, now())
    }

    /// `take` under a policy that needs the time, from a queue that is not empty.
    #[inline(never)]
    fn take_aged(&mut self, policy: &QueuePolicy, now: Instant) -> Option<Taken> {
        let standing = self.entries.front().is_some()
            && now.saturating_duration_since(self.last_empty) >= policy.standing_interval();
        let entry = if standing && policy.order == QueueOrder::AdaptiveLifo {
            self.entries.pop_back()
        } else {
            self.entries.pop_front()
        }?;
        if self.entries.is_empty() {
            self.last_empty = now;
        }
        // Untimed: queued before the policy needed the time; it is not aged.
        let waited = entry
            .enqueued
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        let too_old = policy.max_queue_wait.is_some_and(|max| waited > max)
            || (standing && policy.codel.is_some_and(|(target, _)| waited > target));
        Some(if too_old {
            Taken::Stale(entry, waited)
        } else {
            Taken::Run(entry)
        })
    }

    /// Removes the task `id` if it is still queued.
    pub(crate) fn remove(&mut self, id: u64, now: Instant) -> Option<Entry> {
        let pos = self.entries.iter().position(|e| e.id == id)?;
        let entry = self.entries.remove(pos);
        if self.entries.is_empty() {
            self.last_empty = now;
        }
        entry
    }

    /// Removes the most recently queued task (to undo an admission that found no room).
    pub(crate) fn pop_newest(&mut self) -> Option<Entry> {
        self.entries.pop_back()
    }

    /// Removes every queued task, oldest first.
    pub(crate) fn drain_all(&mut self, now: Instant) -> Vec<Entry> {
        self.last_empty = now;
        self.entries.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64, at: Instant) -> Entry {
        Entry {
            job: JobRef::nop(),
            id,
            enqueued: Some(at),
        }
    }

    fn ids(queue: &mut TaskQueue, now: Instant, policy: &QueuePolicy) -> Vec<(u64, bool)> {
        std::iter::from_fn(|| queue.take(policy, || now))
            .map(|t| match t {
                Taken::Run(e) => (e.id, true),
                Taken::Stale(e, _) => (e.id, false),
            })
            .collect()
    }

    const FIFO: QueuePolicy = QueuePolicy {
        order: QueueOrder::Fifo,
        max_queue_wait: None,
        codel: None,
    };

    #[test]
    fn adaptive_lifo_is_fifo_until_the_queue_stands() {
        let t0 = Instant::now();
        let policy = QueuePolicy {
            order: QueueOrder::AdaptiveLifo,
            ..FIFO
        };
        let mut q = TaskQueue::new(t0);
        (1..=3).for_each(|id| q.push(entry(id, t0), &policy, || t0));
        assert_eq!(ids(&mut q, t0, &policy), [(1, true), (2, true), (3, true)]);
        (1..=3).for_each(|id| q.push(entry(id, t0), &policy, || t0));
        let later = t0 + DEFAULT_STANDING_INTERVAL;
        assert_eq!(
            ids(&mut q, later, &policy),
            [(3, true), (2, true), (1, true)]
        );
    }

    #[test]
    fn codel_sheds_only_while_standing() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let policy = QueuePolicy {
            codel: Some((ms(5), ms(100))),
            ..FIFO
        };
        let mut q = TaskQueue::new(t0);
        q.push(entry(1, t0), &policy, || t0);
        // 50 ms old, but the queue was empty 50 ms ago: not standing, runs.
        assert_eq!(ids(&mut q, t0 + ms(50), &policy), [(1, true)]);
        q.push(entry(2, t0 + ms(50)), &policy, || t0);
        q.push(entry(3, t0 + ms(148)), &policy, || t0);
        // Standing since t0+50: 2 waited 100 ms > 5 ms, 3 waited 2 ms.
        assert_eq!(ids(&mut q, t0 + ms(150), &policy), [(2, false), (3, true)]);
    }

    #[test]
    fn max_queue_wait_fails_only_older_tasks() {
        let t0 = Instant::now();
        let policy = QueuePolicy {
            max_queue_wait: Some(Duration::from_millis(10)),
            ..FIFO
        };
        let mut q = TaskQueue::new(t0);
        q.push(entry(1, t0), &policy, || t0);
        q.push(entry(2, t0 + Duration::from_millis(5)), &policy, || t0);
        let now = t0 + Duration::from_millis(11);
        assert_eq!(ids(&mut q, now, &policy), [(1, false), (2, true)]);
    }

    /// A task queued untimed (nothing needed the time then) is stamped when it reaches a
    /// queue whose policy ages tasks, and aged from there; one that stays untimed (its
    /// policy came later) is never failed for its age.
    #[test]
    fn untimed_tasks_age_from_when_an_age_policy_queues_them() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let policy = QueuePolicy {
            max_queue_wait: Some(ms(10)),
            ..FIFO
        };
        let untimed = |id| Entry {
            enqueued: None,
            ..entry(id, t0)
        };
        let mut q = TaskQueue::new(t0);
        q.push(untimed(1), &policy, || t0 + ms(5));
        q.push(untimed(2), &FIFO, || {
            unreachable!("plain FIFO reads no time")
        });
        // 1 waited 11 ms from its stamp; 2 has none, so it is not aged.
        assert_eq!(ids(&mut q, t0 + ms(16), &policy), [(1, false), (2, true)]);
    }
}

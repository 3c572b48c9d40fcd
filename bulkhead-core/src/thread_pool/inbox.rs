//! The inbox: tasks a caller queued without taking the pool's lock, waiting to be moved
//! into the task queue by the next holder of the lock.
//!
//! Invariants: entries come out in the order they went in; every holder of the pool's lock
//! empties the inbox into the queue before it looks at the queue (`Shared::lock_state`), so
//! the queue's policies (order, staleness, cancellation) see every task. The lock-free
//! queue is crossbeam-queue's `SegQueue` (a plain queue: a channel's disconnection and
//! receiver wake-ups cost a caller's push more and are not needed here); under loom a
//! mutex stands in for it (the models check the protocol around the inbox — the `direct`
//! flag and the fences — not crossbeam's own algorithm).

use super::queue::Entry;

/// An unbounded multi-producer queue of entries (bounded in practice by admission: every
/// entry holds a slot of the running + queued counter).
#[derive(Default)]
pub(crate) struct Inbox {
    #[cfg(not(loom))]
    entries: crossbeam_queue::SegQueue<Entry>,
    #[cfg(loom)]
    entries: crate::sync::Mutex<std::collections::VecDeque<Entry>>,
}

impl Inbox {
    /// Adds an entry at the back. Lock-free (outside loom).
    pub(crate) fn push(&self, entry: Entry) {
        #[cfg(not(loom))]
        {
            self.entries.push(entry);
        }
        #[cfg(loom)]
        self.entries.lock().push_back(entry);
    }

    /// Takes the entry at the front, if any.
    pub(crate) fn pop(&self) -> Option<Entry> {
        #[cfg(not(loom))]
        {
            self.entries.pop()
        }
        #[cfg(loom)]
        {
            self.entries.lock().pop_front()
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        #[cfg(not(loom))]
        {
            self.entries.is_empty()
        }
        #[cfg(loom)]
        {
            self.entries.lock().is_empty()
        }
    }
}

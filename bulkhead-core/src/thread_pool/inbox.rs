//! The inbox: tasks a caller queued without taking the pool's lock, waiting to be moved
//! into the task queue by the next holder of the lock.
//!
//! Invariants: entries come out in the order they went in; every holder of the pool's lock
//! empties the inbox into the queue before it looks at the queue (`Shared::lock_state`), so
//! the queue's policies (order, staleness, cancellation) see every task.
//!
//! The lock-free part is a ring (crossbeam-queue's `ArrayQueue`: a push or a pop is one
//! compare-and-swap on its index and a stamp on the slot, with no block to allocate or
//! free, as crossbeam's unbounded `SegQueue` has every 31 entries; a channel's
//! disconnection and receiver wake-ups are not needed here) sized to the pool's admission
//! limit when it is built, at most [`RING_MAX`]. Admission bounds the entries (each holds a
//! slot of the running + queued counter), so the ring holds them all unless the pool grew
//! past it (a resize) or a very large limit was capped: then the entries that do not fit
//! go to an overflow list under a mutex, and while it holds any, every push goes there too,
//! so the order is kept (pops take the ring, whose entries are all older, first). Two
//! pushes at once have no order between them, so one that read "no overflow" just before
//! another spilled may land in the ring after it: FIFO holds between pushes one of which
//! happened before the other. `spilled` counts the overflow's entries; it is written under
//! the overflow's mutex, and a pop or `is_empty` that reads 0 skips the mutex.
//!
//! Visibility for the pool's `direct` protocol (a caller pushes, fences, reads `direct`; a
//! worker going idle clears `direct`, fences, reads `is_empty`): a push's write — the
//! ring's slot stamp, or `spilled` — comes before the caller's `SeqCst` fence, and
//! `is_empty` reads both after the worker's, as it read the `SegQueue`'s indices before.
//!
//! Under loom a mutex stands in for the whole inbox (the models check the protocol around
//! the inbox — the `direct` flag and the fences — not the ring's own algorithm, which the
//! tests below exercise across threads, overflow included).

use super::queue::Entry;

/// The most entries the lock-free ring holds (48 bytes each: 48 KiB); a pool whose
/// admission limit is larger spills the rest into the overflow list.
#[cfg(not(loom))]
const RING_MAX: usize = 1024;

/// A multi-producer queue of entries (bounded in practice by admission: every entry holds
/// a slot of the running + queued counter).
pub(crate) struct Inbox {
    #[cfg(not(loom))]
    ring: crossbeam_queue::ArrayQueue<Entry>,
    /// Entries that did not fit in the ring, and every entry pushed while it holds any.
    #[cfg(not(loom))]
    overflow: parking_lot::Mutex<std::collections::VecDeque<Entry>>,
    /// `overflow.len()`, written under its mutex: 0 lets pushes use the ring and pops skip
    /// the mutex.
    #[cfg(not(loom))]
    spilled: std::sync::atomic::AtomicUsize,
    #[cfg(loom)]
    entries: crate::sync::Mutex<std::collections::VecDeque<Entry>>,
}

#[cfg(not(loom))]
use std::sync::atomic::Ordering::{Acquire, Release};

impl Inbox {
    /// An inbox for a pool admitting at most `limit` calls at once (running + queued).
    pub(crate) fn new(limit: u64) -> Self {
        #[cfg(not(loom))]
        {
            let ring = usize::try_from(limit).map_or(RING_MAX, |n| n.clamp(1, RING_MAX));
            Self::with_ring(ring)
        }
        #[cfg(loom)]
        {
            let _ = limit;
            Inbox {
                entries: Default::default(),
            }
        }
    }

    #[cfg(not(loom))]
    fn with_ring(ring: usize) -> Self {
        Inbox {
            ring: crossbeam_queue::ArrayQueue::new(ring),
            overflow: Default::default(),
            spilled: Default::default(),
        }
    }

    /// Adds an entry at the back. Lock-free (outside loom) unless the ring is full or its
    /// overflow holds entries.
    pub(crate) fn push(&self, entry: Entry) {
        #[cfg(not(loom))]
        {
            let entry = if self.spilled.load(Acquire) == 0 {
                match self.ring.push(entry) {
                    Ok(()) => return,
                    Err(entry) => entry,
                }
            } else {
                entry
            };
            self.spill(entry);
        }
        #[cfg(loom)]
        self.entries.lock().push_back(entry);
    }

    /// Puts an entry into the overflow list (the ring is full, or the list holds entries).
    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn spill(&self, entry: Entry) {
        let mut overflow = self.overflow.lock();
        overflow.push_back(entry);
        self.spilled.store(overflow.len(), Release);
    }

    /// Takes the entry at the front, if any.
    pub(crate) fn pop(&self) -> Option<Entry> {
        #[cfg(not(loom))]
        {
            match self.ring.pop() {
                Some(entry) => Some(entry),
                None if self.spilled.load(Acquire) == 0 => None,
                None => self.pop_spilled(),
            }
        }
        #[cfg(loom)]
        {
            self.entries.lock().pop_front()
        }
    }

    /// The overflow list's oldest entry, the ring being empty.
    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn pop_spilled(&self) -> Option<Entry> {
        let mut overflow = self.overflow.lock();
        // An entry that reached the ring while the list was being spilled into (a push
        // that read `spilled` as 0 just before) is as old: the ring first, as in `pop`.
        let entry = self.ring.pop().or_else(|| overflow.pop_front());
        self.spilled.store(overflow.len(), Release);
        entry
    }

    pub(crate) fn is_empty(&self) -> bool {
        #[cfg(not(loom))]
        {
            self.ring.is_empty() && self.spilled.load(Acquire) == 0
        }
        #[cfg(loom)]
        {
            self.entries.lock().is_empty()
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::thread_pool::job::JobRef;

    fn entry(id: u64) -> Entry {
        Entry {
            job: JobRef::nop(),
            id,
            enqueued: None,
        }
    }

    fn drain(inbox: &Inbox) -> Vec<u64> {
        std::iter::from_fn(|| inbox.pop()).map(|e| e.id).collect()
    }

    #[test]
    fn entries_past_the_ring_spill_over_and_come_out_in_order() {
        let inbox = Inbox::with_ring(2);
        assert!(inbox.is_empty());
        for id in 0..5 {
            inbox.push(entry(id));
        }
        assert!(!inbox.is_empty());
        assert_eq!(inbox.pop().map(|e| e.id), Some(0));
        // The ring has room again, but the overflow holds entries: this one goes after them.
        inbox.push(entry(5));
        assert_eq!(drain(&inbox), [1, 2, 3, 4, 5]);
        assert!(inbox.is_empty());
        // Drained, the ring takes pushes again.
        inbox.push(entry(6));
        assert_eq!(inbox.spilled.load(Acquire), 0);
        assert_eq!(drain(&inbox), [6]);
    }

    #[test]
    fn sized_to_the_admission_limit_within_bounds() {
        assert_eq!(Inbox::new(0).ring.capacity(), 1);
        assert_eq!(Inbox::new(104).ring.capacity(), 104);
        assert_eq!(Inbox::new(u64::MAX).ring.capacity(), RING_MAX);
    }

    /// Producers push increasing ids through a ring much smaller than what is in flight;
    /// one consumer pops concurrently: nothing is lost or duplicated, and each producer's
    /// entries come out in the order it pushed them.
    #[test]
    fn concurrent_pushes_through_a_small_ring_lose_nothing_and_keep_each_producers_order() {
        const PRODUCERS: u64 = 4;
        const EACH: u64 = 2_000;
        let inbox = Arc::new(Inbox::with_ring(4));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let inbox = Arc::clone(&inbox);
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        inbox.push(entry((p << 32) | i));
                    }
                })
            })
            .collect();
        let mut next = [0u64; PRODUCERS as usize];
        let mut seen = 0;
        while seen < PRODUCERS * EACH {
            match inbox.pop() {
                Some(e) => {
                    let (p, i) = ((e.id >> 32) as usize, e.id & 0xffff_ffff);
                    assert_eq!(i, next[p], "producer {p}'s entries out of order");
                    next[p] += 1;
                    seen += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        for producer in producers {
            producer.join().unwrap();
        }
        assert!(inbox.is_empty());
        assert_eq!(next, [EACH; PRODUCERS as usize]);
    }

    /// A pool resized past the ring it was built with (2 slots) queues 40 tasks without the
    /// lock while its one worker is held: they spill over, and every one runs, in order.
    #[test]
    fn a_pool_grown_past_its_ring_runs_every_queued_task_in_order() {
        use std::future::Future;
        use std::task::{Context, Waker};

        use bulkhead_config_types::ThreadPoolConfig;

        let sizes = |queue_capacity| ThreadPoolConfig {
            core_threads: 1,
            max_threads: 1,
            queue_capacity,
            ..ThreadPoolConfig::default()
        };
        let pool = crate::ThreadPoolBulkhead::new("inbox-grown", &sizes(1));
        pool.resize(&sizes(64));
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, running) = std::sync::mpsc::channel::<()>();
        let blocker = std::thread::spawn({
            let pool = pool.clone();
            move || {
                pool.call((), move |()| {
                    started.send(()).unwrap();
                    held.recv().unwrap();
                })
            }
        });
        running.recv().unwrap();
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut cx = Context::from_waker(Waker::noop());
        let calls: Vec<_> = (0..40u32)
            .map(|i| {
                let order = Arc::clone(&order);
                let mut call = Box::pin(pool.call_async(i, move |i| async move {
                    order.lock().push(i);
                    i
                }));
                // Admitted and queued at the first poll, in this order.
                assert!(call.as_mut().poll(&mut cx).is_pending());
                call
            })
            .collect();
        // (No snapshot here: its lock would move the inbox into the queue.)
        assert!(
            pool.shared().inbox.spilled.load(Acquire) > 0,
            "no task spilled over"
        );
        release.send(()).unwrap();
        for (i, call) in (0..40u32).zip(calls) {
            assert_eq!(futures_executor::block_on(call).unwrap(), i);
        }
        assert!(blocker.join().unwrap().is_ok());
        assert_eq!(*order.lock(), (0..40).collect::<Vec<_>>());
        let calls = pool.snapshot().calls;
        assert_eq!((calls.permitted, calls.completed), (41, 41));
    }
}

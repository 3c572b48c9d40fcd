//! Callers waiting for room in a full pool (`on_full: { wait }`): a FIFO list of parked
//! threads and pending tasks, woken one per freed slot.
//!
//! Lost wake-ups are impossible by the usual two-sided check: a waiter registers (bumping
//! `count`, SeqCst) *then* retries admission; a releaser frees its slot (SeqCst RMW on the
//! admission counter) *then* reads `count`. Either the waiter's retry sees the free slot, or
//! the releaser sees the waiter. The release path costs one atomic load when nobody waits.
//! (loom models `SeqCst` accesses as `AcqRel`, so the pair also carries a loom-only fence.)

use std::collections::VecDeque;
use std::sync::atomic::Ordering::SeqCst;
use std::task::Waker;
use std::thread::Thread;

use crate::sync::{AtomicU64, Mutex};

enum Waiter {
    Thread(Thread),
    Task(Waker),
}

impl Waiter {
    fn wake(self) {
        match self {
            Waiter::Thread(thread) => thread.unpark(),
            Waiter::Task(waker) => waker.wake(),
        }
    }
}

#[derive(Default)]
pub(crate) struct RoomWaiters {
    count: AtomicU64,
    list: Mutex<WaiterList>,
}

#[derive(Default)]
struct WaiterList {
    next_id: u64,
    waiters: VecDeque<(u64, Waiter)>,
}

impl RoomWaiters {
    /// How many callers wait right now.
    pub(crate) fn len(&self) -> u64 {
        self.count.load(SeqCst)
    }

    /// Registers the current thread; returns its ticket.
    pub(crate) fn register_thread(&self) -> u64 {
        self.register(Waiter::Thread(std::thread::current()))
    }

    /// Registers a task's waker, or refreshes it if `ticket` is still registered.
    pub(crate) fn register_task(&self, ticket: Option<u64>, waker: &Waker) -> u64 {
        if let Some(ticket) = ticket {
            let mut list = self.list.lock();
            if let Some((_, Waiter::Task(old))) =
                list.waiters.iter_mut().find(|(id, _)| *id == ticket)
            {
                old.clone_from(waker);
                return ticket;
            }
        }
        self.register(Waiter::Task(waker.clone()))
    }

    fn register(&self, waiter: Waiter) -> u64 {
        let mut list = self.list.lock();
        let id = list.next_id;
        list.next_id += 1;
        list.waiters.push_back((id, waiter));
        self.count.fetch_add(1, SeqCst);
        crate::sync::seq_cst_fence_for_loom();
        id
    }

    /// Removes `ticket`; false when a releaser already took it (and woke it).
    pub(crate) fn deregister(&self, ticket: u64) -> bool {
        let mut list = self.list.lock();
        match list.waiters.iter().position(|(id, _)| *id == ticket) {
            Some(pos) => {
                list.waiters.remove(pos);
                self.count.fetch_sub(1, SeqCst);
                true
            }
            None => false,
        }
    }

    /// Wakes the longest-waiting caller, if any. Inlined: with nobody waiting (every
    /// release of a pool that does not wait for room) it is one load.
    #[inline]
    pub(crate) fn wake_one(&self) {
        crate::sync::seq_cst_fence_for_loom();
        if self.count.load(SeqCst) != 0 {
            self.wake_first();
        }
    }

    /// `wake_one` with someone waiting (as far as `count` said).
    #[cold]
    #[inline(never)]
    fn wake_first(&self) {
        let waiter = {
            let mut list = self.list.lock();
            let waiter = list.waiters.pop_front();
            if waiter.is_some() {
                self.count.fetch_sub(1, SeqCst);
            }
            waiter
        };
        if let Some((_, waiter)) = waiter {
            waiter.wake();
        }
    }

    /// Wakes every waiting caller (capacity grew, or shutdown).
    pub(crate) fn wake_all(&self) {
        let waiters: Vec<_> = {
            let mut list = self.list.lock();
            self.count.store(0, SeqCst);
            list.waiters.drain(..).collect()
        };
        for (_, waiter) in waiters {
            waiter.wake();
        }
    }
}

/// A caller's registration in the room, held while it decides whether to wait on: it
/// leaves the room however that ends — by [`leave`](Self::leave), or dropped while
/// unwinding (a clock or waker that panics) — and a wake-up a releaser had already handed
/// it is passed on to the next waiter, so no slot or wake-up is lost.
pub(crate) struct Ticket<'a> {
    room: &'a RoomWaiters,
    id: Option<u64>,
}

impl<'a> Ticket<'a> {
    /// Holds `id` (a registration made before, or none yet).
    pub(crate) fn held(room: &'a RoomWaiters, id: Option<u64>) -> Self {
        Ticket { room, id }
    }

    /// The registration held, if any.
    pub(crate) fn id(&self) -> Option<u64> {
        self.id
    }

    /// Holds `id` from now on (what `register_*` returned).
    pub(crate) fn set(&mut self, id: u64) {
        self.id = Some(id);
    }

    /// Leaves the room; false when a releaser already took the registration (and woke it).
    pub(crate) fn leave(mut self) -> bool {
        self.id.take().is_none_or(|id| self.room.deregister(id))
    }

    /// Keeps the registration past this guard (an async call that waits on): its id.
    pub(crate) fn keep(mut self) -> Option<u64> {
        self.id.take()
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take()
            && !self.room.deregister(id)
        {
            self.room.wake_one();
        }
    }
}

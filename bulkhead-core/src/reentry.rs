//! Re-entry detection: which bulkheads the current thread is inside.
//!
//! A call that enters a bulkhead it is already inside — a pool task submitting to its own
//! pool and waiting, the nested-pool deadlock — runs inline on the current thread or
//! permit instead of waiting for a slot it holds itself. Each thread keeps a small multiset
//! of the bulkhead ids it is inside: a semaphore permit adds its id while held on that
//! thread, an async call adds it for the duration of each poll, a pool worker adds it while
//! it runs a task.
//!
//! This sits on every admission's fast path, so the marks live in a thread-local with no
//! destructor (a fixed inline array; plain loads and stores, no registration, no borrow
//! flag); only threads nested more than [`INLINE`] deep spill into a growable overflow.
//!
//! Invariant: `is_inside(id)` is true exactly while at least one [`Entered`] guard for `id`
//! made on this thread is alive. Guards may be dropped in any order.

use std::cell::{Cell, RefCell};

/// Marks kept without allocation; deeper nesting spills into `OVERFLOW`.
const INLINE: usize = 8;

/// The inline marks of one thread. No `Drop`, so the thread-local needs no destructor.
struct Marks {
    /// How many marks are in `ids` (at most [`INLINE`]).
    len: Cell<usize>,
    ids: [Cell<BulkheadId>; INLINE],
    /// True while `OVERFLOW` holds marks.
    spilled: Cell<bool>,
}

#[cfg(not(loom))]
thread_local! {
    static MARKS: Marks = const {
        Marks {
            len: Cell::new(0),
            ids: [const { Cell::new(0) }; INLINE],
            spilled: Cell::new(false),
        }
    };
    static OVERFLOW: RefCell<Vec<BulkheadId>> = const { RefCell::new(Vec::new()) };
}

// Under loom every model thread runs on one OS thread: its own thread-locals keep the
// marks per model thread (a sync permit held across a switch is not seen by the others).
#[cfg(loom)]
loom::thread_local! {
    static MARKS: Marks = Marks {
        len: Cell::new(0),
        ids: [const { Cell::new(0) }; INLINE],
        spilled: Cell::new(false),
    };
    static OVERFLOW: RefCell<Vec<BulkheadId>> = RefCell::new(Vec::new());
}

/// Identifies one bulkhead instance for re-entry checks (its shared state's address).
pub(crate) type BulkheadId = usize;

/// True when the current thread is inside bulkhead `id`.
#[inline]
pub(crate) fn is_inside(id: BulkheadId) -> bool {
    MARKS.with(|marks| contains(marks, id))
}

/// A mark that the current thread is inside a bulkhead, removed when dropped.
#[must_use = "the thread counts as inside the bulkhead only while the guard lives"]
pub(crate) struct Entered {
    id: BulkheadId,
    // The mark is per thread: the guard must be dropped on the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Marks the current thread as inside bulkhead `id` until the guard drops.
#[inline]
pub(crate) fn enter(id: BulkheadId) -> Entered {
    MARKS.with(|marks| push(marks, id));
    Entered::made(id)
}

/// Removes one mark for `id` made on this thread by a guard that was
/// [`forget`](Entered::forget)-ed.
#[inline]
pub(crate) fn leave(id: BulkheadId) {
    MARKS.with(|marks| {
        let len = marks.len.get();
        // Usually the mark just added: look from the end.
        if let Some(pos) = marks.ids[..len].iter().rposition(|m| m.get() == id) {
            marks.ids[pos].set(marks.ids[len - 1].get());
            marks.len.set(len - 1);
            if marks.spilled.get() {
                refill_from_overflow(marks);
            }
        } else if marks.spilled.get() {
            leave_spilled(marks, id);
        }
    });
}

/// Removes a mark for `id` from the overflow. Out of line, like every access to
/// `OVERFLOW` (which has a destructor to register): it keeps the closures given to
/// `MARKS.with` small enough for `with` to inline, so the marks are a direct thread-local
/// access.
#[cold]
#[inline(never)]
fn leave_spilled(marks: &Marks, id: BulkheadId) {
    OVERFLOW.with(|o| {
        let mut overflow = o.borrow_mut();
        if let Some(pos) = overflow.iter().rposition(|&m| m == id) {
            overflow.swap_remove(pos);
        }
        marks.spilled.set(!overflow.is_empty());
    });
}

impl Entered {
    fn made(id: BulkheadId) -> Self {
        Entered {
            id,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Keeps the mark but drops the guard: whoever owns the mark now calls [`leave`] on
    /// this thread. Lets a permit carry its mark without also carrying a guard.
    #[inline]
    pub(crate) fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for Entered {
    #[inline]
    fn drop(&mut self) {
        leave(self.id);
    }
}

#[inline]
fn contains(marks: &Marks, id: BulkheadId) -> bool {
    let len = marks.len.get();
    marks.ids[..len].iter().any(|m| m.get() == id) || (marks.spilled.get() && spilled_contains(id))
}

/// Whether the overflow holds a mark for `id` (out of line: see [`leave_spilled`]).
#[cold]
#[inline(never)]
fn spilled_contains(id: BulkheadId) -> bool {
    OVERFLOW.with(|o| o.borrow().contains(&id))
}

#[inline]
fn push(marks: &Marks, id: BulkheadId) {
    let len = marks.len.get();
    if len < INLINE {
        marks.ids[len].set(id);
        marks.len.set(len + 1);
    } else {
        spill(marks, id);
    }
}

/// Adds a mark past the inline array (out of line: see [`leave_spilled`]).
#[cold]
#[inline(never)]
fn spill(marks: &Marks, id: BulkheadId) {
    OVERFLOW.with(|o| o.borrow_mut().push(id));
    marks.spilled.set(true);
}

/// Moves one spilled mark into the inline slot just freed.
#[cold]
#[inline(never)]
fn refill_from_overflow(marks: &Marks) {
    OVERFLOW.with(|o| {
        let mut overflow = o.borrow_mut();
        if let Some(id) = overflow.pop() {
            let len = marks.len.get();
            marks.ids[len].set(id);
            marks.len.set(len + 1);
        }
        marks.spilled.set(!overflow.is_empty());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_marks_unwind_in_any_order() {
        assert!(!is_inside(1));
        let a = enter(1);
        let b = enter(2);
        assert!(is_inside(1) && is_inside(2));
        drop(a);
        assert!(!is_inside(1) && is_inside(2));
        drop(b);
        assert!(!is_inside(2));
    }

    #[test]
    fn marks_are_per_thread() {
        let _a = enter(7);
        std::thread::spawn(|| assert!(!is_inside(7)))
            .join()
            .unwrap();
        assert!(is_inside(7));
    }

    #[test]
    fn the_same_id_entered_twice_stays_inside_until_both_leave() {
        let outer = enter(3);
        let inner = enter(3);
        drop(outer);
        assert!(is_inside(3));
        drop(inner);
        assert!(!is_inside(3));
    }

    #[test]
    fn marks_deeper_than_the_inline_array_spill_and_come_back() {
        let ids: Vec<BulkheadId> = (100..100 + 3 * INLINE).collect();
        let mut guards: Vec<Entered> = ids.iter().map(|&id| enter(id)).collect();
        assert!(ids.iter().all(|&id| is_inside(id)));
        // Leave from the front (inline marks first), so spilled marks must move inline.
        for (i, guard) in guards.drain(..INLINE + 2).enumerate() {
            drop(guard);
            assert!(!is_inside(ids[i]));
            assert!(ids[i + 1..].iter().all(|&id| is_inside(id)));
        }
        // Then from the back.
        while let Some(guard) = guards.pop() {
            let id = guard.id;
            drop(guard);
            assert!(!is_inside(id));
        }
        assert!(ids.iter().all(|&id| !is_inside(id)));
    }
}

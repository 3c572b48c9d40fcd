//! Re-entry detection: which bulkheads the current thread is inside.
//!
//! A call that enters a bulkhead it is already inside — a pool task submitting to its own
//! pool and waiting, seed 001's nested-pool deadlock — runs inline on the current thread or
//! permit instead of waiting for a slot it holds itself. Each thread keeps a small stack of
//! the bulkhead ids it is inside: a semaphore permit pushes while held on that thread, an
//! async call pushes for the duration of each poll, a pool worker pushes while it runs a task.

use std::cell::RefCell;

thread_local! {
    static ENTERED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Identifies one bulkhead instance for re-entry checks (its shared state's address).
pub(crate) type BulkheadId = usize;

/// True when the current thread is inside bulkhead `id`.
pub(crate) fn is_inside(id: BulkheadId) -> bool {
    ENTERED.with(|e| e.borrow().contains(&id))
}

/// Marks the current thread as inside bulkhead `id` until the guard drops.
#[must_use = "the thread counts as inside the bulkhead only while the guard lives"]
pub(crate) struct Entered {
    id: BulkheadId,
    // The mark is per thread: the guard must be dropped on the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

pub(crate) fn enter(id: BulkheadId) -> Entered {
    ENTERED.with(|e| e.borrow_mut().push(id));
    Entered {
        id,
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        ENTERED.with(|e| {
            let mut stack = e.borrow_mut();
            if let Some(pos) = stack.iter().rposition(|&x| x == self.id) {
                stack.remove(pos);
            }
        });
    }
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
}

//! The calls the current thread is inside, innermost last: one **frame** per call, which
//! carries everything a call keeps on its thread — the re-entry mark, the adaptive sample
//! and the span.
//!
//! A frame is pushed by
//! * a sync permit, from its admission to its release ([`begin_sync`] / [`end_sync`]): it
//!   may also carry the call's adaptive start ([`ADAPTIVE`], timed or not) and its scope
//!   (span and listener start, [`SCOPED`]);
//! * each poll of an async body under a permit, an owned permit's scope, a pool worker
//!   (for its whole life, and again around each task of an adaptive pool), and a
//!   caller-runs call ([`enter`], a guard).
//!
//! What reads the frames:
//! * **re-entry** ([`is_inside`]): a call that enters a bulkhead its thread is already inside
//!   — a pool task submitting to its own pool and waiting, the nested-pool deadlock — runs
//!   inline instead of waiting for a slot it holds itself;
//! * **adaptive marks** ([`mark_overloaded`]): the innermost frame of an adaptive call is
//!   marked overloaded, and its call counts as a drop;
//! * **telemetry**: a sync call's scope is found through its frame when the permit is
//!   returned (a sync permit keeps no scope of its own: no drop glue on its fast path).
//!
//! This sits on every admission's fast path, so the frames live in a thread-local with no
//! destructor: a fixed inline array of plain cells (a push or a pop is a few word-sized
//! loads and stores; no registration, no borrow flag). Only a thread inside more than
//! [`INLINE`] calls at once spills frames into a growable overflow, and only a call whose
//! span tracing records (or that listeners hear of) stores its scope there too.
//!
//! Invariants:
//! * `is_inside(id)` is true exactly while a frame of `id` made on this thread is alive.
//! * A frame is removed by the call that pushed it, on the thread that pushed it; frames
//!   keep their order (a removal from the middle shifts the inner ones down). Guards of
//!   [`enter`] are dropped innermost first; a sync permit's frame may be removed out of
//!   order (permits dropped in any order).

use std::cell::{Cell, RefCell};

use crate::adaptive::calls::CallStart;
use crate::telemetry::CallScope;

/// Identifies one bulkhead instance (its shared state's address).
pub(crate) type BulkheadId = usize;

/// Frames kept without allocation; deeper nesting spills into the overflow.
const INLINE: usize = 8;

/// A frame's flags: a sync permit's frame (removed by [`end_sync`]), …
pub(crate) const SYNC: u8 = 1;
/// … of a call of an adaptive bulkhead ([`mark_overloaded`] marks the innermost), …
pub(crate) const ADAPTIVE: u8 = 2;
/// … timed (its start is kept in the frame), …
pub(crate) const TIMED: u8 = 4;
/// … marked overloaded, …
pub(crate) const OVERLOADED: u8 = 8;
/// … whose scope is kept in the overflow's scopes (tracing records its span, or listeners
/// exist).
pub(crate) const SCOPED: u8 = 16;

#[derive(Clone, Copy, Debug)]
struct Frame {
    id: BulkheadId,
    flags: u8,
    /// Read only when `flags` has [`TIMED`].
    start: CallStart,
}

/// This thread's frames: the first [`INLINE`] inline, in plain cells, the rest in
/// [`Spill::frames`].
struct Stack {
    /// How many frames there are, inline and spilled.
    len: Cell<usize>,
    ids: [Cell<BulkheadId>; INLINE],
    flags: [Cell<u8>; INLINE],
    starts: [Cell<CallStart>; INLINE],
}

/// What does not fit the inline frames: frames past [`INLINE`], and the scopes of sync
/// calls (by bulkhead id, innermost last). Reached only out of line.
struct Spill {
    frames: Vec<Frame>,
    scopes: Vec<(BulkheadId, Box<CallScope>)>,
}

#[cfg(not(loom))]
thread_local! {
    static STACK: Stack = const {
        Stack {
            len: Cell::new(0),
            ids: [const { Cell::new(0) }; INLINE],
            flags: [const { Cell::new(0) }; INLINE],
            starts: [const { Cell::new(CallStart::untimed()) }; INLINE],
        }
    };
    static SPILL: RefCell<Spill> = const {
        RefCell::new(Spill { frames: Vec::new(), scopes: Vec::new() })
    };
}

// Under loom every model thread runs on one OS thread: loom's thread-locals keep the frames
// per model thread (a sync permit held across a switch is not seen by the others).
#[cfg(loom)]
loom::thread_local! {
    static STACK: Stack = Stack {
        len: Cell::new(0),
        ids: [const { Cell::new(0) }; INLINE],
        flags: [const { Cell::new(0) }; INLINE],
        starts: [const { Cell::new(CallStart::untimed()) }; INLINE],
    };
    static SPILL: RefCell<Spill> = RefCell::new(Spill { frames: Vec::new(), scopes: Vec::new() });
}

/// Runs `f` on the overflow. Out of line: it keeps the closures given to `STACK.with`
/// small enough to inline, so the inline frames are a direct thread-local access.
#[cold]
#[inline(never)]
fn spilled<R>(f: impl FnOnce(&mut Spill) -> R) -> R {
    SPILL.with(|spill| f(&mut spill.borrow_mut()))
}

impl Stack {
    #[inline]
    fn get(&self, at: usize) -> Frame {
        if at >= INLINE {
            return spilled(|s| s.frames[at - INLINE]);
        }
        let flags = self.flags[at].get();
        Frame {
            id: self.ids[at].get(),
            flags,
            start: if flags & TIMED != 0 {
                self.starts[at].get()
            } else {
                CallStart::untimed()
            },
        }
    }

    #[inline]
    fn set(&self, at: usize, frame: Frame) {
        if at >= INLINE {
            return spilled(|s| s.frames[at - INLINE] = frame);
        }
        self.ids[at].set(frame.id);
        self.flags[at].set(frame.flags);
        if frame.flags & TIMED != 0 {
            self.starts[at].set(frame.start);
        }
    }

    /// Pushes a frame without a start.
    #[inline(always)]
    fn push(&self, id: BulkheadId, flags: u8) {
        let len = self.len.get();
        if len < INLINE {
            self.ids[len].set(id);
            self.flags[len].set(flags);
            self.len.set(len + 1);
        } else {
            push_deep(id, flags);
        }
    }

    /// The innermost frame of `id` whose flags `which` accepts, by position.
    fn find(&self, id: BulkheadId, which: impl Fn(u8) -> bool) -> Option<usize> {
        (0..self.len.get()).rev().find(|&at| {
            let frame = self.get(at);
            frame.id == id && which(frame.flags)
        })
    }

    /// Takes out the frame at `at`, the inner ones moving down.
    fn remove(&self, at: usize) -> Frame {
        let len = self.len.get();
        let frame = self.get(at);
        for i in at..len - 1 {
            self.set(i, self.get(i + 1));
        }
        if len > INLINE {
            spilled(|s| s.frames.pop());
        }
        self.len.set(len - 1);
        frame
    }

    /// Sets `flags` on the frame at `at`.
    #[inline]
    fn flag(&self, at: usize, flags: u8) {
        let mut frame = self.get(at);
        frame.flags |= flags;
        self.set(at, frame);
    }
}

/// [`Stack::push`] past the inline frames.
#[cold]
#[inline(never)]
fn push_deep(id: BulkheadId, flags: u8) {
    STACK.with(|stack| {
        spilled(|s| {
            s.frames.push(Frame {
                id,
                flags,
                start: CallStart::untimed(),
            });
        });
        stack.len.set(stack.len.get() + 1);
    });
}

/// True when the current thread is inside bulkhead `id`.
#[inline]
pub(crate) fn is_inside(id: BulkheadId) -> bool {
    STACK.with(|stack| {
        let len = stack.len.get();
        stack.ids[..len.min(INLINE)].iter().any(|m| m.get() == id)
            || (len > INLINE && spilled_contains(id))
    })
}

/// Whether the overflow holds a frame of `id` (out of line: see [`spilled`]).
#[cold]
#[inline(never)]
fn spilled_contains(id: BulkheadId) -> bool {
    spilled(|s| s.frames.iter().any(|f| f.id == id))
}

/// A frame of a call that is not a sync permit's, removed when dropped (or by
/// [`leave`](Entered::leave)).
#[must_use = "the thread counts as inside the bulkhead only while the guard lives"]
pub(crate) struct Entered {
    id: BulkheadId,
    // The frame is per thread: the guard must be dropped on the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Marks the current thread as inside bulkhead `id` until the guard drops: with
/// `adaptive`, [`mark_overloaded`] in between marks this frame ([`Entered::leave`] says
/// whether it did).
#[inline]
pub(crate) fn enter(id: BulkheadId, adaptive: bool) -> Entered {
    let flags = if adaptive { ADAPTIVE } else { 0 };
    STACK.with(|stack| stack.push(id, flags));
    Entered {
        id,
        _not_send: std::marker::PhantomData,
    }
}

impl Entered {
    /// Removes the frame: whether it was marked overloaded.
    #[inline]
    pub(crate) fn leave(self) -> bool {
        let overloaded = take_entered(self.id);
        std::mem::forget(self);
        overloaded
    }
}

impl Drop for Entered {
    #[inline]
    fn drop(&mut self) {
        take_entered(self.id);
    }
}

/// Removes the innermost frame of `id` that is not a sync permit's (usually the innermost
/// of all): whether it was marked overloaded.
#[inline]
fn take_entered(id: BulkheadId) -> bool {
    let flags = STACK.with(|stack| {
        let top = stack.len.get().wrapping_sub(1);
        match stack.flags.get(top) {
            Some(flags) if stack.ids[top].get() == id && flags.get() & SYNC == 0 => {
                stack.len.set(top);
                Some(flags.get())
            }
            _ => None,
        }
    });
    let flags = flags.unwrap_or_else(|| take_entered_slow(id));
    flags & OVERLOADED != 0
}

/// [`take_entered`] of a frame that is not the innermost, or not inline.
#[cold]
#[inline(never)]
fn take_entered_slow(id: BulkheadId) -> u8 {
    STACK.with(|stack| {
        stack
            .find(id, |flags| flags & SYNC == 0)
            .map_or(0, |at| stack.remove(at).flags)
    })
}

/// A sync permit of bulkhead `id` was taken on this thread: pushes its frame (with
/// `adaptive`, [`ADAPTIVE`]; then [`time_sync`] may give it a start). Always inlined: a
/// few stores to a direct thread-local.
#[inline(always)]
pub(crate) fn begin_sync(id: BulkheadId, adaptive: bool) {
    let flags = if adaptive { SYNC | ADAPTIVE } else { SYNC };
    STACK.with(|stack| stack.push(id, flags));
}

/// The start of the sync call whose frame [`begin_sync`] just pushed, drawn to be timed.
#[cold]
#[inline(never)]
pub(crate) fn time_sync(start: CallStart) {
    STACK.with(|stack| {
        let top = stack.len.get() - 1;
        let mut frame = stack.get(top);
        frame.flags |= TIMED;
        frame.start = start;
        stack.set(top, frame);
    });
}

/// Keeps `scope`, the scope of the sync call whose frame [`begin_sync`] just pushed, until
/// [`take_scope`].
#[cold]
#[inline(never)]
pub(crate) fn open_scope(id: BulkheadId, scope: Box<CallScope>) {
    spilled(|s| s.scopes.push((id, scope)));
    STACK.with(|stack| stack.flag(stack.len.get() - 1, SCOPED));
}

/// Runs `f` on the scope of the sync call whose frame was just pushed, if it has one (one
/// thread-local read otherwise).
#[inline]
pub(crate) fn with_top_scope(f: impl FnOnce(&CallScope)) {
    let scoped = STACK.with(|stack| {
        let top = stack.len.get().wrapping_sub(1);
        stack.flags.get(top).is_some_and(|f| f.get() & SCOPED != 0)
    });
    if scoped {
        spilled(|s| {
            if let Some((_, scope)) = s.scopes.last() {
                f(scope);
            }
        });
    }
}

/// How a sync permit's frame ended, when there is more to do than return the permit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SyncEnd {
    /// The frame's flags ([`ADAPTIVE`], [`TIMED`], [`OVERLOADED`], [`SCOPED`]).
    pub(crate) flags: u8,
    /// The call's start, timed only with [`TIMED`].
    pub(crate) start: CallStart,
}

/// The sync permit of bulkhead `id` taken on this thread is being returned: removes its
/// frame; `None` for a frame with nothing else to do (no scope; not adaptive, or an
/// adaptive call neither timed, nor marked, nor ended by a panic). Always inlined, like
/// [`begin_sync`]: usually the innermost frame, inline.
#[inline(always)]
pub(crate) fn end_sync(id: BulkheadId) -> Option<SyncEnd> {
    // The innermost frame's flags when it is this permit's (0 otherwise), taken in a
    // closure small enough for `with` to inline.
    let flags = STACK.with(|stack| {
        let top = stack.len.get().wrapping_sub(1);
        let flags = stack.flags.get(top).map_or(0, Cell::get);
        if flags & SYNC == 0 || stack.ids[top].get() != id {
            return 0;
        }
        stack.len.set(top);
        flags
    });
    // Nothing to record for an adaptive call neither timed nor marked, unless it panicked
    // (a drop).
    if flags == SYNC || (flags == SYNC | ADAPTIVE && !std::thread::panicking()) {
        return None;
    }
    end_sync_slow(id, flags)
}

/// [`end_sync`] with something to do, or of a frame that is not the innermost or not
/// inline (`flags` 0).
#[cold]
#[inline(never)]
fn end_sync_slow(id: BulkheadId, flags: u8) -> Option<SyncEnd> {
    STACK.with(|stack| {
        let frame = if flags == 0 {
            let at = stack.find(id, |flags| flags & SYNC != 0)?;
            stack.remove(at)
        } else {
            // Taken from the slot just above the frames left.
            let at = stack.len.get();
            Frame {
                id,
                flags,
                start: if flags & TIMED != 0 {
                    stack.starts[at].get()
                } else {
                    CallStart::untimed()
                },
            }
        };
        (frame.flags != SYNC).then_some(SyncEnd {
            flags: frame.flags,
            start: frame.start,
        })
    })
}

/// The scope [`open_scope`] kept for the sync call of bulkhead `id` that just ended.
#[cold]
#[inline(never)]
pub(crate) fn take_scope(id: BulkheadId) -> Option<Box<CallScope>> {
    spilled(|s| {
        let at = s.scopes.iter().rposition(|(open, _)| *open == id)?;
        Some(s.scopes.remove(at).1)
    })
}

/// Marks the innermost call of an adaptive bulkhead running on this thread (or, in async
/// code, on this task while it is polled) as **overloaded**: its outcome counts as a drop
/// for the adaptive limit, as a panic or a timeout does, whatever the body returns. Call
/// it when the dependency said it is overloaded (an HTTP 503, a "too busy" error).
/// Returns false when no call of an adaptive bulkhead is running here (nothing to mark).
///
/// ```
/// use bulkhead::config::{AdaptiveAlgorithm, AdaptiveConfig, BulkheadConfig, SemaphoreConfig};
/// use bulkhead::SemaphoreBulkhead;
/// use bulkhead::adaptive::mark_overloaded;
///
/// let search = SemaphoreBulkhead::new("search", &SemaphoreConfig::default());
/// search.configure(&BulkheadConfig {
///     adaptive: Some(AdaptiveConfig::new(AdaptiveAlgorithm::Aimd)),
///     ..BulkheadConfig::semaphore(SemaphoreConfig::default())
/// }).unwrap();
/// let marked = search.call(|| {
///     let status = 503; // what the dependency answered
///     status == 503 && mark_overloaded()
/// });
/// assert_eq!(marked, Ok(true));
/// assert!(!mark_overloaded(), "no call is running here now");
/// ```
pub fn mark_overloaded() -> bool {
    STACK.with(|stack| {
        let Some(at) = (0..stack.len.get())
            .rev()
            .find(|&at| stack.get(at).flags & ADAPTIVE != 0)
        else {
            return false;
        };
        stack.flag(at, OVERLOADED);
        true
    })
}

/// Marks the sync permit of adaptive bulkhead `id` held on this thread; false if none.
pub(crate) fn mark_sync(id: BulkheadId) -> bool {
    STACK.with(|stack| {
        let adaptive_sync = SYNC | ADAPTIVE;
        let Some(at) = stack.find(id, |flags| flags & adaptive_sync == adaptive_sync) else {
            return false;
        };
        stack.flag(at, OVERLOADED);
        true
    })
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// Pushes a timed sync frame for `id`.
    fn begin_timed(id: BulkheadId) {
        begin_sync(id, true);
        time_sync(CallStart::timed(Instant::now(), 1));
    }

    /// Ends `id`'s timed sync frame: whether it was marked.
    fn release(id: BulkheadId) -> Option<bool> {
        end_sync(id).map(|end| {
            assert!(end.start.is_timed() && end.flags & TIMED != 0, "{id}");
            end.flags & OVERLOADED != 0
        })
    }

    #[test]
    fn nested_frames_unwind_in_any_order() {
        assert!(!is_inside(1));
        begin_sync(1, false);
        let b = enter(2, false);
        assert!(is_inside(1) && is_inside(2));
        assert!(end_sync(1).is_none(), "a plain frame: nothing more to do");
        assert!(!is_inside(1) && is_inside(2));
        drop(b);
        assert!(!is_inside(2));
    }

    #[test]
    fn frames_are_per_thread() {
        let _a = enter(7, false);
        std::thread::spawn(|| assert!(!is_inside(7)))
            .join()
            .unwrap();
        assert!(is_inside(7));
    }

    #[test]
    fn the_same_id_entered_twice_stays_inside_until_both_leave() {
        begin_sync(3, false);
        let inner = enter(3, false);
        assert!(end_sync(3).is_none(), "the sync frame, not the inner one");
        assert!(is_inside(3));
        drop(inner);
        assert!(!is_inside(3));
    }

    #[test]
    fn frames_deeper_than_the_inline_array_spill_and_come_back() {
        let ids: Vec<BulkheadId> = (100..100 + 3 * INLINE).collect();
        for &id in &ids {
            begin_sync(id, false);
        }
        assert!(ids.iter().all(|&id| is_inside(id)));
        // Ended from the front (inline frames first), so spilled frames move inline.
        for (i, &id) in ids[..INLINE + 2].iter().enumerate() {
            assert!(end_sync(id).is_none());
            assert!(!is_inside(ids[i]));
            assert!(ids[i + 1..].iter().all(|&id| is_inside(id)));
        }
        // Then from the back.
        for &id in ids[INLINE + 2..].iter().rev() {
            assert!(end_sync(id).is_none());
            assert!(!is_inside(id));
        }
        assert!(ids.iter().all(|&id| !is_inside(id)));
    }

    #[test]
    fn marks_go_to_the_innermost_adaptive_call_and_survive_deep_nesting() {
        let depth = INLINE * 2 + 3;
        for id in 1..=depth {
            begin_timed(id);
        }
        // A plain frame inside: not adaptive, so not the one marked.
        let plain = enter(1000, false);
        assert!(mark_overloaded());
        drop(plain);
        assert!(mark_sync(3));
        // Released out of order: the outermost first, then the innermost.
        assert_eq!(release(1), Some(false));
        assert_eq!(release(depth), Some(true));
        assert_eq!(release(3), Some(true));
        for id in (2..depth).filter(|&id| id != 3) {
            assert_eq!(release(id), Some(false), "{id}");
        }
        assert!(end_sync(2).is_none(), "released twice");
        assert!(!mark_overloaded(), "no call left");
    }

    #[test]
    fn an_untimed_adaptive_call_reports_its_mark() {
        begin_sync(5, true);
        assert!(
            end_sync(5).is_none(),
            "untimed, unmarked: nothing to record"
        );
        begin_sync(5, true);
        assert!(mark_overloaded());
        let end = end_sync(5).expect("an adaptive frame");
        assert!(!end.start.is_timed() && end.flags & OVERLOADED != 0);
    }

    #[test]
    fn an_untimed_adaptive_call_ended_by_a_panic_reports_the_drop() {
        use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
        static ENDED: AtomicU8 = AtomicU8::new(0);
        struct EndOnUnwind;
        impl Drop for EndOnUnwind {
            fn drop(&mut self) {
                ENDED.store(end_sync(6).map_or(u8::MAX, |end| end.flags), SeqCst);
            }
        }
        let unwound = std::panic::catch_unwind(|| {
            begin_sync(6, true);
            let _end = EndOnUnwind;
            panic!("the body");
        });
        assert!(unwound.is_err());
        assert_eq!(
            ENDED.load(SeqCst),
            SYNC | ADAPTIVE,
            "a panic is a drop to record"
        );
        assert!(!is_inside(6));
    }

    #[test]
    fn an_adaptive_frame_is_marked_inside_and_gone_after() {
        begin_timed(7);
        let inside = enter(9, true);
        assert!(mark_overloaded());
        assert!(inside.leave(), "the poll's frame was marked");
        assert_eq!(release(7), Some(false), "not the permit's");
        let unwound = std::panic::catch_unwind(|| {
            let _inside = enter(9, true);
            panic!("body")
        });
        assert!(unwound.is_err());
        assert!(
            !is_inside(9) && !mark_overloaded(),
            "the frame went with the unwind"
        );
    }

    #[test]
    fn a_scope_is_found_through_its_frame() {
        let scope = Box::new(CallScope {
            span: tracing::Span::none(),
            started: None,
        });
        begin_sync(11, false);
        open_scope(11, scope);
        let mut seen = false;
        with_top_scope(|_| seen = true);
        assert!(seen);
        let end = end_sync(11).expect("a scoped frame");
        assert_eq!(end.flags, SYNC | SCOPED);
        assert!(take_scope(11).is_some());
        assert!(take_scope(11).is_none(), "taken once");
        begin_sync(12, false);
        with_top_scope(|_| panic!("no scope here"));
        assert!(end_sync(12).is_none());
    }
}

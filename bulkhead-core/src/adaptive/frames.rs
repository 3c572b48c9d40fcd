//! The adaptive calls running on this thread, innermost last, which [`mark_overloaded`]
//! marks: a frame per sync permit of an adaptive bulkhead (from admission to release,
//! holding the call's start) and per poll of an adaptive async body.
//!
//! Every adaptive call has a frame, timed or not, so a mark is never lost. The frames sit
//! on every adaptive call's path, so they live in a thread-local with no destructor (a
//! fixed inline array of plain cells); only threads inside more than [`INLINE`] adaptive
//! calls at once spill into a growable overflow.
//!
//! Invariant: a frame is removed by the call that pushed it, on the thread that pushed
//! it; frames keep their order (removal shifts the inner ones down).

use std::cell::{Cell, RefCell};

use super::calls::CallStart;
use super::sampling::draw;

/// Frames kept without allocation; deeper nesting spills into `OVERFLOW`.
const INLINE: usize = 8;

#[derive(Clone, Copy, Debug)]
struct Frame {
    bulkhead: usize,
    /// A sync permit's call and its start, or `None`: one poll of an async body.
    start: Option<CallStart>,
    overloaded: bool,
}

/// A frame's flags, inline: a sync permit's frame, …
const SYNC: u8 = 1;
/// … whose call is timed (its start is in `starts`), …
const TIMED: u8 = 2;
/// … marked overloaded.
const OVERLOADED: u8 = 4;

/// This thread's frames: the first [`INLINE`] inline, in plain cells (a push or a pop is
/// a few word-sized loads and stores), the rest in `OVERFLOW`.
struct Frames {
    len: Cell<usize>,
    ids: [Cell<usize>; INLINE],
    flags: [Cell<u8>; INLINE],
    /// The start of a timed sync call, read only when its frame has [`TIMED`].
    starts: [Cell<CallStart>; INLINE],
}

thread_local! {
    static FRAMES: Frames = const {
        Frames {
            len: Cell::new(0),
            ids: [const { Cell::new(0) }; INLINE],
            flags: [const { Cell::new(0) }; INLINE],
            starts: [const { Cell::new(CallStart::untimed()) }; INLINE],
        }
    };
    static OVERFLOW: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

impl Frames {
    #[inline]
    fn get(&self, at: usize) -> Frame {
        if at >= INLINE {
            return spilled(|o| o[at - INLINE]);
        }
        let flags = self.flags[at].get();
        let start = match flags & (SYNC | TIMED) {
            0 => None,
            SYNC => Some(CallStart::untimed()),
            _ => Some(self.starts[at].get()),
        };
        Frame {
            bulkhead: self.ids[at].get(),
            start,
            overloaded: flags & OVERLOADED != 0,
        }
    }

    #[inline]
    fn set(&self, at: usize, frame: Frame) {
        if at >= INLINE {
            return spilled(|o| o[at - INLINE] = frame);
        }
        let mut flags = 0;
        if let Some(start) = frame.start {
            flags |= SYNC;
            if start.is_timed() {
                flags |= TIMED;
                self.starts[at].set(start);
            }
        }
        if frame.overloaded {
            flags |= OVERLOADED;
        }
        self.ids[at].set(frame.bulkhead);
        self.flags[at].set(flags);
    }

    #[inline]
    fn push(&self, frame: Frame) {
        let len = self.len.get();
        if len < INLINE {
            self.set(len, frame);
        } else {
            spilled(|o| o.push(frame));
        }
        self.len.set(len + 1);
    }

    /// The innermost frame that `which` accepts, by position.
    #[inline]
    fn find(&self, which: impl Fn(&Frame) -> bool) -> Option<usize> {
        (0..self.len.get()).rev().find(|&at| which(&self.get(at)))
    }

    /// Takes out the frame at `at`, the inner ones moving down.
    #[inline]
    fn remove(&self, at: usize) -> Frame {
        let len = self.len.get();
        let frame = self.get(at);
        for i in at..len - 1 {
            self.set(i, self.get(i + 1));
        }
        if len > INLINE {
            spilled(|o| o.pop());
        }
        self.len.set(len - 1);
        frame
    }
}

/// Runs `f` on the overflow. Out of line: it keeps the closures given to `FRAMES.with`
/// small enough to inline, so the frames are a direct thread-local access.
#[cold]
#[inline(never)]
fn spilled<R>(f: impl FnOnce(&mut Vec<Frame>) -> R) -> R {
    OVERFLOW.with(|o| f(&mut o.borrow_mut()))
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
    FRAMES.with(|frames| match frames.len.get() {
        0 => false,
        len => {
            let mut frame = frames.get(len - 1);
            frame.overloaded = true;
            frames.set(len - 1, frame);
            true
        }
    })
}

/// A sync permit of bulkhead `id`, adaptive with one call in `every` timed, was taken on
/// this thread: pushes its frame and returns whether to time it (then the caller gives
/// its start to [`time_sync`]).
///
/// Always inlined, with a closure small enough for `with` to inline as well: the frame is
/// then a direct thread-local access (with a larger closure, `with` stays out of line in a
/// large admission path and reaches the thread-local through a call).
#[inline(always)]
pub(crate) fn begin_sync(id: usize, every: u32) -> bool {
    let pushed = FRAMES.with(|frames| {
        let len = frames.len.get();
        if len >= INLINE {
            return false;
        }
        frames.ids[len].set(id);
        frames.flags[len].set(SYNC);
        frames.len.set(len + 1);
        true
    });
    if !pushed {
        push_deep(id);
    }
    draw(every)
}

/// [`begin_sync`] past the inline frames.
#[cold]
#[inline(never)]
fn push_deep(id: usize) {
    FRAMES.with(|frames| {
        frames.push(Frame {
            bulkhead: id,
            start: Some(CallStart::untimed()),
            overloaded: false,
        });
    });
}

/// The start of the sync call whose frame [`begin_sync`] just pushed, drawn to be timed.
#[cold]
#[inline(never)]
pub(crate) fn time_sync(start: CallStart) {
    FRAMES.with(|frames| {
        let top = frames.len.get() - 1;
        let mut frame = frames.get(top);
        frame.start = Some(start);
        frames.set(top, frame);
    });
}

/// The sync permit of bulkhead `id` taken on this thread is being returned: its start and
/// whether it was marked overloaded — `None` when there is nothing to record: it was
/// admitted before the bulkhead became adaptive, or it was neither timed, nor marked, nor
/// ended by a panic. Always inlined, as [`begin_sync`].
#[inline(always)]
pub(crate) fn end_sync(id: usize) -> Option<(CallStart, bool)> {
    // Usually the innermost frame, inline: taken in a closure small enough to inline;
    // its flags, or 0 if it is not there.
    let flags = FRAMES.with(|frames| {
        let top = frames.len.get().wrapping_sub(1);
        let flags = frames.flags.get(top).map_or(0, Cell::get);
        if flags & SYNC == 0 || frames.ids[top].get() != id {
            return 0;
        }
        frames.len.set(top);
        flags
    });
    if flags == SYNC && !std::thread::panicking() {
        return None;
    }
    end_sync_slow(id, flags)
}

/// [`end_sync`] with something to record, or a frame that is not the innermost or not
/// inline (`flags` 0).
#[cold]
#[inline(never)]
fn end_sync_slow(id: usize, flags: u8) -> Option<(CallStart, bool)> {
    FRAMES.with(|frames| {
        if flags == 0 {
            let at = frames.find(|f| f.bulkhead == id && f.start.is_some())?;
            let frame = frames.remove(at);
            return Some((frame.start?, frame.overloaded));
        }
        // Taken from the slot just above the frames left.
        let start = if flags & TIMED != 0 {
            frames.starts[frames.len.get()].get()
        } else {
            CallStart::untimed()
        };
        Some((start, flags & OVERLOADED != 0))
    })
}

/// Marks the innermost sync permit of bulkhead `id` held on this thread; false if none.
pub(crate) fn mark_sync(id: usize) -> bool {
    FRAMES.with(|frames| {
        let Some(at) = frames.find(|f| f.bulkhead == id && f.start.is_some()) else {
            return false;
        };
        let mut frame = frames.get(at);
        frame.overloaded = true;
        frames.set(at, frame);
        true
    })
}

/// Runs `poll` (one poll of an async body of bulkhead `id`, or work done in an owned
/// permit's scope) so that [`mark_overloaded`] inside it marks this call; returns its
/// result and whether it was marked.
pub(crate) fn in_frame<R>(id: usize, poll: impl FnOnce() -> R) -> (R, bool) {
    /// Takes the frame out also when `poll` unwinds; says whether it was marked.
    struct Pop(usize);
    impl Pop {
        fn take(&self) -> bool {
            FRAMES.with(|frames| {
                frames
                    .find(|f| f.bulkhead == self.0 && f.start.is_none())
                    .is_some_and(|at| frames.remove(at).overloaded)
            })
        }
    }
    impl Drop for Pop {
        fn drop(&mut self) {
            self.take();
        }
    }
    FRAMES.with(|frames| {
        frames.push(Frame {
            bulkhead: id,
            start: None,
            overloaded: false,
        });
    });
    let pop = Pop(id);
    let result = poll();
    let overloaded = pop.take();
    std::mem::forget(pop);
    (result, overloaded)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// Pushes a timed frame for `id`.
    fn begin_timed(id: usize) {
        assert!(begin_sync(id, 1), "one in 1 is always timed");
        time_sync(CallStart::timed(Instant::now(), 1));
    }

    /// Releases `id`'s timed frame: whether it was marked.
    fn release(id: usize) -> Option<bool> {
        end_sync(id).map(|(start, marked)| {
            assert!(start.is_timed(), "{id}");
            marked
        })
    }

    #[test]
    fn marks_go_to_the_innermost_call_and_survive_deep_nesting() {
        let depth = INLINE * 2 + 3;
        for id in 1..=depth {
            begin_timed(id);
        }
        assert!(mark_overloaded());
        assert!(mark_sync(3));
        // Released out of order: the outermost first, then the innermost.
        assert_eq!(release(1), Some(false));
        assert_eq!(release(depth), Some(true));
        assert_eq!(release(3), Some(true));
        for id in (2..depth).filter(|&id| id != 3) {
            assert_eq!(release(id), Some(false), "{id}");
        }
        assert_eq!(release(2), None, "released twice");
        assert!(!mark_overloaded(), "no call left");
    }

    #[test]
    fn an_untimed_call_has_something_to_record_only_when_marked() {
        let every = u32::MAX / 2 + 1;
        assert!(
            !begin_sync(5, every),
            "the first draw of a thread is not 1 in 2^31"
        );
        assert!(
            end_sync(5).is_none(),
            "untimed, unmarked: nothing to record"
        );
        assert!(!begin_sync(5, every));
        assert!(mark_overloaded());
        let (start, marked) = end_sync(5).expect("a marked call is a drop");
        assert!(!start.is_timed() && marked);
    }

    #[test]
    fn a_poll_frame_is_marked_inside_and_gone_after() {
        begin_timed(7);
        let ((), marked) = in_frame(9, || assert!(mark_overloaded()));
        assert!(marked);
        assert_eq!(release(7), Some(false));
        let unwound = std::panic::catch_unwind(|| in_frame(9, || panic!("body")));
        assert!(unwound.is_err());
        assert!(!mark_overloaded(), "the frame went with the unwind");
    }
}

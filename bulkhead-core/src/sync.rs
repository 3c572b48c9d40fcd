//! The synchronisation primitives the admission code uses, in one place, so a loom model
//! can swap them for loom's instrumented versions (`RUSTFLAGS="--cfg loom"`).
//!
//! Outside loom: std atomics, and parking_lot's `Mutex` (no lock poisoning, so a panicking
//! body can never turn into a poisoned bulkhead). Under loom: loom's atomics and `Mutex`,
//! behind the same `lock()` signature. `Arc` is std's either way.

// `Arc` stays std's under loom too: `Arc<dyn Clock>` is part of the public API (a test's
// clock is a std `Arc`), and reference counting is not what the models check.
pub(crate) use std::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU8, AtomicU32, AtomicU64};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicIsize, AtomicU8, AtomicU32, AtomicU64};

/// A mutual-exclusion lock whose `lock()` cannot fail.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

/// The guard of a locked [`Mutex`].
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
/// The guard of a locked [`Mutex`].
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// A new, unlocked mutex holding `value`.
    pub(crate) fn new(value: T) -> Self {
        Mutex {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    /// Locks, blocking the thread until the lock is free.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        {
            self.inner.lock()
        }
        #[cfg(loom)]
        {
            // loom's mutex mirrors std's API; a poisoned lock only happens when a model
            // thread already panicked, which fails the model anyway.
            match self.inner.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            }
        }
    }
}

/// A `SeqCst` fence for loom only: a no-op in a real build.
///
/// Code that relies on the single total order of `SeqCst` accesses (a store-load pair on two
/// atomics, "I publish, then I look") is correct as written, but loom models `SeqCst`
/// accesses as `AcqRel` and would report lost wake-ups that cannot happen. Loom does model
/// `SeqCst` fences, so such code calls this between its store and its load.
#[inline(always)]
pub(crate) fn seq_cst_fence_for_loom() {
    #[cfg(loom)]
    loom::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// A `SeqCst` fence, loom's under loom (for store-then-load protocols between two sides that
/// each write one location and read the other's).
#[inline(always)]
pub(crate) fn seq_cst_fence() {
    #[cfg(not(loom))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(loom)]
    loom::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// A cell whose accesses are checked by loom under loom (`with_mut` hands out the raw
/// pointer; the caller's protocol — the job state words of `thread_pool::job` and
/// `thread_pool::async_job` — decides who may use it when). Outside loom, std's `UnsafeCell`.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// A new cell holding `value`.
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a pointer to the value (the caller must hold exclusive access).
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// A waker slot a consumer registers in and a producer takes the waker out of, to wake it
/// (futures' `AtomicWaker`; loom's under loom).
#[derive(Default)]
pub(crate) struct AtomicWaker {
    #[cfg(not(loom))]
    inner: futures_util::task::AtomicWaker,
    #[cfg(loom)]
    inner: loom::future::AtomicWaker,
}

impl AtomicWaker {
    /// Keeps (a clone of) `waker` as the one [`take`](Self::take) hands out, replacing any
    /// other.
    #[inline]
    pub(crate) fn register(&self, waker: &std::task::Waker) {
        #[cfg(not(loom))]
        self.inner.register(waker);
        #[cfg(loom)]
        self.inner.register_by_ref(waker);
    }

    /// Takes the registered waker out, to wake or drop it. A registration racing it wakes
    /// its own waker at once (the `AtomicWaker` contract), so none is lost.
    #[inline]
    pub(crate) fn take(&self) -> Option<std::task::Waker> {
        #[cfg(not(loom))]
        {
            self.inner.take()
        }
        #[cfg(loom)]
        {
            self.inner.take_waker()
        }
    }
}

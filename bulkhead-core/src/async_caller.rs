//! Synchronous calls made from async code: a thread-pool `call` blocks its caller until a
//! worker has run the body. Made from a task on an async runtime's worker thread, that wait
//! would stall every other task of that worker — the failure bulkheads exist to prevent.
//!
//! With feature `tokio`, [`caller`] tells where a call is made from, and
//! [`ThreadPoolBulkhead::call`](crate::ThreadPoolBulkhead::call) acts on it:
//!
//! * a task on tokio's **multi-thread** runtime: the wait is handed to the runtime with
//!   `tokio::task::block_in_place`, which moves the worker's other tasks to another thread
//!   first, so they keep running;
//! * a task on a **current-thread** runtime (`#[tokio::test]`'s default): there is no other
//!   thread to move them to, and refusing would break code that works (slowly). The call
//!   blocks the runtime's only thread, and `#[bulkhead]` logs one WARN per function naming
//!   the fix.
//!
//! The fix, either way: await the work instead of blocking on it. Make the function an
//! `async fn` (on a thread-pool bulkhead its body still runs on one of the pool's workers,
//! and the caller's task awaits it without blocking anything), or call the sync function
//! inside `tokio::task::spawn_blocking`.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Where a blocking call is being made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Caller {
    /// A plain thread (or no async runtime this crate knows of): blocking is fine.
    Thread,
    /// A task on tokio's multi-thread runtime: the wait is handed over (`block_in_place`).
    MultiThreadTask,
    /// A task on tokio's current-thread runtime: the wait blocks the whole runtime.
    CurrentThreadTask,
}

/// Where a call made now, on this thread, comes from: whether a tokio runtime is current
/// here, and of which flavour. Without feature `tokio`, always [`Caller::Thread`]. One
/// thread-local read.
#[inline]
pub fn caller() -> Caller {
    #[cfg(feature = "tokio")]
    {
        // A runtime is current on this thread: a task, a `block_on`, or a thread that
        // entered a handle (`spawn_blocking`, a pool worker running an async body).
        // `block_in_place` is safe in each case on the multi-thread runtime (it only runs
        // the closure where there is no worker to move); on a current-thread runtime the
        // last two are reported too, though blocking there stalls nothing.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            return match handle.runtime_flavor() {
                tokio::runtime::RuntimeFlavor::CurrentThread => Caller::CurrentThreadTask,
                _ => Caller::MultiThreadTask,
            };
        }
    }
    Caller::Thread
}

/// Runs `wait`, a blocking wait for a pool's worker, as suits `caller`.
#[inline]
pub(crate) fn block<R>(caller: Caller, wait: impl FnOnce() -> R) -> R {
    match caller {
        #[cfg(feature = "tokio")]
        Caller::MultiThreadTask => tokio::task::block_in_place(wait),
        _ => wait(),
    }
}

/// Logs, once per `warned` flag (one per annotated function), that `function` made a
/// blocking thread-pool call from an async task, and how to fix it (the attribute's
/// expansion calls it; not part of the documented surface).
#[doc(hidden)]
pub fn warn_blocking_call(
    warned: &AtomicBool,
    caller: Caller,
    bulkhead: &str,
    function: &dyn fmt::Display,
) {
    if caller == Caller::Thread || warned.swap(true, Relaxed) {
        return;
    }
    let what = match caller {
        Caller::CurrentThreadTask => {
            "it blocks the current-thread runtime (every task on it) until a worker has run the body"
        }
        _ => {
            "its wait for a worker was handed to the runtime with `block_in_place`, which costs a thread per waiting call"
        }
    };
    tracing::warn!(
        target: "bulkhead",
        bulkhead,
        function = %function,
        "{function} is a synchronous call on thread-pool bulkhead `{bulkhead}` made from an async task: \
         {what}. Fix: make it an `async fn` and `.await` it (the body still runs on the pool's worker), \
         or call it inside `tokio::task::spawn_blocking`"
    );
}

//! The background load of the `admin` and `metrics` examples: caller threads that call
//! the example's bulkheads in a loop, so the endpoints have something to show.
//!
//! Invariant: every caller stops at its next call once `stop` is set.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

/// Starts `callers` threads; caller `c` calls `call(c)`, `call(c + callers)`, … until `stop`
/// is set.
pub fn start_load(
    callers: u64,
    stop: &Arc<AtomicBool>,
    call: fn(u64),
) -> Vec<thread::JoinHandle<()>> {
    (0..callers)
        .map(|caller| {
            let stop = Arc::clone(stop);
            thread::spawn(move || {
                let mut n = caller;
                while !stop.load(Ordering::Relaxed) {
                    call(n);
                    n += callers;
                }
            })
        })
        .collect()
}

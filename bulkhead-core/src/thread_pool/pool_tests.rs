//! Deterministic tests of the pool's private life cycle, with a hook inside `spawn_worker`.

use std::cell::RefCell;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::time::Duration;

use bulkhead_config::ThreadPoolConfig;

use super::Inner;
use crate::ThreadPoolBulkhead;
use crate::sync::Arc;

type Hook = Box<dyn FnMut(&Inner)>;

thread_local! {
    /// Run by `spawn_worker` on the spawning thread, after `spawn` returned and before the
    /// join handle is recorded.
    static AFTER_SPAWN: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

pub(super) fn after_spawn(inner: &Inner) {
    let hook = AFTER_SPAWN.with(|h| h.borrow_mut().take());
    if let Some(mut hook) = hook {
        hook(inner);
    }
}

/// A shutdown that runs while a just-started worker's handle is not yet recorded (the
/// worker has run its task and exited) must still join it. It used to see `threads == 0`,
/// take the handles without this one, and report `threads_joined: 0`.
#[test]
fn shutdown_in_the_spawn_window_joins_the_new_worker() {
    let config = ThreadPoolConfig {
        core_threads: 0,
        max_threads: 1,
        queue_capacity: 0,
        ..ThreadPoolConfig::default()
    };
    let pool = ThreadPoolBulkhead::new("spawn-window", &config);
    let shutdown_returned = Arc::new(AtomicBool::new(false));
    let (spawned_tx, spawned_rx) = mpsc::channel::<()>();
    let caller = {
        let (pool, shutdown_returned) = (pool.clone(), Arc::clone(&shutdown_returned));
        std::thread::spawn(move || {
            AFTER_SPAWN.with(|h| {
                *h.borrow_mut() = Some(Box::new(move |inner: &Inner| {
                    let _ = spawned_tx.send(());
                    // Hold the window open until the shutdown has either returned (the bug)
                    // or is waiting with no thread alive (waiting for this handle).
                    loop {
                        if shutdown_returned.load(SeqCst) {
                            break;
                        }
                        {
                            let st = inner.state.lock();
                            if st.threads == 0 && st.shutdown_waiter.is_some() {
                                break;
                            }
                        }
                        std::thread::yield_now();
                    }
                }));
            });
            pool.call(7u32, |i| i).map_err(|r| r.error)
        })
    };
    spawned_rx.recv().unwrap();
    let report = pool.shutdown(Duration::from_secs(30));
    shutdown_returned.store(true, SeqCst);
    assert_eq!(caller.join().unwrap().unwrap(), 7);
    assert_eq!(report.threads_joined, 1, "{report:?}");
    assert_eq!(report.still_running, 0, "{report:?}");
}

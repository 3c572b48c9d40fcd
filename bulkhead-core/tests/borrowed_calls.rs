//! The thread pool's blocking `call` lets the body borrow the caller's stack (a lifetime
//! erasure in `thread_pool/job.rs`; with the cells the jobs' state words guard, the crate's
//! only `unsafe`). These tests walk every way a borrowed job can end — run, panicked,
//! failed from the queue, failed by shutdown — with borrows whose `Drop` touches the
//! caller's data, so that Miri (`.ci/run` runs this file under `cargo miri test`) sees any
//! use of that data after the caller returned.
//!
//! Small and quick on purpose: one or two workers, a handful of calls, a manual clock.

mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::thread;
use std::time::Duration;

use bulkhead_config_types::{Duration as ConfigDuration, ThreadPoolConfig};
use bulkhead_core::{BulkheadError, ThreadPoolBulkhead};
use support::{Gate, manual_clock, wait_until};

fn one_thread(queue: u32) -> ThreadPoolConfig {
    ThreadPoolConfig {
        core_threads: 1,
        max_threads: 1,
        queue_capacity: queue,
        ..ThreadPoolConfig::default()
    }
}

/// Borrows a counter on the caller's stack and bumps it when dropped, wherever that is.
struct Touches<'a>(&'a Mutex<u32>);

impl Drop for Touches<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap() += 1;
    }
}

#[test]
fn a_body_borrowing_the_callers_stack_runs_and_returns_a_borrow_of_its_input() {
    let pool = ThreadPoolBulkhead::new("borrow", &one_thread(0));
    let text = String::from("bulkhead");
    let drops = Mutex::new(0);
    let guard = Touches(&drops);
    let tail = pool
        .call(text.as_str(), move |s| {
            let _guard = guard;
            &s[4..]
        })
        .unwrap();
    assert_eq!(tail, "head");
    assert_eq!(*drops.lock().unwrap(), 1);
    pool.shutdown(Duration::from_secs(5));
}

#[test]
fn a_panicking_body_with_borrows_is_unwound_before_the_caller_resumes() {
    let pool = ThreadPoolBulkhead::new("borrow-panic", &one_thread(0));
    let drops = Mutex::new(0);
    let local = AtomicU32::new(5);
    let guard = Touches(&drops);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        pool.call(&local, move |local| -> u32 {
            let _guard = guard;
            local.store(6, SeqCst);
            panic!("injected")
        })
    }));
    assert!(caught.is_err());
    assert_eq!((local.load(SeqCst), *drops.lock().unwrap()), (6, 1));
    pool.shutdown(Duration::from_secs(5));
}

#[test]
fn a_borrowed_job_failed_from_the_queue_gives_its_input_back_and_drops_its_body_first() {
    let (clock, shared) = manual_clock();
    let config = ThreadPoolConfig {
        max_queue_wait: Some(ConfigDuration::from_millis(10)),
        ..one_thread(1)
    };
    let pool = ThreadPoolBulkhead::with_clock("borrow-stale", &config, shared);
    let gate = Gate::default();
    let drops = Mutex::new(0);
    let mut input = vec![1, 2, 3];
    thread::scope(|s| {
        let busy = s.spawn(|| pool.call((), |()| gate.wait()));
        wait_until(|| pool.snapshot().active == 1);
        let queued = s.spawn(|| {
            let guard = Touches(&drops);
            pool.call(&mut input, move |v| {
                let _guard = guard;
                v.push(4);
            })
        });
        wait_until(|| pool.snapshot().queued == 1);
        clock.advance(Duration::from_millis(11));
        gate.open();
        busy.join().unwrap().unwrap();
        let refused = queued.join().unwrap().unwrap_err();
        assert!(matches!(refused.error, BulkheadError::QueueTimeout { .. }));
        refused.input.push(5);
    });
    assert_eq!(
        input,
        [1, 2, 3, 5],
        "the body never ran; the input came back"
    );
    assert_eq!(*drops.lock().unwrap(), 1, "the body was dropped");
    pool.shutdown(Duration::from_secs(5));
}

#[test]
fn borrowed_jobs_failed_by_shutdown_give_their_inputs_back() {
    let pool = ThreadPoolBulkhead::new("borrow-shutdown", &one_thread(2));
    let gate = Gate::default();
    let drops = Mutex::new(0);
    let inputs = [String::from("a"), String::from("b")];
    thread::scope(|s| {
        let busy = s.spawn(|| pool.call((), |()| gate.wait()));
        wait_until(|| pool.snapshot().active == 1);
        let queued: Vec<_> = inputs
            .iter()
            .map(|input| {
                let guard = Touches(&drops);
                let pool = &pool;
                s.spawn(move || {
                    pool.call(input.as_str(), move |s| {
                        let _guard = guard;
                        s.len()
                    })
                })
            })
            .collect();
        wait_until(|| pool.snapshot().queued == 2);
        let report = pool.shutdown(Duration::ZERO);
        assert_eq!(report.failed_queued, 2);
        for (call, input) in queued.into_iter().zip(&inputs) {
            let refused = call.join().unwrap().unwrap_err();
            assert!(matches!(refused.error, BulkheadError::ShutDown { .. }));
            assert_eq!(refused.input, input.as_str());
        }
        gate.open();
        busy.join().unwrap().unwrap();
    });
    assert_eq!(*drops.lock().unwrap(), 2);
}

//! The call timeout (`timeout` in the config), on the `ManualClock`: an async body is
//! dropped at the deadline and its permit or worker freed at once; a synchronous pool
//! call's caller is answered at the deadline while the worker finishes, its result
//! discarded and counted.

mod support;
use support::WithPolicies;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bulkhead_config_types::{SemaphoreConfig, ThreadPoolConfig};
use bulkhead_core::{BulkheadError, ManualClock, SemaphoreBulkhead, ThreadPoolBulkhead};

const TIMEOUT: Duration = Duration::from_secs(2);

/// Sets its flag when dropped: proves a body's future was dropped.
#[derive(Debug)]
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn semaphore_async_body_is_dropped_and_its_permit_returned_at_the_deadline() {
    let clock = ManualClock::new();
    let config = SemaphoreConfig {
        max_concurrent_calls: 1,
        ..SemaphoreConfig::default()
    };
    let search = SemaphoreBulkhead::with_clock("search", &config, Arc::new(clock.clone()))
        .with_policies(|c| c.timeout = Some(TIMEOUT.into()));
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = DropFlag(Arc::clone(&dropped));
    let mut call = pin!(search.call_async(async move {
        let _guard = guard;
        std::future::pending::<u32>().await
    }));
    assert!(poll_once(call.as_mut()).is_pending());
    assert_eq!(search.available(), 0, "the running body holds the permit");

    clock.advance(TIMEOUT - Duration::from_millis(1));
    assert!(
        poll_once(call.as_mut()).is_pending(),
        "not yet at the deadline"
    );
    assert!(!dropped.load(SeqCst));

    clock.advance(Duration::from_millis(1));
    match poll_once(call.as_mut()) {
        Poll::Ready(Err(BulkheadError::CallTimeout { name, after })) => {
            assert_eq!(&*name, "search");
            assert_eq!(after, TIMEOUT);
        }
        other => panic!("expected a call timeout, got {other:?}"),
    }
    assert!(dropped.load(SeqCst), "the body was dropped at the deadline");
    assert_eq!(
        search.available(),
        1,
        "the permit came back at the deadline"
    );
    let calls = search.snapshot().calls;
    assert_eq!(calls.timed_out, 1);
    assert_eq!(calls.cancelled, 1);
    assert_eq!(calls.refused.total(), 0, "a call timeout is not a refusal");
    let error = BulkheadError::CallTimeout {
        name: "search".into(),
        after: TIMEOUT,
    };
    assert_eq!(error.reason(), "call_timeout");
}

#[test]
fn semaphore_body_that_finishes_in_time_is_not_timed_out() {
    let clock = ManualClock::new();
    let search = SemaphoreBulkhead::with_clock(
        "search",
        &SemaphoreConfig::default(),
        Arc::new(clock.clone()),
    )
    .with_policies(|c| c.timeout = Some(TIMEOUT.into()));
    let mut call = pin!(search.call_async(async { 7 }));
    assert_eq!(poll_once(call.as_mut()), Poll::Ready(Ok(7)));
    assert_eq!(search.snapshot().calls.timed_out, 0);
}

fn one_worker(clock: &ManualClock) -> ThreadPoolBulkhead {
    let config = ThreadPoolConfig {
        core_threads: 1,
        max_threads: 1,
        queue_capacity: 4,
        ..ThreadPoolConfig::default()
    };
    ThreadPoolBulkhead::with_clock("render", &config, Arc::new(clock.clone()))
        .with_policies(|c| c.timeout = Some(TIMEOUT.into()))
}

#[test]
fn pool_async_body_is_dropped_on_its_worker_at_the_deadline() {
    let clock = ManualClock::new();
    let pool = one_worker(&clock);
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = DropFlag(Arc::clone(&dropped));
    std::thread::scope(|s| {
        let caller = s.spawn(|| {
            futures_executor::block_on(pool.call_async_timed(guard, |guard| async move {
                let _guard = guard;
                std::future::pending::<u32>().await
            }))
        });
        // The worker started the body: its deadline sleeps on the clock.
        clock.wait_for_sleepers(1);
        assert!(!dropped.load(SeqCst));
        clock.advance(TIMEOUT);
        match caller.join().expect("caller") {
            Ok(Err(BulkheadError::CallTimeout { after, .. })) => assert_eq!(after, TIMEOUT),
            other => panic!("expected a call timeout, got {other:?}"),
        }
    });
    // The caller is answered at its deadline, and the worker cuts the body at the same
    // deadline on its own thread: the two are not ordered, so wait for the drop (a body
    // that was never dropped hangs here, which the harness reports).
    while !dropped.load(SeqCst) {
        std::thread::yield_now();
    }
    // The worker is free: the next call runs (on the only worker).
    assert_eq!(pool.call_timed(20, |n| n + 1).ok(), Some(Ok(21)));
    let calls = pool.snapshot().calls;
    assert_eq!(calls.timed_out, 1);
    assert_eq!(calls.discarded, 0);
    pool.shutdown(Duration::ZERO);
}

#[test]
fn sync_pool_caller_is_answered_at_the_deadline_and_the_late_result_is_discarded_and_counted() {
    let clock = ManualClock::new();
    let pool = one_worker(&clock);
    let (release, released) = mpsc::channel::<()>();
    let finished = Arc::new(AtomicBool::new(false));
    let worker_finished = Arc::clone(&finished);
    std::thread::scope(|s| {
        let caller = s.spawn(|| {
            pool.call_timed(5_u32, move |n| {
                // The body cannot be interrupted: it runs until the test lets it go.
                released.recv().expect("released");
                worker_finished.store(true, SeqCst);
                n * 2
            })
        });
        // The worker started the body, so the caller armed its deadline.
        clock.wait_for_sleepers(1);
        clock.advance(TIMEOUT);
        match caller.join().expect("caller") {
            Ok(Err(BulkheadError::CallTimeout { after, .. })) => assert_eq!(after, TIMEOUT),
            other => panic!("expected a call timeout, got {other:?}"),
        }
    });
    assert!(
        !finished.load(SeqCst),
        "the caller was answered while the body still ran"
    );
    let calls = pool.snapshot().calls;
    assert_eq!((calls.timed_out, calls.discarded), (1, 0));

    release.send(()).expect("the body waits");
    // The worker finishes the body and throws its result away, counted.
    while pool.snapshot().calls.discarded == 0 {
        std::thread::yield_now();
    }
    assert!(finished.load(SeqCst));
    let snapshot = pool.snapshot();
    assert_eq!(snapshot.calls.discarded, 1);
    // Both are exported.
    let name = snapshot.name.to_string();
    let text = bulkhead_core::prometheus::encode(&[snapshot]);
    for family in [
        "bulkhead_call_timeouts_total",
        "bulkhead_discarded_results_total",
    ] {
        let line = format!("{family}{{bulkhead=\"{name}\"}} 1");
        assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
    }
    pool.shutdown(Duration::from_secs(1));
}

#[test]
fn without_a_timeout_timed_calls_are_plain_calls() {
    let clock = ManualClock::new();
    let pool = one_worker(&clock).with_policies(|c| c.timeout = None);
    assert_eq!(pool.call_timeout(), None);
    assert_eq!(pool.call_timed(1, |n| n + 1).ok(), Some(Ok(2)));
    let out = futures_executor::block_on(pool.call_async_timed(1, |n| async move { n + 2 }));
    assert_eq!(out.ok(), Some(Ok(3)));
    pool.shutdown(Duration::ZERO);
}

#[test]
fn expected_queue_wait_is_the_mean_time_queued_calls_waited() {
    let clock = ManualClock::new();
    let pool = one_worker(&clock).with_policies(|c| c.timeout = None);
    assert_eq!(pool.expected_queue_wait(), None);
    let (release, released) = mpsc::channel::<()>();
    let mut first = Box::pin(pool.call_async(released, |released| async move {
        released.recv().expect("released");
    }));
    let mut second = Box::pin(pool.call_async((), |()| async {}));
    assert!(poll_once(first.as_mut()).is_pending());
    assert!(poll_once(second.as_mut()).is_pending());
    // The second call waits in the queue while the only worker is busy.
    while pool.snapshot().queued == 0 {
        std::thread::yield_now();
    }
    clock.advance(Duration::from_secs(3));
    release.send(()).expect("the first body waits");
    futures_executor::block_on(async {
        first.await.expect("ran");
        second.await.expect("ran");
    });
    let queue_time = pool.snapshot().queue_time.expect("a pool");
    let expected = queue_time.sum() / u32::try_from(queue_time.count()).expect("small");
    assert_eq!(pool.expected_queue_wait(), Some(expected));
    assert!(expected >= Duration::from_millis(1500), "{expected:?}");
    pool.shutdown(Duration::ZERO);
}

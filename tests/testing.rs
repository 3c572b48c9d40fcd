//! `bulkhead::testing`: a fallback tested with no extra threads and no sleeps, scopes that
//! do not leak between tests running in parallel, per-test sizes, and call timeouts of
//! annotated functions driven by a `ManualClock`.

use std::future::Future;
use std::pin::pin;
use std::sync::Barrier;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bulkhead::config::SemaphoreConfig;
use bulkhead::testing::{Reason, TestScope};
use bulkhead::{BulkheadError, ManualClock, bulkhead};

#[bulkhead("testing-fallback", fallback = cached_price)]
fn price(item: u64) -> String {
    format!("live price of {item}")
}

fn cached_price(item: u64, refused: BulkheadError) -> String {
    format!("cached price of {item} ({})", refused.reason())
}

#[test]
fn the_fallback_answers_a_refused_call_with_no_threads_and_no_sleeps() {
    let _scope = TestScope::new()
        .refuse("testing-fallback", Reason::Full)
        .enter();
    assert_eq!(price(7), "cached price of 7 (full)");
    let _scope = TestScope::new()
        .refuse(
            "testing-fallback",
            Reason::RateLimited(Duration::from_secs(3)),
        )
        .enter();
    assert_eq!(price(7), "cached price of 7 (rate_limited)");
}

/// Its own bulkhead: this test calls outside any scope, which the parallel-scopes test
/// would otherwise see in the process-wide `testing-fallback`'s counts.
#[bulkhead("testing-order", fallback = cached_quote)]
fn quote(item: u64) -> String {
    format!("live quote of {item}")
}

fn cached_quote(item: u64, refused: BulkheadError) -> String {
    format!("cached quote of {item} ({})", refused.reason())
}

#[test]
fn guards_dropped_in_any_order_end_their_own_scopes() {
    let outer = TestScope::new()
        .refuse("testing-order", Reason::Full)
        .enter();
    let inner = TestScope::new().enter();
    assert_eq!(quote(1), "live quote of 1", "the inner scope is current");
    // The outer guard first: the inner scope stays current.
    drop(outer);
    assert_eq!(quote(2), "live quote of 2");
    let private = inner
        .bulkhead("testing-order")
        .expect("used in the inner scope");
    assert_eq!(private.snapshot().calls.permitted, 2);
    drop(inner);
    // No scope is left: the process-wide bulkhead answers, never the outer's refusal.
    assert_eq!(quote(3), "live quote of 3");
    // And in the usual order, the outer is current again once the inner ends.
    let outer = TestScope::new()
        .refuse("testing-order", Reason::Full)
        .enter();
    let inner = TestScope::new().enter();
    drop(inner);
    assert_eq!(quote(4), "cached quote of 4 (full)");
    drop(outer);
}

#[test]
fn without_a_refusal_the_function_runs_in_the_scopes_private_bulkhead() {
    let scope = TestScope::new().enter();
    assert_eq!(price(7), "live price of 7");
    let private = scope
        .bulkhead("testing-fallback")
        .expect("used in the scope");
    assert_eq!(private.snapshot().calls.permitted, 1);
}

/// Two scopes on the same bulkhead, on two threads at once: one refuses, the other does
/// not, and neither sees the other's override, nor does the process-wide bulkhead.
#[test]
fn scopes_on_the_same_bulkhead_in_parallel_do_not_interfere() {
    let both_in_scope = Barrier::new(2);
    let both_called = Barrier::new(2);
    let before = bulkhead::registry()
        .get("testing-fallback")
        .expect("declared")
        .snapshot()
        .calls;
    std::thread::scope(|s| {
        let refusing = s.spawn(|| {
            let _scope = TestScope::new()
                .refuse("testing-fallback", Reason::ShutDown)
                .enter();
            both_in_scope.wait();
            let answer = price(1);
            both_called.wait();
            answer
        });
        let admitting = s.spawn(|| {
            let _scope = TestScope::new().enter();
            both_in_scope.wait();
            let answer = price(2);
            both_called.wait();
            answer
        });
        assert_eq!(
            refusing.join().expect("refusing"),
            "cached price of 1 (shut_down)"
        );
        assert_eq!(admitting.join().expect("admitting"), "live price of 2");
    });
    let after = bulkhead::registry()
        .get("testing-fallback")
        .expect("declared")
        .snapshot()
        .calls;
    assert_eq!(
        before, after,
        "the process-wide bulkhead saw none of the scoped calls"
    );
}

#[test]
fn sizes_are_scoped_to_one_test() {
    let scope = TestScope::new()
        .semaphore(
            "testing-fallback",
            SemaphoreConfig {
                max_concurrent_calls: 3,
                ..SemaphoreConfig::default()
            },
        )
        .enter();
    assert_eq!(price(1), "live price of 1");
    let private = scope.bulkhead("testing-fallback").expect("used");
    assert_eq!(private.snapshot().limit, 3);
    let declared = bulkhead::registry()
        .get("testing-fallback")
        .expect("declared");
    assert_eq!(declared.snapshot().limit, 1);
}

#[bulkhead("testing-timeout")]
async fn slow_lookup(never: std::future::Pending<u32>) -> Result<u32, BulkheadError> {
    Ok(never.await)
}

fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn an_async_functions_call_timeout_on_the_manual_clock() {
    let clock = ManualClock::new();
    let scope = TestScope::new().clock(&clock).enter();
    let mut call = pin!(slow_lookup(std::future::pending()));
    assert!(poll_once(call.as_mut()).is_pending());
    let private = scope.bulkhead("testing-timeout").expect("used");
    assert_eq!(private.snapshot().active, 1, "the body holds the permit");
    clock.advance(Duration::from_secs(2));
    match poll_once(call.as_mut()) {
        Poll::Ready(Err(BulkheadError::CallTimeout { after, .. })) => {
            assert_eq!(after, Duration::from_secs(2))
        }
        other => panic!("expected a call timeout, got {other:?}"),
    }
    let calls = private.snapshot();
    assert_eq!((calls.active, calls.calls.timed_out), (0, 1));
}

#[bulkhead("testing-pool-timeout")]
async fn slow_render(page: u32) -> Result<u32, BulkheadError> {
    std::future::pending::<()>().await;
    Ok(page)
}

#[test]
fn a_pool_async_functions_call_timeout_on_the_manual_clock() {
    let clock = ManualClock::new();
    let scope = TestScope::new().clock(&clock).enter();
    let mut call = pin!(slow_render(3));
    // The first poll submits the body to the pool's worker, which starts it and arms the
    // deadline on the manual clock.
    assert!(poll_once(call.as_mut()).is_pending());
    clock.wait_for_sleepers(1);
    clock.advance(Duration::from_secs(2));
    match block_on(call) {
        Err(BulkheadError::CallTimeout { after, .. }) => assert_eq!(after, Duration::from_secs(2)),
        other => panic!("expected a call timeout, got {other:?}"),
    }
    let private = scope.bulkhead("testing-pool-timeout").expect("used");
    assert_eq!(private.snapshot().calls.timed_out, 1);
}

/// Drives a future to its end on this thread.
fn block_on<F: Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(fut)
}

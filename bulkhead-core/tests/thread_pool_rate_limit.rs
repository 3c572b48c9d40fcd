//! A rate limit on a thread-pool bulkhead: checked before admission (after re-entry), sync
//! callers wait on the clock up to the limit's timeout, async callers await; reloads
//! change it. Deterministic: a `ManualClock` (time moves only when a test advances it),
//! barriers for races, looped.

mod support;

use std::sync::{Arc, Barrier};
use std::task::Poll;
use std::thread;
use std::time::Duration;

use bulkhead_config_types::{BulkheadConfig, Config, ThreadPoolConfig};
use bulkhead_core::{BulkheadError, Registry, ThreadPoolBulkhead};
use support::{WithPolicies, manual_clock, poll_once, rate_limit};

fn pool_config() -> ThreadPoolConfig {
    // Room for every call of these tests: only the rate limit refuses.
    ThreadPoolConfig {
        core_threads: 0,
        max_threads: 20,
        queue_capacity: 20,
        ..ThreadPoolConfig::default()
    }
}

#[test]
fn twenty_threads_racing_a_pool_rate_limit_of_five_get_exactly_five_admissions() {
    for round in 0..30 {
        let (_clock, clock) = manual_clock();
        let pool = ThreadPoolBulkhead::with_clock("rate-race", &pool_config(), clock)
            .with_policies(|c| c.rate_limit = Some(rate_limit(5, 1000, 0)));
        let start = Arc::new(Barrier::new(20));
        let callers: Vec<_> = (0..20u32)
            .map(|i| {
                let (pool, start) = (pool.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    pool.call(i, |i| i)
                })
            })
            .collect();
        let mut admitted = 0;
        let mut limited = 0;
        for caller in callers {
            match caller.join().unwrap() {
                Ok(_) => admitted += 1,
                Err(refused) => {
                    assert!(
                        matches!(refused.error, BulkheadError::RateLimited { .. }),
                        "round {round}: {:?}",
                        refused.error
                    );
                    limited += 1;
                }
            }
        }
        assert_eq!((admitted, limited), (5, 15), "round {round}");
        let snap = pool.snapshot();
        assert_eq!(snap.calls.permitted, 5, "round {round}: {snap:?}");
        assert_eq!(
            snap.calls.refused.rate_limited, 15,
            "round {round}: {snap:?}"
        );
        pool.shutdown(Duration::from_secs(10));
    }
}

#[test]
fn rate_limited_carries_retry_after_from_the_limiter_state() {
    let (manual, clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("rate-retry", &pool_config(), clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(2, 100, 0)));
    assert_eq!(pool.call(1, |i| i).unwrap(), 1);
    assert_eq!(pool.call(2, |i| i).unwrap(), 2);
    manual.advance(Duration::from_millis(30));
    let refused = pool.call(3, |i| i).unwrap_err();
    assert_eq!(refused.input, 3);
    match refused.error {
        BulkheadError::RateLimited { retry_after, .. } => {
            assert_eq!(retry_after, Duration::from_millis(70));
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    // The async path refuses the same way, without waiting.
    let refused = futures_executor::block_on(pool.call_async(4, |i| async move { i })).unwrap_err();
    assert_eq!(refused.input, 4);
    assert_eq!(refused.error.retry_after(), Some(Duration::from_millis(70)));
    // The next period admits again.
    manual.advance(Duration::from_millis(70));
    assert_eq!(pool.call(5, |i| i).unwrap(), 5);
    assert_eq!(pool.snapshot().calls.refused.rate_limited, 2);
    pool.shutdown(Duration::from_secs(10));
}

#[test]
fn a_sync_call_waits_on_the_clock_for_a_reserved_permission() {
    let (manual, clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("rate-wait", &pool_config(), clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 100, 500)));
    assert_eq!(pool.call(1, |i| i).unwrap(), 1);
    let waiter = {
        let pool = pool.clone();
        thread::spawn(move || pool.call(2, |i| i))
    };
    manual.wait_for_sleepers(1);
    manual.advance(Duration::from_millis(100));
    assert_eq!(waiter.join().unwrap().unwrap(), 2);
    pool.shutdown(Duration::from_secs(10));
}

#[test]
fn an_async_call_awaits_a_reserved_permission_without_blocking() {
    let (manual, clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("rate-await", &pool_config(), clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 100, 500)));
    assert_eq!(pool.call(1, |i| i).unwrap(), 1);
    let mut call = pool.call_async(2, |i| async move { i });
    // Reserved a permission of the next period: pending, nothing admitted yet.
    assert!(matches!(poll_once(&mut call), Poll::Pending));
    assert_eq!(pool.snapshot().calls.permitted, 1);
    manual.advance(Duration::from_millis(100));
    assert_eq!(futures_executor::block_on(call).unwrap(), 2);
    assert_eq!(pool.snapshot().calls.permitted, 2);
    pool.shutdown(Duration::from_secs(10));
}

#[test]
fn a_dropped_async_call_gives_its_reserved_permission_back() {
    let (manual, clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("rate-drop", &pool_config(), clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 100, 100)));
    assert_eq!(pool.call(1, |i| i).unwrap(), 1);
    let mut gone = pool.call_async(2, |i| async move { i });
    assert!(matches!(poll_once(&mut gone), Poll::Pending));
    assert_eq!(pool.rate_limiter().available_permissions(), -1);
    drop(gone);
    assert_eq!(pool.rate_limiter().available_permissions(), 0);
    // Without the give-back this call would find the next period taken and be refused.
    let mut next = pool.call_async(3, |i| async move { i });
    assert!(matches!(poll_once(&mut next), Poll::Pending));
    manual.advance(Duration::from_millis(100));
    assert_eq!(futures_executor::block_on(next).unwrap(), 3);
    assert_eq!(pool.snapshot().calls.permitted, 2);
    pool.shutdown(Duration::from_secs(10));
}

fn config_with(rate: Option<(u32, u64)>) -> Config {
    let mut bulkhead = BulkheadConfig::thread_pool(pool_config());
    bulkhead.rate_limit = rate.map(|(limit, period)| rate_limit(limit, period, 0));
    let mut config = Config::default();
    config.bulkheads.insert("pool".to_owned(), bulkhead);
    config
}

#[test]
fn registry_register_and_reload_apply_the_pool_rate_limit() {
    let (_manual, clock) = manual_clock();
    let registry = Registry::with_clock(clock);
    let declared = config_with(Some((1, 1000)));
    registry
        .register("pool", &declared.bulkheads["pool"])
        .unwrap();
    let pool = registry.thread_pool("pool").unwrap();
    assert_eq!(pool.rate_limiter().limit_for_period(), 1);
    assert_eq!(pool.call(1, |i| i).unwrap(), 1);
    assert!(matches!(
        pool.call(2, |i| i).unwrap_err().error,
        BulkheadError::RateLimited { .. }
    ));
    // Removed by a reload: every call is admitted.
    registry.reload(&config_with(None)).unwrap();
    assert!(!pool.rate_limiter().is_enabled());
    for i in 0..10 {
        assert_eq!(pool.call(i, |i| i).unwrap(), i);
    }
    // Changed by a reload.
    registry.reload(&config_with(Some((7, 1000)))).unwrap();
    assert_eq!(pool.rate_limiter().limit_for_period(), 7);
    registry.shutdown(Duration::from_secs(10));
}

#[test]
fn a_reentrant_call_is_not_rate_limited() {
    let (_manual, clock) = manual_clock();
    let pool = ThreadPoolBulkhead::with_clock("rate-reentry", &pool_config(), clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 1000, 0)));
    let inner_pool = pool.clone();
    // The outer call takes the period's only permission; the nested one runs inline.
    let nested = pool
        .call(1, move |i| {
            inner_pool.call(i + 1, |j| j).map_err(|r| r.error)
        })
        .unwrap();
    assert_eq!(nested.unwrap(), 2);
    let snap = pool.snapshot();
    assert_eq!(
        (snap.calls.reentrant, snap.calls.refused.rate_limited),
        (1, 0)
    );
    pool.shutdown(Duration::from_secs(10));
}

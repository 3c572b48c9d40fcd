//! The rate limiter, alone and on a semaphore bulkhead: atomic admission, retry_after from
//! the limiter's state, refresh per period, bounded waits, live reload. Time is a
//! `ManualClock`; nothing sleeps.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::task::Poll;
use std::time::Duration;

use bulkhead_core::{
    BulkheadError, RateAdmission, RateLimiter, SemaphoreBulkhead, retry_after_header_secs,
};

mod support;

use support::{WithPolicies, manual_clock, poll_once, rate_limit, semaphore};

const SECOND: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn twenty_threads_racing_a_limit_of_five_get_exactly_five() {
    const THREADS: usize = 20;
    let (clock, shared_clock) = manual_clock();
    let limiter = RateLimiter::new(Some(&rate_limit(5, 1_000, 0)), shared_clock);
    for iteration in 0..250 {
        let start = Barrier::new(THREADS);
        let admitted = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    start.wait();
                    if limiter.reserve(Duration::ZERO) == RateAdmission::Admitted {
                        admitted.fetch_add(1, SeqCst);
                    }
                });
            }
        });
        assert_eq!(admitted.load(SeqCst), 5, "iteration {iteration}");
        clock.advance(SECOND);
    }
}

#[test]
fn twenty_threads_racing_a_rate_limited_bulkhead_get_exactly_five_calls() {
    const THREADS: usize = 20;
    let (clock, shared_clock) = manual_clock();
    // Room for everyone: only the rate limit refuses.
    let bulkhead =
        SemaphoreBulkhead::with_clock("api", &semaphore(THREADS as u32, 0), shared_clock)
            .with_policies(|c| c.rate_limit = Some(rate_limit(5, 1_000, 0)));
    for iteration in 0..200 {
        let start = Barrier::new(THREADS);
        let ran = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    start.wait();
                    let _ = bulkhead.call(|| ran.fetch_add(1, SeqCst));
                });
            }
        });
        assert_eq!(ran.load(SeqCst), 5, "iteration {iteration}");
        clock.advance(SECOND);
    }
    let refused = bulkhead.snapshot().calls.refused;
    assert_eq!(refused.rate_limited, 200 * 15);
    assert_eq!(refused.total(), refused.rate_limited);
}

#[test]
fn retry_after_is_the_time_until_the_next_period() {
    let (clock, shared_clock) = manual_clock();
    let limiter = RateLimiter::new(Some(&rate_limit(2, 1_000, 0)), shared_clock);
    assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
    clock.advance(ms(250));
    assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
    clock.advance(ms(150));
    assert_eq!(
        limiter.reserve(Duration::ZERO),
        RateAdmission::Refused {
            retry_after: ms(600)
        }
    );
    // A refusal reserves nothing: asking again later gives the shorter remainder.
    clock.advance(ms(500));
    assert_eq!(
        limiter.reserve(Duration::ZERO),
        RateAdmission::Refused {
            retry_after: ms(100)
        }
    );
    assert_eq!(limiter.available_permissions(), 0);
}

#[test]
fn a_refused_bulkhead_call_carries_retry_after_for_the_header() {
    let (clock, shared_clock) = manual_clock();
    let bulkhead = SemaphoreBulkhead::with_clock("checkout", &semaphore(4, 0), shared_clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 2_000, 0)));
    assert_eq!(bulkhead.call(|| ()), Ok(()));
    clock.advance(ms(300));
    let err = bulkhead.call(|| ()).unwrap_err();
    assert_eq!(
        err,
        BulkheadError::RateLimited {
            name: "checkout".into(),
            retry_after: ms(1_700)
        }
    );
    assert_eq!(retry_after_header_secs(ms(1_700)), 2);
    // The refusal took no permit.
    assert_eq!(bulkhead.available(), 4);
}

#[test]
fn permissions_refresh_after_the_period_without_accumulating() {
    let (clock, shared_clock) = manual_clock();
    let limiter = RateLimiter::new(Some(&rate_limit(3, 1_000, 0)), shared_clock);
    assert_eq!(limiter.available_permissions(), 3);
    for _ in 0..3 {
        assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
    }
    assert!(matches!(
        limiter.reserve(Duration::ZERO),
        RateAdmission::Refused { .. }
    ));
    clock.advance(SECOND);
    assert_eq!(limiter.available_permissions(), 3);
    // Ten idle periods still leave one period's worth.
    clock.advance(SECOND * 10);
    assert_eq!(limiter.available_permissions(), 3);
}

#[test]
fn a_caller_waits_up_to_the_timeout_for_the_next_period() {
    let (clock, shared_clock) = manual_clock();
    let bulkhead = SemaphoreBulkhead::with_clock("search", &semaphore(4, 0), shared_clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 1_000, 1_500)));
    assert_eq!(bulkhead.call(|| 1), Ok(1));
    std::thread::scope(|s| {
        let waiter = s.spawn(|| bulkhead.call(|| 2));
        // The second call reserved the next period's permission and waits for it.
        clock.wait_for_sleepers(1);
        assert_eq!(bulkhead.rate_limiter().available_permissions(), -1);
        clock.advance(SECOND);
        assert_eq!(waiter.join().unwrap(), Ok(2));
    });
    // The period that just started went to the waiter; the next one is 1s away, within
    // the timeout, so it can be reserved too...
    assert!(matches!(
        bulkhead.rate_limiter().reserve(ms(1_500)),
        RateAdmission::WaitUntil(_)
    ));
    // ...and the one after that, 2s away, is beyond it.
    let err = bulkhead.call(|| 3).unwrap_err();
    assert_eq!(err.retry_after(), Some(SECOND * 2));
}

#[test]
fn a_caller_is_refused_when_the_next_period_is_beyond_its_timeout() {
    let (_clock, shared_clock) = manual_clock();
    let limiter = RateLimiter::new(Some(&rate_limit(1, 1_000, 0)), shared_clock);
    assert_eq!(limiter.reserve(ms(999)), RateAdmission::Admitted);
    assert_eq!(
        limiter.reserve(ms(999)),
        RateAdmission::Refused {
            retry_after: SECOND
        }
    );
    assert!(matches!(
        limiter.reserve(SECOND),
        RateAdmission::WaitUntil(_)
    ));
}

#[test]
fn an_async_caller_waits_for_the_next_period_on_any_executor() {
    let (clock, shared_clock) = manual_clock();
    let bulkhead = SemaphoreBulkhead::with_clock("feed", &semaphore(4, 0), shared_clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 1_000, 1_000)));
    assert_eq!(
        futures_executor::block_on(bulkhead.call_async(async { 1 })),
        Ok(1)
    );
    let mut second = Box::pin(bulkhead.call_async(async { 2 }));
    assert!(poll_once(&mut second).is_pending());
    assert_eq!(clock.sleepers(), 1);
    clock.advance(SECOND);
    assert_eq!(poll_once(&mut second), Poll::Ready(Ok(2)));
}

#[test]
fn a_reservation_given_back_before_its_period_is_free_again_and_not_after() {
    let (clock, shared_clock) = manual_clock();
    let limiter = RateLimiter::new(Some(&rate_limit(1, 1_000, 0)), shared_clock);
    assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
    let RateAdmission::WaitUntil(at) = limiter.reserve(SECOND) else {
        panic!("the next period is within the timeout");
    };
    assert_eq!(limiter.available_permissions(), -1);
    limiter.give_back(at);
    assert_eq!(limiter.available_permissions(), 0);
    // Reserved again; its period starts; giving it back now changes nothing (spent).
    let RateAdmission::WaitUntil(at) = limiter.reserve(SECOND) else {
        panic!("the next period is free again");
    };
    clock.advance(SECOND);
    assert_eq!(limiter.available_permissions(), 0);
    limiter.give_back(at);
    assert_eq!(limiter.available_permissions(), 0);
}

#[test]
fn a_dropped_async_caller_gives_its_reserved_permission_back() {
    let (clock, shared_clock) = manual_clock();
    let bulkhead = SemaphoreBulkhead::with_clock("feed", &semaphore(4, 0), shared_clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 1_000, 1_000)));
    assert_eq!(bulkhead.call(|| 1), Ok(1));
    let mut gone = Box::pin(bulkhead.call_async(async { 2 }));
    assert!(poll_once(&mut gone).is_pending());
    assert_eq!(bulkhead.rate_limiter().available_permissions(), -1);
    drop(gone);
    // The next period's permission is free again: a later caller waits 1s for it instead
    // of being refused (2s away would be beyond its timeout).
    assert_eq!(bulkhead.rate_limiter().available_permissions(), 0);
    let mut next = Box::pin(bulkhead.call_async(async { 3 }));
    assert!(poll_once(&mut next).is_pending());
    clock.advance(SECOND);
    assert_eq!(poll_once(&mut next), Poll::Ready(Ok(3)));
    assert_eq!(bulkhead.snapshot().calls.permitted, 2);
}

#[test]
fn reload_raises_and_lowers_the_limit_at_once() {
    let (clock, shared_clock) = manual_clock();
    let limiter = RateLimiter::new(Some(&rate_limit(2, 1_000, 0)), shared_clock);
    assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
    assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
    // Raised within the period: three more now.
    limiter.reconfigure(Some(&rate_limit(5, 1_000, 0)));
    assert_eq!(limiter.limit_for_period(), 5);
    assert_eq!(limiter.available_permissions(), 3);
    // Lowered: what was used counts against the new limit.
    limiter.reconfigure(Some(&rate_limit(1, 1_000, 0)));
    assert_eq!(limiter.available_permissions(), -1);
    assert!(matches!(
        limiter.reserve(Duration::ZERO),
        RateAdmission::Refused { .. }
    ));
    clock.advance(SECOND);
    assert_eq!(limiter.available_permissions(), 0);
    clock.advance(SECOND);
    assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
}

#[test]
fn reload_can_switch_the_rate_limit_off_and_on() {
    let (_clock, shared_clock) = manual_clock();
    let bulkhead = SemaphoreBulkhead::with_clock("toggle", &semaphore(4, 0), shared_clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 60_000, 0)));
    assert!(bulkhead.call(|| ()).is_ok());
    assert!(bulkhead.call(|| ()).is_err());
    bulkhead.configure(&support::policies(|_| {})).unwrap();
    assert!(!bulkhead.rate_limiter().is_enabled());
    for _ in 0..10 {
        assert!(bulkhead.call(|| ()).is_ok());
    }
    bulkhead
        .configure(&support::policies(|c| {
            c.rate_limit = Some(rate_limit(2, 60_000, 0))
        }))
        .unwrap();
    assert!(bulkhead.call(|| ()).is_ok() && bulkhead.call(|| ()).is_ok());
    assert!(bulkhead.call(|| ()).is_err());
}

#[test]
fn a_new_refresh_period_applies_at_once_and_keeps_what_was_used() {
    let (clock, shared_clock) = manual_clock();
    let limiter = RateLimiter::new(Some(&rate_limit(1, 1_000, 0)), shared_clock);
    clock.advance(ms(700));
    assert_eq!(limiter.reserve(Duration::ZERO), RateAdmission::Admitted);
    limiter.reconfigure(Some(&rate_limit(1, 10_000, 0)));
    assert_eq!(limiter.refresh_period(), Some(SECOND * 10));
    // 0.7s into the new 10s cycle: 9.3s to go, and the used permission still counts.
    assert_eq!(
        limiter.reserve(Duration::ZERO),
        RateAdmission::Refused {
            retry_after: ms(9_300)
        }
    );
}

#[test]
fn retry_after_header_rounds_up_to_whole_seconds() {
    assert_eq!(retry_after_header_secs(Duration::ZERO), 0);
    assert_eq!(retry_after_header_secs(Duration::from_nanos(1)), 1);
    assert_eq!(retry_after_header_secs(ms(999)), 1);
    assert_eq!(retry_after_header_secs(SECOND), 1);
    assert_eq!(retry_after_header_secs(ms(1_001)), 2);
}

#[test]
fn reentrant_calls_are_not_rate_limited() {
    let (_clock, shared_clock) = manual_clock();
    let bulkhead = SemaphoreBulkhead::with_clock("nested", &semaphore(1, 0), shared_clock)
        .with_policies(|c| c.rate_limit = Some(rate_limit(1, 60_000, 0)));
    assert_eq!(bulkhead.call(|| bulkhead.call(|| "inner")), Ok(Ok("inner")));
    assert_eq!(bulkhead.snapshot().calls.reentrant, 1);
}

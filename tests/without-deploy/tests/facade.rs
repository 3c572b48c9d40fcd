//! The facade without its default features (no `deploy`): `#[bulkhead]` functions, the
//! registry, and deploys built in code through the one deploy path — applied, refused and
//! recorded as with every feature.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bulkhead::config::{BulkheadConfig, Config, SemaphoreConfig};
use bulkhead::{BulkheadError, DeployOutcome, bulkhead};

#[bulkhead("lookup")]
fn lookup(key: u64) -> Result<u64, BulkheadError> {
    Ok(key * 2)
}

#[bulkhead("render")]
fn render(page: u64) -> Result<u64, BulkheadError> {
    Ok(page + 1)
}

/// Set to let `fetch`'s body finish.
static RELEASE: AtomicBool = AtomicBool::new(false);

/// An async function on a semaphore with a call timeout: its body waits for `RELEASE`.
#[bulkhead("fetch")]
async fn fetch(key: u64) -> Result<u64, BulkheadError> {
    std::future::poll_fn(|_| {
        if RELEASE.load(Ordering::SeqCst) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    Ok(key + 1)
}

fn semaphore(permits: u32) -> BulkheadConfig {
    BulkheadConfig::semaphore(SemaphoreConfig {
        max_concurrent_calls: permits,
        ..SemaphoreConfig::default()
    })
}

#[test]
fn declared_bulkheads_run_and_a_deploy_in_code_is_applied_refused_and_recorded() {
    assert_eq!(lookup(2).unwrap(), 4);
    assert_eq!(render(1).unwrap(), 2);
    let registry = bulkhead::registry();
    assert_eq!(registry.semaphore("lookup").unwrap().limit(), 2);
    assert!(registry.thread_pool("render").is_some());

    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&outcomes);
    let _listening = registry.subscribe_deploys(move |outcome: &DeployOutcome<'_>| {
        let applied = matches!(outcome, DeployOutcome::Applied { .. });
        seen.lock().unwrap().push(applied);
    });

    let mut deploy = Config::default();
    deploy.bulkheads.insert("lookup".into(), semaphore(5));
    deploy.bulkheads.insert("lookpu".into(), semaphore(1));
    let report = bulkhead::install(&deploy).unwrap();
    assert_eq!(report.resized, ["lookup"]);
    assert_eq!(report.undeclared[0].did_you_mean.as_deref(), Some("lookup"));
    assert_eq!(registry.semaphore("lookup").unwrap().limit(), 5);

    // A kind change is refused as a whole: nothing applied, the refusal recorded.
    let mut wrong = Config::default();
    wrong.bulkheads.insert("render".into(), semaphore(3));
    let refused = bulkhead::reload(&wrong).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("a deploy may change sizes, not kinds"),
        "{refused}"
    );
    assert_eq!(registry.semaphore("lookup").unwrap().limit(), 5);
    let status = registry.reload_status();
    assert_eq!((status.applied, status.refused), (1, 1));
    assert!(status.last_error.unwrap().message.contains("render"));
    assert_eq!(*outcomes.lock().unwrap(), [true, false]);

    // A value no bulkhead may have is refused by the same rules as a file.
    let mut zero = Config::default();
    zero.bulkheads.insert("lookup".into(), semaphore(0));
    let invalid = bulkhead::reload(&zero).unwrap_err();
    assert!(
        invalid
            .to_string()
            .contains("bulkheads.lookup.max_concurrent_calls"),
        "{invalid}"
    );
    assert_eq!(registry.reload_status().refused, 2);
}

/// The async function's one future from the call to its end: a call holds the permit while
/// its body waits, a second call is refused, the first times out at its `timeout` and
/// returns the permit, and a later call runs to the end.
#[test]
fn an_async_function_holds_its_permit_is_refused_when_full_and_times_out() {
    let mut cx = Context::from_waker(Waker::noop());
    let mut first = pin!(fetch(1));
    assert!(first.as_mut().poll(&mut cx).is_pending(), "the body waits");
    let bulkhead = bulkhead::registry().semaphore("fetch").unwrap();
    assert_eq!(
        bulkhead.available(),
        0,
        "the waiting call holds the only permit"
    );

    let mut second = pin!(fetch(2));
    match second.as_mut().poll(&mut cx) {
        Poll::Ready(Err(BulkheadError::Full { .. })) => {}
        other => panic!("expected a refusal while the permit is held, got {other:?}"),
    }

    // The call timeout fires on the bulkhead's clock; poll until it has.
    let timed_out = loop {
        if let Poll::Ready(result) = first.as_mut().poll(&mut cx) {
            break result;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert!(
        matches!(timed_out, Err(BulkheadError::CallTimeout { .. })),
        "{timed_out:?}"
    );
    assert_eq!(
        bulkhead.available(),
        1,
        "the timed-out call returned its permit"
    );

    RELEASE.store(true, Ordering::SeqCst);
    let mut third = pin!(fetch(3));
    assert!(matches!(third.as_mut().poll(&mut cx), Poll::Ready(Ok(4))));
    let calls = bulkhead.snapshot().calls;
    assert_eq!(
        (calls.permitted, calls.timed_out, calls.refused.full),
        (2, 1, 1),
        "{calls:?}"
    );
}

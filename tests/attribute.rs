//! `#[bulkhead]` as a newcomer uses it: only the `bulkhead` facade, the bulkheads declared
//! in this crate's `bulkheads.yaml`, and no set-up code. Every saturation is reached with
//! latches (a gate the test opens, channels that report "I am inside"), never with sleeps.
//!
//! Each test uses a bulkhead of its own (`attr-…`), because the registry is process-wide and
//! the tests of this file run in parallel.

use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Condvar, Mutex};

use bulkhead::{BulkheadError, bulkhead};

/// A latch: callers wait until the test opens it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

fn snapshot(name: &str) -> bulkhead::BulkheadSnapshot {
    bulkhead::registry()
        .snapshot()
        .into_iter()
        .find(|s| s.name.as_str() == name)
        .expect("the bulkhead is registered once it has been called")
}

// ---------------------------------------------------------------------------------------
// A sync function on a semaphore bulkhead (max_concurrent_calls: 2, fail fast).

#[bulkhead("attr-sync-semaphore")]
fn hold_permit(inside: &SyncSender<()>, gate: &Gate) -> Result<u32, BulkheadError> {
    inside.send(()).unwrap();
    gate.wait();
    Ok(7)
}

#[test]
fn sync_semaphore_admits_its_limit_and_refuses_the_next_call_with_full() {
    let gate = Gate::default();
    let (inside, entered) = mpsc::sync_channel(8);
    std::thread::scope(|s| {
        let holders: Vec<_> = (0..2)
            .map(|_| s.spawn(|| hold_permit(&inside, &gate)))
            .collect();
        entered.recv().unwrap();
        entered.recv().unwrap();

        // Both permits are held: the third call is refused at once, and its body never ran.
        let refused = hold_permit(&inside, &gate).unwrap_err();
        assert!(matches!(refused, BulkheadError::Full { .. }), "{refused:?}");
        assert_eq!(refused.name(), "attr-sync-semaphore");
        assert!(entered.try_recv().is_err());

        gate.open();
        for holder in holders {
            assert_eq!(holder.join().unwrap().unwrap(), 7);
        }
    });
    // The permits came back.
    assert_eq!(hold_permit(&inside, &gate).unwrap(), 7);
    let calls = snapshot("attr-sync-semaphore").calls;
    assert_eq!((calls.completed, calls.refused.full), (3, 1));
}

// ---------------------------------------------------------------------------------------
// A `&self` method with borrowed arguments on a thread pool (2 threads, no queue).

struct Renderer {
    title: String,
}

impl Renderer {
    /// Runs on a `render-` worker; the caller blocks, so `&self` and `&[u32]` are fine.
    #[bulkhead("attr-sync-pool")]
    fn render(
        &self,
        rows: &[u32],
        inside: &SyncSender<String>,
        gate: &Gate,
    ) -> Result<String, BulkheadError> {
        let worker = std::thread::current().name().unwrap_or("").to_owned();
        inside.send(worker.clone()).unwrap();
        gate.wait();
        Ok(format!(
            "{}: {} on {worker}",
            self.title,
            rows.iter().sum::<u32>()
        ))
    }
}

#[test]
fn sync_thread_pool_method_runs_on_named_workers_with_borrowed_arguments() {
    let renderer = Renderer {
        title: String::from("sales"),
    };
    let rows = vec![1, 2, 3];
    let gate = Gate::default();
    let (inside, entered) = mpsc::sync_channel(8);
    std::thread::scope(|s| {
        let callers: Vec<_> = (0..2)
            .map(|_| s.spawn(|| renderer.render(&rows, &inside, &gate)))
            .collect();
        let mut workers = vec![entered.recv().unwrap(), entered.recv().unwrap()];
        workers.sort();
        assert!(
            workers.iter().all(|w| w.starts_with("render-")),
            "{workers:?}"
        );
        assert_ne!(workers[0], workers[1], "two calls, two workers");

        // Both threads are busy and there is no queue: refused, body never ran.
        let refused = renderer.render(&rows, &inside, &gate).unwrap_err();
        assert!(matches!(refused, BulkheadError::Full { .. }), "{refused:?}");
        assert!(entered.try_recv().is_err());

        gate.open();
        for c in callers {
            let out = c.join().unwrap().unwrap();
            assert!(out.starts_with("sales: 6 on render-"), "{out}");
        }
    });
}

// ---------------------------------------------------------------------------------------
// `async fn` on a semaphore (2 permits) and on a thread pool (1 thread, no queue).

#[bulkhead("attr-async-semaphore")]
async fn fetch(
    inside: tokio::sync::mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Semaphore>,
) -> Result<&'static str, BulkheadError> {
    inside.send(()).unwrap();
    release.acquire().await.unwrap().forget();
    Ok("fetched")
}

#[tokio::test]
async fn async_semaphore_limits_concurrent_tasks() {
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (inside, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let a = tokio::spawn(fetch(inside.clone(), release.clone()));
    let b = tokio::spawn(fetch(inside.clone(), release.clone()));
    entered.recv().await.unwrap();
    entered.recv().await.unwrap();

    let refused = fetch(inside.clone(), release.clone()).await.unwrap_err();
    assert!(matches!(refused, BulkheadError::Full { .. }), "{refused:?}");
    assert!(entered.try_recv().is_err());

    release.add_permits(2);
    assert_eq!(a.await.unwrap().unwrap(), "fetched");
    assert_eq!(b.await.unwrap().unwrap(), "fetched");
}

#[bulkhead("attr-async-pool")]
async fn crunch(
    inside: tokio::sync::mpsc::UnboundedSender<String>,
    release: Arc<tokio::sync::Semaphore>,
) -> Result<String, BulkheadError> {
    let worker = std::thread::current().name().unwrap_or("").to_owned();
    inside.send(worker.clone()).unwrap();
    release.acquire().await.unwrap().forget();
    Ok(worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_thread_pool_runs_the_future_on_its_worker() {
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (inside, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let first = tokio::spawn(crunch(inside.clone(), release.clone()));
    let worker = entered.recv().await.unwrap();
    assert!(worker.starts_with("crunch-"), "{worker}");

    // The only thread is busy: refused without running.
    let refused = crunch(inside.clone(), release.clone()).await.unwrap_err();
    assert!(matches!(refused, BulkheadError::Full { .. }), "{refused:?}");
    assert!(entered.try_recv().is_err());

    release.add_permits(1);
    assert_eq!(first.await.unwrap().unwrap(), worker);
}

// ---------------------------------------------------------------------------------------
// A fallback gets the original arguments and the error.

#[bulkhead("attr-fallback", fallback = price_unavailable)]
fn price(sku: &str, quantity: u32, inside: &SyncSender<()>, gate: &Gate) -> String {
    inside.send(()).unwrap();
    gate.wait();
    format!("{quantity} x {sku} = {}", quantity * 3)
}

fn price_unavailable(
    sku: &str,
    quantity: u32,
    _inside: &SyncSender<()>,
    _gate: &Gate,
    refused: BulkheadError,
) -> String {
    format!(
        "{quantity} x {sku}: {} ({})",
        refused.reason(),
        refused.name()
    )
}

#[test]
fn fallback_receives_the_arguments_and_the_refusal() {
    let gate = Gate::default();
    let (inside, entered) = mpsc::sync_channel(8);
    std::thread::scope(|s| {
        let holder = s.spawn(|| price("apple", 2, &inside, &gate));
        entered.recv().unwrap();
        assert_eq!(
            price("pear", 5, &inside, &gate),
            "5 x pear: full (attr-fallback)"
        );
        gate.open();
        assert_eq!(holder.join().unwrap(), "2 x apple = 6");
    });
    // Counted as a fallback (`bulkhead_fallbacks_total`), and as the refusal it answered.
    let calls = snapshot("attr-fallback").calls;
    assert_eq!(calls.fallbacks, 1);
    assert_eq!(calls.refused.full, 1);
}

// ---------------------------------------------------------------------------------------
// An `async fn`'s fallback may be an `async fn` itself (a cache read over the network): it
// gets the arguments and the error, and what it returns is awaited.

#[bulkhead("attr-async-fallback", fallback = cached_quote)]
async fn quote(
    sku: String,
    inside: tokio::sync::mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Semaphore>,
) -> String {
    inside.send(()).unwrap();
    release.acquire().await.unwrap().forget();
    format!("live {sku}")
}

async fn cached_quote(
    sku: String,
    _inside: tokio::sync::mpsc::UnboundedSender<()>,
    _release: Arc<tokio::sync::Semaphore>,
    refused: BulkheadError,
) -> String {
    tokio::task::yield_now().await;
    format!("cached {sku} ({})", refused.reason())
}

#[bulkhead("attr-async-pool-fallback", fallback = cached_report)]
async fn report(
    id: u32,
    inside: tokio::sync::mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Semaphore>,
) -> String {
    inside.send(()).unwrap();
    release.acquire().await.unwrap().forget();
    format!("report {id}")
}

async fn cached_report(
    id: u32,
    _inside: tokio::sync::mpsc::UnboundedSender<()>,
    _release: Arc<tokio::sync::Semaphore>,
    refused: BulkheadError,
) -> String {
    tokio::task::yield_now().await;
    format!(
        "cached report {id} ({} on {})",
        refused.reason(),
        refused.name()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_fallback_is_awaited_with_the_arguments_and_the_refusal() {
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (inside, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let live_quote = tokio::spawn(quote("pear".into(), inside.clone(), release.clone()));
    let live_report = tokio::spawn(report(7, inside.clone(), release.clone()));
    entered.recv().await.unwrap();
    entered.recv().await.unwrap();

    // Both bulkheads are full: the fallbacks answer, awaited.
    assert_eq!(
        quote("fig".into(), inside.clone(), release.clone()).await,
        "cached fig (full)"
    );
    assert_eq!(
        report(8, inside.clone(), release.clone()).await,
        "cached report 8 (full on attr-async-pool-fallback)"
    );
    assert!(entered.try_recv().is_err());

    release.add_permits(2);
    assert_eq!(live_quote.await.unwrap(), "live pear");
    assert_eq!(live_report.await.unwrap(), "report 7");
}

// ---------------------------------------------------------------------------------------
// Re-entry the compiler cannot see (another module) runs inline, counted, never deadlocks.

mod reports {
    use bulkhead::{BulkheadError, bulkhead};

    /// On the pool's only thread, calls into the same pool through another module.
    #[bulkhead("attr-reentry")]
    pub fn build(id: u32) -> Result<(String, String), BulkheadError> {
        let outer = std::thread::current().name().unwrap_or("").to_owned();
        let inner = super::sections::load(id)?;
        Ok((outer, inner))
    }
}

mod sections {
    use bulkhead::{BulkheadError, bulkhead};

    #[bulkhead("attr-reentry")]
    pub fn load(_id: u32) -> Result<String, BulkheadError> {
        Ok(std::thread::current().name().unwrap_or("").to_owned())
    }
}

#[test]
fn reentry_across_modules_runs_inline_instead_of_deadlocking() {
    // One thread, no queue: waiting for a second thread would never end (the nested-pool deadlock).
    let (outer, inner) = reports::build(1).unwrap();
    assert!(outer.starts_with("nested-"), "{outer}");
    assert_eq!(
        inner, outer,
        "the nested call ran inline on the same worker"
    );
    assert_eq!(snapshot("attr-reentry").calls.reentrant, 1);
}

/// A call whose dependency answered 503: the body marks it, a drop for the adaptive limit.
#[bulkhead("attr-adaptive-semaphore")]
fn quote_carrier(status: u16) -> Result<u16, BulkheadError> {
    if status == 503 {
        assert!(bulkhead::mark_overloaded());
    }
    Ok(status)
}

#[bulkhead("attr-adaptive-pool")]
async fn render_label(status: u16) -> Result<u16, BulkheadError> {
    if status == 503 {
        assert!(
            bulkhead::mark_overloaded(),
            "marks the call running on the worker"
        );
    }
    Ok(status)
}

#[test]
fn a_body_marks_an_overloaded_outcome_for_the_adaptive_limit() {
    use bulkhead::adaptive::MIN_WINDOW;
    for _ in 1..MIN_WINDOW {
        assert_eq!(quote_carrier(200).unwrap(), 200);
    }
    assert_eq!(snapshot("attr-adaptive-semaphore").limit, 10);
    assert_eq!(quote_carrier(503).unwrap(), 503);
    assert_eq!(snapshot("attr-adaptive-semaphore").limit, 5);
}

#[tokio::test]
async fn an_async_pool_body_marks_an_overloaded_outcome_for_the_adaptive_limit() {
    use bulkhead::adaptive::MIN_WINDOW;
    for _ in 1..MIN_WINDOW {
        assert_eq!(render_label(200).await.unwrap(), 200);
    }
    assert_eq!(snapshot("attr-adaptive-pool").limit, 10);
    assert_eq!(render_label(503).await.unwrap(), 503);
    assert_eq!(snapshot("attr-adaptive-pool").limit, 5);
}

#[bulkhead("partner-api")]
fn call_partner_api() -> Result<&'static str, BulkheadError> {
    Ok("called")
}

/// A cluster-wide concurrency limit declared in `bulkheads.yaml` is compiled in whole
/// (store and lease); its variable unset, no lease can be had: `refuse` refuses `Full`.
#[test]
fn a_cluster_concurrency_limit_is_compiled_in_with_its_store_and_lease() {
    use bulkhead::config::{ClusterLimitConfig, Duration, OnStoreError, RateLimitStore};

    let err = call_partner_api().unwrap_err();
    assert!(matches!(err, BulkheadError::Full { .. }), "{err}");
    let leases = snapshot("partner-api").leases.expect("a cluster limit");
    assert_eq!((leases.limit, leases.store_errors), (50, 1));
    let cluster = bulkhead::registry()
        .config("partner-api")
        .and_then(|c| c.cluster)
        .expect("declared with a cluster limit");
    assert_eq!(
        cluster,
        ClusterLimitConfig {
            store: RateLimitStore {
                on_store_error: OnStoreError::Refuse,
                replicas: 5,
                ..RateLimitStore::redis("${BULKHEAD_README_REDIS_URL}")
            },
            lease_ttl: Duration::from_secs(10),
        }
    );
}

#[bulkhead("attr-cluster-rate")]
fn call_partner_quota() -> Result<&'static str, BulkheadError> {
    Ok("called")
}

/// A cluster-wide rate limit declared in `bulkheads.yaml` is compiled into the binary
/// whole (its store included, `${…}` as written, read at run time). Here the variable is
/// unset, so Redis cannot be reached: `on_store_error: refuse` refuses, and counts it.
#[test]
fn a_cluster_rate_limit_is_compiled_in_with_its_store() {
    use bulkhead::config::{Duration, OnStoreError, RateLimitScope, RateLimitStore};

    let err = call_partner_quota().unwrap_err();
    assert!(matches!(err, BulkheadError::RateLimited { .. }), "{err}");
    assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(1)));
    assert_eq!(
        snapshot("attr-cluster-rate").rate_limit_store_errors,
        Some(1)
    );

    let rate = bulkhead::registry()
        .config("attr-cluster-rate")
        .and_then(|c| c.rate_limit)
        .expect("declared with a rate limit");
    assert_eq!(rate.scope, RateLimitScope::Cluster);
    assert_eq!(
        rate.store,
        Some(RateLimitStore {
            redis: "${BULKHEAD_TEST_NEVER_SET_REDIS_URL}".into(),
            key_prefix: "attr:".into(),
            response_timeout: Duration::from_millis(20),
            on_store_error: OnStoreError::Refuse,
            replicas: 4,
            start_anyway: false,
        })
    );
}

//! Partitions and per-key caps on thread pools declared in `bulkheads.yaml`, through
//! `#[bulkhead(…, partition = …)]` and `key = …` on sync and async functions, and a reload
//! that changes a pool's shares live. The shares divide what a pool admits, running plus
//! queued. Deterministic: a gate, a barrier and single polls; no sleeps.

use std::future::Future;
use std::sync::Barrier;
use std::task::Poll;
use std::thread::ThreadId;

use bulkhead::{BulkheadError, Deploy, DeployError, ReloadProblem, ThreadPoolBulkhead, bulkhead};

mod support;
use support::Latch as Gate;

/// Runs `hold` on a thread of its own, passing it a `wait` that returns once `check` is
/// done; runs `check` once `hold`'s body has called `wait` (it then holds its slot on a
/// worker), and returns what `check` returned.
fn while_held<C>(hold: impl FnOnce(&(dyn Fn() + Sync)) + Send, check: impl FnOnce() -> C) -> C {
    let (gate, started) = (Gate::default(), Barrier::new(2));
    let wait = || {
        started.wait();
        gate.wait();
    };
    // Opened on drop too, so a failed assertion cannot leave a worker waiting on the gate
    // (and the test's scope waiting for that worker).
    struct OpenOnDrop<'a>(&'a Gate);
    impl Drop for OpenOnDrop<'_> {
        fn drop(&mut self) {
            self.0.open();
        }
    }
    std::thread::scope(|s| {
        let _open = OpenOnDrop(&gate);
        s.spawn(|| hold(&wait));
        started.wait();
        check()
    })
}

/// A call of `pool-shares` or `pool-reload` polled by hand.
type Call = std::pin::Pin<Box<dyn Future<Output = Result<u32, BulkheadError>> + Send>>;

fn call(future: impl Future<Output = Result<u32, BulkheadError>> + Send + 'static) -> Call {
    Box::pin(future)
}

fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

fn pool(name: &str) -> ThreadPoolBulkhead {
    bulkhead::registry().thread_pool(name).unwrap()
}

/// (guaranteed, in flight, borrowed, refused) of a partition.
fn partition(name: &str, partition: &str) -> (u32, u32, u64, u64) {
    let partitions = pool(name).snapshot().partitions;
    let p = partitions.iter().find(|p| p.name == partition).unwrap();
    (p.guaranteed, p.in_flight, p.borrowed, p.refused)
}

fn is_full<T>(result: &Result<T, BulkheadError>) -> bool {
    matches!(result, Err(BulkheadError::Full { .. }))
}

// `pool-shares`: 1 thread + 3 queued = 4 slots, `live` and `batch` guaranteed 2 each;
// `on_full: { wait: 60s }`, so a call within its share waits for room.

#[bulkhead("pool-shares", partition = "batch")]
fn batch_report(wait: &(dyn Fn() + Sync)) -> Result<(), BulkheadError> {
    wait();
    Ok(())
}

#[bulkhead("pool-shares", partition = "batch")]
fn batch_total(n: u32) -> Result<u32, BulkheadError> {
    Ok(n)
}

#[bulkhead("pool-shares", partition = "batch")]
async fn batch_async(n: u32) -> Result<u32, BulkheadError> {
    Ok(n)
}

#[bulkhead("pool-shares", partition = "live")]
async fn live_async(n: u32) -> Result<u32, BulkheadError> {
    Ok(n)
}

#[test]
fn a_yaml_pool_admits_each_partition_by_its_share_through_the_attribute() {
    assert_eq!(partition("pool-shares", "batch").0, 2);
    let futures = while_held(
        |wait| batch_report(wait).unwrap(),
        || {
            // Batch's second call is within its share: queued behind the held one.
            let mut within = call(batch_async(2));
            assert!(poll_once(&mut within).is_pending());
            // Its third is past the share: it borrows a free slot (two are left).
            let mut borrowing = call(batch_async(3));
            assert!(poll_once(&mut borrowing).is_pending());
            // Live takes the last slot, within its share.
            let mut live = call(live_async(4));
            assert!(poll_once(&mut live).is_pending());
            let s = pool("pool-shares").snapshot();
            assert_eq!((s.active, s.queued), (1, 3), "4 slots, all taken");
            // The pool is full. Batch, past its share, is refused at once (sync and
            // async), although the pool's `on_full` waits...
            assert!(is_full(&batch_total(5)));
            let mut refused = call(batch_async(6));
            assert!(matches!(poll_once(&mut refused), Poll::Ready(r) if is_full(&r)));
            // ...while live, within its share, waits for the next free slot.
            let mut waiting = call(live_async(7));
            assert!(poll_once(&mut waiting).is_pending());
            // A borrower never goes ahead of a caller waiting for room.
            assert!(is_full(&batch_total(8)));
            // (A pool call's outcome is counted when it ends: the refused ones have.)
            assert_eq!(partition("pool-shares", "batch"), (2, 3, 0, 3));
            assert_eq!(partition("pool-shares", "live").1, 2);
            [within, borrowing, live, waiting]
        },
    );
    let outputs: Vec<u32> = futures.into_iter().map(|f| block_on(f).unwrap()).collect();
    assert_eq!(outputs, [2, 3, 4, 7]);
    // Counted when each call ended: one borrowed, three refused, all counts back.
    assert_eq!(partition("pool-shares", "batch"), (2, 0, 1, 3));
    assert_eq!(partition("pool-shares", "live"), (2, 0, 0, 0));
}

// `pool-keyed`: at most one call per key.

#[bulkhead("pool-keyed", key = tenant)]
fn tenant_report(tenant: &str, wait: &(dyn Fn() + Sync)) -> Result<(), BulkheadError> {
    wait();
    Ok(())
}

#[bulkhead("pool-keyed", key = tenant)]
fn tenant_total(tenant: &str, n: u32) -> Result<u32, BulkheadError> {
    Ok(n)
}

#[bulkhead("pool-keyed", key = tenant)]
async fn tenant_async(tenant: String) -> Result<usize, BulkheadError> {
    Ok(tenant.len())
}

/// Refused calls get their arguments back: the tenant's name, counted as `refused:<name>`.
#[bulkhead("pool-keyed", key = tenant, fallback = refused)]
async fn tenant_label(tenant: String) -> String {
    format!("served:{tenant}")
}

async fn refused(tenant: String, error: BulkheadError) -> String {
    assert!(matches!(error, BulkheadError::KeyLimit { .. }), "{error}");
    format!("refused:{tenant}")
}

#[test]
fn a_keyed_pool_function_refuses_a_key_at_its_cap_and_serves_another() {
    while_held(
        |wait| tenant_report("acme", wait).unwrap(),
        || {
            assert!(matches!(
                tenant_total("acme", 1),
                Err(BulkheadError::KeyLimit { .. })
            ));
            let refused = block_on(tenant_async("acme".to_owned()));
            assert!(matches!(refused, Err(BulkheadError::KeyLimit { .. })));
            assert_eq!(
                block_on(tenant_label("acme".to_owned())),
                "refused:acme",
                "the fallback got the arguments back"
            );
            assert_eq!(tenant_total("globex", 2), Ok(2));
            assert_eq!(block_on(tenant_async("initech".to_owned())), Ok(7));
            let per_key = pool("pool-keyed").snapshot().per_key.unwrap();
            assert_eq!((per_key.keys_tracked, per_key.keys_at_limit), (1, 1));
        },
    );
    let snapshot = pool("pool-keyed").snapshot();
    assert_eq!(snapshot.calls.refused.key_limit, 3);
    assert_eq!(snapshot.per_key.unwrap().keys_at_limit, 0);
}

// `pool-unnamed`: 2 slots, `live` and `batch` guaranteed 1 each; `on_full: { wait: 60s }`.
// Its functions that name no partition only borrow: never wait, never displace a share.

#[bulkhead("pool-unnamed", partition = "live")]
fn unnamed_live_report(wait: &(dyn Fn() + Sync)) -> Result<(), BulkheadError> {
    wait();
    Ok(())
}

#[bulkhead("pool-unnamed", partition = "batch")]
async fn unnamed_batch(n: u32) -> Result<u32, BulkheadError> {
    Ok(n)
}

#[bulkhead("pool-unnamed")]
fn unnamed_total(n: u32) -> Result<u32, BulkheadError> {
    Ok(n)
}

/// Without a fallback: under the bulkhead's call timeout (`call_async_timed`).
#[bulkhead("pool-unnamed")]
async fn unnamed_async(n: u32) -> Result<u32, BulkheadError> {
    Ok(n)
}

/// With a fallback: untimed (`call_async`); the refusal reaches the fallback.
#[bulkhead("pool-unnamed", fallback = unnamed_refused)]
async fn unnamed_label(n: u32) -> String {
    format!("served:{n}")
}

async fn unnamed_refused(n: u32, error: BulkheadError) -> String {
    assert!(matches!(error, BulkheadError::Full { .. }), "{error}");
    format!("refused:{n}")
}

#[test]
fn a_pool_function_naming_no_partition_only_borrows_sync_and_async() {
    let futures = while_held(
        |wait| unnamed_live_report(wait).unwrap(),
        || {
            // One slot is free: an unnamed call borrows it, queued behind the held one.
            let mut borrowing = call(unnamed_async(1));
            assert!(poll_once(&mut borrowing).is_pending());
            let s = pool("pool-unnamed").snapshot();
            assert_eq!((s.active, s.queued), (1, 1), "2 slots, both taken");
            // The pool is full. A call that names no partition is refused at once, although
            // the pool's `on_full` waits: it holds no share to wait for (sync, async timed,
            // async with a fallback).
            assert!(is_full(&unnamed_total(2)));
            let mut refused = call(unnamed_async(3));
            assert!(matches!(poll_once(&mut refused), Poll::Ready(r) if is_full(&r)));
            assert_eq!(block_on(unnamed_label(4)), "refused:4");
            // Batch, below its guarantee, waits for the next free slot.
            let mut batch = call(unnamed_batch(5));
            assert!(poll_once(&mut batch).is_pending());
            [borrowing, batch]
        },
    );
    let outputs: Vec<u32> = futures.into_iter().map(|f| block_on(f).unwrap()).collect();
    assert_eq!(outputs, [1, 5]);
    // With room again, each form is admitted.
    assert_eq!(unnamed_total(6), Ok(6));
    assert_eq!(block_on(unnamed_async(7)), Ok(7));
    assert_eq!(block_on(unnamed_label(8)), "served:8");
    assert_eq!(pool("pool-unnamed").snapshot().calls.refused.full, 3);
}

// `pool-reload`: 4 slots, `live` 0.75 (3) and `batch` 0.25 (1); `on_full: caller-runs`, so
// a call within its share runs on its caller when the pool is full, a borrower is refused.

#[bulkhead("pool-reload", partition = "live")]
fn live_report(wait: &(dyn Fn() + Sync)) -> Result<(), BulkheadError> {
    wait();
    Ok(())
}

#[bulkhead("pool-reload", partition = "live")]
async fn live_queued(n: u32) -> Result<u32, BulkheadError> {
    Ok(n)
}

#[bulkhead("pool-reload", partition = "batch")]
async fn batch_queued(n: u32) -> Result<u32, BulkheadError> {
    Ok(n)
}

/// The thread the body ran on.
#[bulkhead("pool-reload", partition = "batch")]
fn batch_where() -> Result<ThreadId, BulkheadError> {
    Ok(std::thread::current().id())
}

fn deploy(yaml: &str) -> Result<bulkhead::ReloadReport, DeployError> {
    Deploy::new().yaml("deploy.yaml", yaml).unwrap().install()
}

#[test]
fn check_deploy_refuses_a_partition_rename_with_the_words_of_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prod.yaml");
    let yaml = "bulkheads:\n  pool-shares: { partitions: { live: 0.3, bulk: 0.2 } }\n";
    std::fs::write(&file, yaml).unwrap();
    let check = bulkhead::check_deploy(&[&file], false);
    assert!(check.has_errors());
    // The registry's own refusal of the same names, for a config built in code.
    let mut config = bulkhead::registry().config("pool-shares").unwrap();
    config.partitions =
        bulkhead::config::Partitions::new([("live", 0.3), ("batch", 0.5), ("bulk", 0.2)]);
    let mut configs = bulkhead::Config::default();
    configs.bulkheads.insert("pool-shares".to_owned(), config);
    let refused = bulkhead::reload(&configs).unwrap_err();
    let [ReloadProblem::PartitionsChanged { change, .. }] = refused.problems.as_slice() else {
        panic!("{refused}");
    };
    let text = check.human();
    assert!(
        text.contains(&format!(
            "prod.yaml:2:30: error: bulkheads.pool-shares.partitions: {change}"
        )),
        "{text}\n{change}"
    );
}

#[test]
fn a_reload_changes_a_pools_partition_shares_live() {
    let here = std::thread::current().id();
    let futures = while_held(
        |wait| live_report(wait).unwrap(),
        || {
            // Fill the queue: batch within its one slot, live within its three.
            let mut queued = [
                call(batch_queued(1)),
                call(live_queued(2)),
                call(live_queued(3)),
            ];
            for future in &mut queued {
                assert!(poll_once(future).is_pending());
            }
            // Batch holds its share: a further batch call borrows, and the pool is full.
            assert!(is_full(&batch_where()));

            deploy("bulkheads:\n  pool-reload: { partitions: { live: 0.25, batch: 0.75 } }\n")
                .unwrap();
            assert_eq!(partition("pool-reload", "batch").0, 3);
            assert_eq!(partition("pool-reload", "live").0, 1);
            let metrics = bulkhead::prometheus::encode(&[pool("pool-reload").snapshot()]);
            assert!(
                metrics.contains(
                    "bulkhead_partition_guaranteed_calls{bulkhead=\"pool-reload\",partition=\"batch\"} 3\n"
                ),
                "{metrics}"
            );
            // Now within batch's share: the full pool runs it on its caller.
            assert_eq!(batch_where(), Ok(here));

            // Names are fixed: a deploy that adds a partition is refused whole, by its
            // check (at the deploy's `partitions`)...
            let renamed = deploy(
                "bulkheads:\n  pool-reload: { partitions: { live: 0.2, batch: 0.3, bulk: 0.1 } }\n",
            );
            assert!(
                matches!(&renamed, Err(DeployError::Invalid(d)) if d.to_string().contains(
                    "deploy.yaml:2:30: error: bulkheads.pool-reload.partitions: the partitions \
                     are named [\"batch\", \"live\"] and the new config names [\"batch\", \
                     \"bulk\", \"live\"]"
                )),
                "{renamed:?}"
            );
            // ...and by the registry, for a config built in code.
            let mut config = bulkhead::registry().config("pool-reload").unwrap();
            config.partitions = bulkhead::config::Partitions::new([("live", 0.5), ("bulk", 0.5)]);
            let mut configs = bulkhead::Config::default();
            configs.bulkheads.insert("pool-reload".to_owned(), config);
            let refused = bulkhead::reload(&configs).unwrap_err();
            assert!(
                matches!(
                    refused.problems.as_slice(),
                    [ReloadProblem::PartitionsChanged { name, .. }] if name == "pool-reload"
                ),
                "{refused}"
            );
            assert_eq!(partition("pool-reload", "batch").0, 3);
            queued
        },
    );
    for (future, n) in futures.into_iter().zip(1..) {
        assert_eq!(block_on(future), Ok(n));
    }
    // A resize moves every guarantee: 1 thread + 7 queued = 8 slots, a quarter is 2.
    deploy("bulkheads:\n  pool-reload: { queue_capacity: 7 }\n").unwrap();
    assert_eq!(partition("pool-reload", "batch").0, 2);
    assert_eq!(partition("pool-reload", "live").0, 6);
    // Back to the declared sizes and shares.
    deploy("bulkheads: {}\n").unwrap();
    assert_eq!(partition("pool-reload", "batch").0, 1);
}

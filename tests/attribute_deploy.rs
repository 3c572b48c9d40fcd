//! A deploy's config applied to `#[bulkhead]` functions: `install` before first use,
//! `reload` at any time. Sizes may change; kinds may not, and a bulkhead in use may not be
//! left out. (A binary of its own: the registry is process-wide, and these tests rely on
//! which bulkheads have been used.)

use bulkhead::{BulkheadError, Config, bulkhead};
use bulkhead_config::{BulkheadConfig, SemaphoreConfig, ThreadPoolConfig};

#[bulkhead("deploy-sized")]
fn sized() -> Result<(), BulkheadError> {
    Ok(())
}

#[bulkhead("deploy-kind")]
fn kind_checked() -> Result<String, BulkheadError> {
    Ok(std::thread::current().name().unwrap_or("").to_owned())
}

fn semaphore(limit: u32) -> BulkheadConfig {
    BulkheadConfig::semaphore(SemaphoreConfig {
        max_concurrent_calls: limit,
        ..SemaphoreConfig::default()
    })
}

fn limit(name: &str) -> u32 {
    bulkhead::registry().semaphore(name).unwrap().limit()
}

#[test]
fn install_then_reload_apply_sizes_and_refuse_kind_changes_and_drops() {
    // Before first use: the deploy's size replaces the embedded `max_concurrent_calls: 1`.
    // It also (wrongly) makes `deploy-kind` a thread pool, which the code declares a semaphore.
    let mut deploy = Config::default();
    deploy.bulkheads.insert("deploy-sized".into(), semaphore(5));
    deploy.bulkheads.insert(
        "deploy-kind".into(),
        BulkheadConfig::thread_pool(ThreadPoolConfig::default()),
    );
    deploy.bulkheads.insert("deploy-typo".into(), semaphore(1));
    let report = bulkhead::install(&deploy).unwrap();
    assert_eq!(
        report.not_registered,
        ["deploy-kind", "deploy-sized", "deploy-typo"]
    );
    sized().unwrap();
    assert_eq!(limit("deploy-sized"), 5);

    // The kind change does not capture the function: it keeps its declared semaphore and
    // runs on the caller's thread...
    let caller = std::thread::current().name().unwrap_or("").to_owned();
    assert_eq!(kind_checked().unwrap(), caller);
    assert_eq!(limit("deploy-kind"), 1);
    // ...and the same deploy config is refused from now on, naming the problem.
    let err = bulkhead::reload(&deploy).unwrap_err();
    assert!(
        err.to_string()
            .contains("a deploy may change sizes, not kinds"),
        "{err}"
    );
    deploy.bulkheads.insert("deploy-kind".into(), semaphore(3));

    // A live reload resizes the bulkheads the functions already hold handles to.
    deploy.bulkheads.insert("deploy-sized".into(), semaphore(9));
    let report = bulkhead::reload(&deploy).unwrap();
    assert_eq!(report.resized, ["deploy-kind", "deploy-sized"]);
    assert_eq!(report.not_registered, ["deploy-typo"]);
    assert_eq!((limit("deploy-sized"), limit("deploy-kind")), (9, 3));

    // A config that leaves out a bulkhead in use is refused, with nothing applied.
    let mut dropped = deploy.clone();
    dropped.bulkheads.remove("deploy-sized");
    dropped.bulkheads.insert("deploy-kind".into(), semaphore(4));
    let err = bulkhead::reload(&dropped).unwrap_err();
    assert!(
        err.to_string().contains("`deploy-sized` is in use"),
        "{err}"
    );
    assert_eq!((limit("deploy-sized"), limit("deploy-kind")), (9, 3));
}

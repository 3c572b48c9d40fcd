//! The facade without its default features (no `deploy`): `#[bulkhead]` functions, the
//! registry, and deploys built in code through the one deploy path — applied, refused and
//! recorded as with every feature.

use std::sync::{Arc, Mutex};

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

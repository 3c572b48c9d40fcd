//! A deploy applied to `#[bulkhead]` functions, checked against every declaration of the
//! program: the declared bulkheads exist before any call, a deploy may give sizes only, a
//! kind change is refused naming the declaration, and an undeclared name gets a "did you
//! mean" (refused when strict). A binary of its own: the registry is process-wide.

use bulkhead::config::{BulkheadConfig, SemaphoreConfig, ThreadPoolConfig};
use bulkhead::{BulkheadError, Config, Deploy, DeployError, ReloadProblem, bulkhead};

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

/// The tests below share the process-wide registry: run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn every_declared_bulkhead_is_registered_before_any_call() {
    let _serial = serial();
    // No function of this file has been called by this test.
    assert_eq!(
        bulkhead::registry().names(),
        ["deploy-kind", "deploy-sized"]
    );
    let declared: Vec<&str> = bulkhead::declarations().names().collect();
    assert_eq!(declared, ["deploy-kind", "deploy-sized"]);
    let sized = bulkhead::declarations().get("deploy-sized").unwrap();
    assert_eq!(sized.declared_at().crate_name, "bulkheads");
    assert!(
        sized.functions()[0]
            .path
            .ends_with("attribute_deploy::sized")
    );
}

#[test]
fn a_kind_change_of_a_declared_but_unused_bulkhead_is_refused_naming_the_declaration() {
    let _serial = serial();
    let mut deploy = Config::default();
    deploy.bulkheads.insert("deploy-sized".into(), semaphore(5));
    deploy.bulkheads.insert(
        "deploy-kind".into(),
        BulkheadConfig::thread_pool(ThreadPoolConfig::default()),
    );
    let err = bulkhead::install(&deploy).unwrap_err();
    assert!(matches!(
        &err.problems[..],
        [ReloadProblem::KindChanged { name, declared_at: Some(_), .. }] if name == "deploy-kind"
    ));
    let message = err.to_string();
    assert!(
        message.contains("the code declares `deploy-kind` as a semaphore at bulkheads.yaml:")
            && message.contains("(crate bulkheads)")
            && message.contains("a deploy may change sizes, not kinds"),
        "{message}"
    );
    // All or nothing: the valid part was not applied either, and the function still runs
    // on the caller's thread with its declared semaphore.
    assert_eq!(limit("deploy-sized"), 1);
    let caller = std::thread::current().name().unwrap_or("").to_owned();
    assert_eq!(kind_checked().unwrap(), caller);
}

#[test]
fn install_then_reload_resize_the_bulkheads_functions_hold() {
    let _serial = serial();
    let mut deploy = Config::default();
    deploy.bulkheads.insert("deploy-sized".into(), semaphore(5));
    let report = bulkhead::install(&deploy).unwrap();
    assert_eq!(report.resized, ["deploy-sized"]);
    sized().unwrap();
    assert_eq!(limit("deploy-sized"), 5);

    deploy.bulkheads.insert("deploy-sized".into(), semaphore(9));
    deploy.bulkheads.insert("deploy-kind".into(), semaphore(3));
    let report = bulkhead::reload(&deploy).unwrap();
    assert_eq!(report.resized, ["deploy-kind", "deploy-sized"]);
    assert_eq!((limit("deploy-sized"), limit("deploy-kind")), (9, 3));

    // A deploy that no longer names them: back to the declared sizes.
    let report = bulkhead::reload(&Config::default()).unwrap();
    assert_eq!(report.resized, ["deploy-kind", "deploy-sized"]);
    assert_eq!((limit("deploy-sized"), limit("deploy-kind")), (1, 1));
}

#[test]
fn a_deploy_file_may_give_sizes_only_and_a_misspelled_name_gets_a_suggestion() {
    let _serial = serial();
    let yaml = "bulkheads:\n  deploy-sized: { max_concurrent_calls: 7 }\n  deploy-sizd: { max_concurrent_calls: 3 }\n";
    let deploy = Deploy::new().yaml("deploy/prod.yaml", yaml).unwrap();
    let parsed = deploy.resolve().unwrap();
    let warnings = parsed.warnings.to_string();
    assert!(
        warnings.contains("deploy/prod.yaml:3:3: warning: bulkheads.deploy-sizd:")
            && warnings.contains("did you mean `deploy-sized`?"),
        "{warnings}"
    );
    deploy.install().unwrap();
    assert_eq!(limit("deploy-sized"), 7);

    // Strict: the same file is refused, with nothing applied.
    let strict = Deploy::new()
        .yaml("deploy/prod.yaml", &yaml.replace(": 7", ": 8"))
        .unwrap()
        .strict();
    let err = strict.install().unwrap_err();
    assert!(
        matches!(&err, DeployError::Invalid(d) if d.to_string().contains("did you mean `deploy-sized`?")),
        "{err}"
    );
    assert_eq!(limit("deploy-sized"), 7);
    bulkhead::reload(&Config::default()).unwrap();
}

#[test]
fn a_deploy_file_that_changes_a_kind_is_refused_at_the_kind_key() {
    let _serial = serial();
    let yaml = "bulkheads:\n  deploy-kind: { kind: thread-pool, max_threads: 3 }\n";
    let err = Deploy::new()
        .yaml("deploy/prod.yaml", yaml)
        .unwrap()
        .install()
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("deploy/prod.yaml:2:") && message.contains("not kinds"),
        "{message}"
    );
}

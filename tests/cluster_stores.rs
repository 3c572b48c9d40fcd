//! A deploy whose cluster store cannot be used at all — its `${NAME}` variable unset, a
//! URL that is not `redis://…` — is refused by `Deploy::resolve`/`install` and by
//! `check_deploy`, with the key, the reason and the way out; `start_anyway: true` starts.

use bulkhead::{Deploy, bulkhead};

/// Declares `cluster-stores`, so the deploys below size a bulkhead of this program.
#[bulkhead("cluster-stores")]
fn partner_call() -> Result<(), bulkhead::BulkheadError> {
    Ok(())
}

fn deploy(store: &str) -> String {
    format!(
        "bulkheads:\n  cluster-stores:\n    kind: semaphore\n    rate_limit:\n      limit_for_period: 100\n      \
         refresh_period: 1s\n      scope: cluster\n      store: {{ {store}, replicas: 4 }}\n"
    )
}

#[test]
fn an_unset_url_variable_is_refused_with_the_key_and_the_way_out() {
    let text = deploy("redis: \"${BULKHEAD_TEST_STORES_NEVER_SET}\"");
    let errors = Deploy::new()
        .yaml("deploy.yaml", &text)
        .and_then(|d| d.resolve())
        .expect_err("an unusable store is refused");
    let error = errors.iter().next().expect("one error");
    assert_eq!(
        error.key_path,
        "bulkheads.cluster-stores.rate_limit.store.redis"
    );
    assert!(
        error.message.contains("BULKHEAD_TEST_STORES_NEVER_SET")
            && error.message.contains("is not set")
            && error.message.contains("start_anyway: true"),
        "{error}"
    );
    // At the `redis:` value that names the variable, not at the bulkhead's name.
    assert_eq!(
        (error.file.as_str(), error.line, error.column),
        ("deploy.yaml", 8, 23),
        "{error}"
    );

    let dir = std::env::temp_dir().join(format!("bulkhead-stores-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = dir.join("deploy.yaml");
    std::fs::write(&file, &text).expect("written");
    let check = bulkhead::check_deploy(&[&file], false);
    assert!(check.has_errors(), "{}", check.human());
    assert!(
        check.human().contains("BULKHEAD_TEST_STORES_NEVER_SET"),
        "{}",
        check.human()
    );
    std::fs::remove_dir_all(&dir).expect("removed");
}

#[test]
fn a_url_that_is_not_redis_is_refused_without_its_password() {
    let text = deploy("redis: \"http://admin:hunter2@cache.internal:6379/\"");
    let errors = Deploy::new()
        .yaml("deploy.yaml", &text)
        .and_then(|d| d.resolve())
        .expect_err("not a Redis URL");
    let error = errors.iter().next().expect("one error").to_string();
    assert!(error.contains("is not a Redis URL"), "{error}");
    assert!(
        !error.contains("hunter2"),
        "the password never leaves: {error}"
    );
}

#[test]
fn start_anyway_starts_on_on_store_error() {
    let text = deploy("redis: \"${BULKHEAD_TEST_STORES_NEVER_SET}\", start_anyway: true");
    let parsed = Deploy::new()
        .yaml("deploy.yaml", &text)
        .and_then(|d| d.resolve())
        .expect("start_anyway: true starts");
    let store = parsed.deploy.config().bulkheads["cluster-stores"]
        .rate_limit
        .as_ref()
        .and_then(|r| r.store.as_ref())
        .expect("a store");
    assert!(store.start_anyway);
}

//! The API the macro and the runtime call: `parse_file`, `Layers`, `check_against`.

use bulkhead_config::{
    Config, Layers, Limits, Severity, ThreadPoolConfig, check_against, env_var_name, parse_file,
};

const DECLARED: &str = "\
templates:
  query: { kind: thread-pool, core_threads: 20, max_threads: 40, queue_capacity: 200 }
bulkheads:
  product-detail: { extends: query, queue_capacity: 50 }
  search: { extends: query }
  payment: { kind: semaphore, max_concurrent_calls: 10 }
";

fn pool(config: &Config, name: &str) -> ThreadPoolConfig {
    match &config.bulkheads[name].limits {
        Limits::ThreadPool(p) => p.clone(),
        _ => panic!("{name} is not a thread pool"),
    }
}

#[test]
fn an_entry_overrides_its_template_without_changing_it_for_others() {
    let config = parse_file("bulkheads.yaml", DECLARED).unwrap().config;
    assert_eq!(pool(&config, "product-detail").queue_capacity, 50);
    // Resilience4j's baseConfig bug: the override leaked into the shared base. Not here.
    assert_eq!(pool(&config, "search").queue_capacity, 200);
    assert_eq!(pool(&config, "search").max_threads, 40);
}

#[test]
fn diagnostics_display_file_line_column_key_path_and_message() {
    let errors = parse_file(
        "svc/bulkheads.yaml",
        "bulkheads:\n  payment:\n    kind: thread-pool\n    core_threads: 8\n    max_threads: 4\n",
    )
    .unwrap_err();
    let only = errors.iter().next().unwrap();
    assert_eq!((only.line, only.column), (5, 18));
    assert_eq!(only.key_path, "bulkheads.payment.max_threads");
    assert_eq!(
        errors.to_string(),
        "svc/bulkheads.yaml:5:18: error: bulkheads.payment.max_threads: is 4 but `core_threads` is 8: \
         `max_threads` must be at least `core_threads`; raise it to 8 or lower `core_threads`"
    );
    let as_error: &dyn std::error::Error = &errors;
    assert!(as_error.to_string().contains("max_threads"));
}

#[test]
fn parsed_remembers_where_each_bulkhead_is_declared() {
    let parsed = parse_file("bulkheads.yaml", DECLARED).unwrap();
    assert_eq!(parsed.declared_at("search"), Some(("bulkheads.yaml", 5, 3)));
    assert_eq!(parsed.declared_at("nope"), None);
}

#[test]
fn a_deploy_may_resize_but_not_drop_or_change_kinds() {
    let declared = parse_file("bulkheads.yaml", DECLARED).unwrap().config;
    let mut resized = declared.clone();
    if let Limits::ThreadPool(p) = &mut resized.bulkheads.get_mut("search").unwrap().limits {
        p.max_threads = 80;
    }
    assert!(check_against(&declared, &resized).is_empty());

    let mut dropped = declared.clone();
    dropped.bulkheads.remove("payment");
    let problems = check_against(&declared, &dropped);
    assert!(problems.has_errors());
    assert!(problems.to_string().contains("drops it"), "{problems}");

    let kind_changed = parse_file(
        "d.yaml",
        &DECLARED.replace(
            "kind: semaphore, max_concurrent_calls: 10",
            "kind: thread-pool",
        ),
    )
    .unwrap()
    .config;
    let problems = check_against(&declared, &kind_changed);
    assert_eq!(problems.len(), 1);
    assert!(
        problems.to_string().contains("may change sizes, not kinds"),
        "{problems}"
    );
}

#[test]
fn names_the_code_does_not_declare_are_warnings_with_a_suggestion() {
    let declared = parse_file("bulkheads.yaml", DECLARED).unwrap();
    let deploy = parse_file(
        "prod.yaml",
        &format!("{DECLARED}  serch: {{ kind: semaphore }}\n"),
    )
    .unwrap();
    let problems = deploy.check_against(&declared);
    let only = problems.iter().next().unwrap();
    assert_eq!(only.severity, Severity::Warning);
    assert_eq!((only.file.as_str(), only.line), ("prod.yaml", 7));
    assert!(only.message.contains("did you mean `search`?"), "{only}");
}

#[test]
fn layers_apply_in_order_embedded_then_files_then_environment() {
    let config = Layers::new("bulkheads.yaml", DECLARED)
        .yaml(
            "a.yaml",
            "bulkheads:\n  search: { max_threads: 60, queue_capacity: 10 }\n",
        )
        .unwrap()
        .yaml("b.yaml", "bulkheads:\n  search: { max_threads: 70 }\n")
        .unwrap()
        .env_vars([(env_var_name("search", &["queue_capacity"]), "20".to_owned())])
        .extract()
        .unwrap();
    let search = pool(&config, "search");
    assert_eq!(
        (
            search.core_threads,
            search.max_threads,
            search.queue_capacity
        ),
        (20, 70, 20)
    );
}

#[test]
fn an_environment_variable_reaches_nested_keys_of_a_dashed_name() {
    assert_eq!(
        env_var_name("product-detail", &["on_full", "wait"]),
        "BULKHEAD_PRODUCT_DETAIL__ON_FULL__WAIT"
    );
    let config = Layers::new("bulkheads.yaml", DECLARED)
        .env_vars([
            (
                "BULKHEAD_PRODUCT_DETAIL__ON_FULL__WAIT".to_owned(),
                "250ms".to_owned(),
            ),
            (
                "BULKHEAD_CONFIG".to_owned(),
                "not a key override".to_owned(),
            ),
        ])
        .extract()
        .unwrap();
    assert_eq!(
        pool(&config, "product-detail").on_full,
        bulkhead_config::OnFull::Wait(bulkhead_config::Duration::from_millis(250))
    );
}

#[test]
fn an_environment_name_that_could_mean_two_bulkheads_is_an_error() {
    let declared = "bulkheads:\n  a-b: { kind: semaphore }\n  a_b: { kind: semaphore }\n";
    let errors = Layers::new("bulkheads.yaml", declared)
        .env_vars([(
            "BULKHEAD_A_B__MAX_CONCURRENT_CALLS".to_owned(),
            "3".to_owned(),
        )])
        .extract()
        .unwrap_err();
    assert!(
        errors.to_string().contains("could mean `a-b` or `a_b`"),
        "{errors}"
    );
}

#[test]
fn an_unreadable_deploy_file_is_an_error_naming_it() {
    let errors = Layers::new("bulkheads.yaml", DECLARED)
        .file("/nonexistent/prod.yaml")
        .err()
        .unwrap();
    assert!(
        errors
            .to_string()
            .starts_with("/nonexistent/prod.yaml: error: cannot read"),
        "{errors}"
    );
}

#[test]
fn a_broken_embedded_config_is_reported_by_extract() {
    let errors = Layers::new("bulkheads.yaml", "bulkheads:\n  x: { kind: sema }\n")
        .env_vars([])
        .extract()
        .unwrap_err();
    assert!(
        errors
            .to_string()
            .starts_with("bulkheads.yaml:2:14: error: bulkheads.x.kind"),
        "{errors}"
    );
}

#[test]
fn a_deploy_layer_that_is_not_a_mapping_is_an_error_not_ignored() {
    let errors = Layers::new("bulkheads.yaml", DECLARED)
        .yaml("prod.yaml", "- search\n- payment\n")
        .unwrap()
        .extract()
        .unwrap_err();
    assert!(
        errors
            .to_string()
            .starts_with("prod.yaml:1:1: error: the document is a list"),
        "{errors}"
    );
}

#[test]
fn a_cluster_limit_is_layered_like_every_key_files_then_environment() {
    let declared = "bulkheads:\n  partner:\n    kind: semaphore\n    max_concurrent_calls: 50\n    \
                    cluster: { store: { redis: \"redis://127.0.0.1:6379\", replicas: 2 } }\n";
    let config = Layers::new("bulkheads.yaml", declared)
        .yaml(
            "prod.yaml",
            "bulkheads:\n  partner:\n    cluster:\n      store: { on_store_error: refuse }\n      lease_ttl: 30s\n",
        )
        .unwrap()
        .env_vars([
            (
                env_var_name("partner", &["cluster", "store", "replicas"]),
                "5".to_owned(),
            ),
            (
                "BULKHEAD_PARTNER__CLUSTER__LEASE_TTL".to_owned(),
                "20s".to_owned(),
            ),
        ])
        .extract()
        .unwrap();
    let cluster = config.bulkheads["partner"].cluster.clone().unwrap();
    assert_eq!(cluster.store.redis, "redis://127.0.0.1:6379");
    assert_eq!(cluster.store.replicas, 5);
    assert_eq!(
        cluster.store.on_store_error,
        bulkhead_config::OnStoreError::Refuse
    );
    assert_eq!(cluster.lease_ttl, bulkhead_config::Duration::from_secs(20));
}

#[test]
fn a_cluster_limit_on_a_thread_pool_or_with_a_short_lease_is_refused() {
    let text = "bulkheads:\n  pool:\n    kind: thread-pool\n    cluster: { store: { redis: \"redis://h\" } }\n  \
                short:\n    kind: semaphore\n    cluster: { store: { redis: \"redis://h\", response_timeout: 50ms }, lease_ttl: 120ms }\n";
    let errors = parse_file("bulkheads.yaml", text).unwrap_err().to_string();
    assert!(
        errors.contains("bulkheads.pool.cluster: applies to a semaphore's `max_concurrent_calls`"),
        "{errors}"
    );
    assert!(
        errors.contains(
            "bulkheads.short.cluster.lease_ttl: is 120ms: a lease must outlive its heartbeat"
        ),
        "{errors}"
    );
}

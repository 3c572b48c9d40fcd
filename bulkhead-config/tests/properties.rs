//! Properties over generated input: parsing never panics, and every valid config survives
//! being written out and read back.

use std::collections::BTreeMap;

use bulkhead_config::{
    AdaptiveAlgorithm, AdaptiveConfig, BulkheadConfig, BulkheadSpec, CodelConfig, Config,
    ConfigFile, Duration, Expected, Limits, OnFull, OnStoreError, QueueOrder, RateLimitConfig,
    RateLimitScope, RateLimitStore, SaturationThresholds, SemaphoreConfig, ThreadPoolConfig,
    parse_file,
};
use proptest::prelude::*;

/// Pieces of YAML syntax, so generated text reaches deep into the parser instead of
/// failing on the first character.
fn yamlish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("bulkheads:".to_owned()),
        Just("templates:".to_owned()),
        Just("\n".to_owned()),
        Just("  ".to_owned()),
        Just("- ".to_owned()),
        Just(": ".to_owned()),
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(", ".to_owned()),
        Just("&a ".to_owned()),
        Just("*a".to_owned()),
        Just("kind: thread-pool".to_owned()),
        Just("kind: semaphore".to_owned()),
        Just("extends: t".to_owned()),
        Just("max_threads: ".to_owned()),
        Just("on_full: { wait: 2s }".to_owned()),
        Just("---".to_owned()),
        Just("\"".to_owned()),
        Just("!!int ".to_owned()),
        "[a-z_-]{1,12}",
        "-?[0-9]{1,20}(\\.[0-9]{1,3})?(ms|s|ns|h)?",
        any::<char>().prop_map(String::from),
    ];
    proptest::collection::vec(piece, 0..64).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parsing_any_text_never_panics(text in any::<String>()) {
        let _ = parse_file("fuzz.yaml", &text);
    }

    #[test]
    fn parsing_yaml_shaped_text_never_panics(text in yamlish()) {
        // Errors are fine; a panic fails the test. Every error is placed in the file.
        if let Err(errors) = parse_file("fuzz.yaml", &text) {
            for e in &errors {
                prop_assert!(e.is_error());
                prop_assert!(e.line >= 1 && e.column >= 1, "{e}");
            }
        }
    }
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..10_000).prop_map(Duration::from_millis),
        (0u64..100_000_000_000)
            .prop_map(|n| Duration::from_std(std::time::Duration::from_nanos(n))),
    ]
}

fn fraction() -> impl Strategy<Value = f64> {
    (1u32..=1000).prop_map(|n| f64::from(n) / 1000.0)
}

fn saturation() -> impl Strategy<Value = SaturationThresholds> {
    (fraction(), fraction(), fraction(), fraction()).prop_map(|(a, b, c, d)| SaturationThresholds {
        active_warning: a.min(b),
        active_critical: a.max(b),
        queue_warning: c.min(d),
        queue_critical: c.max(d),
    })
}

fn semaphore() -> impl Strategy<Value = Limits> {
    (1u32..=100_000, duration(), any::<bool>()).prop_map(
        |(max_concurrent_calls, max_wait, fair)| {
            Limits::Semaphore(SemaphoreConfig {
                max_concurrent_calls,
                max_wait,
                fair,
            })
        },
    )
}

fn thread_pool() -> impl Strategy<Value = Limits> {
    let on_full = prop_oneof![
        Just(OnFull::Abort),
        Just(OnFull::CallerRuns),
        duration().prop_map(OnFull::Wait),
    ];
    let order = prop_oneof![Just(QueueOrder::Fifo), Just(QueueOrder::AdaptiveLifo)];
    let codel = proptest::option::of((duration(), duration()).prop_map(|(a, b)| CodelConfig {
        target: Duration::from_std(a.as_std() + std::time::Duration::from_millis(1)),
        interval: Duration::from_std(b.as_std() + std::time::Duration::from_millis(1)),
    }));
    (
        (0u32..=10_000, 1u32..=10_000, 0u32..=1_000_000, duration()),
        (
            on_full,
            proptest::option::of(duration()),
            proptest::option::of("[a-z0-9 é_-]{0,10}"),
            order,
            codel,
        ),
    )
        .prop_map(
            |(
                (a, b, queue_capacity, keep_alive),
                (on_full, max_queue_wait, thread_name_prefix, queue_order, codel),
            )| {
                Limits::ThreadPool(ThreadPoolConfig {
                    core_threads: a.min(b),
                    max_threads: a.max(b),
                    queue_capacity,
                    keep_alive,
                    on_full,
                    max_queue_wait,
                    thread_name_prefix,
                    queue_order,
                    codel,
                })
            },
        )
}

fn bulkhead() -> impl Strategy<Value = BulkheadConfig> {
    let store = proptest::option::of(
        (
            prop_oneof![
                Just("redis://127.0.0.1:6379/0".to_owned()),
                Just("${REDIS_URL}".to_owned())
            ],
            "[a-z:]{0,12}",
            duration(),
            prop_oneof![
                Just(OnStoreError::Local),
                Just(OnStoreError::Allow),
                Just(OnStoreError::Refuse)
            ],
            1u32..=64,
        )
            .prop_map(
                |(redis, key_prefix, response_timeout, on_store_error, replicas)| RateLimitStore {
                    redis,
                    key_prefix,
                    response_timeout: Duration::from_std(
                        response_timeout.as_std() + std::time::Duration::from_millis(1),
                    ),
                    on_store_error,
                    replicas,
                    start_anyway: false,
                },
            ),
    );
    let rate_limit =
        proptest::option::of((1u32..=100_000, duration(), duration(), store).prop_map(
            |(limit_for_period, period, timeout, store)| RateLimitConfig {
                limit_for_period,
                refresh_period: Duration::from_std(
                    period.as_std() + std::time::Duration::from_nanos(1),
                ),
                timeout,
                scope: if store.is_some() {
                    RateLimitScope::Cluster
                } else {
                    RateLimitScope::Process
                },
                store,
            },
        ));
    let expected = proptest::option::of((duration(), proptest::option::of(duration())).prop_map(
        |(latency, client_timeout)| Expected {
            latency,
            client_timeout,
        },
    ));
    let adaptive = proptest::option::of(
        (
            prop_oneof![
                Just(AdaptiveAlgorithm::Vegas),
                Just(AdaptiveAlgorithm::Gradient2),
                Just(AdaptiveAlgorithm::Aimd)
            ],
            duration(),
        )
            .prop_map(|(algorithm, timeout)| {
                let mut adaptive = AdaptiveConfig::new(algorithm);
                if algorithm == AdaptiveAlgorithm::Aimd {
                    adaptive.timeout = Some(Duration::from_std(
                        timeout.as_std() + std::time::Duration::from_millis(1),
                    ));
                }
                adaptive
            }),
    );
    (
        prop_oneof![semaphore(), thread_pool()],
        rate_limit,
        // A call timeout of 0 is refused (every call would time out at once).
        proptest::option::of(
            duration()
                .prop_map(|d| Duration::from_std(d.as_std() + std::time::Duration::from_nanos(1))),
        ),
        saturation(),
        expected,
        adaptive,
    )
        .prop_map(
            |(limits, rate_limit, timeout, saturation, expected, adaptive)| {
                // Valid partitions and a per-key cap on thread pools and fair semaphores
                // (the rules' domain).
                let shares = match &limits {
                    bulkhead_config::Limits::Semaphore(s) => s.fair,
                    _ => true,
                };
                // A semaphore that is not fair also shares its limit with the cluster.
                let cluster = matches!(&limits, bulkhead_config::Limits::Semaphore(s) if !s.fair)
                    .then(|| bulkhead_config::ClusterLimitConfig::redis("${REDIS_URL}"));
                BulkheadConfig {
                    limits,
                    rate_limit,
                    timeout,
                    saturation,
                    expected,
                    adaptive,
                    partitions: if shares {
                        bulkhead_config::Partitions::new([("live", 0.75), ("batch", 0.25)])
                    } else {
                        bulkhead_config::Partitions::default()
                    },
                    per_key: shares.then(|| bulkhead_config::PerKeyConfig::new(2)),
                    cluster,
                }
            },
        )
}

fn config() -> impl Strategy<Value = Config> {
    proptest::collection::btree_map("[a-z][a-z0-9_-]{0,15}", bulkhead(), 0..6)
        .prop_map(|bulkheads| Config { bulkheads })
}

/// The config as a file that sets every key of every bulkhead.
fn file_of(config: &Config) -> ConfigFile {
    ConfigFile {
        templates: BTreeMap::new(),
        bulkheads: config
            .bulkheads
            .iter()
            .map(|(n, b)| (n.clone(), BulkheadSpec::from(b)))
            .collect(),
    }
}

/// The same document in YAML's block style, written by saphyr's emitter.
fn block_yaml(json: &str) -> String {
    use saphyr::LoadableYamlNode as _;
    let docs = saphyr::Yaml::load_from_str(json).expect("JSON is YAML");
    let mut out = String::new();
    saphyr::YamlEmitter::new(&mut out)
        .dump(&docs[0])
        .expect("emit");
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_valid_config_round_trips_through_yaml(config in config()) {
        let json = serde_json::to_string(&file_of(&config)).unwrap();
        let flow = parse_file("flow.yaml", &json).map_err(|e| TestCaseError::fail(format!("{e}\n{json}")))?;
        prop_assert_eq!(&flow.config, &config);
        let block = block_yaml(&json);
        let parsed = parse_file("block.yaml", &block).map_err(|e| TestCaseError::fail(format!("{e}\n{block}")))?;
        prop_assert_eq!(&parsed.config, &config);
    }

    #[test]
    fn durations_print_and_parse_back_exactly(nanos in any::<u64>()) {
        let d = Duration::from_std(std::time::Duration::from_nanos(nanos));
        prop_assert_eq!(d.to_string().parse::<Duration>().unwrap(), d);
    }
}

#[cfg(feature = "layers")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Layering goes through figment's values; what comes out must be what went in.
    #[test]
    fn layering_a_config_alone_gives_the_same_config(config in config()) {
        let json = serde_json::to_string(&file_of(&config)).unwrap();
        let layered = bulkhead_config::Layers::new("embedded.yaml", &block_yaml(&json))
            .env_vars([])
            .extract()
            .map_err(|e| TestCaseError::fail(format!("{e}\n{json}")))?;
        prop_assert_eq!(&layered, &config);
    }
}

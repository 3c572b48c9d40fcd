//! One set of rules for every path: a config the file path (`bulkheads.yaml`, as the
//! macro, the CLI and deploys read it) accepts, the code path (`Registry::register`)
//! accepts with the same result, and vice versa — and both refuse with the same messages.
//! The generators reach past every limit: zero and absurd sizes, `core > max`, a rate of
//! `0 per 0s`, a cluster-wide limit without a store or with a bad Redis address, 0 replicas
//! or a 0 response timeout, thresholds outside (0, 1], names that are empty, have spaces, `/`, a
//! newline or NUL, and thread-name prefixes with NUL.

use bulkhead_config::{
    AdaptiveAlgorithm, AdaptiveConfig, BulkheadConfig, BulkheadSpec, CodelConfig, Duration, Limits,
    OnFull, Partitions, PerKeyConfig, QueueOrder, RateLimitConfig, RateLimitScope, RateLimitStore,
    SaturationThresholds, SemaphoreConfig, ThreadPoolConfig, parse_file,
};
use bulkhead_core::{Registry, RegistryError};
use proptest::prelude::*;

/// Sizes on both sides of each rule's bounds.
fn size(bounds: &'static [u32]) -> impl Strategy<Value = u32> {
    prop_oneof![
        proptest::sample::select(bounds),
        0u32..=8,
        Just(u32::MAX),
        any::<u32>(),
    ]
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        (0u64..5_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(|n| Duration::from_std(std::time::Duration::from_nanos(n))),
    ]
}

fn threshold() -> impl Strategy<Value = f64> {
    prop_oneof![
        proptest::sample::select(&[0.0, 0.5, 0.8, 0.95, 1.0, 1.5, -0.25][..]),
        0.0f64..=1.0,
    ]
}

fn limits() -> impl Strategy<Value = Limits> {
    let semaphore = (size(&[1, 1_000_000, 1_000_001]), duration(), any::<bool>()).prop_map(
        |(max_concurrent_calls, max_wait, fair)| {
            Limits::Semaphore(SemaphoreConfig {
                max_concurrent_calls,
                max_wait,
                fair,
            })
        },
    );
    let threads: &[u32] = &[1, 10_000, 10_001];
    let pool = (
        (
            size(threads),
            size(threads),
            size(&[0, 1_000_000, 1_000_001]),
        ),
        (
            prop_oneof![
                Just(OnFull::Abort),
                Just(OnFull::CallerRuns),
                duration().prop_map(OnFull::Wait)
            ],
            proptest::option::of(duration()),
            proptest::option::of("[a-z\0-]{0,4}"),
            proptest::option::of(
                (duration(), duration())
                    .prop_map(|(target, interval)| CodelConfig { target, interval }),
            ),
        ),
    )
        .prop_map(
            |((core_threads, max_threads, queue_capacity), (on_full, wait, prefix, codel))| {
                Limits::ThreadPool(ThreadPoolConfig {
                    core_threads,
                    max_threads,
                    queue_capacity,
                    keep_alive: Duration::from_secs(60),
                    on_full,
                    max_queue_wait: wait,
                    thread_name_prefix: prefix,
                    queue_order: QueueOrder::Fifo,
                    codel,
                })
            },
        );
    prop_oneof![semaphore, pool]
}

fn bulkhead() -> impl Strategy<Value = BulkheadConfig> {
    // A cluster-wide limit's store, with and without each of its rules broken.
    let store = proptest::option::of(
        (
            proptest::sample::select(&[
                "redis://127.0.0.1:1/",
                "${REDIS_URL}",
                "${REDIS-URL}",
                "http://redis:6379",
                "",
            ]),
            duration(),
            0u32..=2,
        )
            .prop_map(|(redis, response_timeout, replicas)| RateLimitStore {
                response_timeout,
                replicas,
                ..RateLimitStore::redis(redis)
            }),
    );
    let scope = prop_oneof![Just(RateLimitScope::Process), Just(RateLimitScope::Cluster)];
    let rate_limit =
        proptest::option::of((0u32..=3, duration(), duration(), scope, store).prop_map(
            |(limit_for_period, refresh_period, timeout, scope, store)| RateLimitConfig {
                limit_for_period,
                refresh_period,
                timeout,
                scope,
                store,
            },
        ));
    let saturation = (threshold(), threshold(), threshold(), threshold()).prop_map(
        |(active_warning, active_critical, queue_warning, queue_critical)| SaturationThresholds {
            active_warning,
            active_critical,
            queue_warning,
            queue_critical,
        },
    );
    // Adaptive bounds on both sides of `min <= initial <= max <= declared`, and parameters
    // in and out of their ranges (finite: the file path writes them out as JSON).
    let ratio = || {
        proptest::option::of(prop_oneof![
            proptest::sample::select(&[0.0, 0.5, 0.9, 1.0, 1.5, -1.0, 6.0][..]),
            0.0f64..=2.0,
        ])
    };
    let adaptive = proptest::option::of(
        (
            prop_oneof![
                Just(AdaptiveAlgorithm::Vegas),
                Just(AdaptiveAlgorithm::Gradient2),
                Just(AdaptiveAlgorithm::Aimd)
            ],
            (
                size(&[0, 1, 2]),
                proptest::option::of(size(&[0, 1, 8])),
                proptest::option::of(size(&[0, 1, 8])),
            ),
            (ratio(), ratio(), ratio(), ratio(), ratio()),
            (
                proptest::option::of(0u32..=3),
                proptest::option::of(duration()),
            ),
        )
            .prop_map(
                |(
                    algorithm,
                    (min, max, initial),
                    (alpha, beta, tolerance, smoothing, backoff),
                    (probe, timeout),
                )| {
                    let mut adaptive = AdaptiveConfig::new(algorithm);
                    adaptive.min_limit = min;
                    adaptive.max_limit = max;
                    adaptive.initial_limit = initial;
                    adaptive.alpha = alpha;
                    adaptive.beta = beta;
                    adaptive.tolerance = tolerance;
                    adaptive.smoothing = smoothing;
                    adaptive.backoff_ratio = backoff;
                    adaptive.probe_interval = probe;
                    adaptive.timeout = timeout;
                    adaptive
                },
            ),
    );
    let timeout = proptest::option::of(duration());
    // Partitions and per-key caps (on either kind), with shares, sums and names in and out
    // of their rules.
    let share = proptest::sample::select(&[0.0, 0.2, 0.5, 0.8, 1.0, 1.5, -0.1][..]);
    let partitions = proptest::collection::btree_map(
        proptest::sample::select(&["live", "batch", "bulk", "a b"][..]).prop_map(String::from),
        share,
        0..3,
    )
    .prop_map(|shares| Partitions { shares });
    let per_key = proptest::option::of(
        (
            0u32..=2,
            proptest::sample::select(&[0u32, 1, 1000, 2_000_000][..]),
        )
            .prop_map(|(max_concurrent_calls, max_keys)| PerKeyConfig {
                max_concurrent_calls,
                max_keys,
            }),
    );
    (
        limits(),
        rate_limit,
        timeout,
        saturation,
        adaptive,
        (partitions, per_key),
    )
        .prop_map(
            |(limits, rate_limit, timeout, saturation, adaptive, (partitions, per_key))| {
                BulkheadConfig {
                    limits,
                    rate_limit,
                    timeout,
                    saturation,
                    expected: None,
                    adaptive,
                    partitions,
                    per_key,
                    cluster: None,
                }
            },
        )
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9_-]{0,8}",
        "[a-z/. \n\0é-]{0,5}",
        Just("../etc/passwd".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_file_path_and_the_code_path_accept_and_refuse_alike(
        name in name(),
        config in bulkhead(),
    ) {
        // The file path: the entry written out with every key set (JSON is YAML).
        let file = serde_json::json!({ "bulkheads": { name.as_str(): BulkheadSpec::from(&config) } });
        let text = serde_json::to_string(&file).unwrap();
        let from_file = parse_file("bulkheads.yaml", &text);
        // The code path.
        let from_code = Registry::new().register(&name, &config);
        match (&from_file, &from_code) {
            (Ok(parsed), Ok(bulkhead)) => {
                prop_assert_eq!(&parsed.config.bulkheads[&name], &config);
                prop_assert_eq!(bulkhead.kind(), config.kind());
            }
            (Err(diagnostics), Err(RegistryError::Invalid(invalid))) => {
                let mut in_file: Vec<&str> = diagnostics.iter().map(|d| d.message.as_str()).collect();
                let mut in_code: Vec<&str> = invalid.problems.iter().map(|p| p.message.as_str()).collect();
                in_file.sort_unstable();
                in_code.sort_unstable();
                prop_assert_eq!(in_file, in_code, "{}", text);
            }
            (file, code) => prop_assert!(
                false,
                "the paths disagree on {:?}:\nfile: {:?}\ncode: {:?}\n{}",
                name,
                file.as_ref().map(|_| "accepted").map_err(ToString::to_string),
                code.as_ref().map(|_| "accepted").map_err(ToString::to_string),
                text
            ),
        }
    }
}

//! The registry: idempotent registration, typed lookups, reloads applied in place, kind
//! changes refused, shutdown of every bulkhead.

use std::time::Duration;

use bulkhead_config_types::{BulkheadConfig, Config, Kind, ThreadPoolConfig};
use bulkhead_core::{Bulkhead, BulkheadError, Registry, RegistryError, ReloadProblem, registry};

mod support;

use support::{manual_clock, rate_limit, semaphore};

fn semaphore_config(max_concurrent_calls: u32) -> BulkheadConfig {
    BulkheadConfig::semaphore(semaphore(max_concurrent_calls, 0))
}

fn pool_config(max_threads: u32) -> BulkheadConfig {
    BulkheadConfig::thread_pool(ThreadPoolConfig {
        core_threads: 1,
        max_threads,
        queue_capacity: 4,
        ..ThreadPoolConfig::default()
    })
}

fn config(entries: &[(&str, BulkheadConfig)]) -> Config {
    let mut config = Config::default();
    for (name, bulkhead) in entries {
        config
            .bulkheads
            .insert((*name).to_owned(), bulkhead.clone());
    }
    config
}

#[test]
fn registering_a_name_again_returns_the_same_bulkhead() {
    let registry = Registry::new();
    let first = registry.register("payment", &semaphore_config(2)).unwrap();
    // Different sizes: the existing bulkhead wins; sizes change only through reload.
    let again = registry.register("payment", &semaphore_config(9)).unwrap();
    let (Bulkhead::Semaphore(first), Bulkhead::Semaphore(again)) = (first, again) else {
        panic!("both are semaphores");
    };
    let _held = first.try_acquire().unwrap();
    assert_eq!(again.snapshot().active, 1);
    assert_eq!(again.limit(), 2);
    assert_eq!(registry.names(), ["payment"]);
}

#[test]
fn registering_a_name_with_another_kind_is_refused() {
    let registry = Registry::new();
    registry.register("db", &semaphore_config(2)).unwrap();
    let err = registry.register("db", &pool_config(2)).unwrap_err();
    assert_eq!(
        err,
        RegistryError::KindMismatch {
            name: "db".into(),
            registered: Kind::Semaphore,
            requested: Kind::ThreadPool,
        }
    );
    assert!(err.to_string().contains("kind cannot change"));
    assert_eq!(registry.get("db").unwrap().kind(), Kind::Semaphore);
}

#[test]
fn typed_lookups_return_only_the_matching_kind() {
    let registry = Registry::new();
    registry.register("sem", &semaphore_config(1)).unwrap();
    registry.register("pool", &pool_config(1)).unwrap();
    assert!(registry.semaphore("sem").is_some());
    assert!(registry.thread_pool("sem").is_none());
    assert!(registry.thread_pool("pool").is_some());
    assert!(registry.semaphore("pool").is_none());
    assert!(registry.get("missing").is_none());
    assert_eq!(registry.names(), ["pool", "sem"]);
    registry.shutdown(Duration::from_secs(5));
}

#[test]
fn reload_resizes_in_place_and_cached_handles_see_it() {
    let (_clock, shared_clock) = manual_clock();
    let registry = Registry::with_clock(shared_clock);
    let cached = registry.semaphore_or_panic("payment", 2);
    let report = registry
        .reload(&config(&[("payment", semaphore_config(5))]))
        .unwrap();
    assert_eq!(report.resized, ["payment"]);
    assert_eq!(cached.limit(), 5);
    assert_eq!(registry.semaphore("payment").unwrap().limit(), 5);
    // Same config again: nothing to do.
    let report = registry
        .reload(&config(&[("payment", semaphore_config(5))]))
        .unwrap();
    assert_eq!(report.unchanged, ["payment"]);
    assert!(report.resized.is_empty());
}

#[test]
fn reload_resizes_a_thread_pool_in_place() {
    let registry = Registry::new();
    let Bulkhead::ThreadPool(pool) = registry.register("reports", &pool_config(2)).unwrap() else {
        panic!("a thread pool");
    };
    let report = registry
        .reload(&config(&[("reports", pool_config(6))]))
        .unwrap();
    assert_eq!(report.resized, ["reports"]);
    assert_eq!(pool.snapshot().limit, 6);
    registry.shutdown(Duration::from_secs(5));
}

#[test]
fn reload_refuses_a_kind_change_and_applies_nothing() {
    let registry = Registry::new();
    let payment = registry.semaphore_or_panic("payment", 2);
    registry.semaphore_or_panic("search", 2);
    let err = registry
        .reload(&config(&[
            ("payment", semaphore_config(10)),
            ("search", pool_config(4)),
        ]))
        .unwrap_err();
    assert_eq!(
        err.problems,
        [ReloadProblem::KindChanged {
            name: "search".into(),
            registered: Kind::Semaphore,
            configured: Kind::ThreadPool,
            declared_at: None,
        }]
    );
    assert!(err.to_string().contains("may change sizes, not kinds"));
    // All or nothing: the valid part was not applied either.
    assert_eq!(payment.limit(), 2);
}

#[test]
fn a_bulkhead_the_deploy_no_longer_names_goes_back_to_the_sizes_its_code_gave_it() {
    let registry = Registry::new();
    registry.semaphore_or_panic("payment", 2);
    let search = registry.semaphore_or_panic("search", 2);
    registry
        .reload(&config(&[
            ("payment", semaphore_config(3)),
            ("search", semaphore_config(7)),
        ]))
        .unwrap();
    assert_eq!(search.limit(), 7);
    let report = registry
        .reload(&config(&[("payment", semaphore_config(3))]))
        .unwrap();
    assert_eq!(
        (report.resized, report.unchanged),
        (vec!["search".to_owned()], vec!["payment".to_owned()])
    );
    assert_eq!(search.limit(), 2);
}

#[test]
fn reload_reports_undeclared_names_with_a_suggestion() {
    let registry = Registry::new();
    registry.semaphore_or_panic("payment", 2);
    let deploy = config(&[
        ("payment", semaphore_config(2)),
        ("paymnet", semaphore_config(4)),
    ]);
    let report = registry.reload(&deploy).unwrap();
    assert_eq!(report.undeclared.len(), 1);
    assert_eq!(report.undeclared[0].name, "paymnet");
    assert_eq!(
        report.undeclared[0].did_you_mean.as_deref(),
        Some("payment")
    );
    assert!(
        report.undeclared[0]
            .to_string()
            .contains("did you mean `payment`?")
    );
    assert_eq!(report.unchanged, ["payment"]);
    assert!(registry.get("paymnet").is_none());

    // Strict: the same deploy is refused, with nothing applied.
    let mut strict = deploy.clone();
    strict
        .bulkheads
        .insert("payment".into(), semaphore_config(9));
    let err = registry.reload_strict(&strict).unwrap_err();
    assert!(matches!(&err.problems[..], [ReloadProblem::Undeclared(u)] if u.name == "paymnet"));
    assert_eq!(registry.semaphore("payment").unwrap().limit(), 2);
}

#[test]
fn a_bulkhead_registered_after_a_reload_starts_with_the_deploys_sizes() {
    let registry = Registry::new();
    let report = registry
        .reload(&config(&[("login", semaphore_config(12))]))
        .unwrap();
    assert_eq!(report.undeclared[0].name, "login");
    let login = registry.semaphore_or_panic("login", 3);
    assert_eq!(login.limit(), 12);
    // Its baseline is what its code gave it: a deploy without it restores 3.
    registry.reload(&Config::default()).unwrap();
    assert_eq!(login.limit(), 3);
}

#[test]
fn reload_applies_a_rate_limit_change() {
    let (_clock, shared_clock) = manual_clock();
    let registry = Registry::with_clock(shared_clock);
    let search = registry.semaphore_or_panic("search", 4);
    assert!(!search.rate_limiter().is_enabled());
    let mut limited = semaphore_config(4);
    limited.rate_limit = Some(rate_limit(1, 1_000, 0));
    let report = registry.reload(&config(&[("search", limited)])).unwrap();
    assert_eq!(report.resized, ["search"]);
    assert_eq!(search.call(|| ()), Ok(()));
    let err = search.call(|| ()).unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
}

#[test]
fn a_registered_rate_limit_comes_from_the_bulkhead_config() {
    let (_clock, shared_clock) = manual_clock();
    let registry = Registry::with_clock(shared_clock);
    let mut limited = semaphore_config(4);
    limited.rate_limit = Some(rate_limit(2, 1_000, 0));
    let Bulkhead::Semaphore(search) = registry.register("search", &limited).unwrap() else {
        panic!("a semaphore");
    };
    assert_eq!(search.rate_limiter().limit_for_period(), 2);
    assert!(search.call(|| ()).is_ok() && search.call(|| ()).is_ok());
    assert!(matches!(
        search.call(|| ()),
        Err(BulkheadError::RateLimited { .. })
    ));
}

#[test]
fn snapshot_lists_every_bulkhead_by_name() {
    let registry = Registry::new();
    registry.semaphore_or_panic("b", 3);
    registry.register("a", &pool_config(2)).unwrap();
    let snapshot = registry.snapshot();
    let names: Vec<&str> = snapshot.iter().map(|s| &*s.name).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(snapshot[0].kind, Kind::ThreadPool);
    assert_eq!((snapshot[1].kind, snapshot[1].limit), (Kind::Semaphore, 3));
    registry.shutdown(Duration::from_secs(5));
}

#[test]
fn shutdown_stops_admission_on_every_bulkhead() {
    let registry = Registry::new();
    let sem = registry.semaphore_or_panic("sem", 2);
    registry.register("pool", &pool_config(2)).unwrap();
    let reports = registry.shutdown(Duration::from_secs(5));
    assert_eq!(reports.len(), 2);
    assert!(reports.values().all(|r| r.still_running() == 0));
    assert!(matches!(
        sem.call(|| ()),
        Err(BulkheadError::ShutDown { .. })
    ));
    let pool = registry.thread_pool("pool").unwrap();
    assert!(pool.is_shut_down());
}

#[test]
fn concurrent_registration_of_one_name_builds_one_bulkhead() {
    for _ in 0..50 {
        let registry = Registry::new();
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    barrier.wait();
                    registry.semaphore_or_panic("shared", 1)
                });
            }
        });
        let sem = registry.semaphore("shared").unwrap();
        // One bulkhead: a permit taken through one handle is gone for every handle.
        let _held = sem.try_acquire().unwrap();
        let other = registry.semaphore("shared").unwrap();
        assert_eq!(other.available(), 0);
    }
}

#[test]
fn the_process_wide_registry_is_one_instance() {
    assert!(std::ptr::eq(registry(), registry()));
    let handle = registry().register("registry-test-global", &semaphore_config(3));
    assert!(handle.is_ok());
    assert!(
        registry()
            .names()
            .contains(&"registry-test-global".to_owned())
    );
}

/// Registration shorthand for semaphores.
trait RegisterSemaphore {
    fn semaphore_or_panic(&self, name: &str, limit: u32) -> bulkhead_core::SemaphoreBulkhead;
}

impl RegisterSemaphore for Registry {
    fn semaphore_or_panic(&self, name: &str, limit: u32) -> bulkhead_core::SemaphoreBulkhead {
        match self.register(name, &semaphore_config(limit)) {
            Ok(Bulkhead::Semaphore(sem)) => sem,
            other => panic!("expected a semaphore, got {other:?}"),
        }
    }
}

/// The problems `register` reports for `name` and `config`, as `key: message`.
fn refusal(registry: &Registry, name: &str, config: &BulkheadConfig) -> Vec<String> {
    match registry.register(name, config) {
        Err(RegistryError::Invalid(invalid)) => {
            assert_eq!(invalid.name, name);
            invalid.problems.iter().map(ToString::to_string).collect()
        }
        other => panic!("`{name:?}` should be refused as invalid, got {other:?}"),
    }
}

#[test]
fn register_refuses_what_a_config_file_would_refuse() {
    let registry = Registry::new();
    let rate = |limit, period| BulkheadConfig {
        rate_limit: Some(rate_limit(limit, period, 0)),
        ..semaphore_config(2)
    };
    let prefixed = BulkheadConfig::thread_pool(ThreadPoolConfig {
        thread_name_prefix: Some("pool\0-".to_owned()),
        ..ThreadPoolConfig::default()
    });
    for (name, config, expected) in [
        (
            "zero",
            semaphore_config(0),
            "max_concurrent_calls: is 0: no call could ever run; set it to at least 1",
        ),
        (
            "huge",
            semaphore_config(u32::MAX),
            "max_concurrent_calls: 4294967295 is absurd (the limit is 1000000)",
        ),
        (
            "threads",
            pool_config(100_000),
            "max_threads: 100000 threads is absurd (the limit is 10000 per pool)",
        ),
        (
            "rate",
            rate(0, 0),
            "rate_limit.limit_for_period: is 0: no call would ever be admitted",
        ),
        (
            "prefix",
            prefixed,
            "thread_name_prefix: contains a NUL character",
        ),
        ("", semaphore_config(2), "the name is empty"),
        ("../etc/passwd", semaphore_config(2), "is not a valid name"),
        ("a\nb", semaphore_config(2), "is not a valid name"),
        ("pool\0", pool_config(2), "is not a valid name"),
    ] {
        let problems = refusal(&registry, name, &config);
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(expected) || p.contains(expected)),
            "{name:?}: {problems:?}"
        );
    }
    assert_eq!(registry.names(), Vec::<String>::new(), "nothing registered");
    // Every problem at once, and the rate limit's period too.
    let both = refusal(&registry, "rate", &rate(0, 0));
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(
        both[1].starts_with("rate_limit.refresh_period: is 0"),
        "{both:?}"
    );
}

#[test]
fn reload_refuses_an_invalid_size_and_applies_nothing() {
    let registry = Registry::new();
    let payment = registry.register("payment", &semaphore_config(4)).unwrap();
    let err = registry
        .reload(&config(&[("payment", semaphore_config(0))]))
        .unwrap_err();
    assert!(
        matches!(&err.problems[..], [ReloadProblem::Invalid(invalid)] if invalid.name == "payment"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "reload refused, nothing applied: bulkheads.payment.max_concurrent_calls: is 0: no \
         call could ever run; set it to at least 1"
    );
    assert_eq!(payment.as_semaphore().unwrap().limit(), 4);
}

//! Cluster-wide rate limits (`scope: cluster`) against a real `redis-server` on 127.0.0.1,
//! started on a free port and stopped by each test.
//!
//! Without `redis-server` on the `PATH` these tests say so on stderr and pass (set
//! `BULKHEAD_REQUIRE_REDIS=1`, as CI does, to make that a failure instead). To run them:
//! `apt-get install redis-server`, then `cargo test -p bulkheads-core --test cluster_rate_limit`.
//!
//! Period attribution in the multi-process test uses the wall clock, which Redis's `TIME`
//! shares on one machine: an admission whose round trip lies inside one period belongs to
//! it; one whose round trip straddles a boundary may belong to either, and is counted as
//! such. The store admits exactly `N` per period, so each period must satisfy
//! `certain ≤ N ≤ certain + straddling`.

mod redis_support;
mod support;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration as StdDuration, Instant, SystemTime, UNIX_EPOCH};

use bulkhead_config_types::{
    BulkheadConfig, Duration, OnStoreError, RateLimitConfig, RateLimitScope, RateLimitStore,
};
use bulkhead_core::{Bulkhead, BulkheadError, Clock, SemaphoreBulkhead, prometheus, system_clock};

use redis_support::{Server, every_fault};
use support::{manual_clock, poll_once, semaphore};

/// A cluster-wide limit of `limit` per `period` on `url`.
fn cluster_limit(
    url: &str,
    limit: u32,
    period: Duration,
    on_store_error: OnStoreError,
) -> RateLimitConfig {
    RateLimitConfig {
        scope: RateLimitScope::Cluster,
        store: Some(RateLimitStore {
            key_prefix: format!("test:{}:", std::process::id()),
            on_store_error,
            replicas: 5,
            response_timeout: Duration::from_millis(100),
            ..RateLimitStore::redis(url)
        }),
        ..RateLimitConfig::per_process(limit, period)
    }
}

/// A semaphore bulkhead named `partner` with `rate_limit`, on `clock`.
fn partner(rate_limit: RateLimitConfig, clock: Arc<dyn Clock>) -> SemaphoreBulkhead {
    let mut config = BulkheadConfig::semaphore(semaphore(1000, 0));
    config.rate_limit = Some(rate_limit);
    let Bulkhead::Semaphore(bulkhead) = Bulkhead::from_config("partner", &config, clock) else {
        unreachable!("a semaphore config builds a semaphore")
    };
    bulkhead
}

/// One call through the bulkhead, and how long it took by the real clock.
fn timed_call(bulkhead: &SemaphoreBulkhead) -> (Result<(), BulkheadError>, StdDuration) {
    let start = Instant::now();
    let result = bulkhead.call(|| ());
    (result, start.elapsed())
}

fn store_errors(bulkhead: &SemaphoreBulkhead) -> u64 {
    bulkhead
        .snapshot()
        .rate_limit_store_errors
        .expect("a cluster-wide limit reports its store errors")
}

fn micros_now() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_micros(),
    )
    .expect("fits")
}

/// The period of the single-process tests: long, so that no period boundary (aligned to
/// the Unix epoch on Redis's clock) falls within a test but once an hour.
const HOUR: u64 = 3600;

const SHARED_LIMIT: u32 = 25;
const SHARED_PERIOD_MS: u64 = 500;

/// Runs three children ([`cluster_child`]) against `server` until `end` (µs since the
/// epoch), calling `meanwhile` while they run; returns each admission as the periods of
/// its start and end and whether Redis decided it, and the span all three ran for.
fn run_children(
    server_url: &str,
    mode: &str,
    end: u64,
    meanwhile: impl FnOnce(),
) -> (Vec<(u64, u64, bool)>, std::ops::Range<u64>) {
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--ignored", "--exact", "cluster_child", "--nocapture"])
                .env("CLUSTER_CHILD_REDIS", server_url)
                .env("CLUSTER_CHILD_END_US", end.to_string())
                .env("CLUSTER_CHILD_MODE", mode)
                .stdout(Stdio::piped())
                .spawn()
                .expect("a child process")
        })
        .collect();
    meanwhile();
    let outputs: Vec<String> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("the child finishes");
            assert!(out.status.success(), "a child failed: {out:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .collect();
    let period = SHARED_PERIOD_MS * 1000;
    let (mut first, mut last) = (0u64, u64::MAX);
    let mut admissions = Vec::new();
    let mut slowest = 0;
    for out in &outputs {
        let field = |tag: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(tag))
                .unwrap_or_else(|| panic!("no `{tag}` line in a child's output:\n{out}"))
                .split(' ')
                .map(|n| n.parse::<u64>().expect("a number"))
                .collect::<Vec<_>>()
        };
        first = first.max(field("first ")[0]);
        last = last.min(field("last ")[0]);
        let [refused, min_retry, max_retry, _errors] = field("refused ")[..] else {
            panic!("a malformed `refused` line:\n{out}")
        };
        assert!(refused > 0, "the children asked for more than the limit");
        assert!(
            min_retry > 0 && max_retry <= period,
            "retry_after is within one period and never zero: {min_retry}..={max_retry} µs"
        );
        for line in out.lines().filter_map(|l| l.strip_prefix("admitted ")) {
            let [sent, answered, by_redis] = line
                .split(' ')
                .map(|n| n.parse::<u64>().expect("a number"))
                .collect::<Vec<_>>()[..]
            else {
                panic!("a malformed `admitted` line: {line}")
            };
            admissions.push((sent / period, answered / period, by_redis == 1));
            if by_redis == 1 {
                slowest = slowest.max(answered - sent);
            }
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "{mode}: the slowest call Redis admitted took {slowest} µs"
    );
    (admissions, first.div_ceil(period)..last / period)
}

/// The admissions inside period `w`, and those whose call straddles one of its edges.
fn in_period(admissions: &[(u64, u64, bool)], w: u64) -> (u64, u64) {
    let certain = admissions
        .iter()
        .filter(|&&(s, a, _)| s == w && a == w)
        .count() as u64;
    let straddling = admissions
        .iter()
        .filter(|&&(s, a, _)| s != a && (s == w || a == w))
        .count() as u64;
    (certain, straddling)
}

/// Three OS processes (this test binary, running [`cluster_child`]) hammer one limit of
/// 25 per 500ms for about four seconds; every period in which all three were running
/// admitted exactly 25 in total.
#[test]
fn three_processes_share_one_limit() {
    let Some(server) = Server::start() else {
        return;
    };
    let end = micros_now() + 4_000_000;
    let (admissions, full) = run_children(&server.url(), "steady", end, || {});
    assert!(
        full.end >= full.start + 3,
        "the children overlapped for at least three whole periods ({full:?})"
    );
    assert!(admissions.iter().all(|a| a.2), "Redis decided every call");
    let limit = u64::from(SHARED_LIMIT);
    for w in full.clone() {
        let (certain, straddling) = in_period(&admissions, w);
        assert!(
            certain <= limit && limit <= certain + straddling,
            "period {w}: {certain} admissions inside it and {straddling} across its edges, \
             for a shared limit of {limit}"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "three processes: {} whole periods, each {limit} admissions in total",
        full.end - full.start
    );
}

/// Three processes (`replicas: 3`) on one limit of 25 per 500ms while Redis is killed
/// (after 1.5 s) and restarted empty (after 2.5 s), for each `on_store_error`. No period
/// admits more than the documented bound: with `local`, `limit + replicas − 1` (the
/// shares, 9 each, are rounded up), with `refuse` the limit; `allow` is unbounded (its
/// totals are printed). Every period's total is printed, the figure the docs quote.
#[test]
fn a_redis_kill_and_return_stay_within_the_bound_for_each_on_store_error() {
    for mode in ["local", "refuse", "allow"] {
        let Some(mut server) = Server::start() else {
            return;
        };
        let start = micros_now();
        let end = start + 4_500_000;
        let port = server.port;
        let url = server.url();
        let mut restarted = None;
        let (admissions, full) = run_children(&url, mode, end, || {
            let sleep_until = |at: u64| {
                let now = micros_now();
                std::thread::sleep(StdDuration::from_micros(at.saturating_sub(now)));
            };
            sleep_until(start + 1_500_000);
            server.kill();
            sleep_until(start + 2_500_000);
            restarted = Some(Server::start_on(port));
        });
        let limit = u64::from(SHARED_LIMIT);
        let bound = match mode {
            "local" => limit + 3 - 1,
            "refuse" => limit,
            _ => u64::MAX,
        };
        let (mut totals, mut excess) = (Vec::new(), Vec::new());
        for w in full.clone() {
            let (certain, straddling) = in_period(&admissions, w);
            let on_their_own = admissions
                .iter()
                .filter(|&&(s, a, by_redis)| s == w && a == w && !by_redis)
                .count();
            totals.push(format!("{certain}(+{straddling}, {on_their_own} local)"));
            excess.push((w, certain, straddling));
        }
        let _ = writeln!(
            std::io::stderr(),
            "on_store_error {mode}: per-period totals through a kill and restart of Redis \
             (limit {limit}): {}",
            totals.join(" ")
        );
        for (w, certain, straddling) in excess {
            assert!(
                certain <= bound,
                "{mode}: period {w} admitted {certain} (and {straddling} across its edges), \
                 above the bound {bound} for a limit of {limit}"
            );
        }
        assert_eq!(
            admissions.iter().any(|a| !a.2),
            mode != "refuse",
            "{mode}: calls admitted without Redis"
        );
        drop(restarted);
    }
}

/// The child process of the multi-process tests: calls as fast as it can until the end
/// instant, printing each admission's round trip and whether Redis decided it, and a
/// summary of its refusals.
#[test]
#[ignore = "a child process of the multi-process tests, which run it"]
fn cluster_child() {
    let url = std::env::var("CLUSTER_CHILD_REDIS").expect("run by a multi-process test");
    let end: u64 = std::env::var("CLUSTER_CHILD_END_US")
        .expect("an end instant")
        .parse()
        .expect("µs");
    let mode = std::env::var("CLUSTER_CHILD_MODE").expect("a mode");
    let on_error = match mode.as_str() {
        "local" => OnStoreError::Local,
        "allow" => OnStoreError::Allow,
        _ => OnStoreError::Refuse,
    };
    let mut limit = cluster_limit(
        &url,
        SHARED_LIMIT,
        Duration::from_millis(SHARED_PERIOD_MS),
        on_error,
    );
    if let Some(store) = &mut limit.store {
        // The three processes share a key; the machine may be busy.
        store.key_prefix = "test:shared:".to_owned();
        store.replicas = 3;
        store.response_timeout = Duration::from_secs(if mode == "steady" { 2 } else { 1 });
    }
    let bulkhead = partner(limit, system_clock());
    let mut out = String::new();
    let (mut refused, mut min_retry, mut max_retry) = (0u64, u64::MAX, 0u64);
    let first = micros_now();
    let mut last = first;
    while last < end {
        let errors = store_errors(&bulkhead);
        let sent = micros_now();
        let result = bulkhead.call(|| ());
        last = micros_now();
        let by_redis = u8::from(store_errors(&bulkhead) == errors);
        match result {
            Ok(()) => {
                out.push_str(&format!("admitted {sent} {last} {by_redis}\n"));
                if by_redis == 0 {
                    eprintln!(
                        "LOCAL {} {} {}",
                        std::process::id(),
                        last / 500_000,
                        bulkhead.rate_limiter().available_permissions()
                    );
                }
            }
            Err(BulkheadError::RateLimited { retry_after, .. }) => {
                // Rounded up: a refusal near a period's end may be due in under 1 µs.
                let micros =
                    u64::try_from(retry_after.as_nanos().div_ceil(1000)).unwrap_or(u64::MAX);
                refused += 1;
                min_retry = min_retry.min(micros);
                max_retry = max_retry.max(micros);
            }
            Err(other) => panic!("only the rate limit refuses here: {other}"),
        }
    }
    print!(
        "{out}first {first}\nlast {last}\nrefused {refused} {min_retry} {max_retry} {}\n",
        store_errors(&bulkhead)
    );
}

/// Redis killed mid-run: each `on_store_error` does what it says, every decision Redis did
/// not make is counted (snapshot and Prometheus), and no call waits past the store's
/// `response_timeout` plus the limiter's `timeout` (checked with a generous second). With
/// `local`, the process's share of the period is charged with what Redis admitted for it.
#[test]
fn redis_killed_mid_run_follows_each_on_store_error() {
    for on_error in [
        OnStoreError::Local,
        OnStoreError::Allow,
        OnStoreError::Refuse,
    ] {
        let Some(mut server) = Server::start() else {
            return;
        };
        let (_clock, shared) = manual_clock();
        let bulkhead = partner(
            cluster_limit(&server.url(), 10, Duration::from_secs(HOUR), on_error),
            shared,
        );
        let bound = StdDuration::from_millis(100) + StdDuration::from_secs(1);
        assert_eq!(timed_call(&bulkhead).0, Ok(()), "{on_error:?}");
        assert_eq!(store_errors(&bulkhead), 0);

        server.kill();
        let calls: Vec<_> = (0..20).map(|_| timed_call(&bulkhead)).collect();
        let admitted = calls.iter().filter(|(r, _)| r.is_ok()).count();
        for (result, took) in &calls {
            assert!(*took <= bound, "{on_error:?}: a call took {took:?}");
            if let Err(error) = result {
                let retry_after = error.retry_after().expect("only RateLimited");
                assert!(
                    retry_after > StdDuration::ZERO && retry_after <= StdDuration::from_secs(HOUR)
                );
            }
        }
        match on_error {
            // This process's share, 10 / replicas 5 = 2 per period, less the call Redis
            // admitted for it in this period.
            OnStoreError::Local => assert_eq!(admitted, 1, "the share less what Redis admitted"),
            OnStoreError::Allow => assert_eq!(admitted, 20),
            OnStoreError::Refuse => assert_eq!(admitted, 0),
            other => panic!("no expectation for {other:?}"),
        }
        // With `local`, once the share is spent calls are refused by it without asking.
        let errors = if on_error == OnStoreError::Local {
            1
        } else {
            20
        };
        assert_eq!(store_errors(&bulkhead), errors, "{on_error:?}");
        let text = prometheus::encode(&[bulkhead.snapshot()]);
        assert!(
            text.contains(&format!(
                "bulkhead_rate_limit_store_errors_total{{bulkhead=\"partner\"}} {errors}\n"
            )),
            "{text}"
        );
    }
}

/// Redis restarted (empty): the limiter waits out its reconnect delay without touching
/// Redis, then one probe brings every call back to the shared count.
#[test]
fn restarted_redis_resumes_the_cluster_limit_without_a_reconnect_storm() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let (clock, shared) = manual_clock();
    let bulkhead = partner(
        cluster_limit(
            &server.url(),
            3,
            Duration::from_secs(HOUR),
            OnStoreError::Allow,
        ),
        shared,
    );
    for _ in 0..3 {
        assert_eq!(bulkhead.call(|| ()), Ok(()));
    }
    assert!(
        bulkhead.call(|| ()).is_err(),
        "the store refuses the fourth"
    );

    server.kill();
    assert_eq!(bulkhead.call(|| ()), Ok(()), "allowed while Redis is down");
    assert_eq!(store_errors(&bulkhead), 1);
    let server = Server::start_on(server.port);
    let before = server.connections_received();
    for _ in 0..50 {
        assert_eq!(bulkhead.call(|| ()), Ok(()), "allowed while reconnecting");
    }
    assert_eq!(store_errors(&bulkhead), 51);
    assert_eq!(
        server.connections_received(),
        before + 1,
        "only the test's own connection: no call reached Redis during the reconnect delay"
    );

    clock.advance(StdDuration::from_millis(100));
    for _ in 0..3 {
        assert_eq!(bulkhead.call(|| ()), Ok(()));
    }
    assert!(
        bulkhead.call(|| ()).is_err(),
        "the restarted store counts again (a refusal cannot come from `allow`)"
    );
    assert_eq!(store_errors(&bulkhead), 51, "Redis decided again");
    assert_eq!(
        server.connections_received(),
        before + 3,
        "one new connection for the limiter"
    );
}

/// Redis made slow (`DEBUG SLEEP`): the call caught by it gives up after `response_timeout`
/// (checked with a generous second), the next ones skip Redis until the reconnect delay
/// has passed, and then the store decides again.
#[test]
fn slow_redis_costs_one_response_timeout_then_is_skipped_until_it_answers() {
    let Some(server) = Server::start() else {
        return;
    };
    let (clock, shared) = manual_clock();
    let bulkhead = partner(
        cluster_limit(
            &server.url(),
            100_000,
            Duration::from_secs(60),
            OnStoreError::Refuse,
        ),
        shared,
    );
    assert_eq!(bulkhead.call(|| ()), Ok(()), "Redis answers at first");

    let mut admin = server.admin();
    let sleeper = std::thread::spawn(move || {
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("1.5")
            .query::<()>(&mut admin)
            .expect("DEBUG SLEEP");
    });
    // Until the sleep catches a call (which it must while the thread waits on it).
    let caught = loop {
        let (result, took) = timed_call(&bulkhead);
        if result.is_err() {
            break took;
        }
        assert!(!sleeper.is_finished(), "the sleep caught a call");
    };
    assert!(
        caught <= StdDuration::from_millis(100) + StdDuration::from_secs(1),
        "the caught call took {caught:?}"
    );
    assert_eq!(store_errors(&bulkhead), 1);
    for _ in 0..10 {
        let (result, took) = timed_call(&bulkhead);
        let retry_after = result.unwrap_err().retry_after().expect("RateLimited");
        assert_eq!(
            retry_after,
            StdDuration::from_secs(60),
            "`refuse` answers one period"
        );
        assert!(
            took <= StdDuration::from_secs(1),
            "skipped calls do not wait: {took:?}"
        );
    }
    assert_eq!(store_errors(&bulkhead), 11);

    sleeper.join().expect("the sleep ends");
    clock.advance(StdDuration::from_millis(100));
    assert_eq!(bulkhead.call(|| ()), Ok(()), "the store decides again");
    assert_eq!(store_errors(&bulkhead), 11);
}

/// An async caller that finds the period used up reserves one of the next period in Redis
/// (within its `timeout`) and waits for it on the bulkhead's clock; a caller whose wait
/// would exceed the timeout is refused without reserving anything.
#[test]
fn async_callers_wait_for_a_period_reserved_in_redis() {
    let Some(server) = Server::start() else {
        return;
    };
    let (clock, shared) = manual_clock();
    let period = StdDuration::from_secs(HOUR);
    let bulkhead = partner(
        RateLimitConfig {
            timeout: Duration::from_std(period),
            ..cluster_limit(
                &server.url(),
                2,
                Duration::from_std(period),
                OnStoreError::Refuse,
            )
        },
        shared,
    );
    for _ in 0..2 {
        let mut admitted = Box::pin(bulkhead.acquire_async());
        assert!(matches!(poll_once(&mut admitted), Poll::Ready(Ok(_))));
    }
    // The next two reserve the next period; a fifth would need the one after (> 1 hour).
    let mut waiting: Vec<_> = (0..2).map(|_| Box::pin(bulkhead.acquire_async())).collect();
    for w in &mut waiting {
        assert!(poll_once(w).is_pending(), "waits for the next period");
    }
    let mut refused = Box::pin(bulkhead.acquire_async());
    match poll_once(&mut refused) {
        Poll::Ready(Err(error)) => {
            let retry_after = error.retry_after().expect("RateLimited");
            assert!(
                retry_after > period && retry_after <= 2 * period,
                "{retry_after:?}"
            );
        }
        other => panic!("the fifth is refused: {other:?}"),
    }
    clock.advance(period);
    for w in &mut waiting {
        assert!(
            matches!(poll_once(w), Poll::Ready(Ok(_))),
            "its period has started"
        );
    }
    assert_eq!(store_errors(&bulkhead), 0);
}

/// A URL read from an unset environment variable makes every decision it is asked for a
/// store error (counted, `on_store_error` followed), never a panic; no Redis needed.
#[test]
fn an_unset_url_variable_is_a_counted_store_error() {
    let (_clock, shared) = manual_clock();
    let mut limit = cluster_limit(
        "${BULKHEAD_TEST_NEVER_SET}",
        10,
        Duration::from_secs(HOUR),
        OnStoreError::Local,
    );
    if let Some(store) = &mut limit.store {
        store.replicas = 4;
    }
    let bulkhead = partner(limit, shared);
    let admitted = (0..10).filter(|_| bulkhead.call(|| ()).is_ok()).count();
    assert_eq!(
        admitted, 3,
        "this process's share: 10 / 4 replicas, rounded up"
    );
    assert_eq!(
        store_errors(&bulkhead),
        3,
        "once the share is spent, calls are refused by it without asking the store"
    );
}

/// Store errors are logged as a `WARN` at most once per 10 seconds (by the bulkhead's
/// clock), each warning carrying how many errors it stands for; no Redis needed.
#[test]
fn store_errors_are_logged_at_a_bounded_rate() {
    let variable = "BULKHEAD_TEST_NEVER_SET_LOG_RATE";
    let warnings = redis_support::warnings();
    let counts = || -> Vec<Option<u64>> {
        let mine = warnings.about(variable);
        mine.iter().map(|w| w.store_errors).collect()
    };
    let (clock, shared) = manual_clock();
    let bulkhead = partner(
        cluster_limit(
            &format!("${{{variable}}}"),
            10,
            Duration::from_secs(HOUR),
            OnStoreError::Allow,
        ),
        shared,
    );
    for _ in 0..20 {
        assert_eq!(bulkhead.call(|| ()), Ok(()), "`allow` admits");
    }
    assert_eq!(counts(), [Some(1)]);
    clock.advance(StdDuration::from_secs(10));
    assert_eq!(bulkhead.call(|| ()), Ok(()));
    assert_eq!(
        counts(),
        [Some(1), Some(20)],
        "the second warning stands for the 19 unreported errors and its own"
    );
    assert_eq!(store_errors(&bulkhead), 21);
}

/// A reload applies at once, as with the local limiter: a higher `limit_for_period` adds
/// its difference to the current period in Redis; back to `scope: process` the bulkhead
/// counts locally and reports no store errors.
#[test]
fn a_reload_changes_the_cluster_limit_live() {
    let Some(server) = Server::start() else {
        return;
    };
    let (_clock, shared) = manual_clock();
    let limit = |n| {
        cluster_limit(
            &server.url(),
            n,
            Duration::from_secs(HOUR),
            OnStoreError::Refuse,
        )
    };
    let bulkhead = partner(limit(2), shared);
    let admitted = |calls: usize| (0..calls).filter(|_| bulkhead.call(|| ()).is_ok()).count();
    assert_eq!(admitted(3), 2);
    let set = |config| bulkhead.configure(&support::policies(|c| c.rate_limit = Some(config)));
    set(limit(4)).unwrap();
    assert_eq!(bulkhead.rate_limiter().limit_for_period(), 4);
    assert_eq!(admitted(3), 2, "two more in this period");
    set(limit(3)).unwrap();
    assert_eq!(admitted(1), 0, "four taken, three allowed");
    assert_eq!(store_errors(&bulkhead), 0);

    set(RateLimitConfig::per_process(5, Duration::from_secs(HOUR))).unwrap();
    assert!(!bulkhead.rate_limiter().is_cluster_wide());
    assert_eq!(bulkhead.snapshot().rate_limit_store_errors, None);
    let text = prometheus::encode(&[bulkhead.snapshot()]);
    assert!(
        !text.contains("bulkhead_rate_limit_store_errors_total"),
        "{text}"
    );
}

/// Redis killed while four threads are calling: no call panics or waits past the store's
/// `response_timeout` (checked with a generous second), and the calls go on under
/// `on_store_error` once Redis is gone.
#[test]
fn redis_killed_under_concurrent_calls_holds_no_call_past_the_bound() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    let Some(mut server) = Server::start() else {
        return;
    };
    let (_clock, shared) = manual_clock();
    let bulkhead = partner(
        cluster_limit(
            &server.url(),
            1_000_000,
            Duration::from_secs(HOUR),
            OnStoreError::Allow,
        ),
        shared,
    );
    let answered = AtomicU64::new(0);
    let slowest = std::thread::scope(|scope| {
        let callers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let mut slowest = StdDuration::ZERO;
                    while store_errors(&bulkhead) < 1000 {
                        let (result, took) = timed_call(&bulkhead);
                        assert_eq!(result, Ok(()), "a huge limit, or `allow`");
                        slowest = slowest.max(took);
                        answered.fetch_add(1, Relaxed);
                    }
                    slowest
                })
            })
            .collect();
        // Kill it once the callers are under way (Redis has answered 100 calls).
        support::wait_until(|| answered.load(Relaxed) >= 100);
        server.kill();
        callers
            .into_iter()
            .map(|c| c.join().expect("no caller panics"))
            .max()
            .expect("four callers")
    });
    assert!(
        slowest <= StdDuration::from_millis(100) + StdDuration::from_secs(1),
        "the slowest call took {slowest:?}"
    );
    assert!(store_errors(&bulkhead) >= 1000);
}

/// Every fault a server can show: no decision waits longer than `response_timeout` (200ms
/// here) of wall-clock time, end to end; each is a store error (`refuse`: the fake answers
/// would admit), and the warning says what happened (see `redis_support::every_fault`).
#[test]
fn no_decision_waits_past_response_timeout_whatever_the_server_does() {
    let budget = StdDuration::from_millis(200);
    every_fault("rate limit", budget, |fake, url| {
        let (clock, shared) = manual_clock();
        let mut limit = cluster_limit(url, 10, Duration::from_secs(HOUR), OnStoreError::Refuse);
        if let Some(store) = &mut limit.store {
            store.response_timeout = Duration::from_std(budget);
        }
        let bulkhead = partner(limit, shared);
        let mut slowest = StdDuration::ZERO;
        for round in 0..3 {
            let (result, took) = timed_call(&bulkhead);
            assert!(
                matches!(result, Err(BulkheadError::RateLimited { .. })),
                "{fake:?}: a store error refuses, got {result:?}"
            );
            assert_eq!(store_errors(&bulkhead), round + 1, "{fake:?}");
            slowest = slowest.max(took);
            // Past the reconnect delay: the next call asks the server again.
            clock.advance(StdDuration::from_secs(10));
        }
        slowest
    });
}

/// A paused Redis (`CLIENT PAUSE`) holds the script: the call gives up after
/// `response_timeout` and is a store error; once the pause ends, Redis decides again.
#[test]
fn a_paused_redis_costs_one_response_timeout() {
    let Some(server) = Server::start() else {
        return;
    };
    let (clock, shared) = manual_clock();
    let budget = StdDuration::from_millis(200);
    let mut limit = cluster_limit(
        &server.url(),
        100,
        Duration::from_secs(HOUR),
        OnStoreError::Refuse,
    );
    if let Some(store) = &mut limit.store {
        store.response_timeout = Duration::from_std(budget);
    }
    let bulkhead = partner(limit, shared);
    assert_eq!(bulkhead.call(|| ()), Ok(()), "Redis answers at first");
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("ALL")
        .query::<()>(&mut server.admin())
        .expect("CLIENT PAUSE");
    let (result, took) = timed_call(&bulkhead);
    assert!(
        result.is_err(),
        "a paused Redis does not decide: {result:?}"
    );
    assert_eq!(store_errors(&bulkhead), 1);
    redis_support::within_budget("CLIENT PAUSE", took, budget);
    redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query::<()>(&mut server.admin())
        .expect("CLIENT UNPAUSE");
    clock.advance(StdDuration::from_millis(100));
    assert_eq!(bulkhead.call(|| ()), Ok(()), "Redis decides again");
    assert_eq!(store_errors(&bulkhead), 1);
}

/// A key overwritten with another type (`WRONGTYPE`) is not clobbered: the decision is a
/// store error whose warning names the key and how to free it.
#[test]
fn a_key_of_another_type_is_reported_with_the_fix() {
    let Some(server) = Server::start() else {
        return;
    };
    let limit = cluster_limit(
        &server.url(),
        5,
        Duration::from_secs(HOUR),
        OnStoreError::Refuse,
    );
    let key = format!(
        "{}partner",
        limit.store.as_ref().expect("a store").key_prefix
    );
    redis::cmd("SET")
        .arg(&key)
        .arg("someone else's")
        .query::<()>(&mut server.admin())
        .expect("SET");
    let warnings = redis_support::warnings();
    let (_clock, shared) = manual_clock();
    let bulkhead = partner(limit, shared);
    assert!(
        bulkhead.call(|| ()).is_err(),
        "refused: the store could not decide"
    );
    assert_eq!(store_errors(&bulkhead), 1);
    let warnings = warnings.about(&format!("redis-cli DEL {key}"));
    assert!(
        warnings.iter().any(|w| w.text.contains("another type")),
        "{warnings:?}"
    );
    let kept: String = redis::cmd("GET")
        .arg(&key)
        .query(&mut server.admin())
        .expect("GET");
    assert_eq!(kept, "someone else's", "the other value is left alone");
}

/// `check_cluster_stores` asks every cluster store once: a healthy one is `Ok`, a key of
/// another type is reported with the command that frees it, a stopped Redis says so, and
/// bulkheads without a cluster limit are left out.
#[test]
fn the_health_check_reports_each_store_once() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let registry = bulkhead_core::Registry::new();
    let limit = |prefix: &str| {
        let mut config = BulkheadConfig::semaphore(semaphore(10, 0));
        let mut rate = cluster_limit(
            &server.url(),
            5,
            Duration::from_secs(HOUR),
            OnStoreError::Refuse,
        );
        if let Some(store) = &mut rate.store {
            store.key_prefix = prefix.to_owned();
        }
        config.rate_limit = Some(rate);
        config
    };
    registry
        .register("healthy", &limit("ok:"))
        .expect("registered");
    registry
        .register("clobbered", &limit("bad:"))
        .expect("registered");
    registry
        .register("local", &BulkheadConfig::semaphore(semaphore(10, 0)))
        .expect("registered");
    redis::cmd("RPUSH")
        .arg("bad:clobbered")
        .arg("x")
        .query::<()>(&mut server.admin())
        .expect("RPUSH");
    let checks = bulkhead_core::check_cluster_stores(&registry);
    let result = |name: &str| {
        checks
            .iter()
            .find(|c| c.bulkhead.as_str() == name)
            .map(|c| c.result.clone())
    };
    assert_eq!(checks.len(), 2, "{checks:?}");
    assert_eq!(result("healthy"), Some(Ok(())));
    let clobbered = result("clobbered").expect("checked").unwrap_err();
    assert!(
        clobbered.contains("redis-cli DEL bad:clobbered"),
        "{clobbered}"
    );
    assert_eq!(result("local"), None);

    server.kill();
    let down = bulkhead_core::check_cluster_stores(&registry);
    assert!(
        down.iter().all(|c| c
            .result
            .as_ref()
            .is_err_and(|why| why.contains("cannot connect to Redis"))),
        "{down:?}"
    );
}

//! Cluster-wide rate limits (`scope: cluster`) against a real `redis-server` on 127.0.0.1,
//! started on a free port and stopped by each test.
//!
//! Without `redis-server` on the `PATH` these tests say so on stderr and pass (set
//! `BULKHEAD_REQUIRE_REDIS=1`, as CI does, to make that a failure instead). To run them:
//! `apt-get install redis-server`, then `cargo test -p bulkhead-core --test cluster_rate_limit`.
//!
//! Period attribution in the multi-process test uses the wall clock, which Redis's `TIME`
//! shares on one machine: an admission whose round trip lies inside one period belongs to
//! it; one whose round trip straddles a boundary may belong to either, and is counted as
//! such. The store admits exactly `N` per period, so each period must satisfy
//! `certain ≤ N ≤ certain + straddling`.

mod support;

use std::io::{BufRead, BufReader, Write as _};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration as StdDuration, Instant, SystemTime, UNIX_EPOCH};

use bulkhead_config_types::{
    BulkheadConfig, Duration, OnStoreError, RateLimitConfig, RateLimitScope, RateLimitStore,
};
use bulkhead_core::{Bulkhead, BulkheadError, Clock, SemaphoreBulkhead, prometheus, system_clock};

use support::{manual_clock, poll_once, semaphore};

/// A `redis-server` child process on a free port; killed when dropped.
struct Server {
    child: Option<Child>,
    port: u16,
}

impl Server {
    /// A new server, or `None` (after saying so) when `redis-server` is not installed.
    fn start() -> Option<Server> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("BULKHEAD_REQUIRE_REDIS").is_none(),
                "BULKHEAD_REQUIRE_REDIS is set but redis-server is not on the PATH"
            );
            static SAID: std::sync::Once = std::sync::Once::new();
            // Straight to the process's stderr: the test harness captures `eprintln!`.
            SAID.call_once(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: the cluster rate-limit tests against Redis need `redis-server` on \
                     the PATH; install it (apt-get install redis-server), then run \
                     cargo test -p bulkhead-core --test cluster_rate_limit"
                );
            });
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        Some(Server::start_on(port))
    }

    /// A server on `port`, once it accepts connections.
    fn start_on(port: u16) -> Server {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--logfile", ""])
            .args(["--enable-debug-command", "local"])
            .current_dir(std::env::temp_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut log = String::new();
        loop {
            match lines.next() {
                Some(Ok(line)) => {
                    log.push_str(&line);
                    log.push('\n');
                    if line.contains("Ready to accept connections") {
                        break;
                    }
                }
                _ => panic!("redis-server on port {port} exited before it was ready:\n{log}"),
            }
        }
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Server {
            child: Some(child),
            port,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A connection for the test's own commands.
    fn admin(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("the test connects to its redis-server")
    }

    /// Kills the server (SIGKILL) and waits for it to be gone.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `INFO stats` `total_connections_received`.
    fn connections_received(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut self.admin())
            .expect("INFO stats");
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("INFO stats has total_connections_received")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

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

/// Three OS processes (this test binary, running [`cluster_child`]) hammer one limit of
/// 25 per 500ms for about four seconds; every period in which all three were running
/// admitted exactly 25 in total.
#[test]
fn three_processes_share_one_limit() {
    let Some(server) = Server::start() else {
        return;
    };
    let end = micros_now() + 4_000_000;
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--ignored", "--exact", "cluster_child", "--nocapture"])
                .env("CLUSTER_CHILD_REDIS", server.url())
                .env("CLUSTER_CHILD_END_US", end.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a child process")
        })
        .collect();
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
        let [refused, min_retry, max_retry, errors] = field("refused ")[..] else {
            panic!("a malformed `refused` line:\n{out}")
        };
        assert!(refused > 0, "the children asked for more than the limit");
        assert!(
            min_retry > 0 && max_retry <= period,
            "retry_after is within one period and never zero: {min_retry}..={max_retry} µs"
        );
        assert_eq!(errors, 0, "Redis answered every decision");
        for line in out.lines().filter_map(|l| l.strip_prefix("admitted ")) {
            let (sent, answered) = line.split_once(' ').expect("two instants");
            admissions.push((
                sent.parse::<u64>().expect("µs") / period,
                answered.parse::<u64>().expect("µs") / period,
            ));
        }
    }
    // Periods during which all three children were running from start to end.
    let full = first.div_ceil(period)..last / period;
    assert!(
        full.end >= full.start + 3,
        "the children overlapped for at least three whole periods ({full:?})"
    );
    let limit = u64::from(SHARED_LIMIT);
    for w in full.clone() {
        let certain = admissions
            .iter()
            .filter(|&&(s, a)| s == w && a == w)
            .count() as u64;
        let straddling = admissions
            .iter()
            .filter(|&&(s, a)| s != a && (s == w || a == w))
            .count() as u64;
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

/// The child process of [`three_processes_share_one_limit`]: calls as fast as it can until
/// the end instant, printing each admission's round trip and a summary of its refusals.
#[test]
#[ignore = "a child process of three_processes_share_one_limit, which runs it"]
fn cluster_child() {
    let url = std::env::var("CLUSTER_CHILD_REDIS").expect("run by three_processes_share_one_limit");
    let end: u64 = std::env::var("CLUSTER_CHILD_END_US")
        .expect("an end instant")
        .parse()
        .expect("µs");
    let mut limit = cluster_limit(
        &url,
        SHARED_LIMIT,
        Duration::from_millis(SHARED_PERIOD_MS),
        OnStoreError::Refuse,
    );
    if let Some(store) = &mut limit.store {
        // The three processes share a key; the machine may be busy.
        store.key_prefix = "test:shared:".to_owned();
        store.response_timeout = Duration::from_secs(2);
    }
    let bulkhead = partner(limit, system_clock());
    let mut out = String::new();
    let (mut refused, mut min_retry, mut max_retry) = (0u64, u64::MAX, 0u64);
    let first = micros_now();
    let mut last = first;
    while last < end {
        let sent = micros_now();
        let result = bulkhead.call(|| ());
        last = micros_now();
        match result {
            Ok(()) => out.push_str(&format!("admitted {sent} {last}\n")),
            Err(BulkheadError::RateLimited { retry_after, .. }) => {
                let micros = u64::try_from(retry_after.as_micros()).unwrap_or(u64::MAX);
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
/// `response_timeout` plus the limiter's `timeout` (checked with a generous second).
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
        for _ in 0..10 {
            assert_eq!(timed_call(&bulkhead).0, Ok(()), "{on_error:?}");
        }
        let (refused, _) = timed_call(&bulkhead);
        let retry_after = refused.unwrap_err().retry_after().expect("RateLimited");
        assert!(retry_after > StdDuration::ZERO && retry_after <= StdDuration::from_secs(HOUR));
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
            // This process's share: 10 / replicas 5 = 2 per period.
            OnStoreError::Local => assert_eq!(admitted, 2),
            OnStoreError::Allow => assert_eq!(admitted, 20),
            OnStoreError::Refuse => assert_eq!(admitted, 0),
            other => panic!("no expectation for {other:?}"),
        }
        assert_eq!(store_errors(&bulkhead), 20, "{on_error:?}");
        let text = prometheus::encode(&[bulkhead.snapshot()]);
        assert!(
            text.contains("bulkhead_rate_limit_store_errors_total{bulkhead=\"partner\"} 20\n"),
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

/// A URL read from an unset environment variable makes every decision a store error
/// (counted, `on_store_error` followed), never a panic; no Redis needed.
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
    assert_eq!(store_errors(&bulkhead), 10);
}

/// Collects the `store_errors` field of every event that has one.
#[derive(Clone, Default)]
struct StoreErrorWarnings(Arc<std::sync::Mutex<Vec<(tracing::Level, u64)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StoreErrorWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Count(Option<u64>);
        impl tracing::field::Visit for Count {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                if field.name() == "store_errors" {
                    self.0 = Some(value);
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut count = Count(None);
        event.record(&mut count);
        if let Some(n) = count.0 {
            self.0.lock().unwrap().push((*event.metadata().level(), n));
        }
    }
}

/// Store errors are logged as a `WARN` at most once per 10 seconds (by the bulkhead's
/// clock), each warning carrying how many errors it stands for; no Redis needed.
#[test]
fn store_errors_are_logged_at_a_bounded_rate() {
    use tracing_subscriber::layer::SubscriberExt as _;

    let warnings = StoreErrorWarnings::default();
    let subscriber = tracing_subscriber::registry().with(warnings.clone());
    tracing::subscriber::with_default(subscriber, || {
        let (clock, shared) = manual_clock();
        let bulkhead = partner(
            cluster_limit(
                "${BULKHEAD_TEST_NEVER_SET}",
                10,
                Duration::from_secs(HOUR),
                OnStoreError::Allow,
            ),
            shared,
        );
        for _ in 0..20 {
            assert_eq!(bulkhead.call(|| ()), Ok(()), "`allow` admits");
        }
        assert_eq!(*warnings.0.lock().unwrap(), [(tracing::Level::WARN, 1)]);
        clock.advance(StdDuration::from_secs(10));
        assert_eq!(bulkhead.call(|| ()), Ok(()));
        assert_eq!(
            *warnings.0.lock().unwrap(),
            [(tracing::Level::WARN, 1), (tracing::Level::WARN, 20)],
            "the second warning stands for the 19 unreported errors and its own"
        );
        assert_eq!(store_errors(&bulkhead), 21);
    });
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
    bulkhead.set_rate_limit(Some(&limit(4)));
    assert_eq!(bulkhead.rate_limiter().limit_for_period(), 4);
    assert_eq!(admitted(3), 2, "two more in this period");
    bulkhead.set_rate_limit(Some(&limit(3)));
    assert_eq!(admitted(1), 0, "four taken, three allowed");
    assert_eq!(store_errors(&bulkhead), 0);

    bulkhead.set_rate_limit(Some(&RateLimitConfig::per_process(
        5,
        Duration::from_secs(HOUR),
    )));
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

//! Workload 7 (`ClusterRateLimit`): admission through a cluster-wide rate limit (`scope: cluster`, one Lua
//! script per call on a `redis-server` this bench starts on 127.0.0.1) against the local
//! limiter, in the same run; and the cost of a call while Redis is down (the store backs
//! off, so the call falls back to the local share without touching the network).
//!
//! Then a semaphore whose `max_concurrent_calls` is the cluster's (`cluster:`, a lease per
//! call in Redis) against the same semaphore without it: a call takes an idle lease of its
//! process when there is one (no round trip) and acquires one from Redis otherwise; the
//! row's note says how many of the calls went to Redis (`INFO commandstats`). A second
//! row forces a round trip on (nearly) every call: it calls [`FRESH_BULKHEADS`] such
//! semaphores in turn, so by the time a bulkhead is called again its heartbeat has
//! released the lease its last call left idle, and the call acquires a new one.
//!
//! Skipped, with the reason in the table, when `redis-server` is not on the `PATH`.

use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use bulkhead_config_types::{
    BulkheadConfig, ClusterLimitConfig, Duration, OnStoreError, RateLimitConfig, RateLimitScope,
    RateLimitStore,
};
use bulkhead_core::{Bulkhead, SemaphoreBulkhead, system_clock};

use crate::fixtures::semaphore_config;
use crate::harness::{Cell, Row, each, measure, report};
use crate::harness::{Settings, find};
use crate::workloads::Workload;

const LOCAL: &str = "rate-limited call, scope: process";
const CLUSTER: &str = "rate-limited call, scope: cluster (Redis on 127.0.0.1)";
const DOWN: &str = "rate-limited call, scope: cluster, Redis down (local share)";
const TITLE: &str = "rate-limit admission, cluster vs local";
const SEMAPHORE: &str = "semaphore call, max_concurrent_calls per process";
const LEASED: &str = "semaphore call, max_concurrent_calls of the cluster (a lease in Redis)";
const LEASE_TITLE: &str = "concurrency-limit admission, cluster vs local";
const FRESH: &str = "semaphore call, max_concurrent_calls of the cluster, a new lease each call";
const FRESH_TITLE: &str = "concurrency-limit admission, a round trip per call, vs local";
/// The semaphores the round-trip row calls in turn (each with its heartbeat thread).
const FRESH_BULKHEADS: usize = 32;

/// A limit no workload reaches: every call is admitted.
const LIMIT: u32 = 1_000_000_000;

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
    let Some((mut server, url)) = start_redis() else {
        for (title, ours, peer) in [
            (TITLE, CLUSTER, LOCAL),
            (LEASE_TITLE, LEASED, SEMAPHORE),
            (FRESH_TITLE, FRESH, SEMAPHORE),
        ] {
            rows.push(Row {
                workload: Workload::ClusterRateLimit,
                title: title.into(),
                ours: Cell::missing(ours, "skipped: no redis-server on the PATH"),
                peer: Cell::missing(peer, "–"),
                target: "–".into(),
            });
        }
        return;
    };
    let local = limited(RateLimitConfig::per_process(LIMIT, Duration::from_secs(1)));
    let cluster = limited(cluster_limit(&url));
    // Nothing listens on port 1: the store fails once, then backs off.
    let down = limited(cluster_limit("redis://127.0.0.1:1/"));
    let (mut x, mut y, mut z) = (0u64, 0u64, 0u64);
    let results = measure(
        settings.fast,
        vec![
            each(LOCAL, || {
                x += 1;
                black_box(local.call(|| black_box(x)).ok());
            }),
            each(CLUSTER, || {
                y += 1;
                black_box(cluster.call(|| black_box(y)).ok());
            }),
            each(DOWN, || {
                z += 1;
                black_box(down.call(|| black_box(z)).ok());
            }),
        ],
    );
    let leases = leases_row(settings, &url);
    let fresh = fresh_leases_row(settings, &url);
    let _ = server.kill();
    let _ = server.wait();
    report(TITLE, &results);
    let errors = cluster.snapshot().rate_limit_store_errors.unwrap_or(0);
    rows.push(Row {
        workload: Workload::ClusterRateLimit,
        title: TITLE.into(),
        ours: Cell::of(find(&results, CLUSTER)).with_note(format!("{errors} store errors")),
        peer: Cell::of(find(&results, LOCAL)),
        target: "– (one round trip)".into(),
    });
    rows.push(Row {
        workload: Workload::ClusterRateLimit,
        title: "rate-limit admission, Redis down vs local".into(),
        ours: Cell::of(find(&results, DOWN)),
        peer: Cell::of(find(&results, LOCAL)),
        target: "–".into(),
    });
    rows.push(leases);
    rows.push(fresh);
}

/// The round-trip row: [`FRESH_BULKHEADS`] semaphores whose limit is the cluster's, called
/// in turn, so that a call finds no idle lease (its bulkhead's heartbeat released it
/// meanwhile) and acquires one from Redis; the note counts the scripts sent (an acquire
/// and a release per call when every call went to Redis).
fn fresh_leases_row(settings: &Settings, url: &str) -> Row {
    let cluster = (0..FRESH_BULKHEADS)
        .map(|_| leased(url, "bench:fresh"))
        .collect();
    lease_row(
        settings,
        url,
        [FRESH_TITLE, FRESH, "– (one round trip)"],
        " (2 a call: acquire, release)",
        cluster,
    )
}

/// The concurrency-limit row: one caller, calls through a semaphore whose limit is the
/// cluster's and through one whose limit is its own; the note counts the calls that went
/// to Redis.
fn leases_row(settings: &Settings, url: &str) -> Row {
    lease_row(
        settings,
        url,
        [LEASE_TITLE, LEASED, "– (one round trip, or an idle lease)"],
        "",
        vec![leased(url, "bench")],
    )
}

/// A row of calls through `cluster`'s semaphores in turn against a semaphore whose limit
/// is its own; `[title, label, target]` name it, and the note counts the scripts sent.
fn lease_row(
    settings: &Settings,
    url: &str,
    [title, label, target]: [&str; 3],
    per_call: &str,
    cluster: Vec<SemaphoreBulkhead>,
) -> Row {
    let local = semaphore(None);
    let before = round_trips(url);
    let (mut x, mut y) = (0u64, 0usize);
    let results = measure(
        settings.fast,
        vec![
            each(SEMAPHORE, || {
                x += 1;
                black_box(local.call(|| black_box(x)).ok());
            }),
            each(label, || {
                y += 1;
                let bulkhead = &cluster[y % cluster.len()];
                black_box(bulkhead.call(|| black_box(y)).ok());
            }),
        ],
    );
    let sent = scripts_since(url, before);
    report(title, &results);
    let errors: u64 = cluster
        .iter()
        .filter_map(|b| b.snapshot().leases)
        .map(|l| l.store_errors)
        .sum();
    let note = match sent {
        Some(sent) => {
            format!("{sent} scripts sent to Redis for {y} calls{per_call}; {errors} store errors")
        }
        None => format!("{errors} store errors"),
    };
    Row {
        workload: Workload::ClusterRateLimit,
        title: title.into(),
        ours: Cell::of(find(&results, label)).with_note(note),
        peer: Cell::of(find(&results, SEMAPHORE)),
        target: target.into(),
    }
}

/// The scripts Redis has run since `before` (a [`round_trips`] count), if it says.
fn scripts_since(url: &str, before: Option<u64>) -> Option<u64> {
    round_trips(url)
        .zip(before)
        .map(|(after, before)| after - before)
}

/// The scripts Redis has run so far (`EVALSHA` and `EVAL` calls), if it says.
fn round_trips(url: &str) -> Option<u64> {
    let mut connection = redis::Client::open(url).ok()?.get_connection().ok()?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut connection)
        .ok()?;
    Some(
        info.lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum(),
    )
}

fn semaphore(cluster: Option<ClusterLimitConfig>) -> SemaphoreBulkhead {
    let mut config = BulkheadConfig::semaphore(semaphore_config(25));
    config.cluster = cluster;
    match Bulkhead::from_config("bench-leases", &config, system_clock()) {
        Bulkhead::Semaphore(bulkhead) => bulkhead,
        _ => unreachable!("a semaphore config builds a semaphore"),
    }
}

/// A semaphore whose limit is the cluster's, its leases under `prefix` in Redis.
fn leased(url: &str, prefix: &str) -> SemaphoreBulkhead {
    semaphore(Some(ClusterLimitConfig {
        store: RateLimitStore {
            key_prefix: format!("{prefix}:{}:", std::process::id()),
            on_store_error: OnStoreError::Local,
            ..RateLimitStore::redis(url)
        },
        ..ClusterLimitConfig::redis(url)
    }))
}

fn cluster_limit(url: &str) -> RateLimitConfig {
    RateLimitConfig {
        scope: RateLimitScope::Cluster,
        store: Some(RateLimitStore {
            key_prefix: format!("bench:{}:", std::process::id()),
            on_store_error: OnStoreError::Local,
            ..RateLimitStore::redis(url)
        }),
        ..RateLimitConfig::per_process(LIMIT, Duration::from_secs(1))
    }
}

fn limited(rate_limit: RateLimitConfig) -> SemaphoreBulkhead {
    let mut config = BulkheadConfig::semaphore(semaphore_config(25));
    config.rate_limit = Some(rate_limit);
    match Bulkhead::from_config("bench-rate", &config, system_clock()) {
        Bulkhead::Semaphore(bulkhead) => bulkhead,
        _ => unreachable!("a semaphore config builds a semaphore"),
    }
}

/// A `redis-server` on a free port once it accepts connections, and its URL.
fn start_redis() -> Option<(Child, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .ok()?
        .port();
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--logfile", ""])
        .current_dir(std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut lines = BufReader::new(child.stdout.take()?).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("Ready to accept connections"));
    std::thread::spawn(move || lines.for_each(drop));
    if !ready {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    Some((child, format!("redis://127.0.0.1:{port}/")))
}

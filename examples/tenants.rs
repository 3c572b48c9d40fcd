//! One noisy tenant against a shared bulkhead, without and with per-key caps.
//!
//! `cargo run --release --example tenants` (about 4 s).
//!
//! A multi-tenant API calls one dependency through one semaphore bulkhead of `LIMIT`
//! permits; each call holds a permit for `SERVICE`. Four quiet tenants send `QUIET_RATE`
//! calls per second each; one noisy tenant sends twenty times that. Together they offer
//! more than the bulkhead serves, so callers wait in its queue (up to `MAX_WAIT`).
//!
//! Run 1 has no per-key cap: the noisy tenant's calls fill the queue and the quiet
//! tenants wait behind them. Run 2 sets `per_key: { max_concurrent_calls: PER_KEY }`: the
//! noisy tenant is refused (`KeyLimit`) beyond its cap, at once, and the quiet tenants are
//! served as if it were not there. The last line prints the quiet tenants' p99 latency
//! (arrival to answer, waiting included) both ways. Arrivals are open-loop (a tick per
//! call); the machine may be busy, so compare the two runs of one invocation.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkhead::config::{BulkheadConfig, Duration as ConfigDuration, PerKeyConfig, SemaphoreConfig};
use bulkhead::{BulkheadError, SemaphoreBulkhead};

/// Permits of the shared bulkhead.
const LIMIT: u32 = 8;
/// How long each call holds its permit.
const SERVICE: Duration = Duration::from_millis(10);
/// How long a caller may wait for a permit.
const MAX_WAIT: Duration = Duration::from_millis(250);
/// Calls per second of each quiet tenant; the noisy one sends twenty times as many.
const QUIET_RATE: u64 = 40;
const NOISY_FACTOR: u64 = 20;
const QUIET_TENANTS: [&str; 4] = ["acme", "globex", "initech", "umbrella"];
/// The per-key cap of run 2.
const PER_KEY: u32 = 2;
/// How long each run offers load.
const RUN: Duration = Duration::from_millis(1_800);

/// What the quiet tenants saw in one run.
struct Outcome {
    latencies: Vec<Duration>,
    quiet_refused: usize,
    noisy_refused: usize,
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    println!(
        "shared bulkhead: {LIMIT} permits, {SERVICE:?} per call, max_wait {MAX_WAIT:?}; \
         {} quiet tenants at {QUIET_RATE}/s each, one noisy tenant at {}/s",
        QUIET_TENANTS.len(),
        QUIET_RATE * NOISY_FACTOR
    );
    let without = runtime.block_on(run(None));
    report("without per-key caps", &without);
    let cap = PerKeyConfig::new(PER_KEY);
    let with = runtime.block_on(run(Some(cap)));
    report(
        &format!("per_key: {{ max_concurrent_calls: {PER_KEY} }}"),
        &with,
    );
    println!(
        "other tenants' p99: {:.1} ms without per-key caps, {:.1} ms with per_key {{ max_concurrent_calls: {PER_KEY} }}",
        millis(p99(&without.latencies)),
        millis(p99(&with.latencies))
    );
}

/// Offers the load for `RUN` against a fresh bulkhead, with or without a per-key cap.
async fn run(per_key: Option<PerKeyConfig>) -> Outcome {
    let config = SemaphoreConfig {
        max_concurrent_calls: LIMIT,
        max_wait: ConfigDuration::from_std(MAX_WAIT),
        fair: true,
    };
    let bulkhead = SemaphoreBulkhead::new("tenant-api", &config);
    let policies = BulkheadConfig {
        per_key,
        ..BulkheadConfig::semaphore(config)
    };
    bulkhead.configure(&policies).expect("no partitions");
    let outcome = Arc::new(Mutex::new(Outcome {
        latencies: Vec::new(),
        quiet_refused: 0,
        noisy_refused: 0,
    }));
    let mut tenants = Vec::new();
    for (tenant, rate) in QUIET_TENANTS
        .iter()
        .map(|t| (*t, QUIET_RATE))
        .chain([("noisy", QUIET_RATE * NOISY_FACTOR)])
    {
        let (bulkhead, outcome) = (bulkhead.clone(), Arc::clone(&outcome));
        tenants.push(tokio::spawn(offer(bulkhead, tenant, rate, outcome)));
    }
    for tenant in tenants {
        tenant.await.expect("a tenant's task");
    }
    Arc::try_unwrap(outcome)
        .ok()
        .and_then(|m| m.into_inner().ok())
        .expect("every call has finished")
}

/// One tenant: a call every `1 / rate` seconds for `RUN`, each on its own task.
async fn offer(
    bulkhead: SemaphoreBulkhead,
    tenant: &'static str,
    rate: u64,
    outcome: Arc<Mutex<Outcome>>,
) {
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    let start = Instant::now();
    let mut calls = Vec::new();
    while start.elapsed() < RUN {
        tick.tick().await;
        let (bulkhead, outcome) = (bulkhead.clone(), Arc::clone(&outcome));
        calls.push(tokio::spawn(async move {
            let arrived = Instant::now();
            let answer = bulkhead
                .keyed(tenant)
                // The sleep starts once admitted (a `sleep` made before would start its
                // clock while the call waits).
                .call_async(async { tokio::time::sleep(SERVICE).await })
                .await;
            let mut outcome = outcome.lock().expect("no task panics holding it");
            match (tenant, answer) {
                ("noisy", Err(_)) => outcome.noisy_refused += 1,
                ("noisy", Ok(())) => {}
                (_, Ok(())) => outcome.latencies.push(arrived.elapsed()),
                (_, Err(BulkheadError::Timeout { .. } | BulkheadError::Full { .. })) => {
                    // A refused quiet call waited its whole allowance: count it at that.
                    outcome.quiet_refused += 1;
                    outcome.latencies.push(arrived.elapsed());
                }
                (_, Err(other)) => panic!("unexpected refusal of a quiet tenant: {other}"),
            }
        }));
    }
    for call in calls {
        call.await.expect("a call's task");
    }
}

fn report(label: &str, outcome: &Outcome) {
    println!(
        "{label:<40} quiet tenants: {} calls, p50 {:.1} ms, p99 {:.1} ms, {} refused; noisy tenant: {} refused",
        outcome.latencies.len(),
        millis(percentile(&outcome.latencies, 0.50)),
        millis(p99(&outcome.latencies)),
        outcome.quiet_refused,
        outcome.noisy_refused
    );
}

fn p99(latencies: &[Duration]) -> Duration {
    percentile(latencies, 0.99)
}

fn percentile(latencies: &[Duration], q: f64) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

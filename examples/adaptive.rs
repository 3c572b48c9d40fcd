//! Adaptive limits against a dependency with a real capacity knee.
//!
//! `cargo run --release --example adaptive` (about 40 s).
//!
//! The dependency has `KNEE` servers; each call holds one for `SERVICE` (three times
//! longer in the middle third of the run: it degrades, then recovers). Calls beyond the
//! knee wait for a server, so past it latency grows with the queue while throughput stays
//! flat. Like a real server it keeps working on a call whose client gave up.
//!
//! Clients arrive open-loop at `RATE` per second (above what the dependency can serve) and
//! give up after `DEADLINE`. The same load is served, in turn, through a semaphore bulkhead
//! with a static limit far too high, one too low, and each adaptive algorithm. Goodput is
//! answers within the deadline per second; p50/p99 are over the calls the bulkhead admitted
//! (a call that timed out counts as `DEADLINE`). The machine may be busy: compare ratios
//! between rows of one run, not absolute numbers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bulkhead::SemaphoreBulkhead;
use bulkhead::config::{
    AdaptiveAlgorithm, AdaptiveConfig, BulkheadConfig, Duration as ConfigDuration, SemaphoreConfig,
};

/// Servers at the dependency: its capacity knee, in concurrent calls.
const KNEE: u32 = 16;
/// Time a server spends on one call while the dependency is healthy.
const SERVICE: Duration = Duration::from_millis(10);
/// Service time multiplier while it is degraded.
const DEGRADED: u32 = 3;
/// Offered load, calls per second (the dependency serves KNEE / SERVICE = 1600 when healthy).
const RATE: f64 = 2_000.0;
/// How long a client waits for an answer.
const DEADLINE: Duration = Duration::from_millis(100);
/// Healthy, degraded, healthy again.
const PHASE: Duration = Duration::from_millis(2_500);
const PHASES: [&str; 3] = ["healthy", "degraded", "recovered"];
/// How often the limit is sampled for the chart.
const TICK: Duration = Duration::from_millis(125);

/// The dependency: `KNEE` servers, a service time that can change.
#[derive(Clone)]
struct Dependency {
    servers: Arc<tokio::sync::Semaphore>,
    service_micros: Arc<AtomicU64>,
}

impl Dependency {
    fn new() -> Self {
        Dependency {
            servers: Arc::new(tokio::sync::Semaphore::new(KNEE as usize)),
            service_micros: Arc::new(AtomicU64::new(SERVICE.as_micros() as u64)),
        }
    }

    fn degrade(&self, factor: u32) {
        let micros = SERVICE.as_micros() as u64 * u64::from(factor);
        self.service_micros.store(micros, Relaxed);
    }

    /// One call: waits for a server, holds it for the service time. The work runs on its
    /// own task, so a client that gives up does not stop it (the server never knows).
    async fn call(&self) {
        let servers = Arc::clone(&self.servers);
        let service = Duration::from_micros(self.service_micros.load(Relaxed));
        let work = tokio::spawn(async move {
            let _server = servers.acquire_owned().await;
            tokio::time::sleep(service).await;
        });
        let _ = work.await;
    }
}

#[derive(Clone, Copy)]
enum Outcome {
    Answered(Duration),
    TimedOut,
    Refused,
}

struct Run {
    name: String,
    /// Outcomes by phase.
    outcomes: [Vec<Outcome>; 3],
    /// The limit every `TICK`.
    limits: Vec<u32>,
}

impl Run {
    fn all(&self) -> impl Iterator<Item = &Outcome> {
        self.outcomes.iter().flatten()
    }

    fn goodput(&self, outcomes: &[Outcome]) -> f64 {
        let answered = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Answered(_)))
            .count();
        answered as f64 / PHASE.as_secs_f64()
    }

    fn total_goodput(&self) -> f64 {
        self.outcomes.iter().map(|o| self.goodput(o)).sum::<f64>() / 3.0
    }

    /// p-th percentile (0..=100) latency of admitted calls, in ms.
    fn percentile(&self, p: f64) -> f64 {
        let mut admitted: Vec<Duration> = self
            .all()
            .filter_map(|o| match o {
                Outcome::Answered(d) => Some(*d),
                Outcome::TimedOut => Some(DEADLINE),
                Outcome::Refused => None,
            })
            .collect();
        if admitted.is_empty() {
            return 0.0;
        }
        admitted.sort();
        let at = ((admitted.len() - 1) as f64 * p / 100.0).round() as usize;
        admitted[at].as_secs_f64() * 1e3
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.all().filter(|o| f(o)).count()
    }

    /// The median limit over the last phase.
    fn settled_limit(&self) -> u32 {
        let per_phase = self.limits.len() / 3;
        let mut last: Vec<u32> = self.limits[self.limits.len() - per_phase..].to_vec();
        last.sort();
        last.get(last.len() / 2).copied().unwrap_or(0)
    }

    /// The limit over time, one character per tick, phases separated by `|`.
    fn chart(&self) -> String {
        const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
        let top = f64::from(KNEE * 2);
        let per_phase = (self.limits.len() / 3).max(1);
        let mut chart = String::new();
        for (i, limit) in self.limits.iter().enumerate() {
            if i > 0 && i % per_phase == 0 {
                chart.push('|');
            }
            let level = (f64::from(*limit) / top * 8.0).ceil().clamp(1.0, 8.0) as usize;
            chart.push(LEVELS[level - 1]);
        }
        chart
    }
}

/// Serves the open-loop load through `bulkhead` for three phases.
async fn run(name: &str, bulkhead: SemaphoreBulkhead) -> Run {
    let dependency = Dependency::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Outcome)>();
    let start = Instant::now();
    let mut limits = Vec::new();
    let mut sent: u64 = 0;
    let mut ticker = tokio::time::interval(Duration::from_millis(2));
    let mut next_sample = Duration::ZERO;
    let total = PHASE * 3;
    loop {
        ticker.tick().await;
        let elapsed = start.elapsed();
        if elapsed >= total {
            break;
        }
        let phase = (elapsed.as_nanos() / PHASE.as_nanos()) as usize;
        dependency.degrade(if phase == 1 { DEGRADED } else { 1 });
        if elapsed >= next_sample {
            limits.push(bulkhead.limit());
            next_sample += TICK;
        }
        // Open loop: as many arrivals as the rate says are due by now, whatever came back.
        let due = (elapsed.as_secs_f64() * RATE) as u64;
        for _ in sent..due {
            let (bulkhead, dependency, tx) = (bulkhead.clone(), dependency.clone(), tx.clone());
            tokio::spawn(async move {
                let began = Instant::now();
                let call = bulkhead.call_async(dependency.call());
                let outcome = match tokio::time::timeout(DEADLINE, call).await {
                    Ok(Ok(())) => Outcome::Answered(began.elapsed()),
                    Ok(Err(_refused)) => Outcome::Refused,
                    Err(_deadline) => Outcome::TimedOut,
                };
                let _ = tx.send((phase, outcome));
            });
        }
        sent = due.max(sent);
    }
    drop(tx);
    let mut outcomes: [Vec<Outcome>; 3] = Default::default();
    while let Some((phase, outcome)) = rx.recv().await {
        outcomes[phase.min(2)].push(outcome);
    }
    Run {
        name: name.to_owned(),
        outcomes,
        limits,
    }
}

fn semaphore(
    name: &'static str,
    limit: u32,
    adaptive: Option<AdaptiveConfig>,
) -> SemaphoreBulkhead {
    let config = SemaphoreConfig {
        max_concurrent_calls: limit,
        ..SemaphoreConfig::default()
    };
    let bulkhead = SemaphoreBulkhead::new(name, &config);
    let policies = BulkheadConfig {
        adaptive,
        ..BulkheadConfig::semaphore(config)
    };
    bulkhead.configure(&policies).expect("no partitions");
    bulkhead
}

fn adaptive(algorithm: AdaptiveAlgorithm) -> AdaptiveConfig {
    // No hand-sizing: bounds 1..=1000 (the declared size), starting at the default.
    let mut config = AdaptiveConfig::new(algorithm);
    if algorithm == AdaptiveAlgorithm::Aimd {
        // AIMD reacts to drops; a latency budget makes slowness one (2.5 × the service time).
        config.timeout = Some(ConfigDuration::from_std(SERVICE * 5 / 2));
    }
    config
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "dependency: knee {KNEE} concurrent calls, {} ms per call ({} ms while degraded); \
         load {RATE:.0}/s open loop, deadline {} ms; phases of {:.1} s: {}",
        SERVICE.as_millis(),
        (SERVICE * DEGRADED).as_millis(),
        DEADLINE.as_millis(),
        PHASE.as_secs_f64(),
        PHASES.join(", ")
    );
    let high = 1_000;
    let low = KNEE / 4;
    let configs: Vec<(String, SemaphoreBulkhead)> = vec![
        (
            format!("static-high ({high})"),
            semaphore("static-high", high, None),
        ),
        (
            format!("static-low ({low})"),
            semaphore("static-low", low, None),
        ),
        (
            "vegas".into(),
            semaphore("vegas", high, Some(adaptive(AdaptiveAlgorithm::Vegas))),
        ),
        (
            "gradient2".into(),
            semaphore(
                "gradient2",
                high,
                Some(adaptive(AdaptiveAlgorithm::Gradient2)),
            ),
        ),
        (
            "aimd".into(),
            semaphore("aimd", high, Some(adaptive(AdaptiveAlgorithm::Aimd))),
        ),
    ];
    let mut runs = Vec::new();
    for (name, bulkhead) in configs {
        let run = run(&name, bulkhead).await;
        runs.push(run);
        // Let the previous dependency's abandoned work drain off the CPU.
        tokio::time::sleep(DEADLINE * 2).await;
    }

    println!();
    println!(
        "{:<17} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>9}  limit over time (▁ = 1..{}, █ ≥ {}; | = phase)",
        "bulkhead",
        "goodput/s",
        "healthy",
        "degraded",
        "recovered",
        "p50 ms",
        "p99 ms",
        "refused",
        "timed out",
        KNEE / 4,
        KNEE * 2
    );
    for run in &runs {
        let [healthy, degraded, recovered] = [0, 1, 2].map(|p| run.goodput(&run.outcomes[p]));
        println!(
            "{:<17} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>7.1} {:>7.1} {:>8} {:>9}  {}",
            run.name,
            run.total_goodput(),
            healthy,
            degraded,
            recovered,
            run.percentile(50.0),
            run.percentile(99.0),
            run.count(|o| matches!(o, Outcome::Refused)),
            run.count(|o| matches!(o, Outcome::TimedOut)),
            run.chart()
        );
    }

    let [high, low] = [&runs[0], &runs[1]];
    let best = runs[2..]
        .iter()
        .max_by(|a, b| a.total_goodput().total_cmp(&b.total_goodput()))
        .expect("three adaptive runs");
    println!();
    println!(
        "best adaptive: {} ({:.1}x the goodput of static-high, {:.1}x static-low; p99 {:.2}x static-high)",
        best.name,
        best.total_goodput() / high.total_goodput().max(1.0),
        best.total_goodput() / low.total_goodput().max(1.0),
        best.percentile(99.0) / high.percentile(99.0).max(0.001),
    );
    println!(
        "adaptive: limit settled at {} (knee {KNEE}); goodput {:.0}/s vs {:.0}/s static-high, {:.0}/s static-low; p99 {:.1} ms vs {:.1} ms, {:.1} ms",
        best.settled_limit(),
        best.total_goodput(),
        high.total_goodput(),
        low.total_goodput(),
        best.percentile(99.0),
        high.percentile(99.0),
        low.percentile(99.0),
    );
}

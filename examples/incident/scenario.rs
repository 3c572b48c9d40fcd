//! A production incident, reproduced with real HTTP on 127.0.0.1 and scaled down in time.
//!
//! A service has three endpoints: `order`, `product-detail` (which calls a recommendation
//! dependency) and `login`. A load generator in the same process sends them requests on a
//! fixed schedule. Partway through, the recommendation dependency becomes 50× slower
//! (originally 80 ms → 4 s; here 10 ms → 500 ms). The scenario runs against one of two
//! set-ups of the same service:
//!
//! * [`Setup::SharedPool`], the "before": every handler's blocking work runs on one shared
//!   pool of worker threads with an unbounded queue, as in Tomcat. Slow recommendation calls
//!   hold the shared threads, the queue grows, and `order` and `login`, which never touch
//!   the recommendation service, wait behind them.
//! * [`Setup::Bulkheads`], the "after": the bulkheads declared in `examples/incident.yaml`.
//!   `order` and `product-detail` run their blocking work on their own thread-pool
//!   bulkheads; the recommendation call goes through a small semaphore bulkhead that waits a
//!   few milliseconds at most and otherwise answers from a cache, marked `"fallback": true`;
//!   `login` is admitted by a route layer ([`bulkhead::axum::BulkheadLayer`]).
//!
//! # Measuring honestly
//!
//! The load generator is open-loop: request `i` of an endpoint is due at
//! `start + i / rate`, whatever happened to earlier requests, and its latency is measured
//! from that due time, not from when it was actually sent. A client that waits for slow
//! responses before sending more (closed loop) would send less exactly while the service is
//! slow and hide the queueing ("coordinated omission"). Every request has a client timeout;
//! one that times out is counted as timed out with its latency set to the timeout, a lower
//! bound. Latencies are reported per phase: `before` (after a short warm-up) and
//! `incident` (requests due while the dependency is slow).
//!
//! The example (`main.rs`) and the test (`tests/incident.rs`) both run this module.
//!
//! This file holds the scenario, its reports and the run; its parts are `load.rs` (the
//! load generator), `dependency.rs` (the work and the slow dependency), `shared_pool.rs`
//! (the "before") and `bulkhead_app.rs` (the "after"); each names what it imports.

#[path = "bulkhead_app.rs"]
mod bulkhead_app;
#[path = "dependency.rs"]
mod dependency;
#[path = "load.rs"]
mod load;
#[path = "shared_pool.rs"]
mod shared_pool;

use std::sync::Arc;
use std::time::Duration;

use bulkhead_app::BulkheadApp;
use dependency::RecommendationService;
use load::drive_load;
use shared_pool::SharedPoolApp;

/// The bulkheads of the "after" set-up, as a deploy would ship them.
pub const INCIDENT_YAML: &str = include_str!("../incident.yaml");
/// Where [`INCIDENT_YAML`] lives, for messages.
pub const INCIDENT_YAML_PATH: &str = "examples/incident.yaml";

/// The service's endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Places an order: blocking database work, no recommendation call.
    Order,
    /// A product page: a blocking lookup plus a call to the recommendation service.
    ProductDetail,
    /// Logs a user in: a short check, no recommendation call.
    Login,
}

impl Endpoint {
    /// Every endpoint, in table order.
    pub const ALL: [Endpoint; 3] = [Endpoint::Order, Endpoint::ProductDetail, Endpoint::Login];

    /// The endpoint's name, as in the table.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Order => "order",
            Endpoint::ProductDetail => "product-detail",
            Endpoint::Login => "login",
        }
    }

    fn path(self, id: u64) -> String {
        match self {
            Endpoint::Order => format!("/order/{id}"),
            Endpoint::ProductDetail => format!("/product-detail/{id}"),
            Endpoint::Login => format!("/login/{id}"),
        }
    }
}

/// Which service set-up a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// One shared worker pool with an unbounded queue (the "before").
    SharedPool,
    /// The per-dependency bulkheads of `examples/incident.yaml` (the "after").
    Bulkheads,
    /// The same, but `recommendations` has no hand-sized limit: an adaptive (Gradient2)
    /// limit bounded only by the callers that can reach it (`product-detail`'s threads).
    AdaptiveRecommendations,
}

impl Setup {
    /// A short label for progress lines and the table.
    pub fn label(self) -> &'static str {
        match self {
            Setup::SharedPool => "shared pool",
            Setup::Bulkheads => "bulkheads",
            Setup::AdaptiveRecommendations => "adaptive",
        }
    }
}

/// The scenario's timings, rates and service times.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Requests due in this first stretch warm connections and pools and are not reported.
    pub warmup: Duration,
    /// The healthy stretch after the warm-up.
    pub before: Duration,
    /// How long the recommendation dependency stays slow; the schedule ends with it.
    pub incident: Duration,
    /// A client gives up on a request after this long (it also bounds the run's drain).
    pub client_timeout: Duration,
    /// Requests per second sent to `order`.
    pub order_rate: f64,
    /// Requests per second sent to `product-detail`.
    pub product_detail_rate: f64,
    /// Requests per second sent to `login`.
    pub login_rate: f64,
    /// Blocking work of one order (its database calls).
    pub order_work: Duration,
    /// The work of one login.
    pub login_work: Duration,
    /// Blocking work of one product lookup, before the recommendation call.
    pub product_lookup: Duration,
    /// The recommendation dependency's latency while healthy.
    pub recommendations_healthy: Duration,
    /// The recommendation dependency's latency during the incident (50× healthy).
    pub recommendations_slow: Duration,
    /// Threads of the shared pool in the "before" set-up.
    pub shared_pool_threads: usize,
}

impl Scenario {
    /// The example's scenario: about 16 s of traffic per run.
    ///
    /// Sizing, scaled from the original incident by 1/8 in time: healthy demand on the shared pool is
    /// about 40·80 ms + 40·20 ms + 40·10 ms ≈ 4.4 busy threads of 16. During the incident
    /// `product-detail` alone needs 40·510 ms ≈ 20 threads, so the shared pool is
    /// overloaded by ~50% and its unbounded queue grows by ~0.5 s of waiting per second.
    /// `order`'s own work (80 ms) is long enough that scheduling hiccups of a busy machine
    /// stay small beside it.
    pub fn example() -> Self {
        Scenario {
            warmup: Duration::from_secs(1),
            before: Duration::from_secs(6),
            incident: Duration::from_secs(8),
            client_timeout: Duration::from_secs(6),
            order_rate: 40.0,
            product_detail_rate: 40.0,
            login_rate: 40.0,
            order_work: Duration::from_millis(80),
            login_work: Duration::from_millis(10),
            product_lookup: Duration::from_millis(10),
            recommendations_healthy: Duration::from_millis(10),
            recommendations_slow: Duration::from_millis(500),
            shared_pool_threads: 16,
        }
    }

    /// The test's scenario: the same service, a shorter schedule (about 6 s per run).
    pub fn short() -> Self {
        Scenario {
            warmup: Duration::from_millis(500),
            before: Duration::from_millis(2500),
            incident: Duration::from_secs(3),
            client_timeout: Duration::from_secs(3),
            ..Scenario::example()
        }
    }

    /// How long requests are sent: warm-up, before and incident.
    pub fn schedule_length(&self) -> Duration {
        self.warmup + self.before + self.incident
    }

    fn rate(&self, endpoint: Endpoint) -> f64 {
        match endpoint {
            Endpoint::Order => self.order_rate,
            Endpoint::ProductDetail => self.product_detail_rate,
            Endpoint::Login => self.login_rate,
        }
    }
}

/// Which stretch of the schedule a request was due in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not reported.
    Warmup,
    /// Healthy dependency.
    Before,
    /// Slow dependency.
    Incident,
    /// The schedule is over; waiting for the last answers (at most the client timeout).
    Drain,
}

impl Phase {
    /// A short label for progress lines.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Warmup => "warm-up",
            Phase::Before => "healthy",
            Phase::Incident => "INCIDENT",
            Phase::Drain => "draining",
        }
    }
}

/// How one request ended, as the client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 200 with a full answer.
    Ok,
    /// 200 with an answer marked `"fallback": true`.
    Fallback,
    /// 503 or 429: a bulkhead refused it.
    Refused,
    /// No answer within the client timeout.
    TimedOut,
    /// Anything else (a connection error, another status).
    Failed,
}

/// The figures of one endpoint in one phase of a run.
#[derive(Clone, Debug, Default)]
pub struct PhaseReport {
    latencies: Vec<Duration>,
    /// Answered 200 with a full answer.
    pub ok: usize,
    /// Answered 200 with a fallback answer.
    pub fallback: usize,
    /// Refused by a bulkhead (503 or 429).
    pub refused: usize,
    /// Not answered within the client timeout.
    pub timed_out: usize,
    /// Failed otherwise.
    pub failed: usize,
}

impl PhaseReport {
    fn record(&mut self, outcome: Outcome, latency: Duration) {
        self.latencies.push(latency);
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Fallback => self.fallback += 1,
            Outcome::Refused => self.refused += 1,
            Outcome::TimedOut => self.timed_out += 1,
            Outcome::Failed => self.failed += 1,
        }
    }

    /// Requests recorded.
    pub fn requests(&self) -> usize {
        self.latencies.len()
    }

    /// The `q` quantile (0..=1) of latency, nearest rank; zero with no requests.
    pub fn quantile(&self, q: f64) -> Duration {
        quantile(&self.latencies, q)
    }

    /// Median latency.
    pub fn p50(&self) -> Duration {
        self.quantile(0.50)
    }

    /// 99th percentile latency.
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }
}

fn quantile(latencies: &[Duration], q: f64) -> Duration {
    if latencies.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One endpoint's figures in one run.
#[derive(Clone, Debug)]
pub struct EndpointReport {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// While the dependency was healthy (after the warm-up).
    pub before: PhaseReport,
    /// While the dependency was slow.
    pub incident: PhaseReport,
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The set-up that ran.
    pub setup: Setup,
    /// Per endpoint, in [`Endpoint::ALL`] order.
    pub endpoints: Vec<EndpointReport>,
    /// Per endpoint, in [`Endpoint::ALL`] order: the p99 latency of the requests due in
    /// each second of the schedule (`None`: none was due).
    pub timeline: Vec<(Endpoint, Vec<Option<Duration>>)>,
    /// How long the run took, drain included.
    pub wall: Duration,
}

impl RunReport {
    /// The figures of `endpoint`.
    pub fn endpoint(&self, endpoint: Endpoint) -> &EndpointReport {
        self.endpoints
            .iter()
            .find(|report| report.endpoint == endpoint)
            .unwrap_or_else(|| panic!("every run reports every endpoint"))
    }
}

/// A progress line's worth of state, sent about once a second.
#[derive(Clone, Debug)]
pub struct Progress {
    /// The set-up running.
    pub setup: Setup,
    /// Time since the schedule started.
    pub elapsed: Duration,
    /// The phase of the schedule at `elapsed` (or of the drain, after it).
    pub phase: Phase,
    /// Requests sent so far.
    pub sent: usize,
    /// Requests answered (or timed out) so far.
    pub done: usize,
    /// `order` p99 over the requests that finished in the last second.
    pub order_p99_last_second: Option<Duration>,
    /// Work waiting in the server's queues right now (the shared pool's queue, or the
    /// bulkheads' queues and waiters).
    pub server_queued: usize,
}

/// Runs the scenario once against `setup`, calling `progress` about once a second.
///
/// Binds a server to 127.0.0.1 on a free port; every request goes there. The number of
/// requests is bounded by the schedule and the run by the schedule plus the client timeout.
pub async fn run(
    scenario: &Scenario,
    setup: Setup,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<RunReport, String> {
    let dependency = Arc::new(RecommendationService::new(scenario));
    let (router, server) = match setup {
        Setup::SharedPool => {
            let app = SharedPoolApp::new(scenario, Arc::clone(&dependency));
            (app.router(), Server::SharedPool(app))
        }
        Setup::Bulkheads | Setup::AdaptiveRecommendations => {
            let adaptive = setup == Setup::AdaptiveRecommendations;
            let app = BulkheadApp::new(scenario, Arc::clone(&dependency), adaptive)?;
            (app.router(), Server::Bulkheads(app))
        }
    };

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|err| format!("cannot bind 127.0.0.1: {err}"))?;
    let addr = listener
        .local_addr()
        .map_err(|err| format!("no local address: {err}"))?;
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let serving = tokio::spawn(async move { axum::serve(listener, router).await });

    let report = drive_load(scenario, setup, addr, &dependency, &server, progress).await;

    serving.abort();
    server.shutdown();
    report
}

/// The two server set-ups, kept alive for the run and shut down after it.
enum Server {
    SharedPool(SharedPoolApp),
    Bulkheads(BulkheadApp),
}

impl Server {
    fn queued(&self) -> usize {
        match self {
            Server::SharedPool(app) => app.pool.queued(),
            Server::Bulkheads(app) => app.queued(),
        }
    }

    fn shutdown(&self) {
        match self {
            Server::SharedPool(app) => app.pool.shutdown(),
            Server::Bulkheads(app) => app.shutdown(),
        }
    }
}

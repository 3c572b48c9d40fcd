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

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bulkhead::axum::{BulkheadLayer, Refusal};
use bulkhead::{BulkheadError, Config, SemaphoreBulkhead, ThreadPoolBulkhead};
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

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

    fn schedule_length(&self) -> Duration {
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

struct Finished {
    endpoint: Endpoint,
    phase: Phase,
    outcome: Outcome,
    latency: Duration,
    at: Instant,
}

async fn drive_load(
    scenario: &Scenario,
    setup: Setup,
    addr: SocketAddr,
    dependency: &RecommendationService,
    server: &Server,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<RunReport, String> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(connector);

    let finished: Arc<Mutex<Vec<Finished>>> = Arc::new(Mutex::new(Vec::new()));
    let sent = Arc::new(AtomicUsize::new(0));
    let start = Instant::now() + Duration::from_millis(50);
    let incident_start = start + scenario.warmup + scenario.before;
    let schedule_end = start + scenario.schedule_length();

    // One generator per endpoint, each on its own fixed schedule.
    let mut generators = Vec::new();
    for endpoint in Endpoint::ALL {
        let interval = Duration::from_secs_f64(1.0 / scenario.rate(endpoint));
        let client = client.clone();
        let finished = Arc::clone(&finished);
        let sent = Arc::clone(&sent);
        let scenario = scenario.clone();
        generators.push(tokio::spawn(async move {
            let mut requests = Vec::new();
            for i in 0u32.. {
                let due = start + interval * i;
                if due >= schedule_end {
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                let phase = phase_at(&scenario, start, due);
                let uri = format!("http://{addr}{}", endpoint.path(u64::from(i)));
                let client = client.clone();
                let finished = Arc::clone(&finished);
                let timeout = scenario.client_timeout;
                sent.fetch_add(1, Ordering::Relaxed);
                requests.push(tokio::spawn(async move {
                    let outcome = send(&client, &uri, due, timeout).await;
                    let now = Instant::now();
                    let latency = match outcome {
                        Outcome::TimedOut => timeout,
                        _ => now.saturating_duration_since(due),
                    };
                    if let Ok(mut finished) = finished.lock() {
                        finished.push(Finished {
                            endpoint,
                            phase,
                            outcome,
                            latency,
                            at: now,
                        });
                    }
                }));
            }
            for request in requests {
                let _ = request.await;
            }
        }));
    }

    // The incident: the dependency turns slow at a fixed point of the schedule.
    tokio::time::sleep_until(start.into()).await;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let all_done = futures_join_all(generators);
    tokio::pin!(all_done);
    loop {
        tokio::select! {
            _ = &mut all_done => break,
            _ = ticker.tick() => {
                let now = Instant::now();
                if now >= incident_start {
                    dependency.slow_down();
                }
                let (done, order_p99) = match finished.lock() {
                    Ok(finished) => {
                        let recent: Vec<Duration> = finished
                            .iter()
                            .filter(|f| f.endpoint == Endpoint::Order)
                            .filter(|f| now.saturating_duration_since(f.at) <= Duration::from_secs(1))
                            .map(|f| f.latency)
                            .collect();
                        let p99 = (!recent.is_empty()).then(|| quantile(&recent, 0.99));
                        (finished.len(), p99)
                    }
                    Err(_) => (0, None),
                };
                let elapsed = now.saturating_duration_since(start);
                progress(&Progress {
                    setup,
                    elapsed,
                    phase: if now >= schedule_end {
                        Phase::Drain
                    } else {
                        phase_at(scenario, start, now)
                    },
                    sent: sent.load(Ordering::Relaxed),
                    done,
                    order_p99_last_second: order_p99,
                    server_queued: server.queued(),
                });
            }
            // Turn the dependency slow on time, not on the next progress tick.
            _ = tokio::time::sleep_until(incident_start.into()), if !dependency.is_slow() => {
                dependency.slow_down();
            }
        }
    }
    let wall = start.elapsed();

    let finished = finished
        .lock()
        .map_err(|_| "a request task panicked".to_string())?;
    let mut endpoints: Vec<EndpointReport> = Endpoint::ALL
        .iter()
        .map(|&endpoint| EndpointReport {
            endpoint,
            before: PhaseReport::default(),
            incident: PhaseReport::default(),
        })
        .collect();
    for f in finished.iter() {
        if let Some(report) = endpoints.iter_mut().find(|r| r.endpoint == f.endpoint) {
            match f.phase {
                Phase::Before => report.before.record(f.outcome, f.latency),
                Phase::Incident => report.incident.record(f.outcome, f.latency),
                Phase::Warmup | Phase::Drain => {}
            }
        }
    }
    Ok(RunReport {
        setup,
        endpoints,
        wall,
    })
}

/// Awaits every task (a small `join_all`, so the example needs no futures crate).
async fn futures_join_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}

fn phase_at(scenario: &Scenario, start: Instant, at: Instant) -> Phase {
    let offset = at.saturating_duration_since(start);
    if offset < scenario.warmup {
        Phase::Warmup
    } else if offset < scenario.warmup + scenario.before {
        Phase::Before
    } else {
        Phase::Incident
    }
}

async fn send(
    client: &Client<HttpConnector, Empty<Bytes>>,
    uri: &str,
    due: Instant,
    timeout: Duration,
) -> Outcome {
    let Ok(uri) = uri.parse::<http::Uri>() else {
        return Outcome::Failed;
    };
    let deadline = due + timeout;
    let exchange = async {
        let response = client.get(uri).await.map_err(|_| Outcome::Failed)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|_| Outcome::Failed)?
            .to_bytes();
        Ok::<_, Outcome>((status, body))
    };
    match tokio::time::timeout_at(deadline.into(), exchange).await {
        Err(_) => Outcome::TimedOut,
        Ok(Err(outcome)) => outcome,
        Ok(Ok((status, body))) => match status {
            StatusCode::OK => {
                let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if answer.get("fallback") == Some(&Value::Bool(true)) {
                    Outcome::Fallback
                } else {
                    Outcome::Ok
                }
            }
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => Outcome::Refused,
            _ => Outcome::Failed,
        },
    }
}

// ---------------------------------------------------------------------------------------
// The service's work and its dependency.

/// The recommendation service the product page calls: healthy, then 50× slower.
struct RecommendationService {
    slow: AtomicBool,
    healthy: Duration,
    degraded: Duration,
}

impl RecommendationService {
    fn new(scenario: &Scenario) -> Self {
        RecommendationService {
            slow: AtomicBool::new(false),
            healthy: scenario.recommendations_healthy,
            degraded: scenario.recommendations_slow,
        }
    }

    fn slow_down(&self) {
        self.slow.store(true, Ordering::Relaxed);
    }

    fn is_slow(&self) -> bool {
        self.slow.load(Ordering::Relaxed)
    }

    /// A blocking call to the recommendation service.
    fn recommend(&self, product: u64) -> Vec<u64> {
        thread::sleep(if self.is_slow() {
            self.degraded
        } else {
            self.healthy
        });
        vec![product + 1, product + 2, product + 3]
    }
}

/// Recommendations for a product page, and whether they came from the cache.
struct Recommendations {
    items: Vec<u64>,
    fallback: bool,
}

/// The recommendation call behind the `recommendations` bulkhead (declared in the crate's
/// `bulkheads.yaml`, sized by `examples/incident.yaml`): a few calls at once, each caller
/// waiting a few milliseconds at most for its turn; a refused call never reaches the slow
/// service and is answered from the cache instead.
#[bulkhead::bulkhead("recommendations", fallback = cached_recommendations)]
fn recommendations(service: &RecommendationService, product: u64) -> Recommendations {
    Recommendations {
        items: service.recommend(product),
        fallback: false,
    }
}

/// The last known recommendations, served when the live call is refused.
fn cached_recommendations(
    _service: &RecommendationService,
    product: u64,
    _refused: BulkheadError,
) -> Recommendations {
    Recommendations {
        items: vec![product + 1, product + 2],
        fallback: true,
    }
}

/// The service times of the endpoints' own work.
#[derive(Clone, Copy)]
struct Work {
    order: Duration,
    login: Duration,
    product_lookup: Duration,
}

impl Work {
    fn of(scenario: &Scenario) -> Self {
        Work {
            order: scenario.order_work,
            login: scenario.login_work,
            product_lookup: scenario.product_lookup,
        }
    }

    /// An order's blocking database work.
    fn place_order(self, id: u64) -> Value {
        thread::sleep(self.order);
        json!({ "order": id, "status": "placed" })
    }

    /// A login's blocking credential check.
    fn log_in(self, user: u64) -> Value {
        thread::sleep(self.login);
        json!({ "user": user, "session": format!("s-{user}") })
    }

    /// A product page without recommendations: a blocking lookup.
    fn look_up_product(self, product: u64) -> Value {
        thread::sleep(self.product_lookup);
        json!({ "product": product, "name": format!("product {product}") })
    }
}

fn product_page(mut product: Value, recommendations: Recommendations) -> Value {
    product["recommendations"] = json!(recommendations.items);
    product["fallback"] = json!(recommendations.fallback);
    product
}

// ---------------------------------------------------------------------------------------
// The "before": one shared worker pool with an unbounded queue.

/// One pool of worker threads shared by every endpoint, with an unbounded FIFO queue: what
/// a servlet container's request pool is. Nothing is ever refused; work waits as long as it
/// takes, even after its client has given up.
struct SharedWorkerPool {
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    workers: Mutex<Vec<thread::JoinHandle<()>>>,
    queued: Arc<AtomicUsize>,
    closed: Arc<AtomicBool>,
}

type Job = Box<dyn FnOnce() + Send>;

impl SharedWorkerPool {
    fn new(threads: usize) -> Self {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let queued = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicBool::new(false));
        let workers = (0..threads)
            .map(|n| {
                let receiver = Arc::clone(&receiver);
                let queued = Arc::clone(&queued);
                let closed = Arc::clone(&closed);
                thread::Builder::new()
                    .name(format!("shared-{n}"))
                    .spawn(move || {
                        loop {
                            let job = match receiver.lock() {
                                Ok(receiver) => receiver.recv(),
                                Err(_) => return,
                            };
                            let Ok(job) = job else { return };
                            queued.fetch_sub(1, Ordering::Relaxed);
                            // After shutdown, queued work is discarded instead of run.
                            if !closed.load(Ordering::Relaxed) {
                                job();
                            }
                        }
                    })
                    .expect("spawn a shared-pool worker")
            })
            .collect();
        SharedWorkerPool {
            sender: Mutex::new(Some(sender)),
            workers: Mutex::new(workers),
            queued,
            closed,
        }
    }

    /// Runs `work` on the pool, queueing behind everything already queued.
    async fn run<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = answer.send(work());
        });
        {
            let sender = self.sender.lock().ok()?;
            self.queued.fetch_add(1, Ordering::Relaxed);
            sender.as_ref()?.send(job).ok()?;
        }
        answered.await.ok()
    }

    fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Discards the queued work, lets running work finish, and joins the workers.
    fn shutdown(&self) {
        self.closed.store(true, Ordering::Relaxed);
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
        if let Ok(mut workers) = self.workers.lock() {
            for worker in workers.drain(..) {
                let _ = worker.join();
            }
        }
    }
}

#[derive(Clone)]
struct SharedPoolApp {
    pool: Arc<SharedWorkerPool>,
    dependency: Arc<RecommendationService>,
    work: Work,
}

impl SharedPoolApp {
    fn new(scenario: &Scenario, dependency: Arc<RecommendationService>) -> Self {
        SharedPoolApp {
            pool: Arc::new(SharedWorkerPool::new(scenario.shared_pool_threads)),
            dependency,
            work: Work::of(scenario),
        }
    }

    fn router(&self) -> Router {
        Router::new()
            .route("/order/{id}", get(shared_order))
            .route("/product-detail/{id}", get(shared_product_detail))
            .route("/login/{id}", get(shared_login))
            .with_state(self.clone())
    }
}

fn pool_gone() -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, "worker pool shut down").into_response()
}

async fn shared_order(State(app): State<SharedPoolApp>, Path(id): Path<u64>) -> Response {
    let work = app.work;
    match app.pool.run(move || work.place_order(id)).await {
        Some(order) => Json(order).into_response(),
        None => pool_gone(),
    }
}

async fn shared_login(State(app): State<SharedPoolApp>, Path(id): Path<u64>) -> Response {
    let work = app.work;
    match app.pool.run(move || work.log_in(id)).await {
        Some(session) => Json(session).into_response(),
        None => pool_gone(),
    }
}

async fn shared_product_detail(State(app): State<SharedPoolApp>, Path(id): Path<u64>) -> Response {
    let work = app.work;
    let dependency = Arc::clone(&app.dependency);
    let page = app.pool.run(move || {
        let product = work.look_up_product(id);
        let live = Recommendations {
            items: dependency.recommend(id),
            fallback: false,
        };
        product_page(product, live)
    });
    match page.await {
        Some(page) => Json(page).into_response(),
        None => pool_gone(),
    }
}

// ---------------------------------------------------------------------------------------
// The "after": a bulkhead per dependency, sized in examples/incident.yaml.

#[derive(Clone)]
struct BulkheadApp {
    order: ThreadPoolBulkhead,
    product_detail: ThreadPoolBulkhead,
    recommendations: SemaphoreBulkhead,
    login: SemaphoreBulkhead,
    dependency: Arc<RecommendationService>,
    work: Work,
}

/// The deploy config of the "after" set-up.
pub fn incident_config() -> Result<Config, String> {
    bulkhead::config::parse_file(INCIDENT_YAML_PATH, INCIDENT_YAML)
        .map(|parsed| parsed.config)
        .map_err(|diagnostics| diagnostics.to_string())
}

/// The same deploy with `recommendations` adaptive instead of hand-sized: Gradient2 with
/// its defaults, up to one call per `product-detail` thread (its only callers).
pub fn adaptive_incident_config() -> Result<Config, String> {
    use bulkhead::config::{AdaptiveAlgorithm, AdaptiveConfig, Limits};
    let mut config = incident_config()?;
    let callers = match config.bulkheads.get("product-detail").map(|b| &b.limits) {
        Some(Limits::ThreadPool(pool)) => pool.max_threads,
        _ => {
            return Err(format!(
                "{INCIDENT_YAML_PATH}: `product-detail` is not a thread pool"
            ));
        }
    };
    let recommendations = config
        .bulkheads
        .get_mut("recommendations")
        .ok_or_else(|| format!("{INCIDENT_YAML_PATH}: `recommendations` is not declared"))?;
    if let Limits::Semaphore(semaphore) = &mut recommendations.limits {
        semaphore.max_concurrent_calls = callers;
    }
    recommendations.adaptive = Some(AdaptiveConfig::new(AdaptiveAlgorithm::Gradient2));
    Ok(config)
}

impl BulkheadApp {
    /// Installs `examples/incident.yaml` as the deploy config of the process-wide registry
    /// (what a service does at start-up) and registers the endpoints' bulkheads from it.
    /// The annotated `recommendations` function finds its entry there too.
    /// With `adaptive`, the deploy of [`adaptive_incident_config`] instead: installing it
    /// switches the already registered `recommendations` to an adaptive limit live.
    fn new(
        scenario: &Scenario,
        dependency: Arc<RecommendationService>,
        adaptive: bool,
    ) -> Result<Self, String> {
        let config = if adaptive {
            adaptive_incident_config()?
        } else {
            incident_config()?
        };
        bulkhead::install(&config).map_err(|err| format!("{INCIDENT_YAML_PATH}: {err}"))?;
        let register = |name: &str| {
            let declared = config
                .bulkheads
                .get(name)
                .ok_or_else(|| format!("{INCIDENT_YAML_PATH}: `{name}` is not declared"))?;
            bulkhead::registry()
                .register(name, declared)
                .map_err(|err| format!("{INCIDENT_YAML_PATH}: {err}"))
        };
        let wrong_kind = |name: &str| format!("{INCIDENT_YAML_PATH}: `{name}` has the wrong kind");
        let thread_pool = |name: &str| {
            register(name)?
                .as_thread_pool()
                .cloned()
                .ok_or_else(|| wrong_kind(name))
        };
        let semaphore = |name: &str| {
            register(name)?
                .as_semaphore()
                .cloned()
                .ok_or_else(|| wrong_kind(name))
        };
        Ok(BulkheadApp {
            order: thread_pool("order")?,
            product_detail: thread_pool("product-detail")?,
            recommendations: semaphore("recommendations")?,
            login: semaphore("login")?,
            dependency,
            work: Work::of(scenario),
        })
    }

    fn router(&self) -> Router {
        let login = Router::new()
            .route("/login/{id}", get(isolated_login))
            .route_layer(BulkheadLayer::new(self.login.clone()));
        Router::new()
            .route("/order/{id}", get(isolated_order))
            .route("/product-detail/{id}", get(isolated_product_detail))
            .merge(login)
            .with_state(self.clone())
    }

    /// Calls waiting for room in any of the bulkheads right now.
    fn queued(&self) -> usize {
        [
            self.order.snapshot(),
            self.product_detail.snapshot(),
            self.recommendations.snapshot(),
            self.login.snapshot(),
        ]
        .iter()
        .map(|snapshot| (snapshot.queued + snapshot.waiting) as usize)
        .sum()
    }

    /// The bulkheads belong to the process-wide registry and outlive the run; nothing to
    /// stop here. (A service would call `bulkhead::registry().shutdown(timeout)` on exit.)
    fn shutdown(&self) {}
}

async fn isolated_order(
    State(app): State<BulkheadApp>,
    Path(id): Path<u64>,
) -> Result<Json<Value>, Refusal> {
    let work = app.work;
    let order = app
        .order
        .call_async(id, move |id| async move { work.place_order(id) })
        .await
        .map_err(BulkheadError::from)?;
    Ok(Json(order))
}

async fn isolated_product_detail(
    State(app): State<BulkheadApp>,
    Path(id): Path<u64>,
) -> Result<Json<Value>, Refusal> {
    let work = app.work;
    let page = app
        .product_detail
        .call_async(id, {
            let app = app.clone();
            move |id| async move {
                let product = work.look_up_product(id);
                product_page(product, recommendations(&app.dependency, id))
            }
        })
        .await
        .map_err(BulkheadError::from)?;
    Ok(Json(page))
}

async fn isolated_login(State(app): State<BulkheadApp>, Path(id): Path<u64>) -> Json<Value> {
    // Admitted by the route's bulkhead layer; the check itself is async I/O here.
    tokio::time::sleep(app.work.login).await;
    Json(json!({ "user": id, "session": format!("s-{id}") }))
}

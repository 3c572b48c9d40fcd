//! The open-loop load generator of the incident scenario: every request is due at
//! `start + i / rate` whatever happened to earlier ones, its latency measured from that due
//! time, so a slow server cannot make the client send less and hide its own queueing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::dependency::RecommendationService;
use super::{
    Endpoint, EndpointReport, Outcome, Phase, PhaseReport, Progress, RunReport, Scenario, Server,
    Setup, quantile,
};

pub(super) struct Finished {
    pub(super) endpoint: Endpoint,
    pub(super) phase: Phase,
    pub(super) outcome: Outcome,
    pub(super) latency: Duration,
    pub(super) at: Instant,
    /// When it was due, from the start of the schedule.
    pub(super) due: Duration,
}

pub(super) async fn drive_load(
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
                            due: due.saturating_duration_since(start),
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
    let timeline = Endpoint::ALL
        .iter()
        .map(|&endpoint| {
            let mut seconds =
                vec![Vec::new(); scenario.schedule_length().as_secs_f64().ceil() as usize];
            for f in finished.iter().filter(|f| f.endpoint == endpoint) {
                if let Some(second) = seconds.get_mut(f.due.as_secs() as usize) {
                    second.push(f.latency);
                }
            }
            let p99 = seconds
                .iter()
                .map(|due| (!due.is_empty()).then(|| quantile(due, 0.99)))
                .collect();
            (endpoint, p99)
        })
        .collect();
    Ok(RunReport {
        setup,
        endpoints,
        timeline,
        wall,
    })
}

/// Awaits every task (a small `join_all`, so the example needs no futures crate).
pub(super) async fn futures_join_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}

pub(super) fn phase_at(scenario: &Scenario, start: Instant, at: Instant) -> Phase {
    let offset = at.saturating_duration_since(start);
    if offset < scenario.warmup {
        Phase::Warmup
    } else if offset < scenario.warmup + scenario.before {
        Phase::Before
    } else {
        Phase::Incident
    }
}

pub(super) async fn send(
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

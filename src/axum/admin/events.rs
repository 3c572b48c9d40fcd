//! `GET /events`: the events of every bulkhead, and the outcome of every deploy
//! (`"event": "deploy"`), as server-sent events, through a bounded buffer per client.
//!
//! # Invariants
//!
//! * The listener never waits: it checks the client's buffer for room before building
//!   the event's JSON, and a full buffer (or a gone client) drops the event, counted for
//!   that client and in [`events_dropped`].
//! * A client's listener is unsubscribed when its stream is dropped (the connection
//!   closed), so a disconnected client costs calls nothing.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde::Serialize;
use tokio::sync::mpsc;

use super::{Admin, problem};
use crate::events::{self, Event, EventKind, Subscription};
use crate::{DeployOutcome, DeploySubscription};

/// Events dropped for slow events clients since the process started, all clients
/// together.
pub fn events_dropped() -> u64 {
    DROPPED.load(Relaxed)
}

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// One event as JSON.
#[derive(Serialize)]
struct EventView<'a> {
    bulkhead: &'a str,
    kind: &'static str,
    event: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_seconds: Option<f64>,
}

fn to_json(event: &Event<'_>) -> Option<String> {
    let mut view = EventView {
        bulkhead: event.bulkhead,
        kind: event.bulkhead_kind.as_str(),
        event: "permitted",
        reason: None,
        message: None,
        outcome: None,
        duration_seconds: None,
    };
    match event.kind {
        EventKind::Permitted => {}
        EventKind::Refused { error } => {
            view.event = "refused";
            view.reason = Some(error.reason());
            view.message = Some(error.to_string());
        }
        EventKind::TimedOut { error } => {
            view.event = "timed_out";
            view.reason = Some(error.reason());
            view.message = Some(error.to_string());
        }
        EventKind::Finished { outcome, duration } => {
            view.event = "finished";
            view.outcome = Some(outcome.as_str());
            view.duration_seconds = Some(duration.as_secs_f64());
        }
        _ => return None,
    }
    serde_json::to_string(&view).ok()
}

/// A deploy's outcome as JSON: `event: "deploy"`, `result` (`applied` or `refused`),
/// `source`, and `resized` or `message`.
fn deploy_json(outcome: &DeployOutcome<'_>) -> Option<String> {
    let view = match outcome {
        DeployOutcome::Applied { source, report } => serde_json::json!({
            "event": "deploy",
            "result": "applied",
            "source": source,
            "resized": report.resized,
        }),
        DeployOutcome::Refused { source, message } => serde_json::json!({
            "event": "deploy",
            "result": "refused",
            "source": source,
            "message": message,
        }),
        _ => return None,
    };
    Some(view.to_string())
}

/// What one client's stream holds: its buffer, its listener, its dropped count, its
/// place among the clients, and the signal that ends it.
struct Client {
    events: mpsc::Receiver<String>,
    dropped: Arc<AtomicU64>,
    closed: tokio::sync::watch::Receiver<bool>,
    _listening: Subscription,
    _deploys: DeploySubscription,
    _slot: Slot,
}

/// One client counted against [`Admin::max_event_clients`] while its stream lives.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

pub(super) async fn stream(State(admin): State<Arc<Admin>>) -> Response {
    let closed = admin.streams.closed();
    if *closed.borrow() {
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down: event streams are closed".into(),
        );
    }
    let clients = Arc::clone(&admin.event_clients);
    let cap = admin.max_event_clients;
    if clients
        .fetch_update(Relaxed, Relaxed, |n| match cap {
            Some(cap) if n >= cap => None,
            _ => Some(n + 1),
        })
        .is_err()
    {
        let mut busy = problem(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} event clients are listening already, the most this server allows: try \
                 again later",
                cap.unwrap_or_default()
            ),
        );
        busy.headers_mut()
            .insert(header::RETRY_AFTER, http::HeaderValue::from_static("5"));
        return busy;
    }
    let slot = Slot(clients);
    let (sender, receiver) = mpsc::channel::<String>(admin.events_buffer);
    let dropped = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&dropped);
    let send = Arc::new(move |json: &dyn Fn() -> Option<String>| {
        // Room first, so that a full buffer costs no JSON.
        let sent =
            sender.capacity() > 0 && json().is_some_and(|json| sender.try_send(json).is_ok());
        if !sent && !sender.is_closed() {
            counted.fetch_add(1, Relaxed);
            DROPPED.fetch_add(1, Relaxed);
        }
    });
    let calls = Arc::clone(&send);
    let listening = events::subscribe(move |event: &Event<'_>| calls(&|| to_json(event)));
    let deploys = crate::registry()
        .subscribe_deploys(move |outcome: &DeployOutcome<'_>| send(&|| deploy_json(outcome)));
    let client = Client {
        events: receiver,
        dropped,
        closed,
        _listening: listening,
        _deploys: deploys,
        _slot: slot,
    };
    let stream = futures_util::stream::unfold(client, |mut client| async move {
        let lost = client.dropped.swap(0, Relaxed);
        if lost > 0 {
            let notice = SseEvent::default()
                .event("dropped")
                .data(format!("{{\"dropped\":{lost}}}"));
            return Some((Ok::<_, Infallible>(notice), client));
        }
        let json = tokio::select! {
            json = client.events.recv() => json?,
            // Closed (or the router gone): the stream ends, and its connection with it.
            _ = client.closed.wait_for(|closed| *closed) => return None,
        };
        Some((Ok(SseEvent::default().data(json)), client))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

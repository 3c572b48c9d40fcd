//! `GET /bulkheads/events`: the events of every bulkhead as server-sent events, through a
//! bounded buffer per client.
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
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde::Serialize;
use tokio::sync::mpsc;

use super::Admin;
use crate::events::{self, Event, EventKind, Subscription};

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
        EventKind::Finished { outcome, duration } => {
            view.event = "finished";
            view.outcome = Some(outcome.as_str());
            view.duration_seconds = Some(duration.as_secs_f64());
        }
        _ => return None,
    }
    serde_json::to_string(&view).ok()
}

/// What one client's stream holds: its buffer, its listener, and its dropped count.
struct Client {
    events: mpsc::Receiver<String>,
    dropped: Arc<AtomicU64>,
    _listening: Subscription,
}

pub(super) async fn stream(
    State(admin): State<Arc<Admin>>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let (sender, receiver) = mpsc::channel::<String>(admin.events_buffer);
    let dropped = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&dropped);
    let listening = events::subscribe(move |event: &Event<'_>| {
        // Room first, so that a full buffer costs no JSON.
        let sent = sender.capacity() > 0
            && to_json(event).is_some_and(|json| sender.try_send(json).is_ok());
        if !sent && !sender.is_closed() {
            counted.fetch_add(1, Relaxed);
            DROPPED.fetch_add(1, Relaxed);
        }
    });
    let client = Client {
        events: receiver,
        dropped,
        _listening: listening,
    };
    let stream = futures_util::stream::unfold(client, |mut client| async move {
        let lost = client.dropped.swap(0, Relaxed);
        if lost > 0 {
            let notice = SseEvent::default()
                .event("dropped")
                .data(format!("{{\"dropped\":{lost}}}"));
            return Some((Ok(notice), client));
        }
        let json = client.events.recv().await?;
        Some((Ok(SseEvent::default().data(json)), client))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

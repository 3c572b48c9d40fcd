//! The admin router: every bulkhead as JSON, its events as a stream, its metrics, and —
//! only when the application gives a token — a way to resize bulkheads live. The routes
//! and their rules are documented on [`Admin`].

mod events;
mod ui;
mod write;

use std::sync::Arc;

use axum::Json;
use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{StatusCode, header};
use serde::Serialize;

use crate::config::{BulkheadConfig, Kind};
use crate::{BulkheadSnapshot, prometheus};

pub use events::events_dropped;

/// The read-only admin router: [`Admin::new`]`().router()`. See [`Admin`] for the routes.
pub fn admin() -> axum::Router {
    Admin::new().router()
}

/// The admin router: every bulkhead as JSON, its events as a stream, its metrics, and —
/// only when the application gives a token — a way to resize bulkheads live.
///
/// Mount it under a prefix of your choice, behind whatever guards your admin surface:
///
/// ```
/// use axum::Router;
///
/// let app: Router = Router::new()
///     .nest("/admin", bulkhead::axum::admin()); // read-only
/// # drop(app);
/// ```
///
/// | route | what |
/// |---|---|
/// | `GET /bulkheads` | every bulkhead of the process-wide registry, by name: `name`, `kind`, `config` (the sizes it runs with), `declared_at` (where its `bulkheads.yaml` declares it), `functions` (the `#[bulkhead]` functions using it), `snapshot` (load, counters, histograms, saturation) |
/// | `GET /bulkheads/{name}` | one of them; 404 if there is none |
/// | `GET /bulkheads/events` | server-sent events: one JSON `data:` per permitted, refused and finished call (see [below](#events)) |
/// | `GET /metrics` | the Prometheus text exposition |
/// | `GET /reloads` | reloads applied and refused, and the last refusal's diagnostics |
/// | `GET /ui` | a live page for a browser: every bulkhead's load, queue, refusals per second, p99s, limit over the last minutes, partitions and keys, coloured by its saturation levels (see [below](#the-live-page)) |
/// | `PUT /config` | *write*: apply a deploy YAML (the body), layered over the declarations as at start-up (entries may give sizes only) |
/// | `PATCH /bulkheads/{name}` | *write*: change some sizes of one bulkhead (a JSON object of its keys, e.g. `{"max_concurrent_calls": 40}`) |
///
/// # The live page
///
/// `GET /ui` is a page for an operator's browser: one self-contained HTML document (its
/// style and script inline; nothing is loaded from elsewhere, and its
/// `Content-Security-Policy` lets it talk to this router only). For every bulkhead it
/// shows the kind, running / limit, the queue's depth / capacity, waiting callers,
/// refusals by reason (total and per second over the last 10 s), the call, wait and queue
/// p99 since start, the limit over the last 5 minutes (an adaptive limit as it moves),
/// partitions and per-key figures, each card coloured by its saturation level against the
/// thresholds of its config (`saturation`), and the latest refusals as they happen.
///
/// It reads `GET /bulkheads` every second and listens to `GET /bulkheads/events`, both
/// addressed relative to the page, so it works under any mount prefix; when the stream
/// drops it says so and reopens it after 1 s, then 2 s, 4 s… at most 15 s. `?filter=pay`
/// shows only the bulkheads whose name contains `pay`. When the data routes want a token,
/// open the page as `…/ui#token=<token>` (a fragment never reaches a server or its logs)
/// or type it into the form it shows on a `401`: it is kept for that browser tab and sent
/// as `Authorization: Bearer <token>`.
///
/// # Writing
///
/// The write routes exist only with [`Admin::write_token`]. A request without an
/// `Authorization: Bearer …` header is answered `401`, with another token `403`; the token
/// is compared in constant time. Every change is logged at `WARN` (target `bulkhead`) with
/// who asked (the peer address when the server was started with connect info, and the
/// `User-Agent`) and what changed. A change is validated like a deploy — every problem at
/// once, placed in the request body — and applied with [`reload`](crate::reload), or not
/// at all (`422` with the diagnostics).
///
/// # Events
///
/// Each client of `GET /bulkheads/events` listens through a bounded buffer of
/// [`Admin::events_buffer`] events (256 by default). The listener runs on the calls'
/// threads and never waits: when a client reads too slowly its buffer fills and further
/// events are dropped for it, counted ([`events_dropped`]) and announced to it by an
/// `event: dropped` message with the number, once it catches up. A slow client costs calls
/// nothing but the listener (about 1 µs per call while any client is connected).
///
/// ```text
/// data: {"bulkhead":"orders","kind":"semaphore","event":"refused","reason":"full","message":"bulkhead `orders` is full"}
/// ```
///
/// Its options:
///
/// ```
/// use axum::Router;
/// use bulkhead::axum::Admin;
///
/// let token = std::env::var("BULKHEAD_ADMIN_TOKEN").ok();
/// let mut admin = Admin::new();
/// if let Some(token) = token {
///     admin = admin.write_token(token); // PUT /config, PATCH /bulkheads/{name}
/// }
/// let app: Router = Router::new().nest("/admin", admin.router());
/// # drop(app);
/// ```
#[derive(Clone, Debug)]
#[must_use = "an Admin serves nothing until its router is mounted"]
pub struct Admin {
    write_token: Option<String>,
    env: bool,
    events_buffer: usize,
}

impl Default for Admin {
    fn default() -> Self {
        Admin::new()
    }
}

impl Admin {
    /// Read-only, no declaration, the environment layered on top, 256 events of buffer.
    pub fn new() -> Self {
        Admin {
            write_token: None,
            env: true,
            events_buffer: 256,
        }
    }

    /// Turns the write routes on, for requests carrying `Authorization: Bearer <token>`.
    pub fn write_token(mut self, token: impl Into<String>) -> Self {
        self.write_token = Some(token.into());
        self
    }

    /// Leaves the `BULKHEAD_…` environment variables out of `PUT /config` (they are
    /// layered on top by default, as at start-up).
    pub fn without_env(mut self) -> Self {
        self.env = false;
        self
    }

    /// How many events each events client may have waiting before further ones are
    /// dropped for it (at least 1).
    pub fn events_buffer(mut self, events: usize) -> Self {
        self.events_buffer = events.max(1);
        self
    }

    /// The router, to mount with `Router::nest` or `merge`.
    pub fn router(self) -> axum::Router {
        let write = self.write_token.is_some();
        let state = Arc::new(self);
        let router = axum::Router::new()
            .route("/bulkheads", get(list))
            .route("/bulkheads/events", get(events::stream))
            .route("/metrics", get(metrics))
            .route("/reloads", get(reloads))
            .route("/ui", get(ui::serve));
        let router = if write {
            router
                .route("/bulkheads/{name}", get(one).patch(write::resize))
                .route("/config", axum::routing::put(write::apply))
        } else {
            router.route("/bulkheads/{name}", get(one))
        };
        router.with_state(state)
    }
}

/// One bulkhead as `GET /bulkheads` lists it.
#[derive(Serialize)]
struct BulkheadView {
    name: String,
    kind: Kind,
    config: Option<BulkheadConfig>,
    declared_at: Option<Site>,
    functions: Vec<Site>,
    snapshot: BulkheadSnapshot,
}

/// A place in the program's sources: a declaration in a `bulkheads.yaml`, or an annotated
/// function.
#[derive(Serialize)]
struct Site {
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'static str>,
    file: &'static str,
    line: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    column: Option<u32>,
}

/// Where the program declares `name`, and the functions that use it (none for a bulkhead
/// registered by hand).
fn declaration_sites(name: &str) -> (Option<Site>, Vec<Site>) {
    let Some(declared) = crate::declarations().get(name) else {
        return (None, Vec::new());
    };
    let at = declared.declared_at();
    let functions = declared
        .functions()
        .iter()
        .map(|f| Site {
            path: Some(f.path),
            file: f.file,
            line: f.line,
            column: None,
        })
        .collect();
    let site = Site {
        path: None,
        file: at.file,
        line: at.line,
        column: Some(at.column),
    };
    (Some(site), functions)
}

fn view(snapshot: BulkheadSnapshot) -> BulkheadView {
    let name = snapshot.name.to_string();
    let (declared_at, functions) = declaration_sites(&name);
    BulkheadView {
        kind: snapshot.kind,
        config: crate::registry().config(&name),
        declared_at,
        functions,
        name,
        snapshot,
    }
}

async fn list() -> Json<Vec<BulkheadView>> {
    let snapshots = crate::registry().snapshot();
    Json(snapshots.into_iter().map(view).collect())
}

async fn one(Path(name): Path<String>) -> Response {
    match crate::registry().get(&name) {
        Some(bulkhead) => Json(view(bulkhead.snapshot())).into_response(),
        None => not_found(&name),
    }
}

fn not_found(name: &str) -> Response {
    problem(
        StatusCode::NOT_FOUND,
        format!("no bulkhead named `{name}` is registered"),
    )
}

/// An error response: `{"error": message}`.
fn problem(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

async fn metrics() -> Response {
    (
        [(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)],
        prometheus::encode_registry(crate::registry()),
    )
        .into_response()
}

async fn reloads() -> Json<crate::ReloadStatus> {
    Json(crate::registry().reload_status())
}

//! The admin router: every bulkhead as JSON, its events as a stream, its metrics, and —
//! only when the application gives a token — a way to resize bulkheads live. The routes
//! and their rules are documented on [`Admin`].

mod events;
mod write;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{StatusCode, header};
use serde::Serialize;

use crate::config::{BulkheadConfig, Kind};
use crate::deploy_layers::DeployLayers;
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
/// | `GET /bulkheads` | every bulkhead of the process-wide registry, by name: `name`, `kind`, `config` (the sizes it runs with), `declared_at` (where the config declares it), `snapshot` (load, counters, histograms, saturation) |
/// | `GET /bulkheads/{name}` | one of them; 404 if there is none |
/// | `GET /bulkheads/events` | server-sent events: one JSON `data:` per permitted, refused and finished call (see [below](#events)) |
/// | `GET /metrics` | the Prometheus text exposition |
/// | `GET /reloads` | reloads applied and refused, and the last refusal's diagnostics |
/// | `PUT /config` | *write*: apply a deploy YAML (the body), layered as at start-up |
/// | `PATCH /bulkheads/{name}` | *write*: change some sizes of one bulkhead (a JSON object of its keys, e.g. `{"max_concurrent_calls": 40}`) |
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
/// let mut admin = Admin::new().declared("bulkheads.yaml", include_str!("../../bulkheads.yaml"));
/// if let Some(token) = token {
///     admin = admin.write_token(token); // PUT /config, PATCH /bulkheads/{name}
/// }
/// let app: Router = Router::new().nest("/admin", admin.router());
/// # drop(app);
/// ```
#[derive(Clone, Debug)]
pub struct Admin {
    write_token: Option<String>,
    layers: DeployLayers,
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
            layers: DeployLayers::default(),
            events_buffer: 256,
        }
    }

    /// Turns the write routes on, for requests carrying `Authorization: Bearer <token>`.
    pub fn write_token(mut self, token: impl Into<String>) -> Self {
        self.write_token = Some(token.into());
        self
    }

    /// The declared config (`include_str!` of the crate's `bulkheads.yaml`; `name` for
    /// messages): the bottom layer of `PUT /config`, and where `declared_at` points.
    pub fn declared(mut self, name: impl Into<String>, yaml: impl Into<String>) -> Self {
        self.layers.declared = Some((name.into(), yaml.into()));
        self
    }

    /// Leaves the `BULKHEAD_…` environment variables out of `PUT /config` (they are
    /// layered on top by default, as at start-up).
    pub fn without_env(mut self) -> Self {
        self.layers.env = false;
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
            .route("/reloads", get(reloads));
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
    snapshot: BulkheadSnapshot,
}

/// Where a bulkhead is declared.
#[derive(Serialize)]
struct Site {
    file: String,
    line: usize,
    column: usize,
}

/// Where the declared config declares `name`, if the admin was given it.
fn declaration_site(admin: &Admin, name: &str) -> Option<Site> {
    let (file, yaml) = admin.layers.declared.as_ref()?;
    let parsed = crate::config::parse_file(file, yaml).ok()?;
    let (file, line, column) = parsed.declared_at(name)?;
    Some(Site {
        file: file.to_owned(),
        line,
        column,
    })
}

fn view(admin: &Admin, snapshot: BulkheadSnapshot) -> BulkheadView {
    let name = snapshot.name.to_string();
    BulkheadView {
        kind: snapshot.kind,
        config: crate::registry().config(&name),
        declared_at: declaration_site(admin, &name),
        name,
        snapshot,
    }
}

async fn list(State(admin): State<Arc<Admin>>) -> Json<Vec<BulkheadView>> {
    let snapshots = crate::registry().snapshot();
    Json(snapshots.into_iter().map(|s| view(&admin, s)).collect())
}

async fn one(State(admin): State<Arc<Admin>>, Path(name): Path<String>) -> Response {
    match crate::registry().get(&name) {
        Some(bulkhead) => Json(view(&admin, bulkhead.snapshot())).into_response(),
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

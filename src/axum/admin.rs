//! The admin router: every bulkhead as JSON, its events as a stream, its metrics, and —
//! only when the application gives a token — a way to resize bulkheads live. The routes
//! and their rules are documented on [`Admin`].

mod access;
mod events;
mod ui;
#[cfg(feature = "deploy")]
mod write;

use std::sync::Arc;

use axum::Json;
use axum::extract::{FromRequestParts, OriginalUri, Path};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, put};
use http::request::Parts;
use http::{Method, StatusCode, header};
use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

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
/// | `GET /events` | server-sent events: one JSON `data:` per call permitted, refused, timed out (its caller got `CallTimeout`) and finished (see [below](#events)) |
/// | `GET /metrics` | the Prometheus text exposition |
/// | `GET /reloads` | deploys applied and refused, the last refusal's diagnostics, and `in_force`: where the deploy in force came from |
/// | `GET /ui` | a live page for a browser: every bulkhead's load, queue, refusals per second, p99s, limit over the last minutes, partitions and keys, coloured by its saturation levels (see [below](#the-live-page)); the page itself holds no data and needs no token, the requests it makes carry the read token |
/// | `PUT /config` | *write*: apply a deploy YAML (the body), layered over every registered bulkhead as at start-up (entries may give sizes only); it replaces the deploy in force |
/// | `PATCH /bulkheads/{name}` | *write*: change some sizes of one bulkhead (a JSON object of its keys, e.g. `{"max_concurrent_calls": 40}`) in the deploy in force |
///
/// Every answer is JSON, errors included (`{"error": …}`): `404` for a path or a
/// bulkhead that does not exist, `400` for a bulkhead name that is not text, `405` for a
/// method a route does not have — and for every write route when no write token is
/// configured — and `422` for a change that does not apply, with `diagnostics` placed in
/// the request body (`line`, `column`, `key_path`, `message`). A write whose body is not
/// UTF-8 text is answered `400` (placed at the first byte that is not), one over 1 MiB
/// (the most a deploy file may be) `413`, with `diagnostics` too. Every write the token
/// lets through and that names a bulkhead that exists is a deploy attempt: applied or
/// refused — the body's faults included — it is recorded like every deploy
/// (`GET /reloads`, [`reload_status`](crate::Registry::reload_status)). A credential in a
/// config (the password of a Redis URL) is shown as `…`.
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
/// thresholds of its config (`saturation`), and the latest refusals and call timeouts as
/// they happen.
///
/// It reads `GET /bulkheads` every second and listens to `GET /events`, both
/// addressed relative to the page, so it works under any mount prefix; when the stream
/// drops it says so and reopens it after 1 s, then 2 s, 4 s… at most 15 s. `?filter=pay`
/// shows only the bulkheads whose name contains `pay`. When the data routes want a token,
/// open the page as `…/ui#token=<token>` (a fragment never reaches a server or its logs)
/// or type it into the form it shows on a `401`: it is kept for that browser tab and sent
/// as `Authorization: Bearer <token>`.
///
/// # Writing
///
/// The write routes work only with [`Admin::write_token`]. A request without an
/// `Authorization: Bearer …` header is answered `401`, with another token `403`; tokens
/// are compared in constant time whatever their length (as SHA-256 digests). Each write
/// goes through the registry's one deploy path under its deploy lock: a `PATCH` is a
/// transaction against the deploy in force, so simultaneous PATCHes of different
/// bulkheads all survive, and of one bulkhead the last applied wins — each answer gives
/// `config`, the bulkhead's config its change put in force. Every change is logged as one
/// line (target `bulkhead`) naming who asked (the peer address when the server was started
/// with connect info, and the `User-Agent`), never the body.
///
/// # Reading
///
/// By default the read routes need no token: mount the router on a private listener. When
/// that is not possible, [`Admin::read_token`] makes every read route (the event stream
/// included) need `Authorization: Bearer` with the read or the write token.
///
/// # Events
///
/// Each client of `GET /events` listens through a bounded buffer of
/// [`Admin::events_buffer`] events (256 by default). The listener runs on the calls'
/// threads and never waits: when a client reads too slowly its buffer fills and further
/// events are dropped for it, counted ([`events_dropped`]) and announced to it by an
/// `event: dropped` message with the number, once it catches up. A slow client costs calls
/// nothing but the listener (about 1 µs per call while any client is connected);
/// [`Admin::max_event_clients`] caps how many may listen at once (`503` past it).
///
/// ```text
/// data: {"bulkhead":"orders","kind":"semaphore","event":"refused","reason":"full","message":"bulkhead `orders` is full"}
/// ```
///
/// `event` is `permitted`, `refused` (with `reason` and `message`), `timed_out` (the
/// caller stopped waiting at the call's `timeout`; `reason` `call_timeout` and `message`;
/// the body ran, and the call has its `finished` too) or `finished` (with `outcome` and
/// `duration_seconds`); a deploy's outcome is `deploy`.
///
/// A stream lasts as long as its client, so a server shutting down gracefully closes the
/// streams first, with [`Admin::event_streams`]:
///
/// ```
/// use axum::Router;
/// use bulkhead::axum::Admin;
///
/// # async fn serve(shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
/// let token = std::env::var("BULKHEAD_ADMIN_TOKEN").ok();
/// let mut admin = Admin::new().max_event_clients(16);
/// if let Some(token) = token {
///     admin = admin.write_token(token); // PUT /config, PATCH /bulkheads/{name}
/// }
/// let streams = admin.event_streams();
/// let app: Router = Router::new().nest("/admin", admin.router());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// axum::serve(listener, app)
///     .with_graceful_shutdown(async move {
///         shutdown.await;
///         streams.close(); // every open event stream ends: the drain can finish
///     })
///     .await
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use = "an Admin serves nothing until its router is mounted"]
pub struct Admin {
    write_token: Option<Token>,
    read_token: Option<Token>,
    env: bool,
    events_buffer: usize,
    max_event_clients: Option<usize>,
    streams: EventStreams,
    /// Event clients listening now, across clones of this router.
    event_clients: Arc<std::sync::atomic::AtomicUsize>,
}

/// The most events a client's buffer holds ([`Admin::events_buffer`] is clamped to it).
pub const MAX_EVENTS_BUFFER: usize = 65_536;

/// A bearer token, kept only as its SHA-256 digest: compared in constant time whatever
/// the length of the token given, and never printed.
#[derive(Clone)]
pub(super) struct Token([u8; 32]);

impl Token {
    fn new(token: &str) -> Self {
        Token(Sha256::digest(token.as_bytes()).into())
    }

    pub(super) fn matches(&self, given: &str) -> bool {
        let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        bool::from(given.ct_eq(&self.0))
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Closes every open event stream of an [`Admin`]'s router: give [`close`](Self::close)
/// to the server's graceful shutdown (see [`Admin`]).
#[derive(Clone, Debug)]
pub struct EventStreams {
    closed: Arc<tokio::sync::watch::Sender<bool>>,
}

impl EventStreams {
    /// Ends every open event stream now and refuses new ones (`503`). A client that has
    /// stopped reading keeps its connection until it reads or goes away, so bound the
    /// server's graceful drain too (docs/operations.md shows how).
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    pub(super) fn closed(&self) -> tokio::sync::watch::Receiver<bool> {
        self.closed.subscribe()
    }
}

impl Default for Admin {
    fn default() -> Self {
        Admin::new()
    }
}

impl Admin {
    /// Read-only with open reads, the environment layered on top, 256 events of buffer,
    /// no cap on event clients.
    pub fn new() -> Self {
        Admin {
            write_token: None,
            read_token: None,
            env: true,
            events_buffer: 256,
            max_event_clients: None,
            streams: EventStreams {
                closed: Arc::new(tokio::sync::watch::Sender::new(false)),
            },
            event_clients: Arc::default(),
        }
    }

    /// Turns the write routes on, for requests carrying `Authorization: Bearer <token>`
    /// (feature `deploy`).
    #[cfg(feature = "deploy")]
    pub fn write_token(mut self, token: impl AsRef<str>) -> Self {
        self.write_token = Some(Token::new(token.as_ref()));
        self
    }

    /// Makes every read route need `Authorization: Bearer <token>` (or the write token):
    /// for a router that cannot be mounted on a private listener. By default reads are
    /// open.
    pub fn read_token(mut self, token: impl AsRef<str>) -> Self {
        self.read_token = Some(Token::new(token.as_ref()));
        self
    }

    /// Leaves the `BULKHEAD_…` environment variables out of `PUT /config` (they are
    /// layered on top by default, as at start-up).
    pub fn without_env(mut self) -> Self {
        self.env = false;
        self
    }

    /// How many events each events client may have waiting before further ones are
    /// dropped for it: at least 1, at most [`MAX_EVENTS_BUFFER`].
    pub fn events_buffer(mut self, events: usize) -> Self {
        self.events_buffer = events.clamp(1, MAX_EVENTS_BUFFER);
        self
    }

    /// How many clients may listen to `GET /events` at once; one more is answered `503`
    /// (by default there is no cap: each listening client costs every call about 1 µs).
    pub fn max_event_clients(mut self, clients: usize) -> Self {
        self.max_event_clients = Some(clients);
        self
    }

    /// The handle that ends this router's open event streams: call its
    /// [`close`](EventStreams::close) when the server shuts down gracefully.
    pub fn event_streams(&self) -> EventStreams {
        self.streams.clone()
    }

    /// The router, to mount with `Router::nest` or `merge`.
    pub fn router(self) -> axum::Router {
        let state = Arc::new(self);
        // Read routes need the read token when there is one; write routes check the write
        // token themselves (and answer 405 when there is none).
        let read = |route: MethodRouter<Arc<Admin>>| {
            route.route_layer(from_fn_with_state(Arc::clone(&state), access::read_access))
        };
        #[cfg(feature = "deploy")]
        let (patch_one, put_config) = (write::resize, write::apply);
        #[cfg(not(feature = "deploy"))]
        let (patch_one, put_config) = (access::no_writes, access::no_writes);
        let router = axum::Router::new()
            // Reads.
            .route("/bulkheads", read(get(list)))
            .route("/bulkheads/{name}", read(get(one)).patch(patch_one))
            .route("/events", read(get(events::stream)))
            .route("/metrics", read(get(metrics)))
            .route("/reloads", read(get(reloads)))
            // The live page: static, its requests carry the read token.
            .route("/ui", get(ui::serve))
            // Writes.
            .route("/config", put(put_config))
            .fallback(no_route)
            .method_not_allowed_fallback(no_method)
            .with_state(state);
        // A write's body is a deploy: at most what a deploy file may be.
        #[cfg(feature = "deploy")]
        let router = router.layer(write::body_limit());
        router
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

/// `config` as an admin answer shows it: the password of every Redis URL hidden (a
/// cluster rate limit's store, a cluster concurrency limit's).
pub(super) fn shown(mut config: BulkheadConfig) -> BulkheadConfig {
    let rate = config.rate_limit.as_mut().and_then(|r| r.store.as_mut());
    let leases = config.cluster.as_mut().map(|c| &mut c.store);
    for store in rate.into_iter().chain(leases) {
        store.redis = crate::config::redact_url(&store.redis).into_owned();
    }
    config
}

fn view(snapshot: BulkheadSnapshot) -> BulkheadView {
    let name = snapshot.name.to_string();
    let (declared_at, functions) = declaration_sites(&name);
    BulkheadView {
        kind: snapshot.kind,
        config: crate::registry().config(&name).map(shown),
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

async fn one(NameInPath(name): NameInPath) -> Response {
    match crate::registry().get(&name) {
        Some(bulkhead) => Json(view(bulkhead.snapshot())).into_response(),
        None => not_found(&name),
    }
}

/// The `{name}` of a `/bulkheads/{name}` route; one that is not text (percent-encoded
/// bytes that are not UTF-8) is answered `400` in JSON, not by axum's plain text.
struct NameInPath(String);

impl<S: Send + Sync> FromRequestParts<S> for NameInPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(name)) => Ok(NameInPath(name)),
            Err(rejection) => Err(problem(
                StatusCode::BAD_REQUEST,
                format!(
                    "the bulkhead name in the path cannot be read: {}",
                    rejection.body_text()
                ),
            )),
        }
    }
}

fn not_found(name: &str) -> Response {
    problem(
        StatusCode::NOT_FOUND,
        format!("no bulkhead named `{name}` is registered"),
    )
}

/// `404` for a path the router does not have.
async fn no_route(OriginalUri(uri): OriginalUri) -> Response {
    problem(
        StatusCode::NOT_FOUND,
        format!(
            "there is no admin route `{}`: the routes are /bulkheads, /bulkheads/{{name}}, \
             /events, /metrics, /reloads and /config",
            uri.path()
        ),
    )
}

/// `405` for a method a route does not have.
async fn no_method(method: Method, OriginalUri(uri): OriginalUri) -> Response {
    problem(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("`{}` does not answer {method}", uri.path()),
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

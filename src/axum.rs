//! axum integration: refusals as HTTP responses, and a route layer that holds its permit
//! until the response body has been sent.
//!
//! ```
//! use axum::{Router, extract::Path, routing::get};
//! use bulkhead::axum::{BulkheadLayer, Refusal};
//! use bulkhead::{BulkheadError, bulkhead};
//!
//! // The semaphore bulkhead `product-detail` guards the catalogue lookup…
//! #[bulkhead("product-detail")]
//! async fn load_product(id: u64) -> Result<String, BulkheadError> {
//!     Ok(format!("product {id}"))
//! }
//!
//! // …and, from the process-wide registry (which holds every declared bulkhead from the
//! // start), both routes: together they hold at most its 20 permits.
//! let detail = bulkhead::registry().semaphore("product-detail").expect("declared by load_product");
//! let app: Router = Router::new()
//!     .route("/product/{id}", get(product))
//!     .route("/product/{id}/reviews", get(|| async { "reviews" }))
//!     .route_layer(BulkheadLayer::new(detail));
//!
//! // A handler that calls a bulkhead itself: `?` turns a refusal into a 503/429.
//! async fn product(Path(id): Path<u64>) -> Result<String, Refusal> {
//!     Ok(load_product(id).await?)
//! }
//! # drop(app);
//! ```
//!
//! * [`Refusal`] turns a [`BulkheadError`] into a response: `503 Service Unavailable` when the
//!   bulkhead is full, timed out, dropped queued work or is shutting down, `429 Too Many
//!   Requests` when it is rate limited, each with a `Retry-After` computed from the refusal
//!   (below). Handlers that call bulkheads themselves can return `Result<_, Refusal>` and use
//!   `?` on a `BulkheadError`.
//! * [`BulkheadLayer`] admits each request through one shared semaphore bulkhead (see
//!   [`crate::tower`]); a refused request is answered with its [`Refusal`] response without
//!   calling the handler. The permit is held **until the response body has been sent** (its
//!   last frame read, an error, or the body dropped), not just until the handler returns:
//!   a handler that streams a large body keeps its slot for as long as it works. A body
//!   dropped before its end — the client went away mid-body — counts the call `cancelled`
//!   in the bulkhead's stats, not `completed`: from the server's side the work was
//!   abandoned. (A body with nothing to send ends the call when the response is made.)
//!   The layer does not apply the bulkhead's `timeout` to the handler; a handler that calls
//!   an annotated `async fn` gets its `CallTimeout` (504 through `?`), and tower's
//!   `TimeoutLayer` around the layer bounds a route's whole time.
//!
//! # What an outside client sees
//!
//! By default a refusal response names no bulkhead: internal names are of no use to a
//! client and tell it how the service is built. The status, a short generic body
//! (`service busy, retry later`, `too many requests, retry later`, …) and `Retry-After`
//! are all it gets. For internal callers, opt in to the details: [`DetailedRefusal`] in a
//! handler, or [`BulkheadLayer::with_details`] — the body is then the refusal's message and
//! the headers `x-bulkhead` (the name) and `x-bulkhead-refusal` (the reason label) are set.
//!
//! # `Retry-After`
//!
//! * `RateLimited`: computed from the limiter's state: the wait until a call may be
//!   admitted again, rounded up to whole seconds (at least 1), as RFC 9110 requires whole
//!   seconds.
//! * `Full`, `Timeout`, `QueueTimeout` of a thread pool in the process-wide registry: the
//!   wait a queued call can expect, computed from the pool's state (the mean time its
//!   queued calls have waited so far, `ThreadPoolBulkhead::expected_queue_wait`), rounded
//!   up, at least 1 and at most 60 seconds.
//! * The same for a semaphore (or a pool with nothing queued yet): `1`. Room comes back as
//!   running calls finish, so the soonest useful retry is short; a client should still add
//!   jitter.
//! * `CallTimeout` (the call ran past the bulkhead's `timeout`): `504 Gateway Timeout`,
//!   and no `Retry-After`: the dependency is slow, not full.
//! * `ShutDown`: none. This instance is going away; retry elsewhere.

mod admin;

pub use admin::{Admin, EventStreams, MAX_EVENTS_BUFFER, admin, events_dropped};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bulkhead_core::{BulkheadError, OwnedPermit, SemaphoreBulkhead, retry_after_header_secs};
use http::{HeaderValue, StatusCode, header};
use http_body::{Frame, SizeHint};
use tower_layer::Layer;
use tower_service::Service;

use crate::tower::{Admit, KeyBy, NoKey, RequestKey, ServiceError, admit};

/// A [`BulkheadError`] as an HTTP response (503 or 429 with `Retry-After`) that names no
/// bulkhead; [`DetailedRefusal`] adds the name and the reason.
///
/// ```
/// use axum::response::IntoResponse;
/// use bulkhead::axum::Refusal;
/// use bulkhead::{BulkheadError, BulkheadName};
/// use std::time::Duration;
///
/// let limited = BulkheadError::RateLimited {
///     name: BulkheadName::new("search"),
///     retry_after: Duration::from_millis(1200),
/// };
/// let response = Refusal::from(limited).into_response();
/// assert_eq!(response.status(), 429);
/// assert_eq!(response.headers()["retry-after"], "2");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal(pub BulkheadError);

impl Refusal {
    /// The status code for this refusal: 429 when rate limited, 503 otherwise.
    pub fn status(&self) -> StatusCode {
        match self.0 {
            BulkheadError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            BulkheadError::CallTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The response body an outside client gets: says what to do, names nothing inside.
    pub fn public_message(&self) -> &'static str {
        match self.0 {
            BulkheadError::RateLimited { .. } => "too many requests, retry later",
            BulkheadError::CallTimeout { .. } => "the request took too long",
            BulkheadError::ShutDown { .. } => "service shutting down, retry elsewhere",
            _ => "service busy, retry later",
        }
    }

    /// The same refusal, answered with the bulkhead's name and reason (for internal callers).
    pub fn detailed(self) -> DetailedRefusal {
        DetailedRefusal(self.0)
    }

    fn response(&self, body: String) -> Response {
        let mut response = (self.status(), body).into_response();
        if let Some(secs) = self.retry_after_secs() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }

    /// The `Retry-After` value in whole seconds, if the client should retry here at all.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match &self.0 {
            // Whole seconds, rounded up, and at least 1: `Retry-After: 0` invites a retry storm.
            BulkheadError::RateLimited { retry_after, .. } => {
                Some(retry_after_header_secs(*retry_after).max(1))
            }
            BulkheadError::ShutDown { .. } | BulkheadError::CallTimeout { .. } => None,
            // A thread pool of the process-wide registry: the wait a queued call can
            // expect (the mean queue time so far), rounded up, between 1 s and a minute.
            error => Some(
                crate::registry()
                    .thread_pool(error.name())
                    .and_then(|pool| pool.expected_queue_wait())
                    .map_or(1, |wait| retry_after_header_secs(wait).clamp(1, 60)),
            ),
        }
    }

    /// The refusal this response carries.
    pub fn error(&self) -> &BulkheadError {
        &self.0
    }
}

impl From<BulkheadError> for Refusal {
    fn from(err: BulkheadError) -> Self {
        Refusal(err)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Refusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        self.response(self.public_message().to_owned())
    }
}

/// A refusal answered with its details, for internal callers: the body is the refusal's
/// message (naming the bulkhead), and `x-bulkhead` / `x-bulkhead-refusal` carry the
/// bulkhead's name and the reason label. Status and `Retry-After` as for [`Refusal`].
///
/// ```
/// use axum::response::IntoResponse;
/// use bulkhead::axum::Refusal;
/// use bulkhead::{BulkheadError, BulkheadName};
///
/// let full = BulkheadError::Full { name: BulkheadName::new("ledger") };
/// let public = Refusal::from(full.clone()).into_response();
/// assert!(public.headers().get("x-bulkhead").is_none());
/// let internal = Refusal::from(full).detailed().into_response();
/// assert_eq!(internal.headers()["x-bulkhead"], "ledger");
/// assert_eq!(internal.headers()["x-bulkhead-refusal"], "full");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetailedRefusal(pub BulkheadError);

impl From<BulkheadError> for DetailedRefusal {
    fn from(err: BulkheadError) -> Self {
        DetailedRefusal(err)
    }
}

impl IntoResponse for DetailedRefusal {
    fn into_response(self) -> Response {
        let refusal = Refusal(self.0);
        let mut response = refusal.response(refusal.0.to_string());
        let headers = response.headers_mut();
        if let Ok(name) = HeaderValue::from_str(refusal.0.name()) {
            headers.insert("x-bulkhead", name);
        }
        headers.insert(
            "x-bulkhead-refusal",
            HeaderValue::from_static(refusal.0.reason()),
        );
        response
    }
}

/// A route layer admitting requests through one shared [`SemaphoreBulkhead`], answering
/// refusals with a [`Refusal`] response and holding the permit until the response body has
/// been sent.
///
/// Use it with `Router::route_layer` (or `layer`); every route it is applied to shares the
/// same permits.
///
/// For an [adaptive](crate::adaptive) bulkhead, a response with status 503 counts as a drop
/// (the handler's dependency is overloaded), as do a panicking handler and a request dropped
/// before its response (a timeout); a handler may also call
/// [`mark_overloaded`](crate::mark_overloaded) itself.
#[derive(Clone, Debug)]
pub struct BulkheadLayer<K = NoKey> {
    layer: crate::tower::BulkheadLayer<K>,
    details: bool,
}

impl BulkheadLayer {
    /// A layer admitting requests through `bulkhead` (all clones of it are the same bulkhead).
    pub fn new(bulkhead: SemaphoreBulkhead) -> Self {
        crate::tower::BulkheadLayer::new(bulkhead).into()
    }
}

impl<K> BulkheadLayer<K> {
    /// The bulkhead this layer admits requests through.
    pub fn bulkhead(&self) -> &SemaphoreBulkhead {
        self.layer.bulkhead()
    }

    /// Answers refusals with their details ([`DetailedRefusal`]: the bulkhead's name in the
    /// body and in `x-bulkhead`), for services whose clients are internal.
    #[must_use]
    pub fn with_details(mut self) -> Self {
        self.details = true;
        self
    }

    /// Counts every request of the routes under the bulkhead's partition `name`, as
    /// [`tower::BulkheadLayer::partition`](crate::tower::BulkheadLayer::partition) does.
    ///
    /// ```
    /// use axum::{Router, routing::get};
    /// use bulkhead::axum::BulkheadLayer;
    ///
    /// // bulkheads.yaml: shared-search: { kind: semaphore, max_concurrent_calls: 10,
    /// //   max_wait: 1s, partitions: { live: 0.8, batch: 0.2 } }
    /// let search = BulkheadLayer::from(bulkhead::layer!("shared-search"));
    /// let app: Router = Router::new()
    ///     .route("/search", get(|| async { "results" }))
    ///     .route_layer(search.clone().partition("live"))
    ///     .merge(
    ///         Router::new()
    ///             .route("/reindex", get(|| async { "queued" }))
    ///             .route_layer(search.partition("batch")),
    ///     );
    /// # drop(app);
    /// ```
    #[must_use]
    pub fn partition(mut self, name: &str) -> Self {
        self.layer = self.layer.partition(name);
        self
    }

    /// Counts every request under the key `key(&request)` too (a tenant from a header, a
    /// user), as [`tower::BulkheadLayer::key_by`](crate::tower::BulkheadLayer::key_by) does.
    ///
    /// ```
    /// use axum::{Router, body::Body, http::Request, routing::get};
    /// use bulkhead::axum::BulkheadLayer;
    ///
    /// // bulkheads.yaml: tenant-api: { kind: semaphore, max_concurrent_calls: 8,
    /// //   per_key: { max_concurrent_calls: 2, max_keys: 1000 } }
    /// let tenant = |request: &Request<Body>| {
    ///     request.headers().get("x-tenant").map(|v| v.as_bytes().to_vec())
    /// };
    /// let app: Router = Router::new()
    ///     .route("/orders", get(|| async { "orders" }))
    ///     .route_layer(BulkheadLayer::from(bulkhead::layer!("tenant-api")).key_by(tenant));
    /// # drop(app);
    /// ```
    #[must_use]
    pub fn key_by<F>(self, key: F) -> BulkheadLayer<KeyBy<F>> {
        BulkheadLayer {
            layer: self.layer.key_by(key),
            details: self.details,
        }
    }
}

/// The HTTP flavour of a tower layer over the same bulkhead (its partition and key too).
impl<K> From<crate::tower::BulkheadLayer<K>> for BulkheadLayer<K> {
    fn from(layer: crate::tower::BulkheadLayer<K>) -> Self {
        BulkheadLayer {
            layer,
            details: false,
        }
    }
}

impl<S, K: Clone> Layer<S> for BulkheadLayer<K> {
    type Service = HttpBulkheadService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        HttpBulkheadService {
            inner,
            layer: self.layer.clone(),
            details: self.details,
        }
    }
}

/// The service built by [`BulkheadLayer`].
#[derive(Clone, Debug)]
pub struct HttpBulkheadService<S, K = NoKey> {
    inner: S,
    layer: crate::tower::BulkheadLayer<K>,
    details: bool,
}

impl<S, K, RequestBody, ResponseBody> Service<http::Request<RequestBody>>
    for HttpBulkheadService<S, K>
where
    S: Service<http::Request<RequestBody>, Response = http::Response<ResponseBody>> + Clone,
    K: RequestKey<http::Request<RequestBody>>,
    ResponseBody: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    ResponseBody::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = HttpResponseFuture<S, http::Request<RequestBody>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        let acquire = self.layer.acquire(&request);
        HttpResponseFuture {
            admit: admit(&mut self.inner, acquire, request),
            details: self.details,
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`HttpBulkheadService`].
    #[must_use = "futures do nothing unless polled"]
    pub struct HttpResponseFuture<S: Service<Request>, Request> {
        #[pin]
        admit: Admit<S, Request>,
        details: bool,
    }
}

impl<S, Request, ResponseBody> Future for HttpResponseFuture<S, Request>
where
    S: Service<Request, Response = http::Response<ResponseBody>>,
    ResponseBody: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    ResponseBody::Error: Into<axum::BoxError>,
{
    type Output = Result<Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let admitted = std::task::ready!(this.admit.poll(cx));
        Poll::Ready(match admitted {
            Ok((response, permit)) => {
                // A 503 from the handler means its dependency is overloaded: a drop for an
                // adaptive limit (the documented default; nothing for a static one).
                if response.status() == http::StatusCode::SERVICE_UNAVAILABLE {
                    permit.mark_overloaded();
                }
                Ok(response.map(|body| Body::new(PermitBody::new(body, permit))))
            }
            Err(ServiceError::Refused(err)) if *this.details => {
                Ok(DetailedRefusal(err).into_response())
            }
            Err(ServiceError::Refused(err)) => Ok(Refusal(err).into_response()),
            Err(ServiceError::Inner(err)) => Err(err),
        })
    }
}

impl<S: Service<Request>, Request> fmt::Debug for HttpResponseFuture<S, Request> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpResponseFuture").finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds a bulkhead permit until its last frame has been read, it
    /// failed, or it is dropped.
    struct PermitBody<B> {
        #[pin]
        body: B,
        permit: BodyPermit,
    }
}

/// The permit of a response still being sent. Dropped before the body's end — the client
/// went away mid-body, and the server dropped the response — the call counts as
/// `cancelled`: from the server's side the work was abandoned, not completed.
struct BodyPermit(Option<OwnedPermit>);

impl BodyPermit {
    fn as_ref(&self) -> Option<&OwnedPermit> {
        self.0.as_ref()
    }

    /// The body has been sent (or failed): the call is over.
    fn finish(&mut self) {
        self.0 = None;
    }
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        if let Some(permit) = self.0.take() {
            permit.cancel();
        }
    }
}

impl<B: http_body::Body> PermitBody<B> {
    fn new(body: B, permit: OwnedPermit) -> Self {
        let mut permit = BodyPermit(Some(permit));
        if body.is_end_stream() {
            // Nothing to send: the call is over now (hyper may never poll an empty body).
            permit.finish();
        }
        PermitBody { body, permit }
    }
}

impl<B: http_body::Body> http_body::Body for PermitBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        // Streaming the body is still work under the permit: inside the bulkhead.
        let polled = match this.permit.as_ref() {
            Some(permit) => permit.in_scope(|| this.body.as_mut().poll_frame(cx)),
            None => this.body.as_mut().poll_frame(cx),
        };
        let frame = std::task::ready!(polled);
        let finished = match &frame {
            Some(Ok(_)) => this.body.is_end_stream(),
            // The end of the body, or an error that ends it.
            Some(Err(_)) | None => true,
        };
        if finished {
            // The response has been sent: give the permit back now, not when hyper drops us.
            this.permit.finish();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

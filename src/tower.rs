//! A tower [`Layer`] that puts a named semaphore bulkhead in front of a service.
//!
//! ```
//! use bulkhead::tower::BulkheadLayer;
//! use bulkhead::config::SemaphoreConfig;
//! use bulkhead::SemaphoreBulkhead;
//! use tower::ServiceBuilder;
//!
//! let config = SemaphoreConfig { max_concurrent_calls: 8, ..SemaphoreConfig::default() };
//! let recommendations = SemaphoreBulkhead::new("recommendations", &config);
//! let client = ServiceBuilder::new()
//!     .layer(BulkheadLayer::new(recommendations))
//!     .service_fn(|user: u64| async move { Ok::<_, std::io::Error>(vec![user]) });
//! # drop(client);
//! ```
//!
//! # What happens under load
//!
//! * **One bulkhead, however many services.** The layer holds the bulkhead itself, not its
//!   configuration: every service it builds, every clone of those services and every other
//!   layer made from the same bulkhead share one set of permits. (tower's
//!   `ConcurrencyLimitLayer` makes a new semaphore each time it is applied, so in axum, where
//!   a layer is applied per route and a service is cloned per request, it can end up limiting
//!   nothing — axum#2582.)
//! * **Refusal is a value.** [`poll_ready`](Service::poll_ready) only asks the inner service;
//!   it never waits for a permit. The permit is taken in [`call`](Service::call): the
//!   returned future waits at most the bulkhead's `max_wait` and then resolves to
//!   [`ServiceError::Refused`] with the [`BulkheadError`]. Nothing hangs on a full bulkhead.
//! * **The permit is held until the inner response future resolves**, or until the future
//!   is dropped. For HTTP, where the response body is streamed after that, use
//!   [`crate::axum::BulkheadLayer`], which holds the permit until the body is sent.
//! * **The inner service runs inside the bulkhead.** It is called, and its response
//!   polled, in the permit's scope ([`OwnedPermit::in_scope`]): a call it makes to the same
//!   bulkhead (a `#[bulkhead]` function behind the route's own layer) runs inline on the
//!   request's permit, counted re-entrant, instead of waiting for a second one.
//! * **No call timeout.** The layer does not apply the bulkhead's `timeout` to the inner
//!   service (that bounds calls made through `#[bulkhead]` and `call_async`): for a bound
//!   on a request's time, put tower's `TimeoutLayer` around the layer.
//! * **Drops for an [adaptive](crate::adaptive) limit.** A request whose inner service
//!   panics, or that is dropped before its response (a `tower::timeout` around the layer),
//!   counts as a drop; an inner *error* does not by default (a 404 says nothing about load).
//!   The inner service marks an overloaded outcome — its dependency answered 503 — with
//!   [`mark_overloaded`](crate::mark_overloaded), which reaches the request's permit
//!   because the service runs in its scope.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bulkhead_core::{BulkheadError, OwnedPermit, SemaphoreBulkhead};
use tower_layer::Layer;
use tower_service::Service;

/// A [`Layer`] that admits each request through one shared [`SemaphoreBulkhead`], counted
/// under a partition and a key if set ([`partition`](Self::partition),
/// [`key_by`](Self::key_by); `K` is how a request's key is found: [`NoKey`] or [`KeyBy`]).
///
/// Cloning the layer, or building many services from it, never creates a new bulkhead.
#[derive(Clone, Debug)]
pub struct BulkheadLayer<K = NoKey> {
    bulkhead: SemaphoreBulkhead,
    /// The partition requests are counted under (`None`: the bulkhead's own admission).
    partition: Option<Arc<str>>,
    key: K,
}

/// How a [`BulkheadLayer`] finds the key a request is counted under (per-key caps).
pub trait RequestKey<Request> {
    /// The id of `request`'s key ([`SemaphoreBulkhead::key_id`]), or `None`.
    fn key_id(&self, request: &Request) -> Option<u64>;
}

/// No key: requests are counted under none (the default of [`BulkheadLayer`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoKey;

impl<Request> RequestKey<Request> for NoKey {
    #[inline]
    fn key_id(&self, _: &Request) -> Option<u64> {
        None
    }
}

/// The key of each request is `f(&request)` ([`BulkheadLayer::key_by`]).
#[derive(Clone, Copy)]
pub struct KeyBy<F>(F);

impl<F> fmt::Debug for KeyBy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("KeyBy").finish_non_exhaustive()
    }
}

impl<Request, F, K> RequestKey<Request> for KeyBy<F>
where
    F: Fn(&Request) -> K,
    K: std::hash::Hash,
{
    #[inline]
    fn key_id(&self, request: &Request) -> Option<u64> {
        Some(SemaphoreBulkhead::key_id(&(self.0)(request)))
    }
}

/// A [`BulkheadLayer`] whose requests are also counted under a key
/// ([`BulkheadLayer::key_by`]).
pub type KeyedBulkheadLayer<F> = BulkheadLayer<KeyBy<F>>;

/// The service of a [`KeyedBulkheadLayer`].
pub type KeyedBulkheadService<S, F> = BulkheadService<S, KeyBy<F>>;

impl BulkheadLayer {
    /// A layer admitting requests through `bulkhead` (all clones of it are the same bulkhead).
    pub fn new(bulkhead: SemaphoreBulkhead) -> Self {
        BulkheadLayer {
            bulkhead,
            partition: None,
            key: NoKey,
        }
    }
}

impl<K> BulkheadLayer<K> {
    /// Counts every request under the bulkhead's partition `name` (see
    /// [`SemaphoreBulkhead::partition`]); a name the bulkhead has no partition for counts
    /// as none: such requests only borrow free permits.
    ///
    /// ```
    /// use bulkhead::tower::BoxError;
    /// use tower::ServiceBuilder;
    ///
    /// // bulkheads.yaml: shared-search: { kind: semaphore, max_concurrent_calls: 10,
    /// //   max_wait: 1s, partitions: { live: 0.8, batch: 0.2 } }
    /// let batch_api = ServiceBuilder::new()
    ///     .layer(bulkhead::layer!("shared-search").partition("batch"))
    ///     .service_fn(|shard: u32| async move { Ok::<_, BoxError>(shard) });
    /// # drop(batch_api);
    /// ```
    #[must_use]
    pub fn partition(mut self, name: &str) -> Self {
        self.partition = Some(Arc::from(name));
        self
    }

    /// Counts every request under the key `key(&request)` too (a tenant, a user): with
    /// `per_key` on the bulkhead, no key holds more than its cap at once.
    ///
    /// ```
    /// use bulkhead::tower::BoxError;
    /// use tower::ServiceBuilder;
    ///
    /// struct Order { tenant: String, id: u64 }
    ///
    /// // bulkheads.yaml: tenant-api: { kind: semaphore, max_concurrent_calls: 8,
    /// //   per_key: { max_concurrent_calls: 2, max_keys: 1000 } }
    /// let orders = ServiceBuilder::new()
    ///     .layer(bulkhead::layer!("tenant-api").key_by(|order: &Order| order.tenant.clone()))
    ///     .service_fn(|order: Order| async move { Ok::<_, BoxError>(order.id) });
    /// # drop(orders);
    /// ```
    #[must_use]
    pub fn key_by<F>(self, key: F) -> BulkheadLayer<KeyBy<F>> {
        BulkheadLayer {
            bulkhead: self.bulkhead,
            partition: self.partition,
            key: KeyBy(key),
        }
    }

    /// The admission of `request`: through its partition and key, if any.
    pub(crate) fn acquire<Request>(&self, request: &Request) -> AcquireOwned
    where
        K: RequestKey<Request>,
    {
        let key = self.key.key_id(request);
        if self.partition.is_none() && key.is_none() {
            return Box::pin(self.bulkhead.acquire_owned());
        }
        let admission = match &self.partition {
            Some(name) => self.bulkhead.in_partition(name),
            None => self.bulkhead.unpartitioned(),
        };
        let admission = match key {
            Some(id) => admission.key_id(id),
            None => admission,
        };
        Box::pin(admission.acquire_owned())
    }

    /// The bulkhead this layer admits requests through.
    pub fn bulkhead(&self) -> &SemaphoreBulkhead {
        &self.bulkhead
    }
}

impl<S, K: Clone> Layer<S> for BulkheadLayer<K> {
    type Service = BulkheadService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        BulkheadService {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service that calls its inner service only while holding a permit of its bulkhead
/// (counted under the layer's partition and the request's key, if set).
///
/// Built by [`BulkheadLayer`]; see the [module docs](self) for its behaviour under load.
#[derive(Clone, Debug)]
pub struct BulkheadService<S, K = NoKey> {
    inner: S,
    layer: BulkheadLayer<K>,
}

impl<S> BulkheadService<S> {
    /// Wraps `inner` so each call holds a permit of `bulkhead`.
    pub fn new(inner: S, bulkhead: SemaphoreBulkhead) -> Self {
        BulkheadService {
            inner,
            layer: BulkheadLayer::new(bulkhead),
        }
    }
}

impl<S, K> BulkheadService<S, K> {
    /// The bulkhead calls are admitted through.
    pub fn bulkhead(&self) -> &SemaphoreBulkhead {
        &self.layer.bulkhead
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, K, Request> Service<Request> for BulkheadService<S, K>
where
    S: Service<Request> + Clone,
    K: RequestKey<Request>,
{
    type Response = S::Response;
    type Error = ServiceError<S::Error>;
    type Future = ResponseFuture<S, Request>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(ServiceError::Inner)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let acquire = self.layer.acquire(&request);
        ResponseFuture {
            admit: admit(&mut self.inner, acquire, request),
        }
    }
}

/// What a [`BulkheadService`] call fails with: the bulkhead refused it, or the inner service
/// failed.
///
/// It is an [`Error`](std::error::Error) when the inner service's error is one, and also
/// over a [`BoxError`] inner service (tower's `Timeout`, `Buffer`, `ConcurrencyLimit`), so it
/// can sit anywhere in a `ServiceBuilder` stack:
///
/// ```
/// use std::time::Duration;
/// use bulkhead::tower::BoxError;
/// use tower::{ServiceBuilder, ServiceExt, buffer::BufferLayer, timeout::TimeoutLayer};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let stack = ServiceBuilder::new()
///     .layer(BufferLayer::new(16))
///     .layer(bulkhead::layer!("tower-gateway"))
///     .layer(TimeoutLayer::new(Duration::from_secs(2)))
///     .service_fn(|user: u64| async move { Ok::<_, BoxError>(user) });
/// let answer: Result<u64, BoxError> = stack.oneshot(7).await;
/// assert_eq!(answer.unwrap(), 7);
/// # });
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ServiceError<E> {
    /// The bulkhead refused the request; the inner service was not called.
    Refused(BulkheadError),
    /// The inner service failed (in `poll_ready` or in its response future).
    Inner(E),
}

impl<E: fmt::Display> fmt::Display for ServiceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceError::Refused(err) => fmt::Display::fmt(err, f),
            ServiceError::Inner(err) => fmt::Display::fmt(err, f),
        }
    }
}

/// The error type tower's own middleware (`Timeout`, `Buffer`, …) fails with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error whatever the inner service fails with (`E: Debug + Display`), so it sits over
/// tower's [`BoxError`] services as well as over typed ones. Display is the refusal's or the
/// inner error's own message. The source is the [`BulkheadError`] of a refusal; for an inner
/// error held in a box (`BoxError`, `Box<dyn Error + Send>`, `Box<dyn Error>`) it is the
/// boxed error; a typed inner error is matched with [`ServiceError::Inner`] instead.
impl<E: fmt::Debug + fmt::Display + 'static> std::error::Error for ServiceError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServiceError::Refused(err) => Some(err),
            ServiceError::Inner(err) => boxed_source(err),
        }
    }
}

fn boxed_source<E: 'static>(err: &E) -> Option<&(dyn std::error::Error + 'static)> {
    let any: &dyn std::any::Any = err;
    if let Some(boxed) = any.downcast_ref::<BoxError>() {
        return Some(&**boxed);
    }
    if let Some(boxed) = any.downcast_ref::<Box<dyn std::error::Error + Send>>() {
        return Some(&**boxed);
    }
    if let Some(boxed) = any.downcast_ref::<Box<dyn std::error::Error>>() {
        return Some(&**boxed);
    }
    None
}

impl<E> From<BulkheadError> for ServiceError<E> {
    fn from(err: BulkheadError) -> Self {
        ServiceError::Refused(err)
    }
}

/// Starts admitting `request` through `acquire`: the service that was polled ready goes
/// into the future, and a clone of it stays behind for the next call (the usual tower
/// pattern for services that await something before calling the inner service).
pub(crate) fn admit<S, Request>(
    inner: &mut S,
    acquire: AcquireOwned,
    request: Request,
) -> Admit<S, Request>
where
    S: Service<Request> + Clone,
{
    let fresh = inner.clone();
    let ready = std::mem::replace(inner, fresh);
    Admit::new(acquire, ready, request)
}

pin_project_lite::pin_project! {
    /// The response future of [`BulkheadService`]: awaits a permit (at most `max_wait`), then
    /// the inner service's response while holding it.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S: Service<Request>, Request> {
        #[pin]
        admit: Admit<S, Request>,
    }
}

impl<S: Service<Request>, Request> Future for ResponseFuture<S, Request> {
    type Output = Result<S::Response, ServiceError<S::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The permit is returned here, as soon as the response is ready.
        self.project()
            .admit
            .poll(cx)
            .map(|admitted| admitted.map(|(response, _permit)| response))
    }
}

impl<S: Service<Request>, Request> fmt::Debug for ResponseFuture<S, Request> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// The future of [`SemaphoreBulkhead::acquire_owned`], boxed so the response future can
/// name it.
pub(crate) type AcquireOwned =
    Pin<Box<dyn Future<Output = Result<OwnedPermit, BulkheadError>> + Send>>;

pin_project_lite::pin_project! {
    /// Awaits a permit, then calls the inner service and awaits its response, yielding the
    /// response together with the still-held permit. The inner service is called, and its
    /// response polled, inside the bulkhead (`OwnedPermit::in_scope`): a call to the same
    /// bulkhead made there runs inline instead of waiting for a second permit.
    #[project = AdmitProj]
    pub(crate) enum Admit<S: Service<Request>, Request> {
        Acquiring {
            #[pin]
            acquire: AcquireOwned,
            service: Option<(S, Request)>,
        },
        Calling {
            #[pin]
            response: S::Future,
            permit: Option<OwnedPermit>,
        },
        Done,
    }
}

impl<S: Service<Request>, Request> Admit<S, Request> {
    fn new(acquire: AcquireOwned, service: S, request: Request) -> Self {
        Admit::Acquiring {
            acquire,
            service: Some((service, request)),
        }
    }
}

impl<S: Service<Request>, Request> Future for Admit<S, Request> {
    type Output = Result<(S::Response, OwnedPermit), ServiceError<S::Error>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                AdmitProj::Acquiring { acquire, service } => {
                    let admitted = std::task::ready!(acquire.poll(cx));
                    let (permit, (mut service, request)) = match (admitted, service.take()) {
                        (Ok(permit), Some(pending)) => (permit, pending),
                        (Err(err), _) => {
                            self.set(Admit::Done);
                            return Poll::Ready(Err(ServiceError::Refused(err)));
                        }
                        (Ok(_), None) => panic!("bulkhead `Admit` polled after it completed"),
                    };
                    let response = permit.in_scope(|| service.call(request));
                    self.set(Admit::Calling {
                        response,
                        permit: Some(permit),
                    });
                }
                AdmitProj::Calling { response, permit } => {
                    let polled = match permit.as_ref() {
                        Some(held) => held.in_scope(|| response.poll(cx)),
                        None => panic!("bulkhead `Admit` polled after it completed"),
                    };
                    let outcome = std::task::ready!(polled);
                    let permit = permit.take();
                    self.set(Admit::Done);
                    return Poll::Ready(match (outcome, permit) {
                        (Ok(response), Some(permit)) => Ok((response, permit)),
                        (Err(err), _) => Err(ServiceError::Inner(err)),
                        (Ok(_), None) => panic!("bulkhead `Admit` polled after it completed"),
                    });
                }
                AdmitProj::Done => panic!("bulkhead `Admit` polled after it completed"),
            }
        }
    }
}

//! The tower layer and the axum integration, as a service author sees them.
//!
//! Deterministic: handlers and bodies wait on latches the test opens; nothing sleeps to
//! make a point.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bulkhead::axum::{BulkheadLayer as HttpBulkheadLayer, Refusal};
use bulkhead::config::{Duration as ConfigDuration, SemaphoreConfig};
use bulkhead::tower::{BulkheadLayer, ServiceError};
use bulkhead::{BulkheadError, BulkheadName, SemaphoreBulkhead};
use http::{Request, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use tokio::sync::{Semaphore, oneshot};
use tower::{Service, ServiceBuilder, ServiceExt};

fn bulkhead(name: &str, max_concurrent_calls: u32, max_wait: Duration) -> SemaphoreBulkhead {
    let config = SemaphoreConfig {
        max_concurrent_calls,
        max_wait: ConfigDuration::from(max_wait),
        ..SemaphoreConfig::default()
    };
    SemaphoreBulkhead::new(name, &config)
}

fn get_request(uri: &str) -> Request<Body> {
    Request::get(uri)
        .body(Body::empty())
        .expect("a valid request")
}

/// The whole body of `response`, sent to its end (which is when the permit comes back).
async fn body_bytes(response: Response) -> Bytes {
    response
        .into_body()
        .collect()
        .await
        .expect("the body is sent to its end")
        .to_bytes()
}

/// A latch handlers wait on: closed until the test opens it.
fn latch() -> std::sync::Arc<Semaphore> {
    std::sync::Arc::new(Semaphore::new(0))
}

#[tokio::test]
async fn refusal_is_an_error_value_not_a_hang() {
    let gateway = bulkhead("gateway", 1, Duration::ZERO);
    let open = latch();
    let service = ServiceBuilder::new()
        .layer(BulkheadLayer::new(gateway.clone()))
        .service_fn({
            let open = open.clone();
            move |charge: u32| {
                let open = open.clone();
                async move {
                    let _ = open.acquire().await;
                    Ok::<_, std::io::Error>(charge)
                }
            }
        });

    let mut first = service.clone();
    let in_flight = tokio::spawn(async move { first.ready().await?.call(1).await });
    while gateway.available() > 0 {
        tokio::task::yield_now().await;
    }

    // The second call is refused right away, as a value: the bulkhead is full.
    let refused = service.clone().oneshot(2).await;
    match refused {
        Err(ServiceError::Refused(BulkheadError::Full { name })) => {
            assert_eq!(name.as_str(), "gateway")
        }
        other => panic!("expected a Full refusal, got {other:?}"),
    }

    open.add_permits(1);
    assert_eq!(in_flight.await.expect("the first call ran").ok(), Some(1));
    assert_eq!(
        gateway.available(),
        1,
        "the permit came back after the response"
    );
}

#[tokio::test]
async fn a_waiting_call_is_refused_with_timeout_after_max_wait() {
    let search = bulkhead("search", 1, Duration::from_millis(20));
    // Held by another task (an async permit marks no thread as inside the bulkhead).
    let held = search.acquire_async().await.expect("a free permit");
    let service = ServiceBuilder::new()
        .layer(BulkheadLayer::new(search.clone()))
        .service_fn(|q: &'static str| async move { Ok::<_, std::io::Error>(q) });

    let refused = service.oneshot("shoes").await;
    assert!(matches!(
        refused,
        Err(ServiceError::Refused(BulkheadError::Timeout { .. }))
    ));
    drop(held);
}

#[tokio::test]
async fn routes_naming_the_same_bulkhead_share_its_permits() {
    // axum#2582: a per-route ConcurrencyLimitLayer limits nothing. Ours is one bulkhead.
    let catalog = bulkhead("catalog", 1, Duration::ZERO);
    let open = latch();
    let handler = {
        let open = open.clone();
        move || {
            let open = open.clone();
            async move {
                let _ = open.acquire().await;
                "product"
            }
        }
    };
    let app: Router = Router::new()
        .route("/product", get(handler.clone()))
        .route("/product/detail", get(handler))
        .route_layer(HttpBulkheadLayer::new(catalog.clone()));

    let first = tokio::spawn(app.clone().oneshot(get_request("/product")));
    while catalog.available() > 0 {
        tokio::task::yield_now().await;
    }

    let response = app
        .clone()
        .oneshot(get_request("/product/detail"))
        .await
        .expect("axum routes are infallible");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    // The bulkhead's name is internal: neither the headers nor the body carry it.
    assert!(response.headers().get("x-bulkhead").is_none());
    assert!(response.headers().get("x-bulkhead-refusal").is_none());
    assert_eq!(
        &body_bytes(response).await[..],
        b"service busy, retry later"
    );

    // Opted in, for internal clients: the name and the reason.
    let detailed: Router = Router::new()
        .route("/product/internal", get(|| async { "never reached" }))
        .route_layer(HttpBulkheadLayer::new(catalog.clone()).with_details());
    let response = detailed
        .oneshot(get_request("/product/internal"))
        .await
        .expect("axum routes are infallible");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["x-bulkhead"], "catalog");
    assert_eq!(response.headers()["x-bulkhead-refusal"], "full");

    open.add_permits(1);
    let first = first.await.expect("task").expect("infallible");
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(&body_bytes(first).await[..], b"product");
    assert_eq!(catalog.available(), 1);
}

/// A body that sends one chunk once `release` fires, then ends.
struct LatchedBody {
    release: Option<oneshot::Receiver<()>>,
}

impl http_body::Body for LatchedBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let Some(release) = self.release.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(release).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => {
                self.release = None;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"report")))))
            }
        }
    }
}

/// A one-permit bulkhead in front of `GET /report`, whose body streams once `latched` fires.
fn streaming_app(name: &str, latched: oneshot::Receiver<()>) -> (Router, SemaphoreBulkhead) {
    let bulkhead = bulkhead(name, 1, Duration::ZERO);
    let latched = std::sync::Arc::new(std::sync::Mutex::new(Some(latched)));
    let app = Router::new()
        .route(
            "/report",
            get(move || {
                let release = latched.lock().expect("not poisoned").take();
                async move { Response::new(Body::new(LatchedBody { release })) }
            }),
        )
        .route_layer(HttpBulkheadLayer::new(bulkhead.clone()));
    (app, bulkhead)
}

#[tokio::test]
async fn the_permit_is_held_until_the_response_body_has_been_sent() {
    let (release, latched) = oneshot::channel();
    let (app, reports) = streaming_app("reports", latched);

    // The handler has returned and the response head is here, but the body is still streaming.
    let response = app
        .clone()
        .oneshot(get_request("/report"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        reports.available(),
        0,
        "the permit is still held by the body"
    );

    let refused = app
        .clone()
        .oneshot(get_request("/report"))
        .await
        .expect("infallible");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);

    release.send(()).expect("the body is waiting");
    assert_eq!(&body_bytes(response).await[..], b"report");
    assert_eq!(
        reports.available(),
        1,
        "the permit came back with the body's end"
    );
}

#[tokio::test]
async fn dropping_an_unsent_body_returns_the_permit() {
    let (_never, latched) = oneshot::channel::<()>();
    let (app, reports) = streaming_app("exports", latched);

    let response = app
        .oneshot(get_request("/report"))
        .await
        .expect("infallible");
    assert_eq!(reports.available(), 0);
    drop(response); // the client went away mid-body
    assert_eq!(reports.available(), 1);
    // From the server's side the call was abandoned, not completed.
    let calls = reports.snapshot().calls;
    assert_eq!(
        (calls.permitted, calls.completed, calls.cancelled),
        (1, 0, 1)
    );
}

#[tokio::test]
async fn a_body_sent_to_its_end_counts_the_call_completed() {
    let (release, latched) = oneshot::channel();
    let (app, reports) = streaming_app("sent", latched);
    let response = app
        .oneshot(get_request("/report"))
        .await
        .expect("infallible");
    release.send(()).expect("the body is waiting");
    assert_eq!(&body_bytes(response).await[..], b"report");
    let calls = reports.snapshot().calls;
    assert_eq!(
        (calls.permitted, calls.completed, calls.cancelled),
        (1, 1, 0)
    );
}

#[test]
fn refusals_map_to_503_or_429_with_a_computed_retry_after() {
    let name = BulkheadName::new("payment");
    let cases = [
        (BulkheadError::Full { name: name.clone() }, 503, Some("1")),
        (
            BulkheadError::Timeout {
                name: name.clone(),
                waited: Duration::from_millis(800),
            },
            503,
            Some("1"),
        ),
        (
            BulkheadError::QueueTimeout {
                name: name.clone(),
                waited: Duration::from_millis(300),
            },
            503,
            Some("1"),
        ),
        (
            BulkheadError::RateLimited {
                name: name.clone(),
                retry_after: Duration::from_millis(2_001),
            },
            429,
            Some("3"),
        ),
        (
            BulkheadError::RateLimited {
                name: name.clone(),
                retry_after: Duration::from_millis(10),
            },
            429,
            Some("1"),
        ),
        (BulkheadError::ShutDown { name: name.clone() }, 503, None),
        (
            BulkheadError::CallTimeout {
                name: name.clone(),
                after: Duration::from_secs(2),
            },
            504,
            None,
        ),
    ];
    for (err, status, retry_after) in cases {
        let reason = err.reason();
        let response = Refusal::from(err).into_response();
        assert_eq!(response.status().as_u16(), status, "{reason}");
        assert_eq!(
            response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().expect("ascii")),
            retry_after,
            "{reason}"
        );
    }
}

/// The inner service runs inside the bulkhead: a call it makes to the same bulkhead (a
/// `#[bulkhead]` function, a client wrapped twice) runs inline on the request's permit
/// instead of being refused for want of a second one.
#[tokio::test]
async fn a_call_to_the_same_bulkhead_from_the_inner_service_runs_inline() {
    let ledger = bulkhead("ledger-reentry", 1, Duration::ZERO);
    let service = ServiceBuilder::new()
        .layer(BulkheadLayer::new(ledger.clone()))
        .service_fn({
            let ledger = ledger.clone();
            move |entry: u32| {
                // Made while the service is called, and again while its future is polled.
                let called = ledger.call(|| entry);
                let ledger = ledger.clone();
                async move {
                    tokio::task::yield_now().await;
                    let polled = ledger.call(|| entry + 1);
                    Ok::<_, BulkheadError>((called?, polled?))
                }
            }
        });
    let answered = service.oneshot(41).await;
    assert!(matches!(answered, Ok((41, 42))), "{answered:?}");
    let calls = ledger.snapshot().calls;
    assert_eq!((calls.permitted, calls.reentrant), (1, 2), "{calls:?}");
    assert_eq!(ledger.available(), 1);
}

/// An adaptive (AIMD, backoff 0.5) bulkhead starting at `initial` within 1..=`initial`,
/// whose limit halves after one window of calls with a drop.
fn adaptive_bulkhead(name: &str, initial: u32) -> SemaphoreBulkhead {
    use bulkhead_config::{AdaptiveAlgorithm, AdaptiveConfig};
    let mut adaptive =
        AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(1, initial, initial);
    adaptive.backoff_ratio = Some(0.5);
    let bulkhead = bulkhead(name, initial, Duration::ZERO);
    let policies = bulkhead_config::BulkheadConfig {
        adaptive: Some(adaptive),
        ..bulkhead_config::BulkheadConfig::semaphore(Default::default())
    };
    bulkhead.configure(&policies).expect("no partitions");
    bulkhead
}

#[tokio::test]
async fn an_inner_service_marks_an_overloaded_outcome_for_the_adaptive_limit() {
    let quotes = adaptive_bulkhead("quotes-adaptive", 8);
    let service = ServiceBuilder::new()
        .layer(BulkheadLayer::new(quotes.clone()))
        .service_fn(|status: u16| async move {
            tokio::task::yield_now().await;
            if status == 503 {
                assert!(bulkhead::mark_overloaded(), "runs in the permit's scope");
            }
            Ok::<_, BulkheadError>(status)
        });
    for _ in 0..bulkhead::adaptive::MIN_WINDOW - 1 {
        assert!(matches!(service.clone().oneshot(200).await, Ok(200)));
    }
    assert_eq!(quotes.limit(), 8);
    assert!(matches!(service.oneshot(503).await, Ok(503)));
    assert_eq!(quotes.limit(), 4);
}

#[tokio::test]
async fn a_503_response_counts_as_a_drop_for_the_adaptive_limit() {
    let carrier = adaptive_bulkhead("carrier-adaptive", 8);
    let app: Router = Router::new()
        .route("/ok", get(|| async { "quote" }))
        .route("/busy", get(|| async { StatusCode::SERVICE_UNAVAILABLE }))
        .route_layer(HttpBulkheadLayer::new(carrier.clone()));
    let mut responses = Vec::new();
    for _ in 0..bulkhead::adaptive::MIN_WINDOW - 1 {
        let response = app.clone().oneshot(get_request("/ok")).await.unwrap();
        responses.push(response.status());
        body_bytes(response).await;
    }
    assert_eq!(carrier.limit(), 8);
    let busy = app.oneshot(get_request("/busy")).await.unwrap();
    body_bytes(busy).await;
    assert!(responses.iter().all(|s| *s == StatusCode::OK));
    assert_eq!(carrier.limit(), 4);
}

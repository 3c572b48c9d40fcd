//! Partitions and per-key caps through the attribute and the tower layer, as a user of
//! the `bulkhead` crate sees them (bulkhead `shares-tests`: a limit of 4, `live` 0.5 and
//! `batch` 0.5, one call per key). Deterministic: latches, no sleeps.

use std::sync::Barrier;

use bulkhead::{BulkheadError, SemaphoreBulkhead, bulkhead};

mod support;

#[bulkhead("shares-tests", partition = "batch", key = tenant)]
fn batch_job(tenant: &str, gate: &support::Latch, started: &Barrier) -> Result<(), BulkheadError> {
    started.wait();
    gate.wait();
    Ok(())
}

#[bulkhead("shares-tests", partition = "live", key = tenant)]
fn live_call(tenant: &str) -> Result<&'static str, BulkheadError> {
    let _ = tenant;
    Ok("served")
}

#[bulkhead("shares-tests", partition = "live", key = tenant)]
async fn live_call_async(tenant: String) -> Result<usize, BulkheadError> {
    Ok(tenant.len())
}

/// A bulkhead of its own: the other tests here count every call of `shares-tests`.
#[bulkhead("shares-spawn", partition = "live", key = tenant)]
async fn spawned_call(tenant: String) -> Result<usize, BulkheadError> {
    Ok(tenant.len())
}

#[test]
fn an_async_function_entering_through_its_shares_can_be_spawned_on_a_multi_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // `spawn` takes only a `Send + 'static` future: this line compiles only if the call's is.
    let handle = runtime.spawn(spawned_call("t7".to_owned()));
    let joined = runtime.block_on(handle);
    assert_eq!(joined.unwrap(), Ok(2));
}

fn bulkhead() -> SemaphoreBulkhead {
    bulkhead::registry().semaphore("shares-tests").unwrap()
}

#[test]
fn the_attribute_counts_calls_under_their_partition_and_key() {
    let gate = support::Latch::default();
    let started = Barrier::new(3);
    std::thread::scope(|s| {
        // Two batch tenants hold batch's whole guarantee (2 of 4).
        for tenant in ["t1", "t2"] {
            let (gate, started) = (&gate, &started);
            s.spawn(move || batch_job(tenant, gate, started).unwrap());
        }
        started.wait();
        let partitions = bulkhead().snapshot().partitions;
        let batch = partitions.iter().find(|p| p.name == "batch").unwrap();
        assert_eq!((batch.guaranteed, batch.in_flight), (2, 2));
        // t1 holds its one call: refused by its key, before any permit.
        assert!(matches!(
            live_call("t1"),
            Err(BulkheadError::KeyLimit { .. })
        ));
        // Live is within its share: served.
        assert_eq!(live_call("t3"), Ok("served"));
        assert_eq!(
            futures_executor_block_on(live_call_async("t4".to_owned())),
            Ok(2)
        );
        gate.open();
    });
    let snapshot = bulkhead().snapshot();
    assert_eq!(snapshot.calls.refused.key_limit, 1);
    assert_eq!(snapshot.per_key.unwrap().keys_tracked, 0);
    assert_eq!(snapshot.available, 4);
}

#[test]
fn a_tower_layer_counts_requests_under_their_key() {
    use tower::{Service, ServiceBuilder, ServiceExt};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let layer = bulkhead::layer!("tenant-api");
        let api = layer.bulkhead().clone();
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let hold = std::sync::Arc::new(tokio::sync::Mutex::new(Some(hold)));
        let mut service = ServiceBuilder::new()
            .layer(layer.key_by(|tenant: &&'static str| *tenant))
            .service_fn(move |tenant: &'static str| {
                let hold = hold.clone();
                async move {
                    if tenant == "slow" {
                        let waiting = hold.lock().await.take();
                        if let Some(waiting) = waiting {
                            let _ = waiting.await;
                        }
                    }
                    Ok::<_, bulkhead::tower::BoxError>(tenant.len())
                }
            });
        // A call of "slow" is admitted and held (its handler waits on the latch).
        let first = service.ready().await.unwrap().call("slow");
        let mut first = Box::pin(first);
        assert!(futures_poll_once(&mut first).is_pending());
        let per_key = api.snapshot().per_key.unwrap();
        assert_eq!(per_key.keys_tracked, 1);
        let other = service.ready().await.unwrap().call("acme").await.unwrap();
        assert_eq!(other, 4);
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), 4);
        assert_eq!(api.snapshot().per_key.unwrap().keys_tracked, 0);
    });
}

#[test]
fn an_axum_route_layer_counts_requests_under_its_partition_and_their_key() {
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let hold = std::sync::Arc::new(tokio::sync::Mutex::new(Some(hold)));
        let tenant = |request: &Request<Body>| request.headers()["x-tenant"].as_bytes().to_vec();
        let layer = bulkhead::axum::BulkheadLayer::from(bulkhead::layer!(
            "shares-http",
            partition = "batch"
        ))
        .key_by(tenant);
        let api = layer.bulkhead().clone();
        let app: Router = Router::new()
            .route(
                "/export",
                get(move |headers: axum::http::HeaderMap| {
                    let hold = hold.clone();
                    async move {
                        if headers["x-tenant"] == "slow" {
                            let waiting = hold.lock().await.take();
                            if let Some(waiting) = waiting {
                                let _ = waiting.await;
                            }
                        }
                        "exported"
                    }
                }),
            )
            .route_layer(layer);
        let request = |tenant: &str| {
            Request::get("/export")
                .header("x-tenant", tenant)
                .body(Body::empty())
                .unwrap()
        };
        // A request of "slow" is admitted under `batch` and held in its handler.
        let mut first = Box::pin(app.clone().oneshot(request("slow")));
        assert!(futures_poll_once(&mut first).is_pending());
        let batch = |api: &SemaphoreBulkhead| {
            let partitions = api.snapshot().partitions;
            partitions
                .iter()
                .find(|p| p.name == "batch")
                .unwrap()
                .in_flight
        };
        assert_eq!(batch(&api), 1);
        // "slow" holds its one call: refused by its key, without reaching the handler.
        let refused = app.clone().oneshot(request("slow")).await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        // Another tenant is served.
        let other = app.clone().oneshot(request("acme")).await.unwrap();
        assert_eq!(other.status(), StatusCode::OK);
        // Its permit is held until its body is sent.
        other.into_body().collect().await.unwrap();
        release.send(()).unwrap();
        let first = first.await.unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        let body = first.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"exported");
        let snapshot = api.snapshot();
        assert_eq!(snapshot.calls.refused.key_limit, 1);
        assert_eq!(batch(&api), 0);
        assert_eq!(snapshot.per_key.unwrap().keys_tracked, 0);
    });
}

fn futures_executor_block_on<F: std::future::Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(fut)
}

fn futures_poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> std::task::Poll<F::Output> {
    std::pin::Pin::new(fut).poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

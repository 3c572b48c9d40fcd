//! A `ServiceBuilder` stack with tower's own middleware around a bulkhead: `Buffer` over
//! the bulkhead over `Timeout`, so the bulkhead's `ServiceError` wraps a `BoxError` inner
//! service and is itself turned into a `BoxError` by `Buffer`.

use std::time::Duration;

use bulkhead::BulkheadError;
use bulkhead::tower::{BoxError, ServiceError};
use tower::buffer::BufferLayer;
use tower::timeout::TimeoutLayer;
use tower::{ServiceBuilder, ServiceExt};

#[tokio::test]
async fn bulkhead_sits_between_buffer_and_timeout() {
    let stack = ServiceBuilder::new()
        .layer(BufferLayer::new(8))
        .layer(bulkhead::layer!("tower-gateway"))
        .layer(TimeoutLayer::new(Duration::from_secs(30)))
        .service_fn(|user: u64| async move { Ok::<_, BoxError>(user * 2) });
    let answer: Result<u64, BoxError> = stack.oneshot(21).await;
    assert_eq!(answer.expect("admitted"), 42);
    // `layer!` declared the bulkhead: the registry held it before the first request.
    assert!(bulkhead::registry().semaphore("tower-gateway").is_some());
}

#[test]
fn a_refusal_over_a_box_error_service_is_an_error_with_its_source() {
    let refused: ServiceError<BoxError> = ServiceError::Refused(BulkheadError::Full {
        name: "tower-gateway".into(),
    });
    let boxed: BoxError = Box::new(refused);
    let source = std::error::Error::source(&*boxed).expect("the refusal");
    assert!(source.downcast_ref::<BulkheadError>().is_some());

    let inner: ServiceError<BoxError> = ServiceError::Inner("upstream down".into());
    assert_eq!(inner.to_string(), "upstream down");
    let source = std::error::Error::source(&inner).expect("the boxed inner error");
    assert_eq!(source.to_string(), "upstream down");
}

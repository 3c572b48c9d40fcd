//! The incident example, shortened, as a test: with bulkheads the `order` endpoint keeps its
//! latency while the recommendation service is 50× slower; with one shared pool it does not.
//!
//! Both runs are real: an axum service on 127.0.0.1 and an open-loop load generator, the
//! same code as `cargo run --release --example incident` (`examples/incident/scenario.rs`),
//! on a shorter schedule (about 6 s per run, 120 `order` requests in each phase). The rates
//! keep the healthy service far from its limits (~4 busy threads out of 16) and the incident
//! overloads the shared pool by ~50%, so the comparison has a wide margin: the bulkhead
//! run's `order` p99 is expected near its healthy p99 (~90 ms; the limit, 3×, leaves room
//! for ~180 ms of scheduling hiccups on a busy 2-core machine), the shared-pool run's well
//! over a second. The work is sleeps, not CPU, so the figures hold on a loaded machine; only
//! a stall of the whole process for a large part of a second could upset them.

#[path = "../examples/incident/scenario.rs"]
#[allow(dead_code)]
mod scenario;

use std::time::Duration;

use scenario::{Endpoint, Progress, RunReport, Scenario, Setup};

fn order_figures(report: &RunReport) -> (Duration, Duration) {
    let order = report.endpoint(Endpoint::Order);
    (order.before.p99(), order.incident.p99())
}

fn describe(report: &RunReport) -> String {
    let mut lines = format!(
        "{} run ({:.1}s):",
        report.setup.label(),
        report.wall.as_secs_f64()
    );
    for figures in &report.endpoints {
        let (before, during) = (&figures.before, &figures.incident);
        lines += &format!(
            "\n  {:<15} before p50 {:>5}ms p99 {:>5}ms | incident p50 {:>5}ms p99 {:>5}ms ok {} fallback {} refused {} timed out {} failed {}",
            figures.endpoint.name(),
            before.p50().as_millis(),
            before.p99().as_millis(),
            during.p50().as_millis(),
            during.p99().as_millis(),
            during.ok,
            during.fallback,
            during.refused,
            during.timed_out,
            during.failed,
        );
    }
    lines
}

#[test]
fn bulkheads_keep_order_p99_through_the_incident_and_a_shared_pool_does_not() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let scenario = Scenario::short();
    let quiet = |_: &Progress| {};

    let shared = runtime
        .block_on(scenario::run(&scenario, Setup::SharedPool, &quiet))
        .expect("the shared-pool run");
    let isolated = runtime
        .block_on(scenario::run(&scenario, Setup::Bulkheads, &quiet))
        .expect("the bulkhead run");
    eprintln!("{}\n{}", describe(&shared), describe(&isolated));

    let (isolated_before, isolated_during) = order_figures(&isolated);
    let (shared_before, shared_during) = order_figures(&shared);
    for report in [&shared, &isolated] {
        let order = report.endpoint(Endpoint::Order);
        assert!(
            order.before.requests() > 50 && order.incident.requests() > 50,
            "too few order requests were measured to compare p99s"
        );
    }

    assert!(
        isolated_during <= isolated_before * 3,
        "with bulkheads, order p99 during the incident ({isolated_during:?}) should stay \
         within 3x its p99 before it ({isolated_before:?})"
    );
    assert!(
        shared_during > shared_before * 3,
        "with one shared pool, order p99 during the incident ({shared_during:?}) was expected \
         to exceed 3x its p99 before it ({shared_before:?})"
    );

    let product = isolated.endpoint(Endpoint::ProductDetail);
    assert!(
        product.incident.fallback > 0,
        "with bulkheads, product-detail should answer from the cache during the incident"
    );
}

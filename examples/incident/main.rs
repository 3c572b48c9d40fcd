//! The incident, reproduced and defused.
//!
//! ```sh
//! cargo run --release --example incident
//! ```
//!
//! An axum service on 127.0.0.1 with three endpoints — `order`, `product-detail` (which
//! calls a recommendation service) and `login` — takes steady, open-loop HTTP traffic from a
//! load generator in the same program. Partway through, the recommendation service becomes
//! 50× slower (in the original incident 80 ms → 4 s; here 10 ms → 500 ms). The same traffic runs twice:
//!
//! 1. **shared pool** — every handler's blocking work on one shared worker pool with an
//!    unbounded queue, as in Tomcat: `order` and `login` wait behind slow product pages;
//! 2. **bulkheads** — the bulkheads of `examples/incident.yaml`: `order` keeps its latency,
//!    `product-detail` answers from a cache, marked `"fallback": true`;
//! 3. **adaptive** — the same, except that the recommendation dependency's bulkhead has no
//!    hand-sized limit: an adaptive (Gradient2) limit, bounded only by the threads that can
//!    call it. The last line compares `order`'s p99 with the hand-sized run.
//!
//! See `scenario.rs` for the service, the load generator and how latency is measured.
//! `-- --short` runs the test's shorter schedule (about 6 s per run).
//!
//! It also draws the runs (`chart.rs`): an SVG of each endpoint's p99 per second, the
//! incident shaded, written to `incident.svg` in the target directory (beside `release/`)
//! or to `-- --svg PATH`; the last line prints where.

mod chart;
mod scenario;

use std::time::{Duration, Instant};

use scenario::{Endpoint, Phase, Progress, RunReport, Scenario, Setup};

fn main() -> Result<(), String> {
    let scenario = if std::env::args().any(|arg| arg == "--short") {
        Scenario::short()
    } else {
        Scenario::example()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start the tokio runtime: {err}"))?;

    println!(
        "incident: order, product-detail and login at {}/{}/{} requests/s over 127.0.0.1;",
        scenario.order_rate, scenario.product_detail_rate, scenario.login_rate
    );
    println!(
        "after {:?} the recommendation service slows from {:?} to {:?} for {:?}.",
        scenario.warmup + scenario.before,
        scenario.recommendations_healthy,
        scenario.recommendations_slow,
        scenario.incident
    );

    let started = Instant::now();
    let mut reports = Vec::new();
    for setup in [
        Setup::SharedPool,
        Setup::Bulkheads,
        Setup::AdaptiveRecommendations,
    ] {
        println!("\n== run: {} ==", setup.label());
        let report = runtime.block_on(scenario::run(&scenario, setup, &print_progress))?;
        println!("run took {:.1}s", report.wall.as_secs_f64());
        reports.push(report);
    }

    println!();
    print_table(&reports);
    println!("\n(all runs: {:.1}s)", started.elapsed().as_secs_f64());

    let order_p99 = |setup: Setup| {
        reports
            .iter()
            .find(|r| r.setup == setup)
            .map(|r| r.endpoint(Endpoint::Order).incident.p99())
            .unwrap_or_default()
    };
    let (hand_sized, adaptive) = (
        order_p99(Setup::Bulkheads),
        order_p99(Setup::AdaptiveRecommendations),
    );
    println!(
        "adaptive recommendations limit (no hand-sized number): order p99 during the incident \
         {}ms vs {}ms hand-sized ({:.2}x; within 1.5x: {})",
        adaptive.as_millis(),
        hand_sized.as_millis(),
        adaptive.as_secs_f64() / hand_sized.as_secs_f64().max(1e-3),
        if adaptive.as_secs_f64() <= 1.5 * hand_sized.as_secs_f64() {
            "yes"
        } else {
            "no"
        }
    );
    println!(
        "isolation: order p99 {}ms with bulkheads vs {}ms without",
        hand_sized.as_millis(),
        order_p99(Setup::SharedPool).as_millis()
    );
    let path = svg_path();
    std::fs::write(&path, chart::svg(&scenario, &reports))
        .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    println!(
        "chart of the runs (p99 per second, incident shaded): {}",
        path.display()
    );
    Ok(())
}

/// `--svg PATH`, or `incident.svg` in the target directory this example was built in
/// (`target/release/examples/incident` → `target/incident.svg`), or in the current one.
fn svg_path() -> std::path::PathBuf {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--svg")
        && let Some(path) = args.get(at + 1)
    {
        return path.into();
    }
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.to_path_buf()));
    target.unwrap_or_default().join("incident.svg")
}

fn print_progress(progress: &Progress) {
    let order = progress
        .order_p99_last_second
        .map_or_else(|| "-".to_string(), |p99| format!("{}ms", p99.as_millis()));
    let phase = match progress.phase {
        Phase::Incident => "INCIDENT: recommendations 50x slower",
        Phase::Drain => "schedule over, waiting for the last answers",
        other => other.label(),
    };
    println!(
        "[{:>11}] t={:>5.1}s  sent {:>5}  answered {:>5}  queued in server {:>4}  order p99 (last 1s) {:>7}  {}",
        progress.setup.label(),
        progress.elapsed.as_secs_f64(),
        progress.sent,
        progress.done,
        progress.server_queued,
        order,
        phase,
    );
}

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn print_table(reports: &[RunReport]) {
    println!("Requests due during the incident (and, for comparison, p99 before it):");
    println!(
        "{:<12} {:<15} {:>8} {:>8} {:>11} {:>9} {:>6} {:>9} {:>8} {:>10}",
        "run",
        "endpoint",
        "p50",
        "p99",
        "p99 before",
        "requests",
        "ok",
        "fallback",
        "refused",
        "timed out"
    );
    for report in reports {
        for endpoint in Endpoint::ALL {
            let figures = report.endpoint(endpoint);
            let during = &figures.incident;
            println!(
                "{:<12} {:<15} {:>8} {:>8} {:>11} {:>9} {:>6} {:>9} {:>8} {:>10}",
                report.setup.label(),
                endpoint.name(),
                ms(during.p50()),
                ms(during.p99()),
                ms(figures.before.p99()),
                during.requests(),
                during.ok,
                during.fallback,
                during.refused,
                during.timed_out + during.failed,
            );
        }
    }
}

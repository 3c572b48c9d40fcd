//! The incident as a picture: an SVG with one panel per run, the p99 latency of each
//! endpoint's requests due in each second, on one logarithmic scale for every panel (so
//! the runs compare at a glance), the incident window shaded. Plain SVG text: no crate.

use std::fmt::Write as _;
use std::time::Duration;

use crate::scenario::{Endpoint, RunReport, Scenario};

const WIDTH: f64 = 900.0;
const PANEL: f64 = 210.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 78.0;
const PLOT: f64 = 150.0;
/// The latency scale, in milliseconds: 10 ms to 10 s, logarithmic.
const LOW_MS: f64 = 10.0;
const HIGH_MS: f64 = 10_000.0;

fn colour(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Order => "#1971c2",
        Endpoint::ProductDetail => "#e8590c",
        Endpoint::Login => "#2f9e44",
    }
}

fn y(ms: f64) -> f64 {
    let clamped = ms.clamp(LOW_MS, HIGH_MS);
    PLOT - (clamped.log10() - LOW_MS.log10()) / (HIGH_MS.log10() - LOW_MS.log10()) * PLOT
}

/// The SVG document.
pub fn svg(scenario: &Scenario, reports: &[RunReport]) -> String {
    let seconds = scenario.schedule_length().as_secs_f64().ceil().max(1.0);
    let plot_width = WIDTH - LEFT - RIGHT;
    let x = |second: f64| LEFT + second / seconds * plot_width;
    let height = TOP + PANEL * reports.len() as f64 + 10.0;
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="system-ui, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="{LEFT}" y="20" font-size="15" font-weight="600">p99 latency per second of each endpoint's requests (by when they were due), each run</text>
<text x="{LEFT}" y="38" fill="#656d76">shaded: the recommendation service is {}x slower ({} ms → {} ms). One log scale for every run, 10 ms to 10 s;</text>
<text x="{LEFT}" y="53" fill="#656d76">a request that timed out counts at the client timeout ({} s).</text>
"##,
        scenario.recommendations_slow.as_millis()
            / scenario.recommendations_healthy.as_millis().max(1),
        scenario.recommendations_healthy.as_millis(),
        scenario.recommendations_slow.as_millis(),
        scenario.client_timeout.as_secs(),
    );
    let incident_from = (scenario.warmup + scenario.before).as_secs_f64();
    let incident_to = incident_from + scenario.incident.as_secs_f64();
    for (i, report) in reports.iter().enumerate() {
        let top = TOP + PANEL * i as f64 + 18.0;
        let order_p99 = report.endpoint(Endpoint::Order).incident.p99();
        let _ = write!(
            out,
            r##"<g transform="translate(0 {top})">
<text x="{LEFT}" y="-6" font-weight="600">{}</text><text x="{}" y="-6" text-anchor="end" fill="#656d76">order p99 during the incident: {} ms</text>
<rect x="{:.1}" y="0" width="{:.1}" height="{PLOT}" fill="#ffe3e3"/>
<rect x="{LEFT}" y="0" width="{plot_width}" height="{PLOT}" fill="none" stroke="#d0d7de"/>
"##,
            report.setup.label(),
            WIDTH - RIGHT,
            order_p99.as_millis(),
            x(incident_from),
            x(incident_to) - x(incident_from),
        );
        for (ms, label) in [
            (10.0, "10 ms"),
            (100.0, "100 ms"),
            (1000.0, "1 s"),
            (10_000.0, "10 s"),
        ] {
            let _ = writeln!(
                out,
                r##"<line x1="{LEFT}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#eaeef2"/><text x="{}" y="{:.1}" text-anchor="end" fill="#656d76">{label}</text>"##,
                WIDTH - RIGHT,
                y(ms),
                y(ms),
                LEFT - 6.0,
                y(ms) + 4.0,
            );
        }
        for second in (0..=seconds as u32).step_by(2) {
            let _ = writeln!(
                out,
                r##"<text x="{:.1}" y="{}" text-anchor="middle" fill="#656d76">{second}s</text>"##,
                x(f64::from(second)),
                PLOT + 14.0,
            );
        }
        for (endpoint, p99) in &report.timeline {
            // Each second's point at its middle; a second with no request due breaks the line.
            let mut segments: Vec<Vec<String>> = vec![Vec::new()];
            for (second, value) in p99.iter().enumerate() {
                match value {
                    Some(latency) => segments.last_mut().into_iter().for_each(|points| {
                        points.push(format!(
                            "{:.1},{:.1}",
                            x(second as f64 + 0.5),
                            y(millis(*latency))
                        ));
                    }),
                    None => segments.push(Vec::new()),
                }
            }
            for points in segments.iter().filter(|p| !p.is_empty()) {
                let _ = writeln!(
                    out,
                    r##"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"##,
                    colour(*endpoint),
                    points.join(" ")
                );
            }
        }
        out.push_str("</g>\n");
    }
    // The legend, once, under the title.
    for (i, endpoint) in Endpoint::ALL.iter().enumerate() {
        let lx = LEFT + 120.0 * i as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{lx}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-width="3"/><text x="{}" y="{}">{}</text>"##,
            lx + 18.0,
            TOP - 13.0,
            TOP - 13.0,
            colour(*endpoint),
            lx + 22.0,
            TOP - 9.0,
            endpoint.name(),
        );
    }
    out.push_str("</svg>\n");
    out
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

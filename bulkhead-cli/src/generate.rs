//! `bulkhead generate grafana` and `bulkhead generate alerts`: a Grafana dashboard and
//! Prometheus alert rules written from the one table of metric families
//! (`bulkhead_core::metric_families::FAMILIES`), the table the `/metrics` text is written
//! from — so a query names only families and labels that exist, and a family added to the
//! table gets a panel without anyone editing this file.
//!
//! # Invariants
//!
//! * Every family a panel or a rule names is looked up in the table by [`family`]; a name
//!   the table lacks is a bug caught by the generator's own test, never silently emitted.
//! * Every per-bulkhead family of the table appears in the dashboard: the curated panels
//!   first, then one panel for each family none of them shows.
//! * The alert thresholds are the config's default saturation thresholds
//!   ([`SaturationThresholds::default`]), the ones `bulkhead_saturation_level` uses when a
//!   bulkhead sets none.
//! * The output is deterministic (sorted JSON keys, fixed order), so the committed files
//!   can be compared with a fresh run.

use bulkhead_config::SaturationThresholds;
use bulkhead_core::metric_families::{FAMILIES, MetricFamily, MetricType};
use serde_json::{Value, json};

/// The table's family `name`.
///
/// # Panics
///
/// If the table has no such family: the generator names a metric that is not published.
fn family(name: &str) -> &'static MetricFamily {
    FAMILIES
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("the metric families table has no `{name}`"))
}

/// `family{bulkhead=~"$bulkhead"}`: one family's series for the dashboard's bulkheads
/// (a histogram's `_bucket` series).
fn selected(name: &str) -> String {
    let f = family(name);
    let series = match f.metric_type {
        MetricType::Histogram => format!("{}_bucket", f.name),
        _ => f.name.to_owned(),
    };
    format!("{series}{{bulkhead=~\"$bulkhead\"}}")
}

/// The PromQL that charts one family: a gauge as it is, a counter's rate per second by
/// its labels, a histogram's p99.
fn chart(f: &MetricFamily) -> String {
    let by = f.labels.join(", ");
    match f.metric_type {
        MetricType::Gauge => selected(f.name),
        MetricType::Histogram => format!(
            "histogram_quantile(0.99, sum by ({by}, le) (rate({}[$__rate_interval])))",
            selected(f.name)
        ),
        _ => format!(
            "sum by ({by}) (rate({}[$__rate_interval]))",
            selected(f.name)
        ),
    }
}

/// A curated panel: a title, its unit, and its queries with their legends.
struct Panel {
    title: &'static str,
    unit: &'static str,
    /// What it shows, beside the families' own help.
    about: &'static str,
    queries: Vec<(String, &'static str)>,
    /// The families it shows (their help becomes the panel's description).
    families: &'static [&'static str],
    thresholds: Option<(f64, f64)>,
}

fn curated() -> Vec<Panel> {
    let levels = SaturationThresholds::default();
    vec![
        Panel {
            title: "Utilisation (running / limit)",
            unit: "percentunit",
            about: "Calls running over the limit in force; warning and critical at the default saturation thresholds.",
            queries: vec![(
                format!(
                    "{} / {}",
                    selected("bulkhead_active_calls"),
                    selected("bulkhead_limit")
                ),
                "running / limit",
            )],
            families: &["bulkhead_active_calls", "bulkhead_limit"],
            thresholds: Some((levels.active_warning, levels.active_critical)),
        },
        Panel {
            title: "Queue depth",
            unit: "short",
            about: "A thread pool's queued tasks against its capacity: a standing queue is a wait every caller pays.",
            queries: vec![
                (selected("bulkhead_queue_depth"), "queued"),
                (selected("bulkhead_queue_capacity"), "capacity"),
                (selected("bulkhead_waiting_calls"), "waiting callers"),
            ],
            families: &[
                "bulkhead_queue_depth",
                "bulkhead_queue_capacity",
                "bulkhead_waiting_calls",
            ],
            thresholds: None,
        },
        Panel {
            title: "Refusals by reason",
            unit: "reqps",
            about: "Refused calls per second, by reason.",
            queries: vec![(
                format!(
                    "sum by (reason) (rate({}[$__rate_interval]))",
                    selected("bulkhead_refusals_total")
                ),
                "{{reason}}",
            )],
            families: &["bulkhead_refusals_total"],
            thresholds: None,
        },
        Panel {
            title: "Latency p99",
            unit: "s",
            about: "The 99th percentile of call duration, wait for admission and time in a pool's queue.",
            queries: [
                ("bulkhead_call_duration_seconds", "call"),
                ("bulkhead_wait_seconds", "wait"),
                ("bulkhead_queue_time_seconds", "queue"),
            ]
            .into_iter()
            .map(|(name, legend)| {
                (
                    format!(
                        "histogram_quantile(0.99, sum by (le) (rate({}[$__rate_interval])))",
                        selected(name)
                    ),
                    legend,
                )
            })
            .collect(),
            families: &[
                "bulkhead_call_duration_seconds",
                "bulkhead_wait_seconds",
                "bulkhead_queue_time_seconds",
            ],
            thresholds: None,
        },
        Panel {
            title: "Limit in force (adaptive)",
            unit: "short",
            about: "The concurrency limit in force: the adaptive limit as it moves, or the configured one.",
            queries: vec![
                (selected("bulkhead_limit"), "limit"),
                (selected("bulkhead_active_calls"), "running"),
            ],
            families: &["bulkhead_limit", "bulkhead_active_calls"],
            thresholds: None,
        },
        Panel {
            title: "Cluster rate-limit store errors",
            unit: "ops",
            about: "Decisions per second a cluster-wide rate limit's store could not make (only bulkheads with one).",
            queries: vec![(
                format!(
                    "rate({}[$__rate_interval])",
                    selected("bulkhead_rate_limit_store_errors_total")
                ),
                "store errors",
            )],
            families: &["bulkhead_rate_limit_store_errors_total"],
            thresholds: None,
        },
    ]
}

const WIDTH: u32 = 8;
const HEIGHT: u32 = 8;

fn datasource() -> Value {
    json!({ "type": "prometheus", "uid": "${datasource}" })
}

/// What one time-series panel shows.
struct Chart<'a> {
    title: &'a str,
    description: String,
    unit: &'a str,
    queries: &'a [(String, &'a str)],
    thresholds: Option<(f64, f64)>,
}

/// A Grafana time-series panel at the `index`th place of a row starting at `y`.
fn timeseries(id: u32, y: u32, index: u32, chart: Chart<'_>) -> Value {
    let Chart {
        title,
        description,
        unit,
        queries,
        thresholds,
    } = chart;
    let steps = match thresholds {
        Some((warning, critical)) => json!([
            { "color": "green", "value": null },
            { "color": "orange", "value": warning },
            { "color": "red", "value": critical },
        ]),
        None => json!([{ "color": "green", "value": null }]),
    };
    let targets: Vec<Value> = queries
        .iter()
        .zip('A'..)
        .map(|((expr, legend), ref_id)| {
            json!({
                "datasource": datasource(),
                "expr": expr,
                "legendFormat": legend,
                "range": true,
                "refId": ref_id.to_string(),
            })
        })
        .collect();
    json!({
        "id": id,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": datasource(),
        "gridPos": { "h": HEIGHT, "w": WIDTH, "x": (index % 3) * WIDTH, "y": y + (index / 3) * HEIGHT },
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "min": 0,
                "thresholds": { "mode": "absolute", "steps": steps },
                "custom": {
                    "drawStyle": "line",
                    "lineWidth": 1,
                    "fillOpacity": 10,
                    "showPoints": "never",
                    "thresholdsStyle": { "mode": if thresholds.is_some() { "line" } else { "off" } },
                },
            },
            "overrides": [],
        },
        "options": {
            "legend": { "displayMode": "list", "placement": "bottom", "showLegend": true },
            "tooltip": { "mode": "multi", "sort": "none" },
        },
        "targets": targets,
    })
}

fn help(families: &[&str]) -> String {
    families
        .iter()
        .map(|name| format!("`{name}`: {}", family(name).help))
        .collect::<Vec<_>>()
        .join("\n")
}

fn row(id: u32, y: u32, title: &str, repeat: Option<&str>) -> Value {
    let mut row = json!({
        "id": id,
        "type": "row",
        "title": title,
        "collapsed": false,
        "gridPos": { "h": 1, "w": 24, "x": 0, "y": y },
        "panels": [],
    });
    if let Some(variable) = repeat {
        row["repeat"] = json!(variable);
    }
    row
}

/// The Grafana dashboard (JSON model of Grafana 10 and 11), as pretty JSON.
pub(crate) fn grafana_dashboard() -> String {
    let mut panels = Vec::new();
    let mut id = 1;
    let mut next_id = || {
        id += 1;
        id - 1
    };
    // One row per bulkhead of the `bulkhead` variable: the curated panels, then every
    // other per-bulkhead family of the table.
    panels.push(row(next_id(), 0, "$bulkhead", Some("bulkhead")));
    let curated = curated();
    let mut index = 0;
    for panel in &curated {
        let description = format!("{}\n\n{}", panel.about, help(panel.families));
        panels.push(timeseries(
            next_id(),
            1,
            index,
            Chart {
                title: panel.title,
                description,
                unit: panel.unit,
                queries: &panel.queries,
                thresholds: panel.thresholds,
            },
        ));
        index += 1;
    }
    // `bulkhead_info` (always 1) feeds the `bulkhead` variable rather than a panel.
    let shown: Vec<&str> = curated
        .iter()
        .flat_map(|p| p.families.iter().copied())
        .chain(["bulkhead_info"])
        .collect();
    let per_bulkhead = FAMILIES
        .iter()
        .filter(|f| f.labels.first() == Some(&"bulkhead") && !shown.contains(&f.name));
    for f in per_bulkhead {
        let legend = match f.labels {
            [_, label, ..] => format!("{{{{{label}}}}}"),
            _ => f.name.to_owned(),
        };
        let unit = match f.metric_type {
            MetricType::Histogram => "s",
            MetricType::Counter => "ops",
            _ => "short",
        };
        panels.push(timeseries(
            next_id(),
            1,
            index,
            Chart {
                title: f.name,
                description: format!("{}\n\nAs published: {}.", f.help, f.metric_type.as_str()),
                unit,
                queries: &[(chart(f), legend.as_str())],
                thresholds: None,
            },
        ));
        index += 1;
    }
    // The registry's own families (no `bulkhead` label), once, below the rows.
    let y = 1 + index.div_ceil(3) * HEIGHT;
    panels.push(row(next_id(), y, "Registry", None));
    let registry = FAMILIES
        .iter()
        .filter(|f| f.labels.first() != Some(&"bulkhead"));
    for (i, f) in registry.enumerate() {
        let by = f.labels.join(", ");
        let expr = format!("sum by ({by}) (increase({}[$__range]))", f.name);
        let legend = format!("{{{{{}}}}}", f.labels.first().unwrap_or(&f.name));
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        panels.push(timeseries(
            next_id(),
            y + 1,
            i,
            Chart {
                title: f.name,
                description: f.help.to_owned(),
                unit: "short",
                queries: &[(expr, legend.as_str())],
                thresholds: None,
            },
        ));
    }
    let variable = format!("label_values({}, bulkhead)", family("bulkhead_info").name);
    let dashboard = json!({
        "title": "Bulkheads",
        "uid": "bulkhead-overview",
        "description": "Generated by `bulkhead generate grafana` from the bulkhead metric families; do not edit by hand.",
        "tags": ["bulkhead"],
        "editable": true,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": { "from": "now-1h", "to": "now" },
        "timezone": "browser",
        "annotations": { "list": [] },
        "links": [],
        "templating": { "list": [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "hide": 0,
            },
            {
                "name": "bulkhead",
                "label": "Bulkhead",
                "type": "query",
                "datasource": datasource(),
                "definition": variable,
                "query": { "query": variable, "refId": "bulkheads" },
                "refresh": 2,
                "multi": true,
                "includeAll": true,
                "current": { "text": "All", "value": "$__all" },
                "sort": 1,
                "hide": 0,
            },
        ]},
        "panels": panels,
    });
    let mut text = serde_json::to_string_pretty(&dashboard).unwrap_or_default();
    text.push('\n');
    text
}

/// One alert rule.
struct Alert {
    name: &'static str,
    expr: String,
    wait: &'static str,
    severity: &'static str,
    summary: &'static str,
    description: String,
}

fn percent(fraction: f64) -> String {
    format!("{}", (fraction * 100.0).round())
}

fn alerts() -> Vec<Alert> {
    let levels = SaturationThresholds::default();
    let utilisation = format!(
        "{} / {}",
        family("bulkhead_active_calls").name,
        family("bulkhead_limit").name
    );
    let queue = format!(
        "{} / {}",
        family("bulkhead_queue_depth").name,
        family("bulkhead_queue_capacity").name
    );
    let saturated = |name, fraction: f64, severity| Alert {
        name,
        expr: format!("{utilisation} >= {fraction}"),
        wait: "5m",
        severity,
        summary: "Bulkhead {{ $labels.bulkhead }} is running near its limit",
        description: format!(
            "{{{{ $labels.bulkhead }}}} has run at {{{{ $value | humanizePercentage }}}} of its limit \
             (at least {} %) for 5 minutes: calls beyond it wait or are refused.",
            percent(fraction)
        ),
    };
    let queued = |name, fraction: f64, severity| Alert {
        name,
        expr: format!("{queue} >= {fraction}"),
        wait: "2m",
        severity,
        summary: "Bulkhead {{ $labels.bulkhead }}'s queue is filling",
        description: format!(
            "{{{{ $labels.bulkhead }}}}'s queue has held {{{{ $value | humanizePercentage }}}} of its \
             capacity (at least {} %) for 2 minutes: every queued call waits behind it.",
            percent(fraction)
        ),
    };
    vec![
        Alert {
            name: "BulkheadQueueStanding",
            expr: format!(
                "min_over_time({}[5m]) > 0",
                family("bulkhead_queue_depth").name
            ),
            wait: "5m",
            severity: "warning",
            summary: "Bulkhead {{ $labels.bulkhead }} has a standing queue",
            description: "{{ $labels.bulkhead }}'s queue has not been empty for 10 minutes: \
                 the pool is slower than its callers and every call pays the queue's wait."
                .to_owned(),
        },
        saturated("BulkheadSaturated", levels.active_warning, "warning"),
        saturated(
            "BulkheadSaturatedCritical",
            levels.active_critical,
            "critical",
        ),
        queued("BulkheadQueueFilling", levels.queue_warning, "warning"),
        queued(
            "BulkheadQueueFillingCritical",
            levels.queue_critical,
            "critical",
        ),
        Alert {
            name: "BulkheadRefusing",
            expr: format!(
                "sum by (bulkhead, reason) (rate({}[5m])) > 0",
                family("bulkhead_refusals_total").name
            ),
            wait: "5m",
            severity: "warning",
            summary: "Bulkhead {{ $labels.bulkhead }} is refusing calls ({{ $labels.reason }})",
            description: "{{ $labels.bulkhead }} has refused {{ $value | humanize }} calls per \
                 second for 5 minutes, reason {{ $labels.reason }}."
                .to_owned(),
        },
        Alert {
            name: "BulkheadRateLimitStoreErrors",
            expr: format!(
                "rate({}[5m]) > 0",
                family("bulkhead_rate_limit_store_errors_total").name
            ),
            wait: "5m",
            severity: "warning",
            summary: "Bulkhead {{ $labels.bulkhead }}'s cluster rate limit cannot reach its store",
            description:
                "{{ $labels.bulkhead }}'s rate-limit store failed {{ $value | humanize }} \
                 decisions per second for 5 minutes; each followed on_store_error."
                    .to_owned(),
        },
    ]
}

/// A YAML string: JSON's double-quoted form, which YAML reads as the same string.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// The Prometheus alert rules (a rule file for `rule_files`), as YAML.
pub(crate) fn alert_rules() -> String {
    let mut out = String::from(
        "# Generated by `bulkhead generate alerts` from the bulkhead metric families; do not\n\
         # edit by hand. The thresholds are the config's default saturation thresholds; a\n\
         # bulkhead's own ones are in bulkhead_saturation_level (0 ok, 1 warning, 2 critical).\n\
         groups:\n  - name: bulkhead\n    rules:\n",
    );
    for alert in alerts() {
        out.push_str(&format!(
            "      - alert: {}\n        expr: {}\n        for: {}\n        labels:\n          severity: {}\n        annotations:\n          summary: {}\n          description: {}\n",
            alert.name,
            quoted(&alert.expr),
            alert.wait,
            alert.severity,
            quoted(alert.summary),
            quoted(&alert.description),
        ));
    }
    out
}

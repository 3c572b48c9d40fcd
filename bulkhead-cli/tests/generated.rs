//! The committed Grafana dashboard and Prometheus alert rules (`deploy/`) are what
//! `bulkhead generate` writes today, and every query in them names a metric family of the
//! table the `/metrics` text is written from, with labels that family has.
//!
//! With `promtool` on the PATH (Debian package `prometheus`) the rules and every panel's
//! query are also checked by it; `BULKHEAD_REQUIRE_PROMTOOL=1` (as in CI) makes a missing
//! `promtool` a failure.

use std::path::PathBuf;
use std::process::Command;

use bulkhead_core::metric_families::{FAMILIES, MetricType};
use serde_json::Value;

fn generate(what: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["generate", what])
        .output()
        .unwrap();
    assert!(out.status.success(), "bulkhead generate {what} failed");
    String::from_utf8(out.stdout).unwrap()
}

fn committed(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn assert_current(what: &str, path: &str) -> String {
    let fresh = generate(what);
    assert!(
        fresh == committed(path),
        "{path} is not what `bulkhead generate {what}` writes now: regenerate it with\n  \
         cargo run -p bulkheads-cli -- generate {what} > {path}"
    );
    fresh
}

/// Every panel query (and the variable's query) of the dashboard.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut queries: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .map(|target| target["expr"].as_str().unwrap().to_owned())
        .collect();
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            queries.push(query.to_owned());
        }
    }
    queries
}

/// Every alert's expression of the rule file.
fn rule_expressions(rules: &str) -> Vec<(String, String)> {
    let rules = bulkhead_config::yaml_to_json("bulkhead-alerts.yaml", rules).unwrap();
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_array().unwrap().clone())
        .map(|rule| {
            (
                rule["alert"].as_str().unwrap().to_owned(),
                rule["expr"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The identifiers of a PromQL expression, with what follows each (to tell a label in a
/// selector or a `by (…)` list from a metric or a function).
fn identifiers(expr: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'"' {
            // A string: skip it (a label value, a regex).
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == b'[' {
            // A range: `[5m]`, `[$__rate_interval]`.
            while i < bytes.len() && bytes[i] != b']' {
                i += 1;
            }
        } else if c == b'$' {
            // A Grafana variable.
            i += 1;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push((start, &expr[start..i]));
        } else {
            i += 1;
        }
    }
    out
}

/// Checks that `expr` names only families of the table and only labels they have.
fn check(expr: &str) -> Result<(), String> {
    let mut families = Vec::new();
    let mut labels = Vec::new();
    let mut bucket = false;
    // Whether we are inside `{…}` or a `by (…)` / `without (…)` list.
    let mut depth_braces = 0;
    let mut grouping = false;
    let mut last = 0;
    for (at, word) in identifiers(expr) {
        for c in expr[last..at].chars() {
            match c {
                '{' => depth_braces += 1,
                '}' => depth_braces -= 1,
                ')' => grouping = false,
                _ => {}
            }
        }
        last = at;
        if depth_braces > 0 || grouping {
            labels.push(word.to_owned());
        } else if word == "by" || word == "without" {
            grouping = true;
        } else if word.starts_with("bulkhead_") {
            let found = FAMILIES.iter().find(|f| f.name == word).or_else(|| {
                ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
                    let base = word.strip_suffix(suffix)?;
                    let f = FAMILIES.iter().find(|f| f.name == base)?;
                    (f.metric_type == MetricType::Histogram).then(|| {
                        bucket |= *suffix == "_bucket";
                        f
                    })
                })
            });
            families.push(found.ok_or_else(|| format!("`{word}` is no metric family"))?);
        }
    }
    if families.is_empty() {
        return Err(format!("`{expr}` names no metric family"));
    }
    for label in labels {
        let known = families.iter().any(|f| f.labels.contains(&label.as_str()))
            || (bucket && label == "le");
        if !known {
            return Err(format!(
                "label `{label}` is on none of the families of `{expr}`"
            ));
        }
    }
    Ok(())
}

#[test]
fn the_checker_catches_an_unknown_family_or_label() {
    assert!(check("rate(bulkhead_refusals_total[5m])").is_ok());
    assert!(check("sum by (reason) (rate(bulkhead_refusals_total{bulkhead=~\"$b\"}[5m]))").is_ok());
    assert!(check("rate(bulkhead_refused_total[5m])").is_err());
    assert!(check("sum by (partition) (rate(bulkhead_refusals_total[5m]))").is_err());
    assert!(check("sum by (le) (rate(bulkhead_limit_bucket[5m]))").is_err());
    assert!(check("sum by (le) (rate(bulkhead_wait_seconds_bucket[5m]))").is_ok());
}

#[test]
fn the_committed_dashboard_is_current_and_queries_only_published_families() {
    let text = assert_current("grafana", "deploy/grafana/bulkhead.json");
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    assert!(
        dashboard["schemaVersion"].as_u64().unwrap() >= 36,
        "a Grafana 10/11 model"
    );
    let queries = dashboard_queries(&dashboard);
    for query in &queries {
        check(query).unwrap();
    }
    // The `bulkhead` variable, and a row repeated for each of its values.
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(variables.iter().any(|v| v["name"] == "bulkhead"));
    assert!(
        dashboard["panels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["type"] == "row" && p["repeat"] == "bulkhead")
    );
    // Every family of the table is charted (a family added to it gets a panel).
    for family in FAMILIES.iter().filter(|f| f.name != "bulkhead_info") {
        assert!(
            queries.iter().any(|q| q.contains(family.name)),
            "no panel shows {}",
            family.name
        );
    }
    for title in [
        "Utilisation",
        "Queue depth",
        "Refusals by reason",
        "Latency p99",
        "Limit in force",
        "Cluster rate-limit store errors",
    ] {
        assert!(
            text.contains(&format!("\"title\": \"{title}")),
            "no panel {title}"
        );
    }
    promtool_accepts(
        "dashboard",
        &queries
            .iter()
            .enumerate()
            .map(|(i, q)| (format!("panel_query_{i}"), grafana_to_promql(q)))
            .collect::<Vec<_>>(),
        true,
    );
}

#[test]
fn the_committed_alert_rules_are_current_and_query_only_published_families() {
    let text = assert_current("alerts", "deploy/prometheus/bulkhead-alerts.yaml");
    let rules = rule_expressions(&text);
    let names: Vec<&str> = rules.iter().map(|(name, _)| name.as_str()).collect();
    for expected in [
        "BulkheadQueueStanding",
        "BulkheadSaturated",
        "BulkheadSaturatedCritical",
        "BulkheadQueueFilling",
        "BulkheadQueueFillingCritical",
        "BulkheadRefusing",
    ] {
        assert!(names.contains(&expected), "no alert {expected}");
    }
    for (name, expr) in &rules {
        check(expr).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(text.contains("bulkhead_active_calls / bulkhead_limit >= 0.8\""));
    assert!(text.contains("bulkhead_active_calls / bulkhead_limit >= 0.95\""));
    assert!(text.contains("bulkhead_queue_depth / bulkhead_queue_capacity >= 0.7\""));
    assert!(text.contains("bulkhead_queue_depth / bulkhead_queue_capacity >= 0.9\""));
    promtool_accepts("alerts", &[], false);
}

/// A panel query as plain PromQL: Grafana's variables replaced by values.
fn grafana_to_promql(query: &str) -> String {
    if let Some(metric) = query
        .strip_prefix("label_values(")
        .and_then(|rest| rest.split(',').next())
    {
        return metric.to_owned();
    }
    query
        .replace("$__rate_interval", "5m")
        .replace("$__range", "1h")
        .replace("$bulkhead", ".*")
}

/// `promtool check rules` on the committed rules (`expressions` empty) or on recording
/// rules made of `expressions`.
fn promtool_accepts(what: &str, expressions: &[(String, String)], recording: bool) {
    let found = Command::new("promtool").arg("--version").output().is_ok();
    if !found {
        assert!(
            std::env::var_os("BULKHEAD_REQUIRE_PROMTOOL").is_none(),
            "promtool is missing and BULKHEAD_REQUIRE_PROMTOOL is set (Debian: apt-get install prometheus)"
        );
        eprintln!(
            "not checked with promtool ({what}): it is not on the PATH (Debian: apt-get install prometheus)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = if recording {
        let mut text = String::from("groups:\n  - name: panels\n    rules:\n");
        for (name, expr) in expressions {
            text.push_str(&format!(
                "      - record: bulkhead:{name}\n        expr: {}\n",
                serde_json::to_string(expr).unwrap()
            ));
        }
        let file = dir.path().join("panels.yaml");
        std::fs::write(&file, text).unwrap();
        file
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/bulkhead-alerts.yaml")
    };
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool rejects the {what}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

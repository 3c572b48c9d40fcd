//! The `bulkhead` binary as CI/CD runs it: exit statuses, output formats, and commands.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn corpus(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/config")
        .join(file)
        .to_string_lossy()
        .into_owned()
}

fn bulkhead(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(args)
        .env_remove("BULKHEAD_PAYMENT__MAX_THREADS")
        .output()
        .expect("run bulkhead")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn check_exits_0_for_valid_files_and_1_for_problems() {
    let ok = bulkhead(&[
        "check",
        &corpus("valid/design-example.yaml"),
        &corpus("valid/every-key.yaml"),
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    assert!(stdout(&ok).contains("ok: 2 file(s)"));

    let bad = bulkhead(&["check", &corpus("invalid/max-threads-below-core.yaml")]);
    assert_eq!(bad.status.code(), Some(1));
}

#[test]
fn check_prints_the_headline_and_the_source_line_underlined() {
    let file = corpus("invalid/unknown-key-camel-case.yaml");
    let out = stdout(&bulkhead(&["check", &file]));
    assert!(out.starts_with(&format!(
        "{file}:7:5: error: bulkheads.payment.maxConcurrentCall: unknown key `maxConcurrentCall`: did you mean `max_concurrent_calls`?\n"
    )), "{out}");
    assert!(
        out.contains("7 |     maxConcurrentCall: 10\n  |     ^^^^^^^^^^^^^^^^^\n"),
        "{out}"
    );
}

#[test]
fn warnings_pass_unless_denied() {
    let file = corpus("valid/lint-caller-runs.yaml");
    let allowed = bulkhead(&["check", &file]);
    assert_eq!(allowed.status.code(), Some(0));
    assert!(stdout(&allowed).contains("warning: bulkheads.images.on_full"));
    let denied = bulkhead(&["check", "--deny-warnings", &file]);
    assert_eq!(denied.status.code(), Some(1));
}

#[test]
fn usage_and_io_errors_exit_2() {
    assert_eq!(bulkhead(&["check"]).status.code(), Some(2));
    assert_eq!(bulkhead(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        bulkhead(&["check", "/nonexistent/bulkheads.yaml"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        bulkhead(&["suggest", "--qps", "10", "--latency", "80"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn json_output_lists_every_diagnostic_for_pipelines() {
    let out = bulkhead(&[
        "check",
        "--format",
        "json",
        &corpus("invalid/zero-permits.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["errors"], 3);
    let first = &report["diagnostics"][0];
    assert_eq!(first["severity"], "error");
    assert_eq!(first["key_path"], "bulkheads.payment.max_concurrent_calls");
    assert_eq!(
        (first["line"].as_u64(), first["column"].as_u64()),
        (Some(4), Some(53))
    );
}

/// `bulkhead check [flags] --against declared.yaml deploy.yaml` on a corpus case.
fn check_against(case: &str, flags: &[&str]) -> Output {
    let file = |f: &str| corpus(&format!("against/{case}/{f}"));
    let (declared, deploy) = (file("declared.yaml"), file("deploy.yaml"));
    let mut args = vec!["check"];
    args.extend_from_slice(flags);
    args.extend(["--against", declared.as_str(), deploy.as_str()]);
    bulkhead(&args)
}

#[test]
fn check_against_refuses_a_kind_change_and_accepts_a_resize() {
    let resize = check_against("resize-ok", &[]);
    assert_eq!(resize.status.code(), Some(0), "{}", stdout(&resize));
    let kind = check_against("kind-change", &[]);
    assert_eq!(kind.status.code(), Some(1));
    assert!(stdout(&kind).contains("may change sizes, not kinds"));
    let undeclared = check_against("undeclared-name", &["--deny-warnings"]);
    assert_eq!(undeclared.status.code(), Some(1));
    assert!(stdout(&undeclared).contains("did you mean `payment`?"));
}

#[test]
fn schema_prints_the_checked_in_schema() {
    let out = bulkhead(&["schema"]);
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bulkheads.schema.json");
    assert_eq!(stdout(&out), std::fs::read_to_string(root).unwrap());
}

#[test]
fn explain_prints_each_pool_with_its_worst_case_queue_wait() {
    let out = stdout(&bulkhead(&[
        "explain",
        &corpus("valid/seed-002-classes.yaml"),
    ]));
    let order = out
        .lines()
        .find(|l| l.starts_with("order "))
        .expect("a row for order");
    // 500 queued × 120ms / 80 threads
    assert!(
        order.contains("40..80 threads") && order.ends_with("750ms"),
        "{order}"
    );
}

#[test]
fn explain_applies_the_environment() {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["explain", &corpus("valid/seed-002-classes.yaml")])
        .env("BULKHEAD_ORDER__MAX_THREADS", "100")
        .output()
        .unwrap();
    let text = stdout(&out);
    let order = text.lines().find(|l| l.starts_with("order ")).unwrap();
    assert!(
        order.contains("40..100 threads") && order.ends_with("600ms"),
        "{order}"
    );
}

#[test]
fn suggest_prints_an_entry_that_checks_clean_and_fits_the_timeout() {
    let out = bulkhead(&[
        "suggest",
        "--qps",
        "200",
        "--latency",
        "80ms",
        "--timeout",
        "500ms",
        "--name",
        "product-detail",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let yaml = stdout(&out);
    let parsed = bulkhead_config::parse_file("suggested.yaml", &yaml).unwrap();
    assert!(parsed.warnings.is_empty(), "{}", parsed.warnings);
    let bulkhead_config::Limits::ThreadPool(pool) =
        &parsed.config.bulkheads["product-detail"].limits
    else {
        panic!("a thread pool")
    };
    // seed 002: 200 QPS × 80ms × 1.5 = 24 core threads, 48 max; 2s of burst = 400, capped to 300.
    assert_eq!(
        (pool.core_threads, pool.max_threads, pool.queue_capacity),
        (24, 48, 300)
    );
    let wait =
        bulkhead_config::worst_case_queue_wait(pool, bulkhead_config::Duration::from_millis(80))
            .unwrap();
    assert!(wait <= bulkhead_config::Duration::from_millis(500));
}

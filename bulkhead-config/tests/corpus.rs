//! The config corpus in `tests/config/` (at the repository root) pins the exact message
//! every file gets.
//!
//! - `valid/NAME.yaml` parses; `valid/NAME.expected` holds its warnings (often none);
//! - `invalid/NAME.yaml` fails; `invalid/NAME.expected` holds every error, one per line;
//! - `against/NAME/` layers `deploy.yaml` (and the variables in `env`, if any) over
//!   `declared.yaml` as the runtime does; `expected` holds the result.
//!
//! After a deliberate change of wording, `BLESS=1 cargo test -p bulkheads-config --test corpus`
//! rewrites the `.expected` files; review the diff like code.

use std::fs;
use std::path::{Path, PathBuf};

use bulkhead_config::{Diagnostics, Layers, parse_file};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/config")
}

fn cases(dir: &str) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = fs::read_dir(corpus().join(dir))
        .unwrap_or_else(|e| panic!("cannot list tests/config/{dir}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            (
                format!("{dir}/{}", p.file_name().unwrap().to_string_lossy()),
                p,
            )
        })
        .collect();
    out.sort();
    out
}

/// Compares `actual` with the checked-in file, or rewrites it under `BLESS=1`.
fn compare(expected_path: &Path, actual: &str, failures: &mut Vec<String>) {
    if std::env::var_os("BLESS").is_some() {
        fs::write(expected_path, actual).expect("write .expected");
        return;
    }
    let expected = fs::read_to_string(expected_path).unwrap_or_default();
    if expected != actual {
        failures.push(format!(
            "{}:\n--- expected\n{expected}--- actual\n{actual}",
            expected_path.display()
        ));
    }
}

fn lines(diagnostics: &Diagnostics) -> String {
    if diagnostics.is_empty() {
        String::new()
    } else {
        format!("{diagnostics}\n")
    }
}

fn finish(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_valid_file_parses_with_exactly_its_expected_warnings() {
    let mut failures = Vec::new();
    let cases = cases("valid");
    assert!(
        cases.len() >= 10,
        "the valid corpus shrank to {}",
        cases.len()
    );
    for (name, path) in cases {
        let source = fs::read_to_string(&path).unwrap();
        match parse_file(&name, &source) {
            Ok(parsed) => compare(
                &path.with_extension("expected"),
                &lines(&parsed.warnings),
                &mut failures,
            ),
            Err(errors) => failures.push(format!("{name} should be valid but got:\n{errors}")),
        }
    }
    finish(failures);
}

#[test]
fn every_invalid_file_fails_with_exactly_its_expected_errors() {
    let mut failures = Vec::new();
    let cases = cases("invalid");
    assert!(
        cases.len() >= 25,
        "the invalid corpus shrank to {}",
        cases.len()
    );
    for (name, path) in cases {
        let source = fs::read_to_string(&path).unwrap();
        match parse_file(&name, &source) {
            Ok(_) => failures.push(format!("{name} should be invalid but parsed")),
            Err(errors) => {
                assert!(
                    errors.iter().all(|d| d.is_error()),
                    "{name}: a failure holds only errors"
                );
                compare(
                    &path.with_extension("expected"),
                    &lines(&errors),
                    &mut failures,
                )
            }
        }
    }
    finish(failures);
}

#[test]
fn every_deploy_is_layered_on_its_declared_config_as_expected() {
    let mut failures = Vec::new();
    let mut dirs: Vec<PathBuf> = fs::read_dir(corpus().join("against"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 5,
        "the against corpus shrank to {}",
        dirs.len()
    );
    for dir in dirs {
        let case = dir.file_name().unwrap().to_string_lossy().to_string();
        let read = |f: &str| fs::read_to_string(dir.join(f)).unwrap_or_default();
        let env: Vec<(String, String)> = read("env")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let declared = format!("against/{case}/declared.yaml");
        let deploy = format!("against/{case}/deploy.yaml");
        let result = Layers::new(&declared, &read("declared.yaml"))
            .yaml(&deploy, &read("deploy.yaml"))
            .map(|layers| layers.env_vars(env))
            .and_then(|layers| layers.resolve());
        let actual = match result {
            Ok(parsed) => format!(
                "ok\n{}resolved: {}\n",
                lines(&parsed.warnings),
                serde_json::to_string_pretty(&parsed.config).unwrap()
            ),
            Err(errors) => format!("refused\n{}", lines(&errors)),
        };
        compare(&dir.join("expected"), &actual, &mut failures);
    }
    finish(failures);
}

/// Each rule, the corpus case that shows it, and words its message must contain.
const RULES: &[(&str, &str, &str)] = &[
    (
        "unknown key, did-you-mean",
        "invalid/unknown-key-camel-case",
        "did you mean `max_concurrent_calls`?",
    ),
    (
        "unknown section",
        "invalid/unknown-section",
        "did you mean `bulkheads`?",
    ),
    (
        "unknown nested key",
        "invalid/unknown-nested-key",
        "did you mean `timeout`?",
    ),
    (
        "unknown kind",
        "invalid/unknown-kind",
        "did you mean `thread-pool`?",
    ),
    (
        "unknown template",
        "invalid/unknown-template",
        "unknown template `crtical`: did you mean `critical`?",
    ),
    (
        "template cycle",
        "invalid/template-cycle",
        "cycle (a → b → c → a)",
    ),
    (
        "template extending itself",
        "invalid/template-cycle",
        "cycle (self → self)",
    ),
    (
        "max_threads < core_threads",
        "invalid/max-threads-below-core",
        "must be at least `core_threads`",
    ),
    (
        "zero permits",
        "invalid/zero-permits",
        "is 0: no call could ever run",
    ),
    (
        "zero threads",
        "invalid/zero-permits",
        "is 0: no task could ever run",
    ),
    (
        "zero rate limit",
        "invalid/zero-permits",
        "no call would ever be admitted",
    ),
    (
        "duration without unit",
        "invalid/duration-without-unit",
        "`500` has no unit: write `500ms`",
    ),
    (
        "negative duration",
        "invalid/duration-negative-or-unknown-unit",
        "is negative",
    ),
    (
        "unknown duration unit",
        "invalid/duration-negative-or-unknown-unit",
        "unknown unit",
    ),
    (
        "absurd sizes",
        "invalid/absurd-sizes",
        "100000 threads is absurd",
    ),
    (
        "duplicate keys",
        "invalid/duplicate-keys",
        "duplicate key `max_threads`",
    ),
    (
        "duplicate names",
        "invalid/duplicate-keys",
        "duplicate key `payment`",
    ),
    (
        "key of the other kind",
        "invalid/key-of-other-kind",
        "`queue_capacity` is a thread-pool setting",
    ),
    (
        "key of the other kind via template",
        "invalid/key-of-other-kind-via-template",
        "`fair` is a semaphore setting",
    ),
    ("empty name", "invalid/empty-name", "the name is empty"),
    ("bad name", "invalid/bad-name", "is not a valid name"),
    ("missing kind", "invalid/missing-kind", "has no `kind`"),
    (
        "wrong value type",
        "invalid/wrong-types",
        "expected a whole number",
    ),
    (
        "document not a mapping",
        "invalid/not-a-mapping",
        "a bulkheads config is a mapping",
    ),
    (
        "saturation out of range",
        "invalid/saturation-thresholds",
        "at most 1",
    ),
    ("YAML syntax", "invalid/yaml-syntax-error", "not valid YAML"),
    ("alias bomb", "invalid/alias-bomb", "more than 100000 nodes"),
    (
        "deep nesting",
        "invalid/deep-nesting",
        "nested more than 32 levels",
    ),
    (
        "all problems at once",
        "invalid/many-problems-at-once",
        "maxWait",
    ),
    (
        "lint: queue wait over client timeout",
        "valid/lint-queue-wait-over-timeout",
        "worst-case queue wait is 2500ms",
    ),
    ("lint: caller-runs", "valid/lint-caller-runs", "deadlocks"),
    (
        "lint: total threads",
        "valid/lint-total-threads",
        "1200 threads in all",
    ),
    (
        "lint: sub-millisecond refresh period",
        "valid/lint-rate-limit-nanoseconds",
        "500 nanoseconds",
    ),
    (
        "lint: waits over client timeout",
        "valid/lint-waits-over-timeout",
        "longer than the client timeout",
    ),
    (
        "lint: max_queue_wait without a queue",
        "valid/lint-queue-settings",
        "has no effect",
    ),
    (
        "lint: long queue with no bound on wait",
        "valid/lint-queue-settings",
        "a queue of 50000",
    ),
    (
        "deploy changes a kind",
        "against/kind-change/expected",
        "may change sizes, not kinds",
    ),
    (
        "deploy names an undeclared bulkhead",
        "against/undeclared-name/expected",
        "`paymnet` is not declared by any",
    ),
    (
        "env var names the source",
        "against/env-bad-value/expected",
        "environment variable BULKHEAD_PRODUCT_DETAIL__MAX_QUEUE_WAIT",
    ),
    (
        "a deploy is advised what it can set, not to change the kind",
        "against/env-other-kind-key/expected",
        "BULKHEAD_PAYMENTS__MAX_THREADS: error: bulkheads.payments.max_threads: `max_threads` is a thread-pool setting, but `payments` is a semaphore: a deploy may change sizes, not kinds: remove it; a semaphore is sized with",
    ),
    (
        "a duration too large to hold",
        "invalid/duration-overflow",
        "is too large: a duration is at most",
    ),
    (
        "a duration too large to hold, from the environment",
        "against/env-duration-overflow/expected",
        "environment variable BULKHEAD_PAYMENTS__ON_FULL__WAIT: error: bulkheads.payments.on_full.wait: `340282366920938463463374607431768211455.5ns` is too large",
    ),
    (
        "`.inf` / `.nan` for a whole number",
        "invalid/not-a-number",
        "max_concurrent_calls: `.inf` is not valid here",
    ),
    (
        "a wrong nested value is reported at the value",
        "invalid/not-a-number",
        "14:37: error: bulkheads.search.rate_limit.limit_for_period: `.inf`",
    ),
    (
        "type errors state the rules' range",
        "invalid/not-a-number",
        "\"ten\" is not valid here: expected a whole number from 1 to 1000000",
    ),
];

#[test]
fn every_rule_has_a_corpus_case_whose_message_shows_it() {
    let mut missing = Vec::new();
    for (rule, case, words) in RULES {
        let path = if case.ends_with("/expected") {
            corpus().join(case)
        } else {
            corpus().join(format!("{case}.expected"))
        };
        let text = fs::read_to_string(&path).unwrap_or_default();
        if !text.contains(words) {
            missing.push(format!(
                "{rule}: {} does not contain {words:?}",
                path.display()
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn every_corpus_file_starts_with_the_schema_line_for_editors() {
    for dir in ["valid", "invalid"] {
        for (name, path) in cases(dir) {
            let source = fs::read_to_string(path).unwrap();
            assert!(
                source.starts_with(
                    "# yaml-language-server: $schema=../../../bulkheads.schema.json\n"
                ),
                "{name} does not start with the yaml-language-server line"
            );
        }
    }
}

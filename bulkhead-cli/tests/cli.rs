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

/// A rule between two keys broken by a deploy's value: the error points at that value in
/// the deploy file, not at the declaration it is layered over.
#[test]
fn check_against_places_a_rule_between_two_keys_at_the_deploys_value() {
    let raised = check_against("deploy-raises-core-threads", &[]);
    assert_eq!(raised.status.code(), Some(1), "{}", stdout(&raised));
    let out = stdout(&raised);
    assert!(
        out.contains(
            "deploy.yaml:4:27: error: bulkheads.report.max_threads: is 4 but `core_threads` is 8"
        ),
        "{out}"
    );
    assert!(
        out.contains("deploy.yaml:5:43: error: bulkheads.alerts.saturation.active_warning"),
        "{out}"
    );
    assert!(!out.contains("declared.yaml:"), "{out}");
}

#[test]
fn check_against_refuses_a_deploy_that_renames_a_partition() {
    let renamed = check_against("partition-renamed", &[]);
    assert_eq!(renamed.status.code(), Some(1), "{}", stdout(&renamed));
    let out = stdout(&renamed);
    assert!(
        out.contains(
            "deploy.yaml:5:25: error: bulkheads.search.partitions: the partitions are named \
             [\"batch\", \"live\"] and the new config names [\"batch\", \"bulk\", \"live\"]"
        ),
        "{out}"
    );
    // New shares under the declared names pass.
    assert!(!out.contains("bulkheads.reports"), "{out}");
}

#[test]
fn schema_prints_the_checked_in_schema() {
    let out = bulkhead(&["schema"]);
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bulkheads.schema.json");
    assert_eq!(stdout(&out), std::fs::read_to_string(root).unwrap());
}

#[test]
fn explain_prints_each_pool_with_its_worst_case_queue_wait() {
    let out = stdout(&bulkhead(&["explain", &corpus("valid/three-classes.yaml")]));
    let order = out
        .lines()
        .find(|l| l.starts_with("order "))
        .expect("a row for order");
    // 500 queued × 120ms / 80 threads, then no rate limit
    assert!(
        order.contains("40..80 threads") && order.split_whitespace().rev().nth(1) == Some("750ms"),
        "{order}"
    );
}

#[test]
fn check_accepts_a_pool_with_partitions_and_refuses_bad_shares_on_one() {
    let ok = bulkhead(&["check", &corpus("valid/pool-shares.yaml")]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    let bad = bulkhead(&["check", &corpus("invalid/pool-shares.yaml")]);
    assert_eq!(bad.status.code(), Some(1));
    let out = stdout(&bad);
    assert!(
        out.contains("bulkheads.reports.partitions: the shares add up to 1.2"),
        "{out}"
    );
    assert!(
        out.contains("bulkheads.exports.partitions: `live` has share 1.5"),
        "{out}"
    );
    assert!(
        out.contains("bulkheads.exports.per_key.max_concurrent_calls: is 0"),
        "{out}"
    );
}

#[test]
fn explain_shows_a_pools_partitions_as_slots_of_what_it_admits() {
    let out = stdout(&bulkhead(&["explain", &corpus("valid/pool-shares.yaml")]));
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("a row for {name}:\n{out}"))
            .to_owned()
    };
    // 2 threads + 8 queued = 10 slots: 0.2 of them is 2.
    assert!(row("reports").contains("batch 2, live 8 of 10"), "{out}");
    assert!(row("exports").contains("2 per key (100 keys)"), "{out}");
}

#[test]
fn explain_shows_each_adaptive_limit_with_its_bounds() {
    let out = stdout(&bulkhead(&["explain", &corpus("valid/adaptive.yaml")]));
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("a row for {name}:\n{out}"))
            .to_owned()
    };
    assert!(
        row("recommendation").contains("gradient2 1..200 (starts at 20)"),
        "{out}"
    );
    assert!(
        row("search").contains("vegas 2..80 (starts at 10)"),
        "{out}"
    );
    assert!(row("images").contains("aimd 1..32 (starts at 20)"), "{out}");
}

#[test]
fn explain_applies_the_environment() {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["explain", &corpus("valid/three-classes.yaml")])
        .env("BULKHEAD_ORDER__MAX_THREADS", "100")
        .output()
        .unwrap();
    let text = stdout(&out);
    let order = text.lines().find(|l| l.starts_with("order ")).unwrap();
    assert!(
        order.contains("40..100 threads") && order.split_whitespace().rev().nth(1) == Some("600ms"),
        "{order}"
    );
}

#[test]
fn explain_shows_a_cluster_rate_limit_its_store_and_its_fallback_share() {
    let dir = std::env::temp_dir().join(format!("bulkhead-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bulkheads.yaml");
    std::fs::write(
        &file,
        "bulkheads:\n  partner:\n    kind: semaphore\n    rate_limit:\n      \
         limit_for_period: 100\n      refresh_period: 1s\n      scope: cluster\n      \
         store: { redis: \"${REDIS_URL}\", replicas: 4 }\n",
    )
    .unwrap();
    let explain = |env: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
            .args(["explain", file.to_str().unwrap()])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = stdout(&out);
        text.lines()
            .find(|l| l.starts_with("partner "))
            .unwrap()
            .to_owned()
    };
    let row = explain(&[]);
    assert!(
        row.ends_with(
            "100/1s cluster (redis from $REDIS_URL; Redis down: local 25/1s per process)"
        ),
        "{row}"
    );
    // Deploy layering reaches the store's settings too.
    let row = explain(&[(
        "BULKHEAD_PARTNER__RATE_LIMIT__STORE__ON_STORE_ERROR",
        "refuse",
    )]);
    assert!(row.ends_with("Redis down: refuse)"), "{row}");
    let row = explain(&[("BULKHEAD_PARTNER__RATE_LIMIT__STORE__START_ANYWAY", "true")]);
    assert!(
        row.ends_with("per process; starts without a usable store)"),
        "{row}"
    );
    let row = explain(&[("BULKHEAD_PARTNER__RATE_LIMIT__SCOPE", "process")]);
    assert!(row.ends_with("100/1s per process"), "{row}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn explain_shows_a_cluster_limit_its_lease_and_its_fallback_share() {
    let dir = std::env::temp_dir().join(format!("bulkhead-explain-leases-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bulkheads.yaml");
    std::fs::write(
        &file,
        "bulkheads:\n  partner:\n    kind: semaphore\n    max_concurrent_calls: 50\n    \
         cluster: { store: { redis: \"${REDIS_URL}\", replicas: 3 } }\n",
    )
    .unwrap();
    let explain = |env: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
            .args(["explain", file.to_str().unwrap()])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = stdout(&out);
        text.lines()
            .find(|l| l.starts_with("partner "))
            .unwrap()
            .to_owned()
    };
    let row = explain(&[]);
    assert!(
        row.contains(
            "50 permits cluster-wide (redis from $REDIS_URL; lease 10s; Redis down: local 17 per process)"
        ),
        "{row}"
    );
    let row = explain(&[
        ("BULKHEAD_PARTNER__CLUSTER__STORE__ON_STORE_ERROR", "refuse"),
        ("BULKHEAD_PARTNER__CLUSTER__LEASE_TTL", "3s"),
    ]);
    assert!(row.contains("lease 3s; Redis down: refuse)"), "{row}");
    std::fs::remove_dir_all(&dir).unwrap();
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
    // 200 QPS × 80ms × 1.5 = 24 core threads, 48 max; 2s of burst = 400, capped to 300.
    assert_eq!(
        (pool.core_threads, pool.max_threads, pool.queue_capacity),
        (24, 48, 300)
    );
    let wait =
        bulkhead_config::worst_case_queue_wait(pool, bulkhead_config::Duration::from_millis(80))
            .unwrap();
    assert!(wait <= bulkhead_config::Duration::from_millis(500));
}

/// Runs `bulkhead check FILE` and says what any input must give: a report and exit 1 —
/// never a crash (101, 134), never exit 0 for these.
fn check_hostile(file: &Path) -> String {
    let out = bulkhead(&["check", &file.to_string_lossy()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out)
}

/// A file in the temporary directory, removed (with its directory, once empty) on drop.
struct TempFile(PathBuf);

impl std::ops::Deref for TempFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn temp_file(name: &str, text: &str) -> TempFile {
    // A directory per file: tests run in parallel, and each removes its own.
    let dir = std::env::temp_dir().join(format!("bulkhead-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    TempFile(path)
}

#[test]
fn check_refuses_a_file_over_the_size_limit() {
    let big = temp_file(
        "big.yaml",
        &format!("# {}\nbulkheads: {{}}\n", "x".repeat(1 << 20)),
    );
    let out = check_hostile(&big);
    assert!(out.contains("larger than 1048576 bytes (1 MiB)"), "{out}");
}

/// Runs `bulkhead ARGS` and gives its exit status and what it printed, failing the test if
/// it has not exited within 10 seconds (a read blocked on a pipe would never return).
fn bulkhead_within_10s(args: &[&str]) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bulkhead"));
    command.args(args);
    within_10s(command, &args.join(" "))
}

/// Runs `command`, failing the test if it has not exited within 10 seconds.
fn within_10s(mut command: Command, what: &str) -> (Option<i32>, String) {
    use std::io::Read as _;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the command");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`{what}` had not exited after 10 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    (status.code(), text)
}

/// A named pipe with no writer (opening it as a file would wait for one forever) is an
/// error at once, exit 2, in every command; the run-time deploy path refuses it by its
/// type. A pipe with a writer (`<(…)`) is read, and an endless device is read up to the
/// size limit and refused as too large (exit 1), like a file.
#[cfg(unix)]
#[test]
fn every_command_reads_a_pipe_with_a_writer_and_never_waits_for_one_without() {
    let config = temp_file("fifo-dir.yaml", "");
    let fifo = config.with_file_name("no-writer.yaml");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(
        made.is_ok_and(|s| s.success()),
        "mkfifo (coreutils) is needed for this test"
    );
    let fifo_path = fifo.to_string_lossy().into_owned();
    let valid = corpus("valid/three-classes.yaml");
    for args in [
        vec!["check", fifo_path.as_str()],
        vec!["check", "--against", fifo_path.as_str(), valid.as_str()],
        vec!["check", "--against", valid.as_str(), fifo_path.as_str()],
        vec!["explain", fifo_path.as_str()],
        vec!["explain", "--against", valid.as_str(), fifo_path.as_str()],
    ] {
        let (code, text) = bulkhead_within_10s(&args);
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(
            text.contains("it is a named pipe (FIFO) and nothing was written to it"),
            "{args:?}: {text}"
        );
    }
    let library = bulkhead_config::read_deploy_file(&fifo)
        .unwrap_err()
        .to_string();
    assert_eq!(library, "it is a named pipe (FIFO), not a regular file");
    std::fs::remove_file(&fifo).unwrap();

    // Process substitution: the file is a pipe a shell's child writes.
    let mut piped = Command::new("bash");
    piped.arg("-c").arg(format!(
        "{} check <(cat {valid})",
        env!("CARGO_BIN_EXE_bulkhead")
    ));
    let (code, text) = within_10s(piped, "bulkhead check <(cat …)");
    assert_eq!(code, Some(0), "bash is needed for this test: {text}");
    assert!(text.contains("no problems"), "{text}");

    if Path::new("/dev/zero").exists() {
        let (code, text) = bulkhead_within_10s(&["check", "/dev/zero"]);
        assert_eq!(code, Some(1), "{text}");
        assert!(text.contains("the file is larger than"), "{text}");
    }
}

#[test]
fn check_finishes_on_files_built_to_be_slow_with_a_report_of_bounded_size() {
    // Each of these took seconds, overflowed the stack or printed gigabytes: a chain of
    // 20 000 `extends`, a cycle of 20 000 templates, 16 000 unknown templates among 8 000,
    // and 16 000 errors on one line of 800 KB (each quoted in full before).
    let n = 20_000;
    let mut chain = String::from("templates:\n");
    for i in 0..n {
        chain.push_str(&format!("  t{i}: {{extends: t{}}}\n", i + 1));
    }
    chain.push_str(&format!("  t{n}: {{kind: semaphore}}\nbulkheads:\n"));
    for i in 0..4_000 {
        chain.push_str(&format!("  b{i}: {{extends: t{i}}}\n"));
    }
    let mut cycle = String::from("templates:\n");
    for i in 0..n {
        cycle.push_str(&format!("  t{i}: {{extends: t{}}}\n", (i + 1) % n));
    }
    let mut unknown = String::from("templates:\n");
    for i in 0..8_000 {
        unknown.push_str(&format!("  t{i}: {{kind: semaphore}}\n"));
    }
    unknown.push_str("bulkheads:\n");
    for i in 0..16_000 {
        unknown.push_str(&format!("  b{i}: {{extends: u{i}}}\n"));
    }
    let one_line = format!(
        "bulkheads: {{{}}}\n",
        (0..16_000)
            .map(|i| format!("b{i}: {{kind: semaphore, max_concurrent_calls: 0}}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The same chain as a deploy layered over a declaration (it resolved each link by a
    // scan of the file: quadratic).
    let declared = temp_file("declared.yaml", "bulkheads:\n  b0: { kind: semaphore }\n");
    let layered = bulkhead(&[
        "check",
        "--against",
        &declared.to_string_lossy(),
        &temp_file("deploy-chain.yaml", &chain).to_string_lossy(),
    ]);
    assert_eq!(layered.status.code(), Some(1), "{}", stdout(&layered));
    for (name, text, errors) in [
        ("chain.yaml", chain, 1),
        ("cycle.yaml", cycle, 1),
        ("unknown.yaml", unknown, 16_000),
        ("one-line.yaml", one_line, 16_000),
    ] {
        let out = check_hostile(&temp_file(name, &text));
        assert!(
            out.ends_with(&format!("{errors} error(s), 0 warning(s)\n")),
            "{name}: {}",
            out.lines().last().unwrap_or_default()
        );
        // Headline, three lines of quote, each line bounded: about 400 bytes a problem.
        assert!(
            out.len() < 400 * errors + 400,
            "{name}: {} bytes",
            out.len()
        );
    }
}

#[test]
fn control_characters_in_a_name_are_escaped_in_the_text_report() {
    let file = temp_file(
        "control.yaml",
        "bulkheads:\n  \"a\\nb\\x1b[31mred\\u202e\\0\": {kind: semaphore}\n",
    );
    let out = check_hostile(&file);
    let mut lines = out.lines();
    let headline = lines.next().unwrap();
    assert!(
        headline.contains(r"bulkheads.a\nb\u{1b}[31mred\u{202e}\0: `a\nb\u{1b}[31mred"),
        "{headline}"
    );
    assert!(
        !out.contains(['\u{1b}', '\u{202e}', '\0']),
        "raw control characters reached the terminal: {out:?}"
    );
    // The one-line format holds: the next line is the quote's gutter.
    assert_eq!(lines.next(), Some("  |"));
    // JSON keeps the name as written.
    let json = bulkhead(&["check", "--format", "json", &file.to_string_lossy()]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(
        report["diagnostics"][0]["key_path"],
        "bulkheads.a\nb\u{1b}[31mred\u{202e}\0"
    );
}

#[test]
fn a_deploy_checked_alone_gets_a_hint_at_against_and_explain_layers_it() {
    let deploy = corpus("against/resize-ok/deploy.yaml");
    let declared = corpus("against/resize-ok/declared.yaml");
    let alone = check_hostile(Path::new(&deploy));
    assert!(
        alone.contains(&format!(
            "hint: {deploy} sets no `kind` anywhere: if it is a deploy file that changes sizes \
             of bulkheads the code declares, check it against the declaration: \
             `bulkhead check --against bulkheads.yaml {deploy}`"
        )),
        "{alone}"
    );
    // A file that does declare kinds gets no such hint.
    let own = stdout(&bulkhead(&["check", &corpus("invalid/zero-permits.yaml")]));
    assert!(!own.contains("hint:"), "{own}");

    let explained = bulkhead(&["explain", "--against", &declared, &deploy]);
    assert_eq!(explained.status.code(), Some(0), "{}", stdout(&explained));
    let table = stdout(&explained);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .to_owned()
    };
    // The deploy's sizes over the declaration's (20..40 threads, 10 permits there).
    assert!(row("payment ").contains("20 permits"), "{table}");
    assert!(row("product-detail ").contains("20..60 threads"), "{table}");
}

#[test]
#[cfg(unix)]
fn explain_refuses_a_bulkhead_variable_whose_name_or_value_is_not_utf8() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt as _;
    let value = (
        "BULKHEAD_ORDER__MAX_THREADS".into(),
        OsString::from_vec(b"\xff5".to_vec()),
    );
    let name = (
        OsString::from_vec(b"BULKHEAD_ORDER\xff\x1b__MAX_THREADS".to_vec()),
        "7".into(),
    );
    for ((var, val), shown, what) in [
        (value, "BULKHEAD_ORDER__MAX_THREADS", "value"),
        (name, "BULKHEAD_ORDER\u{fffd}\\u{1b}__MAX_THREADS", "name"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
            .args(["explain", &corpus("valid/three-classes.yaml")])
            .env(var, val)
            .output()
            .unwrap();
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.starts_with(&format!(
                "environment variable {shown}: error: the {what} of `{shown}` is not UTF-8 text"
            )),
            "{text}"
        );
    }
    // A variable that is not a `BULKHEAD_…` one is none of its business.
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["explain", &corpus("valid/three-classes.yaml")])
        .env("OTHER", OsString::from_vec(b"\xff".to_vec()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// A store whose `${NAME}` cannot give a Redis URL (unset, or set to another scheme) is an
/// error at the `redis:` value of the deploy, as a bad URL written in place is.
#[test]
fn check_against_places_an_unusable_store_variable_at_its_value() {
    let declared = temp_file(
        "declared.yaml",
        "bulkheads:\n  p: { kind: semaphore }\n  q: { kind: semaphore }\n",
    );
    let deploy = temp_file(
        "deploy.yaml",
        "bulkheads:\n  p:\n    cluster:\n      store:\n        redis: \"${CLI_TEST_UNSET_URL}\"\n        replicas: 2\n  q:\n    rate_limit: { limit_for_period: 5, refresh_period: 1s, scope: cluster, store: { redis: \"${CLI_TEST_HTTP_URL}\" } }\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["check", "--against"])
        .args([&*declared, &*deploy])
        .env_remove("CLI_TEST_UNSET_URL")
        .env("CLI_TEST_HTTP_URL", "http://cache:6379")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let file = deploy.display();
    assert!(
        text.contains(&format!(
            "{file}:5:16: error: bulkheads.p.cluster.store.redis: "
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{file}:8:92: error: bulkheads.q.rate_limit.store.redis: "
        )),
        "{text}"
    );
}

/// A file that is not UTF-8 is a problem of the file at its first invalid byte (exit 1),
/// reported with the words the run-time deploy path uses for it.
#[test]
fn check_reports_a_file_that_is_not_utf8_at_its_first_invalid_byte() {
    let file = temp_file("latin1.yaml", "");
    std::fs::write(
        &*file,
        b"bulkheads:\n  p: { kind: semaphore }\n  q: { kind: semaphore, max_wait: \"\xff\" }\n",
    )
    .unwrap();
    let path = file.to_string_lossy().into_owned();
    let expected = format!(
        "{path}:3:36: error: the file is not UTF-8 text: byte 71 (0xff), at this line and \
         column, is not part of a UTF-8 character; a config must be UTF-8, so save it as UTF-8"
    );
    for args in [
        vec!["check", path.as_str()],
        vec!["explain", path.as_str()],
        vec!["check", "--against", path.as_str(), path.as_str()],
    ] {
        let out = bulkhead(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
        assert_eq!(
            stdout(&out).lines().next(),
            Some(expected.as_str()),
            "{args:?}"
        );
    }
    let json = stdout(&bulkhead(&["check", "--format", "json", &path]));
    assert!(
        json.contains(r#""line":3"#) && json.contains(r#""column":36"#),
        "{json}"
    );
    let deploy = bulkhead::check_deploy(&[&*file], false);
    assert_eq!(deploy.exit_status(), 1);
    assert_eq!(deploy.human().lines().next(), Some(expected.as_str()));
}

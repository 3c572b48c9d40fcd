//! The `bulkhead` command-line tool: checks, explains and sizes bulkhead configs in CI/CD.
//!
//! ```text
//! bulkhead check FILE...                          exit 0 valid, 1 problems, 2 usage or I/O error
//! bulkhead check --against bulkheads.yaml [--strict] DEPLOY  a deploy may change sizes, not kinds
//! bulkhead schema                                 the JSON Schema
//! bulkhead explain [--against DECLARED] FILE     the resolved table, with worst-case waits
//! bulkhead suggest --qps N --latency D [--timeout D]
//! bulkhead generate grafana|alerts               a Grafana dashboard, Prometheus alert rules
//! ```
//!
//! Diagnostics are printed as `FILE:LINE:COL: error: <key path>: <message>` followed by the
//! source line with the spot underlined (a few lines of our own: the format above is the
//! contract, and a rendering crate would impose its own header), or as JSON with
//! `--format json`.
#![warn(unreachable_pub)]

use std::io::Write as _;
use std::process::ExitCode;

use bulkhead_config::{
    CheckReport, ClusterLimitConfig, Diagnostics, Duration, Layers, Limits, NotUtf8, OnFull,
    OnStoreError, RateLimitConfig, RateLimitStore, escape_controls, worst_case_queue_wait,
};
use clap::{Parser, Subcommand, ValueEnum};

mod generate;

#[derive(Parser)]
#[command(
    name = "bulkhead",
    version,
    about = "Check, explain and size bulkhead configs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate config files: schema, rules and sizing lints.
    Check {
        /// The files to check (deploy files when `--against` is given).
        #[arg(required = true)]
        files: Vec<String>,
        /// The config the code declares (`bulkheads.yaml`); each FILE is layered on it as a
        /// deploy and may change sizes, not kinds.
        #[arg(long, value_name = "DECLARED")]
        against: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// Exit 1 on warnings too.
        #[arg(long)]
        deny_warnings: bool,
        /// With `--against`: a name the declarations do not have is an error, not a
        /// warning (what `bulkhead::check_deploy(files, true)` and `Deploy::strict` do).
        #[arg(long, requires = "against")]
        strict: bool,
    },
    /// Print the JSON Schema of the config format.
    Schema,
    /// Print the resolved bulkheads (templates and `BULKHEAD_…` environment applied).
    Explain {
        /// The config file (a deploy file when `--against` is given).
        file: String,
        /// The config the code declares (`bulkheads.yaml`): FILE is layered on it as a
        /// deploy, and the table shows what the program would run with.
        #[arg(long, value_name = "DECLARED")]
        against: Option<String>,
    },
    /// Suggest a thread-pool entry sized from QPS and latency: core = QPS × latency × 1.5, max = 2 × core.
    Suggest {
        /// Expected calls per second.
        #[arg(long)]
        qps: f64,
        /// Usual latency of one call, with a unit (`80ms`).
        #[arg(long)]
        latency: Duration,
        /// The client's timeout: the queue is capped so the worst-case wait fits in it.
        #[arg(long)]
        timeout: Option<Duration>,
        /// The bulkhead's name in the printed entry.
        #[arg(long, default_value = "my-dependency")]
        name: String,
    },
    /// Print a Grafana dashboard (JSON, Grafana 10/11) or Prometheus alert rules (YAML),
    /// written from the metric families the bulkheads publish.
    Generate {
        /// What to print.
        #[arg(value_enum)]
        what: Generated,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Generated {
    /// A dashboard: per-bulkhead utilisation, queue depth, refusals by reason, latency
    /// p99, the limit in force, cluster store errors, and every other family.
    Grafana,
    /// Alert rules: standing queue, saturated at 80 % / 95 % of the limit, queue at
    /// 70 % / 90 % of its capacity, refusing, cluster store errors.
    Alerts,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Human,
    Json,
}

/// Exit status: problems found.
const PROBLEMS: u8 = 1;
/// Exit status: usage or I/O error.
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            files,
            against,
            format,
            deny_warnings,
            strict,
        } => check(&files, against.as_deref(), format, deny_warnings, strict),
        Command::Schema => emit(&bulkhead_config::json_schema_text(), ExitCode::SUCCESS),
        Command::Explain { file, against } => explain(&file, against.as_deref()),
        Command::Suggest {
            qps,
            latency,
            timeout,
            name,
        } => {
            if !(qps.is_finite() && qps > 0.0) {
                eprintln!("bulkhead: --qps must be a positive number");
                return ExitCode::from(USAGE);
            }
            let s = bulkhead_config::suggest(qps, latency, timeout);
            emit(&s.to_yaml(&name), ExitCode::SUCCESS)
        }
        Command::Generate { what } => {
            let text = match what {
                Generated::Grafana => generate::grafana_dashboard(),
                Generated::Alerts => generate::alert_rules(),
            };
            emit(&text, ExitCode::SUCCESS)
        }
    }
}

/// Writes `text` to standard output; a closed pipe is not a crash but exit 2.
fn emit(text: &str, status: ExitCode) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => status,
        Err(_) => ExitCode::from(USAGE),
    }
}

/// Why a file gives no text: a problem of the file, reported as the others are (exit 1),
/// or a file that cannot be read at all (exit 2, said on standard error).
enum Unread {
    Problem(Diagnostics),
    Failed(ExitCode),
}

/// A file's text, read as the run-time deploy path reads it (`read_deploy_file`: at most the
/// size limit and one byte more), except that a named pipe or a device is read as a stream
/// (`read_input`: `<(…)`, `/dev/stdin`; a pipe with no writer is an error, never a wait);
/// a file that is not UTF-8 is a problem at its first invalid byte.
fn read(path: &str) -> Result<String, Unread> {
    bulkhead_config::read_input(path).map_err(|e| {
        if let Some(at) = NotUtf8::of(&e) {
            return Unread::Problem(at.diagnostics(path));
        }
        eprintln!("bulkhead: cannot read {}: {e}", escape_controls(path));
        Unread::Failed(ExitCode::from(USAGE))
    })
}

/// The layers a deploy is checked with against `declared`: over its bulkheads as the
/// program's registry holds them (resolved, templates applied), each named by where it is
/// written — what `bulkhead::Deploy` and `bulkhead::check_deploy` layer a deploy over, so
/// the command and the library say the same about the same deploy file.
fn over_declared(path: &str, text: &str) -> Result<Layers, Diagnostics> {
    let declared = bulkhead_config::parse_file(path, text)?;
    Ok(Layers::over_declarations(&declared.config, |name| {
        declared
            .declared_at(name)
            .map(|(file, line, column)| format!("{file}:{line}:{column}"))
    }))
}

/// True when the file's entries set no `kind` at all (directly or in a template): what a
/// deploy file that only changes sizes looks like.
fn looks_like_a_deploy(file: &str, text: &str) -> bool {
    let Ok(json) = bulkhead_config::yaml_to_json(file, text) else {
        return false;
    };
    let entries: Vec<&serde_json::Value> = ["templates", "bulkheads"]
        .iter()
        .filter_map(|s| json.get(s).and_then(serde_json::Value::as_object))
        .flat_map(|section| section.values())
        .collect();
    !entries.is_empty() && entries.iter().all(|e| e.get("kind").is_none())
}

fn check(
    files: &[String],
    against: Option<&str>,
    format: Format,
    deny_warnings: bool,
    strict: bool,
) -> ExitCode {
    let mut report = CheckReport::new();
    let declared = match against {
        Some(path) => match read(path) {
            Ok(text) => Some((path, text)),
            Err(Unread::Problem(problems)) => {
                // No declarations to check the deploys against: this is the report.
                report.extend(problems);
                return finish(&report, format, deny_warnings);
            }
            Err(Unread::Failed(code)) => return code,
        },
        None => None,
    };
    if let Some((path, text)) = &declared {
        report.add_source(path, text);
    }
    for file in files {
        let text = match read(file) {
            Ok(text) => text,
            Err(Unread::Problem(problems)) => {
                report.extend(problems);
                report.add_file(file);
                continue;
            }
            Err(Unread::Failed(code)) => return code,
        };
        let result = match &declared {
            None => bulkhead_config::parse_file(file, &text).map(|p| p.warnings),
            Some((path, declared_text)) => over_declared(path, declared_text)
                .map(|layers| if strict { layers.strict() } else { layers })
                .and_then(|layers| layers.yaml(file, &text))
                .and_then(|layers| layers.deploy())
                .map(|resolved| resolved.warnings),
        };
        match result {
            Ok(warnings) => report.extend(warnings),
            Err(errors) => {
                if declared.is_none() && looks_like_a_deploy(file, &text) {
                    report.add_hint(format!(
                        "{file} sets no `kind` anywhere: if it is a deploy file that changes \
                         sizes of bulkheads the code declares, check it against the declaration: \
                         `bulkhead check --against bulkheads.yaml {file}`"
                    ));
                }
                report.extend(errors);
            }
        }
        report.add_file(file);
        report.add_source(file, &text);
    }
    finish(&report, format, deny_warnings)
}

/// Prints `check`'s report and gives its exit status.
fn finish(report: &CheckReport, format: Format, deny_warnings: bool) -> ExitCode {
    let text = match format {
        Format::Json => report.json(),
        Format::Human => report.human(),
    };
    emit(&text, ExitCode::from(report.exit_status(deny_warnings)))
}

fn explain(path: &str, against: Option<&str>) -> ExitCode {
    let mut report = CheckReport::new();
    let mut texts = Vec::new();
    for file in against.into_iter().chain([path]) {
        match read(file) {
            Ok(text) => {
                report.add_source(file, &text);
                texts.push(text);
            }
            Err(Unread::Problem(problems)) => {
                report.extend(problems);
                return emit(&report.rendered(), ExitCode::from(PROBLEMS));
            }
            Err(Unread::Failed(code)) => return code,
        }
    }
    let layers = match (against, texts.as_slice()) {
        (Some(declared), [declared_text, deploy_text]) => {
            over_declared(declared, declared_text).and_then(|layers| layers.yaml(path, deploy_text))
        }
        (_, [.., text]) => Ok(Layers::new(path, text)),
        (_, []) => return ExitCode::from(USAGE),
    };
    let parsed = match layers.and_then(|layers| layers.env().resolve()) {
        Ok(parsed) => parsed,
        Err(errors) => {
            report.extend(errors);
            return emit(&report.rendered(), ExitCode::from(PROBLEMS));
        }
    };
    report.extend(parsed.warnings.clone());
    let mut rows = vec![vec![
        "bulkhead".to_owned(),
        "kind".to_owned(),
        "limit".to_owned(),
        "shares".to_owned(),
        "adaptive limit".to_owned(),
        "queue".to_owned(),
        "when full".to_owned(),
        "max queue wait".to_owned(),
        "worst-case queue wait".to_owned(),
        "rate limit".to_owned(),
    ]];
    for (name, b) in &parsed.config.bulkheads {
        let adaptive = b.adaptive.map_or("-".to_owned(), |a| {
            let size = b.declared_size();
            format!(
                "{} {}..{} (starts at {})",
                a.algorithm,
                a.min_limit(size),
                a.max_limit(size),
                a.initial_limit(size)
            )
        });
        let mut row = Vec::from(match &b.limits {
            Limits::Semaphore(s) => [
                name.clone(),
                "semaphore".to_owned(),
                cluster_limit_cell(s.max_concurrent_calls, b.cluster.as_ref()),
                adaptive,
                "-".to_owned(),
                if s.max_wait.is_zero() {
                    "fail fast".to_owned()
                } else {
                    format!("wait {}", s.max_wait)
                },
                "-".to_owned(),
                "-".to_owned(),
            ],
            Limits::ThreadPool(t) => [
                name.clone(),
                "thread-pool".to_owned(),
                format!("{}..{} threads", t.core_threads, t.max_threads),
                adaptive,
                t.queue_capacity.to_string(),
                match t.on_full {
                    OnFull::Abort => "abort".to_owned(),
                    OnFull::CallerRuns => "caller-runs".to_owned(),
                    OnFull::Wait(d) => format!("wait {d}"),
                    other => format!("{other:?}"),
                },
                t.max_queue_wait.map_or("-".to_owned(), |d| d.to_string()),
                match b.expected.and_then(|e| worst_case_queue_wait(t, e.latency)) {
                    Some(wait) => wait.to_string(),
                    None => "? (set expected.latency)".to_owned(),
                },
            ],
            // A kind of a later release (the crates are pinned to one): its name, no sizes.
            _ => {
                let dash = || "-".to_owned();
                [
                    name.clone(),
                    b.kind().to_string(),
                    dash(),
                    adaptive,
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                ]
            }
        });
        row.insert(3, shares_cell(b));
        row.push(rate_limit_cell(b.rate_limit.as_ref()));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut table = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        table.push_str(line.join("  ").trim_end());
        table.push('\n');
    }
    table.push_str(&report.rendered());
    emit(&table, ExitCode::SUCCESS)
}

/// The `shares` cell of `explain`: each partition's guaranteed slots of the declared limit
/// they divide (a pool's: running plus queued), and the per-key cap.
fn shares_cell(b: &bulkhead_config::BulkheadConfig) -> String {
    let limit = b.shared_limit();
    let mut parts = Vec::new();
    if !b.partitions.is_empty() {
        let guaranteed: Vec<String> = b
            .partitions
            .names()
            .map(|name| {
                format!(
                    "{name} {}",
                    b.partitions.guaranteed(name, limit).unwrap_or(0)
                )
            })
            .collect();
        parts.push(format!("{} of {limit}", guaranteed.join(", ")));
    }
    if let Some(per_key) = &b.per_key {
        parts.push(format!(
            "{} per key ({} keys)",
            per_key.max_concurrent_calls, per_key.max_keys
        ));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join("; ")
    }
}

/// The `limit` cell of a semaphore in `explain`: its permits, and for a limit shared by
/// the cluster the store, the lease and what each process runs while Redis cannot answer.
fn cluster_limit_cell(permits: u32, cluster: Option<&ClusterLimitConfig>) -> String {
    let Some(cluster) = cluster else {
        return format!("{permits} permits");
    };
    let store = &cluster.store;
    let on_error = match store.on_store_error {
        OnStoreError::Local => format!("local {} per process", store.local_share(permits)),
        other => other.as_str().to_owned(),
    };
    format!(
        "{permits} permits cluster-wide ({}; lease {}; Redis down: {on_error}{})",
        store_cell(store),
        cluster.lease_ttl,
        anyway(store)
    )
}

/// Where a cluster store's URL comes from, for `explain`.
fn store_cell(store: &RateLimitStore) -> String {
    match store.redis_env_var() {
        Some(var) => format!("redis from ${var}"),
        None => "redis".to_owned(),
    }
}

fn anyway(store: &RateLimitStore) -> &'static str {
    if store.start_anyway {
        "; starts without a usable store"
    } else {
        ""
    }
}

/// The `rate limit` cell of `explain`: the limit, who shares it, and for a cluster-wide one
/// the store and what happens while it cannot answer.
fn rate_limit_cell(rate: Option<&RateLimitConfig>) -> String {
    let Some(rate) = rate else {
        return "-".to_owned();
    };
    let limit = format!("{}/{}", rate.limit_for_period, rate.refresh_period);
    let Some(store) = rate.cluster_store() else {
        return format!("{limit} per process");
    };
    let on_error = match store.on_store_error {
        OnStoreError::Local => format!(
            "local {}/{} per process",
            store.local_share(rate.limit_for_period),
            rate.refresh_period
        ),
        other => other.as_str().to_owned(),
    };
    format!(
        "{limit} cluster ({}; Redis down: {on_error}{})",
        store_cell(store),
        anyway(store)
    )
}

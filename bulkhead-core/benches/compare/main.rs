//! `cargo bench -p bulkheads-core --bench compare`: our bulkheads and their peers on the same
//! workloads, in one run, printed as one table of ratios (absolute times drift on shared
//! machines; ratios taken in the same run do not). Each workload is a file of `workloads/`,
//! named by a [`Workload`] id; `harness.rs` times the contenders and prints the table.
//!
//! With `java` on PATH, `benches/java/Compare.java` adds the JDK's `Semaphore` and
//! `ThreadPoolExecutor` (what Resilience4j is built on) on the same workloads.
//!
//! Set `BENCH_QUICK=1` for a short smoke run (shorter samples; no Java), `BENCH_NO_JAVA=1` to
//! skip the Java peers. `--profile <workload> <iterations>` runs one workload's loop alone,
//! for callgrind (see `profile.rs`; `benches/instructions.sh` counts every loop's
//! instructions per operation). `BENCH_ONLY=7` (a comma-separated list of workload keys,
//! [`Workload::key`]) runs only those workloads.
//!
//! A ratio in the table is the median of the per-round ratios, with their range
//! (`harness.rs`): the range shows which of the machine's regimes the run saw.

mod alloc;
mod attribute;
mod fixtures;
mod harness;
mod java;
mod peers;
mod profile;
mod workloads;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use harness::Settings;
use workloads::Workload;

#[global_allocator]
static GLOBAL: alloc::CountingAlloc = alloc::CountingAlloc;

fn main() {
    // `cargo bench` passes `--bench`; `--test` (given by hand: `cargo test --benches` passes
    // nothing to a bench without the libtest harness) means a smoke run, as `BENCH_QUICK` does.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--profile") {
        let workload = args.get(at + 1).map_or("", String::as_str);
        let n = args
            .get(at + 2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(100_000);
        profile::run(workload, n);
        return;
    }
    let quick = std::env::var_os("BENCH_QUICK").is_some() || args.iter().any(|a| a == "--test");
    let settings = if quick {
        Settings {
            fast: Duration::from_millis(1),
            slow: Duration::from_millis(3),
            java: false,
        }
    } else {
        Settings {
            fast: Duration::from_millis(20),
            slow: Duration::from_millis(60),
            java: std::env::var_os("BENCH_NO_JAVA").is_none() && java::available(),
        }
    };
    let started = Instant::now();
    let header = machine();
    eprintln!("{header}");
    eprintln!(
        "method: {} interleaved rounds (~{:?} / {:?} per contender each); ratios per round",
        harness::SAMPLES,
        settings.fast,
        settings.slow
    );

    let only = std::env::var("BENCH_ONLY").ok();
    let selected = |w: Workload| {
        only.as_deref()
            .is_none_or(|list| list.split(',').any(|k| k.trim() == w.key()))
    };
    let mut rows = Vec::new();
    for workload in Workload::ALL {
        if selected(workload) {
            workload.run(&settings, &mut rows);
        }
    }

    let with_java = settings.java && only.is_none();
    let java = if with_java {
        eprintln!("java peers (benches/java/Compare.java):");
        java::run().unwrap_or_else(|why| {
            eprintln!("  java peers skipped: {why}");
            BTreeMap::new()
        })
    } else {
        BTreeMap::new()
    };
    java::add_rows(&java, &mut rows, with_java);
    // Each workload's rows together (the Java rows were measured last), in the order each
    // workload added them.
    rows.sort_by_key(|r| r.workload);

    let run = format!(
        "{header}; at end: {}; commit {}; run took {:.0?}",
        load_average(),
        commit(),
        started.elapsed()
    );
    println!("{run}");
    println!(
        "method: {} interleaved rounds; each figure the median of its rounds; ratio = ours / peer (lower is better), the median of the per-round ratios (range over the rounds)\n",
        harness::SAMPLES,
    );
    println!("{}", harness::render_table(&rows));
    // Self-contained for docs/benchmarks.md's "Latest runs": the run's date, load and
    // commit, then its headline rows (the range of each ratio shows the regimes it saw).
    println!("Headline (rows with a target; paste into docs/benchmarks.md, \"Latest runs\"):\n");
    println!("Run of {run}.\n");
    println!("{}", harness::render_headline(&rows));
}

/// Date, machine, toolchain and load, for `docs/benchmarks.md`.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let output = |cmd: &str, arg: &str| {
        std::process::Command::new(cmd)
            .arg(arg)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{}; machine: {cores} cores, {model}; {}; load average at start: {}",
        output("date", "-u"),
        output("rustc", "-V"),
        load_average()
    )
}

/// The checkout's commit as the bench runs (its short hash, `+dirty` with uncommitted
/// changes to tracked files), or "unknown" outside a git checkout.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(hash) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{hash}+dirty") } else { hash }
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

//! The Java peers: compiles `benches/java/Compare.java` into the target directory and runs
//! it, when `javac` and `java` are on PATH, and adds its figures as rows beside ours.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{Cell, Row, Unit};
use crate::workloads::Workload;
use crate::workloads::{pool_round_trip, pool_throughput, refusal, semaphore_call};

/// Median ns/op per workload key, or why there are none.
pub fn run() -> Result<BTreeMap<String, f64>, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/java/Compare.java");
    let classes = target_dir().join("bench-java");
    std::fs::create_dir_all(&classes).map_err(|e| format!("{}: {e}", classes.display()))?;
    let javac = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .arg(&source)
        .output()
        .map_err(|e| format!("javac not runnable ({e})"))?;
    if !javac.status.success() {
        return Err(format!(
            "javac failed: {}",
            String::from_utf8_lossy(&javac.stderr)
        ));
    }
    let java = Command::new("java")
        .arg("-cp")
        .arg(&classes)
        .arg("Compare")
        .output()
        .map_err(|e| format!("java not runnable ({e})"))?;
    if !java.status.success() {
        return Err(format!(
            "java failed: {}",
            String::from_utf8_lossy(&java.stderr)
        ));
    }
    let mut results = BTreeMap::new();
    for line in String::from_utf8_lossy(&java.stdout).lines() {
        let mut fields = line.split('\t');
        if let (Some(key), Some(median)) = (fields.next(), fields.next())
            && let Ok(ns) = median.parse::<f64>()
        {
            eprintln!("  java {key:<32} {line}");
            results.insert(key.to_string(), ns);
        }
    }
    Ok(results)
}

/// Whether `java` and `javac` can be started.
pub fn available() -> bool {
    ["java", "javac"].iter().all(|tool| {
        Command::new(tool)
            .arg("-version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

/// The cargo target directory: the bench binary lives in `<target>/<profile>/deps/`.
fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(std::env::temp_dir)
}

/// Adds a row for each Java figure, beside the row of ours it compares with.
pub fn add_rows(java: &BTreeMap<String, f64>, rows: &mut Vec<Row>, wanted: bool) {
    if !wanted {
        eprintln!("java peers: not run (java/javac not on PATH, or quick run)");
        return;
    }
    // (java key, java label, workload, our contender's label, target)
    let pairs: [(&str, &str, Workload, &str, &str); 6] = [
        (
            "semaphore_call",
            "JDK fair Semaphore tryAcquire(0) + release",
            Workload::SemaphoreCall,
            semaphore_call::ATTRIBUTE,
            "(ref: R4j 21.9 ns)",
        ),
        (
            "semaphore_refusal",
            "JDK Semaphore tryAcquire(0) refused",
            Workload::Refusal,
            refusal::SEM_REFUSED,
            "(ref: R4j 159 ns)",
        ),
        (
            "semaphore_refusal_exception",
            "JDK Semaphore refused + exception without stack trace",
            Workload::Refusal,
            refusal::SEM_REFUSED,
            "(ref: R4j 159 ns)",
        ),
        (
            "pool_round_trip",
            "JDK ThreadPoolExecutor + ArrayBlockingQueue",
            Workload::PoolRoundTrip,
            pool_round_trip::POOL_CALL,
            "> 10× faster (ratio < 0.1)",
        ),
        (
            "pool_throughput_window",
            "JDK ThreadPoolExecutor",
            Workload::PoolThroughput,
            pool_throughput::WINDOW_OURS,
            "≤ 1.0×",
        ),
        (
            "pool_throughput_blocking",
            "JDK ThreadPoolExecutor, blocking",
            Workload::PoolThroughput,
            pool_throughput::BLOCKING_OURS,
            "–",
        ),
    ];
    for (key, label, workload, ours_label, target) in pairs {
        let Some(ours) = rows
            .iter()
            .find(|r| r.workload == workload && r.ours.label == ours_label)
            .map(|r| (r.title.clone(), r.ours.value, r.ours.note.clone()))
        else {
            continue;
        };
        let peer = match java.get(key) {
            Some(&ns) => Cell::nanos(label, ns),
            None => Cell::missing(label, "n/a (java run failed)"),
        };
        rows.push(Row {
            workload,
            title: ours.0,
            ours: Cell {
                label: ours_label.into(),
                value: ours.1,
                unit: Unit::Nanos,
                note: ours.2,
                rounds: Vec::new(),
            },
            peer,
            target: target.into(),
        });
    }
}

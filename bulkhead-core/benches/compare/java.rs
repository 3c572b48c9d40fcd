//! The Java peers: compiles `benches/java/Compare.java` into the target directory and runs
//! it, when `javac` and `java` are on PATH.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

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

//! Editing `bulkheads.yaml` changes what compiles, with no `cargo clean` and no touch of a
//! source file: the attribute's expansion `include_str!`s the config, so rustc records it
//! in the crate's dep-info and cargo rebuilds the crate when it changes.
//!
//! The test writes a tiny crate that depends on this workspace by path (in
//! `target/tmp/bulkhead-rebuild/`, whose target directory is kept between runs, so only the
//! first run compiles the dependencies) and runs `cargo check` on it after each edit of its
//! `bulkheads.yaml`.

use std::path::{Path, PathBuf};
use std::process::Command;

const MAIN_RS: &str = r#"
use bulkhead::{BulkheadError, bulkhead};

/// Borrows its argument: fine on a semaphore (the body runs on the caller's task), not on a
/// thread pool (the future must be `'static`).
#[bulkhead("greeting")]
async fn greet(name: &str) -> Result<String, BulkheadError> {
    Ok(format!("hello, {name}"))
}

fn main() {
    drop(greet("world"));
}
"#;

struct TinyCrate {
    dir: PathBuf,
    target: PathBuf,
}

impl TinyCrate {
    fn new() -> Self {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
        let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bulkhead-rebuild");
        let dir = base.join("tiny");
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let manifest = format!(
            "[package]\nname = \"tiny\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\nbulkheads = {{ path = {:?} }}\n\n\
             # Not a member of the bulkhead workspace that encloses target/.\n[workspace]\n",
            workspace.display().to_string()
        );
        std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
        std::fs::write(dir.join("src/main.rs"), MAIN_RS).unwrap();
        // The workspace's lock file: the same dependency versions, nothing to resolve.
        std::fs::copy(workspace.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
        TinyCrate {
            dir,
            target: base.join("target"),
        }
    }

    fn write_config(&self, yaml: &str) {
        std::fs::write(self.dir.join("bulkheads.yaml"), yaml).unwrap();
    }

    /// `cargo check`: Ok(()) when it compiles, Err(stderr) when it does not.
    fn check(&self) -> Result<(), String> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .arg("check")
            .arg("--quiet")
            .arg("--manifest-path")
            .arg(self.dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&self.target)
            .env_remove("BULKHEAD_MANIFEST_DIR")
            .env("CARGO_TERM_COLOR", "never")
            .output()
            .unwrap();
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

#[test]
fn editing_bulkheads_yaml_changes_what_compiles() {
    let tiny = TinyCrate::new();

    tiny.write_config("bulkheads:\n  greeting: { kind: semaphore, max_concurrent_calls: 4 }\n");
    tiny.check().expect("`greeting` is declared as a semaphore");

    // Renamed in the config: the same source no longer compiles.
    tiny.write_config("bulkheads:\n  greetings: { kind: semaphore }\n");
    let stderr = tiny.check().expect_err("`greeting` is no longer declared");
    assert!(stderr.contains("unknown bulkhead `greeting`"), "{stderr}");
    assert!(stderr.contains("did you mean `greetings`?"), "{stderr}");

    // Now a thread pool: the borrowed argument of the `async fn` is refused.
    tiny.write_config("bulkheads:\n  greeting: { kind: thread-pool }\n");
    let stderr = tiny
        .check()
        .expect_err("an async fn on a thread pool takes owned arguments");
    assert!(
        stderr.contains("bulkhead `greeting` is a thread pool"),
        "{stderr}"
    );
    assert!(
        stderr.contains("argument `name` borrows from the caller"),
        "{stderr}"
    );

    // Back to the first config: compiles again.
    tiny.write_config("bulkheads:\n  greeting: { kind: semaphore, max_concurrent_calls: 4 }\n");
    tiny.check().expect("`greeting` is a semaphore again");
}

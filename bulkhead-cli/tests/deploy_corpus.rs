//! One deploy file, one message: every deploy file of `tests/deploy-corpus/` is checked by
//! `bulkhead check --against` (the binary, as CI runs it) and by the library a service
//! links (`bulkhead::check_deploy`, what a `--check-config` flag prints), against the same
//! declarations, and the two reports must be the same text with the same exit status —
//! by default and strict (`--strict`, `check_deploy(files, true)`).
//!
//! The library's declarations are this test's `#[bulkhead]` functions, declared in
//! `tests/deploy-corpus/bulkheads.yaml` (`[package.metadata.bulkhead]` in Cargo.toml), the
//! file the binary is given with `--against`. Each report is also kept beside its deploy
//! file (`NAME.expected`), so a change of wording shows in review; after a deliberate one,
//! `BLESS=1 cargo test -p bulkheads-cli --test deploy_corpus` rewrites them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("payment")]
fn payment() -> Result<(), BulkheadError> {
    Ok(())
}

#[bulkhead("product-detail")]
fn product_detail() -> Result<(), BulkheadError> {
    Ok(())
}

#[bulkhead("search", partition = "live")]
fn search() -> Result<(), BulkheadError> {
    Ok(())
}

/// The corpus, as both paths are given it: relative to this crate (the test's working
/// directory), so the files are named alike in both reports.
const CORPUS: &str = "tests/deploy-corpus";
const DECLARED: &str = "tests/deploy-corpus/bulkheads.yaml";

fn deploy_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(CORPUS)
        .expect("the corpus directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("bulkheads.yaml"))
        .collect();
    files.sort();
    files
}

/// `bulkhead check --against DECLARED [--strict] FILE`: its standard output and exit status.
fn cli(file: &Path, strict: bool) -> (String, Option<i32>) {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["check", "--against", DECLARED])
        .args(strict.then_some("--strict"))
        .arg(file)
        .env_remove("BULKHEAD_CORPUS_UNSET_REDIS_URL")
        .output()
        .expect("run bulkhead");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).expect("UTF-8"),
        out.status.code(),
    )
}

#[test]
fn the_command_and_the_library_print_the_same_report_for_every_deploy_file() {
    // Registered from here on, as in a service that calls them.
    payment().unwrap();
    product_detail().unwrap();
    search().unwrap();
    let files = deploy_files();
    assert!(files.len() >= 20, "the corpus shrank to {}", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let mut report = String::new();
        for strict in [false, true] {
            let (command, status) = cli(file, strict);
            let library = bulkhead::check_deploy(&[file], strict);
            if library.human() != command || status != Some(i32::from(library.exit_status())) {
                failures.push(format!(
                    "{} (strict: {strict}):\n--- bulkhead check --against (exit {status:?})\n{command}--- check_deploy (exit {})\n{}",
                    file.display(),
                    library.exit_status(),
                    library.human()
                ));
            }
            let mode = if strict { "strict" } else { "default" };
            report.push_str(&format!(
                "{mode}: exit {}\n{command}",
                library.exit_status()
            ));
        }
        let expected = file.with_extension("expected");
        if std::env::var_os("BLESS").is_some() {
            fs::write(&expected, &report).unwrap();
        } else if fs::read_to_string(&expected).ok().as_deref() != Some(report.as_str()) {
            failures.push(format!(
                "{}: the report changed (BLESS=1 to accept):\n{report}",
                expected.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_misspelled_name_with_sizes_only_gets_a_did_you_mean_on_both_paths() {
    let file = Path::new(CORPUS).join("typo-sizes-only.yaml");
    let (command, status) = cli(&file, false);
    assert_eq!(status, Some(0), "a warning: {command}");
    assert!(command.contains("did you mean `payment`?"), "{command}");
    assert!(!command.contains("has no `kind`"), "{command}");
    assert_eq!(bulkhead::check_deploy(&[&file], false).human(), command);
}

#[test]
fn a_password_in_a_deploy_file_is_in_neither_report() {
    let file = Path::new(CORPUS).join("cluster-store-password.yaml");
    let (command, status) = cli(&file, false);
    assert_eq!(status, Some(1), "refused: {command}");
    let library = bulkhead::check_deploy(&[&file], false);
    for report in [command, library.human(), library.json()] {
        assert!(!report.contains("hunter2-corpus"), "{report}");
    }
}

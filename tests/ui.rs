//! The `#[bulkhead]` misuse suite: `tests/ui/pass` must compile, every `tests/ui/fail` case
//! must fail with the `.stderr` beside it (`TRYBUILD=overwrite` regenerates them).
//!
//! trybuild compiles the cases in a crate of its own under `target/tests/trybuild/`, so the
//! attribute would look for that crate's `bulkheads.yaml` (trybuild#202). The attribute
//! honours `BULKHEAD_MANIFEST_DIR` instead of `CARGO_MANIFEST_DIR` when it is set; this
//! test points it at the directory whose config each group of cases is written against:
//! this crate's root for most, and a fixture directory for the "no config" and "invalid
//! config" cases.

use std::path::Path;

/// Runs one group of cases against the config found in `manifest_dir`.
fn run_against(manifest_dir: &Path, cases: impl FnOnce(&trybuild::TestCases)) {
    // SAFETY: this is the only test in this binary, and nothing else reads or writes the
    // environment while it runs; trybuild passes it on to cargo and rustc.
    unsafe { std::env::set_var("BULKHEAD_MANIFEST_DIR", manifest_dir) };
    let t = trybuild::TestCases::new();
    cases(&t);
    // Dropping the test cases builds and checks them, with the variable still set.
    drop(t);
}

#[test]
fn ui() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    run_against(root, |t| {
        t.pass("tests/ui/pass/*.rs");
        t.compile_fail("tests/ui/fail/*.rs");
    });
    run_against(&root.join("tests/ui/fail/no-config"), |t| {
        t.compile_fail("tests/ui/fail/no-config/*.rs");
    });
    run_against(&root.join("tests/ui/fail/invalid-config"), |t| {
        t.compile_fail("tests/ui/fail/invalid-config/*.rs");
    });
}

//! `bulkheads.schema.json`: checked in, generated from the types, and in agreement with
//! the validator on the corpus.
//!
//! Each invalid corpus file says on its second line what the schema does with it:
//! `# schema: rejects`, `# schema: accepts — <why a schema cannot see it>`, or
//! `# schema: n/a — <why it never reaches the schema>`. This test holds the schema to it.

use std::fs;
use std::path::{Path, PathBuf};

use bulkhead_config::{json_schema, json_schema_text, yaml_to_json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml_files(dir: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = fs::read_dir(root().join("tests/config").join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            let name = format!("{dir}/{}", p.file_name().unwrap().to_string_lossy());
            (name, fs::read_to_string(p).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&json_schema()).expect("the generated schema compiles")
}

#[test]
fn checked_in_schema_matches_the_types() {
    let checked_in = fs::read_to_string(root().join("bulkheads.schema.json")).unwrap_or_default();
    assert!(
        checked_in == json_schema_text(),
        "bulkheads.schema.json is stale: regenerate it with\n  \
         cargo run -p bulkheads-cli -- schema > bulkheads.schema.json"
    );
}

#[test]
fn schema_is_a_valid_draft_2020_12_schema() {
    let schema = json_schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert!(jsonschema::meta::is_valid(&schema));
}

#[test]
fn schema_accepts_every_valid_example() {
    let validator = validator();
    for (name, source) in yaml_files("valid") {
        let instance = yaml_to_json(&name, &source).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&instance)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{name} is valid but the schema says: {errors:?}"
        );
    }
}

#[test]
fn schema_rejects_exactly_the_invalid_files_a_schema_can_express() {
    let validator = validator();
    let mut rejected = 0;
    for (name, source) in yaml_files("invalid") {
        let verdict = source
            .lines()
            .find_map(|l| l.strip_prefix("# schema: "))
            .unwrap_or_else(|| panic!("{name} has no `# schema:` line"));
        let instance = yaml_to_json(&name, &source);
        if verdict.starts_with("n/a") {
            assert!(instance.is_err(), "{name}: `n/a` but the YAML was read");
            continue;
        }
        let instance = instance.unwrap_or_else(|e| panic!("{name}: {e}"));
        let valid = validator.is_valid(&instance);
        if verdict.starts_with("rejects") {
            assert!(!valid, "{name}: the schema should reject it");
            rejected += 1;
        } else {
            assert!(
                verdict.starts_with("accepts — "),
                "{name}: unknown verdict {verdict:?}"
            );
            assert!(
                valid,
                "{name}: marked as beyond a schema, but the schema rejects it"
            );
        }
    }
    assert!(
        rejected >= 15,
        "only {rejected} invalid files are rejected by the schema"
    );
}

#[test]
fn schema_describes_every_key_for_editors() {
    let schema = json_schema();
    let spec = &schema["$defs"]["BulkheadSpec"]["properties"];
    for (key, property) in spec.as_object().unwrap() {
        assert!(
            property["description"]
                .as_str()
                .is_some_and(|d| d.len() > 20),
            "`{key}` has no description in the schema"
        );
    }
}

#[test]
fn schema_forbids_thread_pool_keys_on_a_semaphore_and_the_reverse() {
    let validator = validator();
    let doc = |entry: serde_json::Value| serde_json::json!({ "bulkheads": { "x": entry } });
    assert!(!validator.is_valid(&doc(
        serde_json::json!({ "kind": "semaphore", "queue_capacity": 1 })
    )));
    assert!(!validator.is_valid(&doc(
        serde_json::json!({ "kind": "thread-pool", "max_wait": "1s" })
    )));
    assert!(validator.is_valid(&doc(
        serde_json::json!({ "kind": "thread-pool", "queue_capacity": 1 })
    )));
    // Without a kind the entry may be partial (its template sets the kind).
    assert!(validator.is_valid(&doc(serde_json::json!({ "queue_capacity": 1 }))));
}

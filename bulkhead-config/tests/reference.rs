//! `docs/config-reference.md` keeps its key tables in step with the types: they are
//! generated here from the JSON Schema (itself generated from the serde types and their
//! doc comments) and compared with the checked-in text between
//! `<!-- generated:keys:start -->` and `<!-- generated:keys:end -->`.
//! `BLESS=1 cargo test -p bulkheads-config --test reference` rewrites that part.

use std::path::Path;

use serde_json::Value;

const START: &str = "<!-- generated:keys:start -->\n";
const END: &str = "<!-- generated:keys:end -->";

fn defs(schema: &Value) -> &serde_json::Map<String, Value> {
    schema["$defs"].as_object().unwrap()
}

/// The schemas a property may take, without `null` (which only means "not set").
fn alternatives<'a>(schema: &'a Value, root: &'a Value) -> Vec<&'a Value> {
    let follow = |s: &'a Value| match s.get("$ref").and_then(Value::as_str) {
        Some(r) => &defs(root)[r.trim_start_matches("#/$defs/")],
        None => s,
    };
    let s = follow(schema);
    let list: Vec<&Value> = match s
        .get("anyOf")
        .or_else(|| s.get("oneOf"))
        .and_then(Value::as_array)
    {
        Some(items) => items.iter().collect(),
        None => vec![schema],
    };
    list.into_iter()
        .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
        .collect()
}

fn type_of(schema: &Value, root: &Value) -> String {
    let names: Vec<String> = alternatives(schema, root)
        .into_iter()
        .map(|alt| {
            if let Some(r) = alt.get("$ref").and_then(Value::as_str) {
                let name = r.trim_start_matches("#/$defs/");
                let def = &defs(root)[name];
                return match name {
                    "Duration" => "duration".to_owned(),
                    "Name" => "name".to_owned(),
                    _ if def.get("properties").is_some() => "mapping (below)".to_owned(),
                    _ => type_of(def, root),
                };
            }
            if let Some(values) = alt.get("enum").and_then(Value::as_array) {
                return values
                    .iter()
                    .map(|v| format!("`{}`", v.as_str().unwrap_or("?")))
                    .collect::<Vec<_>>()
                    .join(" \\| ");
            }
            if let Some(c) = alt.get("const").and_then(Value::as_str) {
                return format!("`{c}`");
            }
            if let Some(props) = alt.get("properties").and_then(Value::as_object) {
                let keys: Vec<String> = props
                    .iter()
                    .map(|(k, v)| format!("{k}: {}", type_of(v, root)))
                    .collect();
                return format!("`{{ {} }}`", keys.join(", "));
            }
            // `Option<T>` is `"type": ["integer", "null"]`: the null only means "not set".
            let ty = match alt.get("type") {
                Some(Value::Array(types)) => types
                    .iter()
                    .filter_map(Value::as_str)
                    .find(|t| *t != "null")
                    .unwrap_or("any"),
                Some(Value::String(t)) => t.as_str(),
                _ => "any",
            };
            match (ty, alt.get("minimum"), alt.get("maximum")) {
                ("integer", min, max) => {
                    let min = min.and_then(Value::as_u64).unwrap_or(0);
                    match max.and_then(Value::as_u64) {
                        Some(max) => format!("integer {min}–{max}"),
                        None => format!("integer ≥ {min}"),
                    }
                }
                ("number", Some(min), Some(max)) => format!("number {min}–{max}"),
                (other, ..) => other.to_owned(),
            }
        })
        .collect();
    names.join(" \\| ")
}

fn description(schema: &Value, root: &Value) -> String {
    let text = schema
        .get("description")
        .or_else(|| {
            alternatives(schema, root)
                .first()
                .and_then(|a| a.get("description"))
        })
        .and_then(Value::as_str)
        .unwrap_or("");
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The markdown tables for every key of the format.
fn tables() -> String {
    let root = bulkhead_config::json_schema();
    let spec = &defs(&root)["BulkheadSpec"];
    let forbidden = |kind: &str| -> Vec<String> {
        spec["allOf"]
            .as_array()
            .unwrap()
            .iter()
            .find(|rule| rule["if"]["properties"]["kind"]["const"] == kind)
            .map(|rule| {
                rule["then"]["properties"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    let (not_semaphore, not_pool) = (forbidden("semaphore"), forbidden("thread-pool"));
    let mut out = String::new();
    out.push_str("### Top level\n\n| key | type | meaning |\n|---|---|---|\n");
    for (key, prop) in root["properties"].as_object().unwrap() {
        out.push_str(&format!(
            "| `{key}` | map of name → entry | {} |\n",
            description(prop, &root)
        ));
    }
    out.push_str("\n### An entry of `bulkheads` or `templates`\n\n| key | kind | type | meaning |\n|---|---|---|---|\n");
    let mut rows: Vec<(u8, String)> = Vec::new();
    for (key, prop) in spec["properties"].as_object().unwrap() {
        let (order, kind) = if not_semaphore.contains(key) {
            (2, "thread-pool")
        } else if not_pool.contains(key) {
            (1, "semaphore")
        } else {
            (0, "any")
        };
        rows.push((
            order,
            format!(
                "| `{key}` | {kind} | {} | {} |\n",
                type_of(prop, &root),
                description(prop, &root)
            ),
        ));
    }
    rows.sort();
    out.extend(rows.into_iter().map(|(_, row)| row));
    sections(&mut out, "", &spec["properties"], &root);
    out
}

/// A table for each mapping among `properties` (named by its key path from the entry,
/// such as `rate_limit.store`), then for the mappings inside it.
fn sections(out: &mut String, parent: &str, properties: &Value, root: &Value) {
    for (key, prop) in properties.as_object().unwrap() {
        let Some(def) = alternatives(prop, root).into_iter().find_map(|a| {
            let name = a.get("$ref")?.as_str()?.trim_start_matches("#/$defs/");
            defs(root)[name]
                .get("properties")
                .map(|_| &defs(root)[name])
        }) else {
            continue;
        };
        let path = format!("{parent}{key}");
        out.push_str(&format!(
            "\n### `{path}`\n\n| key | type | meaning |\n|---|---|---|\n"
        ));
        let required: Vec<&str> = def["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (sub, sub_schema) in def["properties"].as_object().unwrap() {
            let mark = if required.contains(&sub.as_str()) {
                " (required)"
            } else {
                ""
            };
            out.push_str(&format!(
                "| `{sub}`{mark} | {} | {} |\n",
                type_of(sub_schema, root),
                description(sub_schema, root)
            ));
        }
        sections(out, &format!("{path}."), &def["properties"], root);
    }
}

#[test]
fn config_reference_lists_every_key_as_the_types_define_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/config-reference.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = tables();
    let (Some(start), Some(end)) = (doc.find(START), doc.find(END)) else {
        panic!("docs/config-reference.md lacks the {START:?} … {END:?} markers");
    };
    let current = &doc[start + START.len()..end];
    if std::env::var_os("BLESS").is_some() {
        let updated = format!("{}{START}{generated}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert!(
        current == generated,
        "docs/config-reference.md is out of step with the types; regenerate with\n  \
         BLESS=1 cargo test -p bulkheads-config --test reference\n--- generated\n{generated}"
    );
}

#[test]
fn every_key_of_the_format_appears_in_the_reference() {
    let generated = tables();
    let root = bulkhead_config::json_schema();
    for key in defs(&root)["BulkheadSpec"]["properties"]
        .as_object()
        .unwrap()
        .keys()
    {
        assert!(
            generated.contains(&format!("| `{key}` |")),
            "{key} missing from the tables"
        );
    }
}

#[test]
fn config_examples_in_the_docs_are_valid_and_lint_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    let mut docs = vec![root.join("README.md")];
    for page in std::fs::read_dir(root.join("docs")).unwrap() {
        docs.push(page.unwrap().path());
    }
    for path in &docs {
        let doc = &path.display().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        for block in text.split("```yaml\n").skip(1) {
            let block = block.split("```").next().unwrap();
            if !block.starts_with("# yaml-language-server") {
                continue; // a CI recipe, not a bulkheads file
            }
            let parsed = bulkhead_config::parse_file(doc, block).unwrap_or_else(|e| panic!("{e}"));
            assert!(parsed.warnings.is_empty(), "{}", parsed.warnings);
            checked += 1;
        }
    }
    assert!(checked >= 4, "found only {checked} examples");
}

//! Checking a value against the file format's JSON Schema (generated from the serde types,
//! never a second hand-written list): unknown keys at any depth, scalar types and ranges,
//! durations. A wrong value is reported at the value itself, nested or not.
//!
//! Invariant: the schema is generated once per process; a value the walk accepts is only
//! then read into the typed spec.

use std::sync::OnceLock;

use serde_json::Value;

use crate::Duration;
use crate::yaml::{Node, NodeValue, ScalarValue};

use super::Checker;

impl Checker<'_> {
    /// Checks nested keys, durations and scalar types against the schema; false if it
    /// reported anything. A wrong scalar is reported at the value itself, nested or not.
    pub(super) fn walk(&mut self, node: &Node, schema: &Value, path: &str) -> bool {
        if let Some(expected) = scalar_mismatch(node, schema) {
            self.error(
                node.location.clone(),
                path,
                format!("{} is not valid here: expected {expected}", node.describe()),
            );
            return false;
        }
        if is_duration(schema) {
            let problem = match &node.value {
                NodeValue::Scalar(ScalarValue::Str(s)) => s.parse::<Duration>().err(),
                NodeValue::Scalar(ScalarValue::Int(i)) => Some(if *i < 0 {
                    crate::DurationParseError::Negative(i.to_string())
                } else {
                    crate::DurationParseError::MissingUnit(i.to_string())
                }),
                NodeValue::Scalar(ScalarValue::Float(f)) => Some(if *f < 0.0 {
                    crate::DurationParseError::Negative(f.to_string())
                } else {
                    crate::DurationParseError::MissingUnit(f.to_string())
                }),
                _ => None,
            };
            if let Some(problem) = problem {
                self.error(node.location.clone(), path, problem.to_string());
                return false;
            }
            return true;
        }
        let NodeValue::Mapping(entries) = &node.value else {
            return true;
        };
        let Some(properties) = properties(schema) else {
            return true;
        };
        let known: Vec<String> = properties.iter().map(|(k, _)| k.clone()).collect();
        let mut ok = true;
        for (key, value) in entries {
            let key_path = format!("{path}.{}", key.text);
            match properties.iter().find(|(k, _)| *k == key.text) {
                Some((_, sub)) => ok &= self.walk(value, sub, &key_path),
                None => {
                    self.unknown_key(key, &key_path, &known);
                    ok = false;
                }
            }
        }
        ok
    }
}

/// The `$defs` of the generated JSON Schema, made once per process.
fn defs() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA
        .get_or_init(crate::file_format::json_schema)
        .get("$defs")
        .unwrap_or(&Value::Null)
}

/// The schema of one entry.
pub(super) fn spec_schema() -> &'static Value {
    defs().get("BulkheadSpec").unwrap_or(&Value::Null)
}

/// Follows a `$ref` into `$defs`.
fn follow(schema: &Value) -> &Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix("#/$defs/")
            .and_then(|name| defs().get(name))
            .unwrap_or(schema),
        None => schema,
    }
}

/// The schemas a value of `schema` may match: itself, or the members of `anyOf`/`oneOf`.
fn alternatives(schema: &Value) -> Vec<&Value> {
    let schema = follow(schema);
    let mut out = vec![schema];
    for key in ["anyOf", "oneOf"] {
        if let Some(items) = schema.get(key).and_then(Value::as_array) {
            out.extend(items.iter().flat_map(alternatives));
        }
    }
    out
}

/// What a scalar key expects, when `node` is not that: `None` when it fits (or when the
/// schema is not a plain number or boolean, which serde and the rules check instead).
///
/// Whole numbers must be integers that fit the key's type; their range in the message is
/// the schema's, which is the rules' (`max_concurrent_calls`: 1 to 1000000). `.inf`,
/// `-.inf` and `.nan` are never a value: JSON cannot hold them, and letting them through
/// would silently leave the default in place.
fn scalar_mismatch(node: &Node, schema: &Value) -> Option<String> {
    let schema = follow(schema);
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let nullable = types.contains(&"null");
    let expected = if types.contains(&"integer") {
        let bound = |key: &str, default: u64| {
            schema
                .get(key)
                .and_then(Value::as_f64)
                .map_or(default, |b| b as u64)
        };
        let (min, max) = (bound("minimum", 0), bound("maximum", u64::from(u32::MAX)));
        let fits = |i: i64| u32::try_from(i).is_ok();
        match &node.value {
            NodeValue::Scalar(ScalarValue::Int(i)) if fits(*i) => return None,
            NodeValue::Scalar(ScalarValue::Null) if nullable => return None,
            _ => format!("a whole number from {min} to {max}"),
        }
    } else if types.contains(&"number") {
        match &node.value {
            NodeValue::Scalar(ScalarValue::Int(_)) => return None,
            NodeValue::Scalar(ScalarValue::Float(f)) if f.is_finite() => return None,
            NodeValue::Scalar(ScalarValue::Null) if nullable => return None,
            _ => "a number such as 0.8".to_owned(),
        }
    } else if types.contains(&"boolean") {
        match &node.value {
            NodeValue::Scalar(ScalarValue::Bool(_)) => return None,
            NodeValue::Scalar(ScalarValue::Null) if nullable => return None,
            _ => "`true` or `false`".to_owned(),
        }
    } else {
        match &node.value {
            NodeValue::Scalar(ScalarValue::Float(f)) if !f.is_finite() => {
                "a value that is not `.inf` or `.nan`".to_owned()
            }
            _ => return None,
        }
    };
    Some(expected)
}

fn is_duration(schema: &Value) -> bool {
    let mut stack = vec![schema];
    while let Some(s) = stack.pop() {
        if s.get("$ref").and_then(Value::as_str) == Some("#/$defs/Duration") {
            return true;
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(items) = s.get(key).and_then(Value::as_array) {
                stack.extend(items);
            }
        }
    }
    false
}

/// The properties of an object schema (through `$ref`, `anyOf` and `oneOf`).
pub(super) fn properties(schema: &Value) -> Option<Vec<(String, &Value)>> {
    let mut found: Option<Vec<(String, &Value)>> = None;
    for alt in alternatives(schema) {
        if let Some(props) = alt.get("properties").and_then(Value::as_object) {
            let list = found.get_or_insert_with(Vec::new);
            list.extend(props.iter().map(|(k, v)| (k.clone(), v)));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn schema_walk_finds_nested_properties_and_durations() {
        let spec = spec_schema();
        let props = properties(spec).unwrap_or_default();
        let rate_limit = props
            .iter()
            .find(|(k, _)| k == "rate_limit")
            .map(|(_, v)| *v);
        let nested = properties(rate_limit.unwrap_or(&Value::Null)).unwrap_or_default();
        let period = nested
            .iter()
            .find(|(k, _)| k == "refresh_period")
            .map(|(_, v)| *v);
        assert!(period.is_some_and(is_duration));
        let limit = nested
            .iter()
            .find(|(k, _)| k == "limit_for_period")
            .map(|(_, v)| *v);
        assert!(!limit.is_some_and(is_duration));
    }
}

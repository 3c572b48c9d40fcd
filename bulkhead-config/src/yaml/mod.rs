//! YAML to a tree that remembers where every key and value was written: the parse driver
//! and its budgets (the tree is `tree.rs`, its construction from parser events `builder.rs`).
//!
//! # Why saphyr, and why events
//!
//! `serde_yaml` is deprecated and its repository archived, so it is not an option. We use
//! [`saphyr_parser`], the maintained pure-Rust YAML 1.2 parser behind `saphyr`, at the
//! event level rather than through a serde deserializer (`serde-saphyr`, `serde_yaml_ng`):
//! a deserializer stops at the first problem and forgets positions, while we want *every*
//! problem, each with its line and column, and we want to see things serde hides —
//! duplicate keys and alias expansion. Scalars are resolved with saphyr's core-schema rules
//! ([`saphyr::Scalar`]), so `500` is an integer and `"500"` a string, exactly as editors
//! and the JSON Schema see them.
//!
//! # Hostile input
//!
//! The tree is built without recursion, and three budgets are checked while it is built,
//! so huge files, deep nesting and alias bombs are refused quickly with a clear error:
//! [`MAX_SOURCE_BYTES`], [`MAX_DEPTH`] and [`MAX_NODES`] (which counts every node an alias
//! expands to). Invariant: nothing here panics on any input.

mod builder;
mod tree;

pub(crate) use tree::{Key, Node, NodeValue, ScalarValue, SectionIndex};

use std::sync::Arc;

use saphyr_parser::{Event, Parser, ScanError};

use crate::diagnostic::{Diagnostic, Diagnostics, Location, Severity};

use builder::Builder;

/// The largest config file accepted, in bytes (1 MiB). Real configs are a few kilobytes.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;
/// The deepest nesting of mappings and sequences accepted. The format needs 4 levels.
pub const MAX_DEPTH: usize = 32;
/// The most nodes a document may expand to, counting every copy an alias makes.
pub const MAX_NODES: usize = 100_000;

/// Parses one YAML document into a positioned tree.
///
/// Returns the tree together with problems that do not stop parsing (duplicate keys), or
/// the problems that do (syntax errors, exceeded budgets). An empty document is an empty
/// mapping.
pub(crate) fn parse(file: &Arc<str>, source: &str) -> Result<(Node, Diagnostics), Diagnostics> {
    let here = |line: usize, column: usize| Location::new(file.clone(), line, column);
    let fail = |location: Location,
                key_path: String,
                message: String|
     -> Result<(Node, Diagnostics), Diagnostics> {
        Err(vec![Diagnostic::at(
            Severity::Error,
            &location,
            key_path,
            message,
        )]
        .into())
    };
    if source.len() > MAX_SOURCE_BYTES {
        return fail(
            here(1, 1),
            String::new(),
            format!(
                "the file is larger than {MAX_SOURCE_BYTES} bytes (1 MiB), the most a bulkheads \
                 config may be: this is not a config file, or it was generated wrong"
            ),
        );
    }
    let mut builder = Builder::new(file);
    let mut parser = Parser::new_from_str(source);
    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Err(e)) => {
                return fail(scan_location(file, &e), builder.path(), syntax_message(&e));
            }
            Some(Ok(pair)) => pair,
        };
        if matches!(event, Event::StreamEnd) {
            break;
        }
        if let Err((location, message)) = builder.event(event, span) {
            return fail(location, builder.path(), message);
        }
    }
    let root = builder.root.take().unwrap_or_else(|| Node {
        value: NodeValue::Mapping(Vec::new()),
        location: here(1, 1),
    });
    let root = match root.value {
        NodeValue::Scalar(ScalarValue::Null) => Node {
            value: NodeValue::Mapping(Vec::new()),
            location: root.location,
        },
        _ => root,
    };
    Ok((root, builder.duplicates))
}

fn scan_location(file: &Arc<str>, e: &ScanError) -> Location {
    let m = e.marker();
    Location::new(file.clone(), m.line().max(1), m.col() + 1)
}

fn syntax_message(e: &ScanError) -> String {
    format!("this is not valid YAML: {}", e.info())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(source: &str) -> Node {
        let (root, problems) =
            parse(&Arc::from("t.yaml"), source).unwrap_or_else(|e| panic!("{e}"));
        assert!(problems.is_empty(), "{problems}");
        root
    }

    #[test]
    fn keys_and_values_keep_their_own_line_and_column() {
        let root = parse_ok("bulkheads:\n  payment: { kind: semaphore }\n");
        let (key, value) = root.find(&["bulkheads", "payment", "kind"]).unwrap();
        assert_eq!((key.location.line, key.location.column), (2, 14));
        assert_eq!((value.location.line, value.location.column), (2, 20));
    }

    #[test]
    fn scalars_follow_the_yaml_1_2_core_schema() {
        let root = parse_ok("a: 500\nb: \"500\"\nc: true\nd: ~\ne: 0.5\nf: 500ms\n");
        let value = |k: &str| root.get(k).map(|(_, n)| n.value.clone());
        assert_eq!(value("a"), Some(NodeValue::Scalar(ScalarValue::Int(500))));
        assert_eq!(
            value("b"),
            Some(NodeValue::Scalar(ScalarValue::Str("500".into())))
        );
        assert_eq!(value("c"), Some(NodeValue::Scalar(ScalarValue::Bool(true))));
        assert_eq!(value("d"), Some(NodeValue::Scalar(ScalarValue::Null)));
        assert_eq!(value("e"), Some(NodeValue::Scalar(ScalarValue::Float(0.5))));
        assert_eq!(
            value("f"),
            Some(NodeValue::Scalar(ScalarValue::Str("500ms".into())))
        );
    }

    #[test]
    fn an_empty_document_is_an_empty_mapping() {
        assert_eq!(parse_ok("").value, NodeValue::Mapping(Vec::new()));
        assert_eq!(
            parse_ok("# only a comment\n").value,
            NodeValue::Mapping(Vec::new())
        );
    }

    #[test]
    fn duplicate_keys_are_reported_with_their_full_path_and_first_line() {
        let (_, problems) = parse(&Arc::from("t.yaml"), "bulkheads:\n  a: 1\n  a: 2\n").unwrap();
        let only = problems.iter().next().unwrap();
        assert_eq!(only.key_path, "bulkheads.a");
        assert!(only.message.contains("first written at line 2"));
    }
}

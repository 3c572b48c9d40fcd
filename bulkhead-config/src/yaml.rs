//! YAML to a tree that remembers where every key and value was written.
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

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use saphyr::Scalar;
use saphyr_parser::{Event, Parser, ScanError, Span};

use crate::diagnostic::{Diagnostic, Diagnostics, Location, Severity};

/// The largest config file accepted, in bytes (1 MiB). Real configs are a few kilobytes.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;
/// The deepest nesting of mappings and sequences accepted. The format needs 4 levels.
pub const MAX_DEPTH: usize = 32;
/// The most nodes a document may expand to, counting every copy an alias makes.
pub const MAX_NODES: usize = 100_000;

/// A scalar value, resolved with the YAML 1.2 core schema.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ScalarValue {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// A node of the document with the position it was written at.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    pub value: NodeValue,
    pub location: Location,
}

/// The shape of a [`Node`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum NodeValue {
    Scalar(ScalarValue),
    Sequence(Vec<Node>),
    /// Entries in source order; duplicates are kept here and reported by [`parse`].
    Mapping(Vec<(Key, Node)>),
}

/// A mapping key: its text and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Key {
    pub text: String,
    pub location: Location,
}

impl Node {
    /// The entry for `key` in a mapping (the last one if it is duplicated).
    pub(crate) fn get(&self, key: &str) -> Option<&(Key, Node)> {
        match &self.value {
            NodeValue::Mapping(entries) => entries.iter().rev().find(|(k, _)| k.text == key),
            _ => None,
        }
    }

    /// The node at a key path, and the key that names it.
    pub(crate) fn find(&self, path: &[&str]) -> Option<(&Key, &Node)> {
        let (first, rest) = path.split_first()?;
        let (key, node) = self.get(first)?;
        if rest.is_empty() {
            Some((key, node))
        } else {
            node.find(rest)
        }
    }

    /// The value as JSON (last duplicate wins, as serde would see it).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match &self.value {
            NodeValue::Scalar(ScalarValue::Null) => Value::Null,
            NodeValue::Scalar(ScalarValue::Bool(b)) => Value::Bool(*b),
            NodeValue::Scalar(ScalarValue::Int(i)) => Value::from(*i),
            NodeValue::Scalar(ScalarValue::Float(f)) => {
                serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
            }
            NodeValue::Scalar(ScalarValue::Str(s)) => Value::String(s.clone()),
            NodeValue::Sequence(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            NodeValue::Mapping(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.text.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// How the value looks in a message: `500`, `"500"`, `a mapping`.
    pub(crate) fn describe(&self) -> String {
        match &self.value {
            NodeValue::Scalar(ScalarValue::Str(s)) => format!("\"{s}\""),
            NodeValue::Scalar(ScalarValue::Null) => "nothing".to_owned(),
            // JSON has no infinity or NaN: show them the way YAML writes them.
            NodeValue::Scalar(ScalarValue::Float(f)) if f.is_nan() => "`.nan`".to_owned(),
            NodeValue::Scalar(ScalarValue::Float(f)) if f.is_infinite() => {
                if *f > 0.0 { "`.inf`" } else { "`-.inf`" }.to_owned()
            }
            NodeValue::Scalar(_) => self.to_json().to_string(),
            NodeValue::Sequence(_) => "a list".to_owned(),
            NodeValue::Mapping(_) => "a mapping".to_owned(),
        }
    }

    fn size(&self) -> usize {
        match &self.value {
            NodeValue::Scalar(_) => 1,
            NodeValue::Sequence(items) => 1 + items.iter().map(Node::size).sum::<usize>(),
            NodeValue::Mapping(entries) => {
                1 + entries.iter().map(|(_, v)| 1 + v.size()).sum::<usize>()
            }
        }
    }
}

/// Where every entry of the document's sections is (`bulkheads.NAME`, `templates.NAME`),
/// so finding one is a hash lookup instead of a scan of a section that may hold tens of
/// thousands of names. Duplicates resolve as [`Node::get`] does: the last one wins.
#[derive(Clone, Debug, Default)]
pub(crate) struct SectionIndex {
    /// Position of each section among the root's entries.
    sections: HashMap<String, usize>,
    /// Position of each (section, name) among its section's entries.
    entries: HashMap<(String, String), usize>,
}

impl SectionIndex {
    pub(crate) fn new(root: &Node) -> Self {
        let mut index = SectionIndex::default();
        let NodeValue::Mapping(sections) = &root.value else {
            return index;
        };
        for (i, (key, _)) in sections.iter().enumerate() {
            index.sections.insert(key.text.clone(), i);
        }
        for (section, &i) in &index.sections {
            if let Some((
                _,
                Node {
                    value: NodeValue::Mapping(items),
                    ..
                },
            )) = sections.get(i)
            {
                for (j, (name, _)) in items.iter().enumerate() {
                    index
                        .entries
                        .insert((section.clone(), name.text.clone()), j);
                }
            }
        }
        index
    }

    /// [`Node::find`] on `root` (the node this index was built from), through the index for
    /// the section and the name.
    pub(crate) fn find<'a>(&self, root: &'a Node, path: &[&str]) -> Option<(&'a Key, &'a Node)> {
        let NodeValue::Mapping(sections) = &root.value else {
            return None;
        };
        let (section, rest) = path.split_first()?;
        let (section_key, section_node) = sections.get(*self.sections.get(*section)?)?;
        let Some((name, rest)) = rest.split_first() else {
            return Some((section_key, section_node));
        };
        let NodeValue::Mapping(items) = &section_node.value else {
            return None;
        };
        let at = self
            .entries
            .get(&((*section).to_owned(), (*name).to_owned()))?;
        let (key, node) = items.get(*at)?;
        if rest.is_empty() {
            Some((key, node))
        } else {
            node.find(rest)
        }
    }
}

/// A collection being built: its location, anchor, and the children so far.
enum Frame {
    Sequence {
        location: Location,
        anchor: usize,
        items: Vec<Node>,
    },
    Mapping {
        location: Location,
        anchor: usize,
        entries: Vec<(Key, Node)>,
        pending_key: Option<Key>,
    },
}

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
    let mut builder = Builder {
        file: file.clone(),
        stack: Vec::new(),
        anchors: HashMap::new(),
        nodes: 0,
        root: None,
        documents: 0,
        duplicates: Diagnostics::new(),
    };
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

type BuildError = (Location, String);

struct Builder {
    file: Arc<str>,
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    nodes: usize,
    root: Option<Node>,
    documents: usize,
    duplicates: Diagnostics,
}

impl Builder {
    fn location(&self, span: &Span) -> Location {
        Location::new(
            self.file.clone(),
            span.start.line().max(1),
            span.start.col() + 1,
        )
    }

    fn count(&mut self, n: usize, location: &Location) -> Result<(), BuildError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            return Err((
                location.clone(),
                format!(
                    "the document expands to more than {MAX_NODES} nodes (aliases count every \
                     copy they make): refusing it; a bulkheads config needs far fewer — \
                     write the values out instead of nesting aliases"
                ),
            ));
        }
        Ok(())
    }

    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), BuildError> {
        let location = self.location(&span);
        match event {
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err((
                        location,
                        "a second YAML document (`---`): put every bulkhead in one document"
                            .to_owned(),
                    ));
                }
                Ok(())
            }
            Event::Scalar(text, style, anchor, tag) => {
                self.count(1, &location)?;
                let value =
                    match Scalar::parse_from_cow_and_metadata(text.clone(), style, tag.as_ref()) {
                        Some(Scalar::Null) => ScalarValue::Null,
                        Some(Scalar::Boolean(b)) => ScalarValue::Bool(b),
                        Some(Scalar::Integer(i)) => ScalarValue::Int(i),
                        Some(Scalar::FloatingPoint(f)) => ScalarValue::Float(f.into_inner()),
                        Some(Scalar::String(s)) => ScalarValue::Str(s.into_owned()),
                        None => {
                            return Err((
                                location,
                                format!(
                                    "`{}` does not match its tag `{}`: remove the tag",
                                    text,
                                    tag.as_ref()
                                        .map(Cow::as_ref)
                                        .map(ToString::to_string)
                                        .unwrap_or_default()
                                ),
                            ));
                        }
                    };
                self.complete(
                    Node {
                        value: NodeValue::Scalar(value),
                        location,
                    },
                    anchor,
                )
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                self.count(1, &location)?;
                if self.stack.len() >= MAX_DEPTH {
                    return Err((
                        location,
                        format!(
                            "nested more than {MAX_DEPTH} levels deep: a bulkheads config needs \
                             4 (bulkheads → name → key → value)"
                        ),
                    ));
                }
                let frame = if matches!(event, Event::SequenceStart(..)) {
                    Frame::Sequence {
                        location,
                        anchor,
                        items: Vec::new(),
                    }
                } else {
                    Frame::Mapping {
                        location,
                        anchor,
                        entries: Vec::new(),
                        pending_key: None,
                    }
                };
                self.stack.push(frame);
                Ok(())
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Sequence {
                    location,
                    anchor,
                    items,
                }) => self.complete(
                    Node {
                        value: NodeValue::Sequence(items),
                        location,
                    },
                    anchor,
                ),
                Some(Frame::Mapping {
                    location,
                    anchor,
                    entries,
                    ..
                }) => {
                    self.report_duplicates(&entries);
                    self.complete(
                        Node {
                            value: NodeValue::Mapping(entries),
                            location,
                        },
                        anchor,
                    )
                }
                None => Ok(()),
            },
            Event::Alias(id) => {
                let Some(node) = self.anchors.get(&id) else {
                    return Err((location, "an alias to an unknown anchor".to_owned()));
                };
                let node = node.clone();
                self.count(node.size(), &location)?;
                self.complete(node, 0)
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => Ok(()),
        }
    }

    fn complete(&mut self, node: Node, anchor: usize) -> Result<(), BuildError> {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => {
                self.root = Some(node);
                Ok(())
            }
            Some(Frame::Sequence { items, .. }) => {
                items.push(node);
                Ok(())
            }
            Some(Frame::Mapping {
                entries,
                pending_key,
                ..
            }) => match pending_key.take() {
                Some(key) => {
                    entries.push((key, node));
                    Ok(())
                }
                None => {
                    let text = match node.value {
                        NodeValue::Scalar(ScalarValue::Str(s)) => s,
                        NodeValue::Scalar(ScalarValue::Null) => String::new(),
                        NodeValue::Scalar(other) => Node {
                            value: NodeValue::Scalar(other),
                            location: node.location.clone(),
                        }
                        .to_json()
                        .to_string(),
                        _ => {
                            return Err((
                                node.location,
                                "a mapping key must be a plain name, not a list or mapping"
                                    .to_owned(),
                            ));
                        }
                    };
                    *pending_key = Some(Key {
                        text,
                        location: node.location,
                    });
                    Ok(())
                }
            },
        }
    }

    /// The key path of what is being built: the pending keys of the open collections.
    fn path(&self) -> String {
        let mut parts = Vec::new();
        for frame in &self.stack {
            match frame {
                Frame::Mapping {
                    pending_key: Some(key),
                    ..
                } => parts.push(key.text.clone()),
                Frame::Sequence { items, .. } => parts.push(items.len().to_string()),
                Frame::Mapping { .. } => {}
            }
        }
        parts.join(".")
    }

    fn report_duplicates(&mut self, entries: &[(Key, Node)]) {
        let parent = self.path();
        let mut first: HashMap<&str, &Location> = HashMap::new();
        for (key, _) in entries {
            if let Some(earlier) = first.get(key.text.as_str()) {
                self.duplicates.push(Diagnostic::at(
                    Severity::Error,
                    &key.location,
                    if parent.is_empty() {
                        key.text.clone()
                    } else {
                        format!("{parent}.{}", key.text)
                    },
                    format!(
                        "duplicate key `{}` (first written at line {}): YAML keeps only the \
                         last one, so remove one of them",
                        key.text, earlier.line
                    ),
                ));
            } else {
                first.insert(&key.text, &key.location);
            }
        }
    }
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

//! Building the tree from saphyr's parser events, without recursion: collections on an
//! explicit stack, anchors and aliases resolved as they come, duplicate keys reported, and
//! the node and depth budgets checked at every step.
//!
//! Invariant: nothing here panics on any input; every budget is checked before the memory
//! it guards is used.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use saphyr::Scalar;
use saphyr_parser::{Event, Span};

use crate::diagnostic::{Diagnostic, Diagnostics, Location, Severity};

use super::tree::{Key, Node, NodeValue, ScalarValue};
use super::{MAX_DEPTH, MAX_NODES};

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

type BuildError = (Location, String);

pub(super) struct Builder {
    file: Arc<str>,
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    nodes: usize,
    pub(super) root: Option<Node>,
    documents: usize,
    pub(super) duplicates: Diagnostics,
}

impl Builder {
    pub(super) fn new(file: &Arc<str>) -> Self {
        Builder {
            file: file.clone(),
            stack: Vec::new(),
            anchors: HashMap::new(),
            nodes: 0,
            root: None,
            documents: 0,
            duplicates: Diagnostics::new(),
        }
    }

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

    pub(super) fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), BuildError> {
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
    pub(super) fn path(&self) -> String {
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

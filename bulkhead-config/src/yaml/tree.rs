//! The positioned tree a YAML document becomes: every key and value with the file, line
//! and column it was written at, and an index of a config's entries by section and name.
//!
//! Invariant: lookups are hash lookups or walks of a known path, never scans whose cost
//! depends on how many entries a hostile file has.

use std::collections::HashMap;

use crate::diagnostic::Location;

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

    pub(super) fn size(&self) -> usize {
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

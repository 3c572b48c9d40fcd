//! Placing a merged value back where it was written: the file, line and column of a YAML
//! layer, the declaration site of the program's declarations, or the environment variable
//! that set it, so every diagnostic of a layered config names its source.

use std::sync::Arc;

use figment::value::{Tag, Value as FigmentValue};

use crate::diagnostic::Location;
use crate::yaml::{Key, Node, NodeValue, ScalarValue};

use super::env::{ENV_LAYER, ENV_PREFIX, env_location, env_var_name};
use super::{DECLARED_LAYER, Layer, Layers};

impl Layers {
    pub(super) fn first_root_location(&self) -> Option<Location> {
        self.layers.iter().find_map(|l| match l {
            Layer::Yaml { root, .. } => Some(root.location.clone()),
            Layer::Declared { .. } | Layer::Env => None,
        })
    }

    /// The file of the last YAML layer (a deploy over the others), if any.
    pub(super) fn last_yaml_file(&self) -> Option<Arc<str>> {
        self.layers.iter().rev().find_map(|l| match l {
            Layer::Yaml { root, .. } => Some(root.location.file.clone()),
            Layer::Declared { .. } | Layer::Env => None,
        })
    }

    /// Where the value at `path` with figment tag `tag` was written: (key, value) locations.
    pub(super) fn place(&self, path: &[&str], tag: Tag) -> (Location, Location) {
        let layer_name = self
            .figment
            .get_metadata(tag)
            .map(|m| m.name.to_string())
            .unwrap_or_default();
        if layer_name == ENV_LAYER {
            let var = match path {
                ["bulkheads", name, key @ ..] => env_var_name(name, key),
                _ => ENV_PREFIX.to_owned(),
            };
            let location = env_location(&var);
            return (location.clone(), location);
        }
        for layer in &self.layers {
            match layer {
                Layer::Yaml { name, root, index } if **name == *layer_name => {
                    return match index.find(root, path) {
                        Some((key, node)) => (key.location.clone(), node.location.clone()),
                        None => (root.location.clone(), root.location.clone()),
                    };
                }
                Layer::Declared { name, sites } if **name == *layer_name => {
                    let site = match path {
                        ["bulkheads", bulkhead, ..] => sites.get(*bulkhead).cloned(),
                        _ => None,
                    };
                    let site =
                        site.unwrap_or_else(|| Location::new(Arc::from(DECLARED_LAYER), 0, 0));
                    return (site.clone(), site);
                }
                _ => {}
            }
        }
        let unknown = Location::new(Arc::from(layer_name.as_str()), 0, 0);
        (unknown.clone(), unknown)
    }

    pub(super) fn node_entry(&self, path: &[&str], key: &str, value: &FigmentValue) -> (Key, Node) {
        let (key_location, value_location) = self.place(path, value.tag());
        let node_value = match value {
            FigmentValue::Dict(_, dict) => NodeValue::Mapping(
                dict.iter()
                    .map(|(k, v)| {
                        let mut sub = path.to_vec();
                        sub.push(k);
                        self.node_entry(&sub, k, v)
                    })
                    .collect(),
            ),
            FigmentValue::Array(_, items) => NodeValue::Sequence(
                items
                    .iter()
                    .map(|v| Node {
                        value: NodeValue::Scalar(scalar(v)),
                        location: value_location.clone(),
                    })
                    .collect(),
            ),
            other => NodeValue::Scalar(scalar(other)),
        };
        (
            Key {
                text: key.to_owned(),
                location: key_location,
            },
            Node {
                value: node_value,
                location: value_location,
            },
        )
    }
}

fn scalar(value: &FigmentValue) -> ScalarValue {
    match value {
        FigmentValue::String(_, s) => ScalarValue::Str(s.clone()),
        FigmentValue::Char(_, c) => ScalarValue::Str(c.to_string()),
        FigmentValue::Bool(_, b) => ScalarValue::Bool(*b),
        FigmentValue::Num(_, n) => {
            let whole = n
                .to_u128()
                .map(i128::try_from)
                .and_then(Result::ok)
                .or_else(|| n.to_i128());
            match (whole.map(i64::try_from), n.to_f64()) {
                (Some(Ok(i)), _) => ScalarValue::Int(i),
                (Some(Err(_)), _) => ScalarValue::Float(whole.unwrap_or_default() as f64),
                (None, Some(f)) => ScalarValue::Float(f),
                (None, None) => ScalarValue::Null,
            }
        }
        FigmentValue::Empty(..) => ScalarValue::Null,
        FigmentValue::Dict(..) | FigmentValue::Array(..) => ScalarValue::Null,
    }
}

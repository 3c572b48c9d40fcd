//! The environment layer: `BULKHEAD_<NAME>__<KEY>[__<SUBKEY>]` variables mapped to key
//! paths of declared bulkheads, and the variable name for a key path (the inverse, used
//! to place a diagnostic on the variable that set the value).
//!
//! Invariant: a variable is applied only when its name part matches exactly one bulkhead;
//! otherwise it is an error naming the variable, with a "did you mean" where one is close.

use std::sync::Arc;

use figment::value::{Dict, Map, Value as FigmentValue};
use figment::{Metadata, Profile, Provider};

use crate::check;
use crate::diagnostic::{Diagnostic, Location, Severity};

use super::{Layer, Layers};

/// The prefix of every environment variable that overrides a setting.
pub const ENV_PREFIX: &str = "BULKHEAD_";

/// The `BULKHEAD_…` variables, already mapped to key paths.
struct EnvProvider {
    /// (dotted key path, value as written)
    values: Vec<(String, String)>,
}

/// The metadata name of the environment layer.
pub(super) const ENV_LAYER: &str = "environment";

impl Provider for EnvProvider {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENV_LAYER)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut dict = Dict::new();
        for (path, raw) in &self.values {
            let value: FigmentValue = raw.parse().unwrap_or_else(|_| raw.clone().into());
            if let Some(nested) = figment::util::nest(path, value).into_dict() {
                dict = merge(dict, nested);
            }
        }
        Ok(Profile::Default.collect(dict))
    }
}

fn merge(mut base: Dict, over: Dict) -> Dict {
    for (k, v) in over {
        let merged = match (base.remove(&k), v) {
            (Some(FigmentValue::Dict(t, a)), FigmentValue::Dict(_, b)) => {
                FigmentValue::Dict(t, merge(a, b))
            }
            (_, v) => v,
        };
        base.insert(k, merged);
    }
    base
}

/// The variable that sets `key` (such as `["max_threads"]`) of bulkhead `name`.
///
/// ```
/// assert_eq!(
///     bulkhead::config::env_var_name("product-detail", &["on_full", "wait"]),
///     "BULKHEAD_PRODUCT_DETAIL__ON_FULL__WAIT"
/// );
/// ```
pub fn env_var_name(name: &str, key: &[&str]) -> String {
    let mut out = format!("{ENV_PREFIX}{}", env_part(name));
    for k in key {
        out.push_str("__");
        out.push_str(&env_part(k));
    }
    out
}

fn env_part(s: &str) -> String {
    s.to_ascii_uppercase().replace('-', "_")
}

/// The error of a `BULKHEAD_…` variable whose name or value (`what`) is not UTF-8.
fn not_utf8(var: &str, what: &str) -> Diagnostic {
    let message = if what == "name" {
        format!(
            "the name of `{var}` is not UTF-8 text (`\u{fffd}` marks each byte that is not), \
             so it names no bulkhead or key: write it with upper-case letters, digits and \
             `_` only, or unset it"
        )
    } else {
        format!(
            "the value of `{var}` is not UTF-8 text, so it cannot be read as a setting: set \
             it as UTF-8 text, or unset it"
        )
    };
    Diagnostic::at(Severity::Error, &env_location(var), "", message)
}

pub(super) fn env_location(var: &str) -> Location {
    Location::new(Arc::from(format!("environment variable {var}")), 0, 0)
}

impl Layers {
    /// Adds the process's `BULKHEAD_…` environment variables on top. One whose name or
    /// value is not UTF-8 is an error naming it (written with each invalid byte as `�`),
    /// never skipped: it was meant as config and cannot be read as such.
    pub fn env(self) -> Self {
        let mut unreadable = Vec::new();
        let mut vars = Vec::new();
        for (name, value) in std::env::vars_os() {
            if !name.as_encoded_bytes().starts_with(ENV_PREFIX.as_bytes()) {
                continue;
            }
            match (name.into_string(), value.into_string()) {
                (Ok(name), Ok(value)) => vars.push((name, value)),
                (Ok(name), Err(_)) => unreadable.push(not_utf8(&name, "value")),
                (Err(name), _) => unreadable.push(not_utf8(&name.to_string_lossy(), "name")),
            }
        }
        let mut layers = self.env_vars(vars);
        layers.problems.extend(unreadable.into());
        layers
    }

    /// Adds the given variables as the environment layer (tests, or a captured environment).
    pub fn env_vars(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        let names = self.bulkhead_names();
        let mut values = Vec::new();
        for (var, value) in vars {
            let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let Some((name_part, key_part)) = rest.split_once("__") else {
                continue;
            };
            let matches: Vec<&String> = names.iter().filter(|n| env_part(n) == name_part).collect();
            let location = env_location(&var);
            match matches.as_slice() {
                [name] => {
                    let key = key_part.to_ascii_lowercase().replace("__", ".");
                    values.push((format!("bulkheads.{name}.{key}"), value));
                }
                [] => {
                    let candidates: Vec<String> = names.iter().map(|n| env_part(n)).collect();
                    let hint = match check::did_you_mean(name_part, &candidates) {
                        Some(best) => format!("; did you mean `{ENV_PREFIX}{best}__{key_part}`?"),
                        None => String::new(),
                    };
                    self.problems.push(Diagnostic::at(
                        Severity::Error,
                        &location,
                        "",
                        format!(
                            "`{var}` names no declared bulkhead (the name part is `{name_part}`: \
                             upper case, `-` written `_`){hint}"
                        ),
                    ));
                }
                several => self.problems.push(Diagnostic::at(
                    Severity::Error,
                    &location,
                    "",
                    format!(
                        "`{var}` could mean {}: rename one of them so their names differ \
                         by more than `-` and `_`",
                        several
                            .iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(" or ")
                    ),
                )),
            }
        }
        self.figment = self.figment.merge(EnvProvider { values });
        self.layers.push(Layer::Env);
        self
    }
}

//! Layering with figment: embedded defaults < deploy files < `BULKHEAD_…` environment.
//!
//! The code's `bulkheads.yaml` (embedded in the binary by `#[bulkhead]`) is the bottom
//! layer. Deploy files and environment variables go on top; figment merges them key by
//! key and remembers which layer each value came from, so every diagnostic names the file
//! (with line and column) or the environment variable of the bad value.
//!
//! # Environment variables
//!
//! `BULKHEAD_<NAME>__<KEY>[__<SUBKEY>]=<value>`: the bulkhead's name in upper case with
//! `-` written `_` (shells cannot set names with `-`), then the key path, each part
//! separated by a double underscore. For `product-detail`:
//!
//! ```text
//! BULKHEAD_PRODUCT_DETAIL__MAX_THREADS=60
//! BULKHEAD_PRODUCT_DETAIL__ON_FULL__WAIT=500ms
//! BULKHEAD_PAYMENT__RATE_LIMIT__LIMIT_FOR_PERIOD=200
//! ```
//!
//! Values are read like YAML scalars (`60` is a number, `500ms` a string). Variables that
//! start with `BULKHEAD_` but have no `__` (such as `BULKHEAD_CONFIG`) are left alone;
//! one that names no declared bulkhead is an error with a suggestion.
//!
//! # What a layer may do
//!
//! Change sizes of declared bulkheads and templates, and add bulkheads (reported by
//! [`crate::check_against`] as warnings). It may not change a declared bulkhead's kind.
//! Layers merge key by key, nested settings included: an environment variable can change
//! just `rate_limit.limit_for_period`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use figment::value::{Dict, Map, Tag, Value as FigmentValue};
use figment::{Figment, Metadata, Profile, Provider};

use crate::diagnostic::{Diagnostic, Diagnostics, Location, Severity};
use crate::yaml::{Key, Node, NodeValue, ScalarValue, SectionIndex};
use crate::{Config, Parsed, check};

/// The prefix of every environment variable that overrides a setting.
pub const ENV_PREFIX: &str = "BULKHEAD_";

/// A stack of config layers, lowest first.
///
/// ```
/// use bulkhead_config::Layers;
/// let config = Layers::new("bulkheads.yaml", "bulkheads:\n  product-detail: { kind: thread-pool, max_threads: 40 }\n")
///     .yaml("deploy/prod.yaml", "bulkheads:\n  product-detail: { queue_capacity: 300 }\n")
///     .unwrap()
///     .env_vars([("BULKHEAD_PRODUCT_DETAIL__MAX_THREADS".to_owned(), "60".to_owned())])
///     .extract()
///     .unwrap();
/// let bulkhead_config::Limits::ThreadPool(pool) = &config.bulkheads["product-detail"].limits else { panic!() };
/// assert_eq!((pool.max_threads, pool.queue_capacity), (60, 300));
/// ```
pub struct Layers {
    figment: Figment,
    layers: Vec<Layer>,
    declared: Result<Parsed, Diagnostics>,
    problems: Diagnostics,
    /// Names a deploy gives that are not declared: errors instead of warnings.
    strict: bool,
}

impl std::fmt::Debug for Layers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .layers
            .iter()
            .map(|layer| match layer {
                Layer::Declared { name, .. } | Layer::Yaml { name, .. } => &**name,
                Layer::Env => ENV_LAYER,
            })
            .collect();
        f.debug_struct("Layers")
            .field("layers", &names)
            .field("strict", &self.strict)
            .finish_non_exhaustive()
    }
}

/// One layer, kept to place diagnostics.
enum Layer {
    /// The program's declarations (typed, resolved), with where each is declared.
    Declared {
        name: Arc<str>,
        sites: BTreeMap<String, Location>,
    },
    Yaml {
        name: Arc<str>,
        root: Node,
        index: SectionIndex,
    },
    Env,
}

/// The name of the layer [`Layers::over_declarations`] starts from, in diagnostics.
const DECLARED_LAYER: &str = "the program's declarations";

/// A YAML layer as a figment provider (figment's own YAML provider uses the deprecated
/// `serde_yaml`; this one reads through [`crate::yaml`]).
struct YamlProvider {
    name: Arc<str>,
    value: serde_json::Value,
}

impl Provider for YamlProvider {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.to_string())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let dict = FigmentValue::serialize(&self.value)?
            .into_dict()
            .unwrap_or_default();
        Ok(Profile::Default.collect(dict))
    }
}

/// The `BULKHEAD_…` variables, already mapped to key paths.
struct EnvProvider {
    /// (dotted key path, value as written)
    values: Vec<(String, String)>,
}

/// The metadata name of the environment layer.
const ENV_LAYER: &str = "environment";

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
///     bulkhead_config::env_var_name("product-detail", &["on_full", "wait"]),
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

impl Layers {
    /// Starts from the config one crate declares, as YAML (its `bulkheads.yaml`): what
    /// `bulkhead check --against` does. Problems in it are reported by
    /// [`Layers::extract`]. A program checks its deploys against every crate's
    /// declarations with [`Layers::over_declarations`] instead.
    pub fn new(name_of_embedded: &str, embedded_yaml: &str) -> Self {
        let layers = Layers {
            figment: Figment::new(),
            layers: Vec::new(),
            declared: crate::parse_file(name_of_embedded, embedded_yaml),
            problems: Diagnostics::new(),
            strict: false,
        };
        match layers.add_yaml(name_of_embedded, embedded_yaml) {
            Ok(layers) => layers,
            Err(problems) => Layers {
                figment: Figment::new(),
                layers: Vec::new(),
                declared: Err(problems.clone()),
                problems,
                strict: false,
            },
        }
    }

    /// Starts from bulkheads declared as typed, resolved config — what a program's
    /// `#[bulkhead]` functions declare — with, for each name, where it is declared
    /// (`"bulkheads.yaml:4:3 (crate geo-client)"`, shown in messages about it).
    ///
    /// Deploy layers over it may give sizes only (the kind comes from the declaration). A
    /// name that nothing declares is a warning with a suggestion, and is left out of the
    /// result; [`Layers::strict`] makes it an error. Templates in a deploy file serve that
    /// file's own entries (`extends`): declarations were resolved when their crate was
    /// compiled, so a deploy sizes a declared bulkhead by its name.
    ///
    /// ```
    /// use bulkhead_config::{BulkheadConfig, Config, Layers, Limits, ThreadPoolConfig};
    ///
    /// let mut declared = Config::default();
    /// declared.bulkheads.insert("pdf-render".into(), BulkheadConfig::thread_pool(ThreadPoolConfig::default()));
    /// let deploy = "bulkheads:\n  pdf-render: { max_threads: 8 }\n  pdf-rander: { max_threads: 3 }\n";
    /// let parsed = Layers::over_declarations(&declared, |_| Some("bulkheads.yaml:2:3".into()))
    ///     .yaml("deploy/prod.yaml", deploy)
    ///     .unwrap()
    ///     .resolve()
    ///     .unwrap();
    /// assert!(matches!(&parsed.config.bulkheads["pdf-render"].limits, Limits::ThreadPool(p) if p.max_threads == 8));
    /// assert!(!parsed.config.bulkheads.contains_key("pdf-rander"));
    /// assert!(parsed.warnings.to_string().contains("did you mean `pdf-render`?"));
    /// ```
    pub fn over_declarations(
        declared: &Config,
        declared_at: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let layer_name: Arc<str> = Arc::from(DECLARED_LAYER);
        let sites: BTreeMap<String, Location> = declared
            .bulkheads
            .keys()
            .map(|name| {
                let file = declared_at(name).unwrap_or_else(|| DECLARED_LAYER.to_owned());
                (name.clone(), Location::new(Arc::from(file), 0, 0))
            })
            .collect();
        let value = match serde_json::to_value(declared) {
            Ok(value) => value,
            Err(e) => {
                let problem = Diagnostic::unplaced(
                    Severity::Error,
                    DECLARED_LAYER,
                    "",
                    format!("the declarations cannot be layered: {e}"),
                );
                return Layers {
                    figment: Figment::new(),
                    layers: Vec::new(),
                    declared: Err(Diagnostics::from(vec![problem.clone()])),
                    problems: Diagnostics::from(vec![problem]),
                    strict: false,
                };
            }
        };
        Layers {
            figment: Figment::new().merge(YamlProvider {
                name: layer_name.clone(),
                value,
            }),
            declared: Ok(Parsed::declared(declared.clone(), sites.clone())),
            layers: vec![Layer::Declared {
                name: layer_name,
                sites,
            }],
            problems: Diagnostics::new(),
            strict: false,
        }
    }

    /// Makes a deploy's names that nothing declares errors instead of warnings (a
    /// deploy for another service, or a typo, is refused rather than ignored).
    #[must_use]
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    /// Adds a deploy file on top. An unreadable file or invalid YAML is an error now;
    /// other problems are reported by [`Layers::extract`], all at once.
    pub fn file(self, path: impl AsRef<Path>) -> Result<Self, Diagnostics> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let source = crate::read_source(path).map_err(|e| {
            Diagnostics::from(vec![Diagnostic::unplaced(
                Severity::Error,
                name.clone(),
                "",
                format!("cannot read the deploy file: {e}"),
            )])
        })?;
        self.yaml(&name, &source)
    }

    /// Adds a deploy layer from YAML text, named `name` in messages.
    pub fn yaml(self, name: &str, source: &str) -> Result<Self, Diagnostics> {
        self.add_yaml(name, source)
    }

    fn add_yaml(mut self, name: &str, source: &str) -> Result<Self, Diagnostics> {
        let name: Arc<str> = Arc::from(name);
        let (root, problems) = crate::yaml::parse(&name, source)?;
        self.problems.extend(problems);
        if !matches!(root.value, NodeValue::Mapping(_)) {
            // Figment layers are mappings; anything else would silently add nothing.
            self.problems.push(Diagnostic::at(
                Severity::Error,
                &root.location,
                "",
                format!(
                    "the document is {}, but a config layer is a mapping with `templates` \
                     and `bulkheads`",
                    root.describe()
                ),
            ));
            return Ok(self);
        }
        if self
            .layers
            .iter()
            .any(|l| matches!(l, Layer::Yaml { name: n, .. } if *n == name))
        {
            // Figment tells layers apart by name; the same file twice adds nothing.
            return Ok(self);
        }
        self.figment = self.figment.merge(YamlProvider {
            name: name.clone(),
            value: root.to_json(),
        });
        let index = SectionIndex::new(&root);
        self.layers.push(Layer::Yaml { name, root, index });
        Ok(self)
    }

    /// Adds the process's `BULKHEAD_…` environment variables on top. Variables whose name
    /// or value is not Unicode cannot be config and are skipped.
    pub fn env(self) -> Self {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        self.env_vars(vars)
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

    fn bulkhead_names(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for layer in &self.layers {
            match layer {
                Layer::Declared { sites, .. } => names.extend(sites.keys().cloned()),
                Layer::Yaml { root, .. } => {
                    if let Some((_, NodeValue::Mapping(entries))) =
                        root.get("bulkheads").map(|(k, n)| (k, &n.value))
                    {
                        names.extend(entries.iter().map(|(k, _)| k.text.clone()));
                    }
                }
                Layer::Env => {}
            }
        }
        names
    }

    /// Merges the layers and resolves them, with the lints' warnings and the check against
    /// the declared config (a kind change is an error, an undeclared name a warning).
    pub fn resolve(&self) -> Result<Parsed, Diagnostics> {
        let declared = self.declared.as_ref().map_err(Clone::clone)?;
        let mut problems = self.problems.clone();
        let data = Provider::data(&self.figment).map_err(|e| {
            Diagnostics::from(vec![Diagnostic::unplaced(
                Severity::Error,
                "config layers",
                "",
                e.to_string(),
            )])
        })?;
        let mut dict = data.get(&Profile::Default).cloned().unwrap_or_default();
        problems.extend(self.take_undeclared(&mut dict, &declared.config));
        let root_location = Location::new(Arc::from(ENV_LAYER), 0, 0);
        let root = Node {
            value: NodeValue::Mapping(
                dict.iter()
                    .map(|(k, v)| self.node_entry(&[k.as_str()], k, v))
                    .collect(),
            ),
            location: self.first_root_location().unwrap_or(root_location),
        };
        match check::check(&root, Some(&declared.config)) {
            Ok(checked) => {
                if problems.has_errors() {
                    problems.sort();
                    return Err(problems);
                }
                let mut parsed = Parsed::from_checked(checked);
                let against = parsed.check_against(declared);
                let (errors, warnings) = against.partition();
                if !errors.is_empty() {
                    return Err(errors);
                }
                parsed.warnings.extend(problems);
                parsed.warnings.extend(warnings);
                parsed.warnings.sort();
                Ok(parsed)
            }
            Err(errors) => {
                problems.extend(errors);
                problems.sort();
                Err(problems)
            }
        }
    }

    /// Merges and resolves the layers into the config the runtime builds from.
    pub fn extract(self) -> Result<Config, Diagnostics> {
        self.resolve().map(|parsed| parsed.config)
    }

    /// Over a program's declarations, takes the entries of names nothing declares out of
    /// the merged tree, with a warning (an error when strict) at the name.
    fn take_undeclared(&self, dict: &mut Dict, declared: &Config) -> Diagnostics {
        let mut problems = Diagnostics::new();
        if !matches!(self.layers.first(), Some(Layer::Declared { .. })) {
            return problems;
        }
        let Some(FigmentValue::Dict(_, bulkheads)) = dict.get_mut("bulkheads") else {
            return problems;
        };
        let undeclared: Vec<String> = bulkheads
            .keys()
            .filter(|name| !declared.bulkheads.contains_key(name.as_str()))
            .cloned()
            .collect();
        let declared_names: Vec<String> = declared.bulkheads.keys().cloned().collect();
        let mut suggestions = check::Suggestions::new();
        for name in undeclared {
            let Some(value) = bulkheads.remove(&name) else {
                continue;
            };
            let (location, _) = self.place(&["bulkheads", &name], value.tag());
            let hint = match suggestions.closest(&name, &declared_names) {
                Some(close) => format!(": did you mean `{close}`?"),
                None => String::new(),
            };
            let severity = if self.strict {
                Severity::Error
            } else {
                Severity::Warning
            };
            problems.push(Diagnostic::at(
                severity,
                &location,
                format!("bulkheads.{name}"),
                format!(
                    "`{name}` is not declared by any `#[bulkhead]` function of this program, \
                     so these sizes apply to nothing{hint}"
                ),
            ));
        }
        problems
    }

    fn first_root_location(&self) -> Option<Location> {
        self.layers.iter().find_map(|l| match l {
            Layer::Yaml { root, .. } => Some(root.location.clone()),
            Layer::Declared { .. } | Layer::Env => None,
        })
    }

    /// Where the value at `path` with figment tag `tag` was written: (key, value) locations.
    fn place(&self, path: &[&str], tag: Tag) -> (Location, Location) {
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

    fn node_entry(&self, path: &[&str], key: &str, value: &FigmentValue) -> (Key, Node) {
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

fn env_location(var: &str) -> Location {
    Location::new(Arc::from(format!("environment variable {var}")), 0, 0)
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

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

mod env;
mod placement;

pub use env::{ENV_PREFIX, env_var_name};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use figment::value::{Dict, Map, Value as FigmentValue};
use figment::{Figment, Metadata, Profile, Provider};

use crate::diagnostic::{Diagnostic, Diagnostics, Location, Severity};
use crate::yaml::{Node, NodeValue, SectionIndex};
use crate::{CheckedDeploy, Config, Parsed, UndeclaredName, check};

use env::ENV_LAYER;

/// What [`Layers::deploy`] made of the layers: the deploy, checked, and its warnings
/// placed in the files (the same warnings are in the deploy, one line each).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ResolvedDeploy {
    /// The deploy, ready for a registry.
    pub deploy: CheckedDeploy,
    /// Lints and names nothing declares, each placed in its file or variable.
    pub warnings: Diagnostics,
}

/// A stack of config layers, lowest first.
///
/// ```
/// use bulkhead::config::Layers;
/// let config = Layers::new("bulkheads.yaml", "bulkheads:\n  product-detail: { kind: thread-pool, max_threads: 40 }\n")
///     .yaml("deploy/prod.yaml", "bulkheads:\n  product-detail: { queue_capacity: 300 }\n")
///     .unwrap()
///     .env_vars([("BULKHEAD_PRODUCT_DETAIL__MAX_THREADS".to_owned(), "60".to_owned())])
///     .extract()
///     .unwrap();
/// let bulkhead::config::Limits::ThreadPool(pool) = &config.bulkheads["product-detail"].limits else { panic!() };
/// assert_eq!((pool.max_threads, pool.queue_capacity), (60, 300));
/// ```
#[must_use = "layers do nothing until they are resolved or extracted"]
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

/// Whether a YAML text holds nothing but blank lines, comments and document markers.
fn has_no_content(source: &str) -> bool {
    source.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---" || line == "..."
    })
}

/// The name of the layer [`Layers::over_declarations`] starts from, in diagnostics.
pub(super) const DECLARED_LAYER: &str = "the program's declarations";

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
    /// use bulkhead::config::{BulkheadConfig, Config, Layers, Limits, ThreadPoolConfig};
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
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    /// Adds a deploy file on top. An unreadable file or invalid YAML is an error now;
    /// other problems are reported by [`Layers::extract`], all at once.
    ///
    /// # Errors
    ///
    /// The file cannot be read (or is over 1 MiB), or is not valid YAML.
    pub fn file(self, path: impl AsRef<Path>) -> Result<Self, Diagnostics> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let source =
            crate::read_deploy_file(path).map_err(|e| Diagnostics::of_read_error(&*name, &e))?;
        self.yaml(&name, &source)
    }

    /// Adds a deploy layer from YAML text, named `name` in messages.
    ///
    /// # Errors
    ///
    /// The text is not valid YAML (or is over 1 MiB).
    pub fn yaml(self, name: &str, source: &str) -> Result<Self, Diagnostics> {
        self.add_yaml(name, source)
    }

    fn add_yaml(mut self, name: &str, source: &str) -> Result<Self, Diagnostics> {
        if !self.layers.is_empty() && has_no_content(source) {
            // A file caught between an editor's truncate and its write, or a deploy tool
            // that wrote nothing: applying it would silently drop every override.
            return Err(Diagnostics::from(vec![Diagnostic::unplaced(
                Severity::Error,
                name,
                "",
                "the deploy is empty (no content but blanks and comments), so it is not \
                 applied: to clear every override deliberately, deploy `bulkheads: {}`",
            )]));
        }
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
    ///
    /// # Errors
    ///
    /// Every problem of every layer, each placed in its file or environment variable.
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
        let (undeclared, found) = self.take_undeclared(&mut dict, &declared.config);
        problems.extend(found);
        problems.extend(self.unused_deploy_templates(&dict));
        let root_location = Location::new(Arc::from(ENV_LAYER), 0, 0);
        let root = Node {
            value: NodeValue::Mapping(
                dict.iter()
                    .map(|(k, v)| self.node_entry(&[k.as_str()], k, v))
                    .collect(),
            ),
            location: self.first_root_location().unwrap_or(root_location),
        };
        match check::check(&root, Some(&declared.config), self.last_yaml_file()) {
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
                parsed.undeclared = undeclared;
                Ok(parsed)
            }
            Err(errors) => {
                problems.extend(errors);
                problems.sort();
                Err(problems)
            }
        }
    }

    /// Resolves the layers as a deploy a registry applies: [`resolve`](Self::resolve)'s
    /// checks, then refused when a cluster store cannot be used at all
    /// ([`Parsed::unusable_stores`]). What `bulkhead check --against` reports and what
    /// `bulkhead::Deploy` installs, so both say the same about the same files.
    ///
    /// # Errors
    ///
    /// Every problem of every layer, each placed in its file or environment variable.
    pub fn deploy(&self) -> Result<ResolvedDeploy, Diagnostics> {
        let parsed = self.resolve()?;
        let unusable = parsed.unusable_stores();
        if unusable.has_errors() {
            return Err(unusable);
        }
        let Parsed {
            config,
            warnings,
            undeclared,
            ..
        } = parsed;
        let listed = warnings.iter().map(ToString::to_string).collect();
        Ok(ResolvedDeploy {
            deploy: CheckedDeploy::__checked_by_bulkhead_config(config, undeclared, listed),
            warnings,
        })
    }

    /// Merges and resolves the layers into the config the runtime builds from.
    ///
    /// # Errors
    ///
    /// As [`Layers::resolve`].
    pub fn extract(self) -> Result<Config, Diagnostics> {
        self.resolve().map(|parsed| parsed.config)
    }

    /// Over a program's declarations, a warning at each template of a deploy layer that
    /// no entry extends: it would size nothing, since declared bulkheads were resolved
    /// when their crate was built and are sized by their names.
    fn unused_deploy_templates(&self, dict: &Dict) -> Diagnostics {
        let mut problems = Diagnostics::new();
        if !matches!(self.layers.first(), Some(Layer::Declared { .. })) {
            return problems;
        }
        let extended: BTreeSet<&str> = ["bulkheads", "templates"]
            .iter()
            .filter_map(|section| match dict.get(*section) {
                Some(FigmentValue::Dict(_, entries)) => Some(entries.values()),
                _ => None,
            })
            .flatten()
            .filter_map(|entry| match entry {
                FigmentValue::Dict(_, keys) => match keys.get("extends") {
                    Some(FigmentValue::String(_, template)) => Some(template.as_str()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        for layer in &self.layers {
            let Layer::Yaml { root, .. } = layer else {
                continue;
            };
            let Some((_, templates)) = root.get("templates") else {
                continue;
            };
            let NodeValue::Mapping(entries) = &templates.value else {
                continue;
            };
            for (key, _) in entries {
                if !extended.contains(key.text.as_str()) {
                    problems.push(Diagnostic::at(
                        Severity::Warning,
                        &key.location,
                        format!("templates.{}", key.text),
                        format!(
                            "no entry of the deploy extends template `{}`, so it sizes \
                             nothing: the declared bulkheads were resolved when their crate \
                             was built, and a deploy sizes each by its name under `bulkheads`",
                            key.text
                        ),
                    ));
                }
            }
        }
        problems
    }

    /// Over a program's declarations, takes the entries of names nothing declares out of
    /// the merged tree, with a warning (an error when strict) at the name.
    fn take_undeclared(
        &self,
        dict: &mut Dict,
        declared: &Config,
    ) -> (Vec<UndeclaredName>, Diagnostics) {
        let mut problems = Diagnostics::new();
        let mut taken = Vec::new();
        let Some(FigmentValue::Dict(_, bulkheads)) = dict.get_mut("bulkheads") else {
            return (taken, problems);
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
            let undeclared =
                UndeclaredName::new(&name, suggestions.closest(&name, &declared_names));
            let severity = if self.strict {
                Severity::Error
            } else {
                Severity::Warning
            };
            problems.push(Diagnostic::at(
                severity,
                &location,
                format!("bulkheads.{name}"),
                undeclared.to_string(),
            ));
            taken.push(undeclared);
        }
        (taken, problems)
    }
}

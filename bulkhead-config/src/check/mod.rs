//! Checking a parsed file: from a positioned tree to a resolved [`Config`]. This module
//! drives the check and holds the checker's state; `schema_walk` checks keys and value
//! types against the schema, `templates` follows `extends`, `rules` applies the value
//! rules, `spec_value` reads values into the typed spec, `words` holds the wording.
//!
//! Invariants:
//!
//! - every problem is collected; nothing stops at the first one, and one bad key does not
//!   hide the problems of its neighbours;
//! - every diagnostic points at the key or value that causes it (inside a template when the
//!   value is inherited from one), and names its full key path;
//! - the key sets and value types come from the serde types of [`crate::file_format`] and their
//!   JSON Schema, never from a second hand-written list;
//! - a [`Config`] is returned only when there is no error.

mod rules;
mod schema_walk;
mod spec_value;
mod templates;
mod words;

pub use templates::MAX_EXTENDS_DEPTH;
pub(crate) use words::{Suggestions, did_you_mean, display_name};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::Config;
use crate::diagnostic::{Diagnostic, Diagnostics, Location, Severity};
use crate::file_format::BulkheadSpec;
use crate::yaml::{Key, Node, NodeValue, ScalarValue, SectionIndex};

use schema_walk::{properties, spec_schema};
use words::quoted_list;

/// The two sections of a file.
const SECTIONS: [&str; 2] = ["templates", "bulkheads"];

/// What a successful check produces.
pub(crate) struct Checked {
    pub config: Config,
    pub warnings: Diagnostics,
    pub locations: BTreeMap<String, Location>,
    pub store_urls: StoreUrls,
}

/// Where each bulkhead's cluster stores' `redis` values were written: (bulkhead, the
/// store's key — `rate_limit.store` or `cluster.store`) → (key path, value location).
pub(crate) type StoreUrls = BTreeMap<(String, &'static str), (String, Location)>;

/// The keys of the cluster stores a bulkhead may have.
pub(crate) const STORE_KEYS: [&str; 2] = ["rate_limit.store", "cluster.store"];

/// Checks a whole document. `declared` is the configuration the code declares, when the
/// document is a layered deploy: a bulkhead may not change its kind there. `last_file` is
/// the file of its last layer (the deploy over the others), the document's own when it is
/// not layered.
pub(crate) fn check(
    root: &Node,
    declared: Option<&Config>,
    last_file: Option<Arc<str>>,
) -> Result<Checked, Diagnostics> {
    let index = Index::new(root);
    let mut ctx = Checker {
        root,
        last_file: last_file.unwrap_or_else(|| root.location.file.clone()),
        index: &index,
        diagnostics: Diagnostics::new(),
        specs: BTreeMap::new(),
        invalid: BTreeMap::new(),
        deploy: declared.is_some(),
        template_names: Vec::new(),
        depth: HashMap::new(),
        suggestions: Suggestions::new(),
    };
    ctx.read_sections();
    ctx.template_names = ctx.names("templates");
    ctx.link_all();
    let resolved = ctx.resolve_all();
    let mut config = Config::default();
    let mut locations = BTreeMap::new();
    let mut store_urls = StoreUrls::new();
    for (name, (spec, chain)) in &resolved {
        let entry = EntryChain {
            section: "bulkheads",
            name,
            chain,
        };
        locations.insert(name.clone(), ctx.name_location("bulkheads", name));
        for store in STORE_KEYS {
            let mut key: Vec<&str> = store.split('.').collect();
            key.push("redis");
            store_urls.insert((name.clone(), store), ctx.locate(&entry, &key));
        }
        let Some(kind) = spec.kind else {
            if ctx.was_invalid("bulkheads", name, "kind") {
                continue;
            }
            ctx.error(
                ctx.name_location("bulkheads", name),
                format!("bulkheads.{name}"),
                "has no `kind`: add `kind: semaphore` or `kind: thread-pool`, or \
                 `extends:` a template that sets it",
            );
            continue;
        };
        if let Some(declared) = declared.and_then(|d| d.bulkheads.get(name.as_str()))
            && declared.kind() != kind
        {
            let (path, location) = ctx.locate(&entry, &["kind"]);
            let change = crate::KindChange::new(name, declared.kind(), kind, None);
            ctx.error(location, path, change.to_string());
            // The entry's other settings as the declared kind takes them, so one run
            // reports every problem (the deploy's `kind` is to be left out anyway).
            ctx.check_values(&entry, spec, declared.kind());
            continue;
        }
        if let Some(declared) = declared.and_then(|d| d.bulkheads.get(name.as_str())) {
            ctx.check_partition_names(&entry, spec, declared);
        }
        ctx.check_values(&entry, spec, kind);
        config.bulkheads.insert(name.clone(), spec.resolve(kind));
    }
    // Templates are checked on their own too, so a broken template that nothing uses yet
    // is still reported.
    for name in ctx.template_names.clone() {
        if let Some((spec, chain)) = ctx.resolve("templates", &name) {
            let entry = EntryChain {
                section: "templates",
                name: &name,
                chain: &chain,
            };
            if let Some(kind) = spec.kind {
                ctx.check_values(&entry, &spec, kind);
            }
        }
    }
    let mut diagnostics = ctx.diagnostics;
    if !diagnostics.has_errors() {
        let locate = |name: &str, key: &[&str]| {
            let chain = resolved.get(name).map(|(_, c)| c.as_slice()).unwrap_or(&[]);
            let entry = EntryChain {
                section: "bulkheads",
                name,
                chain,
            };
            index.locate(&entry, key)
        };
        let section = root
            .get("bulkheads")
            .map_or_else(|| root.location.clone(), |(k, _)| k.location.clone());
        diagnostics.extend(crate::lint::lint(&config, &locate, &section));
    }
    diagnostics.sort();
    let (errors, warnings) = diagnostics.partition();
    if errors.is_empty() {
        Ok(Checked {
            config,
            warnings,
            locations,
            store_urls,
        })
    } else {
        Err(errors)
    }
}

/// A bulkhead or template being checked, and the chain of entries its keys come from:
/// itself first, then its template, that template's template, ….
pub(crate) struct EntryChain<'a> {
    section: &'static str,
    name: &'a str,
    chain: &'a [(String, String)],
}

/// The document with an index of its entries: finding one is a hash lookup, not a scan
/// of the section.
struct Index<'a> {
    root: &'a Node,
    sections: SectionIndex,
}

impl<'a> Index<'a> {
    fn new(root: &'a Node) -> Self {
        Index {
            root,
            sections: SectionIndex::new(root),
        }
    }

    /// The key and node at `section.name.key…`.
    fn find(&self, section: &str, name: &str, key: &[&str]) -> Option<(&'a Key, &'a Node)> {
        let mut path = vec![section, name];
        path.extend_from_slice(key);
        self.sections.find(self.root, &path)
    }

    /// Where the name `section.name` was written (the document when it is not there).
    fn name_location(&self, section: &str, name: &str) -> Location {
        self.find(section, name, &[])
            .map_or_else(|| self.root.location.clone(), |(k, _)| k.location.clone())
    }

    /// The key path and location of `key` in the first entry of the chain that writes it,
    /// or of the entry's name when nothing does (the value is a default).
    fn locate(&self, entry: &EntryChain<'_>, key: &[&str]) -> (String, Location) {
        for (section, name) in entry.chain {
            if let Some((_, node)) = self.find(section, name, key) {
                let mut path = vec![section.as_str(), name.as_str()];
                path.extend_from_slice(key);
                return (path.join("."), node.location.clone());
            }
        }
        let mut path = vec![entry.section, entry.name];
        path.extend_from_slice(key);
        (
            path.join("."),
            self.name_location(entry.section, entry.name),
        )
    }
}

struct Checker<'a> {
    root: &'a Node,
    /// The file of the last layer: where a deploy writes the values it changes.
    last_file: Arc<str>,
    index: &'a Index<'a>,
    diagnostics: Diagnostics,
    /// The valid keys of every entry as written, by (section, name).
    specs: BTreeMap<(&'static str, String), BulkheadSpec>,
    /// Keys already reported as invalid, by (section, name), so follow-on problems
    /// (such as a missing `kind` after a misspelt one) are not reported twice.
    invalid: BTreeMap<(&'static str, String), Vec<String>>,
    /// True for a deploy layered over the declared config, which may change sizes only.
    deploy: bool,
    /// The names of the templates, sorted.
    template_names: Vec<String>,
    /// How many `extends` links each entry is from the end of its chain; `None` when the
    /// chain is broken (an unknown template, a cycle, too deep), which was reported once.
    depth: HashMap<(&'static str, String), Option<usize>>,
    /// "Did you mean" for unknown templates, within its budget.
    suggestions: Suggestions,
}

type Resolved = (BulkheadSpec, Vec<(String, String)>);

impl Checker<'_> {
    fn error(&mut self, location: Location, path: impl Into<String>, message: impl Into<String>) {
        self.diagnostics
            .push(Diagnostic::at(Severity::Error, &location, path, message));
    }

    fn was_invalid(&self, section: &'static str, name: &str, key: &str) -> bool {
        self.invalid
            .get(&(section, name.to_owned()))
            .is_some_and(|keys| keys.iter().any(|k| k == key))
    }

    fn mark_invalid(&mut self, section: &'static str, name: &str, key: &str) {
        self.invalid
            .entry((section, name.to_owned()))
            .or_default()
            .push(key.to_owned());
    }

    fn locate(&self, entry: &EntryChain<'_>, key: &[&str]) -> (String, Location) {
        self.index.locate(entry, key)
    }

    fn name_location(&self, section: &str, name: &str) -> Location {
        self.index.name_location(section, name)
    }

    fn names(&self, section: &'static str) -> Vec<String> {
        self.specs
            .keys()
            .filter(|(s, _)| *s == section)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// Reads `templates` and `bulkheads`: unknown sections and keys, names, value types.
    fn read_sections(&mut self) {
        let root = self.root;
        let entries = match &root.value {
            NodeValue::Mapping(entries) => entries,
            _ => {
                self.error(
                    root.location.clone(),
                    "",
                    format!(
                        "the document is {}, but a bulkheads config is a mapping with \
                         `templates` and `bulkheads`",
                        root.describe()
                    ),
                );
                return;
            }
        };
        for (key, section) in entries {
            let Some(section_name) = SECTIONS.iter().find(|s| **s == key.text) else {
                self.unknown_key(key, &key.text, &SECTIONS.map(String::from));
                continue;
            };
            let items = match &section.value {
                NodeValue::Mapping(items) => items,
                NodeValue::Scalar(ScalarValue::Null) => continue,
                _ => {
                    self.error(
                        section.location.clone(),
                        *section_name,
                        format!(
                            "is {}, but must be a mapping from names to settings",
                            section.describe()
                        ),
                    );
                    continue;
                }
            };
            for (name, body) in items {
                self.read_entry(section_name, name, body);
            }
        }
    }

    fn read_entry(&mut self, section: &'static str, name: &Key, body: &Node) {
        let path = format!("{section}.{}", display_name(&name.text));
        if let Err(problem) = crate::validate_name(&name.text) {
            self.error(name.location.clone(), path.clone(), problem.message);
        }
        let keys = match &body.value {
            NodeValue::Mapping(keys) => keys.as_slice(),
            NodeValue::Scalar(ScalarValue::Null) => &[],
            _ => {
                self.error(
                    body.location.clone(),
                    path,
                    format!(
                        "is {}, but must be a mapping of settings such as `{{ kind: semaphore }}`",
                        body.describe()
                    ),
                );
                return;
            }
        };
        let schema = spec_schema();
        let properties = properties(schema).unwrap_or_default();
        let known: Vec<String> = properties.iter().map(|(k, _)| k.clone()).collect();
        let mut spec = BulkheadSpec::default();
        for (key, value) in keys {
            let key_path = format!("{path}.{}", key.text);
            let Some((_, key_schema)) = properties.iter().find(|(k, _)| *k == key.text) else {
                self.unknown_key(key, &key_path, &known);
                continue;
            };
            if !self.walk(value, key_schema, &key_path) {
                self.mark_invalid(section, &name.text, &key.text);
                continue;
            }
            let one = serde_json::json!({ key.text.clone(): value.to_json() });
            match spec_value::read::<BulkheadSpec>(&one) {
                Ok(part) => spec = part.over(&spec),
                Err(e) => {
                    self.mark_invalid(section, &name.text, &key.text);
                    self.error(value.location.clone(), key_path, e.explain(value));
                }
            }
        }
        self.specs.insert((section, name.text.clone()), spec);
    }

    fn unknown_key(&mut self, key: &Key, path: &str, known: &[String]) {
        let hint = match did_you_mean(&key.text, known) {
            Some(best) => format!("did you mean `{best}`?"),
            None => format!("expected one of {}", quoted_list(known)),
        };
        self.error(
            key.location.clone(),
            path,
            format!("unknown key `{}`: {hint}", key.text),
        );
    }
}

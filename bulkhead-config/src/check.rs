//! Validation and template resolution: from a positioned tree to a resolved [`Config`].
//!
//! Invariants:
//!
//! - every problem is collected; nothing stops at the first one, and one bad key does not
//!   hide the problems of its neighbours;
//! - every diagnostic points at the key or value that causes it (inside a template when the
//!   value is inherited from one), and names its full key path;
//! - the key sets and value types come from the serde types of [`crate::file`] and their
//!   JSON Schema, never from a second hand-written list;
//! - a [`Config`] is returned only when there is no error.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use serde_json::Value;

use crate::diagnostic::{Diagnostic, Diagnostics, Location, Severity};
use crate::file::{BulkheadSpec, kind_keys};
use crate::yaml::{Key, Node, NodeValue, ScalarValue, SectionIndex};
use crate::{Config, Duration, Kind};

/// The two sections of a file.
const SECTIONS: [&str; 2] = ["templates", "bulkheads"];

/// What a successful check produces.
pub(crate) struct Checked {
    pub config: Config,
    pub warnings: Diagnostics,
    pub locations: BTreeMap<String, Location>,
}

/// Checks a whole document. `declared` is the configuration the code declares, when the
/// document is a layered deploy: a bulkhead may not change its kind there.
pub(crate) fn check(root: &Node, declared: Option<&Config>) -> Result<Checked, Diagnostics> {
    let index = Index::new(root);
    let mut ctx = Checker {
        root,
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
    for (name, (spec, chain)) in &resolved {
        let entry = Entry {
            section: "bulkheads",
            name,
            chain,
        };
        locations.insert(name.clone(), ctx.name_location("bulkheads", name));
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
            ctx.error(
                location,
                path,
                format!(
                    "the code declares `{name}` as a {} and a deploy may change sizes, not \
                         kinds: remove this `kind` (or the `extends` that brings it)",
                    declared.kind()
                ),
            );
            continue;
        }
        ctx.check_values(&entry, spec, kind);
        config.bulkheads.insert(name.clone(), spec.resolve(kind));
    }
    // Templates are checked on their own too, so a broken template that nothing uses yet
    // is still reported.
    for name in ctx.template_names.clone() {
        if let Some((spec, chain)) = ctx.resolve("templates", &name) {
            let entry = Entry {
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
            let entry = Entry {
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
        })
    } else {
        Err(errors)
    }
}

/// A bulkhead or template being checked, and the chain of entries its keys come from:
/// itself first, then its template, that template's template, ….
struct Entry<'a> {
    section: &'static str,
    name: &'a str,
    chain: &'a [(String, String)],
}

/// The most `extends` links from an entry to the template that ends its chain. Real
/// configs use one or two; the bound keeps resolving a hostile file linear in its size.
pub const MAX_EXTENDS_DEPTH: usize = 16;

/// How many names "did you mean" may compare in one check, so a file with thousands of
/// unknown names among thousands of names stays fast (later ones get no guess).
const SUGGESTION_BUDGET: usize = 1_000_000;

/// "Did you mean" over one check: guesses until [`SUGGESTION_BUDGET`] names are compared.
pub(crate) struct Suggestions {
    left: usize,
}

impl Suggestions {
    pub(crate) fn new() -> Self {
        Suggestions {
            left: SUGGESTION_BUDGET,
        }
    }

    /// [`did_you_mean`], while the budget lasts.
    pub(crate) fn closest<'a>(&mut self, word: &str, candidates: &'a [String]) -> Option<&'a str> {
        self.left = self.left.checked_sub(candidates.len())?;
        did_you_mean(word, candidates)
    }
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
    fn locate(&self, entry: &Entry<'_>, key: &[&str]) -> (String, Location) {
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

    /// True when `path` lies in a template that itself resolves to `kind`.
    fn written_in_template_of_kind(&self, path: &str, kind: Kind) -> bool {
        let Some(rest) = path.strip_prefix("templates.") else {
            return false;
        };
        let mut name = rest.split('.').next().unwrap_or_default().to_owned();
        let mut seen = Vec::new();
        while let Some(spec) = self.specs.get(&("templates", name.clone())) {
            if let Some(found) = spec.kind {
                return found == kind;
            }
            seen.push(name.clone());
            match &spec.extends {
                Some(next) if !seen.contains(next) => name = next.clone(),
                _ => return false,
            }
        }
        false
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

    fn locate(&self, entry: &Entry<'_>, key: &[&str]) -> (String, Location) {
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
            match serde_json::from_value::<BulkheadSpec>(one) {
                Ok(part) => spec = part.over(&spec),
                Err(e) => {
                    self.mark_invalid(section, &name.text, &key.text);
                    self.error(
                        value.location.clone(),
                        key_path,
                        explain_serde_error(&e.to_string(), value),
                    );
                }
            }
        }
        self.specs.insert((section, name.text.clone()), spec);
    }

    /// Checks nested keys, durations and scalar types against the schema; false if it
    /// reported anything. A wrong scalar is reported at the value itself, nested or not.
    fn walk(&mut self, node: &Node, schema: &Value, path: &str) -> bool {
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

    /// Every bulkhead resolved through its templates.
    fn resolve_all(&mut self) -> BTreeMap<String, Resolved> {
        let mut out = BTreeMap::new();
        for name in self.names("bulkheads") {
            if let Some(resolved) = self.resolve("bulkheads", &name) {
                out.insert(name, resolved);
            }
        }
        out
    }

    /// Follows every `extends` once, without recursion: each entry gets its depth (links
    /// to the end of its chain), and each broken chain is reported once — an unknown
    /// template at the `extends` that names it, a cycle at its smallest member, a chain
    /// deeper than [`MAX_EXTENDS_DEPTH`] at the first entry past the limit. Entries that
    /// lead into a broken chain are left unresolved without a second report. Every entry
    /// is visited a bounded number of times, so this is linear in the number of entries.
    fn link_all(&mut self) {
        let mut entries: Vec<(&'static str, String)> = self.specs.keys().cloned().collect();
        // Templates first, so a bulkhead finds its template's depth already known.
        entries.sort_by_key(|(section, _)| *section != "templates");
        for (section, name) in entries {
            if self.depth.contains_key(&(section, name.clone())) {
                continue;
            }
            // Walk up the chain until an entry of known depth, the end, or a break.
            let mut path: Vec<(&'static str, String)> = Vec::new();
            let mut on_path: HashMap<String, usize> = HashMap::new();
            let mut current = (section, name);
            let mut depth = loop {
                if let Some(known) = self.depth.get(&current) {
                    break *known;
                }
                let extends = self.specs.get(&current).and_then(|s| s.extends.clone());
                let Some(template) = extends else {
                    self.depth.insert(current, Some(0));
                    break Some(0);
                };
                if !self.specs.contains_key(&("templates", template.clone())) {
                    self.report_unknown_template(current.0, &current.1, &template);
                    self.depth.insert(current, None);
                    break None;
                }
                if current.0 == "templates" {
                    on_path.insert(current.1.clone(), path.len());
                }
                path.push(current);
                if let Some(&start) = on_path.get(&template) {
                    let members: Vec<String> =
                        path[start..].iter().map(|(_, n)| n.clone()).collect();
                    self.report_cycle(&members);
                    for member in members {
                        self.depth.insert(("templates", member), None);
                    }
                    break None;
                }
                current = ("templates", template);
            };
            // Unwind: each entry is one link further than the one it extends.
            for (section, name) in path.into_iter().rev() {
                let key = (section, name);
                if let Some(known) = self.depth.get(&key) {
                    depth = *known;
                    continue;
                }
                depth = match depth.map(|d| d + 1) {
                    Some(d) if d > MAX_EXTENDS_DEPTH => {
                        self.report_too_deep(key.0, &key.1);
                        None
                    }
                    other => other,
                };
                self.depth.insert(key, depth);
            }
        }
    }

    fn report_unknown_template(&mut self, section: &'static str, name: &str, template: &str) {
        let templates = &self.template_names;
        let guess = self.suggestions.closest(template, templates);
        let hint = match guess {
            Some(best) => format!("did you mean `{best}`?"),
            None if templates.is_empty() => "this file declares no `templates`".to_owned(),
            None if templates.len() <= 10 => {
                format!("the templates are {}", quoted_list(templates))
            }
            None => format!("this file declares {} templates", templates.len()),
        };
        let (path, location) = self.extends_at(section, name);
        self.error(
            location,
            path,
            format!("unknown template `{template}`: {hint}"),
        );
    }

    /// Reports a cycle once, at the `extends` of its smallest member.
    fn report_cycle(&mut self, members: &[String]) {
        let first = members
            .iter()
            .enumerate()
            .min_by_key(|(_, m)| m.as_str())
            .map_or(0, |(i, _)| i);
        let mut cycle: Vec<&str> = members[first..]
            .iter()
            .chain(&members[..first])
            .map(String::as_str)
            .collect();
        let smallest = cycle.first().copied().unwrap_or_default();
        cycle.push(smallest);
        // A long cycle is shown by its ends.
        let shown = if cycle.len() > 8 {
            let n = cycle.len();
            format!(
                "{} → … {} more … → {}",
                cycle[..3].join(" → "),
                n - 6,
                cycle[n - 3..].join(" → ")
            )
        } else {
            cycle.join(" → ")
        };
        let message = format!(
            "templates extend each other in a cycle ({shown}): break it by removing one `extends`"
        );
        let (path, location) = self.extends_at("templates", smallest);
        self.error(location, path, message);
    }

    fn report_too_deep(&mut self, section: &'static str, name: &str) {
        let (path, location) = self.extends_at(section, name);
        self.error(
            location,
            path,
            format!(
                "this `extends` starts a chain of more than {MAX_EXTENDS_DEPTH} templates \
                 (each extending the next): at most {MAX_EXTENDS_DEPTH} are allowed; merge \
                 some of them"
            ),
        );
    }

    /// The key path and location of `section.name.extends`.
    fn extends_at(&self, section: &'static str, name: &str) -> (String, Location) {
        let location = self
            .index
            .find(section, name, &["extends"])
            .map_or_else(|| self.root.location.clone(), |(_, n)| n.location.clone());
        (
            format!("{section}.{}.extends", display_name(name)),
            location,
        )
    }

    /// `section.name` with its template chain applied; `None` when the chain is broken
    /// (already reported by [`Checker::link_all`]).
    fn resolve(&self, section: &'static str, name: &str) -> Option<Resolved> {
        self.depth
            .get(&(section, name.to_owned()))
            .copied()
            .flatten()?;
        let mut chain = vec![(section.to_owned(), name.to_owned())];
        let mut specs = vec![self.specs.get(&(section, name.to_owned()))?];
        // At most MAX_EXTENDS_DEPTH links: `link_all` refused longer chains.
        while let Some(template) = specs.last().and_then(|s| s.extends.clone()) {
            specs.push(self.specs.get(&("templates", template.clone()))?);
            chain.push(("templates".to_owned(), template));
        }
        let mut spec = BulkheadSpec::default();
        for own in specs.iter().rev() {
            spec = own.over(&spec);
        }
        spec.extends = None;
        Some((spec, chain))
    }

    /// The rules on values of a resolved entry of a known kind.
    fn check_values(&mut self, entry: &Entry<'_>, spec: &BulkheadSpec, kind: Kind) {
        let other = match kind {
            Kind::Semaphore => Kind::ThreadPool,
            Kind::ThreadPool => Kind::Semaphore,
        };
        let set = serde_json::to_value(spec).unwrap_or_default();
        let (kind_path, _) = self.locate(entry, &["kind"]);
        let kind_source = match kind_path.strip_prefix("templates.") {
            Some(rest) if !kind_path.starts_with(&format!("{}.{}.", entry.section, entry.name)) => {
                format!(
                    " (kind from template `{}`)",
                    rest.split('.').next().unwrap_or_default()
                )
            }
            _ => String::new(),
        };
        for key in kind_keys(other) {
            if set.get(key).is_some() {
                let (path, location) = self.locate(entry, &[key.as_str()]);
                if entry.section == "bulkheads" && self.written_in_template_of_kind(&path, kind) {
                    // The template is checked on its own and reports it there.
                    continue;
                }
                // A deploy cannot change the kind, so it is told what it can set instead.
                let advice = if self.deploy {
                    format!(
                        "a deploy may change sizes, not kinds: remove it; a {kind} is sized with {}",
                        quoted_list(kind_keys(kind))
                    )
                } else {
                    format!("remove it, or make it `kind: {other}`")
                };
                self.error(
                    location,
                    path,
                    format!(
                        "`{key}` is a {other} setting, but `{}` is a {kind}{kind_source}: {advice}",
                        entry.name
                    ),
                );
            }
        }
        // The rules every path shares (files, layers, the registry): one function, one
        // set of messages, placed here at the key that breaks them.
        for problem in spec.resolve(kind).problems() {
            let (path, location) = self.locate(entry, &problem.key);
            self.error(location, path, problem.message);
        }
    }
}

/// The `$defs` of the generated JSON Schema, made once per process.
fn defs() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA
        .get_or_init(crate::file::json_schema)
        .get("$defs")
        .unwrap_or(&Value::Null)
}

/// The schema of one entry.
fn spec_schema() -> &'static Value {
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
fn properties(schema: &Value) -> Option<Vec<(String, &Value)>> {
    let mut found: Option<Vec<(String, &Value)>> = None;
    for alt in alternatives(schema) {
        if let Some(props) = alt.get("properties").and_then(Value::as_object) {
            let list = found.get_or_insert_with(Vec::new);
            list.extend(props.iter().map(|(k, v)| (k.clone(), v)));
        }
    }
    found
}

/// The closest of `candidates` to `word`, if one is close enough to be a likely typo
/// ([`crate::closest_name`], the rule every part of bulkhead uses).
pub(crate) fn did_you_mean<'a>(word: &str, candidates: &'a [String]) -> Option<&'a str> {
    crate::closest_name(word, candidates.iter().map(String::as_str))
}

fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Rewrites a serde message about one value into what is wrong and what to write instead.
fn explain_serde_error(message: &str, value: &Node) -> String {
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let words: Vec<String> = rest
            .split('`')
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect();
        if let Some((given, expected)) = words.split_first() {
            let hint = match did_you_mean(given, expected) {
                Some(best) => format!("did you mean `{best}`?"),
                None => format!("expected one of {}", quoted_list(expected)),
            };
            return format!("unknown value `{given}`: {hint}");
        }
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        return format!("is missing {rest}: add it (see docs/config-reference.md)");
    }
    let expected = if message.contains("expected u32") {
        "a whole number".to_owned()
    } else if message.contains("expected a boolean") {
        "`true` or `false`".to_owned()
    } else if message.contains("expected f64") {
        "a number such as 0.8".to_owned()
    } else if let Some(i) = message.find("expected ") {
        message[i + "expected ".len()..].to_owned()
    } else {
        return message.to_owned();
    };
    format!(
        "{} is not valid here: expected {expected}",
        value.describe()
    )
}

/// A name as it appears in a key path: an empty name is shown as `""`.
pub(crate) fn display_name(name: &str) -> &str {
    if name.is_empty() { "\"\"" } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn did_you_mean_ignores_case_separators_and_plurals() {
        let keys = names(&["max_concurrent_calls", "max_wait", "fair"]);
        assert_eq!(
            did_you_mean("maxConcurrentCall", &keys),
            Some("max_concurrent_calls")
        );
        assert_eq!(did_you_mean("MAX-WAIT", &keys), Some("max_wait"));
    }

    #[test]
    fn did_you_mean_stays_silent_for_unrelated_words() {
        let keys = names(&["max_concurrent_calls", "max_wait", "fair"]);
        assert_eq!(did_you_mean("colour", &keys), None);
        assert_eq!(did_you_mean("x", &[]), None);
    }

    #[test]
    fn schema_walk_finds_nested_properties_and_durations() {
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

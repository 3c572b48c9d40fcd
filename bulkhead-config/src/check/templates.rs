//! Following `extends`: every entry's chain of templates, linked once without recursion,
//! each broken chain (an unknown template, a cycle, a chain too deep) reported once at the
//! `extends` that breaks it, and each entry resolved through its chain.
//!
//! Invariant: linear in the number of entries; no recursion depends on the input.

use std::collections::{BTreeMap, HashMap};

use crate::Kind;
use crate::diagnostic::Location;
use crate::file_format::BulkheadSpec;

use super::words::{display_name, quoted_list};
use super::{Checker, Resolved};

/// The most `extends` links from an entry to the template that ends its chain. Real
/// configs use one or two; the bound keeps resolving a hostile file linear in its size.
pub const MAX_EXTENDS_DEPTH: usize = 16;

impl Checker<'_> {
    /// True when `path` lies in a template that itself resolves to `kind`.
    pub(super) fn written_in_template_of_kind(&self, path: &str, kind: Kind) -> bool {
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

    /// Every bulkhead resolved through its templates.
    pub(super) fn resolve_all(&mut self) -> BTreeMap<String, Resolved> {
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
    pub(super) fn link_all(&mut self) {
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

    pub(super) fn report_unknown_template(
        &mut self,
        section: &'static str,
        name: &str,
        template: &str,
    ) {
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
    pub(super) fn report_cycle(&mut self, members: &[String]) {
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

    pub(super) fn report_too_deep(&mut self, section: &'static str, name: &str) {
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
    pub(super) fn extends_at(&self, section: &'static str, name: &str) -> (String, Location) {
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
    pub(super) fn resolve(&self, section: &'static str, name: &str) -> Option<Resolved> {
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
}

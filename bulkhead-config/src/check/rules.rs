//! The rules on the values of a resolved entry of a known kind: settings of the other kind
//! (placed where they are written, with advice for a deploy), then the rules every path
//! shares (`BulkheadConfig::problems`, the same messages for files, layers and the registry).

use crate::Kind;
use crate::file_format::{BulkheadSpec, kind_keys};

use super::words::quoted_list;
use super::{Checker, EntryChain};

/// Said of a deploy's `partitions`: the shares it names are not the only ones in force.
const MERGED: &str = "; a deploy's `partitions` is merged key by key with the declared \
                      ones, so the declared partitions it does not name keep their shares";

impl Checker<'_> {
    /// A deploy keeps the declared partition names (the code checks them when it is
    /// built): the runtime refuses a reload that renames, adds or removes one, and so does
    /// the check, with the same words.
    pub(super) fn check_partition_names(
        &mut self,
        entry: &EntryChain<'_>,
        spec: &BulkheadSpec,
        declared: &crate::BulkheadConfig,
    ) {
        let running: Vec<String> = declared.partitions.names().map(str::to_owned).collect();
        let configured: Vec<String> = spec
            .partitions
            .iter()
            .flat_map(|p| p.names().map(str::to_owned))
            .collect();
        if running != configured {
            let (path, location) = self.locate(entry, &["partitions"]);
            self.error(
                location,
                path,
                format!(
                    "the partitions are named {running:?} and the new config names \
                     {configured:?}: a running bulkhead's partition names are fixed (the code \
                     checks them when it is built); a deploy may change their shares only{MERGED}"
                ),
            );
        }
    }

    /// The rules on values of a resolved entry of a known kind.
    pub(super) fn check_values(&mut self, entry: &EntryChain<'_>, spec: &BulkheadSpec, kind: Kind) {
        let other = match kind {
            Kind::Semaphore => Kind::ThreadPool,
            Kind::ThreadPool => Kind::Semaphore,
            _ => unreachable!("the bulkhead crates are pinned to one release: no other kind"),
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
                    // The sizes only: a semaphore's `cluster` is its own, but not a size.
                    let sizes: Vec<String> = kind_keys(kind)
                        .iter()
                        .filter(|k| *k != "cluster")
                        .cloned()
                        .collect();
                    format!(
                        "{}: remove it; a {kind} is sized with {}",
                        crate::SIZES_NOT_KINDS,
                        quoted_list(&sizes)
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
            let (path, mut location) = self.locate(entry, &problem.key);
            // A rule between two keys, the one it names written elsewhere than the last layer
            // (in a declaration a deploy is layered over) and the other in it: placed at the
            // other, the deploy's value that breaks the rule.
            if !problem.also.is_empty() && location.file != self.last_file {
                let (_, other) = self.locate(entry, &problem.also);
                if other.file == self.last_file {
                    location = other;
                }
            }
            let mut message = problem.message;
            if self.deploy && problem.key.first() == Some(&"partitions") {
                message.push_str(MERGED);
            }
            self.error(location, path, message);
        }
    }
}

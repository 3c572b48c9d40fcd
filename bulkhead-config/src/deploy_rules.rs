//! What a deploy may change: sizes, not kinds, and it may not drop a declared bulkhead.
//!
//! Used by `bulkhead check --against` and by the runtime before a reload. Invariant: a
//! kind change or a dropped bulkhead is an error; a name the code does not declare is a
//! warning (it would build a bulkhead nobody calls — most often a typo).

use crate::check::Suggestions;
use crate::diagnostic::{Diagnostic, Diagnostics, Severity};
use crate::{Config, KindChange, Parsed, UndeclaredName};

/// Checks a deploy's resolved config against the config the code declares.
///
/// The diagnostics have no line (resolved configs have none); use
/// [`Parsed::check_against`] to have them placed in the files.
///
/// ```
/// use bulkhead::config::{check_against, parse_file};
/// let declared = parse_file("bulkheads.yaml", "bulkheads:\n  payment: { kind: thread-pool }\n").unwrap();
/// let deploy = parse_file("prod.yaml", "bulkheads:\n  payment: { kind: semaphore }\n").unwrap();
/// let problems = check_against(&declared.config, &deploy.config);
/// assert!(problems.has_errors());
/// ```
pub fn check_against(declared: &Config, deploy: &Config) -> Diagnostics {
    compare(declared, deploy, &|_| None, &|_| None)
}

type Place<'a> = dyn Fn(&str) -> Option<(String, usize, usize)> + 'a;

impl Parsed {
    /// [`check_against`] with each diagnostic placed where the name is written: in this
    /// (the deploy's) file, or in the declared file for a dropped bulkhead.
    pub fn check_against(&self, declared: &Parsed) -> Diagnostics {
        let place = |parsed: &Parsed, name: &str| {
            parsed
                .declared_at(name)
                .map(|(file, line, column)| (file.to_owned(), line, column))
        };
        compare(
            &declared.config,
            &self.config,
            &|name| place(declared, name),
            &|name| place(self, name),
        )
    }
}

fn compare(
    declared: &Config,
    deploy: &Config,
    in_declared: &Place<'_>,
    in_deploy: &Place<'_>,
) -> Diagnostics {
    let mut out = Diagnostics::new();
    let mut push = |severity,
                    place: Option<(String, usize, usize)>,
                    fallback: &str,
                    name: &str,
                    message: String| {
        let mut d = Diagnostic::unplaced(severity, fallback, format!("bulkheads.{name}"), message);
        if let Some((file, line, column)) = place {
            d.file = file;
            d.line = line;
            d.column = column;
        }
        out.push(d);
    };
    for (name, declared_bulkhead) in &declared.bulkheads {
        match deploy.bulkheads.get(name) {
            None => push(
                Severity::Error,
                in_declared(name),
                "declared config",
                name,
                format!(
                    "the code declares `{name}` but the deploy drops it: keep it in the deploy \
                     (a deploy may change sizes, not remove bulkheads the code calls)"
                ),
            ),
            Some(deployed) if deployed.kind() != declared_bulkhead.kind() => push(
                Severity::Error,
                in_deploy(name),
                "deploy config",
                name,
                KindChange::new(name, declared_bulkhead.kind(), deployed.kind(), None).to_string(),
            ),
            Some(_) => {}
        }
    }
    let declared_names: Vec<String> = declared.bulkheads.keys().cloned().collect();
    let mut suggestions = Suggestions::new();
    for name in deploy.bulkheads.keys() {
        if !declared.bulkheads.contains_key(name) {
            let undeclared = UndeclaredName::new(name, suggestions.closest(name, &declared_names));
            push(
                Severity::Warning,
                in_deploy(name),
                "deploy config",
                name,
                undeclared.to_string(),
            );
        }
    }
    out.sort();
    out
}

//! The report of a config check, as `bulkhead check` prints it: each diagnostic with its
//! source line underlined, a closing count, or JSON; and the exit status CI reads
//! (0 clean, 1 problems; 2, a file that could not be read, is the caller's).
//!
//! One piece for the `bulkhead` command and for a program that checks its own deploy
//! files (`bulkhead::check_deploy`), so both print and exit alike.

use crate::diagnostic::{Diagnostic, Diagnostics};

/// Diagnostics of one check over some files, with the files' text to quote from.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    files: Vec<String>,
    sources: Vec<(String, String)>,
    diagnostics: Diagnostics,
}

impl CheckReport {
    /// An empty report.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts `name` as a checked file.
    pub fn add_file(&mut self, name: &str) {
        self.files.push(name.to_owned());
    }

    /// Keeps the text of `name`, to quote the lines diagnostics point at.
    pub fn add_source(&mut self, name: &str, text: &str) {
        self.sources.push((name.to_owned(), text.to_owned()));
    }

    /// Adds diagnostics (errors or warnings).
    pub fn extend(&mut self, diagnostics: Diagnostics) {
        self.diagnostics.extend(diagnostics);
    }

    /// Every diagnostic, in the order they were added.
    pub fn diagnostics(&self) -> &Diagnostics {
        &self.diagnostics
    }

    /// How many errors.
    pub fn errors(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count()
    }

    /// How many warnings.
    pub fn warnings(&self) -> usize {
        self.diagnostics.len() - self.errors()
    }

    /// The exit status: 1 when there are errors (or warnings, with `deny_warnings`), else 0.
    pub fn exit_status(&self, deny_warnings: bool) -> u8 {
        let problems = self.errors() > 0 || (deny_warnings && self.warnings() > 0);
        u8::from(problems)
    }

    /// The text for a person: each diagnostic with the line it points at, then a count.
    pub fn human(&self) -> String {
        let mut report: String = self
            .diagnostics
            .iter()
            .map(|d| {
                let source = self.sources.iter().find(|(f, _)| *f == d.file);
                render(d, source.map(|(_, t)| t.as_str()))
            })
            .collect();
        if self.diagnostics.is_empty() {
            report.push_str(&format!("ok: {} file(s), no problems\n", self.files.len()));
        } else {
            report.push_str(&format!(
                "{} error(s), {} warning(s)\n",
                self.errors(),
                self.warnings()
            ));
        }
        report
    }

    /// The report as one JSON object: `files`, `errors`, `warnings`, `diagnostics`.
    pub fn json(&self) -> String {
        format!(
            "{}\n",
            serde_json::json!({
                "files": self.files,
                "errors": self.errors(),
                "warnings": self.warnings(),
                "diagnostics": self.diagnostics,
            })
        )
    }
}

/// The headline and, when the source is at hand, the line with the spot underlined.
pub fn render(d: &Diagnostic, source: Option<&str>) -> String {
    let mut out = format!("{d}\n");
    let Some(line) = source.and_then(|s| s.lines().nth(d.line.checked_sub(1)?)) else {
        return out;
    };
    let gutter = d.line.to_string();
    let pad = " ".repeat(gutter.len());
    let start = d.column.saturating_sub(1);
    let width = line
        .chars()
        .skip(start)
        .take_while(|c| !c.is_whitespace() && !matches!(c, ':' | ',' | '}' | ']'))
        .count()
        .max(1);
    out.push_str(&format!(
        "{pad} |\n{gutter} | {line}\n{pad} | {}{}\n",
        " ".repeat(start),
        "^".repeat(width)
    ));
    out
}

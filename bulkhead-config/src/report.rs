//! The report of a config check, as `bulkhead check` prints it: each diagnostic with its
//! source line underlined, a closing count, or JSON; and the exit status CI reads
//! (0 clean, 1 problems; 2, a file that could not be read, is the caller's).
//!
//! One piece for the `bulkhead` command and for a program that checks its own deploy
//! files (`bulkhead::check_deploy`), so both print and exit alike.

use crate::diagnostic::{Diagnostic, Diagnostics, escape_controls};
use std::borrow::Cow;

/// Diagnostics of one check over some files, with the files' text to quote from.
///
/// Printing is bounded by the number of diagnostics, whatever the input: each quotes at
/// most 100 characters of its line, found through an index built once per
/// file, and control characters are escaped.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    files: Vec<String>,
    sources: Vec<Source>,
    diagnostics: Diagnostics,
    hints: Vec<String>,
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
        self.sources.push(Source::new(name, text));
    }

    /// Adds a line printed after the diagnostics, before the count (human format only).
    pub fn add_hint(&mut self, hint: impl Into<String>) {
        self.hints.push(hint.into());
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
        let mut report = self.rendered();
        for hint in &self.hints {
            report.push_str(&format!("hint: {}\n", escape_controls(hint)));
        }
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

    /// Each diagnostic with the line it points at, without the count.
    pub fn rendered(&self) -> String {
        self.diagnostics
            .iter()
            .map(|d| {
                let source = self.sources.iter().find(|s| s.name == d.file);
                render_from(d, source)
            })
            .collect()
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

/// The most characters of a source line quoted under a diagnostic: a config written on
/// one line is quoted around the spot, not whole once per problem.
pub(crate) const QUOTE_WIDTH: usize = 100;

/// A source text, where each of its lines starts and where each character starts, so
/// quoting the spot of each of many diagnostics costs a lookup, not a scan of the file or
/// of a long line (4 bytes a character: at most 4 MiB for the largest config accepted).
#[derive(Clone, Debug)]
struct Source {
    name: String,
    text: String,
    /// The byte offset of every character, and the text's length at the end.
    char_starts: Vec<u32>,
    /// The index in `char_starts` of the first character of every line.
    line_starts: Vec<usize>,
}

impl Source {
    fn new(name: &str, text: &str) -> Self {
        let mut char_starts = Vec::with_capacity(text.len() + 1);
        let mut line_starts = vec![0];
        for (i, (at, c)) in text.char_indices().enumerate() {
            char_starts.push(u32::try_from(at).unwrap_or(u32::MAX));
            if c == '\n' {
                line_starts.push(i + 1);
            }
        }
        char_starts.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
        Source {
            name: name.to_owned(),
            text: text.to_owned(),
            char_starts,
            line_starts,
        }
    }

    /// Line `n` (1-based) as (index of its first character, its length in characters),
    /// without its line break.
    fn line(&self, n: usize) -> Option<(usize, usize)> {
        let first = *self.line_starts.get(n.checked_sub(1)?)?;
        let end = match self.line_starts.get(n) {
            Some(next) => next - 1,
            None => self.char_starts.len() - 1,
        };
        let mut len = end.checked_sub(first)?;
        if len > 0 && self.slice(first + len - 1, first + len) == "\r" {
            len -= 1;
        }
        Some((first, len))
    }

    /// Characters `from..to` of the whole text.
    fn slice(&self, from: usize, to: usize) -> &str {
        let byte = |i: usize| {
            self.char_starts
                .get(i)
                .map_or(self.text.len(), |b| *b as usize)
        };
        self.text.get(byte(from)..byte(to)).unwrap_or_default()
    }
}

/// The headline and, when the source is at hand, the line with the spot underlined.
/// Control characters in the line are escaped, like those in the headline. (Indexes
/// `source` for this one diagnostic: for many, use a [`CheckReport`].)
pub fn render(d: &Diagnostic, source: Option<&str>) -> String {
    render_from(d, source.map(|text| Source::new(&d.file, text)).as_ref())
}

fn render_from(d: &Diagnostic, source: Option<&Source>) -> String {
    let mut out = format!("{d}\n");
    let Some((source, (first, chars))) = source.and_then(|s| Some((s, s.line(d.line)?))) else {
        return out;
    };
    let gutter = d.line.to_string();
    let pad = " ".repeat(gutter.len());
    let start = d.column.saturating_sub(1).min(chars);
    let width = source
        .slice(first + start, first + (start + QUOTE_WIDTH / 2).min(chars))
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ':' | ',' | '}' | ']'))
        .count()
        .max(1);
    // A window of the line around the spot.
    let from = start.saturating_sub(QUOTE_WIDTH / 2 - width.min(QUOTE_WIDTH / 4));
    let to = (from + QUOTE_WIDTH).min(chars);
    let piece = |a: usize, b: usize| {
        escape_controls(source.slice(first + a, first + b.max(a))).into_owned()
    };
    let (mut before, mut spot, mut after) = (
        piece(from, start),
        piece(start, (start + width).min(to)),
        piece((start + width).min(to), to),
    );
    // A URL's password is never quoted, wherever the window cuts the URL.
    let quoted = format!("{before}{spot}{after}");
    if let Cow::Owned(redacted) = crate::redact_credentials(&quoted) {
        if crate::redact_credentials(&before) == before {
            let rest = &redacted[before.len()..];
            let cut = rest
                .char_indices()
                .nth(spot.chars().count())
                .map_or(rest.len(), |(i, _)| i);
            (spot, after) = (rest[..cut].to_owned(), rest[cut..].to_owned());
        } else {
            (before, spot, after) = (String::new(), redacted, String::new());
        }
    }
    let lead = if from > 0 { "…" } else { "" };
    let tail = if to < chars { "…" } else { "" };
    out.push_str(&format!(
        "{pad} |\n{gutter} | {lead}{before}{spot}{after}{tail}\n{pad} | {}{}\n",
        " ".repeat(lead.chars().count() + before.chars().count()),
        "^".repeat(spot.chars().count().max(1))
    ));
    out
}

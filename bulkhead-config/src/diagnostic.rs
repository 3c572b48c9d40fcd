//! Diagnostics: what is wrong with a config, where, and what to do about it.
//!
//! Every problem found while parsing, validating, linting or layering a config becomes a
//! [`Diagnostic`] that names the file (or environment variable), the line and column, and the
//! key path (`bulkheads.payment.max_threads`). Invariants:
//!
//! - validation never stops at the first problem: all of them are collected in one
//!   [`Diagnostics`] list, in the order of their position in the source;
//! - a warning never makes [`crate::parse_file`] fail; only errors do.

use std::fmt;
use std::sync::Arc;

/// How serious a [`Diagnostic`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The config works but probably not as intended (a lint).
    Warning,
    /// The config cannot be used.
    Error,
}

impl Severity {
    /// `error` or `warning`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// Where a value came from: a file position, or an environment variable (line 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Location {
    /// The file as named in messages, or `environment variable BULKHEAD_…`.
    pub file: Arc<str>,
    /// 1-based line; 0 when the source has no lines (an environment variable).
    pub line: usize,
    /// 1-based column in characters; 0 with `line`.
    pub column: usize,
}

impl Location {
    /// A position in a file.
    pub(crate) fn new(file: Arc<str>, line: usize, column: usize) -> Self {
        Location { file, line, column }
    }
}

/// One problem in a config.
///
/// `Display` writes `FILE:LINE:COL: error: <key path>: <message>`; for a value that came
/// from an environment variable (no line) it writes `FILE: error: …`.
///
/// ```
/// let err = bulkhead::config::parse_file(
///     "bulkheads.yaml",
///     "bulkheads:\n  payment: { kind: semaphore, max_concurrent_calls: 0 }\n",
/// )
/// .unwrap_err();
/// let first = &err.iter().next().unwrap();
/// assert_eq!(first.key_path, "bulkheads.payment.max_concurrent_calls");
/// assert!(first.to_string().starts_with("bulkheads.yaml:2:"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The file as named by the caller, or `environment variable BULKHEAD_…`.
    pub file: String,
    /// 1-based line; 0 when there is no line (environment variables, whole-config checks).
    pub line: usize,
    /// 1-based column in characters; 0 when there is no line.
    pub column: usize,
    /// The dotted key path, such as `bulkheads.payment.max_threads`; empty for the document.
    pub key_path: String,
    /// What is wrong and what to do about it.
    pub message: String,
}

impl Diagnostic {
    pub(crate) fn at(
        severity: Severity,
        location: &Location,
        key_path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity,
            file: location.file.to_string(),
            line: location.line,
            column: location.column,
            key_path: key_path.into(),
            message: message.into(),
        }
    }

    /// A diagnostic with no position: for checks between resolved configs.
    pub fn unplaced(
        severity: Severity,
        file: impl Into<String>,
        key_path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity,
            file: file.into(),
            line: 0,
            column: 0,
            key_path: key_path.into(),
            message: message.into(),
        }
    }

    /// True for [`Severity::Error`].
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// One line: control characters (a newline, ESC, NUL) and bidirectional-text controls
    /// (U+202E) in the file name, key path or message — which quote the input — are
    /// written escaped (`\n`, `\u{1b}`), so a hostile name can neither split the line nor
    /// drive the terminal. The fields themselves (and JSON output) hold the text as is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.file.is_empty() {
            f.write_str("config")?;
        } else {
            f.write_str(&escape_controls(&self.file))?;
        }
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        write!(f, ": {}: ", self.severity.as_str())?;
        if !self.key_path.is_empty() {
            write!(f, "{}: ", escape_controls(&self.key_path))?;
        }
        f.write_str(&escape_controls(&self.message))
    }
}

/// True for a character that must not reach a terminal as is: a control character, or
/// one that reorders or hides text (bidirectional controls, zero-width marks).
fn is_hazard(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}'
        )
}

/// `text` with control and bidirectional-formatting characters written as Rust escapes
/// (`\n`, `\t`, `\0`, `\u{1b}`, `\u{202e}`); everything else, `\` and quotes included,
/// is left alone. Borrowed when there is nothing to escape.
///
/// The `bulkhead` CLI prints every piece of input through it: file names, key paths,
/// messages and quoted source lines.
///
/// ```
/// assert_eq!(bulkhead_config::escape_controls("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
/// assert_eq!(bulkhead_config::escape_controls("payment"), "payment");
/// ```
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_hazard) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_hazard(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A list of [`Diagnostic`]s, shown one per line.
///
/// It is the error type of [`crate::parse_file`] and of layering, so it implements
/// [`std::error::Error`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Diagnostics(Vec<Diagnostic>);

impl Diagnostics {
    /// The one error of a deploy file that could not be read (missing, not a regular
    /// file, …): `FILE: error: cannot read the deploy file: REASON`. A file that is not
    /// UTF-8 is read, and is an error at its first invalid byte
    /// ([`Diagnostics::of_read_error`]).
    pub fn unreadable(file: impl Into<String>, reason: impl fmt::Display) -> Self {
        Diagnostics::from(vec![Diagnostic::unplaced(
            Severity::Error,
            file,
            "",
            format!("cannot read the deploy file: {reason}"),
        )])
    }

    /// No diagnostics.
    pub fn new() -> Self {
        Diagnostics(Vec::new())
    }

    /// Adds one.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.0.push(diagnostic);
    }

    /// Adds all of `other`.
    pub fn extend(&mut self, other: Diagnostics) {
        self.0.extend(other.0);
    }

    /// The diagnostics in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when at least one is an error.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(Diagnostic::is_error)
    }

    /// Splits into (errors, warnings).
    pub fn partition(self) -> (Diagnostics, Diagnostics) {
        let (errors, warnings) = self.0.into_iter().partition(Diagnostic::is_error);
        (Diagnostics(errors), Diagnostics(warnings))
    }

    /// Sorts by file, position and message, and drops exact repeats.
    pub(crate) fn sort(&mut self) {
        self.0.sort_by(|a, b| {
            (&a.file, a.line, a.column, &a.key_path, &a.message).cmp(&(
                &b.file,
                b.line,
                b.column,
                &b.key_path,
                &b.message,
            ))
        });
        self.0.dedup();
    }
}

impl From<Vec<Diagnostic>> for Diagnostics {
    fn from(v: Vec<Diagnostic>) -> Self {
        Diagnostics(v)
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

//! Configuration for [bulkhead]: the typed config, its YAML format and its JSON Schema.
//!
//! One set of types drives everything: parsing, the JSON Schema, the compile-time checks
//! made by `#[bulkhead]`, and the runtime in `bulkhead-core`.
//!
//! - [`parse_file`] reads one `bulkheads.yaml` (templates resolved, every problem reported
//!   with file, line, column and key path) into the resolved [`Config`];
//! - [`Layers`] (feature `layers`) stacks the embedded config, deploy files and `BULKHEAD_…`
//!   environment variables with figment;
//! - [`check_against`] says whether a deploy may replace what the code declares;
//! - [`json_schema`] is the schema editors use; [`suggest`] sizes a pool from numbers.
//!
//! ```
//! let parsed = bulkhead::config::parse_file("bulkheads.yaml", r#"
//! templates:
//!   query: { kind: thread-pool, core_threads: 20, max_threads: 40, queue_capacity: 200 }
//! bulkheads:
//!   product-detail: { extends: query, max_queue_wait: 800ms }
//! "#).unwrap();
//! let pool = &parsed.config.bulkheads["product-detail"];
//! assert_eq!(pool.kind(), bulkhead::config::Kind::ThreadPool);
//! ```
//!
//! [bulkhead]: https://docs.rs/bulkheads
#![deny(missing_docs)]
#![warn(unreachable_pub)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod adaptive;
mod check;
mod deploy_rules;
pub use check::MAX_EXTENDS_DEPTH;
mod diagnostic;
mod file_format;
#[cfg(feature = "layers")]
mod layers;
mod lint;
mod pool_sizing;
mod report;
mod shares_lint;
mod source;
mod stores;
mod yaml;

use std::collections::BTreeMap;
use std::sync::Arc;

/// The typed config (re-exported from `bulkhead-config-types`, which the runtime uses
/// without this crate's parser).
pub use bulkhead_config_types::*;
pub use deploy_rules::check_against;
pub use diagnostic::{Diagnostic, Diagnostics, Severity, escape_controls};
pub use file_format::{BulkheadSpec, ConfigFile, json_schema, json_schema_text};
#[cfg(feature = "layers")]
pub use layers::{ENV_PREFIX, Layers, ResolvedDeploy, env_var_name};
pub use lint::{LONG_QUEUE_WARNING, TOTAL_THREADS_WARNING, worst_case_queue_wait};
pub use pool_sizing::{Suggestion, suggest};
pub use report::{CheckReport, render};
pub use source::{NotUtf8, read_deploy_file, read_input};
pub use yaml::{MAX_DEPTH, MAX_NODES, MAX_SOURCE_BYTES};

/// A config that parsed and validated: the resolved bulkheads and the lints' warnings.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// The resolved bulkheads, templates applied.
    pub config: Config,
    /// Lint warnings (never errors): sizes that work but will hurt under load.
    pub warnings: Diagnostics,
    /// Names a deploy layer gives that nothing declares, each with its "did you mean"
    /// (their entries are left out of `config`; each is also a warning, or an error when
    /// strict). Filled by [`Layers::resolve`] over declarations.
    pub undeclared: Vec<UndeclaredName>,
    /// Where each bulkhead's name was written.
    locations: BTreeMap<String, diagnostic::Location>,
    /// Where each bulkhead's cluster stores' `redis` values were written: (bulkhead,
    /// `rate_limit.store` or `cluster.store`) → (key path, location of the value).
    store_urls: check::StoreUrls,
}

impl Parsed {
    /// Where the bulkhead `name` was declared: (file, line, column).
    pub fn declared_at(&self, name: &str) -> Option<(&str, usize, usize)> {
        self.locations
            .get(name)
            .map(|l| (&*l.file, l.line, l.column))
    }

    /// Declarations that were resolved elsewhere (a program's typed declarations), with
    /// where each name is declared.
    #[cfg(feature = "layers")]
    pub(crate) fn declared(
        config: Config,
        locations: BTreeMap<String, diagnostic::Location>,
    ) -> Self {
        Parsed {
            config,
            warnings: Diagnostics::new(),
            undeclared: Vec::new(),
            locations,
            store_urls: check::StoreUrls::new(),
        }
    }

    pub(crate) fn from_checked(checked: check::Checked) -> Self {
        Parsed {
            config: checked.config,
            warnings: checked.warnings,
            undeclared: Vec::new(),
            locations: checked.locations,
            store_urls: checked.store_urls,
        }
    }
}

/// Reads a YAML document the way [`parse_file`] does (same limits, same scalar rules) and
/// returns it as JSON, for validating it against [`json_schema`] with a JSON Schema tool.
///
/// # Errors
///
/// The diagnostics of a document that is not YAML [`parse_file`] would read: too large,
/// too deep, too many nodes, or a syntax error, each placed in the file.
///
/// ```
/// let json = bulkhead_config::yaml_to_json("f.yaml", "bulkheads: { db: { kind: semaphore } }").unwrap();
/// assert_eq!(json["bulkheads"]["db"]["kind"], "semaphore");
/// ```
pub fn yaml_to_json(
    path_for_messages: &str,
    source: &str,
) -> Result<serde_json::Value, Diagnostics> {
    let (root, _) = yaml::parse(&Arc::from(path_for_messages), source)?;
    Ok(root.to_json())
}

/// Parses, validates and resolves one config document.
///
/// `path_for_messages` is how diagnostics name the file. On success the warnings of the
/// lints are in [`Parsed::warnings`].
///
/// # Errors
///
/// Every error found (syntax, unknown keys, values out of range, broken `extends`), all
/// at once and sorted by position.
///
/// ```
/// let err = bulkhead::config::parse_file("bulkheads.yaml", "bulkheads:\n  payment:\n    kind: semaphore\n    maxConcurrentCall: 10\n").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "bulkheads.yaml:4:5: error: bulkheads.payment.maxConcurrentCall: unknown key \
///      `maxConcurrentCall`: did you mean `max_concurrent_calls`?"
/// );
/// ```
pub fn parse_file(path_for_messages: &str, source: &str) -> Result<Parsed, Diagnostics> {
    let file: Arc<str> = Arc::from(path_for_messages);
    let (root, mut problems) = yaml::parse(&file, source)?;
    match check::check(&root, None, None) {
        Ok(checked) if problems.is_empty() => Ok(Parsed::from_checked(checked)),
        Ok(_) => {
            problems.sort();
            Err(problems)
        }
        Err(errors) => {
            problems.extend(errors);
            problems.sort();
            Err(problems)
        }
    }
}

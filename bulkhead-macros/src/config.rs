//! Finding and validating the crate's bulkhead declarations at compile time.
//!
//! Lookup, like sqlx-macros, is relative to the crate being compiled, never to the working
//! directory: the file is `bulkheads.yaml` beside the crate's `Cargo.toml`, or the path named
//! by `[package.metadata.bulkhead] config = "…"` in that `Cargo.toml` (relative to it).
//!
//! The crate's directory is `CARGO_MANIFEST_DIR`, unless `BULKHEAD_MANIFEST_DIR` is set.
//! The override exists for trybuild (trybuild#202): trybuild compiles test cases in a crate
//! of its own under `target/tests/trybuild/`, so `CARGO_MANIFEST_DIR` no longer names the
//! crate whose `bulkheads.yaml` the cases are written against; the test sets the override.
//!
//! The file is validated with `bulkhead_config::parse_file`, the same code the runtime and
//! the CLI use. Results are cached per file and modification time for the life of the
//! compiler process, holding only plain data (no spans), so a crate with many annotated
//! functions reads and parses its config once.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

pub(crate) use bulkhead_config::Kind;

/// The environment variable that overrides the crate directory (see the module docs).
pub(crate) const MANIFEST_DIR_OVERRIDE: &str = "BULKHEAD_MANIFEST_DIR";

/// The default file name, beside `Cargo.toml`.
pub(crate) const DEFAULT_FILE: &str = "bulkheads.yaml";

/// Where the config is, and whether `Cargo.toml` named it.
#[derive(Clone, Debug)]
pub(crate) struct Location {
    /// The crate's `Cargo.toml`, when there is one (tracked for rebuilds).
    pub cargo_toml: Option<PathBuf>,
    /// The config file (absolute).
    pub path: PathBuf,
    /// What `[package.metadata.bulkhead] config` said, if anything.
    pub named_in_manifest: Option<String>,
}

impl Location {
    /// The config file as the crate's authors know it: relative to `Cargo.toml`.
    pub(crate) fn relative_path(&self) -> String {
        match &self.named_in_manifest {
            Some(named) => named.clone(),
            None => DEFAULT_FILE.to_owned(),
        }
    }
}

/// One bulkhead as the config declares it: resolved, and where its name is written.
#[derive(Debug)]
pub(crate) struct Declared {
    pub config: bulkhead_config::BulkheadConfig,
    pub line: usize,
    pub column: usize,
}

impl Declared {
    pub(crate) fn kind(&self) -> Kind {
        self.config.kind()
    }
}

/// The outcome of looking for and validating the config.
#[derive(Debug)]
pub(crate) enum Loaded {
    /// A valid config: the declared bulkheads, resolved.
    Valid {
        location: Location,
        bulkheads: BTreeMap<String, Declared>,
    },
    /// No file where it was expected.
    Missing { location: Location },
    /// The file exists but is invalid: the rendered diagnostics, one per line.
    Invalid {
        location: Location,
        diagnostics: String,
        /// The use of the attribute the diagnostics are reported at (the first to ask).
        reported_at: Mutex<Option<String>>,
    },
    /// Something else went wrong (unreadable file, no crate directory, bad `Cargo.toml` key).
    Failed { message: String },
}

/// Validated configs by path, with the modification time they were read at.
type Cache = HashMap<PathBuf, (Option<SystemTime>, Arc<Loaded>)>;

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// Finds, reads and validates the config of the crate being compiled.
pub(crate) fn load() -> Arc<Loaded> {
    let location = match locate() {
        Ok(location) => location,
        Err(message) => return Arc::new(Loaded::Failed { message }),
    };
    let modified = std::fs::metadata(&location.path)
        .and_then(|m| m.modified())
        .ok();
    let mut guard = match CACHE.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let cache = guard.get_or_insert_with(HashMap::new);
    if let Some((stamp, loaded)) = cache.get(&location.path)
        && *stamp == modified
        && modified.is_some()
    {
        return Arc::clone(loaded);
    }
    let loaded = Arc::new(read_and_validate(location.clone()));
    cache.insert(location.path, (modified, Arc::clone(&loaded)));
    loaded
}

fn locate() -> Result<Location, String> {
    let manifest_dir = std::env::var_os(MANIFEST_DIR_OVERRIDE)
        .filter(|v| !v.is_empty())
        .or_else(|| std::env::var_os("CARGO_MANIFEST_DIR"))
        .map(PathBuf::from)
        .ok_or_else(|| {
            "`#[bulkhead]` cannot find the crate's directory: CARGO_MANIFEST_DIR is not set \
             (is this crate being built by cargo?)"
                .to_string()
        })?;
    let cargo_toml_path = manifest_dir.join("Cargo.toml");
    let (cargo_toml, named) = match std::fs::read_to_string(&cargo_toml_path) {
        Ok(text) => (
            Some(cargo_toml_path.clone()),
            config_key(&text, &cargo_toml_path)?,
        ),
        Err(_) => (None, None),
    };
    let path = match &named {
        Some(relative) => manifest_dir.join(relative),
        None => manifest_dir.join(DEFAULT_FILE),
    };
    Ok(Location {
        cargo_toml,
        path,
        named_in_manifest: named,
    })
}

/// Reads `[package.metadata.bulkhead] config` from a `Cargo.toml`.
fn config_key(text: &str, cargo_toml: &Path) -> Result<Option<String>, String> {
    // A Cargo.toml that does not parse is cargo's to report; treat it as naming nothing.
    let Ok(table) = text.parse::<toml::Table>() else {
        return Ok(None);
    };
    let value = table
        .get("package")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("bulkhead"))
        .and_then(|b| b.get("config"));
    match value {
        None => Ok(None),
        Some(toml::Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(_) => Err(format!(
            "{}: `[package.metadata.bulkhead] config` must be the path of the bulkhead config, \
             relative to Cargo.toml, as a string: config = \"bulkheads.yaml\"",
            cargo_toml.display()
        )),
    }
}

fn read_and_validate(location: Location) -> Loaded {
    let source = match std::fs::read_to_string(&location.path) {
        Ok(source) => source,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Loaded::Missing { location };
        }
        Err(e) => {
            return Loaded::Failed {
                message: format!(
                    "`#[bulkhead]` cannot read the bulkhead config {}: {e}",
                    location.path.display()
                ),
            };
        }
    };
    let display_path = location.path.display().to_string();
    match bulkhead_config::parse_file(&display_path, &source) {
        Ok(parsed) => Loaded::Valid {
            bulkheads: parsed
                .config
                .bulkheads
                .iter()
                .map(|(name, config)| {
                    let (_, line, column) = parsed.declared_at(name).unwrap_or(("", 0, 0));
                    let declared = Declared {
                        config: config.clone(),
                        line,
                        column,
                    };
                    (name.clone(), declared)
                })
                .collect(),
            location,
        },
        Err(diagnostics) => Loaded::Invalid {
            location,
            diagnostics: diagnostics.to_string(),
            reported_at: Mutex::new(None),
        },
    }
}

impl Loaded {
    /// The message for a missing config: where it looked and how to name another file.
    pub(crate) fn missing_message(location: &Location) -> String {
        let looked = location.path.display();
        match &location.named_in_manifest {
            Some(named) => format!(
                "no bulkhead config: Cargo.toml names `{named}` in `[package.metadata.bulkhead] config`, \
                 but {looked} does not exist\n\
                 help: create that file, or fix the path (it is relative to Cargo.toml)"
            ),
            None => format!(
                "no bulkhead config: `#[bulkhead]` looked for {looked} (the file beside Cargo.toml) \
                 and found nothing\n\
                 help: declare this crate's bulkheads in that file, e.g.\n\
                 \x20   bulkheads:\n\
                 \x20     payment: {{ kind: semaphore, max_concurrent_calls: 10 }}\n\
                 help: or name another file in Cargo.toml:\n\
                 \x20   [package.metadata.bulkhead]\n\
                 \x20   config = \"config/bulkheads.yaml\""
            ),
        }
    }
}

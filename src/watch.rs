//! A deploy file, watched: every change is layered, validated and applied as at start-up
//! (feature `watch`).
//!
//! [`watch`] (or [`Watch`], to choose the declared layer, the environment and the
//! debounce) applies the file once, then follows it. It watches the file's *directory*
//! (with `notify` and `notify-debouncer-full`), so it sees the ways deploys replace a file:
//! an edit in place, an editor's or a deploy tool's atomic rename over it, and the
//! Kubernetes ConfigMap swap, where the kubelet points the `..data` symlink at a new
//! directory and the file (itself a symlink through `..data`) changes without being
//! written. Events are debounced, then the file is read again; a change of contents is
//! layered like at start-up — the program's declarations < the file < `BULKHEAD_…`
//! environment variables ([`Deploy`]) — checked against every declaration (entries may
//! give sizes only) and applied.
//!
//! A bad change applies nothing: the bulkheads keep their sizes, the diagnostics (each
//! `FILE:LINE:COL: error: …`) are logged once at `ERROR` (target `bulkhead`), counted in
//! `bulkhead_config_reloads_total{result="error"}`, and kept as the last error, readable
//! from [`WatchGuard::status`], from [`Registry::reload_status`](crate::Registry::reload_status)
//! and from the admin endpoint. The next good change applies as usual.
//!
//! Dropping the [`WatchGuard`] stops watching; it returns once the watcher's thread has
//! ended.
//!
//! ```no_run
//! // At start-up: apply deploy/prod.yaml over the declarations, then follow it.
//! let _watching = bulkhead::watch("deploy/prod.yaml")?;
//! // … serve; the guard lives as long as the service.
//! # Ok::<(), bulkhead::WatchError>(())
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

use crate::{Deploy, DeployError};

/// How long the file must be quiet before a change is read, by default.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

/// Watches `path` with the defaults of [`Watch`]: applies it now, then on every change,
/// layered over the program's declarations with the process's `BULKHEAD_…` environment
/// variables on top.
///
/// # Errors
///
/// As [`Watch::start`].
pub fn watch(path: impl AsRef<Path>) -> Result<WatchGuard, WatchError> {
    Watch::new(path).start()
}

/// A watched deploy file, before it starts. See the [module docs](self).
#[derive(Clone, Debug)]
#[must_use = "a Watch does nothing until it is started"]
pub struct Watch {
    path: PathBuf,
    env: bool,
    strict: bool,
    debounce: Duration,
}

impl Watch {
    /// Watches the deploy file at `path`.
    pub fn new(path: impl AsRef<Path>) -> Self {
        Watch {
            path: path.as_ref().to_path_buf(),
            env: true,
            strict: false,
            debounce: DEFAULT_DEBOUNCE,
        }
    }

    /// Refuses a change that names a bulkhead the program does not declare (by default
    /// it is applied with a warning, like [`install`](crate::install)).
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    /// Leaves the `BULKHEAD_…` environment variables out (they are layered on top by
    /// default, as at start-up).
    pub fn without_env(mut self) -> Self {
        self.env = false;
        self
    }

    /// How long the directory must be quiet before the file is read again
    /// ([`DEFAULT_DEBOUNCE`] by default): one save, rename or symlink swap, however many
    /// file-system events it makes, is read once.
    pub fn debounce(mut self, quiet: Duration) -> Self {
        self.debounce = quiet;
        self
    }

    /// Applies the file now and starts following it.
    ///
    /// Fails when the file does not apply now (nothing is applied and nothing is watched:
    /// a service should not start on a broken deploy) or when its directory cannot be
    /// watched.
    ///
    /// # Errors
    ///
    /// [`WatchError`]: the file does not apply now, or cannot be watched.
    pub fn start(self) -> Result<WatchGuard, WatchError> {
        let directory = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let state = Arc::new(WatchState::default());
        let mut follower = Follower {
            watch: self.clone(),
            state: Arc::clone(&state),
            last_seen: None,
        };
        follower.check().map_err(WatchError::Config)?;
        let mut debouncer =
            new_debouncer(self.debounce, None, move |result: DebounceEventResult| {
                follower.on_events(result)
            })
            .map_err(|e| WatchError::Watcher(e.to_string()))?;
        debouncer
            .watch(&directory, RecursiveMode::NonRecursive)
            .map_err(|e| WatchError::Watcher(format!("{}: {e}", directory.display())))?;
        Ok(WatchGuard {
            path: self.path,
            debouncer: Some(debouncer),
            state,
        })
    }
}

/// Why [`Watch::start`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum WatchError {
    /// The file did not apply: the diagnostics, one per line (`FILE:LINE:COL: error: …`),
    /// or why it was refused.
    Config(String),
    /// The file's directory could not be watched.
    Watcher(String),
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchError::Config(message) => write!(f, "the deploy file does not apply:\n{message}"),
            WatchError::Watcher(message) => write!(f, "cannot watch the deploy file: {message}"),
        }
    }
}

impl std::error::Error for WatchError {}

/// Watching until dropped. See the [module docs](self).
#[must_use = "the file is watched only while the guard lives"]
pub struct WatchGuard {
    path: PathBuf,
    debouncer: Option<Debouncer<RecommendedWatcher, RecommendedCache>>,
    state: Arc<WatchState>,
}

impl WatchGuard {
    /// The watched file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What this watcher did so far: changes applied and refused, the last error. It
    /// stays readable after the guard drops.
    pub fn status(&self) -> WatchStatus {
        WatchStatus(Arc::clone(&self.state))
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if let Some(debouncer) = self.debouncer.take() {
            // Joins the debouncer's thread: no change is applied after this returns.
            debouncer.stop();
        }
    }
}

impl fmt::Debug for WatchGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchGuard")
            .field("path", &self.path)
            .field("status", &self.status())
            .finish()
    }
}

/// What one watcher did; see [`WatchGuard::status`].
#[derive(Clone)]
pub struct WatchStatus(Arc<WatchState>);

impl WatchStatus {
    /// Changes of the file applied (the first application at start included).
    pub fn applied(&self) -> u64 {
        self.0.applied.load(Ordering::Relaxed)
    }

    /// Changes refused, with nothing applied.
    pub fn refused(&self) -> u64 {
        self.0.refused.load(Ordering::Relaxed)
    }

    /// The diagnostics of the last refused change, if any.
    pub fn last_error(&self) -> Option<String> {
        self.0
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// False once the watcher has stopped (its guard dropped): no change is read after.
    pub fn is_watching(&self) -> bool {
        !self.0.stopped.load(Ordering::Acquire)
    }
}

impl fmt::Debug for WatchStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchStatus")
            .field("applied", &self.applied())
            .field("refused", &self.refused())
            .field("last_error", &self.last_error())
            .field("watching", &self.is_watching())
            .finish()
    }
}

#[derive(Default)]
struct WatchState {
    applied: AtomicU64,
    refused: AtomicU64,
    last_error: std::sync::Mutex<Option<String>>,
    stopped: AtomicBool,
}

/// Runs on the debouncer's thread; dropped (marking the watcher stopped) when it ends.
struct Follower {
    watch: Watch,
    state: Arc<WatchState>,
    /// The contents last read, applied or not: the same contents are not applied (or
    /// reported) twice.
    last_seen: Option<Result<String, String>>,
}

impl Follower {
    fn on_events(&mut self, result: DebounceEventResult) {
        match result {
            Ok(events) if !events.is_empty() => {
                let _ = self.check();
            }
            Ok(_) => {}
            Err(errors) => {
                for error in errors {
                    tracing::error!(
                        target: "bulkhead",
                        file = %self.watch.path.display(),
                        "watching the deploy file: {error}"
                    );
                }
            }
        }
    }

    /// Reads the file; if it changed since last read, layers and applies it.
    fn check(&mut self) -> Result<(), String> {
        let read = read_bounded(&self.watch.path).map_err(|e| {
            format!(
                "{}: error: cannot read the deploy file: {e}",
                self.watch.path.display()
            )
        });
        if self.last_seen.as_ref() == Some(&read) {
            return Ok(());
        }
        self.last_seen = Some(read.clone());
        let applied = read.and_then(|contents| self.apply(&contents));
        self.report(applied)
    }

    /// Counts, keeps and logs what one change did.
    fn report(&self, applied: Result<(), String>) -> Result<(), String> {
        match applied {
            Ok(()) => {
                self.state.applied.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    target: "bulkhead",
                    file = %self.watch.path.display(),
                    "applied the deploy file"
                );
                Ok(())
            }
            Err(message) => {
                self.state.refused.fetch_add(1, Ordering::Relaxed);
                *self
                    .state
                    .last_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(message.clone());
                tracing::error!(
                    target: "bulkhead",
                    file = %self.watch.path.display(),
                    "the deploy file does not apply; the bulkheads keep their sizes:\n{message}"
                );
                Err(message)
            }
        }
    }

    /// Layers `contents` as at start-up and applies it; the diagnostics if it does not.
    fn apply(&self, contents: &str) -> Result<(), String> {
        let name = self.watch.path.display().to_string();
        let deploy = Deploy::new()
            .yaml(&name, contents)
            .map_err(DeployError::Invalid);
        let deploy = deploy.map(|d| if self.watch.env { d.env() } else { d });
        let deploy = deploy.map(|d| if self.watch.strict { d.strict() } else { d });
        match deploy.and_then(Deploy::install) {
            Ok(_) => Ok(()),
            // The registry counted its own refusal.
            Err(DeployError::Refused(refused)) => Err(refused.to_string()),
            Err(DeployError::Invalid(diagnostics)) => Err(self.refused_early(diagnostics)),
            Err(other) => Err(self.refused_early(other)),
        }
    }

    /// Counts a change refused before it reached the registry.
    fn refused_early(&self, why: impl fmt::Display) -> String {
        let message = why.to_string();
        crate::registry().record_reload_failure(message.clone());
        message
    }
}

/// The file's text, read only up to the largest config accepted (one byte more, so that
/// the parser reports a file too large instead of this reading it all).
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let limit = crate::config::MAX_SOURCE_BYTES as u64 + 1;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(limit)
        .read_to_string(&mut text)?;
    Ok(text)
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::Release);
    }
}

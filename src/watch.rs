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
//! Every read goes through the registry's one deploy path, like any other deploy, so each
//! outcome is recorded in the same places: counted in [`Registry::reload_status`](crate::Registry::reload_status)
//! (and so `GET /reloads` and `bulkhead_config_reloads_total{result}`), and logged as one
//! line (target `bulkhead`: `INFO` applied, `ERROR` refused, the diagnostics in the
//! `problems` field).
//!
//! A bad change applies nothing: the bulkheads keep their sizes, and the diagnostics (each
//! `FILE:LINE:COL: error: …`) are kept as the last error, readable from
//! [`WatchGuard::status`] and the registry. The next good change applies as usual. Refused
//! the same way, never blocking the watcher:
//!
//! * anything but a regular file swapped in — a named pipe, a socket, a device or a
//!   directory — refused by its type before it is read (the file is opened non-blocking);
//! * a loop of symbolic links, a file that is not UTF-8, a missing file;
//! * an empty file (zero bytes, or blanks and comments only) — what an editor's truncate
//!   before its write leaves for a moment: applying it would send every bulkhead back to
//!   its declared sizes. To clear every override deliberately, write `bulkheads: {}`.
//!
//! [`WatchStatus::drifted`] says when the running config differs from the file (its last
//! change was refused, or another deploy was applied since).
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

use std::cell::Cell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

use crate::config::Diagnostics;
use crate::{Deploy, DeployError, DeployOutcome, DeploySubscription};

thread_local! {
    /// The watcher deploying on this thread now (its state's address, 0: none): each
    /// watcher's deploy listener records only its own deploys.
    static DEPLOYING: Cell<usize> = const { Cell::new(0) };
}

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
        let state = Arc::new(WatchState {
            path: self.path.clone(),
            in_sync: AtomicBool::new(false),
            applied: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            last_error: std::sync::Mutex::new(None),
            stopped: AtomicBool::new(false),
        });
        // The watcher's status is written from the registry's record of each of its
        // deploys, so it never lags behind what the registry says.
        let recorder = Arc::clone(&state);
        let listening = crate::registry().subscribe_deploys(move |outcome| {
            if DEPLOYING.get() == Arc::as_ptr(&recorder) as usize {
                recorder.record(outcome);
            }
        });
        let mut follower = Follower {
            watch: self.clone(),
            state: Arc::clone(&state),
            last_seen: None,
            _listening: listening,
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

    /// Whether the running config differs from the watched file: its last change was
    /// refused (the bulkheads keep the sizes of the deploy before it), or another deploy
    /// — a `PATCH` or `PUT` of the admin router, an [`install`](crate::install) — was
    /// applied after it ([`ReloadStatus::in_force`](crate::ReloadStatus::in_force) says
    /// which). The next change of the file that applies ends the drift.
    pub fn drifted(&self) -> bool {
        let file = self.0.path.display().to_string();
        !self.0.in_sync.load(Ordering::Acquire)
            || crate::registry().reload_status().in_force.as_deref() != Some(file.as_str())
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
            .field("drifted", &self.drifted())
            .field("watching", &self.is_watching())
            .finish()
    }
}

struct WatchState {
    path: PathBuf,
    /// The file's current contents are the deploy applied last by this watcher.
    in_sync: AtomicBool,
    applied: AtomicU64,
    refused: AtomicU64,
    last_error: std::sync::Mutex<Option<String>>,
    stopped: AtomicBool,
}

impl WatchState {
    /// One of this watcher's deploys, as the registry recorded it.
    fn record(&self, outcome: &DeployOutcome<'_>) {
        match outcome {
            DeployOutcome::Applied { .. } => {
                self.in_sync.store(true, Ordering::Release);
                self.applied.fetch_add(1, Ordering::AcqRel);
            }
            DeployOutcome::Refused { message, .. } => {
                self.in_sync.store(false, Ordering::Release);
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((*message).to_owned());
                self.refused.fetch_add(1, Ordering::AcqRel);
            }
            _ => {}
        }
    }
}

/// Runs on the debouncer's thread; dropped (marking the watcher stopped) when it ends.
struct Follower {
    watch: Watch,
    state: Arc<WatchState>,
    /// The contents last read, applied or not: the same contents are not applied (or
    /// reported) twice.
    last_seen: Option<Result<String, Diagnostics>>,
    /// Records this watcher's deploys in `state`.
    _listening: DeploySubscription,
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

    /// Reads the file; if it changed since last read, layers and applies it. Every
    /// outcome — applied, refused, unreadable — is recorded by the registry's one deploy
    /// path ([`Registry::deploy_with`](crate::Registry::deploy_with)).
    fn check(&mut self) -> Result<(), String> {
        let path = self.watch.path.display().to_string();
        let read = bulkhead_config::read_deploy_file(&self.watch.path)
            .map_err(|e| Diagnostics::of_read_error(&*path, &e));
        if self.last_seen.as_ref() == Some(&read) {
            return Ok(());
        }
        self.last_seen = Some(read.clone());
        DEPLOYING.set(Arc::as_ptr(&self.state) as usize);
        let outcome = match read {
            Ok(text) => {
                let mut deploy = Deploy::of_text(&path, &text, self.watch.env);
                if self.watch.strict {
                    deploy = deploy.strict();
                }
                deploy.install_as(&path)
            }
            Err(problems) => crate::deploy::apply(&path, self.watch.strict, |_| {
                Err(DeployError::Invalid(problems))
            }),
        };
        DEPLOYING.set(0);
        match outcome {
            Ok(_) => Ok(()),
            // Refused before the registry (it cannot be built): recorded here alone.
            Err(DeployError::Conflict(conflict)) => {
                let message = conflict.to_string();
                self.state.record(&DeployOutcome::Refused {
                    source: &path,
                    message: &message,
                });
                Err(message)
            }
            // The registry recorded it, and so this watcher's status.
            Err(refused) => Err(refused.to_string()),
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::Release);
    }
}

//! How config reloads went: applied and refused reloads counted
//! (`bulkhead_config_reloads_total{result}`), and the last refusal kept for operators.
//!
//! Every deploy takes one path, [`Registry::deploy_with`](crate::Registry::deploy_with),
//! which records its outcome here — applied, refused by the registry, or refused before
//! (a deploy file unreadable or invalid): the counts and the last refusal
//! ([`ReloadStatus`], so `GET /reloads` and `bulkhead_config_reloads_total`), one log line,
//! and the listeners of [`Registry::subscribe_deploys`](crate::Registry::subscribe_deploys).
//! No front end counts, logs or reports for itself.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::SystemTime;

use parking_lot::{Mutex, RwLock};

use crate::ReloadReport;

/// How one deploy ended, as the listeners of
/// [`Registry::subscribe_deploys`](crate::Registry::subscribe_deploys) see it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum DeployOutcome<'a> {
    /// Applied: every bulkhead runs with it.
    Applied {
        /// Where the deploy came from (a file's path, `PATCH /bulkheads/{name} by …`).
        source: &'a str,
        /// What it changed.
        report: &'a ReloadReport,
    },
    /// Refused, nothing applied: invalid, unreadable, or refused by the registry.
    Refused {
        /// Where the deploy came from.
        source: &'a str,
        /// Why: every problem, one per line.
        message: &'a str,
    },
}

impl DeployOutcome<'_> {
    /// Where the deploy came from.
    pub fn source(&self) -> &str {
        match self {
            DeployOutcome::Applied { source, .. } | DeployOutcome::Refused { source, .. } => source,
        }
    }
}

type DeployListener = Arc<dyn Fn(&DeployOutcome<'_>) + Send + Sync>;

#[derive(Default)]
struct Listeners {
    next_id: u64,
    entries: Vec<(u64, DeployListener)>,
}

/// Listening to a registry's deploys until dropped.
#[must_use = "the listener is removed as soon as the subscription is dropped"]
pub struct DeploySubscription {
    listeners: Weak<RwLock<Listeners>>,
    id: u64,
}

impl Drop for DeploySubscription {
    fn drop(&mut self) {
        if let Some(listeners) = self.listeners.upgrade() {
            let removed = {
                let mut listeners = listeners.write();
                let at = listeners.entries.iter().position(|(id, _)| *id == self.id);
                at.map(|at| listeners.entries.remove(at))
            };
            // Dropped once the lock is released: a listener may own subscriptions, whose
            // drop takes it again.
            drop(removed);
        }
    }
}

impl fmt::Debug for DeploySubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeploySubscription")
            .field("id", &self.id)
            .finish()
    }
}

/// What the reloads of a registry did so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ReloadStatus {
    /// Configs applied (including unchanged ones).
    pub applied: u64,
    /// Configs refused, with nothing applied.
    pub refused: u64,
    /// The most recent refusal, if any (kept after later successes, for the record).
    pub last_error: Option<ReloadFailure>,
    /// Where the deploy in force came from (`None`: none applied yet): a deploy file's
    /// path, `PUT /config`, `PATCH /bulkheads/{name}`, or a config built in code. When
    /// a deploy file is watched, anything else here means the running config differs
    /// from the file (see `WatchStatus::drifted`).
    pub in_force: Option<String>,
}

/// One refused reload.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ReloadFailure {
    /// When it was refused (the system's wall clock).
    pub at: SystemTime,
    /// Why: every problem, one per line (`FILE:LINE:COL: error: …` for a deploy file).
    pub message: String,
}

/// The one record of every deploy's outcome, one per registry.
#[derive(Default)]
pub(crate) struct ReloadLog {
    applied: AtomicU64,
    refused: AtomicU64,
    last_error: Mutex<Option<ReloadFailure>>,
    in_force: Mutex<Option<String>>,
    listeners: Arc<RwLock<Listeners>>,
}

impl fmt::Debug for ReloadLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadLog")
            .field("status", &self.status())
            .field("listeners", &self.listeners.read().entries.len())
            .finish()
    }
}

impl ReloadLog {
    /// Records `outcome` in the status and the log: called under the deploy lock, so
    /// `in_force` names the deploy applied last.
    pub(crate) fn record(&self, outcome: &DeployOutcome<'_>) {
        match *outcome {
            DeployOutcome::Applied { source, report } => {
                self.applied.fetch_add(1, Relaxed);
                *self.in_force.lock() = Some(source.to_owned());
                tracing::info!(
                    target: "bulkhead",
                    source,
                    resized = ?report.resized,
                    undeclared = ?report.undeclared.iter().map(|u| &u.name).collect::<Vec<_>>(),
                    warnings = ?report.warnings,
                    "deploy applied"
                );
            }
            DeployOutcome::Refused { source, message } => {
                self.refused.fetch_add(1, Relaxed);
                *self.last_error.lock() = Some(ReloadFailure {
                    at: SystemTime::now(),
                    message: message.to_owned(),
                });
                // One line: the diagnostics (one per line) are a field, escaped.
                tracing::error!(
                    target: "bulkhead",
                    source,
                    problems = ?message,
                    "deploy refused, nothing applied; the bulkheads keep their sizes"
                );
            }
        }
    }

    /// Tells every listener (after the deploy lock is released, so a listener may
    /// deploy). A panicking listener is logged and skipped.
    pub(crate) fn notify(&self, outcome: &DeployOutcome<'_>) {
        let listeners: Vec<DeployListener> = self
            .listeners
            .read()
            .entries
            .iter()
            .map(|(_, l)| Arc::clone(l))
            .collect();
        for listener in listeners {
            if catch_unwind(AssertUnwindSafe(|| listener(outcome))).is_err() {
                tracing::error!(
                    target: "bulkhead",
                    source = outcome.source(),
                    "a deploy listener panicked; the deploy's outcome is recorded regardless"
                );
            }
        }
    }

    pub(crate) fn subscribe(
        &self,
        listener: impl Fn(&DeployOutcome<'_>) + Send + Sync + 'static,
    ) -> DeploySubscription {
        let mut listeners = self.listeners.write();
        let id = listeners.next_id;
        listeners.next_id += 1;
        listeners.entries.push((id, Arc::new(listener)));
        DeploySubscription {
            listeners: Arc::downgrade(&self.listeners),
            id,
        }
    }

    pub(crate) fn status(&self) -> ReloadStatus {
        ReloadStatus {
            applied: self.applied.load(Relaxed),
            refused: self.refused.load(Relaxed),
            last_error: self.last_error.lock().clone(),
            in_force: self.in_force.lock().clone(),
        }
    }
}

//! How config reloads went: applied and refused reloads counted
//! (`bulkhead_config_reloads_total{result}`), and the last refusal kept for operators.
//!
//! Every deploy takes one path, [`Registry::deploy_with`](crate::Registry::deploy_with),
//! which records its outcome here — applied, refused by the registry, or refused before
//! (a deploy file unreadable or invalid): no front end counts for itself.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

use parking_lot::Mutex;

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

/// The counters behind [`ReloadStatus`], one per registry.
#[derive(Debug, Default)]
pub(crate) struct ReloadLog {
    applied: AtomicU64,
    refused: AtomicU64,
    last_error: Mutex<Option<ReloadFailure>>,
    in_force: Mutex<Option<String>>,
}

impl ReloadLog {
    pub(crate) fn applied(&self, source: &str) {
        self.applied.fetch_add(1, Relaxed);
        *self.in_force.lock() = Some(source.to_owned());
    }

    pub(crate) fn refused(&self, message: String) {
        self.refused.fetch_add(1, Relaxed);
        *self.last_error.lock() = Some(ReloadFailure {
            at: SystemTime::now(),
            message,
        });
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

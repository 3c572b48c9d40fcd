//! The registry: every bulkhead of a process, by name.
//!
//! # Invariants
//!
//! 1. An entry, once registered, is never replaced or removed. [`Registry::reload`] resizes
//!    it in place, so a handle obtained earlier (a clone of the [`Bulkhead`], or a static
//!    handle held by a macro expansion) always refers to the live bulkhead.
//! 2. A name has one kind for the life of the registry: registering it again with the
//!    same kind returns the existing bulkhead; with another kind, or reloading it with
//!    another kind, is an error that changes nothing.
//! 3. A reload is validated as a whole before anything is applied: it either applies to
//!    every registered bulkhead or to none. Reloads are serialised.
//!
//! Lookups go through a [`DashMap`], so concurrent lookups of different names do not
//! contend; callers on a hot path keep the handle instead of looking it up per call.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bulkhead_config_types::{BulkheadConfig, Config, Kind, Limits};
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use once_cell::sync::Lazy;
use parking_lot::Mutex;

use crate::BulkheadName;
use crate::clock::{Clock, system_clock};
use crate::semaphore::{SemaphoreBulkhead, SemaphoreShutdown};
use crate::snapshot::BulkheadSnapshot;
use crate::thread_pool::{ShutdownReport, ThreadPoolBulkhead};

/// A registered bulkhead of either kind. Cloning is cheap and every clone is the same
/// bulkhead.
#[derive(Clone, Debug)]
pub enum Bulkhead {
    /// A concurrency limit; the body runs on the caller's thread or task.
    Semaphore(SemaphoreBulkhead),
    /// A bounded pool of named worker threads.
    ThreadPool(ThreadPoolBulkhead),
}

impl Bulkhead {
    /// Builds a bulkhead of the kind `config` declares, on `clock`.
    pub fn from_config(
        name: impl Into<BulkheadName>,
        config: &BulkheadConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let name = name.into();
        let bulkhead = match &config.limits {
            Limits::Semaphore(limits) => Bulkhead::Semaphore(
                SemaphoreBulkhead::with_clock(name, limits, clock)
                    .with_rate_limit(config.rate_limit.as_ref()),
            ),
            Limits::ThreadPool(limits) => Bulkhead::ThreadPool(
                ThreadPoolBulkhead::with_clock(name, limits, clock)
                    .with_rate_limit(config.rate_limit.as_ref()),
            ),
        };
        bulkhead.telemetry().set_saturation(config.saturation);
        bulkhead
    }

    fn telemetry(&self) -> &crate::telemetry::Telemetry {
        match self {
            Bulkhead::Semaphore(b) => b.telemetry(),
            Bulkhead::ThreadPool(b) => b.telemetry(),
        }
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &BulkheadName {
        match self {
            Bulkhead::Semaphore(b) => b.name(),
            Bulkhead::ThreadPool(b) => b.name(),
        }
    }

    /// Semaphore or thread pool.
    pub fn kind(&self) -> Kind {
        match self {
            Bulkhead::Semaphore(_) => Kind::Semaphore,
            Bulkhead::ThreadPool(_) => Kind::ThreadPool,
        }
    }

    /// The semaphore bulkhead, if this is one.
    pub fn as_semaphore(&self) -> Option<&SemaphoreBulkhead> {
        match self {
            Bulkhead::Semaphore(b) => Some(b),
            Bulkhead::ThreadPool(_) => None,
        }
    }

    /// The thread-pool bulkhead, if this is one.
    pub fn as_thread_pool(&self) -> Option<&ThreadPoolBulkhead> {
        match self {
            Bulkhead::ThreadPool(b) => Some(b),
            Bulkhead::Semaphore(_) => None,
        }
    }

    /// A point-in-time view of the bulkhead.
    pub fn snapshot(&self) -> BulkheadSnapshot {
        match self {
            Bulkhead::Semaphore(b) => b.snapshot(),
            Bulkhead::ThreadPool(b) => b.snapshot(),
        }
    }

    /// Applies `config`'s limits in place. The caller has checked that the kinds match.
    fn apply(&self, config: &BulkheadConfig) {
        self.telemetry().set_saturation(config.saturation);
        match (self, &config.limits) {
            (Bulkhead::Semaphore(b), Limits::Semaphore(limits)) => {
                b.resize(limits);
                b.set_rate_limit(config.rate_limit.as_ref());
            }
            (Bulkhead::ThreadPool(b), Limits::ThreadPool(limits)) => {
                b.resize(limits);
                b.set_rate_limit(config.rate_limit.as_ref());
            }
            // Kinds are checked before anything is applied (invariant 2).
            _ => {}
        }
    }

    /// Stops admission and waits at most `timeout` for running work.
    pub fn shutdown(&self, timeout: Duration) -> BulkheadShutdown {
        match self {
            Bulkhead::Semaphore(b) => BulkheadShutdown::Semaphore(b.shutdown(timeout)),
            Bulkhead::ThreadPool(b) => BulkheadShutdown::ThreadPool(b.shutdown(timeout)),
        }
    }
}

/// What shutting down one bulkhead did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkheadShutdown {
    /// A semaphore bulkhead's report.
    Semaphore(SemaphoreShutdown),
    /// A thread-pool bulkhead's report.
    ThreadPool(ShutdownReport),
}

impl BulkheadShutdown {
    /// Calls still running when the timeout passed (0: everything finished).
    pub fn still_running(&self) -> u32 {
        match self {
            BulkheadShutdown::Semaphore(r) => r.still_running,
            BulkheadShutdown::ThreadPool(r) => r.still_running,
        }
    }
}

/// Why [`Registry::register`] refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The name is already registered as a bulkhead of another kind.
    #[error(
        "bulkhead `{name}` is already registered as a {registered} bulkhead, not a {requested} one: a bulkhead's kind cannot change"
    )]
    KindMismatch {
        /// The bulkhead's name.
        name: String,
        /// The kind it was registered with.
        registered: Kind,
        /// The kind asked for now.
        requested: Kind,
    },
}

/// One reason a reload was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReloadProblem {
    /// The new config gives a registered bulkhead another kind.
    KindChanged {
        /// The bulkhead's name.
        name: String,
        /// The kind it runs as.
        registered: Kind,
        /// The kind the new config declares.
        configured: Kind,
    },
    /// The new config no longer declares a bulkhead the program uses.
    Dropped {
        /// The bulkhead's name.
        name: String,
    },
}

impl fmt::Display for ReloadProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadProblem::KindChanged {
                name,
                registered,
                configured,
            } => write!(
                f,
                "bulkhead `{name}` runs as a {registered} bulkhead; the new config makes it a \
                 {configured}: a deploy may change sizes, not kinds"
            ),
            ReloadProblem::Dropped { name } => write!(
                f,
                "bulkhead `{name}` is in use but missing from the new config: declare it again"
            ),
        }
    }
}

/// Why [`Registry::reload`] refused a config. Nothing was applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("reload refused, nothing applied: {}", join(problems))]
pub struct ReloadError {
    /// Every problem found, in name order.
    pub problems: Vec<ReloadProblem>,
}

fn join(problems: &[ReloadProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What [`Registry::reload`] did, by bulkhead name (each list sorted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadReport {
    /// Registered bulkheads whose limits changed and were applied in place.
    pub resized: Vec<String>,
    /// Registered bulkheads whose config did not change.
    pub unchanged: Vec<String>,
    /// Names in the config that no code has registered (yet): nothing to apply. A typo in
    /// a deploy file shows up here.
    pub not_registered: Vec<String>,
}

/// A registered bulkhead and the config it currently runs with.
struct Registered {
    bulkhead: Bulkhead,
    config: Mutex<BulkheadConfig>,
}

/// Every bulkhead of a process (or of a test), by name.
///
/// ```
/// use bulkhead_config_types::{BulkheadConfig, Config, SemaphoreConfig};
/// use bulkhead_core::Registry;
///
/// let registry = Registry::new();
/// let limits = |n| BulkheadConfig::semaphore(SemaphoreConfig {
///     max_concurrent_calls: n,
///     ..SemaphoreConfig::default()
/// });
/// let payment = registry.register("payment", &limits(10)).unwrap();
///
/// // A deploy raises the limit: the same bulkhead is resized in place.
/// let mut config = Config::default();
/// config.bulkheads.insert("payment".into(), limits(20));
/// let report = registry.reload(&config).unwrap();
/// assert_eq!(report.resized, ["payment"]);
/// assert_eq!(payment.snapshot().limit, 20);
/// ```
pub struct Registry {
    /// Names are leaked once per registered bulkhead (entries live as long as the registry,
    /// and the process-wide one for the whole program), so every refusal's name is a
    /// `&'static str`: building and dropping the error touch no reference count.
    entries: DashMap<&'static str, Registered>,
    clock: Arc<dyn Clock>,
    /// Serialises reloads (invariant 3).
    reloading: Mutex<()>,
}

impl Registry {
    /// An empty registry on the system clock.
    pub fn new() -> Self {
        Self::with_clock(system_clock())
    }

    /// An empty registry whose bulkheads read time through `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Registry {
            entries: DashMap::new(),
            clock,
            reloading: Mutex::new(()),
        }
    }

    /// Returns the bulkhead registered as `name`, building it from `config` if there is none.
    ///
    /// Idempotent: when `name` is already registered with the same kind, the existing
    /// bulkhead is returned unchanged (`config`'s sizes are not applied; use
    /// [`reload`](Self::reload) to change them).
    pub fn register(&self, name: &str, config: &BulkheadConfig) -> Result<Bulkhead, RegistryError> {
        if let Some(existing) = self.entries.get(name) {
            return same_kind(name, &existing.bulkhead, config);
        }
        let name: &'static str = Box::leak(Box::from(name));
        match self.entries.entry(name) {
            Entry::Occupied(existing) => same_kind(name, &existing.get().bulkhead, config),
            Entry::Vacant(vacant) => {
                let bulkhead = Bulkhead::from_config(
                    BulkheadName::from_static(name),
                    config,
                    Arc::clone(&self.clock),
                );
                vacant.insert(Registered {
                    bulkhead: bulkhead.clone(),
                    config: Mutex::new(config.clone()),
                });
                Ok(bulkhead)
            }
        }
    }

    /// The bulkhead registered as `name`.
    pub fn get(&self, name: &str) -> Option<Bulkhead> {
        self.entries.get(name).map(|e| e.bulkhead.clone())
    }

    /// The semaphore bulkhead registered as `name` (`None` if absent or a thread pool).
    pub fn semaphore(&self, name: &str) -> Option<SemaphoreBulkhead> {
        self.entries
            .get(name)
            .and_then(|e| e.bulkhead.as_semaphore().cloned())
    }

    /// The thread-pool bulkhead registered as `name` (`None` if absent or a semaphore).
    pub fn thread_pool(&self, name: &str) -> Option<ThreadPoolBulkhead> {
        self.entries
            .get(name)
            .and_then(|e| e.bulkhead.as_thread_pool().cloned())
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.entries.iter().map(|e| e.key().to_string()).collect();
        names.sort();
        names
    }

    /// Applies a new config to the registered bulkheads, in place.
    ///
    /// Refused as a whole, with nothing applied, when it changes the kind of a registered
    /// bulkhead or leaves one out. Names it declares that nothing registered are reported
    /// in [`ReloadReport::not_registered`]. Never blocks on running calls (see
    /// [`SemaphoreBulkhead::resize`] and [`ThreadPoolBulkhead::resize`]).
    pub fn reload(&self, config: &Config) -> Result<ReloadReport, ReloadError> {
        let _serialised = self.reloading.lock();
        let mut registered: Vec<(String, Bulkhead)> = self
            .entries
            .iter()
            .map(|e| (e.key().to_string(), e.bulkhead.clone()))
            .collect();
        registered.sort_by(|a, b| a.0.cmp(&b.0));

        let problems: Vec<ReloadProblem> = registered
            .iter()
            .filter_map(|(name, bulkhead)| match config.bulkheads.get(name) {
                None => Some(ReloadProblem::Dropped { name: name.clone() }),
                Some(new) if new.kind() != bulkhead.kind() => Some(ReloadProblem::KindChanged {
                    name: name.clone(),
                    registered: bulkhead.kind(),
                    configured: new.kind(),
                }),
                Some(_) => None,
            })
            .collect();
        if !problems.is_empty() {
            return Err(ReloadError { problems });
        }

        let mut report = ReloadReport::default();
        for (name, bulkhead) in registered {
            let Some(new) = config.bulkheads.get(&name) else {
                continue;
            };
            let Some(entry) = self.entries.get(name.as_str()) else {
                continue;
            };
            let mut current = entry.config.lock();
            if *current == *new {
                report.unchanged.push(name);
            } else {
                bulkhead.apply(new);
                *current = new.clone();
                report.resized.push(name);
            }
        }
        report.not_registered = config
            .bulkheads
            .keys()
            .filter(|name| !self.entries.contains_key(name.as_str()))
            .cloned()
            .collect();
        Ok(report)
    }

    /// A point-in-time view of every registered bulkhead, sorted by name.
    pub fn snapshot(&self) -> Vec<BulkheadSnapshot> {
        let mut snapshots: Vec<BulkheadSnapshot> =
            self.entries.iter().map(|e| e.bulkhead.snapshot()).collect();
        snapshots.sort_by(|a, b| a.name.cmp(&b.name));
        snapshots
    }

    /// Shuts every registered bulkhead down at once: admission stops everywhere, then each
    /// waits for its running work; the whole takes at most about `timeout`.
    pub fn shutdown(&self, timeout: Duration) -> BTreeMap<String, BulkheadShutdown> {
        let bulkheads: Vec<(String, Bulkhead)> = self
            .entries
            .iter()
            .map(|e| (e.key().to_string(), e.bulkhead.clone()))
            .collect();
        std::thread::scope(|s| {
            let running: Vec<_> = bulkheads
                .iter()
                .map(|(name, bulkhead)| (name, s.spawn(move || bulkhead.shutdown(timeout))))
                .collect();
            running
                .into_iter()
                .filter_map(|(name, handle)| Some((name.clone(), handle.join().ok()?)))
                .collect()
        })
    }
}

fn same_kind(
    name: &str,
    existing: &Bulkhead,
    config: &BulkheadConfig,
) -> Result<Bulkhead, RegistryError> {
    if existing.kind() == config.kind() {
        Ok(existing.clone())
    } else {
        Err(RegistryError::KindMismatch {
            name: name.to_owned(),
            registered: existing.kind(),
            requested: config.kind(),
        })
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("names", &self.names())
            .finish_non_exhaustive()
    }
}

static REGISTRY: Lazy<Registry> = Lazy::new(Registry::new);

/// The process-wide registry, on the system clock. Created on first use.
pub fn registry() -> &'static Registry {
    &REGISTRY
}

//! The registry: every bulkhead of a process, by name, and the deploy applied to them.
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
//!    every bulkhead or to none.
//! 4. A deploy layers over what the code declares. Each entry keeps the config its code
//!    gave it (a `#[bulkhead]` declaration, or [`Registry::register`]'s argument) as its
//!    baseline; a deploy sets the sizes of the names it lists, and every other bulkhead
//!    runs with its baseline.
//! 5. Reloads and first registrations are ordered by one lock (the deploy state), so a
//!    bulkhead registered by code is either registered before a reload (and resized by
//!    it) or after (and built with the deploy's sizes for its name, when the kinds match).
//!
//! Lookups go through a [`DashMap`], so concurrent lookups of different names do not
//! contend; callers on a hot path keep the handle instead of looking it up per call.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bulkhead_config_types::{
    BulkheadConfig, Config, InvalidConfig, Kind, Limits, SemaphoreConfig, ThreadPoolConfig,
    closest_name,
};
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use parking_lot::Mutex;

use crate::BulkheadName;
use crate::clock::{Clock, system_clock};
use crate::declaration::{DeclarationSite, Declarations};
use crate::reloads::{ReloadLog, ReloadStatus};
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
                    .with_rate_limit(config.rate_limit.as_ref())
                    .with_call_timeout(config.timeout.map(|t| t.as_std()))
                    .with_adaptive(config.adaptive.as_ref()),
            ),
            Limits::ThreadPool(limits) => Bulkhead::ThreadPool(
                ThreadPoolBulkhead::with_clock(name, limits, clock)
                    .with_rate_limit(config.rate_limit.as_ref())
                    .with_call_timeout(config.timeout.map(|t| t.as_std()))
                    .with_adaptive(config.adaptive.as_ref()),
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

    /// Counts a refused call answered by a fallback (`bulkhead_fallbacks_total`).
    pub fn record_fallback(&self) {
        match self {
            Bulkhead::Semaphore(b) => b.record_fallback(),
            Bulkhead::ThreadPool(b) => b.record_fallback(),
        }
    }

    /// `config`'s limits paired with this bulkhead, when the kinds match (`None`: a kind
    /// change, which nothing may apply; invariant 2).
    fn resize_to<'a>(&'a self, config: &'a BulkheadConfig) -> Option<Resize<'a>> {
        let limits = match (self, &config.limits) {
            (Bulkhead::Semaphore(b), Limits::Semaphore(limits)) => KindLimits::Semaphore(b, limits),
            (Bulkhead::ThreadPool(b), Limits::ThreadPool(limits)) => {
                KindLimits::ThreadPool(b, limits)
            }
            _ => return None,
        };
        Some(Resize {
            bulkhead: self,
            config,
            limits,
        })
    }

    /// Stops admission and waits at most `timeout` for running work.
    pub fn shutdown(&self, timeout: Duration) -> BulkheadShutdown {
        match self {
            Bulkhead::Semaphore(b) => BulkheadShutdown::Semaphore(b.shutdown(timeout)),
            Bulkhead::ThreadPool(b) => BulkheadShutdown::ThreadPool(b.shutdown(timeout)),
        }
    }
}

/// A resize checked to keep the bulkhead's kind, applied after a whole reload is checked.
struct Resize<'a> {
    bulkhead: &'a Bulkhead,
    config: &'a BulkheadConfig,
    limits: KindLimits<'a>,
}

enum KindLimits<'a> {
    Semaphore(&'a SemaphoreBulkhead, &'a SemaphoreConfig),
    ThreadPool(&'a ThreadPoolBulkhead, &'a ThreadPoolConfig),
}

impl Resize<'_> {
    fn apply(&self) {
        self.bulkhead
            .telemetry()
            .set_saturation(self.config.saturation);
        let rate_limit = self.config.rate_limit.as_ref();
        let call_timeout = self.config.timeout.map(|t| t.as_std());
        let adaptive = self.config.adaptive.as_ref();
        match self.limits {
            KindLimits::Semaphore(b, limits) => {
                b.resize(limits);
                b.set_rate_limit(rate_limit);
                b.set_call_timeout(call_timeout);
                b.set_adaptive(adaptive);
            }
            KindLimits::ThreadPool(b, limits) => {
                b.resize(limits);
                b.set_rate_limit(rate_limit);
                b.set_call_timeout(call_timeout);
                b.set_adaptive(adaptive);
            }
        }
    }
}

/// What shutting down one bulkhead did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "kind", rename_all = "kebab-case"))]
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
    /// The name or the config breaks the rules a config file is checked by (the same
    /// rules and messages: [`BulkheadConfig::validate`]).
    #[error("invalid bulkhead config: {0}")]
    Invalid(#[from] InvalidConfig),
}

/// One reason a reload was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReloadProblem {
    /// The new config gives a bulkhead another kind.
    KindChanged {
        /// The bulkhead's name.
        name: String,
        /// The kind it runs as.
        registered: Kind,
        /// The kind the new config gives it.
        configured: Kind,
        /// Where the program declares it (`None` for a bulkhead registered by code).
        declared_at: Option<DeclarationSite>,
    },
    /// The new config names a bulkhead the program neither declares nor registered
    /// (refused by [`Registry::reload_strict`]; [`Registry::reload`] reports it in
    /// [`ReloadReport::undeclared`]).
    Undeclared(UndeclaredName),
    /// A bulkhead of the new config breaks the rules a config file is checked by.
    Invalid(InvalidConfig),
}

impl fmt::Display for ReloadProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadProblem::KindChanged {
                name,
                registered,
                configured,
                declared_at,
            } => {
                write!(f, "bulkhead `{name}` ")?;
                match declared_at {
                    Some(site) => write!(f, "is declared as a {registered} at {site}")?,
                    None => write!(f, "runs as a {registered}")?,
                }
                write!(
                    f,
                    "; the new config makes it a {configured}: a deploy may change sizes, not \
                     kinds (leave `kind` out of deploy entries)"
                )
            }
            ReloadProblem::Undeclared(undeclared) => undeclared.fmt(f),
            ReloadProblem::Invalid(invalid) => invalid.fmt(f),
        }
    }
}

/// A name in a deploy that no code declares or registered: most often a typo.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct UndeclaredName {
    /// The name as the deploy writes it.
    pub name: String,
    /// The declared name it most likely meant.
    pub did_you_mean: Option<String>,
}

impl fmt::Display for UndeclaredName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bulkhead `{}` is not declared by any `#[bulkhead]` function of this program, so \
             its sizes apply to nothing",
            self.name
        )?;
        match &self.did_you_mean {
            Some(close) => write!(f, ": did you mean `{close}`?"),
            None => Ok(()),
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
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ReloadReport {
    /// Bulkheads whose limits changed and were applied in place (a bulkhead the deploy no
    /// longer names goes back to its declared sizes, and is listed here if they differ).
    pub resized: Vec<String>,
    /// Bulkheads whose config did not change.
    pub unchanged: Vec<String>,
    /// Names in the config that no code declares or registered, with a suggestion: nothing
    /// was applied to them, but a bulkhead registered later under such a name starts with
    /// the deploy's sizes. A typo in a deploy file shows up here.
    pub undeclared: Vec<UndeclaredName>,
}

/// A registered bulkhead, the config its code gave it, and the config it runs with.
struct Registered {
    bulkhead: Bulkhead,
    /// What the code declared (invariant 4).
    baseline: BulkheadConfig,
    /// Where it is declared, for a bulkhead of the program's declarations.
    declared_at: Option<DeclarationSite>,
    current: Mutex<BulkheadConfig>,
}

/// Every bulkhead of a process (or of a test), by name.
///
/// The process-wide one, [`registry()`], holds every bulkhead the program declares with
/// `#[bulkhead]` from its first use. One built by hand starts empty or from chosen
/// [`Declarations`]:
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
///
/// // A deploy that no longer names it: back to the sizes its code gave it.
/// registry.reload(&Config::default()).unwrap();
/// assert_eq!(payment.snapshot().limit, 10);
/// ```
pub struct Registry {
    /// Names are leaked once per registered bulkhead (entries live as long as the registry,
    /// and the process-wide one for the whole program), so every refusal's name is a
    /// `&'static str`: building and dropping the error touch no reference count.
    entries: DashMap<&'static str, Registered>,
    clock: Arc<dyn Clock>,
    /// The deploy last applied (`None`: none yet). Its lock serialises reloads and orders
    /// registrations against them (invariants 3 and 5).
    deploy: Mutex<Option<Config>>,
    /// Applied and refused reloads.
    reloads: ReloadLog,
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
            deploy: Mutex::new(None),
            reloads: ReloadLog::default(),
        }
    }

    /// A registry holding every bulkhead of `declarations`, built now with their declared
    /// sizes and zero counts, reading time through `clock`.
    ///
    /// # Errors
    ///
    /// When two declarations give one name different kinds (see [`Declarations::check`]).
    pub fn from_declarations(
        declarations: &Declarations,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, crate::DeclarationConflict> {
        declarations.check()?;
        let registry = Registry::with_clock(clock);
        for declared in declarations {
            let name = declared.name();
            let bulkhead = Bulkhead::from_config(
                BulkheadName::from_static(name),
                declared.config(),
                Arc::clone(&registry.clock),
            );
            registry.entries.insert(
                name,
                Registered {
                    bulkhead,
                    baseline: declared.config().clone(),
                    declared_at: Some(declared.declared_at()),
                    current: Mutex::new(declared.config().clone()),
                },
            );
        }
        Ok(registry)
    }

    /// Returns the bulkhead registered as `name`, building it if there is none: with the
    /// sizes the applied deploy gives `name` when it gives it the same kind, otherwise with
    /// `config`. `config` stays its baseline (what a deploy that does not name it restores).
    ///
    /// Idempotent: when `name` is already registered with the same kind, the existing
    /// bulkhead is returned unchanged (`config`'s sizes are not applied; use
    /// [`reload`](Self::reload) to change them).
    ///
    /// # Errors
    ///
    /// [`RegistryError::KindMismatch`] when `name` is registered with the other kind;
    /// [`RegistryError::Invalid`] when the name or config breaks a rule (an empty name, zero
    /// permits, fewer `max_threads` than `core_threads`, a rate limit of `0` per period, …):
    /// the same rules, with the same messages, as a config file
    /// ([`BulkheadConfig::validate`]).
    pub fn register(&self, name: &str, config: &BulkheadConfig) -> Result<Bulkhead, RegistryError> {
        config.validate(name)?;
        if let Some(existing) = self.entries.get(name) {
            return same_kind(name, &existing.bulkhead, config);
        }
        let deploy = self.deploy.lock();
        let name: &'static str = Box::leak(Box::from(name));
        match self.entries.entry(name) {
            Entry::Occupied(existing) => same_kind(name, &existing.get().bulkhead, config),
            Entry::Vacant(vacant) => {
                let current = deploy
                    .as_ref()
                    .and_then(|d| d.bulkheads.get(name))
                    .filter(|deployed| deployed.kind() == config.kind())
                    .unwrap_or(config);
                let bulkhead = Bulkhead::from_config(
                    BulkheadName::from_static(name),
                    current,
                    Arc::clone(&self.clock),
                );
                vacant.insert(Registered {
                    bulkhead: bulkhead.clone(),
                    baseline: config.clone(),
                    declared_at: None,
                    current: Mutex::new(current.clone()),
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

    /// The config `name` runs with now (its baseline, or what the applied deploy gives it).
    pub fn config(&self, name: &str) -> Option<BulkheadConfig> {
        self.entries.get(name).map(|e| e.current.lock().clone())
    }

    /// The deploy last applied by [`reload`](Self::reload), if any.
    pub fn deploy(&self) -> Option<Config> {
        self.deploy.lock().clone()
    }

    /// Applies a deploy, in place: the bulkheads it names take its sizes, every other
    /// bulkhead goes back to the sizes its code gave it (the module's invariant 4).
    ///
    /// Refused as a whole, with nothing applied, when one of its bulkheads breaks a rule
    /// ([`ReloadProblem::Invalid`]) or changes the kind of a bulkhead (the problem names
    /// where the program declares it). Names that no code declares or
    /// registered are reported in [`ReloadReport::undeclared`] with a suggestion; use
    /// [`reload_strict`](Self::reload_strict) to refuse them instead. Never blocks on
    /// running calls (see [`SemaphoreBulkhead::resize`] and [`ThreadPoolBulkhead::resize`]).
    ///
    /// # Errors
    ///
    /// [`ReloadError`] with every [`ReloadProblem`] found.
    ///
    /// Every reload is counted in [`reload_status`](Self::reload_status), applied or refused.
    pub fn reload(&self, config: &Config) -> Result<ReloadReport, ReloadError> {
        self.counted(self.apply(config, false))
    }

    /// [`reload`](Self::reload), but a name no code declares or registered is refused
    /// ([`ReloadProblem::Undeclared`]) instead of reported.
    ///
    /// # Errors
    ///
    /// [`ReloadError`] with every [`ReloadProblem`] found.
    pub fn reload_strict(&self, config: &Config) -> Result<ReloadReport, ReloadError> {
        self.counted(self.apply(config, true))
    }

    fn counted(
        &self,
        result: Result<ReloadReport, ReloadError>,
    ) -> Result<ReloadReport, ReloadError> {
        match &result {
            Ok(_) => self.reloads.applied(),
            Err(err) => self.reloads.refused(err.to_string()),
        }
        result
    }

    /// Counts a reload refused before it reached [`reload`](Self::reload) (a deploy file
    /// that did not parse or validate) and keeps its `message` as the last error.
    pub fn record_reload_failure(&self, message: impl Into<String>) {
        self.reloads.refused(message.into());
    }

    /// How many reloads were applied and refused, and the last refusal.
    pub fn reload_status(&self) -> ReloadStatus {
        self.reloads.status()
    }

    /// Counts a refused call of the bulkhead `name` answered by a fallback; nothing if no
    /// bulkhead is registered under that name.
    pub fn record_fallback(&self, name: &str) {
        if let Some(entry) = self.entries.get(name) {
            entry.bulkhead.record_fallback();
        }
    }

    fn apply(&self, config: &Config, strict: bool) -> Result<ReloadReport, ReloadError> {
        let invalid: Vec<ReloadProblem> = config
            .bulkheads
            .iter()
            .filter_map(|(name, new)| new.validate(name).err().map(ReloadProblem::Invalid))
            .collect();
        if !invalid.is_empty() {
            return Err(ReloadError { problems: invalid });
        }
        let mut deploy = self.deploy.lock();
        // Entries are only added under the deploy lock held here, and never removed, so
        // these read guards see every entry and wait on no writer.
        let mut entries: Vec<_> = self.entries.iter().collect();
        entries.sort_by_key(|entry| *entry.key());

        // Check everything first (invariant 3): each bulkhead's new config, the deploy's or
        // its baseline (invariant 4), must keep its kind.
        let mut problems = Vec::new();
        let mut resizes = Vec::with_capacity(entries.len());
        for entry in &entries {
            let target = config
                .bulkheads
                .get(*entry.key())
                .unwrap_or(&entry.baseline);
            match entry.bulkhead.resize_to(target) {
                Some(resize) => resizes.push((*entry.key(), &entry.current, resize)),
                None => problems.push(ReloadProblem::KindChanged {
                    name: (*entry.key()).to_owned(),
                    registered: entry.bulkhead.kind(),
                    configured: target.kind(),
                    declared_at: entry.declared_at,
                }),
            }
        }
        let undeclared: Vec<UndeclaredName> = config
            .bulkheads
            .keys()
            .filter(|name| {
                entries
                    .binary_search_by_key(&name.as_str(), |e| *e.key())
                    .is_err()
            })
            .map(|name| UndeclaredName {
                name: name.clone(),
                did_you_mean: closest_name(name, entries.iter().map(|e| *e.key()))
                    .map(str::to_owned),
            })
            .collect();
        if strict {
            problems.extend(undeclared.iter().cloned().map(ReloadProblem::Undeclared));
        }
        if !problems.is_empty() {
            return Err(ReloadError { problems });
        }

        let mut report = ReloadReport {
            undeclared,
            ..ReloadReport::default()
        };
        for (name, current, resize) in resizes {
            let mut current = current.lock();
            if *current == *resize.config {
                report.unchanged.push(name.to_owned());
            } else {
                resize.apply();
                *current = resize.config.clone();
                report.resized.push(name.to_owned());
            }
        }
        drop(entries);
        *deploy = Some(config.clone());
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

/// The process-wide registry, on the system clock: every bulkhead the linked program
/// declares with `#[bulkhead]` (see [`Declarations::of_program`]), built on first use with
/// the declared sizes, plus any a program registers by hand.
///
/// # Panics
///
/// On first use, when two declarations in the program give one name different kinds
/// (the message names both sites). Such a program cannot run either of them; call
/// [`Declarations::check`] at start-up to get it as an error instead.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let declarations = Declarations::of_program();
        for declared in declarations {
            for (site, _) in declared.overridden() {
                tracing::warn!(
                    bulkhead = declared.name(),
                    serving = %declared.declared_at(),
                    ignored = %site,
                    "bulkhead `{}` is declared twice with different sizes; the sizes declared \
                     at {} serve and those at {site} do not: size it in the deploy to decide",
                    declared.name(),
                    declared.declared_at(),
                );
            }
        }
        match Registry::from_declarations(declarations, system_clock()) {
            Ok(registry) => registry,
            Err(conflict) => panic!("{conflict}"),
        }
    })
}

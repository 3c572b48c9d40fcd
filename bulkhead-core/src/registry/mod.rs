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
//!
//! `bulkhead.rs` holds [`Bulkhead`] (either kind) and the resize a reload applies to one;
//! `reload.rs` holds reloading (invariants 3 and 4) and what it reports.

mod bulkhead;
mod reload;

pub use bulkhead::{Bulkhead, BulkheadShutdown};
pub use bulkhead_config_types::{CheckedDeploy, UndeclaredName};
pub use reload::{DeployBase, DeployRefused, ReloadError, ReloadProblem, ReloadReport};

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bulkhead_config_types::{BulkheadConfig, Config, InvalidConfig, Kind};
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use parking_lot::Mutex;

use crate::BulkheadName;
use crate::clock::{Clock, system_clock};
use crate::declaration::{Declaration, DeclarationSite, Declarations};
use crate::reloads::ReloadLog;
use crate::semaphore::SemaphoreBulkhead;
use crate::snapshot::BulkheadSnapshot;
use crate::thread_pool::ThreadPoolBulkhead;

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
/// use bulkhead::config::{BulkheadConfig, Config, SemaphoreConfig};
/// use bulkhead::Registry;
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
    /// Names are interned once per distinct name for the life of the process
    /// ([`intern`]: registries built and dropped again and again hold no more than the
    /// names they share), so every refusal's name is a `&'static str`: building and
    /// dropping the error touch no reference count.
    entries: DashMap<&'static str, Registered>,
    clock: Arc<dyn Clock>,
    /// The deploy last applied (`None`: none yet). Its lock serialises reloads and orders
    /// registrations against them (invariants 3 and 5).
    deploy: Mutex<Option<CheckedDeploy>>,
    /// Applied and refused reloads.
    reloads: ReloadLog,
    /// Helper threads of this registry's shutdowns under way: at most
    /// `SHUTDOWN_THREADS - 1`, shared by concurrent calls.
    shutdown_helpers: AtomicUsize,
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
            shutdown_helpers: AtomicUsize::new(0),
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
        let name = intern(name);
        match self.entries.entry(name) {
            Entry::Occupied(existing) => same_kind(name, &existing.get().bulkhead, config),
            Entry::Vacant(vacant) => {
                let current = deploy
                    .as_ref()
                    .and_then(|d| d.config().bulkheads.get(name))
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
        self.deploy.lock().as_ref().map(|d| d.config().clone())
    }

    /// Counts a refused call of the bulkhead `name` answered by a fallback; nothing if no
    /// bulkhead is registered under that name.
    pub fn record_fallback(&self, name: &str) {
        if let Some(entry) = self.entries.get(name) {
            entry.bulkhead.record_fallback();
        }
    }

    /// A point-in-time view of every registered bulkhead, sorted by name.
    pub fn snapshot(&self) -> Vec<BulkheadSnapshot> {
        let mut snapshots: Vec<BulkheadSnapshot> =
            self.entries.iter().map(|e| e.bulkhead.snapshot()).collect();
        snapshots.sort_by(|a, b| a.name.cmp(&b.name));
        snapshots
    }

    /// Shuts every registered bulkhead down at once: admission stops everywhere, then
    /// their running work is waited for until `timeout` has passed (measured once, for
    /// all of them), by the caller's thread and at most seven helpers, however many
    /// bulkheads there are. Concurrent calls share those seven (a call that finds them
    /// taken waits on its own thread); each returns by its own deadline. Calls under way
    /// together get the same report of each bulkhead; a call made after they ended gets a
    /// pool's first report again and a semaphore's state then (see
    /// [`SemaphoreBulkhead::shutdown`] and [`ThreadPoolBulkhead::shutdown`]).
    pub fn shutdown(&self, timeout: Duration) -> BTreeMap<String, BulkheadShutdown> {
        let deadline = self.clock.now().checked_add(timeout);
        let bulkheads: Vec<(String, Bulkhead)> = self
            .entries
            .iter()
            .map(|e| (e.key().to_string(), e.bulkhead.clone()))
            .collect();
        // Admission stops everywhere first, so no bulkhead waits for the others to begin.
        for (_, bulkhead) in &bulkheads {
            bulkhead.stop_admission();
        }
        let next = AtomicUsize::new(0);
        let drain = || {
            let mut done = Vec::new();
            while let Some((name, bulkhead)) = bulkheads.get(next.fetch_add(1, Relaxed)) {
                let left = deadline.map_or(Duration::MAX, |d| {
                    d.saturating_duration_since(self.clock.now())
                });
                done.push((name.clone(), bulkhead.shutdown(left)));
            }
            done
        };
        let reserved = self.reserve_helpers(bulkheads.len().saturating_sub(1));
        std::thread::scope(|s| {
            let helpers: Vec<_> = (0..reserved.0)
                .map_while(|_| std::thread::Builder::new().spawn_scoped(s, drain).ok())
                .collect();
            // This thread drains too: with no helper (the OS refused them) it does it all.
            let mut reports: BTreeMap<String, BulkheadShutdown> = drain().into_iter().collect();
            for helper in helpers {
                if let Ok(done) = helper.join() {
                    reports.extend(done);
                }
            }
            reports
        })
    }

    /// Takes up to `wanted` of the shutdown helpers not in use, until the returned
    /// reservation drops.
    fn reserve_helpers(&self, wanted: usize) -> HelperReservation<'_> {
        let mut taken = 0;
        let _ = self
            .shutdown_helpers
            .fetch_update(AcqRel, Acquire, |in_use| {
                taken = wanted.min((SHUTDOWN_THREADS - 1).saturating_sub(in_use));
                Some(in_use + taken)
            });
        HelperReservation(taken, &self.shutdown_helpers)
    }
}

/// The most threads [`Registry::shutdown`] waits on bulkheads with (its caller's included).
const SHUTDOWN_THREADS: usize = 8;

/// Shutdown helpers taken by one [`Registry::shutdown`] call, given back when it drops.
struct HelperReservation<'a>(usize, &'a AtomicUsize);

impl Drop for HelperReservation<'_> {
    fn drop(&mut self) {
        self.1.fetch_sub(self.0, AcqRel);
    }
}

/// `name` as a `&'static str` shared by every registry of the process: allocated the first
/// time the name is registered anywhere, reused after (bounded by the distinct names,
/// however many registries come and go). Registration only, never on a call's path.
fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<std::collections::HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Mutex::default).lock();
    if let Some(&interned) = names.get(name) {
        return interned;
    }
    let interned: &'static str = Box::leak(Box::from(name));
    names.insert(interned);
    interned
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
    &program().registry
}

/// The process-wide registry and, for each of the program's declarations, its bulkhead.
struct Program {
    registry: Registry,
    /// By the address of the `static` declaration: the handle an annotated function's first
    /// call takes ([`declared_handle`]).
    handles: std::collections::HashMap<usize, Bulkhead>,
}

fn program() -> &'static Program {
    static PROGRAM: OnceLock<Program> = OnceLock::new();
    PROGRAM.get_or_init(|| {
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
        let registry = match Registry::from_declarations(declarations, system_clock()) {
            Ok(registry) => registry,
            Err(conflict) => panic!("{conflict}"),
        };
        let handles = crate::declaration::DECLARATIONS
            .iter()
            .filter_map(|d| Some((declaration_key(d), registry.get(d.name)?)))
            .collect();
        Program { registry, handles }
    })
}

fn declaration_key(declaration: &Declaration) -> usize {
    std::ptr::from_ref(declaration).addr()
}

/// The bulkhead of an annotated function's declaration in the process-wide [`registry`],
/// built when the registry was (nothing rebuilt, validated again or looked up by name);
/// `None` for a declaration the linker did not gather (the caller registers it then).
#[doc(hidden)]
pub fn declared_handle(declaration: &'static Declaration) -> Option<Bulkhead> {
    program()
        .handles
        .get(&declaration_key(declaration))
        .cloned()
}

#[cfg(all(test, not(loom)))]
mod intern_tests {
    use bulkhead_config_types::BulkheadConfig;

    #[test]
    fn a_name_is_interned_once_however_many_registries_register_it() {
        let config = BulkheadConfig::semaphore(Default::default());
        let interned = super::intern("intern-once");
        for _ in 0..100 {
            let registry = super::Registry::new();
            let bulkhead = registry.register("intern-once", &config).unwrap();
            assert!(
                std::ptr::eq(bulkhead.name().as_ptr(), interned.as_ptr()),
                "every registry shares the one copy of the name"
            );
        }
    }
}

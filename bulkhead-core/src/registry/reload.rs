//! Reloading a registry: the one path every deploy takes. A deploy is built over the
//! registry's own state (its [`DeployBase`], read under the deploy lock), checked as a
//! whole against every registered bulkhead, applied in place, and its outcome recorded —
//! applied, refused or unreadable — in one place: [`Registry::reload_status`] (and so
//! `GET /reloads` and `bulkhead_config_reloads_total`) and one log line.
//!
//! Invariants (the registry's 3 and 4): nothing is applied unless every bulkhead keeps its
//! kind and every config is valid; a bulkhead the deploy does not name goes back to its
//! baseline. One lock, the deploy state, serialises deploys — from building one over the
//! deploy in force to applying it — and first registrations.

use std::fmt;

use bulkhead_config_types::{
    CheckedDeploy, Config, InvalidConfig, Kind, KindChange, UndeclaredName, closest_name,
};
use parking_lot::MutexGuard;

use crate::declaration::DeclarationSite;
use crate::reloads::{DeployOutcome, DeploySubscription, ReloadStatus};

use super::Registry;

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
    /// The new config renames, adds or removes partitions of a running bulkhead (a deploy
    /// may change their shares only: the code names partitions, checked when it is built).
    PartitionsChanged {
        /// The bulkhead's name.
        name: String,
        /// The names in force and the refused ones.
        change: crate::PartitionNamesChanged,
    },
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
                let site = declared_at.map(|site| site.to_string());
                KindChange::new(name, *registered, *configured, site).fmt(f)
            }
            ReloadProblem::Undeclared(undeclared) => undeclared.fmt(f),
            ReloadProblem::Invalid(invalid) => invalid.fmt(f),
            ReloadProblem::PartitionsChanged { name, change } => {
                write!(f, "bulkhead `{name}`: {change}")
            }
        }
    }
}

/// Why [`Registry::reload`] refused a config. Nothing was applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("reload refused, nothing applied: {}", join(problems))]
#[non_exhaustive]
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
    /// What the deploy's layering warned about (lints, names nothing declares), one
    /// diagnostic per entry (`FILE:LINE:COL: warning: …`).
    pub warnings: Vec<String>,
}

/// What a deploy is built over, read under the registry's deploy lock: every registered
/// bulkhead (declared by `#[bulkhead]` or registered by hand) with the config its code
/// gave it, and the deploy in force.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct DeployBase {
    /// Every registered bulkhead with its baseline: what a deploy that does not name it
    /// restores.
    pub baselines: Config,
    /// The deploy in force (`None`: none applied yet).
    pub in_force: Option<CheckedDeploy>,
}

impl DeployBase {
    /// Every registered bulkhead with the config it runs with: its entry in the deploy in
    /// force when that keeps its kind, otherwise its baseline.
    pub fn running(&self) -> Config {
        let mut running = self.baselines.clone();
        if let Some(in_force) = &self.in_force {
            for (name, config) in &mut running.bulkheads {
                if let Some(deployed) = in_force.config().bulkheads.get(name)
                    && deployed.kind() == config.kind()
                {
                    *config = deployed.clone();
                }
            }
        }
        running
    }
}

/// Why [`Registry::deploy_with`] applied nothing: building the deploy failed (a file
/// unreadable, a layer invalid), or the registry refused what was built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeployRefused<E> {
    /// Building the deploy failed, with the builder's error.
    Build(E),
    /// The registry refused the deploy that was built.
    Refused(ReloadError),
}

impl<E: fmt::Display> fmt::Display for DeployRefused<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeployRefused::Build(e) => e.fmt(f),
            DeployRefused::Refused(e) => e.fmt(f),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for DeployRefused<E> {}

/// Where a deploy built in code comes from, in [`ReloadStatus::in_force`](crate::ReloadStatus::in_force) and the log.
const IN_CODE: &str = "a config built in code";

impl Registry {
    /// Applies a deploy, in place: the bulkheads it names take its sizes, every other
    /// bulkhead goes back to the sizes its code gave it (the module's invariant 4).
    ///
    /// Refused as a whole, with nothing applied, when one of its bulkheads breaks a rule
    /// ([`ReloadProblem::Invalid`]) or changes the kind of a bulkhead (the problem names
    /// where the program declares it). Names that no code declares or
    /// registered are reported in [`ReloadReport::undeclared`] with a suggestion; use
    /// [`reload_strict`](Self::reload_strict) to refuse them instead. Never blocks on
    /// running calls (see [`SemaphoreBulkhead::resize`](crate::SemaphoreBulkhead::resize) and [`ThreadPoolBulkhead::resize`](crate::ThreadPoolBulkhead::resize)).
    ///
    /// # Errors
    ///
    /// [`ReloadError`] with every [`ReloadProblem`] found.
    ///
    /// Every reload is counted in [`reload_status`](Self::reload_status), applied or refused.
    pub fn reload(&self, config: &Config) -> Result<ReloadReport, ReloadError> {
        self.reload_from(IN_CODE, config, false)
    }

    /// [`reload`](Self::reload), but a name no code declares or registered is refused
    /// ([`ReloadProblem::Undeclared`]) instead of reported.
    ///
    /// # Errors
    ///
    /// [`ReloadError`] with every [`ReloadProblem`] found.
    pub fn reload_strict(&self, config: &Config) -> Result<ReloadReport, ReloadError> {
        self.reload_from(IN_CODE, config, true)
    }

    fn reload_from(
        &self,
        source: &str,
        config: &Config,
        strict: bool,
    ) -> Result<ReloadReport, ReloadError> {
        // The one check of values of a config built in code (a layered deploy's are
        // checked by bulkhead-config, placed in its files).
        let checked = |_: &DeployBase| {
            CheckedDeploy::validate(config.clone()).map_err(|invalid| ReloadError {
                problems: invalid.into_iter().map(ReloadProblem::Invalid).collect(),
            })
        };
        self.deploy_with(source, strict, checked)
            .map_err(|refused| match refused {
                DeployRefused::Refused(refused) | DeployRefused::Build(refused) => refused,
            })
    }

    /// The one path of every deploy: under the deploy lock, `build` makes the deploy over
    /// the registry's [`DeployBase`] (every registered bulkhead's baseline and the deploy
    /// in force), the registry checks it as a whole ([`reload`](Self::reload)'s rules;
    /// `strict`: names nothing registers are refused) and applies it in place, then
    /// records the outcome — applied, refused, or `build`'s error — in
    /// [`reload_status`](Self::reload_status) and one log line (target `bulkhead`:
    /// `INFO` applied, `ERROR` refused), `source` naming where it came from.
    ///
    /// A change against the deploy in force (resize one bulkhead, keep the rest) is a
    /// transaction this way: no other deploy can land between reading the deploy in force
    /// and applying the change.
    ///
    /// ```
    /// use bulkhead::config::{BulkheadConfig, SemaphoreConfig};
    /// use bulkhead::config::CheckedDeploy;
    /// use bulkhead::Registry;
    ///
    /// let registry = Registry::new();
    /// let limits = |n| BulkheadConfig::semaphore(SemaphoreConfig {
    ///     max_concurrent_calls: n,
    ///     ..SemaphoreConfig::default()
    /// });
    /// let payment = registry.register("payment", &limits(10)).unwrap();
    /// // Double the limit payment runs with, whatever deploy is in force.
    /// let report = registry
    ///     .deploy_with("an operator", false, |base| {
    ///         let mut deploy = base.in_force.as_ref().map(|d| d.config().clone()).unwrap_or_default();
    ///         let now = base.running().bulkheads["payment"].limits.clone();
    ///         let bulkhead::config::Limits::Semaphore(s) = now else { return Err("not a semaphore") };
    ///         deploy.bulkheads.insert("payment".into(), limits(s.max_concurrent_calls * 2));
    ///         CheckedDeploy::validate(deploy).map_err(|_| "an invalid limit")
    ///     })
    ///     .unwrap();
    /// assert_eq!(report.resized, ["payment"]);
    /// assert_eq!(payment.snapshot().limit, 20);
    /// assert_eq!(registry.reload_status().in_force.as_deref(), Some("an operator"));
    /// ```
    ///
    /// # Errors
    ///
    /// [`DeployRefused::Build`] with `build`'s error, [`DeployRefused::Refused`] with every
    /// problem the registry found; nothing was applied in either case.
    pub fn deploy_with<E: fmt::Display>(
        &self,
        source: &str,
        strict: bool,
        build: impl FnOnce(&DeployBase) -> Result<CheckedDeploy, E>,
    ) -> Result<ReloadReport, DeployRefused<E>> {
        let mut deploy = self.deploy.lock();
        let base = self.base_locked(&deploy);
        let outcome = match build(&base) {
            Ok(checked) => self
                .apply_locked(&mut deploy, checked, strict)
                .map_err(DeployRefused::Refused),
            Err(e) => Err(DeployRefused::Build(e)),
        };
        let message = outcome.as_ref().err().map(ToString::to_string);
        let recorded = match (&outcome, &message) {
            (Ok(report), _) => DeployOutcome::Applied { source, report },
            (Err(_), Some(message)) => DeployOutcome::Refused { source, message },
            (Err(_), None) => unreachable!("a refusal has its message"),
        };
        // Under the lock: the status names the deploy applied last.
        self.reloads.record(&recorded);
        drop(deploy);
        self.reloads.notify(&recorded);
        outcome
    }

    /// Calls `listener` with the outcome of every deploy of this registry from now on —
    /// applied or refused, whatever its front end (a file, the admin router, code) — until
    /// the returned subscription drops. It runs on the deploying thread, after the deploy
    /// lock is released, so it may deploy, subscribe other listeners (they hear the next
    /// deploy) and drop subscriptions, its own included, or own them. A listener that
    /// panics is logged and skipped; the deploy's outcome is recorded regardless.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use bulkhead::{DeployOutcome, Registry};
    /// use bulkhead::config::Config;
    ///
    /// let registry = Registry::new();
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&seen);
    /// let _listening = registry.subscribe_deploys(move |outcome: &DeployOutcome<'_>| {
    ///     let applied = matches!(outcome, DeployOutcome::Applied { .. });
    ///     log.lock().unwrap().push((outcome.source().to_owned(), applied));
    /// });
    /// registry.reload(&Config::default()).unwrap();
    /// assert_eq!(*seen.lock().unwrap(), [("a config built in code".to_owned(), true)]);
    /// ```
    pub fn subscribe_deploys(
        &self,
        listener: impl Fn(&DeployOutcome<'_>) + Send + Sync + 'static,
    ) -> DeploySubscription {
        self.reloads.subscribe(listener)
    }

    /// What a deploy built now would be built over (see [`deploy_with`](Self::deploy_with)).
    pub fn deploy_base(&self) -> DeployBase {
        let deploy = self.deploy.lock();
        self.base_locked(&deploy)
    }

    fn base_locked(&self, deploy: &MutexGuard<'_, Option<CheckedDeploy>>) -> DeployBase {
        let mut baselines = Config::default();
        for entry in self.entries.iter() {
            baselines
                .bulkheads
                .insert((*entry.key()).to_owned(), entry.baseline.clone());
        }
        DeployBase {
            baselines,
            in_force: (**deploy).clone(),
        }
    }

    /// How many reloads were applied and refused, the last refusal, and where the deploy
    /// in force came from.
    pub fn reload_status(&self) -> ReloadStatus {
        self.reloads.status()
    }

    fn apply_locked(
        &self,
        deploy: &mut MutexGuard<'_, Option<CheckedDeploy>>,
        checked: CheckedDeploy,
        strict: bool,
    ) -> Result<ReloadReport, ReloadError> {
        // Its values were checked when it was made (CheckedDeploy): what is left is what
        // only the registry knows — the bulkheads running now, their kinds and partitions.
        let config = checked.config();
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
            let partitions = entry.bulkhead.check_partitions(&target.partitions);
            match entry.bulkhead.resize_to(target) {
                Some(_) if partitions.is_err() => {
                    if let Err(change) = partitions {
                        problems.push(ReloadProblem::PartitionsChanged {
                            name: (*entry.key()).to_owned(),
                            change,
                        });
                    }
                }
                Some(resize) => resizes.push((*entry.key(), &entry.current, resize)),
                None => problems.push(ReloadProblem::KindChanged {
                    name: (*entry.key()).to_owned(),
                    registered: entry.bulkhead.kind(),
                    configured: target.kind(),
                    declared_at: entry.declared_at,
                }),
            }
        }
        let mut undeclared: Vec<UndeclaredName> = config
            .bulkheads
            .keys()
            .filter(|name| {
                entries
                    .binary_search_by_key(&name.as_str(), |e| *e.key())
                    .is_err()
            })
            .map(|name| {
                UndeclaredName::new(name, closest_name(name, entries.iter().map(|e| *e.key())))
            })
            .collect();
        undeclared.extend(checked.undeclared().iter().cloned());
        undeclared.sort_by(|a, b| a.name.cmp(&b.name));
        if strict {
            problems.extend(undeclared.iter().cloned().map(ReloadProblem::Undeclared));
        }
        if !problems.is_empty() {
            return Err(ReloadError { problems });
        }

        let mut report = ReloadReport {
            undeclared,
            warnings: checked.warnings().to_vec(),
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
        **deploy = Some(checked);
        Ok(report)
    }
}

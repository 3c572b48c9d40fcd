//! Reloading a registry: a deploy checked as a whole against every registered bulkhead,
//! then applied in place, and what a reload reports or why it was refused.
//!
//! Invariants (the registry's 3 and 4): nothing is applied unless every bulkhead keeps its
//! kind and every config is valid; a bulkhead the deploy does not name goes back to its
//! baseline. One lock, the deploy state, serialises reloads and first registrations.

use std::fmt;

use bulkhead_config_types::{Config, InvalidConfig, Kind, closest_name};

use crate::declaration::DeclarationSite;
use crate::reloads::ReloadStatus;

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
            ReloadProblem::PartitionsChanged { name, change } => {
                write!(f, "bulkhead `{name}`: {change}")
            }
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
}

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
        self.counted(self.apply_deploy(config, false))
    }

    /// [`reload`](Self::reload), but a name no code declares or registered is refused
    /// ([`ReloadProblem::Undeclared`]) instead of reported.
    ///
    /// # Errors
    ///
    /// [`ReloadError`] with every [`ReloadProblem`] found.
    pub fn reload_strict(&self, config: &Config) -> Result<ReloadReport, ReloadError> {
        self.counted(self.apply_deploy(config, true))
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

    fn apply_deploy(&self, config: &Config, strict: bool) -> Result<ReloadReport, ReloadError> {
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
}

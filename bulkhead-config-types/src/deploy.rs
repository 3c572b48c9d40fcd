//! A deploy as a registry applies it, and the rules about what a deploy may change, each
//! written once.
//!
//! A [`CheckedDeploy`] is a config whose every entry broke no rule when it was made: built
//! from a config made in code by [`CheckedDeploy::validate`], or by `bulkhead-config` from
//! deploy layers it checked (placing each problem in its file). The registry applies it
//! without checking values again.

use std::fmt;

use crate::{Config, InvalidConfig, Kind, UndeclaredName};

/// The rule every message about a kind in a deploy states, in these words.
pub const SIZES_NOT_KINDS: &str = "a deploy may change sizes, not kinds";

/// A deploy that gives a bulkhead another kind than the one it runs as: refused by every
/// path (the checker, `bulkhead check --against`, the registry), in one wording.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KindChange {
    /// The bulkhead's name.
    pub name: String,
    /// The kind its code gives it.
    pub declared: Kind,
    /// The kind the deploy gives it.
    pub deployed: Kind,
    /// Where the program declares it (`None`: registered by code, or not known here).
    pub declared_at: Option<String>,
}

impl KindChange {
    /// `name`, declared a `declared` (at `declared_at`), made a `deployed` by a deploy.
    pub fn new(name: &str, declared: Kind, deployed: Kind, declared_at: Option<String>) -> Self {
        KindChange {
            name: name.to_owned(),
            declared,
            deployed,
            declared_at,
        }
    }
}

impl fmt::Display for KindChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the code declares `{}` as a {}",
            self.name, self.declared
        )?;
        if let Some(site) = &self.declared_at {
            write!(f, " at {site}")?;
        }
        write!(
            f,
            " and the deploy makes it a {}: {SIZES_NOT_KINDS}; leave `kind` (and an `extends` \
             that brings one) out of deploy entries",
            self.deployed
        )
    }
}

/// A deploy ready for a registry: its config, each entry checked against the rules of
/// `validate.rs`, with what checking it found — names nothing declares (left out of the
/// config) and warnings, one diagnostic each.
///
/// Made by [`validate`](Self::validate) from a config built in code, or by
/// `bulkhead-config` (`Layers::deploy`) from deploy files and `BULKHEAD_…` variables,
/// whose checker runs the same rules and places their problems in the files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckedDeploy {
    config: Config,
    undeclared: Vec<UndeclaredName>,
    warnings: Vec<String>,
}

impl CheckedDeploy {
    /// Checks every entry of a config built in code.
    ///
    /// ```
    /// use bulkhead::config::{BulkheadConfig, CheckedDeploy, Config, SemaphoreConfig};
    ///
    /// let mut config = Config::default();
    /// let zero = SemaphoreConfig { max_concurrent_calls: 0, ..SemaphoreConfig::default() };
    /// config.bulkheads.insert("payment".into(), BulkheadConfig::semaphore(zero));
    /// let refused = CheckedDeploy::validate(config).unwrap_err();
    /// assert!(refused[0].to_string().contains("bulkheads.payment.max_concurrent_calls"));
    /// ```
    ///
    /// # Errors
    ///
    /// Every entry that breaks a rule, with all of its problems.
    pub fn validate(config: Config) -> Result<Self, Vec<InvalidConfig>> {
        let invalid: Vec<InvalidConfig> = config
            .bulkheads
            .iter()
            .filter_map(|(name, entry)| entry.validate(name).err())
            .collect();
        if invalid.is_empty() {
            Ok(CheckedDeploy {
                config,
                ..CheckedDeploy::default()
            })
        } else {
            Err(invalid)
        }
    }

    /// Made by `bulkhead-config` from layers its checker accepted. Not public API: any
    /// other caller uses [`validate`](Self::validate).
    #[doc(hidden)]
    pub fn __checked_by_bulkhead_config(
        config: Config,
        undeclared: Vec<UndeclaredName>,
        warnings: Vec<String>,
    ) -> Self {
        CheckedDeploy {
            config,
            undeclared,
            warnings,
        }
    }

    /// The whole deploy: it replaces the deploy in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Names the layers gave that nothing declares (left out of [`config`](Self::config)),
    /// with a suggestion.
    pub fn undeclared(&self) -> &[UndeclaredName] {
        &self.undeclared
    }

    /// What checking it warned about, one diagnostic each (`FILE:LINE:COL: warning: …`).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// This deploy with `name`'s entry taken from `change` (each entry is checked on its
    /// own, so the result is checked too): a change to one bulkhead against the deploy in
    /// force. Keeps this deploy's entry when `change` has none; takes `change`'s
    /// undeclared names and warnings.
    #[must_use]
    pub fn with_entry_of(mut self, name: &str, change: CheckedDeploy) -> Self {
        let CheckedDeploy {
            mut config,
            undeclared,
            warnings,
        } = change;
        if let Some(entry) = config.bulkheads.remove(name) {
            self.config.bulkheads.insert(name.to_owned(), entry);
        }
        self.undeclared = undeclared;
        self.warnings = warnings;
        self
    }

    /// The config, the undeclared names and the warnings.
    pub fn into_parts(self) -> (Config, Vec<UndeclaredName>, Vec<String>) {
        (self.config, self.undeclared, self.warnings)
    }
}

//! The program's declarations, the process-wide registry, and deploys applied to it.
//!
//! Every `#[bulkhead]` function compiles its bulkhead's declaration into the binary as
//! typed data, and the linker gathers them ([`declarations`]). The process-wide
//! [`registry`] holds every declared bulkhead from its first use, with the declared sizes
//! and zero counts. A deploy — a [`Config`] built in code, or deploy files and
//! `BULKHEAD_…` environment variables layered over the declarations with [`Deploy`] — is
//! checked against every declaration, used or not, and applied in place.

#[cfg(feature = "deploy")]
mod files;

#[cfg(feature = "deploy")]
pub use files::{Deploy, DeployCheck, DeployError, check_deploy};
// For the front ends behind other features: the watcher and the admin router's writes.
#[cfg(all(feature = "deploy", any(feature = "axum", feature = "watch")))]
pub(crate) use files::apply;
#[cfg(all(feature = "deploy", feature = "axum"))]
pub(crate) use files::layers_over;

use bulkhead_core::{Declarations, Registry, ReloadError, ReloadReport};

use crate::Config;

/// The process-wide registry: every bulkhead the linked program declares with
/// `#[bulkhead]` — in this crate and in every library it links — from the first use, with
/// the declared sizes (or a deploy's) and zero counts; plus any bulkhead the program
/// registers by hand. Snapshots, metrics and shutdown start here.
///
/// ```
/// use bulkhead::{BulkheadError, bulkhead};
///
/// #[bulkhead("inventory")]
/// fn reserve(sku: u64) -> Result<u64, BulkheadError> {
///     Ok(sku)
/// }
///
/// // Before any call: the bulkhead is there, with its declared limit and zero counts.
/// let inventory = bulkhead::registry().semaphore("inventory").expect("declared");
/// assert_eq!((inventory.limit(), inventory.snapshot().calls.permitted), (4, 0));
/// reserve(1).unwrap();
/// assert_eq!(inventory.snapshot().calls.permitted, 1);
/// ```
///
/// # Panics
///
/// On first use, when two crates of the program declare one name with different kinds
/// (the message names both declarations). Call [`Declarations::check`] on
/// [`declarations()`] at start-up, or use [`Deploy::install`], to get it as an error.
pub fn registry() -> &'static Registry {
    bulkhead_core::registry()
}

/// Every bulkhead the linked program declares: its config, kind, where it is declared and
/// the functions that use it. Built from the binary alone (nothing is read or parsed).
///
/// ```
/// use bulkhead::{BulkheadError, bulkhead};
///
/// #[bulkhead("payment")]
/// fn charge(order: u64) -> Result<u64, BulkheadError> {
///     Ok(order)
/// }
///
/// let payment = bulkhead::declarations().get("payment").expect("declared by `charge`");
/// assert_eq!(payment.kind(), bulkhead::config::Kind::Semaphore);
/// assert_eq!(payment.declared_at().file, "bulkheads.yaml");
/// assert!(payment.functions()[0].path.ends_with("::charge"));
/// ```
///
/// A bulkhead named in `bulkheads.yaml` but used by no linked function is not part of the
/// program, and is not listed.
pub fn declarations() -> &'static Declarations {
    Declarations::of_program()
}

/// Applies a deploy's config at start-up: the bulkheads it names take its sizes, every
/// other declared bulkhead keeps its declared sizes.
///
/// Checked against every declaration of the program, used or not, and refused as a whole
/// (nothing applied) when it gives a bulkhead another kind — the error names where the
/// program declares it. A name that no code declares is reported in
/// [`ReloadReport::undeclared`] with a suggestion ([`install_strict`] refuses it).
///
/// ```
/// use bulkhead::config::{BulkheadConfig, SemaphoreConfig};
/// use bulkhead::{BulkheadError, Config, bulkhead};
///
/// #[bulkhead("recommendations")]
/// fn recommend(user: u64) -> Result<Vec<u64>, BulkheadError> {
///     Ok(vec![user + 1])
/// }
///
/// let mut deploy = Config::default();
/// let two = SemaphoreConfig { max_concurrent_calls: 2, ..Default::default() };
/// deploy.bulkheads.insert("recommendations".into(), BulkheadConfig::semaphore(two.clone()));
/// deploy.bulkheads.insert("recomendations".into(), BulkheadConfig::semaphore(two));
/// let report = bulkhead::install(&deploy).unwrap();
/// assert_eq!(report.resized, ["recommendations"]);
/// assert_eq!(report.undeclared[0].did_you_mean.as_deref(), Some("recommendations"));
/// assert_eq!(bulkhead::registry().semaphore("recommendations").unwrap().limit(), 2);
/// # recommend(1).unwrap();
/// ```
///
/// Deploy files and environment variables are layered over the declarations by
/// [`Deploy`], which also lets a deploy entry give sizes only.
///
/// # Errors
///
/// [`ReloadError`] listing every problem; nothing was applied.
pub fn install(config: &Config) -> Result<ReloadReport, ReloadError> {
    registry().reload(config)
}

/// [`install`], but a name no code declares is refused instead of reported.
///
/// # Errors
///
/// [`ReloadError`] listing every problem; nothing was applied.
pub fn install_strict(config: &Config) -> Result<ReloadReport, ReloadError> {
    registry().reload_strict(config)
}

/// Applies a new deploy at any time, without a restart: every size can change; kinds
/// cannot. Same rules and report as [`install`]; a bulkhead the new config no longer names
/// goes back to its declared sizes.
///
/// # Errors
///
/// [`ReloadError`] listing every problem; nothing was applied.
pub fn reload(config: &Config) -> Result<ReloadReport, ReloadError> {
    install(config)
}

//! The process-wide bulkheads behind `#[bulkhead]`.
//!
//! An annotated function's slot resolves, on its first call, to the bulkhead of its name in
//! [`bulkhead_core::registry()`]. If no call registered it yet, it is registered with the
//! sizes of the deploy config last applied by [`install`]/[`reload`] when that config
//! declares it with the same kind, and otherwise with the declaration embedded in the
//! calling crate (the embedded default serves). The handle is leaked once per annotated
//! function: the registry never replaces an entry (it resizes in place), so a `&'static`
//! handle stays valid across reloads.
//!
//! A deploy config can only be checked against the bulkheads the code has used so far (the
//! declarations are embedded function by function). A deploy that gives a not-yet-used
//! bulkhead another kind does not capture it: the function registers its declared kind,
//! and the next [`reload`] with that config is refused with `KindChanged`. A bulkhead
//! registered under the same name with the other kind by another crate cannot serve the
//! function either; it then gets a bulkhead of its own, outside the registry.

use std::sync::Mutex;

use bulkhead_config::{BulkheadConfig, Config, Kind};
use bulkhead_core::{
    Bulkhead, Registry, ReloadError, ReloadReport, SemaphoreBulkhead, ThreadPoolBulkhead,
};

use crate::private::Declaration;

/// The config the declaration's crate gave its bulkhead.
fn declared(declaration: &Declaration, kind: Kind) -> BulkheadConfig {
    // The text was validated when the crate was compiled, and `include_str!` ties the
    // embedded text to that file, so this parses. If it somehow did not, the kind's
    // defaults serve rather than a failed call.
    bulkhead_config::parse_file(declaration.config_path, declaration.config)
        .ok()
        .and_then(|parsed| parsed.config.bulkheads.get(declaration.name).cloned())
        .filter(|config| config.kind() == kind)
        .unwrap_or_else(|| match kind {
            Kind::Semaphore => BulkheadConfig::semaphore(Default::default()),
            Kind::ThreadPool => BulkheadConfig::thread_pool(Default::default()),
        })
}

/// The deploy config last applied, consulted by first calls. Its lock also orders a first
/// call's registration against `apply`, so a bulkhead is either registered before a reload
/// (and resized by it) or after (with the new config's sizes).
static DEPLOY: Mutex<Option<Config>> = Mutex::new(None);

fn resolve(declaration: &Declaration, kind: Kind) -> Bulkhead {
    let registry = bulkhead_core::registry();
    let deploy = DEPLOY.lock().unwrap_or_else(|p| p.into_inner());
    let config = deploy
        .as_ref()
        .and_then(|d| d.bulkheads.get(declaration.name))
        .filter(|c| c.kind() == kind)
        .cloned()
        .unwrap_or_else(|| declared(declaration, kind));
    let registered = registry.register(declaration.name, &config);
    drop(deploy);
    match registered {
        Ok(bulkhead) => bulkhead,
        Err(_kind_mismatch) => {
            Bulkhead::from_config(declaration.name, &config, bulkhead_core::system_clock())
        }
    }
}

pub(crate) fn semaphore_for(declaration: &Declaration) -> &'static SemaphoreBulkhead {
    let bulkhead = match resolve(declaration, Kind::Semaphore) {
        Bulkhead::Semaphore(semaphore) => semaphore,
        // `resolve` returns the declared kind; this arm is never taken.
        other => SemaphoreBulkhead::new(other.name(), &Default::default()),
    };
    Box::leak(Box::new(bulkhead))
}

pub(crate) fn thread_pool_for(declaration: &Declaration) -> &'static ThreadPoolBulkhead {
    let bulkhead = match resolve(declaration, Kind::ThreadPool) {
        Bulkhead::ThreadPool(pool) => pool,
        other => ThreadPoolBulkhead::new(other.name(), &Default::default()),
    };
    Box::leak(Box::new(bulkhead))
}

/// The process-wide registry: every bulkhead `#[bulkhead]` functions have used, and every
/// bulkhead a deploy config installed. Snapshots, shutdown and metrics start here.
pub fn registry() -> &'static Registry {
    bulkhead_core::registry()
}

/// Applies a deploy's config, usually at start-up before the first call: its sizes replace
/// the embedded defaults of every bulkhead it declares.
///
/// Bulkheads already in use are resized in place; the others take the deploy's sizes at
/// their first call. Refused as a whole, with nothing applied, when it changes the kind of
/// a bulkhead in use or leaves one out (a deploy may change sizes, not kinds). The report
/// lists what was resized, what was unchanged, and what is declared but not used yet (a
/// typo in a deploy file shows up there).
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
/// let mut config = Config::default();
/// config.bulkheads.insert(
///     "recommendations".into(),
///     BulkheadConfig::semaphore(SemaphoreConfig { max_concurrent_calls: 2, ..Default::default() }),
/// );
/// let report = bulkhead::install(&config).unwrap();
/// assert_eq!(report.not_registered, ["recommendations"]);
///
/// recommend(1).unwrap();
/// assert_eq!(bulkhead::registry().semaphore("recommendations").unwrap().limit(), 2);
/// ```
///
/// A deploy usually layers its own file and environment variables over the declared
/// config with [`config::Layers`](crate::config::Layers); every error names the file, line
/// and key, or the variable, of the bad value:
///
/// ```
/// use bulkhead::config::{Layers, Limits};
///
/// let declared = include_str!("../bulkheads.yaml");
/// let deploy = "bulkheads:\n  payment: { max_concurrent_calls: 40 }\n";
/// let config = Layers::new("bulkheads.yaml", declared)
///     .yaml("deploy/prod.yaml", deploy)?
///     .env_vars([("BULKHEAD_PAYMENT__MAX_CONCURRENT_CALLS".to_string(), "50".to_string())])
///     .extract()?;
/// // The environment wins over the deploy file, which wins over the declaration.
/// let payment = &config.bulkheads["payment"];
/// assert!(matches!(&payment.limits, Limits::Semaphore(s) if s.max_concurrent_calls == 50));
/// bulkhead::install(&config).expect("a deploy may change sizes, not kinds");
/// # Ok::<(), bulkhead::config::Diagnostics>(())
/// ```
pub fn install(config: &Config) -> Result<ReloadReport, ReloadError> {
    apply(config)
}

/// Applies a new config at any time, without a restart: every size can change; kinds
/// cannot, and a bulkhead in use cannot be left out. Same rules and report as [`install`].
pub fn reload(config: &Config) -> Result<ReloadReport, ReloadError> {
    apply(config)
}

fn apply(config: &Config) -> Result<ReloadReport, ReloadError> {
    let mut deploy = DEPLOY.lock().unwrap_or_else(|p| p.into_inner());
    let report = bulkhead_core::registry().reload(config)?;
    *deploy = Some(config.clone());
    Ok(report)
}

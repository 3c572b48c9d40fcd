//! Deploy files and `BULKHEAD_…` environment variables layered over the registry
//! (feature `deploy`): [`Deploy`], [`check_deploy`], and the one way every front end that
//! layers a deploy — a watched file, the admin router's writes — applies it.

use std::path::Path;
use std::process::ExitCode;

use bulkhead_config::{CheckReport, Diagnostic, Diagnostics, Layers, ResolvedDeploy, Severity};
use bulkhead_core::{
    CheckedDeploy, DeclarationConflict, DeployBase, DeployRefused, ReloadError, ReloadReport,
};

use super::{declarations, registry};
use crate::Config;

/// Where the program declares `name`, for messages (`None`: registered by hand).
fn declared_at(name: &str) -> Option<String> {
    declarations()
        .get(name)
        .map(|d| d.declared_at().to_string())
}

/// Layers over `base` — every registered bulkhead with the config a deploy builds on —
/// named by where each is declared.
pub(crate) fn layers_over(base: &Config) -> Layers {
    Layers::over_declarations(base, declared_at)
}

/// What a deploy resolved without applying it is layered over: the registry's base, or —
/// when two declarations conflict, so that the program cannot build its registry — the
/// declarations as they are (the conflict is reported on its own).
fn base() -> DeployBase {
    if declarations().check().is_ok() {
        return registry().deploy_base();
    }
    let mut base = DeployBase::default();
    for declared in declarations() {
        base.baselines
            .bulkheads
            .insert(declared.name().to_owned(), declared.config().clone());
    }
    base
}

/// The one way a front end applies a deploy it builds: under the registry's deploy lock,
/// after checking the program's declarations, recorded by the registry.
pub(crate) fn apply(
    source: &str,
    strict: bool,
    build: impl FnOnce(&DeployBase) -> Result<CheckedDeploy, DeployError>,
) -> Result<ReloadReport, DeployError> {
    // Before the registry: building it panics on a conflict.
    declarations().check()?;
    registry()
        .deploy_with(source, strict, build)
        .map_err(|refused| match refused {
            DeployRefused::Build(e) => e,
            DeployRefused::Refused(e) => DeployError::Refused(e),
        })
}

/// Why a [`Deploy`] was not applied. Nothing was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    /// The deploy's files or variables have problems: each names its file, line and key,
    /// or its environment variable.
    #[error("the deploy is invalid, nothing applied:\n{0}")]
    Invalid(Diagnostics),
    /// The registry refused it (a kind change, or an undeclared name when strict).
    #[error(transparent)]
    Refused(#[from] ReloadError),
    /// Two crates of the program declare one name with different kinds: the program
    /// cannot run until one is renamed.
    #[error(transparent)]
    Conflict(#[from] DeclarationConflict),
}

/// A deploy layered over the program's declarations: deploy files, then `BULKHEAD_…`
/// environment variables (each layer wins over the ones below it, key by key).
///
/// A deploy entry may give sizes only: the kind comes from the declaration. A name the
/// program does not declare is a warning with a "did you mean" (an error with
/// [`strict`](Self::strict)); a kind change is an error naming the declaration.
///
/// ```
/// use bulkhead::{BulkheadError, bulkhead};
///
/// #[bulkhead("payment")]
/// fn charge(order: u64) -> Result<u64, BulkheadError> {
///     Ok(order)
/// }
///
/// let report = bulkhead::Deploy::new()
///     .yaml("deploy/prod.yaml", "bulkheads:\n  payment: { max_concurrent_calls: 40 }\n")?
///     .env_vars([("BULKHEAD_PAYMENT__MAX_WAIT".to_owned(), "50ms".to_owned())])
///     .install()?;
/// assert_eq!(report.resized, ["payment"]);
/// let payment = bulkhead::registry().semaphore("payment").unwrap();
/// assert_eq!(payment.limit(), 40);
/// # charge(1)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// In production read the file and the process environment:
/// `Deploy::new().file("deploy/prod.yaml")?.env().install()?`.
#[derive(Clone, Debug)]
#[must_use = "a Deploy does nothing until it is installed or checked"]
pub struct Deploy {
    /// The YAML layers, lowest first: (name in messages, text).
    yaml: Vec<(String, String)>,
    env: Env,
    strict: bool,
}

/// The environment layer of a [`Deploy`].
#[derive(Clone, Debug)]
enum Env {
    None,
    /// The process's variables, read when the deploy is built.
    Process,
    Vars(Vec<(String, String)>),
}

impl Default for Deploy {
    fn default() -> Self {
        Self::new()
    }
}

impl Deploy {
    /// A deploy over every bulkhead of the process-wide registry — the program's
    /// declarations and any registered by hand — with no layer yet.
    pub fn new() -> Self {
        Deploy {
            yaml: Vec::new(),
            env: Env::None,
            strict: false,
        }
    }

    /// Adds a deploy file on top.
    ///
    /// # Errors
    ///
    /// An unreadable file or invalid YAML, now; other problems are reported when the
    /// deploy is resolved, all at once.
    pub fn file(self, path: impl AsRef<Path>) -> Result<Self, Diagnostics> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = bulkhead_config::read_deploy_file(path)
            .map_err(|e| Diagnostics::of_read_error(&*name, &e))?;
        self.yaml(&name, &text)
    }

    /// Adds a deploy layer from YAML text, named `name` in messages.
    ///
    /// # Errors
    ///
    /// Invalid YAML, now; other problems are reported when the deploy is resolved.
    pub fn yaml(mut self, name: &str, text: &str) -> Result<Self, Diagnostics> {
        // The syntax now; the layer itself is layered over the registry when applied.
        let _syntax = layers_over(&Config::default()).yaml(name, text)?;
        self.yaml.push((name.to_owned(), text.to_owned()));
        Ok(self)
    }

    /// Adds the process's `BULKHEAD_<NAME>__<KEY>` environment variables on top.
    pub fn env(self) -> Self {
        Deploy {
            env: Env::Process,
            ..self
        }
    }

    /// Adds the given variables as the environment layer (tests, or a captured environment).
    pub fn env_vars(self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Deploy {
            env: Env::Vars(vars.into_iter().collect()),
            ..self
        }
    }

    /// Refuses names the program does not declare instead of warning about them.
    pub fn strict(self) -> Self {
        Deploy {
            strict: true,
            ..self
        }
    }

    /// Where this deploy comes from, in the log and [`ReloadStatus::in_force`](crate::ReloadStatus::in_force):
    /// its layers' names, lowest first.
    fn source(&self) -> String {
        let mut names: Vec<&str> = self.yaml.iter().map(|(name, _)| name.as_str()).collect();
        if !matches!(self.env, Env::None) {
            names.push("the BULKHEAD_… environment variables");
        }
        if names.is_empty() {
            "an empty deploy".to_owned()
        } else {
            names.join(" < ")
        }
    }

    /// The layers over `base`, resolved and checked.
    fn resolve_over(&self, base: &DeployBase) -> Result<ResolvedDeploy, Diagnostics> {
        let mut layers = layers_over(&base.baselines);
        if self.strict {
            layers = layers.strict();
        }
        for (name, text) in &self.yaml {
            layers = layers.yaml(name, text)?;
        }
        layers = match &self.env {
            Env::None => layers,
            Env::Process => layers.env(),
            Env::Vars(vars) => layers.env_vars(vars.iter().cloned()),
        };
        layers.deploy()
    }

    /// The deploy, layered and checked, and its warnings (lints, undeclared names),
    /// without applying it: what [`install`](Self::install) would apply now.
    ///
    /// # Errors
    ///
    /// Every problem of every layer, each placed in its file or variable.
    pub fn resolve(&self) -> Result<ResolvedDeploy, Diagnostics> {
        self.resolve_over(&base())
    }

    /// Applies the deploy to the process-wide registry ([`install`](crate::install)'s rules): layered
    /// over every registered bulkhead under the registry's deploy lock, and recorded in
    /// [`Registry::reload_status`](crate::Registry::reload_status) whatever the outcome.
    ///
    /// # Errors
    ///
    /// [`DeployError::Invalid`] when a layer has problems, [`DeployError::Refused`] when
    /// the registry refuses it, [`DeployError::Conflict`] when the program's declarations
    /// give one name two kinds; nothing is applied in any case.
    pub fn install(self) -> Result<ReloadReport, DeployError> {
        self.install_as(&self.source())
    }

    /// A deploy of one YAML text named `name` (a watched file's contents, a request's
    /// body), the process's environment on top when `env`. `text` is the reason when the
    /// text could not be read: recorded as refused like any other deploy.
    #[cfg(any(feature = "axum", feature = "watch"))]
    pub(crate) fn of_text(name: &str, text: &str, env: bool) -> Self {
        Deploy {
            yaml: vec![(name.to_owned(), text.to_owned())],
            env: if env { Env::Process } else { Env::None },
            strict: false,
        }
    }

    /// [`install`](Self::install), naming the deploy `source` in the log and the status.
    pub(crate) fn install_as(&self, source: &str) -> Result<ReloadReport, DeployError> {
        apply(source, self.strict, |base| {
            self.resolve_over(base)
                .map(|resolved| resolved.deploy)
                .map_err(DeployError::Invalid)
        })
    }
}

/// Checks deploy files against every declaration of this program, as CI runs it: each
/// file is layered over the declarations on its own (strictly, when `strict`: undeclared
/// names are errors). The report prints like `bulkhead check`
/// ([`DeployCheck::human`]) and ends the process with its exit status (0 clean,
/// 1 problems, 2 a file that could not be read).
///
/// A service gives itself a `--check-config` flag with it:
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     let args: Vec<String> = std::env::args().skip(1).collect();
///     if let [flag, files @ ..] = args.as_slice()
///         && flag == "--check-config"
///     {
///         let check = bulkhead::check_deploy(files, true);
///         print!("{}", check.human());
///         return check.exit_code();
///     }
///     // … serve …
///     std::process::ExitCode::SUCCESS
/// }
/// ```
pub fn check_deploy(files: &[impl AsRef<Path>], strict: bool) -> DeployCheck {
    let mut report = CheckReport::new();
    let mut unreadable = false;
    for conflict in declarations().conflicts() {
        report.extend(Diagnostics::from(vec![Diagnostic::unplaced(
            Severity::Error,
            conflict.first.to_string(),
            format!("bulkheads.{}", conflict.name),
            conflict.to_string(),
        )]));
    }
    for file in files {
        let path = file.as_ref();
        let name = path.display().to_string();
        report.add_file(&name);
        let text = match bulkhead_config::read_deploy_file(path) {
            Ok(text) => text,
            Err(e) => {
                // Not UTF-8 is a problem of the file, as the `bulkhead` command says.
                unreadable |= bulkhead_config::NotUtf8::of(&e).is_none();
                report.extend(Diagnostics::of_read_error(name, &e));
                continue;
            }
        };
        report.add_source(&name, &text);
        let mut deploy = Deploy::new();
        if strict {
            deploy = deploy.strict();
        }
        let diagnostics = match deploy.yaml(&name, &text).and_then(|d| d.resolve()) {
            Ok(resolved) => resolved.warnings,
            Err(errors) => errors,
        };
        report.extend(diagnostics);
    }
    DeployCheck { report, unreadable }
}

/// The outcome of [`check_deploy`].
#[derive(Clone, Debug)]
pub struct DeployCheck {
    report: CheckReport,
    unreadable: bool,
}

impl DeployCheck {
    /// The diagnostics found, each naming file, line and key path.
    pub fn diagnostics(&self) -> &Diagnostics {
        self.report.diagnostics()
    }

    /// Whether any file has an error (or could not be read).
    pub fn has_errors(&self) -> bool {
        self.report.errors() > 0
    }

    /// The report for a person: each problem with the line it points at, then a count.
    pub fn human(&self) -> String {
        self.report.human()
    }

    /// The report as JSON: `files`, `errors`, `warnings`, `diagnostics`.
    pub fn json(&self) -> String {
        self.report.json()
    }

    /// 0 clean (warnings allowed), 1 problems (a file that is not UTF-8 among them), 2 a
    /// file could not be read.
    pub fn exit_status(&self) -> u8 {
        if self.unreadable {
            2
        } else {
            self.report.exit_status(false)
        }
    }

    /// [`exit_status`](Self::exit_status) as the process's exit code.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.exit_status())
    }
}

//! What the linked program declares: one [`Declaration`] per `#[bulkhead]` function,
//! compiled into the binary as typed data and gathered at link time.
//!
//! Each annotated function contributes one `static` [`Declaration`] to the distributed
//! slice [`DECLARATIONS`] (the `linkme` crate: the linker gathers the statics of every
//! crate of the program into one section; no code runs before `main`). [`Declarations`]
//! groups them by bulkhead name, once, when the program first asks.
//!
//! # Invariants
//!
//! 1. A name has one kind in a program. Declarations of one name with different kinds
//!    are a [`DeclarationConflict`]: the program cannot start a registry
//!    ([`Declarations::check`] says why, naming both sites).
//! 2. Declarations of one name with the same kind and different sizes serve one
//!    bulkhead, with the sizes of the first declaration in [`DeclarationSite`] order
//!    (crate name, then file, then line); the others are reported as
//!    [`DeclaredBulkhead::overridden`]. A deploy that sizes the bulkhead decides.
//! 3. The view is built from the slice alone: no file is read and nothing is parsed.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use bulkhead_config_types::{BulkheadConfig, Kind};

#[cfg(bulkhead_linked)]
mod linked {
    use super::Declaration;

    #[doc(hidden)]
    pub use linkme;

    /// The declarations of every `#[bulkhead]` function linked into the program, gathered
    /// by the linker (the platforms `linkme` supports: Linux, Android, macOS, iOS,
    /// Windows, FreeBSD, OpenBSD, illumos).
    #[linkme::distributed_slice]
    pub static DECLARATIONS: [Declaration];

    /// Adds a `static` [`Declaration`] to [`DECLARATIONS`] (used by `#[bulkhead]`).
    #[doc(hidden)]
    #[macro_export]
    macro_rules! __declare {
        (static $name:ident: $ty:ty = $value:expr;) => {
            #[$crate::declaration::linkme::distributed_slice($crate::declaration::DECLARATIONS)]
            #[linkme(crate = $crate::declaration::linkme)]
            static $name: $ty = $value;
        };
    }
}

#[cfg(not(bulkhead_linked))]
mod linked {
    use super::Declaration;

    /// Empty on this platform, which the linker-section technique does not support: each
    /// bulkhead is registered by the first call of a function that uses it, from the same
    /// typed declaration, and the registry lists a bulkhead once it has been used.
    pub static DECLARATIONS: [Declaration; 0] = [];

    /// Defines the `static` [`Declaration`] (used by `#[bulkhead]`); nothing gathers it here.
    #[doc(hidden)]
    #[macro_export]
    macro_rules! __declare {
        (static $name:ident: $ty:ty = $value:expr;) => {
            static $name: $ty = $value;
        };
    }
}

pub use linked::*;

/// One annotated function's declaration: the bulkhead it uses, that bulkhead's config as
/// resolved when the crate was compiled, and where both were written.
///
/// Built by `#[bulkhead]`; not meant to be written by hand.
#[derive(Debug)]
pub struct Declaration {
    /// The bulkhead's name.
    pub name: &'static str,
    /// Its kind, as declared.
    pub kind: Kind,
    /// Builds the declared config (generated Rust code: no parsing).
    pub config: fn() -> BulkheadConfig,
    /// Where the bulkhead is declared in the crate's config file.
    pub declared_at: DeclarationSite,
    /// The annotated function.
    pub function: AnnotatedFunction,
}

/// Where a bulkhead is declared: a crate's config file, line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeclarationSite {
    /// The package that declares it (`CARGO_PKG_NAME`).
    pub crate_name: &'static str,
    /// The config file, relative to that package's `Cargo.toml` (`bulkheads.yaml`).
    pub file: &'static str,
    /// 1-based line of the bulkhead's name in the file.
    pub line: u32,
    /// 1-based column of the bulkhead's name in the file.
    pub column: u32,
}

impl fmt::Display for DeclarationSite {
    /// `bulkheads.yaml:4:3 (crate geo-client)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{} (crate {})",
            self.file, self.line, self.column, self.crate_name
        )
    }
}

/// A function annotated with `#[bulkhead]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AnnotatedFunction {
    /// Its path: the module path and the function's name (`shop::checkout::charge`).
    pub path: &'static str,
    /// The source file of the attribute, as `file!()` names it.
    pub file: &'static str,
    /// The attribute's line.
    pub line: u32,
}

impl fmt::Display for AnnotatedFunction {
    /// `shop::checkout::charge (src/checkout.rs:12)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}:{})", self.path, self.file, self.line)
    }
}

/// One bulkhead the program declares, with every declaration of it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeclaredBulkhead {
    name: &'static str,
    config: BulkheadConfig,
    declared_at: DeclarationSite,
    functions: Vec<AnnotatedFunction>,
    overridden: Vec<(DeclarationSite, BulkheadConfig)>,
}

impl DeclaredBulkhead {
    /// The bulkhead's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Semaphore or thread pool.
    pub fn kind(&self) -> Kind {
        self.config.kind()
    }

    /// The config it starts with (before any deploy).
    pub fn config(&self) -> &BulkheadConfig {
        &self.config
    }

    /// Where the config that serves is declared.
    pub fn declared_at(&self) -> DeclarationSite {
        self.declared_at
    }

    /// Every annotated function that uses it, sorted by path.
    pub fn functions(&self) -> &[AnnotatedFunction] {
        &self.functions
    }

    /// Other declarations of the same name and kind whose sizes differ from the one that
    /// serves: they were not applied (invariant 2 of this module). Empty in most programs.
    pub fn overridden(&self) -> &[(DeclarationSite, BulkheadConfig)] {
        &self.overridden
    }
}

/// Two declarations give one name different kinds: the program cannot run both.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "bulkhead `{name}` is declared as a {first_kind} at {first} and as a {second_kind} at {second}: \
     one name is one bulkhead, so rename one of them or give both the same kind"
)]
#[non_exhaustive]
pub struct DeclarationConflict {
    /// The bulkhead's name.
    pub name: &'static str,
    /// The first declaration (in [`DeclarationSite`] order).
    pub first: DeclarationSite,
    /// Its kind.
    pub first_kind: Kind,
    /// A declaration of another kind.
    pub second: DeclarationSite,
    /// Its kind.
    pub second_kind: Kind,
}

/// Every bulkhead the program declares, by name, built from [`Declaration`]s.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Declarations {
    bulkheads: BTreeMap<&'static str, DeclaredBulkhead>,
    conflicts: Vec<DeclarationConflict>,
}

impl Declarations {
    /// Groups declarations by name (see the module's invariants for how they combine).
    pub fn from_declarations<'a>(declarations: impl IntoIterator<Item = &'a Declaration>) -> Self {
        let mut by_name: BTreeMap<&'static str, Vec<&Declaration>> = BTreeMap::new();
        for declaration in declarations {
            by_name
                .entry(declaration.name)
                .or_default()
                .push(declaration);
        }
        let mut out = Declarations::default();
        for (name, mut group) in by_name {
            group.sort_by_key(|d| (d.declared_at, d.function));
            let first = group[0];
            let config = (first.config)();
            let mut functions: Vec<AnnotatedFunction> = group.iter().map(|d| d.function).collect();
            functions.sort();
            functions.dedup();
            let mut overridden: Vec<(DeclarationSite, BulkheadConfig)> = Vec::new();
            for other in &group[1..] {
                if other.kind != first.kind {
                    if !out
                        .conflicts
                        .iter()
                        .any(|c| c.name == name && c.second == other.declared_at)
                    {
                        out.conflicts.push(DeclarationConflict {
                            name,
                            first: first.declared_at,
                            first_kind: first.kind,
                            second: other.declared_at,
                            second_kind: other.kind,
                        });
                    }
                    continue;
                }
                if other.declared_at == first.declared_at
                    || overridden
                        .iter()
                        .any(|(site, _)| *site == other.declared_at)
                {
                    continue;
                }
                let other_config = (other.config)();
                if other_config != config {
                    overridden.push((other.declared_at, other_config));
                }
            }
            out.bulkheads.insert(
                name,
                DeclaredBulkhead {
                    name,
                    config,
                    declared_at: first.declared_at,
                    functions,
                    overridden,
                },
            );
        }
        out
    }

    /// The declarations linked into this program, grouped once and kept.
    pub fn of_program() -> &'static Declarations {
        static PROGRAM: OnceLock<Declarations> = OnceLock::new();
        PROGRAM.get_or_init(|| Declarations::from_declarations(DECLARATIONS.iter()))
    }

    /// The declared bulkhead `name`.
    pub fn get(&self, name: &str) -> Option<&DeclaredBulkhead> {
        self.bulkheads.get(name)
    }

    /// Every declared bulkhead, by name.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &DeclaredBulkhead> {
        self.bulkheads.values()
    }

    /// The declared names, sorted.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &'static str> + '_ {
        self.bulkheads.keys().copied()
    }

    /// How many bulkheads are declared.
    pub fn len(&self) -> usize {
        self.bulkheads.len()
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.bulkheads.is_empty()
    }

    /// Names declared with two kinds (invariant 1). Empty in a program that can run.
    pub fn conflicts(&self) -> &[DeclarationConflict] {
        &self.conflicts
    }

    /// `Ok` when no name is declared with two kinds.
    ///
    /// # Errors
    ///
    /// The first name declared with two kinds, with the sites of both declarations.
    pub fn check(&self) -> Result<(), DeclarationConflict> {
        match self.conflicts.first() {
            None => Ok(()),
            Some(conflict) => Err(conflict.clone()),
        }
    }
}

impl<'a> IntoIterator for &'a Declarations {
    type Item = &'a DeclaredBulkhead;
    type IntoIter = std::collections::btree_map::Values<'a, &'static str, DeclaredBulkhead>;

    fn into_iter(self) -> Self::IntoIter {
        self.bulkheads.values()
    }
}

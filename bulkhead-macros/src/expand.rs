//! The `#[bulkhead("name")]` attribute from end to end: parse the arguments and the item,
//! look the name up, run every check, then expand (`expansion.rs`).
//!
//! Invariant: on any error the item is emitted unchanged beside one `compile_error!` per
//! problem, so one mistake gives one error and the rest of the crate still type-checks.

use std::path::Path;

use proc_macro2::TokenStream;
use quote::quote;

use crate::args;
use crate::checks;
use crate::config::{self, Kind};
use crate::ctxt::Ctxt;
use crate::expansion::Expansion;
use crate::resolve::resolve;
use crate::siblings;

/// The whole attribute: parse, check, expand; on any error, the original item and the errors.
/// `site` names this use of the attribute (file, line and column).
pub(crate) fn bulkhead(
    attr: TokenStream,
    item: TokenStream,
    file: Option<&Path>,
    site: &str,
) -> TokenStream {
    let mut cx = Ctxt::default();
    let args = args::parse(&mut cx, attr);
    let _facade = crate::crate_path::use_path(args.krate.clone());
    let func = match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            checks::not_a_function(&mut cx, &item);
            let errors = cx.to_compile_errors();
            return quote!(#errors #item);
        }
    };
    checks::shape(&mut cx, &func);

    let loaded = config::load();
    let mut resolved = None;
    if let Some(name) = &args.name {
        resolved = resolve(&mut cx, &loaded, name, site);
        let scope = siblings::scope(file, &func, &name.value());
        siblings::check_calls(&mut cx, &func, &name.value(), &scope);
        if let Some(path) = &args.fallback {
            checks::fallback_arity(&mut cx, &func, path, &scope);
        }
    }
    if let Some((declared, _)) = &resolved
        && declared.kind() == Kind::ThreadPool
        && func.sig.asyncness.is_some()
    {
        checks::owned_arguments(&mut cx, &func, args.name.as_ref());
    }
    if let (Some((declared, _)), Some(name)) = (&resolved, &args.name) {
        checks::call_timeout(&mut cx, &func, name, declared, args.fallback.as_ref());
    }

    let shares = match (&resolved, &args.name) {
        (Some((declared, location)), Some(name)) => {
            crate::shares::check(&mut cx, &args, &name.value(), declared, location)
        }
        _ => None,
    };

    match (resolved, &args.name) {
        (Some((declared, location)), Some(name)) if !cx.has_errors() => {
            Expansion::new(&func, name, declared, args.fallback.as_ref(), location)
                .with_shares(shares.as_ref())
                .into_tokens()
        }
        _ => {
            let errors = cx.to_compile_errors();
            quote!(#errors #func)
        }
    }
}

//! The `#[bulkhead]` attribute. Use it through the `bulkhead` crate: `#[bulkhead::bulkhead("payment")]`;
//! the attribute's documentation is there, with examples.
//!
//! This crate only checks and rewrites functions; the code it generates names
//! `::bulkhead::__private::…` (or `path::__private::…` after `crate = path`), so it works
//! only with the `bulkhead` facade as a dependency.
#![deny(missing_docs)]
#![warn(unreachable_pub)]
#![forbid(unsafe_code)]

mod args;
mod checks;
mod config;
mod crate_path;
mod ctxt;
mod declaration;
mod emit_config;
mod expand;
mod expansion;
mod layer;
mod rename_self;
mod resolve;
mod shares;
mod siblings;

use proc_macro::TokenStream;

/// Routes every call of the function through the named bulkhead declared in the crate's
/// `bulkheads.yaml`. See the `bulkhead` crate's documentation of this attribute.
#[proc_macro_attribute]
pub fn bulkhead(attr: TokenStream, item: TokenStream) -> TokenStream {
    let (file, site) = site();
    expand::bulkhead(attr.into(), item.into(), file.as_deref(), &site).into()
}

/// The file of this macro use, and a string that tells this use from the others (a
/// problem of the whole config is reported at one of them only).
fn site() -> (Option<std::path::PathBuf>, String) {
    let here = proc_macro::Span::call_site();
    let file = here.local_file();
    let site = format!("{file:?}:{}:{}", here.line(), here.column());
    (file, site)
}

/// A tower layer admitting requests through the named semaphore bulkhead, the name checked
/// at compile time against the crate's config. See the `bulkhead` crate's `layer!`.
#[proc_macro]
pub fn layer(input: TokenStream) -> TokenStream {
    layer::layer(input.into(), &site().1).into()
}

//! The `#[bulkhead]` attribute. Use it through the `bulkhead` crate: `#[bulkhead::bulkhead("payment")]`;
//! the attribute's documentation is there, with examples.
//!
//! This crate only checks and rewrites functions; the code it generates names
//! `::bulkhead::__private::…`, so it works only with the `bulkhead` facade as a dependency.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod analysis;
mod args;
mod config;
mod ctxt;
mod emit_config;
mod expand;
mod suggest;

use proc_macro::TokenStream;

/// Routes every call of the function through the named bulkhead declared in the crate's
/// `bulkheads.yaml`. See the `bulkhead` crate's documentation of this attribute.
#[proc_macro_attribute]
pub fn bulkhead(attr: TokenStream, item: TokenStream) -> TokenStream {
    let file = proc_macro::Span::call_site().local_file();
    expand::bulkhead(attr.into(), item.into(), file.as_deref()).into()
}

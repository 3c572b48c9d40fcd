//! The path expansions name the facade by: `::bulkhead`, or the `crate = path` one use of
//! the attribute or of `layer!` gives when the crate depends on the facade under another
//! name (`my_bulkhead = { package = "bulkheads", … }`, the serde and tokio convention).
//!
//! Invariant: an expansion names the facade only through [`private`], so every path of one
//! expansion starts with the same prefix. The prefix is set by [`use_path`] for the length
//! of one macro call (the guard it returns puts the default back), and a proc macro runs
//! each call to completion on one thread: no call sees another's path.

use std::cell::RefCell;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote_spanned};

thread_local! {
    /// The `crate = path` of the macro call being expanded, if it gave one.
    static FACADE: RefCell<Option<syn::Path>> = const { RefCell::new(None) };
}

/// The facade's `__private` module, every token spanned at `span` (where rustc reports a
/// problem of the emitted code): `::bulkhead::__private`, or `path::__private` inside
/// [`use_path`].
pub(crate) fn private(span: Span) -> TokenStream {
    FACADE.with_borrow(|facade| match facade {
        Some(path) => {
            let path: TokenStream = path
                .to_token_stream()
                .into_iter()
                .map(|mut token: TokenTree| {
                    token.set_span(span);
                    token
                })
                .collect();
            quote_spanned!(span=> #path::__private)
        }
        None => quote_spanned!(span=> ::bulkhead::__private),
    })
}

/// Expands the rest of this macro call with `path` as the facade's path (none: `::bulkhead`).
#[must_use = "the path holds only while the guard lives"]
pub(crate) fn use_path(path: Option<syn::Path>) -> Guard {
    FACADE.with_borrow_mut(|facade| *facade = path);
    Guard(())
}

/// Puts `::bulkhead` back when the macro call's expansion is done.
pub(crate) struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        FACADE.with_borrow_mut(|facade| *facade = None);
    }
}

/// The path a `crate = …` option gives: a path (`crate = ::my_bulkhead`) or, as serde and
/// tokio spell it, a string holding one (`crate = "my_bulkhead"`).
pub(crate) fn parse_value(value: &syn::Expr) -> syn::Result<syn::Path> {
    let message = "`crate` names the `bulkhead` crate where it is a dependency under another \
                   name: `crate = ::my_bulkhead` (or `crate = \"my_bulkhead\"`)";
    match value {
        syn::Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => Ok(p.path.clone()),
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(lit),
            ..
        }) => lit
            .parse::<syn::Path>()
            .map_err(|_| syn::Error::new(lit.span(), message)),
        other => Err(syn::Error::new_spanned(other, message)),
    }
}

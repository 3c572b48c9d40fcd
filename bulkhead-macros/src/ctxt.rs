//! Error collection, serde_derive style: every problem is recorded with its own span and all
//! of them are reported together, so one build shows every mistake in an attribute.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;

/// The errors found while expanding one `#[bulkhead]`.
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: Vec<syn::Error>,
}

impl Ctxt {
    /// Records an error pointing at `span`.
    pub(crate) fn error(&mut self, span: Span, message: impl std::fmt::Display) {
        self.errors.push(syn::Error::new(span, message));
    }

    /// Records an error that spans the given tokens (first to last).
    pub(crate) fn error_spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.errors.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// One `compile_error!` per recorded error, each at its own span.
    pub(crate) fn to_compile_errors(&self) -> TokenStream {
        self.errors
            .iter()
            .map(syn::Error::to_compile_error)
            .collect()
    }
}

//! `self` renamed `__self` in a body that moves into a thread-pool closure (a closure
//! cannot take `self` as a parameter), in syntax and inside macro tokens.
//!
//! Invariant: nested items (which have their own `self`) and `self::path`s are left alone.

use proc_macro2::{Ident, TokenStream, TokenTree};
use syn::visit_mut::VisitMut;

/// Renames `self` to `__self` in a body that moves into a thread-pool closure, leaving
/// nested items (which have their own `self`) and `self::path`s alone.
pub(crate) struct RenameSelf;

impl VisitMut for RenameSelf {
    fn visit_expr_path_mut(&mut self, expr: &mut syn::ExprPath) {
        if expr.qself.is_none()
            && expr.path.is_ident("self")
            && let Some(segment) = expr.path.segments.first_mut()
        {
            segment.ident = Ident::new("__self", segment.ident.span());
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}

    fn visit_macro_mut(&mut self, mac: &mut syn::Macro) {
        mac.tokens = rename_self_tokens(std::mem::take(&mut mac.tokens));
    }
}

fn rename_self_tokens(tokens: TokenStream) -> TokenStream {
    let mut out = Vec::new();
    let mut iter = tokens.into_iter().peekable();
    while let Some(tt) = iter.next() {
        match tt {
            TokenTree::Ident(ident) if ident == "self" => {
                let is_path =
                    matches!(iter.peek(), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                if is_path {
                    out.push(TokenTree::Ident(ident));
                } else {
                    out.push(TokenTree::Ident(Ident::new("__self", ident.span())));
                }
            }
            TokenTree::Group(group) => {
                let mut renamed =
                    proc_macro2::Group::new(group.delimiter(), rename_self_tokens(group.stream()));
                renamed.set_span(group.span());
                out.push(TokenTree::Group(renamed));
            }
            other => out.push(other),
        }
    }
    out.into_iter().collect()
}

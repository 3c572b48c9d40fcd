//! The attribute's arguments: `("name")`, then any of `fallback = path`,
//! `partition = "name"`, `key = <expression>` and `crate = path` (the facade's path where
//! it is a dependency under another name, `crate_path.rs`).
//!
//! The arguments are split at top-level commas and each piece is parsed on its own, so a
//! mistake in one option does not hide a mistake in another.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::spanned::Spanned;

use crate::ctxt::Ctxt;

/// The options `#[bulkhead]` accepts besides the name.
const OPTIONS: &[&str] = &["fallback", "partition", "key", "crate"];

/// What the attribute was given.
pub(crate) struct Args {
    /// The bulkhead's name as written (the string literal, for spans).
    pub name: Option<syn::LitStr>,
    /// `fallback = path`.
    pub fallback: Option<syn::Path>,
    /// `partition = "batch"`: the partition of the bulkhead the calls are counted under.
    pub partition: Option<syn::LitStr>,
    /// `key = expr`: the key (tenant, user) each call is counted under.
    pub key: Option<syn::Expr>,
    /// `crate = path`: the facade's path, when it is not `::bulkhead`.
    pub krate: Option<syn::Path>,
}

const USAGE: &str = "write `#[bulkhead(\"name\")]` or `#[bulkhead(\"name\", fallback = path)]`";

pub(crate) fn parse(cx: &mut Ctxt, attr: TokenStream) -> Args {
    let mut args = Args {
        name: None,
        fallback: None,
        partition: None,
        key: None,
        krate: None,
    };
    let pieces = split_top_level_commas(attr);
    if pieces.is_empty() {
        cx.error(
            Span::call_site(),
            format!(
                "`#[bulkhead]` needs the name of a bulkhead declared in bulkheads.yaml: {USAGE}"
            ),
        );
        return args;
    }
    for (index, piece) in pieces.into_iter().enumerate() {
        if index == 0 {
            match syn::parse2::<syn::LitStr>(piece.clone()) {
                Ok(lit) if lit.value().is_empty() => {
                    cx.error(lit.span(), "the bulkhead's name is empty: name a bulkhead declared in bulkheads.yaml");
                }
                Ok(lit) => args.name = Some(lit),
                Err(_) => cx.error_spanned(
                    &piece,
                    format!(
                        "the first argument of `#[bulkhead]` is the bulkhead's name as a string literal: {USAGE}"
                    ),
                ),
            }
            continue;
        }
        parse_option(cx, piece, &mut args);
    }
    args
}

fn parse_option(cx: &mut Ctxt, piece: TokenStream, args: &mut Args) {
    let meta = match syn::parse2::<syn::Meta>(piece.clone()) {
        Ok(meta) => meta,
        Err(_) => {
            cx.error_spanned(
                &piece,
                format!("expected an option such as `fallback = path`: {USAGE}"),
            );
            return;
        }
    };
    let key = meta.path().clone();
    let key_name = key
        .get_ident()
        .map(ToString::to_string)
        .unwrap_or_else(|| quote::quote!(#key).to_string().replace(' ', ""));
    if !OPTIONS.contains(&key_name.as_str()) {
        let suggestion = bulkhead_config::closest_name(&key_name, OPTIONS.iter().copied())
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_default();
        cx.error(
            key.span(),
            format!(
                "unknown option `{key_name}` for `#[bulkhead]`: the options are `fallback = path`, \
                 `partition = \"name\"`, `key = expression` and `crate = path`{suggestion}"
            ),
        );
        return;
    }
    if key_name == "crate" {
        parse_crate(cx, meta, args);
        return;
    }
    if key_name != "fallback" {
        parse_share(cx, meta, &key_name, args);
        return;
    }
    let value = match meta {
        syn::Meta::NameValue(nv) => nv.value,
        other => {
            cx.error_spanned(
                &other,
                "`fallback` names a function: `fallback = path` (e.g. `fallback = cached` or `fallback = Self::cached`)",
            );
            return;
        }
    };
    let path = match value {
        syn::Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => p.path,
        other => {
            cx.error_spanned(
                &other,
                "`fallback` names a function by its path, e.g. `fallback = cached` or `fallback = Self::cached`; closures and other expressions are not accepted",
            );
            return;
        }
    };
    if args.fallback.is_some() {
        cx.error(key.span(), "`fallback` is given twice: name one fallback");
        return;
    }
    args.fallback = Some(path);
}

/// `crate = path`: the facade's path (`crate_path.rs`).
fn parse_crate(cx: &mut Ctxt, meta: syn::Meta, args: &mut Args) {
    let syn::Meta::NameValue(nv) = meta else {
        cx.error_spanned(
            &meta,
            "write `crate = path`, the path of the `bulkhead` crate where it is a dependency \
             under another name, e.g. `crate = ::my_bulkhead`",
        );
        return;
    };
    if args.krate.is_some() {
        cx.error(nv.path.span(), "`crate` is given twice: give one");
        return;
    }
    match crate::crate_path::parse_value(&nv.value) {
        Ok(path) => args.krate = Some(path),
        Err(error) => cx.error(error.span(), error),
    }
}

/// `partition = "name"` or `key = expression`.
fn parse_share(cx: &mut Ctxt, meta: syn::Meta, key_name: &str, args: &mut Args) {
    let nv = match meta {
        syn::Meta::NameValue(nv) => nv,
        other => {
            cx.error_spanned(
                &other,
                format!("write `{key_name} = …`: `partition = \"batch\"` or `key = tenant_id`"),
            );
            return;
        }
    };
    let twice = format!("`{key_name}` is given twice: give one");
    if key_name == "key" {
        if args.key.is_some() {
            cx.error(nv.path.span(), twice);
            return;
        }
        args.key = Some(nv.value);
        return;
    }
    match nv.value {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(lit),
            ..
        }) => {
            if args.partition.is_some() {
                cx.error(nv.path.span(), twice);
                return;
            }
            args.partition = Some(lit);
        }
        other => cx.error_spanned(
            &other,
            "`partition` names a partition of the bulkhead as a string literal, e.g. \
             `partition = \"batch\"`",
        ),
    }
}

/// Splits `a, b = c, d` into its pieces; a trailing comma is allowed.
fn split_top_level_commas(tokens: TokenStream) -> Vec<TokenStream> {
    let mut pieces = Vec::new();
    let mut current = Vec::new();
    for tt in tokens {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ',' => {
                pieces.push(current.drain(..).collect::<TokenStream>());
            }
            _ => current.push(tt),
        }
    }
    if !current.is_empty() {
        pieces.push(current.into_iter().collect());
    }
    pieces
}

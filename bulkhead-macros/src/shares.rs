//! `partition = "…"` and `key = …` on `#[bulkhead]`: checked against the declared
//! bulkhead at compile time, and the admission expression the expansion enters through.
//!
//! A partition must be one the bulkhead declares (`partitions:` in its config), with a
//! "did you mean" like an unknown bulkhead; a partition on a bulkhead without partitions is
//! an error. Either kind takes both options: a thread pool's shares divide what it admits
//! (running plus queued). A function on a partitioned bulkhead that names no partition is
//! entered through the shares too (its calls only borrow).

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use crate::args::Args;
use crate::config::{Declared, Location};
use crate::ctxt::Ctxt;

/// What the expansion counts a call under.
pub(crate) struct Shares {
    /// The partition's name, its place among the declared (sorted) names and their
    /// fingerprint.
    partition: Option<(String, usize, u64)>,
    key: Option<syn::Expr>,
}

/// Checks the options against the declaration; `None` when the function enters the
/// bulkhead plainly (no option, no partitions declared).
pub(crate) fn check(
    cx: &mut Ctxt,
    args: &Args,
    name: &str,
    declared: &Declared,
    location: &Location,
) -> Option<Shares> {
    let partitions = &declared.config.partitions;
    if args.partition.is_none() && args.key.is_none() && partitions.is_empty() {
        return None;
    }
    if let Some(lit) = &args.partition {
        check_partition(cx, lit, name, partitions, location);
    }
    Some(Shares {
        partition: args.partition.as_ref().map(|lit| {
            let name = lit.value();
            let index = partitions.names().position(|n| n == name).unwrap_or(0);
            (name, index, partitions.fingerprint())
        }),
        key: args.key.clone(),
    })
}

/// Checks `partition = "…"` (of the attribute or `layer!`) against the partitions the
/// bulkhead `name` declares: an error on a bulkhead without partitions, or for a name it
/// does not declare (with a "did you mean").
pub(crate) fn check_partition(
    cx: &mut Ctxt,
    lit: &syn::LitStr,
    name: &str,
    partitions: &bulkhead_config::Partitions,
    location: &Location,
) {
    let file = location.path.display();
    let wanted = lit.value();
    if partitions.is_empty() {
        cx.error(
            lit.span(),
            format!(
                "bulkhead `{name}` has no partitions, so `partition = \"{wanted}\"` names \
                 nothing\nhelp: declare them under `{name}` in {file}, such as \
                 `partitions: {{ {wanted}: 0.2 }}`, or remove the option"
            ),
        );
    } else if partitions.guaranteed(&wanted, 0).is_none() {
        let names = partitions.names();
        let help = match bulkhead_config::closest_name(&wanted, partitions.names()) {
            Some(close) => format!("did you mean `{close}`?"),
            None => format!(
                "use one it declares: {}",
                names
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        cx.error(
            lit.span(),
            format!(
                "unknown partition `{wanted}` of bulkhead `{name}`: {file} does not declare \
                 it\nhelp: {help}"
            ),
        );
    }
}

/// How the call enters its bulkhead, of either kind: `Shares(partition, key)` through its
/// shares, or `Plain`; spanned at `span` (an async function's `async`, where rustc reports
/// a future that is not `Send`).
pub(crate) fn entry(shares: Option<&Shares>, span: proc_macro2::Span) -> TokenStream {
    let p = crate::crate_path::private(span);
    match shares {
        Some(shares) => {
            let a = shares.arguments();
            quote_spanned!(span=> #p::Shares(#a))
        }
        None => quote_spanned!(span=> #p::Plain),
    }
}

/// The thread-pool call `name` (`call`, `call_async`, `call_async_timed`) of the slot, and
/// its leading arguments: the slot, then the [`entry`]; spanned at `span`.
pub(crate) fn pool_call(
    shares: Option<&Shares>,
    slot: &proc_macro2::Ident,
    name: &str,
    span: proc_macro2::Span,
) -> (TokenStream, TokenStream) {
    let p = crate::crate_path::private(span);
    let f = quote::format_ident!("{name}", span = span);
    let entry = entry(shares, span);
    (
        quote_spanned!(span=> #p::ThreadPoolSlot::#f),
        quote_spanned!(span=> &#slot, #entry,),
    )
}

/// `body`, after `let _ = &name;` for each of `parameters` the key expression names: on a
/// thread pool the key is read before the arguments move to the worker, so a parameter
/// only the key uses is bound there unused; this marks it used.
pub(crate) fn key_uses<'p>(
    shares: Option<&Shares>,
    parameters: impl IntoIterator<Item = &'p proc_macro2::Ident>,
    body: &syn::Block,
) -> TokenStream {
    struct Names(Vec<proc_macro2::Ident>);
    impl<'ast> syn::visit::Visit<'ast> for Names {
        fn visit_path(&mut self, path: &'ast syn::Path) {
            if let Some(ident) = path.get_ident() {
                self.0.push(ident.clone());
            }
            syn::visit::visit_path(self, path);
        }
    }
    let Some(key) = shares.and_then(|s| s.key.as_ref()) else {
        return quote!(#body);
    };
    let mut names = Names(Vec::new());
    syn::visit::Visit::visit_expr(&mut names, key);
    let uses: TokenStream = parameters
        .into_iter()
        .filter_map(|parameter| names.0.iter().find(|n| *n == parameter))
        .map(|name| quote!(let _ = &#name;))
        .collect();
    if uses.is_empty() {
        quote!(#body)
    } else {
        quote!({ #uses #body })
    }
}

impl Shares {
    /// The fields of `__private::Shares`, how the call enters: the partition's place among the
    /// declared names and its name (or none; the place is checked against the running
    /// names), and the key's id (or none), the key evaluated once, before admission.
    pub(crate) fn arguments(&self) -> TokenStream {
        let p = crate::crate_path::private(proc_macro2::Span::call_site());
        let partition = match &self.partition {
            Some((name, index, fingerprint)) => quote!(#p::Some((#index, #name, #fingerprint))),
            None => quote!(#p::None),
        };
        // Spanned at the expression: a key that is not `Hash` is reported at the user's
        // tokens.
        let key = match &self.key {
            Some(expr) => {
                let span = syn::spanned::Spanned::span(expr);
                let p = crate::crate_path::private(span);
                quote_spanned!(span=> #p::Some(#p::key_id(&(#expr))))
            }
            None => quote!(#p::None),
        };
        quote!(#partition, #key)
    }
}

//! `bulkhead::layer!("name")` / `layer!("name", partition = "batch")`: a tower layer for a
//! semaphore bulkhead, its name (and partition) checked against the crate's config at
//! compile time like the attribute's. `crate = path` names the facade where it is a
//! dependency under another name (`crate_path.rs`).
//!
//! The expansion declares the bulkhead (the same typed `Declaration` the attribute emits,
//! gathered at link time, so the process-wide registry holds it from start-up) and a slot
//! that resolves to the registry's bulkhead; the expression is a
//! `bulkhead::tower::BulkheadLayer` over it.

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

use crate::config::{self, Kind};
use crate::ctxt::Ctxt;
use crate::declaration::declare_slot;
use crate::resolve::resolve;

/// The macro's input: the bulkhead's name, then optionally `partition = "…"` and
/// `crate = path`, each once, in any order.
struct Input {
    name: syn::LitStr,
    partition: Option<syn::LitStr>,
    krate: Option<syn::Path>,
}

impl syn::parse::Parse for Input {
    fn parse(input: syn::parse::ParseStream<'_>) -> syn::Result<Self> {
        let name = input.parse()?;
        let (mut partition, mut krate) = (None, None);
        while input.parse::<Option<syn::Token![,]>>()?.is_some() && !input.is_empty() {
            // `crate` is a keyword: read the option's name as any identifier.
            let key = <Ident as syn::ext::IdentExt>::parse_any(input)?;
            input.parse::<syn::Token![=]>()?;
            if key == "partition" && partition.is_none() {
                partition = Some(input.parse()?);
            } else if key == "crate" && krate.is_none() {
                krate = Some(crate::crate_path::parse_value(&input.parse()?)?);
            } else {
                return Err(syn::Error::new(key.span(), "expected `partition = \"…\"`"));
            }
        }
        Ok(Input {
            name,
            partition,
            krate,
        })
    }
}

pub(crate) fn layer(input: TokenStream, site: &str) -> TokenStream {
    let mut cx = Ctxt::default();
    let Input {
        name,
        partition,
        krate,
    } = match syn::parse2::<Input>(input.clone()) {
        Ok(parsed) => parsed,
        Err(_) => {
            cx.error_spanned(
                input,
                "`bulkhead::layer!` takes the name of a semaphore bulkhead declared in the \
                 crate's config, as a string, then optionally one of its partitions and the \
                 crate's path where it is a dependency under another name: \
                 `bulkhead::layer!(\"login\")`, `bulkhead::layer!(\"search\", partition = \"batch\")`, \
                 `my_bulkhead::layer!(\"login\", crate = ::my_bulkhead)`",
            );
            let errors = cx.to_compile_errors();
            return quote!({ #errors ::core::panic!("no bulkhead name") });
        }
    };
    let _facade = crate::crate_path::use_path(krate);
    let loaded = config::load();
    let Some((declared, location)) = resolve(&mut cx, &loaded, &name, site) else {
        // The errors, or none when an invalid config was reported at another use of it:
        // either way the build fails, and the expression still has a type.
        let errors = cx.to_compile_errors();
        return quote!({ #errors ::core::panic!("the bulkhead config is invalid") });
    };
    if declared.kind() != Kind::Semaphore {
        cx.error(
            name.span(),
            format!(
                "bulkhead `{}` is a thread pool, but a tower layer admits requests through a \
                 semaphore bulkhead (the request runs on the caller's task)\n\
                 help: name a bulkhead declared with `kind: semaphore`",
                name.value()
            ),
        );
        let errors = cx.to_compile_errors();
        return quote!({ #errors ::core::panic!("not a semaphore bulkhead") });
    }
    if let Some(lit) = &partition {
        let partitions = &declared.config.partitions;
        crate::shares::check_partition(&mut cx, lit, &name.value(), partitions, location);
        if cx.has_errors() {
            let errors = cx.to_compile_errors();
            return quote!({ #errors ::core::panic!("unknown partition") });
        }
    }
    let partition = partition.map(|lit| quote!(.partition(#lit)));
    let p = crate::crate_path::private(Span::call_site());
    let slot = Ident::new("__BULKHEAD", Span::mixed_site());
    let used_by = format!("layer!(\"{}\")", name.value());
    let declare = declare_slot(
        &name.value(),
        declared,
        location,
        &quote!(::core::concat!(::core::module_path!(), "::", #used_by)),
        &slot,
    );
    quote! {
        {
            #declare
            #p::layer(&#slot) #partition
        }
    }
}

//! `bulkhead::layer!("name")`: a tower layer for a semaphore bulkhead, its name checked
//! against the crate's config at compile time like the attribute's.
//!
//! The expansion declares the bulkhead (the same typed `Declaration` the attribute emits,
//! gathered at link time, so the process-wide registry holds it from start-up) and a slot
//! that resolves to the registry's bulkhead; the expression is a
//! `::bulkhead::tower::BulkheadLayer` over it.

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

use crate::config::{self, Kind};
use crate::ctxt::Ctxt;
use crate::declaration::declare_slot;
use crate::resolve::resolve;

pub(crate) fn layer(input: TokenStream, site: &str) -> TokenStream {
    let mut cx = Ctxt::default();
    let name = match syn::parse2::<syn::LitStr>(input.clone()) {
        Ok(name) => name,
        Err(_) => {
            cx.error_spanned(
                input,
                "`bulkhead::layer!` takes the name of a semaphore bulkhead declared in the \
                 crate's config, as a string: `bulkhead::layer!(\"login\")`",
            );
            let errors = cx.to_compile_errors();
            return quote!({ #errors ::core::panic!("no bulkhead name") });
        }
    };
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
            ::bulkhead::__private::layer(&#slot)
        }
    }
}

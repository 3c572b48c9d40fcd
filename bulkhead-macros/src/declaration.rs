//! The declaration and slot every expansion (the attribute's and `layer!`'s) emits: a
//! `static Declaration` gathered at link time, and a typed `static` slot that resolves once
//! to the process-wide registry's bulkhead of that name.
//!
//! Invariant: the emitted code names only the facade's `__private` (`crate_path.rs`) and `::core::…`, and
//! reads nothing at run time: the config is typed data (`emit_config.rs`); the YAML and
//! `Cargo.toml` are `include_*!`-ed into unused consts only so that editing them rebuilds.

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

use crate::config::{Declared, Kind, Location};
use crate::emit_config;

/// The `static` `Declaration` of one use of bulkhead `name` (gathered at link time), the
/// `static` slot `slot` of its kind that resolves to the registry's bulkhead, and the
/// `include_*!`s that rebuild the crate when the config or `Cargo.toml` changes (nothing
/// of them is read at run time: the declaration is typed data). `used_by` is an
/// expression naming the user (a function's path).
pub(crate) fn declare_slot(
    name: &str,
    declared: &Declared,
    location: &Location,
    used_by: &TokenStream,
    slot: &Ident,
) -> TokenStream {
    let p = crate::crate_path::private(Span::call_site());
    let (slot_ty, kind_variant) = match declared.kind() {
        Kind::ThreadPool => (quote!(#p::ThreadPoolSlot), quote!(ThreadPool)),
        Kind::Semaphore => (quote!(#p::SemaphoreSlot), quote!(Semaphore)),
        other => return emit_config::unknown(&other),
    };
    let declaration = Ident::new("__BULKHEAD_DECLARATION", Span::mixed_site());
    let config_path = location.path.display().to_string();
    let track_manifest = location.cargo_toml.as_ref().map(|toml| {
        let toml = toml.display().to_string();
        quote!(
            const _: &[u8] = ::core::include_bytes!(#toml);
        )
    });
    let config = emit_config::bulkhead_config(&declared.config);
    let relative_file = location.relative_path();
    let (line, column) = (
        u32::try_from(declared.line).unwrap_or(u32::MAX),
        u32::try_from(declared.column).unwrap_or(u32::MAX),
    );
    quote! {
        #p::declare! {
            static #declaration: #p::Declaration = #p::Declaration {
                name: #name,
                kind: #p::config_types::Kind::#kind_variant,
                config: {
                    fn __bulkhead_declared_config() -> #p::config_types::BulkheadConfig {
                        #config
                    }
                    __bulkhead_declared_config
                },
                declared_at: #p::DeclarationSite {
                    crate_name: ::core::env!("CARGO_PKG_NAME"),
                    file: #relative_file,
                    line: #line,
                    column: #column,
                },
                function: #p::AnnotatedFunction {
                    path: #used_by,
                    file: ::core::file!(),
                    line: ::core::line!(),
                },
            };
        }
        static #slot: #slot_ty = #slot_ty::new(&#declaration);
        const _: &str = ::core::include_str!(#config_path);
        #track_manifest
    }
}

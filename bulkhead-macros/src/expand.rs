//! What `#[bulkhead("name")]` turns a function into.
//!
//! The function keeps its attributes, docs, visibility and signature; its body is wrapped.
//! Every expansion declares one `static` `Declaration` (the bulkhead's resolved config as
//! Rust, see `emit_config.rs`, gathered at link time) and one `static` slot that resolves,
//! on the first call, to a `&'static` handle on the process-wide registry's bulkhead of
//! that name (the registry holds every declaration from its first use). After that the fast
//! path is one atomic load of the cached handle plus the core call. Expansions name only
//! `::bulkhead::__private::…`.
//!
//! | kind × call | the body runs | on refusal |
//! |---|---|---|
//! | semaphore, sync | in place, after `enter()` returned a permit (held to the end of the body) | `return` the refusal |
//! | semaphore, async | inside `async move {}` polled by `run_async(permit, …)` (re-entry marked per poll) | the refusal is the output |
//! | thread pool, sync | in a closure on a worker; `call(input, body)` blocks, so borrows are fine | `Refused { input, error }` |
//! | thread pool, async | in an `async move {}` future on a worker; must be `Send + 'static` | `Refused { input, error }` |
//!
//! The arguments travel to a thread-pool worker as the `input` tuple (`self` first, renamed
//! `__self` in the body because `self` cannot be a closure parameter), so a refused call
//! gets them back and can hand them to the fallback. The refusal is
//! `__private::refusal(error)` (needs the return type to be `Result<T, E>` with
//! `E: From<BulkheadError>`, checked by a trait with a readable `on_unimplemented`, spanned at
//! the return type) or `__private::fallback(path, (args…), error)` (checked by the `FallbackArgs`
//! trait, spanned at the fallback's path).

use std::path::Path;

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;

use crate::analysis;
use crate::args;
use crate::config::{self, Declared, Kind, Loaded, Location};
use crate::ctxt::Ctxt;
use crate::emit_config;

/// The whole attribute: parse, check, expand; on any error, the original item and the errors.
/// `site` names this use of the attribute (file, line and column).
pub(crate) fn bulkhead(
    attr: TokenStream,
    item: TokenStream,
    file: Option<&Path>,
    site: &str,
) -> TokenStream {
    let mut cx = Ctxt::default();
    let args = args::parse(&mut cx, attr);
    let func = match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            not_a_function(&mut cx, &item);
            let errors = cx.to_compile_errors();
            return quote!(#errors #item);
        }
    };
    check_shape(&mut cx, &func);

    let loaded = config::load();
    let mut resolved = None;
    if let Some(name) = &args.name {
        resolved = resolve(&mut cx, &loaded, name, site);
        let scope = analysis::scope(file, &func, &name.value());
        analysis::check_calls(&mut cx, &func, &name.value(), &scope);
        if let Some(path) = &args.fallback {
            check_fallback_arity(&mut cx, &func, path, &scope);
        }
    }
    if let Some((declared, _)) = &resolved
        && declared.kind() == Kind::ThreadPool
        && func.sig.asyncness.is_some()
    {
        check_owned_arguments(&mut cx, &func, args.name.as_ref());
    }
    if let (Some((declared, _)), Some(name)) = (&resolved, &args.name) {
        check_call_timeout(&mut cx, &func, name, declared, args.fallback.as_ref());
    }

    match (resolved, &args.name) {
        (Some((declared, location)), Some(name)) if !cx.has_errors() => {
            expand(&func, name, declared, args.fallback.as_ref(), location)
        }
        _ => {
            let errors = cx.to_compile_errors();
            quote!(#errors #func)
        }
    }
}

/// Looks the name up in the config; reports a missing or invalid config or an unknown name.
pub(crate) fn resolve<'a>(
    cx: &mut Ctxt,
    loaded: &'a Loaded,
    name: &syn::LitStr,
    site: &str,
) -> Option<(&'a Declared, &'a Location)> {
    match loaded {
        Loaded::Valid {
            location,
            bulkheads,
        } => {
            let wanted = name.value();
            if let Some(declared) = bulkheads.get(&wanted) {
                return Some((declared, location));
            }
            let file = location.path.display();
            let help = match crate::suggest::closest(&wanted, bulkheads.keys().map(String::as_str))
            {
                Some(close) => format!("did you mean `{close}`?"),
                None if bulkheads.is_empty() => {
                    "the file declares no bulkheads yet: add this one under `bulkheads:`"
                        .to_string()
                }
                None => format!(
                    "declare it under `bulkheads:` in that file, or use one it declares: {}",
                    bulkheads
                        .keys()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let message =
                format!("unknown bulkhead `{wanted}`: {file} does not declare it\nhelp: {help}");
            cx.error(name.span(), message);
            None
        }
        Loaded::Missing { location } => {
            cx.error(Span::call_site(), Loaded::missing_message(location));
            None
        }
        Loaded::Invalid {
            location,
            diagnostics,
            reported_at,
        } => {
            // One report for the file, at the first function that uses it (and again there
            // when that one is expanded again); the others are left as written.
            let mut first = reported_at.lock().unwrap_or_else(|p| p.into_inner());
            if first.get_or_insert_with(|| site.to_owned()) != site {
                return None;
            }
            cx.error(
                Span::call_site(),
                format!(
                    "the bulkhead config {} is invalid, so `#[bulkhead]` cannot check the \
                     functions that use it:\n{}",
                    location.path.display(),
                    diagnostics.trim_end()
                ),
            );
            None
        }
        Loaded::Failed { message } => {
            cx.error(Span::call_site(), message);
            None
        }
    }
}

/// A fallback the file shows with the wrong number of parameters is reported here, in the
/// user's terms, instead of as rustc's closure-arity error about the expansion's helpers.
fn check_fallback_arity(
    cx: &mut Ctxt,
    func: &syn::ItemFn,
    path: &syn::Path,
    scope: &analysis::Scope,
) {
    let Some(shape) = scope.fallback_shape(path) else {
        return;
    };
    let expected = func.sig.inputs.len() + 1;
    if shape.params == expected {
        return;
    }
    let arguments: Vec<String> = func
        .sig
        .inputs
        .iter()
        .map(|arg| match arg {
            syn::FnArg::Receiver(r) => r.to_token_stream().to_string(),
            syn::FnArg::Typed(t) => t.ty.to_token_stream().to_string(),
        })
        .collect();
    let shown = path.to_token_stream().to_string().replace(' ', "");
    let wanted = format!(
        "a fallback takes the arguments of `{}` ({}) and then the `BulkheadError` that refused the call",
        func.sig.ident,
        if arguments.is_empty() {
            "none".to_owned()
        } else {
            format!("`{}`", arguments.join("`, `"))
        }
    );
    let message = if shape.params + 1 == expected && !shape.ends_with_error {
        format!(
            "the fallback `{shown}` has no `BulkheadError` parameter: {wanted}\n\
             help: add a last parameter `error: bulkhead::BulkheadError` (or `_: bulkhead::BulkheadError`)"
        )
    } else {
        format!(
            "the fallback `{shown}` takes {} parameter(s) but must take {expected}: {wanted}",
            shape.params
        )
    };
    cx.error(path.span(), message);
}

fn not_a_function(cx: &mut Ctxt, item: &TokenStream) {
    const HELP: &str = "`#[bulkhead]` goes on a function with a body (`fn` or `async fn`, free or in an `impl` block)";
    if let Ok(method) = syn::parse2::<syn::TraitItemFn>(item.clone()) {
        cx.error_spanned(
            &method.sig,
            format!("{HELP}; this trait method has no body\nhelp: put the attribute on the method in the `impl` block"),
        );
        return;
    }
    let what = match syn::parse2::<syn::Item>(item.clone()) {
        Ok(item) => describe(&item),
        Err(_) => None,
    };
    let first = item.clone().into_iter().take(3).collect::<TokenStream>();
    match what {
        Some(what) => cx.error_spanned(first, format!("{HELP}, not on {what}")),
        None => cx.error_spanned(first, HELP),
    }
}

fn describe(item: &syn::Item) -> Option<&'static str> {
    Some(match item {
        syn::Item::Struct(_) => "a struct",
        syn::Item::Enum(_) => "an enum",
        syn::Item::Union(_) => "a union",
        syn::Item::Impl(_) => "an `impl` block (put it on the methods inside)",
        syn::Item::Trait(_) => "a trait",
        syn::Item::Mod(_) => "a module",
        syn::Item::Const(_) => "a constant",
        syn::Item::Static(_) => "a static",
        syn::Item::Type(_) => "a type alias",
        syn::Item::Use(_) => "a `use` declaration",
        syn::Item::Macro(_) => "a macro invocation",
        syn::Item::ExternCrate(_) => "an `extern crate`",
        syn::Item::ForeignMod(_) => "an `extern` block",
        _ => return None,
    })
}

fn check_shape(cx: &mut Ctxt, func: &syn::ItemFn) {
    let sig = &func.sig;
    if let Some(constness) = &sig.constness {
        cx.error(
            constness.span(),
            "`#[bulkhead]` cannot wrap a `const fn`: entering a bulkhead happens at run time",
        );
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned(variadic, "`#[bulkhead]` cannot wrap a variadic function");
    }
}

/// A declared call `timeout` is honoured by an `async fn` without a fallback only: a sync
/// caller cannot leave a body that borrows its arguments, and a fallback needs the
/// arguments a timed-out body has consumed. Anything else would silently not be timed.
fn check_call_timeout(
    cx: &mut Ctxt,
    func: &syn::ItemFn,
    name: &syn::LitStr,
    declared: &Declared,
    fallback: Option<&syn::Path>,
) {
    let Some(timeout) = declared.config.timeout else {
        return;
    };
    let bulkhead = name.value();
    if func.sig.asyncness.is_none() {
        cx.error_spanned(
            func.sig.fn_token,
            format!(
                "bulkhead `{bulkhead}` declares a call `timeout: {timeout}`, which `#[bulkhead]` \
                 applies to `async fn`s only: a sync caller cannot stop waiting for a body that \
                 may borrow its arguments\nhelp: make this an `async fn`, or declare the \
                 timeout on a bulkhead only async functions use"
            ),
        );
    } else if let Some(path) = fallback {
        cx.error_spanned(
            path,
            format!(
                "bulkhead `{bulkhead}` declares a call `timeout: {timeout}`, which `#[bulkhead]` \
                 cannot apply to a function with a fallback: a timed-out body has consumed the \
                 arguments the fallback would be called with\nhelp: remove the fallback and \
                 handle `BulkheadError::CallTimeout` from the return type, or use a bulkhead \
                 without `timeout`"
            ),
        );
    }
}

/// A thread-pool bulkhead runs an `async fn` to completion on a worker, so the future
/// (and so every argument) must be `'static`. Borrowed arguments are the common case and
/// get a precise message here; anything subtler is left to the `Send + 'static` bound.
fn check_owned_arguments(cx: &mut Ctxt, func: &syn::ItemFn, name: Option<&syn::LitStr>) {
    let bulkhead = name.map(syn::LitStr::value).unwrap_or_default();
    let help = "help: take owned arguments (`String`, `Vec<T>`, `Arc<T>`; `self: Arc<Self>` for methods), \
         or use a semaphore bulkhead, which runs the body on the caller's task".to_string();
    for input in &func.sig.inputs {
        match input {
            syn::FnArg::Receiver(receiver) if receiver.reference.is_some() => cx.error_spanned(
                receiver,
                format!(
                    "bulkhead `{bulkhead}` is a thread pool, so this `async fn` runs on one of its worker \
                     threads and its future must be `Send + 'static`, but `{}` borrows from the caller\n{help}",
                    receiver.to_token_stream().to_string().replace("& ", "&")
                ),
            ),
            syn::FnArg::Typed(arg) if borrows(&arg.ty) => cx.error_spanned(
                arg,
                format!(
                    "bulkhead `{bulkhead}` is a thread pool, so this `async fn` runs on one of its worker \
                     threads and its future must be `Send + 'static`, but argument `{}` borrows from the caller\n{help}",
                    arg.pat.to_token_stream()
                ),
            ),
            _ => {}
        }
    }
}

/// True when a type visibly borrows: a reference, or a lifetime other than `'static`.
fn borrows(ty: &syn::Type) -> bool {
    struct Borrows(bool);
    impl<'ast> Visit<'ast> for Borrows {
        fn visit_type_reference(&mut self, r: &'ast syn::TypeReference) {
            if r.lifetime.as_ref().is_none_or(|l| l.ident != "static") {
                self.0 = true;
            }
            syn::visit::visit_type_reference(self, r);
        }
        fn visit_lifetime(&mut self, l: &'ast syn::Lifetime) {
            if l.ident != "static" {
                self.0 = true;
            }
        }
    }
    let mut b = Borrows(false);
    b.visit_type(ty);
    b.0
}

/// True when a type mentions `impl Trait` (and so cannot be written in a `let`).
fn has_impl_trait(ty: &syn::Type) -> bool {
    struct Finder(bool);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut f = Finder(false);
    f.visit_type(ty);
    f.0
}

/// One argument of the wrapped function.
struct Argument {
    /// The name the wrapper's signature binds it to.
    outer: Ident,
    /// The pattern the user wrote, bound inside the body (`None` when it is `outer` itself).
    pattern: Option<syn::Pat>,
}

fn expand(
    func: &syn::ItemFn,
    name: &syn::LitStr,
    declared: &Declared,
    fallback: Option<&syn::Path>,
    location: &Location,
) -> TokenStream {
    let mut func = func.clone();
    let is_async = func.sig.asyncness.is_some();
    let thread_pool = declared.kind() == Kind::ThreadPool;
    // Arguments must be kept whole when they travel to a worker or to a fallback.
    let keep_whole = thread_pool || fallback.is_some();

    let mut arguments = Vec::new();
    let mut has_receiver = false;
    for (index, input) in func.sig.inputs.iter_mut().enumerate() {
        match input {
            syn::FnArg::Receiver(_) => has_receiver = true,
            syn::FnArg::Typed(arg) => {
                let simple = match &*arg.pat {
                    syn::Pat::Ident(p) => {
                        p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none()
                    }
                    _ => false,
                };
                if (simple || !keep_whole)
                    && let syn::Pat::Ident(p) = &*arg.pat
                {
                    arguments.push(Argument {
                        outer: p.ident.clone(),
                        pattern: None,
                    });
                    continue;
                }
                if !keep_whole {
                    continue;
                }
                let outer = format_ident!("__bulkhead_arg{}", index, span = Span::mixed_site());
                let pattern = std::mem::replace(
                    &mut *arg.pat,
                    syn::Pat::Ident(syn::PatIdent {
                        attrs: Vec::new(),
                        by_ref: None,
                        mutability: None,
                        ident: outer.clone(),
                        subpat: None,
                    }),
                );
                arguments.push(Argument {
                    outer,
                    pattern: Some(pattern),
                });
            }
        }
    }

    let output_ty: syn::Type = match &func.sig.output {
        syn::ReturnType::Default => syn::parse_quote!(()),
        syn::ReturnType::Type(_, ty) => (**ty).clone(),
    };
    let output_span = match &func.sig.output {
        syn::ReturnType::Default => func.sig.paren_token.span.close(),
        syn::ReturnType::Type(_, ty) => ty.span(),
    };
    let ret_annotation = if has_impl_trait(&output_ty) {
        quote!()
    } else {
        quote!(: #output_ty)
    };

    let p = quote!(::bulkhead::__private);
    let slot_ty = if thread_pool {
        quote!(#p::ThreadPoolSlot)
    } else {
        quote!(#p::SemaphoreSlot)
    };
    let slot = Ident::new("__BULKHEAD", Span::mixed_site());
    let function_name = func.sig.ident.to_string();
    let declare = declare_slot(
        &name.value(),
        declared,
        location,
        &quote!(::core::concat!(::core::module_path!(), "::", #function_name)),
        &slot,
    );

    // The expansion's own locals are hygienic (mixed-site): the body cannot see them, and
    // they cannot shadow the function's parameters (a parameter named `permit` stays the
    // caller's inside the body).
    let error = Ident::new("__bulkhead_error", Span::mixed_site());
    let permit = Ident::new("__bulkhead_permit", Span::mixed_site());
    let ret = Ident::new("__bulkhead_ret", Span::mixed_site());
    let refused = Ident::new("__bulkhead_refused", Span::mixed_site());
    let output = Ident::new("__bulkhead_output", Span::mixed_site());
    let values: Vec<TokenStream> = {
        let mut v = Vec::new();
        if has_receiver {
            v.push(quote!(self));
        }
        v.extend(arguments.iter().map(|a| a.outer.to_token_stream()));
        v
    };
    // The output type, when it can be written in a turbofish: naming it makes a fallback
    // returning another type fail on the fallback ("returns X, expected Y").
    let fallback_output = if has_impl_trait(&output_ty) {
        quote!(_)
    } else {
        output_ty.to_token_stream()
    };
    // The helpers' paths are spanned at the user's tokens (the fallback's path, the return
    // type), so a type error from their bounds is reported there.
    // An `async fn`'s fallback may be an `async fn` too: what it returns is awaited if it
    // is a future and used as is otherwise (chosen by method resolution, see
    // `__private::FallbackReturn`), so its return type is left to inference here.
    let call_fallback = |path: &syn::Path, args: &[TokenStream]| {
        if is_async {
            quote_spanned! {path.span()=>
                {
                    // One of the two is used, depending on what the fallback returns.
                    #[allow(unused_imports)]
                    use ::bulkhead::__private::{AwaitFallback as _, ReadyFallback as _};
                    let __bulkhead_fallback = (&mut ::bulkhead::__private::FallbackReturn::new(
                        ::bulkhead::__private::fallback::<_, _, _>(#path, (#(#args,)*), #error),
                    ))
                        .__bulkhead_fallback();
                    ::bulkhead::__private::fallback_output::<#fallback_output, _>(
                        __bulkhead_fallback.await,
                    )
                }
            }
        } else {
            quote_spanned! {path.span()=>
                ::bulkhead::__private::fallback::<_, _, #fallback_output>(#path, (#(#args,)*), #error)
            }
        }
    };
    let refusal = match fallback {
        Some(path) => call_fallback(path, &values),
        None => quote_spanned!(output_span=> ::bulkhead::__private::refusal(#error)),
    };
    let prologue: TokenStream = arguments
        .iter()
        .filter_map(|a| {
            let outer = &a.outer;
            a.pattern.as_ref().map(|pat| quote!(let #pat = #outer;))
        })
        .collect();

    let block = &func.block;
    let body: TokenStream = match (thread_pool, is_async) {
        (false, false) => quote! {
            #declare
            let #permit = match #slot_ty::enter(&#slot) {
                #p::Ok(#permit) => #permit,
                #p::Err(#error) => return #refusal,
            };
            #prologue
            // A body of one expression is the user's block as written: its braces are not
            // ours to lint (`unused_braces`), nor is code after a body that diverges.
            #[allow(unused_braces)]
            let #ret #ret_annotation = #block;
            #[allow(unreachable_code)]
            #ret
        },
        // Without a fallback, the body runs under the bulkhead's call timeout, reported
        // through the return type like a refusal. A fallback answers calls that never ran
        // with their arguments, which a timed-out body has already consumed: such a
        // function's body is not timed.
        (false, true) if fallback.is_none() => quote! {
            #declare
            match #slot_ty::enter_async(&#slot).await {
                #p::Ok(#permit) => match #slot_ty::run_timed(&#slot, #permit, async move {
                    #prologue
                    let #ret #ret_annotation = #block;
                    #[allow(unreachable_code)]
                    #ret
                }).await {
                    #p::Ok(#output) => #output,
                    #p::Err(#error) => #refusal,
                },
                #p::Err(#error) => #refusal,
            }
        },
        (false, true) => quote! {
            #declare
            match #slot_ty::enter_async(&#slot).await {
                #p::Ok(#permit) => #p::run_async(#permit, async move {
                    #prologue
                    #[allow(unused_braces)]
                    let #ret #ret_annotation = #block;
                    #[allow(unreachable_code)]
                    #ret
                }).await,
                #p::Err(#error) => #refusal,
            }
        },
        (true, _) => {
            let mut renamed = (**block).clone();
            if has_receiver {
                RenameSelf.visit_block_mut(&mut renamed);
            }
            let mut patterns = Vec::new();
            if has_receiver {
                patterns.push(Ident::new("__self", Span::call_site()).to_token_stream());
            }
            patterns.extend(arguments.iter().map(|a| match &a.pattern {
                Some(pat) => pat.to_token_stream(),
                None => a.outer.to_token_stream(),
            }));
            let on_refused = match fallback {
                Some(path) => {
                    // `self` cannot be bound by `let`: the receiver comes back as `__self`.
                    let returned: Vec<TokenStream> = values
                        .iter()
                        .map(|v| {
                            if v.to_string() == "self" {
                                quote!(__self)
                            } else {
                                v.clone()
                            }
                        })
                        .collect();
                    let refusal = call_fallback(path, &returned);
                    quote! {
                        let (#(#returned,)*) = #refused.input;
                        let #error = #refused.error;
                        #refusal
                    }
                }
                None => quote! {
                    let #error = #refused.error;
                    #refusal
                },
            };
            let call = if is_async {
                let async_token = func
                    .sig
                    .asyncness
                    .map(|a| a.span())
                    .unwrap_or_else(Span::call_site);
                let future = quote_spanned! {async_token=>
                    ::bulkhead::__private::thread_pool_future(async move {
                        #[allow(unused_braces)]
                        let #ret #ret_annotation = #renamed;
                        #[allow(unreachable_code)]
                        #ret
                    })
                };
                // The whole call is spanned at `async`: a future that is not `Send + 'static`
                // is reported at the function's `async` keyword.
                if fallback.is_none() {
                    quote_spanned! {async_token=>
                        ::bulkhead::__private::ThreadPoolSlot::call_async_timed(&#slot, (#(#values,)*), move |(#(#patterns,)*)| #future).await
                    }
                } else {
                    quote_spanned! {async_token=>
                        ::bulkhead::__private::ThreadPoolSlot::call_async(&#slot, (#(#values,)*), move |(#(#patterns,)*)| #future).await
                    }
                }
            } else {
                quote! {
                    #slot_ty::call(&#slot, (#(#values,)*), move |(#(#patterns,)*)| {
                        #[allow(unused_braces)]
                        let #ret #ret_annotation = #renamed;
                        #[allow(unreachable_code)]
                        #ret
                    })
                }
            };
            // A timed call (an `async fn` without a fallback) may also time out once
            // admitted: `Ok(Err(error))`, reported through the return type.
            let timed_out = if is_async && fallback.is_none() {
                quote!(#p::Ok(#p::Err(#error)) => #refusal,)
            } else {
                quote!()
            };
            let ok = if is_async && fallback.is_none() {
                quote!(#p::Ok(#p::Ok(#output)))
            } else {
                quote!(#p::Ok(#output))
            };
            quote! {
                #declare
                match #call {
                    #ok => #output,
                    #timed_out
                    #p::Err(#refused) => { #on_refused }
                }
            }
        }
    };

    let attrs = &func.attrs;
    let vis = &func.vis;
    let sig = &func.sig;
    quote! {
        #(#attrs)*
        #vis #sig {
            #body
        }
    }
}

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
    let p = quote!(::bulkhead::__private);
    let (slot_ty, kind_variant) = match declared.kind() {
        Kind::ThreadPool => (quote!(#p::ThreadPoolSlot), quote!(ThreadPool)),
        Kind::Semaphore => (quote!(#p::SemaphoreSlot), quote!(Semaphore)),
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

/// Renames `self` to `__self` in a body that moves into a thread-pool closure, leaving
/// nested items (which have their own `self`) and `self::path`s alone.
struct RenameSelf;

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

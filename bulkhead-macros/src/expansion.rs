//! What `#[bulkhead("name")]` turns a function into: the `Expansion` of one checked
//! function, with one method per row of the table below (and of ARCHITECTURE.md's
//! "Macro expansion").
//!
//! The function keeps its attributes, docs, visibility and signature; its body is wrapped.
//! Every expansion declares one `static` `Declaration` and one `static` slot
//! (`declaration.rs`); after the first call the fast path is one atomic load of the cached
//! handle plus the core call. Expansions name the facade only through `crate_path::private`.
//!
//! | kind × call | method | the body runs | on refusal |
//! |---|---|---|---|
//! | semaphore, sync | `semaphore_fn` | in place, after `enter()` returned a permit (held to the end of the body) | `return` the refusal |
//! | semaphore, async | `semaphore_async_fn` | inside `async move {}`, polled by `SemaphoreSlot::call_async` under its permit (with a fallback: `run_async(permit, …)`; re-entry marked per poll) | the refusal is the output |
//! | thread pool, sync | `thread_pool_fn` | in a closure on a worker; `call(input, body)` blocks, so borrows are fine | `Refused { input, error }` |
//! | thread pool, async | `thread_pool_async_fn` | in an `async move {}` future on a worker; must be `Send + 'static` | `Refused { input, error }` |
//! | refusal | `refusal` | — | `__private::refusal(error)` or the fallback |
//!
//! The arguments travel to a thread-pool worker as the `input` tuple (`self` first, renamed
//! `__self` in the body because `self` cannot be a closure parameter), so a refused call
//! gets them back and can hand them to the fallback. The refusal is
//! `__private::refusal(error)` (needs the return type to be `Result<T, E>` with
//! `E: From<BulkheadError>`, checked by a trait with a readable `on_unimplemented`, spanned at
//! the return type) or `__private::fallback(path, (args…), error)` (checked by the `FallbackArgs`
//! trait, spanned at the fallback's path).
//!
//! Invariants: the expansion's own locals are hygienic (mixed-site), so the body cannot see
//! them and they cannot shadow the function's parameters; an `async fn` without a fallback
//! is timed by the bulkhead's call `timeout`, nothing else is.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;

use crate::config::{Declared, Kind, Location};
use crate::declaration::declare_slot;
use crate::rename_self::RenameSelf;

/// One argument of the wrapped function.
struct Argument {
    /// The name the wrapper's signature binds it to.
    outer: Ident,
    /// The pattern the user wrote, bound inside the body (`None` when it is `outer` itself).
    pattern: Option<syn::Pat>,
}

/// One checked function and everything its expansion is built from.
pub(crate) struct Expansion<'a> {
    /// The function, its patterned arguments replaced by plain names.
    func: syn::ItemFn,
    kind: Kind,
    fallback: Option<&'a syn::Path>,
    is_async: bool,
    has_receiver: bool,
    arguments: Vec<Argument>,
    /// The arguments as passed on: `self` first, then each argument's outer name.
    values: Vec<TokenStream>,
    output_ty: syn::Type,
    /// Where a refusal without a fallback is reported: the return type.
    output_span: Span,
    /// The declaration and slot (`declaration.rs`).
    declare: TokenStream,
    slot: Ident,
    error: Ident,
    permit: Ident,
    ret: Ident,
    refused: Ident,
    output: Ident,
    /// `partition = …` / `key = …`, or a partitioned bulkhead: enter through its shares.
    shares: Option<&'a crate::shares::Shares>,
}

impl<'a> Expansion<'a> {
    /// Rewrites the signature's patterned arguments where they must be kept whole (they
    /// travel to a worker or to a fallback) and gathers what every row needs.
    pub(crate) fn new(
        func: &syn::ItemFn,
        name: &syn::LitStr,
        declared: &Declared,
        fallback: Option<&'a syn::Path>,
        location: &Location,
    ) -> Self {
        let mut func = func.clone();
        let kind = declared.kind();
        let keep_whole = kind == Kind::ThreadPool || fallback.is_some();
        let (arguments, has_receiver) = split_arguments(&mut func.sig, keep_whole);

        let output_ty: syn::Type = match &func.sig.output {
            syn::ReturnType::Default => syn::parse_quote!(()),
            syn::ReturnType::Type(_, ty) => (**ty).clone(),
        };
        let output_span = match &func.sig.output {
            syn::ReturnType::Default => func.sig.paren_token.span.close(),
            syn::ReturnType::Type(_, ty) => ty.span(),
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
        let mut values = Vec::new();
        if has_receiver {
            values.push(quote!(self));
        }
        values.extend(arguments.iter().map(|a| a.outer.to_token_stream()));
        Expansion {
            is_async: func.sig.asyncness.is_some(),
            func,
            kind,
            fallback,
            has_receiver,
            arguments,
            values,
            output_ty,
            output_span,
            declare,
            slot,
            error: Ident::new("__bulkhead_error", Span::mixed_site()),
            permit: Ident::new("__bulkhead_permit", Span::mixed_site()),
            ret: Ident::new("__bulkhead_ret", Span::mixed_site()),
            refused: Ident::new("__bulkhead_refused", Span::mixed_site()),
            output: Ident::new("__bulkhead_output", Span::mixed_site()),
            shares: None,
        }
    }

    /// Enters through the bulkhead's partitions and per-key caps (`shares.rs`).
    pub(crate) fn with_shares(mut self, shares: Option<&'a crate::shares::Shares>) -> Self {
        self.shares = shares;
        self
    }

    /// The semaphore paths, given how the call enters (plainly, or through the bulkhead's
    /// shares): enter (sync, async); the async body (`body`) under a permit and the call
    /// timeout; the async body under a permit taken by `enter_async`, untimed.
    fn semaphore_paths(&self, body: &TokenStream) -> [TokenStream; 4] {
        let (p, slot) = (private(), &self.slot);
        let entry = crate::shares::entry(self.shares, Span::call_site());
        [
            quote!(#p::SemaphoreSlot::enter(&#slot, #entry)),
            quote!(#p::SemaphoreSlot::enter_async(&#slot, #entry)),
            quote!(#p::SemaphoreSlot::call_async(&#slot, #entry, #body)),
            quote!(#p::run_async),
        ]
    }

    /// The function with its body wrapped by the row of its kind and asyncness.
    pub(crate) fn into_tokens(self) -> TokenStream {
        let body = match (self.kind, self.is_async) {
            (Kind::Semaphore, false) => self.semaphore_fn(),
            (Kind::Semaphore, true) => self.semaphore_async_fn(),
            (Kind::ThreadPool, false) => self.thread_pool_fn(),
            (Kind::ThreadPool, true) => self.thread_pool_async_fn(),
            (other, _) => crate::emit_config::unknown(&other),
        };
        let attrs = &self.func.attrs;
        let vis = &self.func.vis;
        let sig = &self.func.sig;
        quote! {
            #(#attrs)*
            #vis #sig {
                #body
            }
        }
    }

    /// Semaphore, sync: take a permit (held to the end of the body), run the body in place;
    /// a refusal `return`s.
    fn semaphore_fn(&self) -> TokenStream {
        let (p, declare, permit, error) = (private(), &self.declare, &self.permit, &self.error);
        let refusal = self.refusal(&self.values);
        let prologue = self.prologue();
        // A body of one expression is the user's block as written: its braces are not
        // ours to lint (`unused_braces`), nor is code after a body that diverges.
        let value = self.value_of(&self.func.block.to_token_stream());
        let [enter, ..] = self.semaphore_paths(&TokenStream::new());
        quote! {
            #declare
            let #permit = match #enter {
                #p::Ok(#permit) => #permit,
                #p::Err(#error) => return #refusal,
            };
            #prologue
            #value
        }
    }

    /// Semaphore, async: await a permit, then the body in `async move {}` polled with the
    /// bulkhead marked entered. Without a fallback the body runs under the bulkhead's call
    /// timeout, reported through the return type like a refusal. A fallback answers calls
    /// that never ran with their arguments, which a timed-out body has already consumed:
    /// such a function's body is not timed.
    fn semaphore_async_fn(&self) -> TokenStream {
        let (p, declare, permit, error, output) = (
            private(),
            &self.declare,
            &self.permit,
            &self.error,
            &self.output,
        );
        let refusal = self.refusal(&self.values);
        let prologue = self.prologue();
        let value = self.value_of(&self.func.block.to_token_stream());
        let body = quote!(async move {
            #prologue
            #value
        });
        let [_, enter_async, call, run_async] = self.semaphore_paths(&body);
        if self.fallback.is_none() {
            // One future holds the body and, once admitted, its permit: nothing is moved
            // between taking the permit and polling the body.
            return quote! {
                #declare
                match #call.await {
                    #p::Ok(#output) => #output,
                    #p::Err(#error) => #refusal,
                }
            };
        }
        quote! {
            #declare
            match #enter_async.await {
                #p::Ok(#permit) => #run_async(#permit, #body).await,
                #p::Err(#error) => #refusal,
            }
        }
    }

    /// Thread pool, sync: the body in a closure on a worker, the arguments as its input;
    /// the caller blocks, so borrows are fine.
    fn thread_pool_fn(&self) -> TokenStream {
        let (slot, values) = (&self.slot, &self.values);
        let patterns = self.worker_patterns();
        let value = self.value_of(&self.worker_body());
        let (call, lead) = crate::shares::pool_call(self.shares, slot, "call", Span::call_site());
        let call = quote! {
            #call(#lead (#(#values,)*), move |(#(#patterns,)*)| {
                #value
            })
        };
        self.match_pool_call(call, false)
    }

    /// Thread pool, async: the body as a `Send + 'static` future run to completion on a
    /// worker. The whole call is spanned at `async`: a future that is not `Send + 'static`
    /// is reported at the function's `async` keyword. Without a fallback it is timed.
    fn thread_pool_async_fn(&self) -> TokenStream {
        let (slot, values) = (&self.slot, &self.values);
        let patterns = self.worker_patterns();
        let value = self.value_of(&self.worker_body());
        let async_token = self
            .func
            .sig
            .asyncness
            .map(|a| a.span())
            .unwrap_or_else(Span::call_site);
        let p = crate::crate_path::private(async_token);
        let future = quote_spanned! {async_token=>
            #p::thread_pool_future(async move {
                #value
            })
        };
        let timed = self.fallback.is_none();
        let name = if timed {
            "call_async_timed"
        } else {
            "call_async"
        };
        let (call, lead) = crate::shares::pool_call(self.shares, slot, name, async_token);
        let call = quote_spanned! {async_token=>
            #call(#lead (#(#values,)*), move |(#(#patterns,)*)| #future).await
        };
        self.match_pool_call(call, timed)
    }

    /// Refusal: `__private::refusal(error)` spanned at the return type, or the fallback
    /// called with `args` and the error, spanned at the fallback's path.
    fn refusal(&self, args: &[TokenStream]) -> TokenStream {
        let error = &self.error;
        let Some(path) = self.fallback else {
            let p = crate::crate_path::private(self.output_span);
            return quote_spanned!(self.output_span=> #p::refusal(#error));
        };
        // The output type, when it can be written in a turbofish: naming it makes a fallback
        // returning another type fail on the fallback ("returns X, expected Y").
        let fallback_output = if has_impl_trait(&self.output_ty) {
            quote!(_)
        } else {
            self.output_ty.to_token_stream()
        };
        let p = crate::crate_path::private(path.span());
        if self.is_async {
            // An `async fn`'s fallback may be an `async fn` too: what it returns is awaited
            // if it is a future and used as is otherwise (chosen by method resolution, see
            // `__private::FallbackReturn`), so its return type is left to inference here.
            quote_spanned! {path.span()=>
                {
                    // One of the two is used, depending on what the fallback returns.
                    #[allow(unused_imports)]
                    use #p::{AwaitFallback as _, ReadyFallback as _};
                    let __bulkhead_fallback = (&mut #p::FallbackReturn::new(
                        #p::fallback::<_, _, _>(#path, (#(#args,)*), #error),
                    ))
                        .__bulkhead_fallback();
                    #p::fallback_output::<#fallback_output, _>(
                        __bulkhead_fallback.await,
                    )
                }
            }
        } else {
            quote_spanned! {path.span()=>
                #p::fallback::<_, _, #fallback_output>(#path, (#(#args,)*), #error)
            }
        }
    }

    /// The outcome of a thread-pool call: its output, a call timeout (`timed` only:
    /// `Ok(Err(error))`) or a refusal that hands the input back.
    fn match_pool_call(&self, call: TokenStream, timed: bool) -> TokenStream {
        let (p, declare, error, refused, output) = (
            private(),
            &self.declare,
            &self.error,
            &self.refused,
            &self.output,
        );
        let on_refused = match self.fallback {
            Some(_) => {
                // `self` cannot be bound by `let`: the receiver comes back as `__self`.
                let returned: Vec<TokenStream> = self
                    .values
                    .iter()
                    .map(|v| {
                        if v.to_string() == "self" {
                            quote!(__self)
                        } else {
                            v.clone()
                        }
                    })
                    .collect();
                let refusal = self.refusal(&returned);
                quote! {
                    let (#(#returned,)*) = #refused.input;
                    let #error = #refused.error;
                    #refusal
                }
            }
            None => {
                let refusal = self.refusal(&self.values);
                quote! {
                    let #error = #refused.error;
                    #refusal
                }
            }
        };
        let (ok, timed_out) = if timed {
            let refusal = self.refusal(&self.values);
            (
                quote!(#p::Ok(#p::Ok(#output))),
                quote!(#p::Ok(#p::Err(#error)) => #refusal,),
            )
        } else {
            (quote!(#p::Ok(#output)), quote!())
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

    /// `let ret: Output = body; ret`: the body's value typed as the function's output (left
    /// to inference when the output mentions `impl Trait`).
    fn value_of(&self, body: &TokenStream) -> TokenStream {
        let ret = &self.ret;
        let annotation = if has_impl_trait(&self.output_ty) {
            quote!()
        } else {
            let ty = &self.output_ty;
            quote!(: #ty)
        };
        quote! {
            #[allow(unused_braces)]
            let #ret #annotation = #body;
            #[allow(unreachable_code)]
            #ret
        }
    }

    /// The user's patterns, bound from the plain names inside the body.
    fn prologue(&self) -> TokenStream {
        self.arguments
            .iter()
            .filter_map(|a| {
                let outer = &a.outer;
                a.pattern.as_ref().map(|pat| quote!(let #pat = #outer;))
            })
            .collect()
    }

    /// The body as it runs on a worker: `self` renamed `__self`, the key's parameters used.
    fn worker_body(&self) -> TokenStream {
        let mut renamed = (*self.func.block).clone();
        if self.has_receiver {
            RenameSelf.visit_block_mut(&mut renamed);
        }
        let names = self.arguments.iter().filter(|a| a.pattern.is_none());
        crate::shares::key_uses(self.shares, names.map(|a| &a.outer), &renamed)
    }

    /// The worker closure's parameter patterns: `__self`, then the user's patterns.
    fn worker_patterns(&self) -> Vec<TokenStream> {
        let mut patterns = Vec::new();
        if self.has_receiver {
            patterns.push(Ident::new("__self", Span::call_site()).to_token_stream());
        }
        patterns.extend(self.arguments.iter().map(|a| match &a.pattern {
            Some(pat) => pat.to_token_stream(),
            None => a.outer.to_token_stream(),
        }));
        patterns
    }
}

fn private() -> TokenStream {
    crate::crate_path::private(Span::call_site())
}

/// The function's arguments, and whether it has a receiver. Where arguments must be kept
/// whole, a pattern other than a plain name is replaced in the signature by a hygienic
/// name and bound again inside the body.
fn split_arguments(sig: &mut syn::Signature, keep_whole: bool) -> (Vec<Argument>, bool) {
    let mut arguments = Vec::new();
    let mut has_receiver = false;
    for (index, input) in sig.inputs.iter_mut().enumerate() {
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
    (arguments, has_receiver)
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

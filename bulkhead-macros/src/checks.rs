//! The checks `#[bulkhead]` makes on the function it wraps, each reported at the user's own
//! tokens in the user's terms (never as an error about the expansion's helpers).
//!
//! Invariant: a check only records errors in the `Ctxt`; it never rewrites the function, so
//! on any error the attribute emits the function unchanged and the build shows every
//! mistake at once.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::config::Declared;
use crate::ctxt::Ctxt;
use crate::siblings;

/// A fallback the file shows with the wrong number of parameters is reported here, in the
/// user's terms, instead of as rustc's closure-arity error about the expansion's helpers.
pub(crate) fn fallback_arity(
    cx: &mut Ctxt,
    func: &syn::ItemFn,
    path: &syn::Path,
    scope: &siblings::Scope,
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

pub(crate) fn not_a_function(cx: &mut Ctxt, item: &TokenStream) {
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

pub(crate) fn shape(cx: &mut Ctxt, func: &syn::ItemFn) {
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
    if let syn::ReturnType::Type(_, output) = &sig.output
        && sig.asyncness.is_none()
        && names_a_future(output)
    {
        cx.error_spanned(
            output,
            "`#[bulkhead]` on a `fn` that returns a future would guard only the making of the \
             future: its permit is given back before the future runs, so the calls would run \
             unlimited\nhelp: write it as an `async fn` (its body then runs inside the \
             bulkhead, however long it awaits)",
        );
    }
}

/// Whether `ty` names a future: `impl Future<…>`, `dyn Future<…>` (boxed, pinned) or the
/// `BoxFuture` aliases, anywhere in it.
fn names_a_future(ty: &syn::Type) -> bool {
    fn future(tokens: proc_macro2::TokenStream) -> bool {
        tokens.into_iter().any(|token| match token {
            proc_macro2::TokenTree::Ident(ident) => {
                ident == "Future" || ident == "BoxFuture" || ident == "LocalBoxFuture"
            }
            proc_macro2::TokenTree::Group(group) => future(group.stream()),
            _ => false,
        })
    }
    future(quote::ToTokens::to_token_stream(ty))
}

/// A declared call `timeout` is honoured by an `async fn` without a fallback only: a sync
/// caller cannot leave a body that borrows its arguments, and a fallback needs the
/// arguments a timed-out body has consumed. Anything else would silently not be timed.
pub(crate) fn call_timeout(
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
pub(crate) fn owned_arguments(cx: &mut Ctxt, func: &syn::ItemFn, name: Option<&syn::LitStr>) {
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

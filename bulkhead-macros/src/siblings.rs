//! What the compiler can see of re-entry: an annotated function that calls itself, or calls
//! another function in the same `impl` block or module annotated with the same bulkhead.
//!
//! Such a call would ask for a second place (permit or worker thread) in a bulkhead while
//! holding one — the nested-pool deadlock. The runtime survives it (re-entry runs
//! inline), but when the compiler can see it we reject it, because it is almost always a
//! mistake and the fix is simple: put the shared work in a plain function.
//!
//! Sibling functions are found by reading the attribute's own source file
//! (`proc_macro::Span::local_file`) and parsing it with syn. Only plain data (names, rendered
//! signatures) is kept, cached per file and modification time, so each file is parsed once
//! per compiler process. A file that cannot be read or parsed, or a function that cannot be
//! located in it unambiguously, disables the sibling check (never a false error); self-calls
//! are still found from the function's own tokens. What escapes this analysis (calls across
//! modules or crates, through closures stored elsewhere, trait objects) is caught at run
//! time by the core's re-entry detection.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::visit::Visit;

use crate::ctxt::Ctxt;

/// A function found in the source file.
#[derive(Debug)]
struct FnInfo {
    name: String,
    /// The bulkhead named by its `#[bulkhead("…")]`, if it has one.
    bulkhead: Option<String>,
    /// Its signature, rendered, to tell apart functions of the same name.
    signature: String,
    /// How many parameters it takes (a receiver included), and whether the last one's type
    /// is named `BulkheadError`.
    params: usize,
    ends_with_error: bool,
}

/// What the file shows of a function named as a fallback.
pub(crate) struct FallbackShape {
    /// Parameters, a receiver included.
    pub params: usize,
    /// The last parameter's type is named `BulkheadError`.
    pub ends_with_error: bool,
}

/// A scope whose functions can call each other by short paths: a module (or the file) or an
/// `impl`/`trait` block.
#[derive(Debug)]
struct Container {
    /// `Some(type's last ident)` for an `impl` block, `Some("")` for a trait, `None` for a module.
    self_ty: Option<String>,
    fns: Vec<FnInfo>,
}

type FileCache = HashMap<PathBuf, (Option<SystemTime>, Arc<Vec<Container>>)>;

static FILES: Mutex<Option<FileCache>> = Mutex::new(None);

/// Where an annotated function sits, as far as the analysis could tell.
pub(crate) struct Scope {
    /// In an `impl` or `trait` block (else a module), if known.
    in_impl: Option<bool>,
    /// The `impl` block's type name, to recognise `Type::sibling(..)`.
    self_ty: Option<String>,
    /// Other functions in the same container annotated with the same bulkhead.
    same_bulkhead: Vec<String>,
    /// Every function of the same container, by name (`None` when a name is used twice).
    shapes: HashMap<String, Option<(usize, bool)>>,
}

impl Scope {
    /// The shape of the fallback `path` names, when it is a function of the same module
    /// (`name`) or `impl` block (`Self::name`) and the file shows it unambiguously.
    pub(crate) fn fallback_shape(&self, path: &syn::Path) -> Option<FallbackShape> {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let name = match (segments.as_slice(), self.in_impl) {
            ([name], Some(false)) => name,
            ([me, name], Some(true)) if me == "Self" => name,
            _ => return None,
        };
        let (params, ends_with_error) = (*self.shapes.get(name)?)?;
        Some(FallbackShape {
            params,
            ends_with_error,
        })
    }
}

/// Finds the container of `func` in `file` and the siblings that share `bulkhead`.
pub(crate) fn scope(file: Option<&Path>, func: &syn::ItemFn, bulkhead: &str) -> Scope {
    let unknown = Scope {
        in_impl: None,
        self_ty: None,
        same_bulkhead: Vec::new(),
        shapes: HashMap::new(),
    };
    let Some(containers) = file.and_then(file_summary) else {
        return unknown;
    };
    let name = func.sig.ident.to_string();
    let signature = func.sig.to_token_stream().to_string();
    let holds = |c: &&Container, exact: bool| {
        c.fns.iter().any(|f| {
            f.name == name
                && f.bulkhead.as_deref() == Some(bulkhead)
                && (!exact || f.signature == signature)
        })
    };
    let mut found: Vec<&Container> = containers.iter().filter(|c| holds(c, false)).collect();
    if found.len() > 1 {
        found.retain(|c| holds(c, true));
    }
    let [container] = found.as_slice() else {
        return unknown;
    };
    Scope {
        in_impl: Some(container.self_ty.is_some()),
        self_ty: container.self_ty.clone().filter(|s| !s.is_empty()),
        same_bulkhead: container
            .fns
            .iter()
            .filter(|f| f.name != name && f.bulkhead.as_deref() == Some(bulkhead))
            .map(|f| f.name.clone())
            .collect(),
        shapes: {
            let mut shapes = HashMap::new();
            for f in &container.fns {
                shapes
                    .entry(f.name.clone())
                    .and_modify(|shape| *shape = None)
                    .or_insert(Some((f.params, f.ends_with_error)));
            }
            shapes
        },
    }
}

fn file_summary(path: &Path) -> Option<Arc<Vec<Container>>> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let mut guard = FILES.lock().unwrap_or_else(|p| p.into_inner());
    let cache = guard.get_or_insert_with(HashMap::new);
    if let Some((stamp, summary)) = cache.get(path)
        && *stamp == modified
        && modified.is_some()
    {
        return Some(Arc::clone(summary));
    }
    let source = std::fs::read_to_string(path).ok()?;
    let file = syn::parse_file(&source).ok()?;
    let mut containers = Vec::new();
    collect(&file.items, &mut containers);
    let summary = Arc::new(containers);
    cache.insert(path.to_path_buf(), (modified, Arc::clone(&summary)));
    Some(summary)
}

fn collect(items: &[syn::Item], out: &mut Vec<Container>) {
    let mut module = Container {
        self_ty: None,
        fns: Vec::new(),
    };
    for item in items {
        match item {
            syn::Item::Fn(f) => module.fns.push(fn_info(&f.attrs, &f.sig)),
            syn::Item::Impl(i) => {
                let self_ty = match &*i.self_ty {
                    syn::Type::Path(p) => p
                        .path
                        .segments
                        .last()
                        .map(|s| s.ident.to_string())
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                let fns = i
                    .items
                    .iter()
                    .filter_map(|it| match it {
                        syn::ImplItem::Fn(f) => Some(fn_info(&f.attrs, &f.sig)),
                        _ => None,
                    })
                    .collect();
                out.push(Container {
                    self_ty: Some(self_ty),
                    fns,
                });
            }
            syn::Item::Trait(t) => {
                let fns = t
                    .items
                    .iter()
                    .filter_map(|it| match it {
                        syn::TraitItem::Fn(f) => Some(fn_info(&f.attrs, &f.sig)),
                        _ => None,
                    })
                    .collect();
                out.push(Container {
                    self_ty: Some(String::new()),
                    fns,
                });
            }
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    collect(items, out);
                }
            }
            _ => {}
        }
    }
    out.push(module);
}

fn fn_info(attrs: &[syn::Attribute], sig: &syn::Signature) -> FnInfo {
    let bulkhead = attrs.iter().find_map(|attr| {
        let last = attr.path().segments.last()?;
        if last.ident != "bulkhead" {
            return None;
        }
        let list = attr.meta.require_list().ok()?;
        let first = list.tokens.clone().into_iter().next()?;
        syn::parse2::<syn::LitStr>(first.into_token_stream())
            .ok()
            .map(|l| l.value())
    });
    let ends_with_error = match sig.inputs.last() {
        Some(syn::FnArg::Typed(arg)) => match &*arg.ty {
            syn::Type::Path(p) => p
                .path
                .segments
                .last()
                .is_some_and(|s| s.ident == "BulkheadError"),
            _ => false,
        },
        _ => false,
    };
    FnInfo {
        name: sig.ident.to_string(),
        bulkhead,
        signature: sig.to_token_stream().to_string(),
        params: sig.inputs.len(),
        ends_with_error,
    }
}

/// Reports calls in `func`'s body to itself or to a sibling in the same bulkhead.
pub(crate) fn check_calls(cx: &mut Ctxt, func: &syn::ItemFn, bulkhead: &str, scope: &Scope) {
    let me = func.sig.ident.to_string();
    let is_method = matches!(func.sig.inputs.first(), Some(syn::FnArg::Receiver(_)));
    // Without the file, a function with a receiver is surely in an impl; one without may be
    // either, and both call forms are checked for it.
    let in_impl = scope.in_impl.or(if is_method { Some(true) } else { None });
    let mut finder = CallFinder {
        in_impl,
        self_ty: scope.self_ty.as_deref(),
        calls: Vec::new(),
    };
    finder.visit_block(&func.block);
    for (callee, tokens) in finder.calls {
        if callee == me {
            cx.error_spanned(
                tokens,
                format!(
                    "`{me}` calls itself, but every call to `{me}` enters bulkhead `{bulkhead}`: \
                     each level of recursion would hold a place in `{bulkhead}` (a permit or a \
                     worker thread) while it waits for another, the nested-bulkhead deadlock\n\
                     help: move the recursion into a function without `#[bulkhead]` and keep \
                     `#[bulkhead(\"{bulkhead}\")]` on the entry point only"
                ),
            );
        } else if scope.same_bulkhead.contains(&callee) {
            cx.error_spanned(
                tokens,
                format!(
                    "`{me}` calls `{callee}`, and both are in bulkhead `{bulkhead}`: `{me}` holds \
                     a place in `{bulkhead}` (a permit or a worker thread) while `{callee}` waits \
                     for another, so once `{bulkhead}` is full every caller waits on itself, the \
                     nested-bulkhead deadlock\n\
                     help: move the shared work into a function without `#[bulkhead]` and call \
                     that, or give `{callee}` a bulkhead of its own"
                ),
            );
        }
    }
}

/// Collects calls that may name a function of the same container: `f(..)`, `self::f(..)`,
/// `Self::f(..)`, `Type::f(..)`, `self.f(..)`.
struct CallFinder<'a> {
    in_impl: Option<bool>,
    self_ty: Option<&'a str>,
    calls: Vec<(String, TokenStream)>,
}

impl CallFinder<'_> {
    fn path_callee(&self, path: &syn::Path) -> Option<String> {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let module = self.in_impl != Some(true);
        let imp = self.in_impl != Some(false);
        match segments.as_slice() {
            [f] if module && path.leading_colon.is_none() => Some(f.clone()),
            [m, f] if module && m == "self" => Some(f.clone()),
            [t, f] if imp && (t == "Self" || Some(t.as_str()) == self.self_ty) => Some(f.clone()),
            _ => None,
        }
    }
}

impl<'ast> Visit<'ast> for CallFinder<'_> {
    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        if let syn::Expr::Path(p) = &*call.func
            && p.qself.is_none()
            && let Some(callee) = self.path_callee(&p.path)
        {
            self.calls.push((callee, p.to_token_stream()));
        }
        syn::visit::visit_expr_call(self, call);
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        let on_self = matches!(&*call.receiver, syn::Expr::Path(p) if p.path.is_ident("self"));
        if on_self && self.in_impl != Some(false) {
            self.calls
                .push((call.method.to_string(), call.method.to_token_stream()));
        }
        syn::visit::visit_expr_method_call(self, call);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // Most macros that take expressions (`format!`, `assert!`, `vec!`…) take them
        // comma-separated; look inside those, ignore the rest.
        let parser = Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
        if let Ok(exprs) = mac.parse_body_with(parser) {
            for expr in &exprs {
                self.visit_expr(expr);
            }
        }
    }

    // A nested item is not part of this call; its calls are its own.
    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

//! How a refused call reaches its caller in the code `#[bulkhead]` generates: the error
//! through the return type ([`refusal`]), or a fallback called with the call's arguments
//! ([`fallback`]; for an `async fn`, awaited when it returns a future). Part of
//! `__private`: not a public API. Each trait carries the compile error that names what the
//! attribute needs, spanned at the user's own tokens.

use std::future::Future;

use bulkhead_core::BulkheadError;

/// The value a refused call returns when the function has no fallback.
///
/// Spanned at the function's return type, so a return type that cannot carry a
/// [`BulkheadError`] is reported there.
#[inline]
pub fn refusal<R: CarriesBulkheadError>(error: BulkheadError) -> R {
    R::from_bulkhead_error(error)
}

/// Return types a refused call can be reported through: `Result<T, E>` with
/// `E: From<BulkheadError>`.
#[diagnostic::on_unimplemented(
    message = "`#[bulkhead]` cannot report a refused call through the return type `{Self}`",
    label = "a refused call must return something here, but `{Self}` cannot carry a `bulkhead::BulkheadError`",
    note = "return `Result<T, E>` where `E: From<bulkhead::BulkheadError>` (e.g. `Result<T, bulkhead::BulkheadError>`, or add `impl From<bulkhead::BulkheadError> for E`)",
    note = "or give the function a fallback, which receives its arguments and the error: `#[bulkhead(\"name\", fallback = path)]`"
)]
pub trait CarriesBulkheadError {
    /// The value that reports `error`.
    fn from_bulkhead_error(error: BulkheadError) -> Self;
}

#[diagnostic::do_not_recommend]
impl<T, E: From<BulkheadError>> CarriesBulkheadError for Result<T, E> {
    #[inline]
    fn from_bulkhead_error(error: BulkheadError) -> Self {
        Err(E::from(error))
    }
}

/// Calls a fallback with the refused call's arguments and the error.
///
/// Spanned at `fallback = path`, so a fallback of the wrong shape is reported there. The
/// bound sits on the arguments (whose types are known) rather than on the fallback, so a
/// wrong arity or argument type is reported against the fallback's own signature.
#[inline]
pub fn fallback<F, Args, R>(fallback: F, args: Args, error: BulkheadError) -> R
where
    Args: FallbackArgs<F, R>,
{
    // A refusal inside a test scope came from the scope's private bulkhead.
    #[cfg(feature = "testing")]
    let scoped = crate::testing::in_scope();
    #[cfg(not(feature = "testing"))]
    let scoped = false;
    if !scoped {
        bulkhead_core::registry().record_fallback(error.name());
    }
    args.call(fallback, error)
}

/// What an `async fn`'s fallback returned, before the expansion uses it: a future (from an
/// `async fn` fallback), awaited, or a value (from a plain one), used as is.
///
/// The choice is made where the types are known, by method resolution: `(&mut
/// FallbackReturn::new(r)).__bulkhead_fallback()` finds [`AwaitFallback`] (on
/// `FallbackReturn<F>`, for `F: Future`) before autoref reaches [`ReadyFallback`] (on
/// `&mut FallbackReturn<T>`, any `T`). A fallback returning a type parameter is taken
/// as a value.
pub struct FallbackReturn<T>(Option<T>);

impl<T> FallbackReturn<T> {
    /// Holds what the fallback returned.
    #[inline]
    pub fn new(returned: T) -> Self {
        FallbackReturn(Some(returned))
    }

    #[inline]
    fn take(&mut self) -> T {
        match self.0.take() {
            Some(returned) => returned,
            None => unreachable!("a fallback's return value is used once"),
        }
    }
}

/// What an `async fn`'s fallback produced, as the function's output `R`: only `R` itself
/// is. (A plain `let output: R = produced;` let rustc suggest `fallback = name.expect(..)`
/// for an `Option<R>`, an edit of the attribute that does not compile.)
#[diagnostic::on_unimplemented(
    message = "the fallback produces `{Self}`, but the function returns `{R}`",
    label = "this fallback must produce `{R}`",
    note = "a fallback returns what the function returns (for an `async fn`, its output type), so a refused call gets a value of the same type"
)]
pub trait FallbackOutput<R> {
    /// The value, as the function's output.
    fn into_output(self) -> R;
}

impl<R> FallbackOutput<R> for R {
    #[inline]
    fn into_output(self) -> R {
        self
    }
}

/// `produced`, checked to be the function's output type `R` (see [`FallbackOutput`]).
#[inline]
pub fn fallback_output<R, T: FallbackOutput<R>>(produced: T) -> R {
    produced.into_output()
}

/// A fallback that returned a future: it is awaited.
pub trait AwaitFallback {
    /// The future returned.
    type Future;
    /// Hands the future over.
    fn __bulkhead_fallback(&mut self) -> Self::Future;
}

impl<F: Future> AwaitFallback for FallbackReturn<F> {
    type Future = F;
    #[inline]
    fn __bulkhead_fallback(&mut self) -> F {
        self.take()
    }
}

/// A fallback that returned a value: it is used as is (through a ready future).
pub trait ReadyFallback {
    /// A future ready with the value.
    type Future;
    /// Wraps the value in a ready future.
    fn __bulkhead_fallback(&mut self) -> Self::Future;
}

impl<T> ReadyFallback for &mut FallbackReturn<T> {
    type Future = std::future::Ready<T>;
    #[inline]
    fn __bulkhead_fallback(&mut self) -> std::future::Ready<T> {
        std::future::ready(self.take())
    }
}

/// The arguments of a refused call, which a fallback `F` returning `R` must accept
/// (followed by the [`BulkheadError`]).
#[diagnostic::on_unimplemented(
    message = "`{F}` cannot be this function's fallback",
    label = "a fallback must take the arguments `{Self}`, then a `bulkhead::BulkheadError`, and return `{R}`",
    note = "a fallback receives the refused call's arguments (`self` first, for methods: `fallback = Self::name`) followed by the error, and returns what the function returns",
    note = "for an `async fn`, the fallback may be an `async fn` or a plain function; either way it produces the `async fn`'s output type"
)]
pub trait FallbackArgs<F, R> {
    /// Calls `fallback` with these arguments and `error`.
    fn call(self, fallback: F, error: BulkheadError) -> R;
}

macro_rules! fallback_impls {
    ($( ($($arg:ident),*) )*) => {$(
        #[diagnostic::do_not_recommend]
        impl<Func, Out, $($arg),*> FallbackArgs<Func, Out> for ($($arg,)*)
        where
            Func: FnOnce($($arg,)* BulkheadError) -> Out,
        {
            #[inline]
            #[allow(non_snake_case)]
            fn call(self, fallback: Func, error: BulkheadError) -> Out {
                let ($($arg,)*) = self;
                fallback($($arg,)* error)
            }
        }
    )*};
}

fallback_impls! {
    ()
    (A1)
    (A1, A2)
    (A1, A2, A3)
    (A1, A2, A3, A4)
    (A1, A2, A3, A4, A5)
    (A1, A2, A3, A4, A5, A6)
    (A1, A2, A3, A4, A5, A6, A7)
    (A1, A2, A3, A4, A5, A6, A7, A8)
    (A1, A2, A3, A4, A5, A6, A7, A8, A9)
    (A1, A2, A3, A4, A5, A6, A7, A8, A9, A10)
    (A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11)
    (A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12)
}

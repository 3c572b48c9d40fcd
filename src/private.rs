//! Paths for the code `#[bulkhead]` generates. Not a public API: names and signatures here
//! change whenever the attribute's expansion does.
//!
//! Each annotated function holds a `static` [`Declaration`] (its bulkhead's name, kind and
//! declared config as typed data, gathered at link time by [`declare!`]) and one `static`
//! slot ([`SemaphoreSlot`] or [`ThreadPoolSlot`]). The first call resolves the slot to a
//! `&'static` handle on the bulkhead of that name in the process-wide registry, which
//! already holds every declared bulkhead. Every later call is one atomic load
//! (`OnceLock::get`) plus the core call.
//!
//! The traits here exist for their compile errors: each carries a
//! `#[diagnostic::on_unimplemented]` message that tells a newcomer what `#[bulkhead]`
//! needs, and the attribute spans their use at the user's own tokens (the return type, the
//! `fallback = path`, the `async` keyword).

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

pub use core::option::Option::{None, Some};
pub use core::result::Result::{Err, Ok};

pub use bulkhead_config_types as config_types;
pub use bulkhead_core::__declare as declare;
pub use bulkhead_core::declaration::Declaration;
pub use bulkhead_core::{AnnotatedFunction, BulkheadError, DeclarationSite, Refused};

use bulkhead_core::{
    AsyncPermit, AsyncSharePermit, Bulkhead, Permit, SemaphoreBulkhead, SharePermit,
    ThreadPoolBulkhead, Timed,
};

/// The cached handle of a bulkhead, one `static` per annotated function.
#[derive(Debug)]
pub struct Slot<B: 'static> {
    declaration: &'static Declaration,
    handle: OnceLock<&'static B>,
    /// Set once this function's blocking call from an async task has been logged.
    warned: AtomicBool,
}

/// The cached handle of a semaphore bulkhead.
pub type SemaphoreSlot = Slot<SemaphoreBulkhead>;

/// The cached handle of a thread-pool bulkhead.
pub type ThreadPoolSlot = Slot<ThreadPoolBulkhead>;

/// The bulkhead kinds a [`Slot`] can hold.
pub trait Resolve: Sized + Clone + Send + Sync + 'static {
    /// This kind's bulkhead, if `bulkhead` is one.
    fn of(bulkhead: Bulkhead) -> Option<Self>;
}

impl Resolve for SemaphoreBulkhead {
    fn of(bulkhead: Bulkhead) -> Option<Self> {
        bulkhead.as_semaphore().cloned()
    }
}

impl Resolve for ThreadPoolBulkhead {
    fn of(bulkhead: Bulkhead) -> Option<Self> {
        bulkhead.as_thread_pool().cloned()
    }
}

impl<B: Resolve> Slot<B> {
    /// A slot that resolves on first use.
    pub const fn new(declaration: &'static Declaration) -> Self {
        Slot {
            declaration,
            handle: OnceLock::new(),
            warned: AtomicBool::new(false),
        }
    }

    /// The bulkhead (the fast path is one atomic load).
    #[inline(always)]
    pub fn get(&'static self) -> &'static B {
        // Tests only: the thread's `bulkhead::testing` scope, when one is current.
        #[cfg(feature = "testing")]
        if let Some(scoped) = crate::testing::scoped::<B>(self.declaration) {
            return scoped;
        }
        match self.handle.get() {
            Some(handle) => handle,
            None => self.resolve(),
        }
    }

    /// The refusal a `bulkhead::testing` scope makes for this bulkhead (tests only; without
    /// the feature this is nothing).
    #[inline(always)]
    fn test_refusal(&'static self) -> Result<(), BulkheadError> {
        #[cfg(feature = "testing")]
        if let Some(error) = crate::testing::refusal(self.declaration) {
            return Err(error);
        }
        Ok(())
    }

    /// The declared bulkhead from the process-wide registry, which holds every declaration
    /// of the program (`register` returns it as it is). Where the linker cannot gather
    /// declarations, this first call registers it from the typed declaration instead.
    #[cold]
    fn resolve(&'static self) -> &'static B {
        self.handle.get_or_init(|| {
            let declaration = self.declaration;
            let registered = bulkhead_core::registry()
                .register(declaration.name, &(declaration.config)())
                .ok()
                .and_then(B::of);
            match registered {
                // Leaked once per annotated function: registry entries are never replaced.
                Some(bulkhead) => Box::leak(Box::new(bulkhead)),
                None => panic!(
                    "bulkhead `{}` is registered as another kind than its declaration at {} \
                     (used by {}): one name is one bulkhead, so rename one of them",
                    declaration.name, declaration.declared_at, declaration.function
                ),
            }
        })
    }
}

impl SemaphoreSlot {
    /// Takes a permit for a synchronous call (blocking at most `max_wait`): inlined into
    /// the expansion, like the core `acquire` it calls, so the permit stays in registers.
    #[inline(always)]
    pub fn enter(&'static self) -> Result<Permit<'static>, BulkheadError> {
        self.test_refusal()?;
        self.get().acquire()
    }

    /// Takes a permit for an async call (awaiting at most `max_wait`).
    #[inline]
    pub async fn enter_async(&'static self) -> Result<AsyncPermit<'static>, BulkheadError> {
        self.test_refusal()?;
        self.get().acquire_async().await
    }
}

impl SemaphoreSlot {
    /// Awaits an async body while holding `permit`, under the bulkhead's call timeout
    /// (`Err(CallTimeout)` once it passes; the body is dropped and the permit returned).
    #[inline]
    pub fn run_timed<F: Future>(
        &'static self,
        permit: AsyncPermit<'static>,
        body: F,
    ) -> impl Future<Output = Result<F::Output, BulkheadError>> {
        self.get().run_admitted(permit, body)
    }
}

/// `partition = "…"` and `key = …`: the call enters through the bulkhead's shares.
impl SemaphoreSlot {
    /// Takes a permit for a synchronous call under `partition` and the key `key`.
    #[inline]
    pub fn enter_shared(
        &'static self,
        partition: Option<&str>,
        key: Option<u64>,
    ) -> Result<SharePermit<'static>, BulkheadError> {
        self.test_refusal()?;
        shared_admission(self.get(), partition, key).acquire()
    }

    /// Takes a permit for an async call under `partition` and the key `key`.
    #[inline]
    pub async fn enter_shared_async(
        &'static self,
        partition: Option<&str>,
        key: Option<u64>,
    ) -> Result<AsyncSharePermit<'static>, BulkheadError> {
        self.test_refusal()?;
        shared_admission(self.get(), partition, key)
            .acquire_async()
            .await
    }

    /// Awaits an async body while holding `permit`, under the bulkhead's call timeout.
    #[inline]
    pub fn run_shared_timed<F: Future>(
        &'static self,
        permit: AsyncSharePermit<'static>,
        body: F,
    ) -> impl Future<Output = Result<F::Output, BulkheadError>> {
        permit.run_timed(body)
    }
}

fn shared_admission<'a>(
    bulkhead: &'a SemaphoreBulkhead,
    partition: Option<&str>,
    key: Option<u64>,
) -> bulkhead_core::Admission<'a> {
    let admission = match partition {
        Some(name) => bulkhead.in_partition(name),
        None => bulkhead.unpartitioned(),
    };
    match key {
        Some(id) => admission.key_id(id),
        None => admission,
    }
}

/// The id of a call's key (`key = …`).
#[inline]
pub fn key_id<K: std::hash::Hash + ?Sized>(key: &K) -> u64 {
    SemaphoreBulkhead::key_id(key)
}

/// Awaits an async body while holding a permit taken through the shares.
#[inline]
pub fn run_shared_async<F: Future>(
    permit: AsyncSharePermit<'static>,
    body: F,
) -> impl Future<Output = F::Output> {
    permit.run_async(body)
}

/// The tower layer of `bulkhead::layer!`: the slot's bulkhead from the process-wide
/// registry (declared by the same expansion).
#[cfg(feature = "tower")]
pub fn layer(slot: &'static SemaphoreSlot) -> crate::tower::BulkheadLayer {
    crate::tower::BulkheadLayer::new(slot.get().clone())
}

/// Awaits an async body while holding `permit`, with the bulkhead marked entered during
/// each poll (so a nested call to the same bulkhead runs inline).
#[inline]
pub fn run_async<F: Future>(
    permit: AsyncPermit<'static>,
    body: F,
) -> impl Future<Output = F::Output> {
    permit.run_async(body)
}

impl ThreadPoolSlot {
    /// The test scope's chosen refusal (feature `testing`), handing `input` back as a
    /// refused pool call does; otherwise `input`, untouched.
    #[inline(always)]
    fn test_refusal_with<I>(&'static self, input: I) -> Result<I, Refused<I>> {
        match self.test_refusal() {
            Ok(()) => Ok(input),
            Err(error) => Err(Refused { input, error }),
        }
    }

    /// Runs `body(input)` on a worker and waits for it; a refusal hands `input` back.
    #[inline]
    pub fn call<I, R>(
        &'static self,
        input: I,
        body: impl FnOnce(I) -> R + Send,
    ) -> Result<R, Refused<I>>
    where
        I: Send,
        R: Send,
    {
        let input = self.test_refusal_with(input)?;
        // From an async task, the core call hands its wait to the runtime where it can;
        // the function is named once in a WARN with the fix.
        let caller = bulkhead_core::async_caller::caller();
        if caller != bulkhead_core::async_caller::Caller::Thread {
            bulkhead_core::async_caller::warn_blocking_call(
                &self.warned,
                caller,
                self.declaration.name,
                &self.declaration.function,
            );
        }
        self.get().call(input, body)
    }

    /// Runs the future `body(input)` on a worker; a refusal hands `input` back.
    #[inline]
    pub async fn call_async<I, F, Fut>(
        &'static self,
        input: I,
        body: F,
    ) -> Result<Fut::Output, Refused<I>>
    where
        I: Send + 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let input = self.test_refusal_with(input)?;
        self.get().call_async(input, body).await
    }

    /// [`call_async`](Self::call_async) under the bulkhead's call timeout.
    #[inline]
    pub async fn call_async_timed<I, F, Fut>(
        &'static self,
        input: I,
        body: F,
    ) -> Timed<Fut::Output, I>
    where
        I: Send + 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let input = self.test_refusal_with(input)?;
        self.get().call_async_timed(input, body).await
    }
}

/// The body of an `async fn` on a thread-pool bulkhead. Spanned at the function's `async`
/// keyword: the future runs on one of the pool's worker threads, so it must be `Send` and
/// `'static`, and rustc reports a violation there, naming the value that is not `Send`.
#[inline]
pub fn thread_pool_future<F>(body: F) -> F
where
    F: Future + Send + 'static,
{
    body
}

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

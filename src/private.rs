//! Paths for the code `#[bulkhead]` generates. Not a public API: names and signatures here
//! change whenever the attribute's expansion does.
//!
//! Each annotated function holds a `static` [`Declaration`] (its bulkhead's name, kind and
//! declared config as typed data, gathered at link time by [`declare!`]) and one `static`
//! slot ([`SemaphoreSlot`] or [`ThreadPoolSlot`]). The first call resolves the slot to a
//! `&'static` handle on its bulkhead, which the process-wide registry built with every
//! declared bulkhead and keeps by the declaration's address (nothing rebuilt, validated
//! again or looked up by name). Every later call is one atomic load (`OnceLock::get`) plus
//! the core call.
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

#[path = "private/refusal.rs"]
mod refusal;
pub use refusal::{
    AwaitFallback, CarriesBulkheadError, FallbackArgs, FallbackOutput, FallbackReturn,
    ReadyFallback, fallback, fallback_output, refusal,
};

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

    /// The declared bulkhead from the process-wide registry, which built one for every
    /// declaration of the program and keeps it by the declaration's address: nothing is
    /// rebuilt, validated again or looked up by name. Where the linker cannot gather
    /// declarations, this first call registers it from the typed declaration instead.
    #[cold]
    fn resolve(&'static self) -> &'static B {
        self.handle.get_or_init(|| {
            let declaration = self.declaration;
            let registered = match bulkhead_core::declared_handle(declaration) {
                Some(bulkhead) => Some(bulkhead),
                None => bulkhead_core::registry()
                    .register(declaration.name, &(declaration.config)())
                    .ok(),
            }
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

/// The admission of a call of the attribute: its partition, resolved at build time to its
/// place among the declared names (or none), and its key's id (or none). The same methods
/// on either kind's admission type.
macro_rules! admission_of {
    ($bulkhead:expr, $partition:expr, $key:expr) => {{
        let admission = match $partition {
            Some((index, name, fingerprint)) => $bulkhead.in_partition_at(index, name, fingerprint),
            None => $bulkhead.unpartitioned(),
        };
        match $key {
            Some(id) => admission.key_id(id),
            None => admission,
        }
    }};
}

/// How an annotated call enters its bulkhead, of either kind: plainly ([`Plain`]) or
/// through the bulkhead's partitions and per-key caps ([`Shares`]). The attribute picks one when the
/// code is built, so each function compiles to its own path: nothing is chosen per call.
pub trait Entry {
    /// The permit of a synchronous call.
    type Permit;
    /// The permit of an async call.
    type AsyncPermit: Run;
    /// Takes a permit for a synchronous call (blocking at most `max_wait`).
    fn acquire(self, bulkhead: &'static SemaphoreBulkhead) -> Result<Self::Permit, BulkheadError>;
    /// Takes a permit for an async call (awaiting at most `max_wait`).
    fn acquire_async(
        self,
        bulkhead: &'static SemaphoreBulkhead,
    ) -> impl Future<Output = Result<Self::AsyncPermit, BulkheadError>>;
    /// Runs an async body under a permit and the bulkhead's call timeout: the body and
    /// its permit in one future from the call to its end.
    fn call_async<F: Future>(
        self,
        bulkhead: &'static SemaphoreBulkhead,
        body: F,
    ) -> impl Future<Output = Result<F::Output, BulkheadError>>;
    /// How a call enters the thread pool `pool`: `None` for its plain call, or through
    /// the pool's shares. (The plain call of a pool that has partitions only borrows from
    /// them, so it enters through the shares too.)
    fn pool_admission(self, pool: &ThreadPoolBulkhead) -> Option<bulkhead_core::PoolAdmission<'_>>;
}

/// A call that names no partition and no key, on a bulkhead declared without partitions.
#[derive(Clone, Copy, Debug)]
pub struct Plain;

/// `partition = "…"` and `key = …`: the partition's place among the declared (sorted)
/// names, its name and their fingerprint (or none), and the key's id (or none).
#[derive(Clone, Copy, Debug)]
pub struct Shares(pub Option<(usize, &'static str, u64)>, pub Option<u64>);

impl Entry for Plain {
    type Permit = Permit<'static>;
    type AsyncPermit = AsyncPermit<'static>;

    #[inline(always)]
    fn acquire(
        self,
        bulkhead: &'static SemaphoreBulkhead,
    ) -> Result<Permit<'static>, BulkheadError> {
        bulkhead.acquire()
    }

    #[inline]
    fn acquire_async(
        self,
        bulkhead: &'static SemaphoreBulkhead,
    ) -> impl Future<Output = Result<AsyncPermit<'static>, BulkheadError>> {
        bulkhead.acquire_async()
    }

    /// The core's one call future: the permit is made in its own slot (a permit returned
    /// by an acquisition and moved into the body's future is copied right behind the
    /// narrow stores that built it, a store-forwarding stall on every call).
    #[inline]
    fn call_async<F: Future>(
        self,
        bulkhead: &'static SemaphoreBulkhead,
        body: F,
    ) -> impl Future<Output = Result<F::Output, BulkheadError>> {
        bulkhead.call_async(body)
    }

    #[inline(always)]
    fn pool_admission(self, pool: &ThreadPoolBulkhead) -> Option<bulkhead_core::PoolAdmission<'_>> {
        pool.is_partitioned().then(|| pool.unpartitioned())
    }
}

impl Entry for Shares {
    type Permit = SharePermit<'static>;
    type AsyncPermit = AsyncSharePermit<'static>;

    #[inline]
    fn acquire(
        self,
        bulkhead: &'static SemaphoreBulkhead,
    ) -> Result<SharePermit<'static>, BulkheadError> {
        admission_of!(bulkhead, self.0, self.1).acquire()
    }

    #[inline]
    fn acquire_async(
        self,
        bulkhead: &'static SemaphoreBulkhead,
    ) -> impl Future<Output = Result<AsyncSharePermit<'static>, BulkheadError>> {
        admission_of!(bulkhead, self.0, self.1).acquire_async()
    }

    #[inline]
    async fn call_async<F: Future>(
        self,
        bulkhead: &'static SemaphoreBulkhead,
        body: F,
    ) -> Result<F::Output, BulkheadError> {
        self.acquire_async(bulkhead).await?.run_timed(body).await
    }

    #[inline(always)]
    fn pool_admission(self, pool: &ThreadPoolBulkhead) -> Option<bulkhead_core::PoolAdmission<'_>> {
        Some(admission_of!(pool, self.0, self.1))
    }
}

/// A permit an async body runs under: the bulkhead is marked entered during each poll (so
/// a nested call to the same bulkhead runs inline), and everything the permit holds is
/// returned when the body finishes or is dropped. (Implemented for every lifetime: the
/// compiler checks an async function's `Send` with its lifetimes erased.)
pub trait Run {
    /// Awaits `body` while holding the permit.
    fn run<F: Future>(self, body: F) -> impl Future<Output = F::Output>;
}

/// Both async permits run a body with their own method of the same name.
macro_rules! run_with_inherent_methods {
    ($($permit:ident),*) => {$(
        impl Run for $permit<'_> {
            #[inline]
            fn run<F: Future>(self, body: F) -> impl Future<Output = F::Output> {
                $permit::run_async(self, body)
            }
        }
    )*};
}

run_with_inherent_methods!(AsyncPermit, AsyncSharePermit);

impl SemaphoreSlot {
    /// Takes a permit for a synchronous call: inlined into the expansion, like the core
    /// `acquire` it calls, so the permit stays in registers.
    #[inline(always)]
    pub fn enter<E: Entry>(&'static self, entry: E) -> Result<E::Permit, BulkheadError> {
        self.test_refusal()?;
        entry.acquire(self.get())
    }

    /// Runs an async body under a permit and the bulkhead's call timeout (`Err` for a
    /// refusal or the timeout): the entry's call future itself, no future around it (its
    /// result would be copied once more on the way out).
    #[cfg(not(feature = "testing"))]
    #[inline]
    pub fn call_async<E: Entry, F: Future>(
        &'static self,
        entry: E,
        body: F,
    ) -> impl Future<Output = Result<F::Output, BulkheadError>> {
        entry.call_async(self.get(), body)
    }

    /// Runs an async body under a permit and the bulkhead's call timeout (`Err` for a
    /// refusal or the timeout), or gives the refusal a test scope chose.
    #[cfg(feature = "testing")]
    #[inline]
    pub async fn call_async<E: Entry, F: Future>(
        &'static self,
        entry: E,
        body: F,
    ) -> Result<F::Output, BulkheadError> {
        self.test_refusal()?;
        entry.call_async(self.get(), body).await
    }

    /// Takes a permit for an async call.
    #[inline]
    pub async fn enter_async<E: Entry>(
        &'static self,
        entry: E,
    ) -> Result<E::AsyncPermit, BulkheadError> {
        self.test_refusal()?;
        entry.acquire_async(self.get()).await
    }
}

/// The id of a call's key (`key = …`).
#[inline]
pub fn key_id<K: std::hash::Hash + ?Sized>(key: &K) -> u64 {
    SemaphoreBulkhead::key_id(key)
}

/// Awaits an async body while holding `permit` (a function with a fallback: untimed).
#[inline]
pub fn run_async<P: Run, F: Future>(permit: P, body: F) -> impl Future<Output = F::Output> {
    permit.run(body)
}

/// The tower layer of `bulkhead::layer!`: the slot's bulkhead from the process-wide
/// registry (declared by the same expansion).
#[cfg(feature = "tower")]
pub fn layer(slot: &'static SemaphoreSlot) -> crate::tower::BulkheadLayer {
    crate::tower::BulkheadLayer::new(slot.get().clone())
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

    /// Runs `body(input)` on a worker and waits for it, entering as `entry` says; a
    /// refusal hands `input` back.
    #[inline]
    pub fn call<E: Entry, I, R>(
        &'static self,
        entry: E,
        input: I,
        body: impl FnOnce(I) -> R + Send,
    ) -> Result<R, Refused<I>>
    where
        I: Send,
        R: Send,
    {
        let input = self.test_refusal_with(input)?;
        self.warn_if_async();
        let pool = self.get();
        match entry.pool_admission(pool) {
            None => pool.call(input, body),
            Some(admission) => admission.call(input, body),
        }
    }

    /// From an async task, the core call hands its wait to the runtime where it can; the
    /// function is named once in a WARN with the fix.
    #[inline]
    fn warn_if_async(&'static self) {
        let caller = bulkhead_core::async_caller::caller();
        if caller != bulkhead_core::async_caller::Caller::Thread {
            bulkhead_core::async_caller::warn_blocking_call(
                &self.warned,
                caller,
                self.declaration.name,
                &self.declaration.function,
            );
        }
    }

    /// Runs the future `body(input)` on a worker, entering as `entry` says; a refusal
    /// hands `input` back.
    #[inline]
    pub fn call_async<E, I, F, Fut>(
        &'static self,
        entry: E,
        input: I,
        body: F,
    ) -> impl Future<Output = Result<Fut::Output, Refused<I>>>
    where
        E: Entry + Send + 'static,
        I: Send + 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        self.on_worker(input, move |pool, input| async move {
            match entry.pool_admission(pool) {
                None => pool.call_async(input, body).await,
                Some(admission) => admission.call_async(input, body).await,
            }
        })
    }

    /// [`call_async`](Self::call_async) under the bulkhead's call timeout.
    #[inline]
    pub fn call_async_timed<E, I, F, Fut>(
        &'static self,
        entry: E,
        input: I,
        body: F,
    ) -> impl Future<Output = Timed<Fut::Output, I>>
    where
        E: Entry + Send + 'static,
        I: Send + 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        self.on_worker(input, move |pool, input| async move {
            match entry.pool_admission(pool) {
                None => pool.call_async_timed(input, body).await,
                Some(admission) => admission.call_async_timed(input, body).await,
            }
        })
    }

    /// At the first poll: the test scope's refusal, else `call` on the bulkhead.
    async fn on_worker<I, T, C>(
        &'static self,
        input: I,
        call: impl FnOnce(&'static ThreadPoolBulkhead, I) -> C,
    ) -> Result<T, Refused<I>>
    where
        C: Future<Output = Result<T, Refused<I>>>,
    {
        let input = self.test_refusal_with(input)?;
        call(self.get(), input).await
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

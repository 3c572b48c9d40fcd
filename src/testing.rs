//! Testing code that uses `#[bulkhead]` functions (feature `testing`; enable it in
//! `[dev-dependencies]` only, so non-test builds do not contain it).
//!
//! A [`TestScope`] changes, **for the thread that entered it only**, what the annotated
//! functions called on that thread see:
//!
//! * every bulkhead they use is a private copy, built from its declaration when first used
//!   in the scope — so tests running in parallel never share permits, queues or counters;
//! * [`refuse`](TestScope::refuse) makes a named bulkhead refuse every call with the reason
//!   you choose, so a fallback is tested without threads that hold permits;
//! * [`clock`](TestScope::clock) runs those private bulkheads on a [`ManualClock`], so
//!   waits and call timeouts are driven by [`ManualClock::advance`], not by sleeping;
//! * [`semaphore`](TestScope::semaphore) / [`thread_pool`](TestScope::thread_pool) give one
//!   bulkhead other sizes for this test.
//!
//! ```
//! use bulkhead::testing::{Reason, TestScope};
//! use bulkhead::{BulkheadError, bulkhead};
//!
//! #[bulkhead("recommendations", fallback = no_recommendations)]
//! fn recommend(user: u64) -> Vec<u64> {
//!     vec![user + 1, user + 2]
//! }
//!
//! fn no_recommendations(_user: u64, _refused: BulkheadError) -> Vec<u64> {
//!     Vec::new()
//! }
//!
//! // The fallback, with no threads and no sleeps:
//! let scope = TestScope::new().refuse("recommendations", Reason::Full).enter();
//! assert_eq!(recommend(1), Vec::<u64>::new());
//! drop(scope);
//! // Outside the scope, the real bulkhead admits the call.
//! assert_eq!(recommend(1), vec![2, 3]);
//! ```
//!
//! The scope is the entering thread's: a `#[tokio::test]` (a current-thread runtime) polls
//! its futures there, so async functions see it too. The body of a thread-pool function
//! runs on one of the pool's workers, where the scope does not reach (calls made from
//! there use the process-wide bulkheads). Scopes nest: the latest entered is current, and
//! dropping a guard ends its own scope, in whatever order guards are dropped (dropping the
//! inner one makes the outer current again).
//!
//! Without the feature, the annotated functions' call path has no check at all: the
//! scope is consulted, as one thread-local read, only in builds that enable `testing`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bulkhead_config_types::{BulkheadConfig, Limits, SemaphoreConfig, ThreadPoolConfig};
use bulkhead_core::{Bulkhead, BulkheadError, BulkheadName, Clock, ManualClock, system_clock};

use crate::__private::{Declaration, Resolve};

/// The refusal [`TestScope::refuse`] makes a bulkhead answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// [`BulkheadError::Full`]: no room and no wait allowed.
    Full,
    /// [`BulkheadError::Timeout`]: waited its whole allowance, this long.
    Timeout(Duration),
    /// [`BulkheadError::QueueTimeout`]: dropped from a pool's queue after this long.
    QueueTimeout(Duration),
    /// [`BulkheadError::RateLimited`]: retry after this long.
    RateLimited(Duration),
    /// [`BulkheadError::ShutDown`].
    ShutDown,
}

impl Reason {
    fn error(self, name: &'static str) -> BulkheadError {
        let name = BulkheadName::from_static(name);
        match self {
            Reason::Full => BulkheadError::Full { name },
            Reason::Timeout(waited) => BulkheadError::Timeout { name, waited },
            Reason::QueueTimeout(waited) => BulkheadError::QueueTimeout { name, waited },
            Reason::RateLimited(retry_after) => BulkheadError::RateLimited { name, retry_after },
            Reason::ShutDown => BulkheadError::ShutDown { name },
        }
    }
}

/// Overrides for the bulkheads of `#[bulkhead]` functions called on one thread; see the
/// [module docs](self). Build it, then [`enter`](TestScope::enter) it for as long as the
/// returned guard lives.
#[derive(Debug, Default)]
#[must_use = "a scope does nothing until it is entered"]
pub struct TestScope {
    refusals: HashMap<String, Reason>,
    limits: HashMap<String, Limits>,
    clock: Option<ManualClock>,
}

impl TestScope {
    /// A scope in which every bulkhead is a private copy of its declaration, on the system
    /// clock.
    pub fn new() -> Self {
        TestScope::default()
    }

    /// Every call to bulkhead `name` is refused with `reason` (its body does not run; a
    /// fallback gets the arguments and the error). The name is not checked: refusing a
    /// name no annotated function uses (a typo) refuses nothing.
    pub fn refuse(mut self, name: &str, reason: Reason) -> Self {
        self.refusals.insert(name.to_owned(), reason);
        self
    }

    /// The scope's bulkheads read time and wait through `clock`.
    pub fn clock(mut self, clock: &ManualClock) -> Self {
        self.clock = Some(clock.clone());
        self
    }

    /// Bulkhead `name`, a semaphore, has these limits in this scope.
    ///
    /// # Panics
    ///
    /// At the first call of `name` in the scope, if its declaration is a thread pool (the
    /// message names the declaration).
    pub fn semaphore(mut self, name: &str, limits: SemaphoreConfig) -> Self {
        self.limits
            .insert(name.to_owned(), Limits::Semaphore(limits));
        self
    }

    /// Bulkhead `name`, a thread pool, has these limits in this scope.
    ///
    /// # Panics
    ///
    /// At the first call of `name` in the scope, if its declaration is a semaphore (the
    /// message names the declaration).
    pub fn thread_pool(mut self, name: &str, limits: ThreadPoolConfig) -> Self {
        self.limits
            .insert(name.to_owned(), Limits::ThreadPool(limits));
        self
    }

    /// Makes the overrides current on this thread until the guard is dropped.
    pub fn enter(self) -> ScopeGuard {
        let clock: Arc<dyn Clock> = match &self.clock {
            Some(clock) => Arc::new(clock.clone()),
            None => system_clock(),
        };
        let state = Rc::new(State {
            scope: self,
            clock,
            bulkheads: RefCell::new(HashMap::new()),
        });
        CURRENT.with(|scopes| scopes.borrow_mut().push(Rc::clone(&state)));
        ScopeGuard { state }
    }
}

/// Keeps a [`TestScope`] current on its thread; dropping it ends that scope and shuts down
/// its private thread pools. The scope current is the latest entered of those not ended,
/// so guards may be dropped in any order: dropping an outer guard first ends the outer
/// scope, and the inner stays current until its own guard drops.
#[derive(Debug)]
#[must_use = "the scope ends when the guard is dropped"]
pub struct ScopeGuard {
    state: Rc<State>,
}

impl ScopeGuard {
    /// The private bulkhead `name` of this guard's scope, if a function used it there (to
    /// read its snapshot in a test).
    pub fn bulkhead(&self, name: &str) -> Option<Bulkhead> {
        let bulkheads = self.state.bulkheads.borrow();
        bulkheads.get(name).map(|(bulkhead, _)| bulkhead.clone())
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        // `try_with`: a guard may be dropped while the thread's locals are torn down.
        let _ = CURRENT.try_with(|scopes| {
            let mut scopes = scopes.borrow_mut();
            if let Some(at) = scopes.iter().rposition(|s| Rc::ptr_eq(s, &self.state)) {
                scopes.remove(at);
            }
        });
        for (bulkhead, _) in self.state.bulkheads.borrow().values() {
            if let Bulkhead::ThreadPool(pool) = bulkhead {
                pool.shutdown(Duration::ZERO);
            }
        }
    }
}

struct State {
    scope: TestScope,
    clock: Arc<dyn Clock>,
    /// The private bulkheads, by name: the handle, and a leaked `&'static` copy of the typed
    /// handle the slot hands out (one small allocation per bulkhead per scope, in tests).
    bulkheads: RefCell<HashMap<String, (Bulkhead, &'static (dyn std::any::Any + Send + Sync))>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bulkheads = self.bulkheads.borrow();
        f.debug_struct("State")
            .field("scope", &self.scope)
            .field("bulkheads", &bulkheads.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// The scopes entered on this thread and not ended, the current one last.
    static CURRENT: RefCell<Vec<Rc<State>>> = const { RefCell::new(Vec::new()) };
}

/// Whether a scope is current on this thread (its calls go to private bulkheads, whose
/// fallbacks are not the process-wide bulkheads' to count).
pub(crate) fn in_scope() -> bool {
    CURRENT.with(|scopes| !scopes.borrow().is_empty())
}

/// The refusal the current scope makes for `name`, if any.
pub(crate) fn refusal(declaration: &'static Declaration) -> Option<BulkheadError> {
    CURRENT.with(|current| {
        let current = current.borrow();
        let reason = *current.last()?.scope.refusals.get(declaration.name)?;
        Some(reason.error(declaration.name))
    })
}

/// The current scope's private copy of the declared bulkhead, if a scope is current.
pub(crate) fn scoped<B: Resolve>(declaration: &'static Declaration) -> Option<&'static B> {
    CURRENT.with(|current| {
        let current = current.borrow();
        let state = current.last()?;
        let mut bulkheads = state.bulkheads.borrow_mut();
        if let Some((_, handle)) = bulkheads.get(declaration.name) {
            return handle.downcast_ref::<B>();
        }
        let mut config: BulkheadConfig = (declaration.config)();
        if let Some(limits) = state.scope.limits.get(declaration.name) {
            assert!(
                std::mem::discriminant(limits) == std::mem::discriminant(&config.limits),
                "TestScope gives bulkhead `{}` limits of another kind than its declaration at {}",
                declaration.name,
                declaration.declared_at
            );
            config.limits = limits.clone();
        }
        let bulkhead = Bulkhead::from_config(
            BulkheadName::from_static(declaration.name),
            &config,
            Arc::clone(&state.clock),
        );
        let typed: &'static B = Box::leak(Box::new(B::of(bulkhead.clone())?));
        bulkheads.insert(declaration.name.to_owned(), (bulkhead, typed));
        Some(typed)
    })
}

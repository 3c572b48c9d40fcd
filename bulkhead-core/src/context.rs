//! Carrying the caller's context onto a thread-pool worker.
//!
//! A thread-pool body runs on another thread, where the caller's thread-locals are not.
//! Two kinds of context travel with it, with nothing for the user to write:
//!
//! * the caller's **tracing span** (`tracing::Span::current()` at the call): it is entered on
//!   the worker, so spans and events of the body are children of the caller's span and a
//!   trace id survives the hop (what a hand-written `ContextAwareRunnable` does in Java, built in);
//! * any **thread-local context** an application keeps (an MDC map, a tenant id, a request
//!   id outside tracing), through a [`ContextPropagator`] registered once at start-up with
//!   [`register_propagator`].
//!
//! # Life cycle of one hop
//!
//! 1. [`CapturedContext::capture`] on the caller: the current span, and
//!    [`ContextPropagator::capture`] of every registered propagator.
//! 2. [`CapturedContext::enter`] on the worker, before the body:
//!    [`ContextPropagator::restore`] of each captured value, then the span is entered.
//! 3. When the returned guard drops — after the body, also when it panics — the span is
//!    exited and [`ContextPropagator::clear`] runs for each restored value, in reverse
//!    order, so the next task on the worker starts clean.
//!
//! A body that runs on its caller's thread (a semaphore, `on_full: caller-runs`, a
//! re-entrant call, a fallback) already has its context: nothing is captured or cleared
//! there. Use [`CapturedContext`] directly to carry the same context onto a thread of your
//! own.
//!
//! # Cost
//!
//! With no propagator registered, capturing is `Span::current()` and one relaxed load: no
//! allocation. While no `tracing` subscriber has been set at all, not even the span is
//! looked up: two relaxed loads. With propagators, one allocation per call holds the captured values.
//!
//! ```
//! use std::cell::RefCell;
//! use bulkhead::config::ThreadPoolConfig;
//! use bulkhead::ThreadPoolBulkhead;
//! use bulkhead::context::{ContextPropagator, register_propagator};
//!
//! thread_local!(static TENANT: RefCell<Option<String>> = const { RefCell::new(None) });
//!
//! struct Tenant;
//! impl ContextPropagator for Tenant {
//!     type Context = String;
//!     fn capture(&self) -> Option<String> {
//!         TENANT.with(|t| t.borrow().clone())
//!     }
//!     fn restore(&self, tenant: &String) {
//!         TENANT.with(|t| *t.borrow_mut() = Some(tenant.clone()));
//!     }
//!     fn clear(&self) {
//!         TENANT.with(|t| *t.borrow_mut() = None);
//!     }
//! }
//!
//! register_propagator(Tenant);
//! TENANT.with(|t| *t.borrow_mut() = Some("acme".into()));
//! let pool = ThreadPoolBulkhead::new("billing", &ThreadPoolConfig::default());
//! let seen = pool.call((), |()| TENANT.with(|t| t.borrow().clone())).unwrap();
//! assert_eq!(seen.as_deref(), Some("acme"));
//! ```

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};

use parking_lot::RwLock;

/// Moves one piece of thread-local context from a caller's thread to the worker thread that
/// runs its call. Register it with [`register_propagator`].
pub trait ContextPropagator: Send + Sync + 'static {
    /// The captured value, carried to the worker.
    type Context: Send + Sync + 'static;

    /// On the caller's thread: the current value, or `None` when there is nothing to carry
    /// (then `restore` and `clear` are not called for this hop).
    fn capture(&self) -> Option<Self::Context>;

    /// On the worker, before the body runs: installs `context`.
    fn restore(&self, context: &Self::Context);

    /// On the worker, after the body (also after a panic): removes what `restore` installed.
    fn clear(&self);
}

/// A propagator with its context type erased.
trait ErasedPropagator: Send + Sync {
    fn capture(&self) -> Option<Box<dyn Any + Send + Sync>>;
    fn restore(&self, context: &(dyn Any + Send + Sync));
    fn clear(&self);
}

impl<P: ContextPropagator> ErasedPropagator for P {
    fn capture(&self) -> Option<Box<dyn Any + Send + Sync>> {
        ContextPropagator::capture(self).map(|c| Box::new(c) as Box<dyn Any + Send + Sync>)
    }

    fn restore(&self, context: &(dyn Any + Send + Sync)) {
        if let Some(context) = context.downcast_ref::<P::Context>() {
            ContextPropagator::restore(self, context);
        }
    }

    fn clear(&self) {
        ContextPropagator::clear(self);
    }
}

static PROPAGATORS: RwLock<Vec<Arc<dyn ErasedPropagator>>> = RwLock::new(Vec::new());
static ANY_PROPAGATOR: AtomicBool = AtomicBool::new(false);

/// Registers `propagator` for every thread-pool hop from now on, for the life of the
/// process. Register at start-up, before the calls whose context it should carry.
pub fn register_propagator(propagator: impl ContextPropagator) {
    PROPAGATORS.write().push(Arc::new(propagator));
    ANY_PROPAGATOR.store(true, Release);
}

/// One propagator and the value it captured.
type CapturedValue = (Arc<dyn ErasedPropagator>, Box<dyn Any + Send + Sync>);
type Captured = Vec<CapturedValue>;

/// The caller's context, captured to be entered on another thread: its tracing span and the
/// values of the registered [`ContextPropagator`]s.
///
/// ```
/// use bulkhead::context::CapturedContext;
/// let span = tracing::info_span!("request", trace_id = 7);
/// let context = span.in_scope(CapturedContext::capture);
/// std::thread::spawn(move || {
///     let _inside = context.enter(); // `request` is the current span here
///     tracing::info!("runs inside the caller's span");
/// })
/// .join()
/// .unwrap();
/// ```
pub struct CapturedContext {
    span: tracing::Span,
    values: Option<Captured>,
}

impl CapturedContext {
    /// Captures the current thread's span and propagated values.
    ///
    /// While no `tracing` subscriber has ever been set (globally or for a scope) no span
    /// can be current, and none is looked up: the captured span is
    /// [`Span::none`](tracing::Span::none).
    #[inline]
    pub fn capture() -> Self {
        CapturedContext {
            span: current_span(),
            values: capture_values(),
        }
    }

    /// [`capture`](Self::capture), or `None` when there is nothing to carry: no span is
    /// current (or none can be: no subscriber was ever set) and no propagator captured a
    /// value. A pool's task then enters nothing on the worker and drops nothing after.
    #[inline]
    pub(crate) fn capture_if_any() -> Option<Self> {
        let values = capture_values();
        // No subscriber ever set: no span to build, look at or drop.
        if values.is_none() && !tracing::dispatcher::has_been_set() {
            return None;
        }
        let span = current_span();
        if span.is_none() && values.is_none() {
            return None;
        }
        Some(CapturedContext { span, values })
    }

    /// The captured span.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Restores the captured values and enters the span on this thread, until the guard
    /// drops (then every restored value is cleared and the span exited).
    pub fn enter(&self) -> EnteredContext<'_> {
        let restored = match &self.values {
            Some(values) => {
                for (propagator, value) in values {
                    propagator.restore(value.as_ref());
                }
                values.as_slice()
            }
            None => &[],
        };
        EnteredContext {
            _span: self.span.enter(),
            restored,
        }
    }

    /// Runs `f` inside the context ([`enter`](Self::enter) for its duration).
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let _inside = self.enter();
        f()
    }
}

/// `Span::current()`, skipped (one relaxed load) while no subscriber exists to record one.
#[inline]
fn current_span() -> tracing::Span {
    if tracing::dispatcher::has_been_set() {
        tracing::Span::current()
    } else {
        tracing::Span::none()
    }
}

#[inline]
fn capture_values() -> Option<Captured> {
    if !ANY_PROPAGATOR.load(Acquire) {
        return None;
    }
    capture_slow()
}

#[cold]
fn capture_slow() -> Option<Captured> {
    let captured: Captured = PROPAGATORS
        .read()
        .iter()
        .filter_map(|p| Some((Arc::clone(p), p.capture()?)))
        .collect();
    (!captured.is_empty()).then_some(captured)
}

impl fmt::Debug for CapturedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapturedContext")
            .field("span", &self.span)
            .field("propagated", &self.values.as_ref().map_or(0, Vec::len))
            .finish()
    }
}

/// A [`CapturedContext`] entered on the current thread; dropping it clears the restored
/// values (in reverse order) and exits the span.
#[must_use = "the context is left as soon as the guard drops"]
pub struct EnteredContext<'a> {
    _span: tracing::span::Entered<'a>,
    restored: &'a [CapturedValue],
}

impl Drop for EnteredContext<'_> {
    fn drop(&mut self) {
        for (propagator, _) in self.restored.iter().rev() {
            propagator.clear();
        }
    }
}

impl fmt::Debug for EnteredContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnteredContext")
            .field("propagated", &self.restored.len())
            .finish()
    }
}

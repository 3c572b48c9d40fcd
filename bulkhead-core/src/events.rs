//! Events: what happens to each call, delivered to registered listeners.
//!
//! Every bulkhead of the process reports what happens to a call: it was
//! [permitted](EventKind::Permitted) or [refused](EventKind::Refused) (with the
//! [`BulkheadError`]); once admitted, its caller may stop waiting at the call's timeout
//! ([timed out](EventKind::TimedOut)), and it [finishes](EventKind::Finished) with how
//! long it ran and how it ended. Listeners are process-wide and see every bulkhead; filter
//! on [`Event::bulkhead`].
//!
//! # Cost
//!
//! Nothing is built when nobody listens: each call site first reads one relaxed atomic (the
//! number of listeners) and does nothing else when it is 0 — no clock read, no event, no
//! lock. With listeners, an event is a borrowed struct on the stack (no allocation) passed
//! to each listener in turn, under a read lock; a finished event costs two clock reads
//! (start and end). Listeners run on the thread of the call (a pool worker for a
//! thread-pool body), inline: keep them short and never block in them.
//!
//! # Invariants
//!
//! * A call whose permit was taken while someone listened ends with one `Finished` event
//!   (completed, panicked or cancelled); a call refused while someone listened gets one
//!   `Refused` event, and an admitted call whose caller got
//!   [`CallTimeout`](BulkheadError::CallTimeout) one `TimedOut` event besides its
//!   `Finished`. So the `Refused` events of a bulkhead add up to its snapshot's refusals
//!   (`calls.refused`), and its `TimedOut` events to `calls.timed_out`. Re-entrant calls
//!   take no permit and report nothing.
//! * A listener that panics does not reach the call: each panic is caught where the event
//!   was delivered, the call goes on as if nobody listened (its permit or worker slot is
//!   released, nothing is lost), the other listeners still get the event, and the panic
//!   is counted ([`listener_panics`]) and the first one logged.
//!
//! # Subscribing and unsubscribing from a listener
//!
//! A listener may call [`subscribe`] and drop a [`Subscription`] (its own included) from
//! inside [`on_event`](Listener::on_event); neither waits for the delivery under way. The
//! change is for later events:
//!
//! * a listener subscribed there is first called for the events reported after the
//!   delivery under way on that thread is over: not for the event being delivered, nor for
//!   the events of calls made by listeners in the meantime;
//! * a listener whose subscription is dropped there is not called once the drop has
//!   returned, except by a delivery on another thread that was already calling it.
//!
//! Outside a listener, dropping a subscription waits for the deliveries under way: once
//! the drop returns, its listener is never called again.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use bulkhead::config::SemaphoreConfig;
//! use bulkhead::SemaphoreBulkhead;
//! use bulkhead::events::{self, EventKind};
//!
//! let finished = Arc::new(AtomicU64::new(0));
//! let seen = Arc::clone(&finished);
//! let subscription = events::subscribe(move |event: &events::Event<'_>| {
//!     if event.bulkhead == "inventory" && matches!(event.kind, EventKind::Finished { .. }) {
//!         seen.fetch_add(1, Ordering::Relaxed);
//!     }
//! });
//!
//! let inventory = SemaphoreBulkhead::new("inventory", &SemaphoreConfig::default());
//! inventory.call(|| ()).unwrap();
//! assert_eq!(finished.load(Ordering::Relaxed), 1);
//! drop(subscription); // stops listening
//! ```

use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::time::Duration;

use bulkhead_config_types::Kind;
use parking_lot::{Mutex, RwLock};

use crate::BulkheadError;

/// One thing that happened to one call of one bulkhead.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Event<'a> {
    /// The bulkhead's name.
    pub bulkhead: &'a str,
    /// The bulkhead's kind.
    pub bulkhead_kind: Kind,
    /// What happened.
    pub kind: EventKind<'a>,
}

/// What happened to a call.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum EventKind<'a> {
    /// The call was admitted: it holds a permit, or a pool slot (running or queued).
    Permitted,
    /// The call was refused; its body did not run. For a thread pool this includes a queued
    /// task failed before it ran (`QueueTimeout`, `ShutDown`), which also finishes
    /// `Cancelled`.
    Refused {
        /// Why.
        error: &'a BulkheadError,
    },
    /// An admitted call's caller stopped waiting at the call's `timeout` and got
    /// [`CallTimeout`](BulkheadError::CallTimeout): not a refusal (the snapshot counts it
    /// `timed_out`, not in `refused`). The body ran, and the call reports its `Finished`
    /// as well: when a synchronous pool body that went on running ends, or, for an async
    /// body the timeout cut short, `Cancelled` at the deadline — then possibly before this
    /// event.
    TimedOut {
        /// The `CallTimeout` the caller got.
        error: &'a BulkheadError,
    },
    /// An admitted call is over.
    Finished {
        /// How it ended.
        outcome: CallOutcome,
        /// How long it held its permit (semaphore) or ran on its worker (thread pool),
        /// by the bulkhead's clock; zero for a call cancelled before it ran.
        duration: Duration,
    },
    /// The bulkhead's [adaptive limit](crate::adaptive) changed (reported on the thread of
    /// the call whose end changed it). Not about one call.
    LimitChanged {
        /// The limit before.
        from: u32,
        /// The limit from now on.
        to: u32,
    },
}

/// How an admitted call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallOutcome {
    /// The body returned.
    Completed,
    /// The body panicked (the panic went on to the caller).
    Panicked,
    /// The call was given up before or while running (a dropped future, a task failed from
    /// the queue).
    Cancelled,
}

impl CallOutcome {
    /// `completed`, `panicked` or `cancelled`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Completed => "completed",
            CallOutcome::Panicked => "panicked",
            CallOutcome::Cancelled => "cancelled",
        }
    }
}

/// Receives the events of every bulkhead of the process. Implemented for closures
/// `Fn(&Event<'_>) + Send + Sync`.
pub trait Listener: Send + Sync + 'static {
    /// Called inline on the call's thread for every event; must not block.
    fn on_event(&self, event: &Event<'_>);
}

impl<F> Listener for F
where
    F: Fn(&Event<'_>) + Send + Sync + 'static,
{
    fn on_event(&self, event: &Event<'_>) {
        self(event)
    }
}

/// Listening until dropped (or forever, after [`detach`](Self::detach)).
///
/// Dropping it outside a listener waits for the deliveries under way: once the drop has
/// returned, the listener is never called again. Dropped from inside a listener, it waits
/// for nothing (see [the module docs](crate::events#subscribing-and-unsubscribing-from-a-listener)).
#[must_use = "the listener is removed as soon as the subscription is dropped"]
pub struct Subscription {
    entry: Option<Arc<Registered>>,
}

impl Subscription {
    /// Keeps the listener registered for the life of the process.
    pub fn detach(mut self) {
        self.entry = None;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            // No delivery calls it from now on, whenever it leaves the list.
            entry.removed.store(true, Relaxed);
            change(Change::Remove(entry));
        }
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.entry.as_ref().map(|entry| entry.id))
            .finish()
    }
}

/// One registered listener.
struct Registered {
    id: u64,
    /// Set when its subscription drops: deliveries skip it from then on, also while it is
    /// still in the list (a removal made inside a listener waits for the delivery's end).
    removed: AtomicBool,
    listener: Box<dyn Listener>,
}

/// The listeners, in the order they subscribed. Deliveries hold the read lock; only
/// [`change`] and [`apply_deferred`] write, never on a thread that is delivering.
static LISTENERS: RwLock<Vec<Arc<Registered>>> = RwLock::new(Vec::new());

/// The number of registered listeners; read on every call.
static LISTENING: AtomicUsize = AtomicUsize::new(0);

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A subscription made or dropped.
enum Change {
    Add(Arc<Registered>),
    Remove(Arc<Registered>),
}

/// Changes made inside listeners, in the order they were made: applied when the
/// outermost delivery of a thread that made one is over.
static DEFERRED: Mutex<Vec<Change>> = Mutex::new(Vec::new());

thread_local! {
    /// Deliveries under way on this thread: more than one when a listener's own call to a
    /// bulkhead reports events. No destructor, so it is readable at any time, thread exit
    /// included.
    static DELIVERING: Cell<u32> = const { Cell::new(0) };
    /// Whether a listener on this thread deferred a change during its current delivery.
    static DEFERRED_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Applies `change` now, or, on a thread delivering an event (whose read lock the write
/// lock would wait for forever), once that delivery is over.
fn change(change: Change) {
    if DELIVERING.with(Cell::get) > 0 {
        DEFERRED.lock().push(change);
        DEFERRED_HERE.with(|here| here.set(true));
    } else {
        apply([change]);
    }
}

/// Applies `changes` under the write lock; the listeners removed are dropped after it is
/// released (a listener may own subscriptions, whose drop takes the lock again).
fn apply(changes: impl IntoIterator<Item = Change>) {
    let mut gone = Vec::new();
    {
        let mut listeners = LISTENERS.write();
        for change in changes {
            match change {
                // Dropped before it was added (moved out of the listener that made it).
                Change::Add(entry) if entry.removed.load(Relaxed) => gone.push(entry),
                Change::Add(entry) => listeners.push(entry),
                Change::Remove(entry) => {
                    listeners.retain(|kept| !Arc::ptr_eq(kept, &entry));
                    gone.push(entry);
                }
            }
        }
        LISTENING.store(listeners.len(), Relaxed);
    }
    drop(gone);
}

/// The changes deferred by listeners, applied once this thread's outermost delivery is
/// over and its read lock released.
#[cold]
fn apply_deferred() {
    let changes = std::mem::take(&mut *DEFERRED.lock());
    if changes.is_empty() {
        return; // another thread's outermost delivery applied them
    }
    // On a call's path: a listener's destructor that panics must not reach the call.
    let applied = catch_unwind(AssertUnwindSafe(|| apply(changes)));
    if let Err(payload) = applied {
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    }
}

/// A delivery under way on this thread, from [`emit`]'s start to its end (also when a
/// listener's panic unwinds through a nested delivery).
struct Delivering;

impl Delivering {
    fn begin() -> Self {
        DELIVERING.with(|depth| depth.set(depth.get() + 1));
        Delivering
    }
}

impl Drop for Delivering {
    fn drop(&mut self) {
        let outermost = DELIVERING.with(|depth| {
            depth.set(depth.get() - 1);
            depth.get() == 0
        });
        if outermost && DEFERRED_HERE.with(|here| here.replace(false)) {
            apply_deferred();
        }
    }
}

/// Registers `listener` for the events of every bulkhead; it is removed when the returned
/// [`Subscription`] drops. Called from inside a listener, it waits for nothing and the
/// listener hears the events reported once the delivery under way is over (see [the
/// module docs](crate::events#subscribing-and-unsubscribing-from-a-listener)).
pub fn subscribe(listener: impl Listener) -> Subscription {
    let entry = Arc::new(Registered {
        id: NEXT_ID.fetch_add(1, Relaxed),
        removed: AtomicBool::new(false),
        listener: Box::new(listener),
    });
    change(Change::Add(Arc::clone(&entry)));
    Subscription { entry: Some(entry) }
}

/// Times every admitted call of every bulkhead from now until the returned subscription
/// drops, for the call-duration histogram (`BulkheadSnapshot::call_duration`,
/// `bulkhead_call_duration_seconds`). Any event listener does the same; this one listens
/// to nothing.
///
/// Timing costs what a listener costs: two clock reads per admitted call and the event
/// path (about 150 ns a call on a 2-core machine, against about 15 ns untimed). Without
/// it, the histogram only counts calls made while someone listened.
///
/// ```
/// use bulkhead::config::SemaphoreConfig;
/// use bulkhead::{SemaphoreBulkhead, events};
///
/// let timing = events::time_calls();
/// let search = SemaphoreBulkhead::new("search", &SemaphoreConfig::default());
/// search.call(|| ()).unwrap();
/// assert_eq!(search.snapshot().call_duration.count(), 1);
/// drop(timing);
/// search.call(|| ()).unwrap();
/// assert_eq!(search.snapshot().call_duration.count(), 1);
/// ```
pub fn time_calls() -> Subscription {
    subscribe(|_: &Event<'_>| {})
}

/// True when at least one listener is registered. One relaxed load: what every call site
/// checks before building anything.
#[inline]
pub fn is_listening() -> bool {
    LISTENING.load(Relaxed) != 0
}

/// Delivers `event` to every listener. Call only after [`is_listening`].
///
/// A listener that panics is caught here: the panic never reaches the call (whose permit,
/// slot and re-entry mark are handled as if nobody listened), never aborts a thread that is
/// already unwinding from the body's own panic, and is counted ([`listener_panics`]) and
/// logged once per process.
///
/// A listener may subscribe and unsubscribe listeners: the changes wait in [`DEFERRED`]
/// until the thread's outermost delivery is over (this function's `Delivering` is dropped
/// after the read lock).
#[cold]
pub(crate) fn emit(event: &Event<'_>) {
    let _delivering = Delivering::begin();
    // Recursive: a listener may itself call a bulkhead, even while a subscriber waits.
    let listeners = LISTENERS.read_recursive();
    for entry in listeners.iter() {
        if entry.removed.load(Relaxed) {
            continue;
        }
        let delivered = catch_unwind(AssertUnwindSafe(|| entry.listener.on_event(event)));
        if let Err(payload) = delivered {
            listener_panicked(event, payload);
        }
    }
}

/// Listener panics caught so far in this process.
static LISTENER_PANICS: AtomicU64 = AtomicU64::new(0);

#[cold]
fn listener_panicked(event: &Event<'_>, payload: Box<dyn std::any::Any + Send>) {
    if LISTENER_PANICS.fetch_add(1, Relaxed) == 0 {
        tracing::error!(
            target: crate::telemetry::TARGET,
            bulkhead = event.bulkhead,
            "an event listener panicked; the panic was caught and the call went on (later \
             listener panics are counted in `events::listener_panics()`, not logged)"
        );
    }
    // The payload's own drop may panic too: it must not escape either.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
}

/// How many times an event listener panicked in this process. Each panic was caught where
/// the event was delivered: the call that reported the event went on as if nobody
/// listened (its permit or worker slot is released, nothing is lost), and the first one
/// was logged at ERROR.
pub fn listener_panics() -> u64 {
    LISTENER_PANICS.load(Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_subscription_listens_until_dropped() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let subscription = subscribe(move |e: &Event<'_>| {
            if e.bulkhead == "events-unit" {
                sink.lock()
                    .unwrap()
                    .push(matches!(e.kind, EventKind::Permitted));
            }
        });
        assert!(is_listening());
        let event = Event {
            bulkhead: "events-unit",
            bulkhead_kind: Kind::Semaphore,
            kind: EventKind::Permitted,
        };
        emit(&event);
        drop(subscription);
        emit(&event);
        assert_eq!(*seen.lock().unwrap(), [true]);
    }

    #[test]
    fn a_panicking_listener_is_caught_and_the_next_still_hears_the_event() {
        let heard = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&heard);
        let panics_before = listener_panics();
        let hostile = subscribe(|e: &Event<'_>| {
            if e.bulkhead == "events-unit-panic" {
                panic!("a hostile listener");
            }
        });
        let after = subscribe(move |e: &Event<'_>| {
            if e.bulkhead == "events-unit-panic" {
                count.fetch_add(1, Relaxed);
            }
        });
        let event = Event {
            bulkhead: "events-unit-panic",
            bulkhead_kind: Kind::Semaphore,
            kind: EventKind::Permitted,
        };
        emit(&event); // returns: the panic does not reach the caller
        assert_eq!(heard.load(Relaxed), 1);
        assert!(listener_panics() > panics_before);
        drop((hostile, after));
    }
}

//! What the loom models share: a clock whose deadlines all pass when a model thread fires
//! it, a `block_on` that waits on a loom `Notify`, and the model runner. Included by
//! `tests/loom.rs` (the semaphore) and `src/thread_pool/loom_tests.rs` (the pool, which
//! needs crate-private state), each of which imports `Clock` and `Sleep` for it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::sync::{Mutex, Notify};

use super::{Clock, Sleep};

/// Time that stands still until a model thread [`fire`](ModelClock::fire)s it; then every
/// deadline has passed. Sleeps wake through loom, so a missed wake-up is a loom deadlock.
#[derive(Clone)]
pub(crate) struct ModelClock(std::sync::Arc<ClockState>);

struct ClockState {
    base: Instant,
    fired: AtomicBool,
    sleepers: Mutex<Vec<Waker>>,
    /// A sleep that finds it fired while registering wakes its waker from inside the poll
    /// (as futures-timer's does) instead of returning `Ready`.
    wakes_inside_poll: bool,
}

impl fmt::Debug for ModelClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelClock").finish_non_exhaustive()
    }
}

impl ModelClock {
    pub(crate) fn new() -> ModelClock {
        Self::with_late_fire(false)
    }

    /// A clock whose sleeps, when the clock fires while they register, wake their waker
    /// from inside the poll and return `Pending` (futures-timer's behaviour, which the
    /// system clock's timer has), instead of returning `Ready`.
    #[allow(dead_code, reason = "the semaphore's models use it, the pool's do not")]
    pub(crate) fn waking_inside_poll() -> ModelClock {
        Self::with_late_fire(true)
    }

    fn with_late_fire(wakes_inside_poll: bool) -> ModelClock {
        ModelClock(std::sync::Arc::new(ClockState {
            base: Instant::now(),
            fired: AtomicBool::new(false),
            sleepers: Mutex::new(Vec::new()),
            wakes_inside_poll,
        }))
    }

    /// Every deadline passes now.
    pub(crate) fn fire(&self) {
        self.0.fired.store(true, SeqCst);
        let sleepers = std::mem::take(&mut *self.0.sleepers.lock().unwrap());
        for waker in sleepers {
            waker.wake();
        }
    }
}

impl Clock for ModelClock {
    fn now(&self) -> Instant {
        if self.0.fired.load(SeqCst) {
            self.0.base + Duration::from_secs(3600)
        } else {
            self.0.base
        }
    }

    fn park_until(&self, _deadline: Instant) {
        loom::thread::yield_now();
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(ModelSleep {
            clock: self.clone(),
            deadline,
        })
    }
}

/// The sleep of a [`ModelClock`].
struct ModelSleep {
    clock: ModelClock,
    deadline: Instant,
}

impl Future for ModelSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.clock.now() >= self.deadline {
            return Poll::Ready(());
        }
        self.clock
            .0
            .sleepers
            .lock()
            .unwrap()
            .push(cx.waker().clone());
        // Fired between the look and the registration: `fire` may have missed this waker.
        if self.clock.now() >= self.deadline {
            if self.clock.0.wakes_inside_poll {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Polls `fut` on this loom thread, waiting (in loom) while pending: a future nobody wakes
/// leaves the thread waiting, and loom fails the model with a deadlock.
///
/// The waker notifies a loom [`Notify`] of this call's own, not the thread: loom 0.7's
/// `Thread::unpark` makes its target runnable whatever it is blocked on, so a stale waker
/// (one an earlier poll left with a sleep or a job) firing while this thread waits for a
/// lock in a later poll would resume it without the lock ("expected to be able to acquire
/// lock"), a schedule no real thread can take. A `Notify` resumes only its own waiter.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    struct Notified(Notify);
    impl std::task::Wake for Notified {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.notify();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.notify();
        }
    }
    let notified = std::sync::Arc::new(Notified(Notify::new()));
    let waker = Waker::from(notified.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(output) = fut.as_mut().poll(&mut cx) {
            return output;
        }
        notified.0.wait();
    }
}

pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

//! Time, behind a trait, so tests drive every timeout by hand.
//!
//! Every wait in the runtime (`max_wait`, `on_full: { wait }`, `max_queue_wait`, rate-limit
//! periods, keep-alive) reads the time and waits through a [`Clock`]. Production uses
//! [`SystemClock`]; tests use [`ManualClock`], whose time moves only when the test calls
//! [`ManualClock::advance`], so saturation and expiry are proven without a single sleep.
//!
//! Contract for waiters: [`Clock::park_until`] and [`Clock::sleep_until`] may return early
//! (spurious wake-ups, an `unpark` from a releaser); callers loop, re-checking their condition
//! and `now() >= deadline`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A future that completes once a clock reaches a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of time that can also wait for it.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time by this clock.
    fn now(&self) -> Instant;

    /// Blocks the calling thread until `deadline` by this clock, or until the thread is
    /// unparked ([`std::thread::Thread::unpark`]); may also return spuriously.
    fn park_until(&self, deadline: Instant);

    /// A future that completes once this clock reaches `deadline`. Needs no async runtime.
    fn sleep_until(&self, deadline: Instant) -> Sleep;

    /// True when this clock is the machine's own time, as [`SystemClock`] is. On such a
    /// clock a thread pool reads the time for its queue-time histogram for a sample of its
    /// tasks only; on any other (the default: a test's [`ManualClock`], a simulation's)
    /// every queued task is timed, so its waits are exact.
    fn is_system_time(&self) -> bool {
        false
    }
}

/// The real clock: [`Instant::now`], thread parking with a timeout, and a runtime-free timer.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn park_until(&self, deadline: Instant) {
        let now = Instant::now();
        if deadline > now {
            std::thread::park_timeout(deadline - now);
        }
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let remaining = deadline.saturating_duration_since(Instant::now());
        Box::pin(futures_timer::Delay::new(remaining))
    }

    fn is_system_time(&self) -> bool {
        true
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years), for atomics.
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The process's default clock.
pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// A clock for tests: time stands still until [`advance`](ManualClock::advance) moves it,
/// which wakes every thread and future whose deadline has passed.
///
/// ```
/// use std::time::Duration;
/// use bulkhead::{Clock, ManualClock};
/// let clock = ManualClock::new();
/// let start = clock.now();
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(clock.now() - start, Duration::from_millis(250));
/// ```
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

struct ManualInner {
    base: Instant,
    state: Mutex<ManualState>,
}

#[derive(Default)]
struct ManualState {
    offset: Duration,
    next_id: u64,
    sleepers: Vec<Sleeper>,
}

struct Sleeper {
    id: u64,
    deadline: Instant,
    wake: Wake,
}

enum Wake {
    Thread(Thread),
    Task(Waker),
}

impl ManualClock {
    /// A clock standing at an arbitrary starting instant.
    pub fn new() -> Self {
        ManualClock {
            inner: Arc::new(ManualInner {
                base: Instant::now(),
                state: Mutex::new(ManualState::default()),
            }),
        }
    }

    /// Moves time forward by `by`, waking every waiter whose deadline is now due.
    pub fn advance(&self, by: Duration) {
        let due: Vec<Wake> = {
            let mut state = self.inner.state.lock();
            state.offset += by;
            let now = self.inner.base + state.offset;
            let (due, waiting): (Vec<Sleeper>, Vec<Sleeper>) =
                state.sleepers.drain(..).partition(|s| s.deadline <= now);
            state.sleepers = waiting;
            due.into_iter().map(|s| s.wake).collect()
        };
        for wake in due {
            match wake {
                Wake::Thread(thread) => thread.unpark(),
                Wake::Task(waker) => waker.wake(),
            }
        }
    }

    /// How many threads and futures are waiting on this clock right now. Tests wait for this
    /// to reach the expected count (a latch) before they advance time.
    pub fn sleepers(&self) -> usize {
        self.inner.state.lock().sleepers.len()
    }

    /// Spins (yielding the thread) until at least `n` waiters are parked on this clock.
    /// A test helper: it replaces "sleep and hope the other thread got there".
    pub fn wait_for_sleepers(&self, n: usize) {
        while self.sleepers() < n {
            std::thread::yield_now();
        }
    }

    fn register(&self, deadline: Instant, wake: Wake) -> Option<u64> {
        let mut state = self.inner.state.lock();
        if self.inner.base + state.offset >= deadline {
            return None;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.sleepers.push(Sleeper { id, deadline, wake });
        Some(id)
    }

    fn deregister(&self, id: u64) {
        self.inner.state.lock().sleepers.retain(|s| s.id != id);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("ManualClock")
            .field("elapsed", &state.offset)
            .field("sleepers", &state.sleepers.len())
            .finish()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.inner.base + self.inner.state.lock().offset
    }

    fn park_until(&self, deadline: Instant) {
        if let Some(id) = self.register(deadline, Wake::Thread(std::thread::current())) {
            // An advance or an unpark between register and park leaves the park token set,
            // so this returns at once: no lost wake-up.
            std::thread::park();
            self.deregister(id);
        }
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(ManualSleep {
            clock: self.clone(),
            deadline,
            id: None,
        })
    }
}

struct ManualSleep {
    clock: ManualClock,
    deadline: Instant,
    id: Option<u64>,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(id) = self.id.take() {
            self.clock.deregister(id);
        }
        match self
            .clock
            .register(self.deadline, Wake::Task(cx.waker().clone()))
        {
            None => Poll::Ready(()),
            Some(id) => {
                self.id = Some(id);
                Poll::Pending
            }
        }
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.clock.deregister(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_wakes_a_parked_thread_only_once_due() {
        let clock = ManualClock::new();
        let deadline = clock.now() + Duration::from_millis(100);
        let waiter = {
            let clock = clock.clone();
            std::thread::spawn(move || {
                while clock.now() < deadline {
                    clock.park_until(deadline);
                }
                clock.now()
            })
        };
        clock.wait_for_sleepers(1);
        clock.advance(Duration::from_millis(50));
        // Still not due: the waiter re-registers.
        clock.wait_for_sleepers(1);
        clock.advance(Duration::from_millis(50));
        assert_eq!(waiter.join().unwrap(), deadline);
        assert_eq!(clock.sleepers(), 0);
    }

    #[test]
    fn manual_sleep_completes_when_advanced() {
        let clock = ManualClock::new();
        let sleep = clock.sleep_until(clock.now() + Duration::from_secs(1));
        let handle = std::thread::spawn(move || futures_executor_block_on(sleep));
        clock.wait_for_sleepers(1);
        clock.advance(Duration::from_secs(1));
        handle.join().unwrap();
    }

    /// A minimal block_on for tests (no runtime dependency).
    fn futures_executor_block_on<F: Future>(fut: F) -> F::Output {
        struct ThreadWaker(Thread);
        impl std::task::Wake for ThreadWaker {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut fut = std::pin::pin!(fut);
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }
}

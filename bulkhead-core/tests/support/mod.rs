//! Helpers shared by the integration tests: manual polling, a manual clock as
//! `Arc<dyn Clock>`, config shorthands, latches and a deterministic generator.
// Each test crate uses its own subset of these.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use bulkhead_config_types::{Duration, RateLimitConfig, SemaphoreConfig, ThreadPoolConfig};
use bulkhead_core::{Clock, ManualClock};

#[path = "policies.rs"]
mod policies;
#[allow(unused_imports)] // each test crate uses its own subset
pub use policies::{WithPolicies, policies};

/// A fair semaphore config with `max_wait` in milliseconds.
pub fn semaphore(max_concurrent_calls: u32, max_wait_ms: u64) -> SemaphoreConfig {
    SemaphoreConfig {
        max_concurrent_calls,
        max_wait: Duration::from_millis(max_wait_ms),
        fair: true,
    }
}

/// A thread-pool config with these thread counts and queue capacity, defaults otherwise.
pub fn pool_config(core_threads: u32, max_threads: u32, queue_capacity: u32) -> ThreadPoolConfig {
    ThreadPoolConfig {
        core_threads,
        max_threads,
        queue_capacity,
        ..ThreadPoolConfig::default()
    }
}

/// A rate limit of `limit_for_period` per `refresh_period_ms`, waiting up to `timeout_ms`.
pub fn rate_limit(
    limit_for_period: u32,
    refresh_period_ms: u64,
    timeout_ms: u64,
) -> RateLimitConfig {
    RateLimitConfig {
        timeout: Duration::from_millis(timeout_ms),
        ..RateLimitConfig::per_process(limit_for_period, Duration::from_millis(refresh_period_ms))
    }
}

/// A manual clock and the same clock as the runtime takes it.
pub fn manual_clock() -> (ManualClock, Arc<dyn Clock>) {
    let clock = ManualClock::new();
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    (clock, shared)
}

/// Polls `fut` once with a waker that does nothing.
pub fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(Waker::noop()))
}

/// A small deterministic generator (xorshift64), so stress mixes are reproducible.
pub struct XorShift(pub u64);

impl XorShift {
    /// Seeds from any number (0 included).
    pub fn seeded(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A latch: threads block in [`wait`](Gate::wait) until the test [`open`](Gate::open)s it.
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    /// Blocks until the gate is open.
    pub fn wait(&self) {
        let (open, cv) = &*self.0;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
    }

    /// Opens the gate for good, releasing every waiter.
    pub fn open(&self) {
        let (open, cv) = &*self.0;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }
}

/// Spins (yielding) until `cond` holds: a latch on observable state, never a timed sleep.
pub fn wait_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        std::thread::yield_now();
    }
}

/// A future that is pending once (waking itself at once), then ready: one await point.
pub fn yield_once() -> impl Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
}

/// A clock whose `now` panics while armed (a bug in a user's `Clock`); time comes from a
/// manual clock that never moves by itself.
#[derive(Debug, Default)]
pub struct PanickingNow {
    clock: bulkhead_core::ManualClock,
    armed: std::sync::atomic::AtomicBool,
}

impl PanickingNow {
    pub fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn disarm(&self) {
        self.armed.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl bulkhead_core::Clock for PanickingNow {
    fn now(&self) -> std::time::Instant {
        if self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            panic!("a hostile clock");
        }
        self.clock.now()
    }
    fn park_until(&self, deadline: std::time::Instant) {
        self.clock.park_until(deadline);
    }
    fn sleep_until(&self, deadline: std::time::Instant) -> bulkhead_core::Sleep {
        self.clock.sleep_until(deadline)
    }
}

/// Runs `steps` on a thread of its own and fails, rather than hangs, if it has not
/// returned within ten seconds (`what` names it in the failure).
pub fn returns(what: &str, steps: impl FnOnce() + Send + 'static) {
    let (done, returned) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        steps();
        done.send(()).unwrap();
    });
    if returned
        .recv_timeout(std::time::Duration::from_secs(10))
        .is_err()
    {
        panic!("{what}: never returned");
    }
}

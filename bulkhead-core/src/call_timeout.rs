//! Call timeouts: how long an admitted call may run before its caller stops waiting.
//!
//! A bulkhead keeps its configured timeout in one atomic ([`CallTimeout`]; 0 = none, so a
//! bulkhead without one pays a relaxed load per async call). An async body is raced
//! against the bulkhead's clock ([`Deadline`]): at the deadline the body's future is
//! dropped, which releases its permit or frees its worker at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::clock::{Clock, Sleep, duration_nanos};

/// A bulkhead's call timeout, changed live by a reload.
#[derive(Debug, Default)]
pub(crate) struct CallTimeout {
    nanos: AtomicU64,
}

impl CallTimeout {
    pub(crate) fn set(&self, timeout: Option<Duration>) {
        self.nanos
            .store(timeout.map_or(0, |t| duration_nanos(t).max(1)), Relaxed);
    }

    #[inline]
    pub(crate) fn get(&self) -> Option<Duration> {
        match self.nanos.load(Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// The deadline of a call starting now, if a timeout is set.
    #[inline]
    pub(crate) fn deadline(&self, clock: &dyn Clock) -> Option<(Instant, Duration)> {
        let timeout = self.get()?;
        Some((clock.now().checked_add(timeout)?, timeout))
    }
}

pin_project_lite::pin_project! {
    /// `body`, or [`Elapsed`] once the clock reaches the deadline (checked before each
    /// poll of the body, so a body whose deadline has passed is never polled again).
    pub(crate) struct Deadline<F> {
        #[pin]
        body: F,
        sleep: Option<Sleep>,
    }
}

/// The deadline passed before the body finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Elapsed;

impl<F> Deadline<F> {
    /// `body` raced against `clock` reaching `deadline` (`None`: no deadline).
    pub(crate) fn new(body: F, clock: &dyn Clock, deadline: Option<Instant>) -> Self {
        Deadline {
            body,
            sleep: deadline.map(|at| clock.sleep_until(at)),
        }
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some(sleep) = this.sleep
            && sleep.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(Elapsed));
        }
        this.body.poll(cx).map(Ok)
    }
}

thread_local! {
    /// Set on a pool's worker when the body it runs was cut at its deadline, so the job
    /// counts it `cancelled` rather than `completed`.
    static CUT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the body this thread runs as cut at its deadline.
pub(crate) fn mark_cut() {
    CUT.with(|cut| cut.set(true));
}

/// Whether the body this thread just ran was cut at its deadline (and clears the mark).
#[inline]
pub(crate) fn take_cut() -> bool {
    CUT.with(|cut| cut.replace(false))
}

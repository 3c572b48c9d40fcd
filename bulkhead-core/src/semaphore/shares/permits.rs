//! What an admission through the shares hands out: [`SharePermit`] (sync) and
//! [`AsyncSharePermit`]: the bulkhead's own permit, then the counts it travels with.

use std::fmt;
use std::future::Future;

use crate::BulkheadError;
use crate::semaphore::{AsyncPermit, Permit};
use crate::shares::Holds;

/// A permit taken through an [`Admission`](super::Admission): the bulkhead's [`Permit`] and the counts of
/// its partition and key, all returned when it drops (the permit first).
///
/// While it is held, its thread is inside the bulkhead: another permit taken on the same
/// thread is re-entrant ([`is_reentrant`](Self::is_reentrant)) and holds nothing — no
/// permit, no partition or key count.
#[must_use = "the call is admitted only while the permit is held"]
pub struct SharePermit<'a> {
    permit: Permit<'a>,
    holds: Holds<'a>,
}

impl<'a> SharePermit<'a> {
    pub(super) fn new(permit: Permit<'a>, holds: Holds<'a>) -> Self {
        SharePermit { permit, holds }
    }

    /// True when the thread was already inside the bulkhead: nothing is held or counted.
    pub fn is_reentrant(&self) -> bool {
        self.permit.is_reentrant()
    }
}

impl fmt::Debug for SharePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharePermit")
            .field("reentrant", &self.is_reentrant())
            .field("counted", &self.holds)
            .finish()
    }
}

/// The async form of [`SharePermit`]: `Send`; run the body with
/// [`run_async`](Self::run_async).
#[must_use = "the call is admitted only while the permit is held"]
pub struct AsyncSharePermit<'a> {
    permit: AsyncPermit<'a>,
    holds: Holds<'a>,
}

impl<'a> AsyncSharePermit<'a> {
    pub(super) fn new(permit: AsyncPermit<'a>, holds: Holds<'a>) -> Self {
        AsyncSharePermit { permit, holds }
    }

    /// The permit and the counts, for an owned permit.
    pub(super) fn into_parts(self) -> (AsyncPermit<'a>, Holds<'a>) {
        (self.permit, self.holds)
    }

    /// True when the task was already inside the bulkhead: nothing is held or counted.
    pub fn is_reentrant(&self) -> bool {
        self.permit.is_reentrant()
    }

    /// Awaits `body` while holding the permit and the counts (see
    /// [`AsyncPermit::run_async`]); all are returned when it finishes or is dropped.
    pub async fn run_async<F: Future>(self, body: F) -> F::Output {
        let AsyncSharePermit { permit, holds } = self;
        let output = permit.run_async(body).await;
        drop(holds);
        output
    }

    /// [`run_async`](Self::run_async) under the bulkhead's call timeout, as
    /// [`AsyncPermit::run_timed`] does.
    ///
    /// # Errors
    ///
    /// [`BulkheadError::CallTimeout`] when `body` ran past the bulkhead's `timeout`.
    pub async fn run_timed<F: Future>(self, body: F) -> Result<F::Output, BulkheadError> {
        let AsyncSharePermit { permit, holds } = self;
        let output = permit.run_timed(body).await;
        drop(holds);
        output
    }
}

impl fmt::Debug for AsyncSharePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncSharePermit")
            .field("reentrant", &self.is_reentrant())
            .finish()
    }
}

//! What a refused call gets back.
//!
//! Every refused call receives exactly one [`BulkheadError`], naming the bulkhead that
//! refused it. Building one never allocates: the name is a shared [`BulkheadName`].

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

/// A bulkhead's name, cheap to clone: a `&'static str` (copied) or a shared string
/// (reference-counted). Names of registered bulkheads are static, so refusing a call and
/// dropping the error touch no shared counter at all.
#[derive(Clone)]
pub struct BulkheadName(Repr);

#[derive(Clone)]
enum Repr {
    Static(&'static str),
    Shared(Arc<str>),
}

impl BulkheadName {
    /// Makes a name (a shared copy of `name`).
    pub fn new(name: impl AsRef<str>) -> Self {
        BulkheadName(Repr::Shared(Arc::from(name.as_ref())))
    }

    /// Makes a name from a string that lives for the whole program; cloning it is a copy.
    ///
    /// ```
    /// use bulkhead::BulkheadName;
    /// const PAYMENT: BulkheadName = BulkheadName::from_static("payment");
    /// assert_eq!(PAYMENT, BulkheadName::new("payment"));
    /// ```
    pub const fn from_static(name: &'static str) -> Self {
        BulkheadName(Repr::Static(name))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Static(name) => name,
            Repr::Shared(name) => name,
        }
    }
}

impl PartialEq for BulkheadName {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for BulkheadName {}

impl std::hash::Hash for BulkheadName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for BulkheadName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BulkheadName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Deref for BulkheadName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for BulkheadName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for BulkheadName {
    fn from(s: &str) -> Self {
        BulkheadName::new(s)
    }
}

impl From<&BulkheadName> for BulkheadName {
    fn from(name: &BulkheadName) -> Self {
        name.clone()
    }
}

impl fmt::Display for BulkheadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for BulkheadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Why a bulkhead refused a call (its body did not run), or stopped waiting for one
/// ([`BulkheadError::CallTimeout`]: the body ran past the bulkhead's `timeout`).
///
/// ```
/// use bulkhead::{BulkheadError, BulkheadName};
/// let err = BulkheadError::Full { name: BulkheadName::new("payment") };
/// assert_eq!(err.name(), "payment");
/// assert_eq!(
///     err.to_string(),
///     "bulkhead `payment` is full: every permit or worker is busy and its queue is full"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BulkheadError {
    /// No permit or thread was free, the queue (if any) was full, and the bulkhead does not wait.
    #[error("bulkhead `{name}` is full: every permit or worker is busy and its queue is full")]
    Full {
        /// The bulkhead that refused.
        name: BulkheadName,
    },
    /// The call waited its whole allowance (`max_wait`, or `on_full: { wait }`) for room.
    #[error("bulkhead `{name}` is full: no room within {waited:?}")]
    Timeout {
        /// The bulkhead that refused.
        name: BulkheadName,
        /// How long the call waited.
        waited: Duration,
    },
    /// The call was queued but waited longer than `max_queue_wait` (or CoDel's target while the
    /// queue was standing); it was failed instead of run, because its caller has likely given up.
    #[error(
        "bulkhead `{name}` dropped a queued call that waited {waited:?}: too long in the queue"
    )]
    QueueTimeout {
        /// The bulkhead that refused.
        name: BulkheadName,
        /// How long the call spent in the queue.
        waited: Duration,
    },
    /// The bulkhead's rate limit allows no more calls in this period.
    #[error("bulkhead `{name}` is rate limited: retry after {retry_after:?}")]
    RateLimited {
        /// The bulkhead that refused.
        name: BulkheadName,
        /// When a call may next be admitted.
        retry_after: Duration,
    },
    /// The bulkhead is shutting down or shut down and admits no more work.
    #[error("bulkhead `{name}` is shut down")]
    ShutDown {
        /// The bulkhead that refused.
        name: BulkheadName,
    },
    /// The call's key (a tenant, a user) already holds its cap of the bulkhead
    /// (`per_key.max_concurrent_calls`); other keys are still admitted.
    #[error(
        "bulkhead `{name}` refused a call: its key already holds the most calls one key may \
         (per_key.max_concurrent_calls)"
    )]
    KeyLimit {
        /// The bulkhead that refused.
        name: BulkheadName,
    },
    /// The call was admitted but ran longer than the bulkhead's `timeout`, so its caller
    /// stopped waiting. Unlike the other variants the body did start: an async body was
    /// dropped at the deadline (its permit or worker freed at once); a synchronous
    /// thread-pool body runs on to its end on the worker and its result is discarded.
    #[error(
        "bulkhead `{name}` stopped waiting for a call after {after:?}: it ran past its timeout"
    )]
    CallTimeout {
        /// The bulkhead whose timeout passed.
        name: BulkheadName,
        /// The configured timeout.
        after: Duration,
    },
}

impl BulkheadError {
    /// The name of the bulkhead that refused the call.
    pub fn name(&self) -> &str {
        match self {
            BulkheadError::Full { name }
            | BulkheadError::Timeout { name, .. }
            | BulkheadError::QueueTimeout { name, .. }
            | BulkheadError::RateLimited { name, .. }
            | BulkheadError::ShutDown { name }
            | BulkheadError::KeyLimit { name }
            | BulkheadError::CallTimeout { name, .. } => name,
        }
    }

    /// For [`BulkheadError::RateLimited`], how long until a call may be admitted.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            BulkheadError::RateLimited { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// A short, stable label for metrics and logs: `full`, `timeout`, `queue_timeout`,
    /// `rate_limited`, `shut_down`, `key_limit` or `call_timeout`.
    pub fn reason(&self) -> &'static str {
        match self {
            BulkheadError::Full { .. } => "full",
            BulkheadError::Timeout { .. } => "timeout",
            BulkheadError::QueueTimeout { .. } => "queue_timeout",
            BulkheadError::RateLimited { .. } => "rate_limited",
            BulkheadError::ShutDown { .. } => "shut_down",
            BulkheadError::KeyLimit { .. } => "key_limit",
            BulkheadError::CallTimeout { .. } => "call_timeout",
        }
    }
}

/// A call that was refused before its body ran, handing back the input it was given so a
/// fallback can still use the caller's arguments.
#[derive(Debug)]
pub struct Refused<I> {
    /// The input the call was given, untouched.
    pub input: I,
    /// Why the call was refused.
    pub error: BulkheadError,
}

impl<I> From<Refused<I>> for BulkheadError {
    fn from(refused: Refused<I>) -> Self {
        refused.error
    }
}

impl<I> fmt::Display for Refused<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<I: fmt::Debug> std::error::Error for Refused<I> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

//! Dividing one bulkhead's limit: named shares with a guarantee each ([`Partitions`],
//! [`guaranteed_slots`]) and a cap per key ([`PerKeyConfig`]), on either kind of bulkhead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Named shares of a bulkhead's limit: `partitions: { live: 0.8, batch: 0.2 }`.
///
/// Each share is above 0 and at most 1, and the shares add up to at most 1. With the
/// limit in force `L` (declared, resized or adaptive, read at each admission), partition
/// `p` is **guaranteed** `floor(share × L)` slots. The rules, applied at each admission:
///
/// 1. A call of a partition holding (or waiting for) fewer slots than its guarantee is
///    admitted like any call of the bulkhead: at once when a slot is free, otherwise it
///    waits up to `max_wait` in the bulkhead's first-come queue.
/// 2. A call of a partition at or above its guarantee **borrows**: it takes a slot only if
///    one is free at that instant and nobody is waiting; it never waits, and is refused
///    with `Full` otherwise.
/// 3. So only calls below their guarantee wait, and a released slot — borrowed or not —
///    goes to the longest waiter: borrowed capacity is given back at the borrower's next
///    release. The bulkhead's own limit is never exceeded.
///
/// A share that rounds down to no slot guarantees nothing but may still borrow, as do
/// calls that name no partition. What the shares leave over (`1 − sum`) is guaranteed to
/// no one: any partition may borrow it. On a semaphore, partitions need `fair: true`, the
/// default. On a thread pool the limit divided is what the pool admits, calls running plus
/// queued (`max_threads + queue_capacity`, or the adaptive limit plus the queue); "waits"
/// above is the pool's `on_full` (`{ wait }` waits for room, `caller-runs` runs the call on
/// its caller), and a borrower takes a slot only while nobody waits for room.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
#[cfg_attr(
    feature = "schema",
    schemars(extend(
        "additionalProperties" = { "type": "number", "exclusiveMinimum": 0.0, "maximum": 1.0 },
        "propertyNames" = { "pattern": "^[A-Za-z0-9_-]+$" },
        "maxProperties" = 16
    ))
)]
pub struct Partitions {
    /// The share of each partition, by name.
    pub shares: BTreeMap<String, f64>,
}

impl Partitions {
    /// Partitions with the given shares.
    ///
    /// ```
    /// use bulkhead::config::Partitions;
    /// let p = Partitions::new([("live", 0.8), ("batch", 0.2)]);
    /// assert_eq!(p.guaranteed("batch", 10), Some(2));
    /// assert_eq!(p.guaranteed("live", 10), Some(8));
    /// assert_eq!(p.guaranteed("other", 10), None);
    /// ```
    pub fn new<'a>(shares: impl IntoIterator<Item = (&'a str, f64)>) -> Self {
        Partitions {
            shares: shares
                .into_iter()
                .map(|(name, share)| (name.to_owned(), share))
                .collect(),
        }
    }

    /// True when the bulkhead is not partitioned.
    pub fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }

    /// The partition names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.shares.keys().map(String::as_str)
    }

    /// A fingerprint of the names (FNV-1a over the sorted names): code built against one
    /// set of names checks with one comparison that a running bulkhead has the same set,
    /// and then trusts a partition's place among them.
    ///
    /// ```
    /// use bulkhead::config::Partitions;
    /// let a = Partitions::new([("live", 0.8), ("batch", 0.2)]);
    /// let b = Partitions::new([("batch", 0.5), ("live", 0.5)]);
    /// assert_eq!(a.fingerprint(), b.fingerprint(), "shares do not count");
    /// assert_ne!(a.fingerprint(), Partitions::new([("live", 1.0)]).fingerprint());
    /// ```
    pub fn fingerprint(&self) -> u64 {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for name in self.names() {
            // 0xff never occurs in UTF-8: it ends each name.
            for &byte in name.as_bytes().iter().chain(&[0xff]) {
                hash = (hash ^ u64::from(byte)).wrapping_mul(PRIME);
            }
        }
        hash
    }

    /// The slots `name` is guaranteed under a limit of `limit`: `floor(share × limit)`.
    pub fn guaranteed(&self, name: &str, limit: u32) -> Option<u32> {
        self.shares
            .get(name)
            .map(|share| guaranteed_slots(*share, limit))
    }
}

/// `floor(share × limit)`, for a share in (0, 1]; 0 for anything else.
#[inline]
pub fn guaranteed_slots(share: f64, limit: u32) -> u32 {
    if share.is_finite() && share > 0.0 {
        // At most `limit` (share ≤ 1): the cast cannot overflow.
        (share.min(1.0) * f64::from(limit)).floor() as u32
    } else {
        0
    }
}

/// A cap per key: `per_key: { max_concurrent_calls: 2, max_keys: 10000 }`.
///
/// No key (a tenant, a user, any `Hash + Eq` value the call names) holds more than
/// `max_concurrent_calls` of the bulkhead at once; a call over it is refused with
/// `KeyLimit` before it reaches the bulkhead. At most `max_keys` keys are tracked (an idle
/// key keeps its place until a new key needs it). While `max_keys` keys are busy, every
/// further key shares one overflow entry, itself capped at `max_concurrent_calls`: memory
/// stays bounded and new keys still get in, but together they get one key's share. A key
/// with calls in the overflow entry gets a place of its own only once they end, so its
/// calls are counted under one count: it never holds more than `max_concurrent_calls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PerKeyConfig {
    /// The most calls one key may hold at once (at least 1).
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub max_concurrent_calls: u32,
    /// The most keys tracked at once (at least 1). Default 10000.
    #[serde(default = "PerKeyConfig::default_max_keys")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 1_000_000)))]
    pub max_keys: u32,
}

impl PerKeyConfig {
    /// At most `max_concurrent_calls` per key, with the default bound on tracked keys.
    pub fn new(max_concurrent_calls: u32) -> Self {
        PerKeyConfig {
            max_concurrent_calls,
            max_keys: Self::default_max_keys(),
        }
    }

    fn default_max_keys() -> u32 {
        10_000
    }
}

//! Lints of `partitions`: a share too small to guarantee anything at the declared size, and
//! partitions whose calls below their share cannot wait for a slot (the types and their
//! rules are in `bulkhead_config_types`; docs/partitions.md explains both).

use crate::{BulkheadConfig, Limits, OnFull, guaranteed_slots};

/// The warnings for a bulkhead's `partitions`, each with the key path it is about.
pub(crate) fn shares_lints(bulkhead: &BulkheadConfig) -> Vec<(Vec<&str>, String)> {
    let shares = &bulkhead.partitions.shares;
    if shares.is_empty() {
        return Vec::new();
    }
    let limit = bulkhead.shared_limit();
    let (slot, size) = match &bulkhead.limits {
        Limits::ThreadPool(pool) => (
            "slot",
            format!(
                "{} threads + {} queued",
                pool.max_threads, pool.queue_capacity
            ),
        ),
        _ => ("permit", format!("{limit} permits")),
    };
    let mut lints: Vec<(Vec<&str>, String)> = shares
        .iter()
        .filter(|(_, share)| guaranteed_slots(**share, limit) == 0)
        .map(|(name, share)| {
            (
                vec!["partitions", name.as_str()],
                format!(
                    "guarantees no {slot}: {share} of {size} rounds down to 0, so the calls of \
                     `{name}` only borrow a free {slot} and are refused while the bulkhead is \
                     busy; raise the share to at least {} or the bulkhead's size",
                    smallest_share(limit)
                ),
            )
        })
        .collect();
    let fail_fast = match &bulkhead.limits {
        Limits::Semaphore(semaphore) if semaphore.max_wait.is_zero() => Some(
            "with `max_wait: 0`, a call below its partition's share that finds every permit \
             taken by borrowers is refused instead of waiting for the next release: set \
             `max_wait` to about one call's latency",
        ),
        Limits::ThreadPool(pool) if pool.on_full == OnFull::Abort => Some(
            "with `on_full: abort`, a call below its partition's share that finds the pool full \
             of borrowers is refused instead of waiting for the next free slot: give the pool \
             `on_full: { wait: … }` of about one call's latency",
        ),
        _ => None,
    };
    if let Some(message) = fail_fast {
        lints.push((vec!["partitions"], message.to_owned()));
    }
    lints
}

/// The smallest share (to a thousandth, rounded up) guaranteed one of `limit` slots.
fn smallest_share(limit: u32) -> f64 {
    if limit == 0 {
        return 1.0;
    }
    ((1000.0 / f64::from(limit)).ceil() / 1000.0).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::smallest_share;
    use crate::guaranteed_slots;

    #[test]
    fn the_smallest_share_suggested_guarantees_one_slot() {
        for limit in 1..=5000 {
            let share = smallest_share(limit);
            assert!(guaranteed_slots(share, limit) >= 1, "{share} of {limit}");
        }
    }
}

//! Which calls an adaptive limit times: one in `sample_every`, chosen so that timing stays
//! a small part of what the calls themselves take.
//!
//! Timing a call costs two reads of the bulkhead's clock and a lock (about 100 ns on a
//! virtual machine, where a clock read alone is 30–40 ns), which would be most of the cost
//! of a fast call. So a call is timed with probability `1 / sample_every`, where
//! `sample_every` is the smallest power of two that makes the timed calls at least
//! [`SAMPLING_SPAN`] of call time apart on average (at most [`MAX_SAMPLE_EVERY`]):
//! a dependency that takes 10 µs or more has every call timed; one that takes 1 µs one
//! call in 16; a call of 40 ns or less one in 256. A call that is not
//! timed costs one step of a per-thread generator (a few shifts).
//!
//! Invariants: `sample_every` is a power of two in `1..=MAX_SAMPLE_EVERY`; drops (panics,
//! cancellations, calls marked overloaded) are counted whether or not their call was
//! timed; the choice of which calls to time does not depend on the bulkhead, so two
//! adaptive bulkheads used in turn on one thread are each sampled at their own rate.

use std::cell::Cell;
use std::time::Duration;

/// Timed calls are at least this much call time apart on average: with a timed call
/// costing about 100 ns more than an untimed one, timing adds about 1 % to the calls.
pub const SAMPLING_SPAN: Duration = Duration::from_micros(10);

/// The sparsest sampling: one call in this many is timed, however fast the calls.
pub const MAX_SAMPLE_EVERY: u32 = 256;

/// The sampling for calls whose mean latency is `mean_rtt`: the smallest power of two
/// `n` with `n × mean_rtt ≥ SAMPLING_SPAN`, within `1..=MAX_SAMPLE_EVERY`.
///
/// ```
/// use std::time::Duration;
/// use bulkhead_core::adaptive::{MAX_SAMPLE_EVERY, sample_every_for};
///
/// assert_eq!(sample_every_for(Duration::from_millis(5)), 1);
/// assert_eq!(sample_every_for(Duration::from_micros(1)), 16);
/// assert_eq!(sample_every_for(Duration::from_nanos(100)), 128);
/// assert_eq!(sample_every_for(Duration::from_nanos(30)), MAX_SAMPLE_EVERY);
/// assert_eq!(sample_every_for(Duration::ZERO), MAX_SAMPLE_EVERY);
/// ```
pub fn sample_every_for(mean_rtt: Duration) -> u32 {
    let span = SAMPLING_SPAN.as_nanos();
    match mean_rtt.as_nanos() {
        0 => MAX_SAMPLE_EVERY,
        rtt => u32::try_from(span.div_ceil(rtt))
            .unwrap_or(u32::MAX)
            .min(MAX_SAMPLE_EVERY)
            .next_power_of_two(),
    }
}

#[cfg(not(loom))]
thread_local! {
    /// This thread's xorshift generator (never 0). No destructor: a direct thread-local.
    static DRAWS: Cell<u32> = const { Cell::new(0x9E37_79B9) };
}

// Under loom the model's threads share the OS thread's thread-locals, which also outlive
// each explored execution; loom's own start afresh in every execution, so each execution
// times the same calls (a model must be deterministic).
#[cfg(loom)]
loom::thread_local! {
    static DRAWS: Cell<u32> = Cell::new(0x9E37_79B9);
}

/// Whether to time this call, with one in `every` (a power of two) timed.
#[inline]
pub(crate) fn draw(every: u32) -> bool {
    every <= 1
        || DRAWS.with(|state| {
            let mut x = state.get();
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            state.set(x);
            x & (every - 1) == 0
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampling_is_a_power_of_two_within_its_bounds() {
        for nanos in [
            0,
            1,
            39,
            40,
            156,
            157,
            1_000,
            9_999,
            10_000,
            10_001,
            u64::MAX,
        ] {
            let every = sample_every_for(Duration::from_nanos(nanos));
            assert!(
                every.is_power_of_two() && every <= MAX_SAMPLE_EVERY,
                "{nanos}: {every}"
            );
        }
        assert_eq!(sample_every_for(Duration::from_micros(10)), 1);
        assert_eq!(sample_every_for(Duration::from_micros(5)), 2);
        assert_eq!(sample_every_for(Duration::from_nanos(4_999)), 4);
    }

    #[test]
    fn about_one_call_in_every_is_drawn() {
        assert!((0..100).all(|_| draw(1)));
        let drawn = (0..256_000).filter(|_| draw(256)).count();
        assert!(
            (800..1_200).contains(&drawn),
            "{drawn} of 256000 drawn at 1 in 256"
        );
    }
}

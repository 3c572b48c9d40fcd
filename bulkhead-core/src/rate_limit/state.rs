//! The rate limiter's state word: the current cycle and the permissions left in it, packed
//! in one `u64` so that both change in one compare-and-swap (invariant 1 of `rate_limit.rs`).

/// One state word of `cycle` (modulo 2³²) and `permissions` (clamped to `i32`).
pub(super) fn pack(cycle: u64, permissions: i64) -> u64 {
    let permissions = permissions.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    (u64::from(cycle as u32) << 32) | u64::from(permissions as u32)
}

/// The cycle and permissions of a state word.
pub(super) fn unpack(state: u64) -> (u32, i64) {
    ((state >> 32) as u32, i64::from(state as u32 as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips_negative_permissions_and_wrapping_cycles() {
        for (cycle, permissions) in [(0, 0), (7, -3), (u64::from(u32::MAX) + 5, 12)] {
            let (c, p) = unpack(pack(cycle, permissions));
            assert_eq!((u64::from(c), p), (cycle & 0xFFFF_FFFF, permissions));
        }
    }
}

//! Saturation levels: how close a bulkhead is to refusing, as `ok` / `warning` / `critical`.
//!
//! The level is the worse of two readings against the bulkhead's
//! [`SaturationThresholds`] (defaults 80%/95% active, 70%/90% queued): active calls over the concurrency limit
//! (80 % warning, 95 % critical) and, for a thread pool with a queue, queued tasks over the
//! queue capacity (70 % / 90 %). A threshold is reached when the ratio is at least it.
//!
//! Saturation is information for dashboards and alerts. It is **never** a reason to fail a
//! health check: a saturated bulkhead is doing its job, and an instance taken out
//! of rotation for it moves its load onto the others.

use std::fmt;

use bulkhead_config_types::SaturationThresholds;

/// How close a bulkhead is to refusing calls. Ordered: `Ok < Warning < Critical`.
///
/// ```
/// use bulkhead::SaturationLevel;
/// assert!(SaturationLevel::Ok < SaturationLevel::Critical);
/// assert_eq!(SaturationLevel::Warning.as_str(), "warning");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SaturationLevel {
    /// Below every warning threshold.
    #[default]
    Ok,
    /// At or above a warning threshold, below every critical one.
    Warning,
    /// At or above a critical threshold.
    Critical,
}

impl SaturationLevel {
    /// Every level, lowest first.
    pub const ALL: [SaturationLevel; 3] = [
        SaturationLevel::Ok,
        SaturationLevel::Warning,
        SaturationLevel::Critical,
    ];

    /// `ok`, `warning` or `critical`: the label used in logs and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            SaturationLevel::Ok => "ok",
            SaturationLevel::Warning => "warning",
            SaturationLevel::Critical => "critical",
        }
    }

    /// The level of `used / capacity` against a warning and a critical fraction. A
    /// capacity of 0 reads as `Ok` (nothing to fill: a semaphore's queue, a direct hand-off).
    pub(crate) fn of(used: u32, capacity: u32, warning: f64, critical: f64) -> Self {
        if capacity == 0 {
            return SaturationLevel::Ok;
        }
        let ratio = f64::from(used) / f64::from(capacity);
        if ratio >= critical {
            SaturationLevel::Critical
        } else if ratio >= warning {
            SaturationLevel::Warning
        } else {
            SaturationLevel::Ok
        }
    }

    /// The worse of the active and queue readings.
    pub(crate) fn assess(
        thresholds: &SaturationThresholds,
        active: u32,
        limit: u32,
        queued: u32,
        queue_capacity: u32,
    ) -> Self {
        let active = Self::of(
            active,
            limit,
            thresholds.active_warning,
            thresholds.active_critical,
        );
        let queue = Self::of(
            queued,
            queue_capacity,
            thresholds.queue_warning,
            thresholds.queue_critical,
        );
        active.max(queue)
    }
}

impl fmt::Display for SaturationLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(active: u32, limit: u32, queued: u32, capacity: u32) -> SaturationLevel {
        SaturationLevel::assess(
            &SaturationThresholds::default(),
            active,
            limit,
            queued,
            capacity,
        )
    }

    #[test]
    fn default_thresholds_are_eighty_ninety_five_active_and_seventy_ninety_queue() {
        assert_eq!(level(79, 100, 0, 0), SaturationLevel::Ok);
        assert_eq!(level(80, 100, 0, 0), SaturationLevel::Warning);
        assert_eq!(level(95, 100, 0, 0), SaturationLevel::Critical);
        assert_eq!(level(0, 10, 69, 100), SaturationLevel::Ok);
        assert_eq!(level(0, 10, 70, 100), SaturationLevel::Warning);
        assert_eq!(level(0, 10, 90, 100), SaturationLevel::Critical);
    }

    #[test]
    fn the_worse_reading_wins() {
        assert_eq!(level(10, 10, 0, 100), SaturationLevel::Critical);
        assert_eq!(level(1, 10, 95, 100), SaturationLevel::Critical);
        assert_eq!(level(8, 10, 95, 100), SaturationLevel::Critical);
    }

    #[test]
    fn nothing_to_fill_reads_ok() {
        assert_eq!(level(0, 0, 0, 0), SaturationLevel::Ok);
    }
}

//! The `adaptive` setting: a limit that follows the dependency's latency between declared
//! bounds, instead of a hand-sized number.
//!
//! One struct for every algorithm: the common bounds (`min_limit`, `max_limit`,
//! `initial_limit`) and each algorithm's parameters, optional, with the defaults below.
//! A parameter of another algorithm than the one chosen is ignored (and linted), so a
//! deploy layer may switch the algorithm without having to delete keys it cannot remove.

use serde::{Deserialize, Serialize};

use crate::Duration;

/// An adaptive limit: the bulkhead's limit (concurrent calls of a semaphore, calls
/// running on a pool's workers) is set by `algorithm` from the latency and the drops of
/// the calls it admits, between `min_limit` and `max_limit`.
///
/// `max_limit` defaults to the declared size (`max_concurrent_calls`, `max_threads`),
/// which stays the hard bound: threads and queue never exceed what is declared.
///
/// ```
/// use bulkhead::config::{AdaptiveAlgorithm, AdaptiveConfig};
/// let adaptive = AdaptiveConfig::new(AdaptiveAlgorithm::Gradient2);
/// assert_eq!(adaptive.max_limit(200), 200);
/// assert_eq!(adaptive.initial_limit(200), 20);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AdaptiveConfig {
    /// `vegas`, `gradient2` or `aimd` (or `off`: the declared static limit, for a deploy
    /// that switches an adaptive bulkhead back).
    pub algorithm: AdaptiveAlgorithm,
    /// The limit never goes below this (at least 1). Default 1.
    #[serde(default = "default_min_limit")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub min_limit: u32,
    /// The limit never goes above this, nor above the declared size. Default: the declared
    /// size (`max_concurrent_calls` or `max_threads`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub max_limit: Option<u32>,
    /// The limit at start, between `min_limit` and `max_limit`. Default 20 (within the bounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub initial_limit: Option<u32>,
    /// Vegas and Gradient2: every this many windows (a window is about one round trip of
    /// calls) the limit drops to a tenth for one window to measure the no-load latency
    /// again. Default 100 (about 1 % of the time at reduced limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub probe_interval: Option<u32>,
    /// Vegas: below this many calls queued at the dependency (× log10 of the limit) the
    /// limit grows. Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// Vegas: above this many calls queued at the dependency (× log10 of the limit) the
    /// limit shrinks. Default 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,
    /// Gradient2: how much slower than the no-load latency calls may get before the limit
    /// shrinks (1.0: not at all; the limit keeps √limit calls of headroom). Default 1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
    /// Gradient2: how far each window moves the limit toward its new estimate, above 0
    /// and at most 1. Default 0.5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoothing: Option<f64>,
    /// AIMD: the factor the limit is multiplied by after a window with a drop, above 0
    /// and below 1. Default 0.9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ratio: Option<f64>,
    /// AIMD: a window whose mean latency is above this counts as a drop. Default: none
    /// (only panics, timeouts and calls marked overloaded are drops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
}

/// The algorithm of an [`AdaptiveConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum AdaptiveAlgorithm {
    /// TCP Vegas: estimates the calls queued at the dependency from the no-load latency and
    /// keeps between `alpha` and `beta` (× log10 limit) of them. Latency-driven; needs no drops.
    Vegas,
    /// A gradient of no-load over current latency (Netflix Gradient2, Envoy's adaptive
    /// concurrency): the limit is scaled by it, plus √limit of headroom. Latency-driven.
    Gradient2,
    /// Additive increase, multiplicative decrease: +1 per window while the limit is used,
    /// × `backoff_ratio` after a window with a drop (or slower than `timeout`). Drop-driven.
    Aimd,
    /// No adaptive limit: the declared size is the limit.
    Off,
}

impl AdaptiveAlgorithm {
    /// The name used in config files.
    pub const fn as_str(self) -> &'static str {
        match self {
            AdaptiveAlgorithm::Vegas => "vegas",
            AdaptiveAlgorithm::Gradient2 => "gradient2",
            AdaptiveAlgorithm::Aimd => "aimd",
            AdaptiveAlgorithm::Off => "off",
        }
    }

    /// The parameters (keys of `adaptive`) that only this algorithm reads.
    pub const fn own_parameters(self) -> &'static [&'static str] {
        match self {
            AdaptiveAlgorithm::Vegas => &["alpha", "beta", "probe_interval"],
            AdaptiveAlgorithm::Gradient2 => &["tolerance", "smoothing", "probe_interval"],
            AdaptiveAlgorithm::Aimd => &["backoff_ratio", "timeout"],
            AdaptiveAlgorithm::Off => &[],
        }
    }
}

impl std::fmt::Display for AdaptiveAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The default `min_limit`.
pub const DEFAULT_MIN_LIMIT: u32 = 1;
/// The default `initial_limit` (clamped into the bounds).
pub const DEFAULT_INITIAL_LIMIT: u32 = 20;
/// The default `probe_interval`, in windows.
pub const DEFAULT_PROBE_INTERVAL: u32 = 100;
/// The default Vegas `alpha`.
pub const DEFAULT_VEGAS_ALPHA: f64 = 3.0;
/// The default Vegas `beta`.
pub const DEFAULT_VEGAS_BETA: f64 = 6.0;
/// The default Gradient2 `tolerance`.
pub const DEFAULT_GRADIENT2_TOLERANCE: f64 = 1.0;
/// The default Gradient2 `smoothing`.
pub const DEFAULT_GRADIENT2_SMOOTHING: f64 = 0.5;
/// The default AIMD `backoff_ratio`.
pub const DEFAULT_AIMD_BACKOFF_RATIO: f64 = 0.9;

fn default_min_limit() -> u32 {
    DEFAULT_MIN_LIMIT
}

impl AdaptiveConfig {
    /// `algorithm` with every other setting at its default.
    pub const fn new(algorithm: AdaptiveAlgorithm) -> Self {
        AdaptiveConfig {
            algorithm,
            min_limit: DEFAULT_MIN_LIMIT,
            max_limit: None,
            initial_limit: None,
            probe_interval: None,
            alpha: None,
            beta: None,
            tolerance: None,
            smoothing: None,
            backoff_ratio: None,
            timeout: None,
        }
    }

    /// The same with `min_limit`, `max_limit` and `initial_limit` set.
    #[must_use]
    pub const fn with_bounds(mut self, min: u32, initial: u32, max: u32) -> Self {
        self.min_limit = min;
        self.initial_limit = Some(initial);
        self.max_limit = Some(max);
        self
    }

    /// The upper bound for a bulkhead whose declared size is `declared`.
    pub fn max_limit(&self, declared: u32) -> u32 {
        self.max_limit
            .map_or(declared, |max| max.min(declared))
            .max(1)
    }

    /// The lower bound (at least 1, at most the upper bound).
    pub fn min_limit(&self, declared: u32) -> u32 {
        self.min_limit.clamp(1, self.max_limit(declared))
    }

    /// The limit at start, within the bounds.
    pub fn initial_limit(&self, declared: u32) -> u32 {
        self.initial_limit
            .unwrap_or(DEFAULT_INITIAL_LIMIT)
            .clamp(self.min_limit(declared), self.max_limit(declared))
    }

    /// Vegas and Gradient2: windows between two probes of the no-load latency.
    pub fn probe_interval(&self) -> u32 {
        self.probe_interval.unwrap_or(DEFAULT_PROBE_INTERVAL).max(1)
    }

    /// Vegas `alpha`.
    pub fn alpha(&self) -> f64 {
        self.alpha.unwrap_or(DEFAULT_VEGAS_ALPHA)
    }

    /// Vegas `beta`.
    pub fn beta(&self) -> f64 {
        self.beta.unwrap_or(DEFAULT_VEGAS_BETA)
    }

    /// Gradient2 `tolerance`.
    pub fn tolerance(&self) -> f64 {
        self.tolerance.unwrap_or(DEFAULT_GRADIENT2_TOLERANCE)
    }

    /// Gradient2 `smoothing`.
    pub fn smoothing(&self) -> f64 {
        self.smoothing.unwrap_or(DEFAULT_GRADIENT2_SMOOTHING)
    }

    /// AIMD `backoff_ratio`.
    pub fn backoff_ratio(&self) -> f64 {
        self.backoff_ratio.unwrap_or(DEFAULT_AIMD_BACKOFF_RATIO)
    }

    /// The parameters that are set although `algorithm` does not read them.
    pub fn ignored_parameters(&self) -> Vec<&'static str> {
        let set = [
            ("probe_interval", self.probe_interval.is_some()),
            ("alpha", self.alpha.is_some()),
            ("beta", self.beta.is_some()),
            ("tolerance", self.tolerance.is_some()),
            ("smoothing", self.smoothing.is_some()),
            ("backoff_ratio", self.backoff_ratio.is_some()),
            ("timeout", self.timeout.is_some()),
        ];
        let own = self.algorithm.own_parameters();
        set.into_iter()
            .filter(|(key, is_set)| *is_set && !own.contains(key))
            .map(|(key, _)| key)
            .collect()
    }
}

/// The errors in an `adaptive` setting of `config` (a resolved bulkhead), as the key under
/// `adaptive` and a message: bounds out of order or beyond the declared size, parameters
/// out of their range.
pub(crate) fn adaptive_problems(
    adaptive: &AdaptiveConfig,
    config: &crate::BulkheadConfig,
) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let declared = config.declared_size();
    let size_key = match config.kind() {
        crate::Kind::Semaphore => "max_concurrent_calls",
        crate::Kind::ThreadPool => "max_threads",
    };
    if adaptive.min_limit == 0 {
        problems.push((
            "min_limit",
            "is 0: no call could run while the limit is there; set it to at least 1".to_owned(),
        ));
    }
    let max = adaptive.max_limit.unwrap_or(declared);
    if let Some(set) = adaptive.max_limit {
        if set == 0 {
            problems.push(("max_limit", "is 0: set it to at least 1".to_owned()));
        } else if set > declared {
            problems.push((
                "max_limit",
                format!(
                    "is {set}, above `{size_key}` ({declared}): the declared size is the hard \
                     bound of an adaptive limit; raise `{size_key}` or lower `max_limit`"
                ),
            ));
        }
    }
    if adaptive.min_limit > max {
        problems.push((
            "min_limit",
            format!(
                "is {}, above the largest limit ({max}): `min_limit` must not exceed \
                 `max_limit` (default: `{size_key}`)",
                adaptive.min_limit
            ),
        ));
    }
    if let Some(initial) = adaptive.initial_limit
        && (initial < adaptive.min_limit || initial > max)
    {
        problems.push((
            "initial_limit",
            format!(
                "is {initial}, outside {}..={max}: it must lie between `min_limit` and \
                 `max_limit` (default: `{size_key}`)",
                adaptive.min_limit
            ),
        ));
    }
    if adaptive.probe_interval == Some(0) {
        problems.push((
            "probe_interval",
            "is 0: set it to at least 1 window (default 100)".to_owned(),
        ));
    }
    let positive = |v: f64| v.is_finite() && v > 0.0;
    let ranges: [(&'static str, Option<f64>, bool, &str); 5] = [
        (
            "alpha",
            adaptive.alpha,
            adaptive.alpha.is_none_or(positive),
            "a positive number of queued calls (× log10 limit), such as 3",
        ),
        (
            "beta",
            adaptive.beta,
            adaptive
                .beta
                .is_none_or(|b| positive(b) && b > adaptive.alpha()),
            "a number of queued calls (× log10 limit) above `alpha`, such as 6",
        ),
        (
            "tolerance",
            adaptive.tolerance,
            adaptive.tolerance.is_none_or(|t| t.is_finite() && t >= 1.0),
            "a ratio of at least 1.0, such as 1.0 (no slow-down tolerated) or 1.5",
        ),
        (
            "smoothing",
            adaptive.smoothing,
            adaptive.smoothing.is_none_or(|s| positive(s) && s <= 1.0),
            "a fraction above 0 and at most 1, such as 0.5",
        ),
        (
            "backoff_ratio",
            adaptive.backoff_ratio,
            adaptive
                .backoff_ratio
                .is_none_or(|r| positive(r) && r < 1.0),
            "a factor above 0 and below 1, such as 0.9",
        ),
    ];
    for (key, value, ok, expected) in ranges {
        if let (Some(value), false) = (value, ok) {
            problems.push((key, format!("is {value}, but must be {expected}")));
        }
    }
    if adaptive.timeout.is_some_and(|t| t.is_zero()) {
        problems.push((
            "timeout",
            "is 0: every call would count as a drop; set the latency you accept, such as `200ms`"
                .to_owned(),
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BulkheadConfig, SemaphoreConfig};

    fn semaphore(size: u32) -> BulkheadConfig {
        BulkheadConfig::semaphore(SemaphoreConfig {
            max_concurrent_calls: size,
            ..SemaphoreConfig::default()
        })
    }

    #[test]
    fn bounds_default_to_the_declared_size() {
        let a = AdaptiveConfig::new(AdaptiveAlgorithm::Vegas);
        assert_eq!(
            (a.min_limit(50), a.initial_limit(50), a.max_limit(50)),
            (1, 20, 50)
        );
        assert_eq!(
            (a.min_limit(8), a.initial_limit(8), a.max_limit(8)),
            (1, 8, 8)
        );
        assert!(adaptive_problems(&a, &semaphore(50)).is_empty());
    }

    #[test]
    fn bounds_out_of_order_or_above_the_declared_size_are_errors() {
        let a = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd).with_bounds(10, 5, 300);
        let keys: Vec<_> = adaptive_problems(&a, &semaphore(200))
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, ["max_limit", "initial_limit"]);
    }

    #[test]
    fn parameters_of_another_algorithm_are_reported_as_ignored() {
        let mut a = AdaptiveConfig::new(AdaptiveAlgorithm::Aimd);
        a.alpha = Some(2.0);
        a.backoff_ratio = Some(0.5);
        assert_eq!(a.ignored_parameters(), ["alpha"]);
        a.backoff_ratio = Some(1.5);
        let problems = adaptive_problems(&a, &semaphore(10));
        assert_eq!(problems.len(), 1);
        assert!(problems[0].1.contains("below 1"), "{}", problems[0].1);
    }
}

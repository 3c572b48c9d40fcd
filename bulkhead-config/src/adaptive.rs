//! Checks and lints of the `adaptive` setting (the type is `bulkhead_config_types::AdaptiveConfig`).

use crate::{AdaptiveAlgorithm, AdaptiveConfig};

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

/// The warnings for an `adaptive` setting: parameters the chosen algorithm ignores, and
/// an AIMD limit with no latency budget (it then lowers the limit only on drops).
pub(crate) fn adaptive_lints(adaptive: &AdaptiveConfig) -> Vec<(&'static str, String)> {
    let mut lints: Vec<(&'static str, String)> = adaptive
        .ignored_parameters()
        .into_iter()
        .map(|key| {
            (
                key,
                format!(
                    "is not read by `algorithm: {}` (it reads {}): remove it, or choose the \
                     algorithm it belongs to",
                    adaptive.algorithm,
                    match adaptive.algorithm.own_parameters() {
                        [] => "no parameters".to_owned(),
                        own => own
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", "),
                    }
                ),
            )
        })
        .collect();
    if adaptive.algorithm == AdaptiveAlgorithm::Aimd && adaptive.timeout.is_none() {
        lints.push((
            "algorithm",
            "AIMD without a `timeout` lowers the limit only when calls panic, time out or are \
             marked overloaded, never because the dependency got slow: set `timeout` to the \
             latency you accept, or use `gradient2` or `vegas`, which follow latency"
                .to_owned(),
        ));
    }
    lints
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

//! Lints of the `adaptive` setting (the type and its rules are in `bulkhead_config_types`).

use crate::{AdaptiveAlgorithm, AdaptiveConfig};

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

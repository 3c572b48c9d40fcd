//! "Did you mean …?" suggestions.

/// The candidate closest to `input`, if it is close enough to be a likely typo.
pub(crate) fn closest<'a>(
    input: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let mut best: Option<(&str, f64)> = None;
    for candidate in candidates {
        let score = strsim::jaro_winkler(input, candidate);
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((candidate, score));
        }
    }
    best.filter(|&(_, score)| score >= 0.8).map(|(c, _)| c)
}

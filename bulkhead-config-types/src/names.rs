//! "Did you mean …?": the one rule every part of bulkhead uses to suggest a name for a
//! likely typo (config keys, templates, bulkhead names in deploys and environment variables).

/// The closest of `candidates` to `word`, if one is close enough to be a likely typo.
/// Case, `-`/`_` and camelCase are ignored, so `maxConcurrentCall` finds
/// `max_concurrent_calls` and `PDF_RANDER` finds `pdf-render`.
///
/// ```
/// use bulkhead_config_types::closest_name;
/// assert_eq!(closest_name("pdf-rander", ["pdf-render", "payment"]), Some("pdf-render"));
/// assert_eq!(closest_name("inventory", ["pdf-render", "payment"]), None);
/// ```
///
/// The crates' one "did you mean" rule (the checker, the attribute and the registry call
/// it); hidden from the documented surface.
#[doc(hidden)]
pub fn closest_name<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word = normal(word);
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&word, &normal(c)), c))
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

fn normal(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// A name in a deploy that no code declares or registered: most often a typo.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct UndeclaredName {
    /// The name as the deploy writes it.
    pub name: String,
    /// The declared name it most likely meant.
    pub did_you_mean: Option<String>,
}

impl UndeclaredName {
    /// `name`, and the declared name it most likely meant.
    pub fn new(name: &str, did_you_mean: Option<&str>) -> Self {
        UndeclaredName {
            name: name.to_owned(),
            did_you_mean: did_you_mean.map(str::to_owned),
        }
    }
}

impl std::fmt::Display for UndeclaredName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bulkhead `{}` is not declared by any `#[bulkhead]` function of this program, so \
             its sizes apply to nothing",
            self.name
        )?;
        match &self.did_you_mean {
            Some(close) => write!(f, ": did you mean `{close}`?"),
            None => Ok(()),
        }
    }
}

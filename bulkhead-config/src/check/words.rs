//! The wording every check shares: "did you mean" (the project's one rule,
//! `closest_name`, within a budget per check), quoted lists, names as shown in key paths.

/// How many names "did you mean" may compare in one check, so a file with thousands of
/// unknown names among thousands of names stays fast (later ones get no guess).
const SUGGESTION_BUDGET: usize = 1_000_000;

/// "Did you mean" over one check: guesses until [`SUGGESTION_BUDGET`] names are compared.
pub(crate) struct Suggestions {
    left: usize,
}

impl Suggestions {
    pub(crate) fn new() -> Self {
        Suggestions {
            left: SUGGESTION_BUDGET,
        }
    }

    /// [`did_you_mean`], while the budget lasts.
    pub(crate) fn closest<'a>(&mut self, word: &str, candidates: &'a [String]) -> Option<&'a str> {
        self.left = self.left.checked_sub(candidates.len())?;
        did_you_mean(word, candidates)
    }
}

/// The closest of `candidates` to `word`, if one is close enough to be a likely typo
/// ([`crate::closest_name`], the rule every part of bulkhead uses).
pub(crate) fn did_you_mean<'a>(word: &str, candidates: &'a [String]) -> Option<&'a str> {
    crate::closest_name(word, candidates.iter().map(String::as_str))
}

pub(crate) fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A name as it appears in a key path: an empty name is shown as `""`.
pub(crate) fn display_name(name: &str) -> &str {
    if name.is_empty() { "\"\"" } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn did_you_mean_ignores_case_separators_and_plurals() {
        let keys = names(&["max_concurrent_calls", "max_wait", "fair"]);
        assert_eq!(
            did_you_mean("maxConcurrentCall", &keys),
            Some("max_concurrent_calls")
        );
        assert_eq!(did_you_mean("MAX-WAIT", &keys), Some("max_wait"));
    }

    #[test]
    fn did_you_mean_stays_silent_for_unrelated_words() {
        let keys = names(&["max_concurrent_calls", "max_wait", "fair"]);
        assert_eq!(did_you_mean("colour", &keys), None);
        assert_eq!(did_you_mean("x", &[]), None);
    }
}

//! Cluster stores a deploy cannot start with: a `scope: cluster` rate limit's or a
//! `cluster:` limit's store that cannot be used at all (its `${NAME}` variable unset, a URL that is not `redis://…`).
//! The rule itself is [`RateLimitStore::url`](crate::RateLimitStore::url); this places
//! its answer in the deploy's files.

use crate::Parsed;
use crate::check::STORE_KEYS;
use crate::diagnostic::{Diagnostic, Diagnostics, Severity};

impl Parsed {
    /// An error for each cluster-wide rate limit or concurrency limit (`cluster:`) whose
    /// store cannot be used now (its
    /// variable read from this process's environment), unless the store says
    /// `start_anyway: true`. `bulkhead::Deploy` refuses to install or pass a check with
    /// any: a process would otherwise run on `on_store_error` without saying so.
    ///
    /// ```
    /// use bulkhead::config::parse_file;
    /// let parsed = parse_file(
    ///     "deploy.yaml",
    ///     "bulkheads:\n  partner:\n    kind: semaphore\n    rate_limit:\n      limit_for_period: 100\n      refresh_period: 1s\n      scope: cluster\n      store: { redis: \"${BULKHEAD_DOC_NEVER_SET}\" }\n",
    /// )
    /// .unwrap();
    /// let problems = parsed.unusable_stores();
    /// let first = problems.iter().next().unwrap();
    /// assert_eq!(first.key_path, "bulkheads.partner.rate_limit.store.redis");
    /// assert!(first.message.contains("BULKHEAD_DOC_NEVER_SET"));
    /// ```
    pub fn unusable_stores(&self) -> Diagnostics {
        let mut problems = Vec::new();
        for (name, bulkhead) in &self.config.bulkheads {
            let rate = bulkhead.rate_limit.as_ref().and_then(|r| r.cluster_store());
            let leases = bulkhead.cluster.as_ref().map(|c| &c.store);
            for (store, at) in [rate, leases].into_iter().zip(STORE_KEYS) {
                let Some(store) = store.filter(|s| !s.start_anyway) else {
                    continue;
                };
                let Err(why) = store.url() else {
                    continue;
                };
                let message = format!(
                    "{why}; or set `start_anyway: true` to start with every decision \
                     following `on_store_error`"
                );
                // At the `redis:` value (where a `${NAME}` is written); at the entry
                // for a config built in code, which has no positions.
                problems.push(match self.store_urls.get(&(name.clone(), at)) {
                    Some((path, location)) => {
                        Diagnostic::at(Severity::Error, location, path.clone(), message)
                    }
                    None => {
                        let (file, line, column) =
                            self.declared_at(name).unwrap_or(("deploy", 0, 0));
                        Diagnostic {
                            line,
                            column,
                            ..Diagnostic::unplaced(
                                Severity::Error,
                                file,
                                format!("bulkheads.{name}.{at}.redis"),
                                message,
                            )
                        }
                    }
                });
            }
        }
        Diagnostics::from(problems)
    }
}

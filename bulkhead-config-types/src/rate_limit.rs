//! A bulkhead's rate limit ([`RateLimitConfig`]): admissions per period, counted by each
//! process or, with `scope: cluster`, by every process sharing a Redis store.

use serde::{Deserialize, Serialize};

use crate::Duration;

/// A rate limit: at most `limit_for_period` admissions per `refresh_period`, counted by
/// this process (`scope: process`, the default) or by every process that shares a store
/// (`scope: cluster`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Admissions allowed in each period (at least 1).
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub limit_for_period: u32,
    /// The period's length, with a unit (Resilience4j's default `500` meant nanoseconds).
    pub refresh_period: Duration,
    /// How long a call may wait for the next period before `RateLimited`. Default `0ms`.
    #[serde(default)]
    pub timeout: Duration,
    /// Who shares the limit: `process` (each process counts its own calls, the default) or
    /// `cluster` (every process using the same `store` and bulkhead name shares one count).
    #[serde(default, skip_serializing_if = "RateLimitScope::is_process")]
    pub scope: RateLimitScope,
    /// Where a `scope: cluster` limit is counted (required with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<RateLimitStore>,
}

impl RateLimitConfig {
    /// A per-process limit of `limit_for_period` calls per `refresh_period`, refusing at
    /// once (`timeout: 0ms`).
    pub fn per_process(limit_for_period: u32, refresh_period: Duration) -> Self {
        RateLimitConfig {
            limit_for_period,
            refresh_period,
            timeout: Duration::ZERO,
            scope: RateLimitScope::Process,
            store: None,
        }
    }

    /// The store of a cluster-wide limit: `Some` only with `scope: cluster`.
    pub fn cluster_store(&self) -> Option<&RateLimitStore> {
        match self.scope {
            RateLimitScope::Cluster => self.store.as_ref(),
            RateLimitScope::Process => None,
        }
    }
}

/// Who shares a rate limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RateLimitScope {
    /// Each process counts its own calls: ten replicas admit ten times the limit.
    #[default]
    Process,
    /// Every process using the same store and bulkhead name shares one count (Redis).
    Cluster,
}

impl RateLimitScope {
    /// True for [`RateLimitScope::Process`].
    pub fn is_process(&self) -> bool {
        *self == RateLimitScope::Process
    }
}

/// The store a `scope: cluster` rate limit is counted in.
///
/// Its `Debug` hides the password of the `redis` URL ([`redact_url`]); admin endpoints
/// and logs print it that way too.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RateLimitStore {
    /// The Redis server: a URL such as `redis://:password@redis.internal:6379/0`, or
    /// `${NAME}` to read the URL from the environment variable `NAME` when the bulkhead is
    /// built, which keeps passwords out of the file.
    pub redis: String,
    /// Prepended to the bulkhead's name to form the Redis key. Default `bulkhead:rate:`.
    #[serde(default = "RateLimitStore::default_key_prefix")]
    pub key_prefix: String,
    /// The longest a decision waits for Redis, in wall-clock time from end to end
    /// (connecting, `AUTH`, `SELECT`, the request and the whole answer), before it counts
    /// as a store error and follows `on_store_error`. Default `50ms`.
    #[serde(default = "RateLimitStore::default_response_timeout")]
    pub response_timeout: Duration,
    /// What a call does when Redis cannot answer: `local` (the default), `allow` or `refuse`.
    #[serde(default)]
    pub on_store_error: OnStoreError,
    /// How many processes share the limit. With `on_store_error: local`, each admits
    /// `limit_for_period / replicas` (rounded up) per period while Redis is unreachable, so
    /// the cluster as a whole stays near the limit. Default 1.
    #[serde(default = "RateLimitStore::default_replicas")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub replicas: u32,
    /// Start even when the store cannot be used at all (its `${NAME}` variable is unset,
    /// or the URL is not `redis://…`): every decision is then a store error, handled as
    /// `on_store_error` says. Default false: installing or checking the deploy refuses it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub start_anyway: bool,
}

/// `url` with its credentials hidden, for anything printed: `redis://:secret@host:6379`
/// becomes `redis://…@host:6379`. A URL whose part after `://` is not a plain
/// `host[:port]` (with no `@`, such as `redis://:secret` written without its host) is
/// shown as `redis://…`, and a value without `://` but with an `@` as `…`: either may be
/// a secret written wrongly. A URL without credentials (or `${NAME}`) is returned as is.
///
/// ```
/// use bulkhead::config::redact_url;
/// assert_eq!(redact_url("redis://:s3cret@redis.internal:6379/0"), "redis://…@redis.internal:6379/0");
/// assert_eq!(redact_url("redis://redis.internal:6379"), "redis://redis.internal:6379");
/// assert_eq!(redact_url("redis://:s3cret"), "redis://…");
/// assert_eq!(redact_url("${REDIS_URL}"), "${REDIS_URL}");
/// ```
pub fn redact_url(url: &str) -> std::borrow::Cow<'_, str> {
    if url.starts_with("${") && url.ends_with('}') {
        return url.into();
    }
    let Some(scheme) = url.find("://") else {
        // No scheme but an `@`: all of it may be a secret written wrongly.
        return if url.contains('@') {
            "…".into()
        } else {
            url.into()
        };
    };
    let rest = &url[scheme + 3..];
    if let Some(at) = rest.rfind('@') {
        return format!("{}://…@{}", &url[..scheme], &rest[at + 1..]).into();
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if host_port(authority).is_ok() {
        url.into()
    } else {
        format!("{}://…", &url[..scheme]).into()
    }
}

/// `text` with the credentials of every URL in it written `…`, as [`redact_url`] shows
/// one URL, and the part before the `@` of any other word holding one: for quoting a line
/// of a file that may hold a URL, whole or cut anywhere.
///
/// ```
/// use bulkhead::config::redact_credentials;
/// assert_eq!(
///     redact_credentials(r#"store: { redis: "redis://:s3cret@cache:6379/0" }"#),
///     r#"store: { redis: "redis://…@cache:6379/0" }"#,
/// );
/// assert_eq!(redact_credentials(r#"redis: "s3cret@cache:6379""#), r#"redis: "…@cache:6379""#);
/// assert_eq!(redact_credentials("max_wait: 250ms"), "max_wait: 250ms");
/// ```
pub fn redact_credentials(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("://") && !text.contains('@') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // Words end where a value cannot go on in YAML or JSON.
    let is_end =
        |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '{' | '}' | '[' | ']');
    while !rest.is_empty() {
        let word_len = rest.find(is_end).unwrap_or(rest.len());
        let (word, after) = rest.split_at(word_len);
        if word.contains("://") {
            out.push_str(&redact_url(word));
        } else if let Some(at) = word.rfind('@') {
            out.push('…');
            out.push_str(&word[at..]);
        } else {
            out.push_str(word);
        }
        let ends = after.find(|c: char| !is_end(c)).unwrap_or(after.len());
        out.push_str(&after[..ends]);
        rest = &after[ends..];
    }
    out.into()
}

/// Checks the `host[:port]` part of a URL (after `scheme://` and any `user:password@`):
/// a host name, IPv4 or `[IPv6]` address, and a port from 1 to 65535 if one is given.
fn host_port(authority: &str) -> Result<(), &'static str> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (address, after) = v6
            .split_once(']')
            .ok_or("has an unclosed `[` in its host")?;
        if address.is_empty()
            || !address
                .chars()
                .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.'))
        {
            return Err("has no host");
        }
        match after {
            "" => (address, None),
            _ => (
                address,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or("has text after its `[host]`")?,
                ),
            ),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("has no host");
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
    {
        return Err("has a host that is not a name or an address");
    }
    match port.map(str::parse::<u16>) {
        Some(Ok(0) | Err(_)) => Err("has a port that is not a number from 1 to 65535"),
        _ => Ok(()),
    }
}

impl std::fmt::Debug for RateLimitStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitStore")
            .field("redis", &redact_url(&self.redis))
            .field("key_prefix", &self.key_prefix)
            .field("response_timeout", &self.response_timeout)
            .field("on_store_error", &self.on_store_error)
            .field("replicas", &self.replicas)
            .field("start_anyway", &self.start_anyway)
            .finish()
    }
}

impl RateLimitStore {
    /// A store at `redis` (a URL or `${NAME}`) with every other setting default.
    pub fn redis(redis: impl Into<String>) -> Self {
        RateLimitStore {
            redis: redis.into(),
            key_prefix: Self::default_key_prefix(),
            response_timeout: Self::default_response_timeout(),
            on_store_error: OnStoreError::default(),
            replicas: Self::default_replicas(),
            start_anyway: false,
        }
    }

    /// The URL of the Redis server: `redis` itself, or the value of its `${NAME}` variable
    /// now.
    ///
    /// # Errors
    ///
    /// Why the store cannot be used, as a sentence: the variable is not set (or not
    /// Unicode), or the URL does not start with `redis://` (TLS and Unix sockets are not
    /// supported). A password in the URL is never part of it.
    pub fn url(&self) -> Result<String, String> {
        let url = match self.redis_env_var() {
            Some(var) => std::env::var(var).map_err(|_| {
                format!(
                    "the environment variable {var} (named by `store.redis`) is not set or not \
                     Unicode; set it to the Redis URL, `redis://[:password@]host[:port][/db]`"
                )
            })?,
            None => self.redis.clone(),
        };
        match url_problem(&url) {
            Some(problem) => Err(format!(
                "`{}` {problem}",
                crate::validate::escape_controls(&redact_url(&url))
            )),
            None => Ok(url),
        }
    }

    /// The per-process share of `limit_for_period` used by `on_store_error: local`:
    /// `limit_for_period / replicas`, rounded up, at least 1.
    pub fn local_share(&self, limit_for_period: u32) -> u32 {
        limit_for_period.div_ceil(self.replicas.max(1)).max(1)
    }

    /// The environment variable named by `${NAME}` in `redis`, if it is written so.
    pub fn redis_env_var(&self) -> Option<&str> {
        self.redis.strip_prefix("${")?.strip_suffix('}')
    }

    fn default_key_prefix() -> String {
        "bulkhead:rate:".to_owned()
    }

    fn default_response_timeout() -> Duration {
        Duration::from_millis(50)
    }

    fn default_replicas() -> u32 {
        1
    }
}

/// Why `url` cannot name a store's Redis server (completing "`url` …"), if it cannot:
/// only `redis://` over TCP is spoken. The one rule for literal URLs (checked when the
/// config is parsed) and for the values of `${NAME}` variables (checked at start-up).
pub(crate) fn url_problem(url: &str) -> Option<&'static str> {
    let Some(rest) = url.strip_prefix("redis://") else {
        return Some(
            "is not a Redis URL: write `redis://[:password@]host[:port][/db]` (TLS \
             `rediss://` and Unix sockets are not supported)",
        );
    };
    let rest = rest.rfind('@').map_or(rest, |at| &rest[at + 1..]);
    let (address, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    if let Err(problem) = host_port(address) {
        return Some(match problem {
            "has no host" => "has no host: write `redis://[:password@]host[:port][/db]`",
            other => other,
        });
    }
    let db = path.strip_prefix('/').unwrap_or(path);
    let db = &db[..db.find(['?', '#']).unwrap_or(db.len())];
    if !(db.is_empty() || db.parse::<u32>().is_ok()) {
        return Some("has a database that is not a number: write `redis://host:port/0`");
    }
    None
}

/// What a `scope: cluster` rate limit does when its store cannot answer in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum OnStoreError {
    /// Count locally: this process admits its share, `limit_for_period / replicas`.
    #[default]
    Local,
    /// Admit the call: availability over the limit.
    Allow,
    /// Refuse the call with `RateLimited`: the limit over availability.
    Refuse,
}

impl OnStoreError {
    /// The name used in config files: `local`, `allow` or `refuse`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnStoreError::Local => "local",
            OnStoreError::Allow => "allow",
            OnStoreError::Refuse => "refuse",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{redact_credentials, redact_url, url_problem};

    const SECRET: &str = "Hunter2SECRETpw";

    /// Written wrongly in every way seen in the field, and cut where a quoted window of a
    /// line may cut it.
    fn wrong_urls() -> Vec<String> {
        let mut urls: Vec<String> = [
            "redis://:SECRET",
            "redis://user:SECRET",
            "redis://:SECRET/0",
            "SECRET@redis.internal:6379",
            "redis:/:SECRET@h",
            "redis://:SECRET@h:notaport/0",
            "redis://:SE@CRET@h:6379",
            "redis://:SE/CRET@h:6379",
            "rediss://:SECRET@h",
        ]
        .iter()
        .map(|u| u.replace("SECRET", SECRET))
        .collect();
        let whole = format!("redis://:{SECRET}@h:6379/0");
        urls.extend((12..whole.len()).map(|cut| whole[..cut].to_owned()));
        urls
    }

    #[test]
    fn no_password_is_shown_however_the_url_is_written_or_cut() {
        for url in wrong_urls() {
            assert!(
                !redact_url(&url).contains("SECRET"),
                "{url}: {}",
                redact_url(&url)
            );
            let line = format!(r#"    store: {{ redis: "{url}" }}"#);
            let quoted = redact_credentials(&line);
            assert!(!quoted.contains("SECRET"), "{line}: {quoted}");
            let bare = format!("redis: {url}");
            assert!(!redact_credentials(&bare).contains("SECRET"), "{bare}");
        }
    }

    #[test]
    fn a_url_without_credentials_is_shown_as_is() {
        for url in [
            "redis://redis.internal",
            "redis://redis.internal:6379/2",
            "redis://10.0.0.7:6380",
            "redis://[::1]:6379/0",
            "redis://cache?protocol=resp3",
        ] {
            assert_eq!(redact_url(url), url);
            assert_eq!(url_problem(url), None, "{url}");
        }
        assert_eq!(
            redact_credentials("max_wait: 250ms, name: payment"),
            "max_wait: 250ms, name: payment"
        );
    }

    #[test]
    fn a_url_redis_cannot_use_is_refused_with_the_reason() {
        for (url, reason) in [
            ("redis://:pw", "no host"),
            ("redis://:pw@", "no host"),
            ("redis://", "no host"),
            ("redis:///0", "no host"),
            ("redis://:pw@h:notaport/0", "not a number from 1"),
            ("redis://h:0", "not a number from 1"),
            ("redis://h:65536", "not a number from 1"),
            ("redis://h/zero", "database"),
            ("redis://[::1/0", "`[`"),
            ("redis://h$st:6379", "name or an address"),
            ("rediss://h", "not a Redis URL"),
            ("h:6379", "not a Redis URL"),
        ] {
            let problem = url_problem(url).unwrap_or_else(|| panic!("{url} was taken"));
            assert!(problem.contains(reason), "{url}: {problem}");
        }
        assert_eq!(url_problem("redis://:pw@h:6379/0"), None);
        assert_eq!(url_problem("redis://user:p@ss/w:rd@h"), None);
    }
}

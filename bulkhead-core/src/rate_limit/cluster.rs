//! A rate limit counted in Redis, shared by every process that uses the same store and
//! bulkhead name (`rate_limit: { scope: cluster, store: { redis: … } }`).
//!
//! # Algorithm: the local limiter's cycles, in one Lua script
//!
//! Each decision is **one** `EVALSHA` of [`SCRIPT`]: Redis runs it atomically, so however
//! many processes race, a period admits at most `limit_for_period` calls. The script is the
//! local limiter's algorithm (Resilience4j's cycles) moved server-side, on Redis's own clock
//! (`TIME`): time is cut into periods of `refresh_period` since the Unix epoch; each refills
//! the permissions to `limit_for_period` (unused ones do not accumulate); a caller that
//! finds none reserves one of a coming period if it would be free within its `timeout`,
//! else it is refused with `retry_after` = the time until one would be free, as the script
//! computed it. A refusal writes nothing (but a report, below).
//!
//! # Transitions: what a process admitted on its own is counted
//!
//! The script's periods are the local limiter's (`rate_limit.rs` aligns a cluster-wide
//! limiter's cycles to the Unix epoch too), so "this period" means the same to both. Each
//! answer says how many permissions the period has left; the process charges its local
//! share (the `on_store_error: local` fallback) with every admission Redis made for it and
//! caps it to its part of what is left (`left / replicas`, rounded up). A process that
//! admitted calls on its own while Redis could not answer sends their count for the
//! period with its next request, and the script subtracts it before deciding (`ARGV[4]`,
//! for the period `ARGV[5]`; a count for another period is ignored).
//!
//! The processes do not see Redis return at the same instant: each probes after its own
//! reconnect delay. For [`RETURN_WINDOW`] after its first answer, a process in `local`
//! mode therefore keeps within its share even for calls Redis admits, so those back and
//! those still on their own never add up past the sum of the shares.
//!
//! Why this and not GCRA or a sliding window: switching `scope` changes *who* counts, not
//! *what* is counted, so a config means the same on one process or on fifty, the local
//! limiter's tests describe both, and "N per period" can be checked period by period.
//! GCRA would spread the admissions evenly (no burst at a period's start) but admits up to
//! `2N - 1` in the first period and answers a different question. The cost is the known
//! one of fixed windows: up to `2N` calls in a span of one period that straddles a
//! boundary, as with the local limiter.
//!
//! The key is `key_prefix` + the bulkhead's name, a hash `{cycle, permissions, period,
//! limit}` that expires a period after its last reservation, so idle limits leave nothing
//! behind. A reload takes effect as the local limiter's does: a new `limit_for_period`
//! moves the current period's permissions by the change (never above the new limit), a new
//! `refresh_period` starts afresh. Processes configured with different limits for the same
//! key (a rolling reload) each apply their own (configure them alike).
//!
//! # Faults: bounded, counted, no reconnect storm
//!
//! * A decision waits for Redis at most `response_timeout` of wall-clock time, end to end:
//!   connecting, `AUTH`, `SELECT`, sending and reading the answer share one deadline
//!   (`client.rs`), however the server behaves (silent, dribbling bytes, garbage). Then the
//!   call follows `on_store_error`; the connection that failed is dropped (a late answer
//!   would be read as the next one's). A call therefore takes at most
//!   `response_timeout + timeout` in the limiter.
//! * A key holding another type (`WRONGTYPE`) is not overwritten (it may be another
//!   program's): the error says which key and how to free it.
//! * After a failure the store *backs off*: no request at all for 100 ms, doubling up to 5 s
//!   per consecutive failure; calls meanwhile follow `on_store_error` at once, without
//!   touching the network. When the delay has passed, exactly one caller probes Redis; its
//!   success returns every caller to the store. So each process sends Redis at most one
//!   request per delay while it is down (no storm when it comes back), and a slow Redis
//!   (`DEBUG SLEEP`) costs one `response_timeout` per delay instead of one per call.
//! * Idle connections are kept (up to [`MAX_IDLE`]) and all dropped after a failure.
//!
//! Reservations of coming periods stay counted in Redis when their waiter goes away (the
//! local limiter gives them back): giving one back would cost a round trip on a drop path.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use bulkhead_config_types::RateLimitStore;
use parking_lot::Mutex;

use super::RateAdmission;
use super::client::{self, Client, Connection, Failure, Script};

/// The decision, in Lua. `KEYS[1]`: the limit's key. `ARGV`: `limit_for_period`, the period
/// and the caller's timeout in microseconds, then the count this process admitted on its
/// own and the period it did so in. Returns `{admitted (0/1), wait µs, permissions left}`:
/// for an admission, how long until its period starts (0: now); for a refusal,
/// `retry_after`.
///
/// Redis's Lua numbers are doubles: microseconds since the epoch (about 2^51) are exact,
/// and numbers are written back with `%.0f` because `tostring` would print them in
/// exponent form.
pub(crate) const SCRIPT: &str = r"
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local timeout = tonumber(ARGV[3])
local reported = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cycle = math.floor(now / period)
if tonumber(ARGV[5]) ~= cycle then
  reported = 0
end
local state = redis.call('HMGET', KEYS[1], 'cycle', 'permissions', 'period', 'limit')
local permissions = limit
if state[1] and tonumber(state[3]) == period then
  local elapsed = cycle - tonumber(state[1])
  permissions = tonumber(state[2])
  if state[4] then
    permissions = permissions + limit - tonumber(state[4])
  end
  if elapsed > 0 then
    permissions = permissions + elapsed * limit
  end
  if permissions > limit then
    permissions = limit
  end
end
permissions = permissions - reported
local wait = 0
if permissions < 1 then
  local to_next = (cycle + 1) * period - now
  local cycles = math.ceil((1 - permissions) / limit)
  wait = to_next + (cycles - 1) * period
end
local admitted = 1
if wait > timeout then
  admitted = 0
  if reported == 0 then
    return {0, string.format('%.0f', wait), string.format('%.0f', permissions)}
  end
else
  permissions = permissions - 1
end
redis.call('HSET', KEYS[1], 'cycle', string.format('%.0f', cycle),
  'permissions', string.format('%.0f', permissions), 'period', string.format('%.0f', period),
  'limit', string.format('%.0f', limit))
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.ceil((wait + period) / 1000) + 1000))
return {admitted, string.format('%.0f', wait), string.format('%.0f', permissions)}
";

static RATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SCRIPT));

/// The health check of a limit's key: `{1}` when it is free or holds the type `ARGV[1]`
/// (`hash` for a rate limit, `zset` for a concurrency limit's leases), `{0}` when it holds
/// another type. Writes nothing.
const CHECK_SCRIPT: &str = r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' or kind == ARGV[1] then
  return {1}
end
return {0}
";

static CHECK: LazyLock<Script> = LazyLock::new(|| Script::new(CHECK_SCRIPT));

/// What a store counts: a rate limit (a hash) or a concurrency limit's leases (a sorted set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    RateLimit,
    Leases,
}

impl Purpose {
    /// The type of Redis value its key holds, as `TYPE` names it.
    fn kind(self) -> &'static str {
        match self {
            Purpose::RateLimit => "hash",
            Purpose::Leases => "zset",
        }
    }
}

/// Idle connections kept for reuse per store.
pub(crate) const MAX_IDLE: usize = 32;
/// The reconnect delay after a first failure; it doubles per consecutive failure.
pub(crate) const FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest reconnect delay.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(5);
/// How long after Redis answers again (after a failure) a process keeps within its
/// `on_store_error: local` share: the longest reconnect delay, by when every process that
/// lost Redis with it has probed again. Until then some may still be deciding on their
/// own shares while Redis, knowing nothing of them, would give the whole limit to those
/// back; with every process within its share, the cluster stays within the sum of shares.
pub(crate) const RETURN_WINDOW: Duration = MAX_DELAY;
/// At most one store-error warning per this long per store (with the count since the last).
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// Why the store did not decide a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StoreError {
    /// The store cannot be used at all (no `redis` feature, bad URL, unset variable).
    Unusable(String),
    /// Redis failed or did not answer within `response_timeout`.
    Failed(String),
    /// Redis failed recently: nothing is sent until the reconnect delay has passed.
    BackingOff,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Unusable(why) | StoreError::Failed(why) => f.write_str(why),
            StoreError::BackingOff => f.write_str("Redis failed recently; waiting to reconnect"),
        }
    }
}

/// What this process admitted on its own in one period, told to Redis with a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    /// The period (its number since the Unix epoch).
    pub(crate) cycle: u64,
    /// Calls admitted in it without Redis.
    pub(crate) count: u32,
}

/// Redis's answer to one decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) admission: RateAdmission,
    /// Permissions the current period has left after it (negative: reserved ahead).
    pub(crate) left: i64,
    /// This answer was the first after a failure (Redis is back).
    pub(crate) returned: bool,
}

/// One cluster-wide limit's store: a Redis client, its idle connections and its health.
pub(crate) struct ClusterStore {
    config: RateLimitStore,
    purpose: Purpose,
    key: String,
    client: Result<Client, String>,
    idle: Mutex<Vec<Connection>>,
    health: Mutex<Health>,
    log: Mutex<LogGate>,
}

/// Whether Redis may be asked now.
struct Health {
    /// Nothing is sent before this instant (set by a failure).
    retry_at: Option<Instant>,
    /// The delay the next failure sets.
    delay: Duration,
    /// A caller is finding out whether Redis is back.
    probing: bool,
    /// When Redis last answered after a failure (see [`RETURN_WINDOW`]).
    returned_at: Option<Instant>,
}

/// Bounds the store-error warnings.
struct LogGate {
    last: Option<Instant>,
    /// Errors since the last warning.
    unreported: u64,
}

impl ClusterStore {
    /// A store for the bulkhead `name` as `config` says. Connects lazily; a URL that cannot
    /// be used makes every decision a store error (logged), never a panic.
    pub(crate) fn new(name: &str, config: &RateLimitStore) -> Self {
        Self::with_key(
            Purpose::RateLimit,
            format!("{}{name}", config.key_prefix),
            config,
        )
    }

    /// The store of the leases of bulkhead `name` (key: `key_prefix` + `name` + `:leases`).
    pub(crate) fn for_leases(name: &str, config: &RateLimitStore) -> Self {
        Self::with_key(
            Purpose::Leases,
            format!("{}{name}:leases", config.key_prefix),
            config,
        )
    }

    fn with_key(purpose: Purpose, key: String, config: &RateLimitStore) -> Self {
        ClusterStore {
            config: config.clone(),
            purpose,
            key,
            client: config.url().and_then(|url| client::open(&url)),
            idle: Mutex::new(Vec::new()),
            health: Mutex::new(Health {
                retry_at: None,
                delay: FIRST_DELAY,
                probing: false,
                returned_at: None,
            }),
            log: Mutex::new(LogGate {
                last: None,
                unreported: 0,
            }),
        }
    }

    /// The config this store was built from (a reload rebuilds it only when this changes).
    pub(crate) fn config(&self) -> &RateLimitStore {
        &self.config
    }

    /// One decision: `limit` per `period`, waiting at most `timeout` for a coming period,
    /// with `report` of what this process admitted on its own. `now` reads the limiter's
    /// clock (for the reconnect delay and [`RateAdmission::WaitUntil`]).
    pub(crate) fn reserve(
        &self,
        limit: u32,
        period: Duration,
        timeout: Duration,
        report: Report,
        now: &dyn Fn() -> Instant,
    ) -> Result<Decision, StoreError> {
        let args = [
            i64::from(limit),
            micros(period).max(1),
            micros(timeout),
            i64::from(report.count),
            i64::try_from(report.cycle).unwrap_or(i64::MAX),
        ];
        let failing = self.is_failing();
        let answer = self.call(&RATE_SCRIPT, &args, 3, now)?;
        let [admitted, wait, left] = answer[..] else {
            unreachable!("call checked the length")
        };
        let wait = Duration::from_micros(wait.max(0).unsigned_abs());
        let admission = if admitted != 1 {
            RateAdmission::Refused {
                retry_after: wait.max(Duration::from_micros(1)),
            }
        } else if wait.is_zero() {
            RateAdmission::Admitted
        } else {
            RateAdmission::WaitUntil(now() + wait)
        };
        Ok(Decision {
            admission,
            left,
            returned: failing,
        })
    }

    /// Runs `script` on the store's key with `args`, expecting `len` numbers back: one
    /// exchange within `response_timeout`, or none at all while the store backs off after
    /// a failure (then one caller probes once the delay has passed). `now` reads the
    /// caller's clock, for the delay.
    pub(crate) fn call(
        &self,
        script: &Script,
        args: &[i64],
        len: usize,
        now: &dyn Fn() -> Instant,
    ) -> Result<Vec<i64>, StoreError> {
        let client = self
            .client
            .as_ref()
            .map_err(|why| StoreError::Unusable(why.clone()))?;
        let probe = {
            let mut health = self.health.lock();
            match health.retry_at {
                None => false,
                Some(at) if health.probing || now() < at => return Err(StoreError::BackingOff),
                Some(_) => {
                    health.probing = true;
                    true
                }
            }
        };
        let answer = self.round_trip(client, script, args, len);
        let mut health = self.health.lock();
        if probe {
            health.probing = false;
        }
        match answer {
            Ok(answer) => {
                if health.retry_at.take().is_some() {
                    health.returned_at = Some(now());
                }
                health.delay = FIRST_DELAY;
                Ok(answer)
            }
            Err(why) => {
                // The calls that were already on their way when Redis failed fail too: only
                // the first of them (or a probe) sets the delay, so it grows once per
                // failed probe, not once per caller in flight.
                if probe || health.retry_at.is_none() {
                    health.retry_at = Some(now() + health.delay);
                    health.delay = (health.delay * 2).min(MAX_DELAY);
                }
                drop(health);
                // Connections opened before the failure likely share its cause (a restart).
                self.idle.lock().clear();
                Err(StoreError::Failed(why))
            }
        }
    }

    /// True while the store backs off after a failure (nothing is sent before the delay).
    pub(crate) fn is_failing(&self) -> bool {
        self.health.lock().retry_at.is_some()
    }

    /// Whether the store backs off now, and whether Redis answered again after a failure
    /// less than [`RETURN_WINDOW`] ago (then a process in `on_store_error: local` keeps
    /// within its share); one lock for both.
    pub(crate) fn transition(&self, now: Instant) -> (bool, bool) {
        let health = self.health.lock();
        let returned = health
            .returned_at
            .is_some_and(|at| now.saturating_duration_since(at) < RETURN_WINDOW);
        (health.retry_at.is_some(), returned)
    }

    /// Asks Redis once, within `response_timeout`, whether this limit can be counted: the
    /// server answers and the key is free or the limit's own.
    ///
    /// # Errors
    ///
    /// What is wrong, as a sentence with the fix when there is one.
    pub(crate) fn check(&self) -> Result<(), String> {
        let client = self.client.as_ref().map_err(Clone::clone)?;
        let budget = self.config.response_timeout.as_std();
        let deadline = Instant::now() + budget;
        let answer = client
            .connect(deadline)
            .and_then(|mut connection| {
                connection.eval(&CHECK, &self.key, &[self.purpose.kind()], deadline)
            })
            .map_err(|f| self.explain(client, &f, budget))?;
        match answer[..] {
            [1] => Ok(()),
            [0] => Err(self.wrong_type(client)),
            _ => Err(self.explain(
                client,
                &Failure::Garbage(format!("{answer:?} is not the check's answer")),
                budget,
            )),
        }
    }

    /// Sends `script` on an idle or new connection; the whole exchange, connecting
    /// included, within `response_timeout` of wall-clock time; an answer of other than
    /// `len` numbers is garbage.
    fn round_trip(
        &self,
        client: &Client,
        script: &Script,
        args: &[i64],
        len: usize,
    ) -> Result<Vec<i64>, String> {
        let budget = self.config.response_timeout.as_std();
        let deadline = Instant::now() + budget;
        let idle = self.idle.lock().pop();
        let exchange =
            |connection: &mut Connection| connection.eval(script, &self.key, args, deadline);
        let (connection, answer) = match idle {
            Some(mut connection) => {
                let answer = exchange(&mut connection);
                (connection, answer)
            }
            None => {
                let mut connection = client
                    .connect(deadline)
                    .map_err(|f| self.explain(client, &f, budget))?;
                let answer = exchange(&mut connection);
                (connection, answer)
            }
        };
        let answer = answer.map_err(|f| self.explain(client, &f, budget))?;
        if answer.len() != len {
            return Err(self.explain(
                client,
                &Failure::Garbage(format!("{} numbers, not {len}", answer.len())),
                budget,
            ));
        }
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push(connection);
        }
        Ok(answer)
    }

    /// `failure` as a sentence naming the server, with the fix when there is one.
    fn explain(&self, client: &Client, failure: &Failure, budget: Duration) -> String {
        match failure {
            Failure::Server { code, .. } if code == "WRONGTYPE" => self.wrong_type(client),
            other => format!("{} (Redis at {})", other.describe(budget), client.address()),
        }
    }

    /// The limit's key holds another type: which key, and how to free it.
    fn wrong_type(&self, client: &Client) -> String {
        let key = &self.key;
        format!(
            "the Redis key `{key}` at {} holds another type of value than this limit's {} \
             (another program, or an older bulkhead, wrote it); free it with \
             `redis-cli DEL {key}` or give the limit another `key_prefix`",
            client.address(),
            match self.purpose {
                Purpose::RateLimit => "hash",
                Purpose::Leases => "sorted set of leases",
            }
        )
    }

    /// Logs `error` unless a warning went out less than [`LOG_EVERY`] ago; then the next
    /// warning says how many errors it stands for.
    pub(crate) fn log_error(&self, name: &str, error: &StoreError, at: Instant) {
        let mut gate = self.log.lock();
        gate.unreported += 1;
        if gate
            .last
            .is_some_and(|last| at.saturating_duration_since(last) < LOG_EVERY)
        {
            return;
        }
        let count = std::mem::take(&mut gate.unreported);
        gate.last = Some(at);
        drop(gate);
        tracing::warn!(
            bulkhead = name,
            store_errors = count,
            on_store_error = self.config.on_store_error.as_str(),
            "the cluster {}'s Redis store could not decide ({error}); calls follow \
             `on_store_error` until it answers again ({count} such calls since the last warning)",
            match self.purpose {
                Purpose::RateLimit => "rate limit",
                Purpose::Leases => "concurrency limit",
            }
        );
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

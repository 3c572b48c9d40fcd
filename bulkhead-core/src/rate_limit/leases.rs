//! A semaphore's `max_concurrent_calls` shared by every process that uses the same store
//! and bulkhead name (`cluster: { store: { redis: … }, lease_ttl }`): each running call
//! holds a *lease* in Redis.
//!
//! # Leases: a sorted set, scored by expiry on Redis's clock
//!
//! The leases of one bulkhead are one sorted set (`key_prefix` + name + `:leases`): a
//! member is a lease id (63 random bits per process, then a counter mixed in, so ids never
//! repeat within a process and almost surely not across processes), its score the
//! instant it expires, in milliseconds of Redis's `TIME`, so no two machines' clocks are
//! compared. Two scripts, each atomic:
//!
//! * [`ACQUIRE_SCRIPT`] removes expired leases (counted `reclaimed`: what a crashed
//!   process held), then adds the caller's lease if fewer than the limit are left, else
//!   refuses. However many processes race, at most `max_concurrent_calls` unexpired
//!   leases exist.
//! * [`SYNC_SCRIPT`] is the heartbeat, one round trip for all of a process's leases:
//!   it removes the leases of calls that ended (`ZREM` of the process's own ids only, so a
//!   release can never free another process's lease, even after its own lease expired),
//!   extends the leases of running calls (a lease it no longer finds, because it expired
//!   while the process stalled longer than `lease_ttl`, or because Redis restarted empty,
//!   is counted `expired` and added again, so Redis counts every call that runs), and adds
//!   the calls admitted while Redis could not answer.
//!
//! # In the process: leases are interchangeable
//!
//! A call needs *a* lease, not a particular one, so a process keeps its ids in three lists
//! ([`Books`]): `held` (in Redis, for running calls), `pending` (calls admitted without
//! Redis, by `on_store_error`), `idle` (in Redis, their calls ended) and `stale` (idle
//! leases Redis may have lost since: a request failed; released, never reused, so a
//! Redis that restarted empty is never trusted to hold them). A call takes an idle
//! lease if there is one (no round trip) or acquires a new one; a call that ends moves a
//! lease from `held` to `idle` (or drops a `pending` id) and wakes the heartbeat thread,
//! which releases idle leases at once. Nothing on a call's end touches the network: the
//! permit's drop stays cheap.
//!
//! # Faults: bounded by `response_timeout`, then `on_store_error`
//!
//! The store is the cluster rate limit's (`cluster.rs`): every exchange under one
//! wall-clock deadline, a reconnect delay after a failure (no request at all meanwhile),
//! one probe after it. A call whose lease Redis could not decide follows
//! `on_store_error`: `local` runs it if this process runs fewer than
//! `max_concurrent_calls / replicas` (rounded up) calls in all, `allow` runs it, `refuse`
//! refuses it. While the store backs off, idle leases are not reused (they may have
//! expired), so a process's total sinks to its share as its leased calls end. While it
//! backs off and for `RETURN_WINDOW` after Redis answers again, a `local` process admits
//! no call, leased or not, beyond its share (calls on their way to Redis counted too,
//! `acquiring`): the processes still backing off run their shares without Redis knowing,
//! and Redis would otherwise give the whole limit to those back.
//!
//! # Reloads: a call ends on the set it began on
//!
//! A reload that changes the store or `lease_ttl` (or switches `cluster:` off) replaces
//! the bulkhead's lease set. Each call's permit carries the [`Lease`] it took (the
//! generation of its set), and gives it back there: a call admitted before the limit
//! was switched on took no lease and gives none back, and a replaced set stays *retired*
//! — renewing the leases of its calls still running, in its own store — until the last
//! of them ends, then releases everything and stops. The new set counts only the calls it
//! admitted, so while the calls of a replaced set with another store run, neither store
//! counts the other's.

use std::num::NonZeroU32;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bulkhead_config_types::{ClusterLimitConfig, OnStoreError};
use parking_lot::{Condvar, Mutex, RwLock};

use super::client::Script;
use super::cluster::ClusterStore;
use crate::clock::Clock;
use crate::{BulkheadError, BulkheadName};

/// Acquire one lease. `KEYS[1]`: the leases' sorted set. `ARGV`: the limit, the lease's
/// time to live in ms, the lease id. Returns `{admitted (0/1), reclaimed, leases held}`.
pub(crate) const ACQUIRE_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[1]) then
  return {0, reclaimed, held}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), ARGV[3])
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', ttl + 1000))
return {1, reclaimed, held + 1}
";

/// The heartbeat. `ARGV`: the time to live in ms, the number of ids to release, the number
/// to renew, then the ids to release, to renew, and to add (calls admitted without Redis).
/// Returns `{renewed, expired (renewed ids found missing, added again), reclaimed}`.
pub(crate) const SYNC_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local releases = tonumber(ARGV[2])
local renewals = tonumber(ARGV[3])
local reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
for i = 4, 3 + releases do
  redis.call('ZREM', KEYS[1], ARGV[i])
end
local expiry = string.format('%.0f', now + ttl)
local renewed, expired = 0, 0
for i = 4 + releases, 3 + releases + renewals do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    renewed = renewed + 1
  else
    expired = expired + 1
  end
  redis.call('ZADD', KEYS[1], expiry, ARGV[i])
end
for i = 4 + releases + renewals, #ARGV do
  redis.call('ZADD', KEYS[1], expiry, ARGV[i])
end
if #ARGV > 3 + releases then
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', ttl + 1000))
end
return {renewed, expired, reclaimed}
";

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SCRIPT));
static SYNC: LazyLock<Script> = LazyLock::new(|| Script::new(SYNC_SCRIPT));

/// The cluster-wide concurrency limit of one bulkhead, switched on and off by reloads.
/// Disabled, it costs one relaxed load per admission.
pub(crate) struct Leases {
    enabled: AtomicBool,
    set: RwLock<Option<Arc<LeaseSet>>>,
    /// Sets a reload replaced while calls that took their leases there still ran: each
    /// renews those leases until the last of them ends, then closes (see the module docs).
    retired: Mutex<Vec<Arc<LeaseSet>>>,
    /// The generation of the next set.
    generations: AtomicU32,
    counters: Arc<Counters>,
}

/// The lease a call took: the generation of the lease set it took it from, where it is
/// given back ([`Leases::end`]) whichever set is current by then. Never `u32::MAX`, so a
/// permit can keep it in a `u32` beside its own values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lease(NonZeroU32);

impl Lease {
    /// The generation, from 1 to `u32::MAX - 1`.
    pub(crate) fn generation(self) -> u32 {
        self.0.get()
    }

    /// The lease of `generation`, if it is one [`generation`](Self::generation) returns.
    pub(crate) fn of_generation(generation: u32) -> Option<Lease> {
        NonZeroU32::new(generation)
            .filter(|g| g.get() != u32::MAX)
            .map(Lease)
    }
}

/// What the leases did since the bulkhead was built (kept across reloads).
#[derive(Default)]
struct Counters {
    renewed: AtomicU64,
    expired: AtomicU64,
    reclaimed: AtomicU64,
    refused: AtomicU64,
    store_errors: AtomicU64,
}

/// One store's leases: the ids this process holds and the heartbeat that renews them.
struct LeaseSet {
    /// Which set of the bulkhead this is: the [`Lease`] of the calls it admitted.
    generation: Lease,
    /// Calls that took (or are taking) a lease of this set and have not given it back:
    /// a retired set closes when none is left.
    calls: AtomicUsize,
    /// Replaced by a reload: no call begins here any more.
    retired: AtomicBool,
    name: BulkheadName,
    store: ClusterStore,
    config: ClusterLimitConfig,
    /// `max_concurrent_calls`: the cluster's limit.
    limit: AtomicU32,
    books: Mutex<Books>,
    /// Wakes the heartbeat: a call ended (an idle lease to release), or the set closed.
    wake: Condvar,
    heartbeat: AtomicBool,
    closed: AtomicBool,
    counters: Arc<Counters>,
    clock: Arc<dyn Clock>,
}

/// The lease ids of this process (see the module's docs).
#[derive(Default)]
struct Books {
    held: Vec<i64>,
    pending: Vec<i64>,
    idle: Vec<i64>,
    /// Idle leases Redis may have lost (a request failed since they went idle: it may
    /// have restarted empty, or they may have expired): released, never reused.
    stale: Vec<i64>,
    /// Calls asking Redis for a lease while the store is in transition (see
    /// [`LeaseSet::begin`]): counted against the share before Redis answers.
    acquiring: usize,
}

impl Books {
    /// The calls of this process running or about to, with or without leases.
    fn running(&self) -> usize {
        self.held.len() + self.pending.len() + self.acquiring
    }
}

/// A cluster-wide concurrency limit's state: its leases and what they did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LeaseSnapshot {
    /// The limit of the whole cluster (`max_concurrent_calls`).
    pub limit: u32,
    /// Calls of this process running on a lease in Redis.
    pub held: u32,
    /// Calls of this process running without a lease: admitted by `on_store_error` while
    /// Redis could not answer; the next heartbeat that reaches Redis registers them.
    pub unleased: u32,
    /// Leases extended by the heartbeat.
    pub renewed: u64,
    /// Leases the heartbeat found gone while their call still ran (the process stalled
    /// longer than `lease_ttl`, or Redis restarted empty); each was added again.
    pub expired: u64,
    /// Expired leases removed from the store by this process's requests: what a crashed
    /// process (or a stalled one) held.
    pub reclaimed: u64,
    /// Calls refused because every lease of the cluster was taken.
    pub refused: u64,
    /// Requests the store could not answer (each call among them followed
    /// `on_store_error`).
    pub store_errors: u64,
}

impl Leases {
    pub(crate) fn disabled() -> Self {
        Leases {
            enabled: AtomicBool::new(false),
            set: RwLock::new(None),
            retired: Mutex::new(Vec::new()),
            generations: AtomicU32::new(1),
            counters: Arc::default(),
        }
    }

    /// The generation of a new set: never 0 or `u32::MAX`, and never one a set still
    /// alive has (the counter would have to wrap around four billion reloads while one
    /// call ran).
    fn next_generation(&self) -> Lease {
        loop {
            if let Some(lease) = Lease::of_generation(self.generations.fetch_add(1, Relaxed)) {
                return lease;
            }
        }
    }

    #[inline]
    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// Applies `config` for a limit of `limit` calls (`None` switches leases off). The
    /// store, its connections and the leases held are kept unless the store or the lease's
    /// time to live changed; then the old set retires: it keeps the leases of its calls
    /// still running until they end, then releases what it holds and stops.
    pub(crate) fn reconfigure(
        &self,
        name: &BulkheadName,
        limit: u32,
        config: Option<&ClusterLimitConfig>,
        clock: &Arc<dyn Clock>,
    ) {
        let mut set = self.set.write();
        if let (Some(current), Some(config)) = (set.as_ref(), config)
            && current.config == *config
        {
            current.limit.store(limit, Relaxed);
            return;
        }
        if let Some(old) = set.take() {
            self.retire(old);
        }
        *set = config.map(|config| {
            Arc::new(LeaseSet {
                generation: self.next_generation(),
                calls: AtomicUsize::new(0),
                retired: AtomicBool::new(false),
                name: name.clone(),
                store: ClusterStore::for_leases(name, &config.store),
                config: config.clone(),
                limit: AtomicU32::new(limit),
                books: Mutex::new(Books::default()),
                wake: Condvar::new(),
                heartbeat: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                counters: Arc::clone(&self.counters),
                clock: Arc::clone(clock),
            })
        });
        self.enabled.store(set.is_some(), Relaxed);
    }

    fn current(&self) -> Option<Arc<LeaseSet>> {
        if !self.is_enabled() {
            return None;
        }
        self.set.read().clone()
    }

    /// `old` was replaced: it closes now if no call holds one of its leases, else once the
    /// last of them has ended ([`call_over`](Self::call_over)). Under the retired list's
    /// lock, as `call_over`'s look at the flag, so that exactly one of them closes it.
    fn retire(&self, old: Arc<LeaseSet>) {
        let mut retired = self.retired.lock();
        old.retired.store(true, Relaxed);
        if old.calls.load(Relaxed) == 0 {
            old.close();
        } else {
            retired.push(old);
        }
    }

    /// A call of `set` gave its lease back, or was refused one: a retired set whose last
    /// call this was closes.
    fn call_over(&self, set: &Arc<LeaseSet>) {
        if set.calls.fetch_sub(1, Relaxed) != 1 {
            return;
        }
        let mut retired = self.retired.lock();
        if set.retired.load(Relaxed) && set.calls.load(Relaxed) == 0 {
            retired.retain(|other| !Arc::ptr_eq(other, set));
            set.close();
        }
    }

    /// A call of this process was admitted by the local semaphore: takes a lease from the
    /// current set (`None` without a cluster-wide limit: nothing to give back).
    ///
    /// # Errors
    ///
    /// [`BulkheadError::Full`] when every lease of the cluster is taken, or when Redis
    /// could not answer and `on_store_error` refuses (`refuse`, or `local` with this
    /// process's share running).
    pub(crate) fn begin(&self, name: &BulkheadName) -> Result<Option<Lease>, BulkheadError> {
        let set = {
            // Counted under the read lock: a reload (the write lock) that retires the set
            // sees this call, and closes the set only once the call is over.
            let current = self.set.read();
            let Some(set) = current.as_ref().filter(|_| self.is_enabled()) else {
                return Ok(None);
            };
            set.calls.fetch_add(1, Relaxed);
            Arc::clone(set)
        };
        if set.begin() {
            Ok(Some(set.generation))
        } else {
            self.call_over(&set);
            Err(BulkheadError::Full { name: name.clone() })
        }
    }

    /// A call that [`begin`](Self::begin) gave `lease` has ended: the lease goes back to
    /// the set it came from, current or retired.
    pub(crate) fn end(&self, lease: Lease) {
        let current = self.set.read().clone();
        let set = match current {
            Some(set) if set.generation == lease => set,
            _ => {
                let retired = self.retired.lock();
                match retired.iter().find(|set| set.generation == lease) {
                    Some(set) => Arc::clone(set),
                    // Not reachable: a set with calls is current or retired.
                    None => return,
                }
            }
        };
        set.end();
        self.call_over(&set);
    }

    pub(crate) fn snapshot(&self) -> Option<LeaseSnapshot> {
        let set = self.current()?;
        let books = set.books.lock();
        let count = |ids: &Vec<i64>| u32::try_from(ids.len()).unwrap_or(u32::MAX);
        let c = &self.counters;
        Some(LeaseSnapshot {
            limit: set.limit.load(Relaxed),
            held: count(&books.held),
            unleased: count(&books.pending),
            renewed: c.renewed.load(Relaxed),
            expired: c.expired.load(Relaxed),
            reclaimed: c.reclaimed.load(Relaxed),
            refused: c.refused.load(Relaxed),
            store_errors: c.store_errors.load(Relaxed),
        })
    }

    /// Asks the leases' store once whether it can be used (see `ClusterStore::check`).
    pub(crate) fn check_store(&self) -> Option<Result<(), String>> {
        self.current().map(|set| set.store.check())
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        if let Some(set) = self.set.get_mut().take() {
            set.close();
        }
        for set in self.retired.get_mut().drain(..) {
            set.close();
        }
    }
}

/// Lease ids: a random 64-bit start per process, then a counter multiplied by an odd
/// constant (a bijection), so the ids of one process never repeat.
fn next_id() -> i64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    static SEED: LazyLock<u64> = LazyLock::new(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        hasher.finish()
    });
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let n = COUNTER.fetch_add(1, Relaxed);
    (*SEED ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)) as i64
}

impl LeaseSet {
    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.config.lease_ttl.as_std().as_millis()).unwrap_or(i64::MAX)
    }

    /// How often the heartbeat renews: a third of the lease's time to live.
    fn interval(&self) -> Duration {
        self.config.lease_ttl.as_std() / 3
    }

    fn share(&self) -> usize {
        self.config.store.local_share(self.limit.load(Relaxed)) as usize
    }

    /// Takes a lease for a call: an idle one, or a new one from Redis; `false` refuses.
    ///
    /// With `on_store_error: local`, while the store backs off and for a while after Redis
    /// answers again (`RETURN_WINDOW`), the process also keeps within its share, leases
    /// or not: some processes may still be running calls on their shares that Redis does
    /// not know of, and Redis would give the whole limit to those back.
    fn begin(self: &Arc<Self>) -> bool {
        let (failing, returned) = self.store.transition(self.clock.now());
        let bounded = (failing || returned)
            && matches!(self.config.store.on_store_error, OnStoreError::Local);
        let mut books = self.books.lock();
        if bounded {
            if books.running() >= self.share() {
                drop(books);
                self.counters.refused.fetch_add(1, Relaxed);
                return false;
            }
            books.acquiring += 1;
        }
        if !failing && let Some(id) = books.idle.pop() {
            books.acquiring -= usize::from(bounded);
            books.held.push(id);
            return true;
        }
        drop(books);
        self.acquire(failing, usize::from(bounded))
    }

    /// [`begin`](Self::begin) without an idle lease: asks Redis for a new one; `counted`
    /// (0 or 1) is this call's place in `acquiring`, given up once Redis has answered.
    fn acquire(self: &Arc<Self>, failing: bool, counted: usize) -> bool {
        let id = next_id();
        let now = || self.clock.now();
        let args = [i64::from(self.limit.load(Relaxed)), self.ttl_ms(), id];
        match self.store.call(&ACQUIRE, &args, 3, &now) {
            Ok(answer) => {
                self.count_reclaimed(answer[1]);
                let mut books = self.books.lock();
                books.acquiring -= counted;
                if answer[0] != 1 {
                    drop(books);
                    self.counters.refused.fetch_add(1, Relaxed);
                    return false;
                }
                books.held.push(id);
                let adopt = !books.pending.is_empty();
                drop(books);
                self.start_heartbeat();
                if adopt || failing {
                    // Redis is back: register the calls admitted without it now.
                    self.wake.notify_one();
                }
                true
            }
            Err(error) => {
                self.counters.store_errors.fetch_add(1, Relaxed);
                self.store.log_error(&self.name, &error, self.clock.now());
                let mut books = self.books.lock();
                books.acquiring -= counted;
                let idle = std::mem::take(&mut books.idle);
                books.stale.extend(idle);
                let admit = match self.config.store.on_store_error {
                    OnStoreError::Allow => true,
                    OnStoreError::Refuse => false,
                    // `local`, and (the crates are pinned to one release) nothing else.
                    _ => books.running() < self.share(),
                };
                if admit {
                    books.pending.push(id);
                    drop(books);
                    self.start_heartbeat();
                } else {
                    self.counters.refused.fetch_add(1, Relaxed);
                }
                admit
            }
        }
    }

    /// A call ended: a call without a lease first, else one lease becomes idle (the
    /// heartbeat releases it at once, unless a call takes it first).
    fn end(&self) {
        let mut books = self.books.lock();
        if books.pending.pop().is_some() {
            return;
        }
        if let Some(id) = books.held.pop() {
            // While the store fails, Redis may lose the lease (a restart): never reuse it.
            if self.store.is_failing() {
                books.stale.push(id);
            } else {
                books.idle.push(id);
            }
            drop(books);
            self.wake.notify_one();
        }
    }

    fn count_reclaimed(&self, reclaimed: i64) {
        self.counters
            .reclaimed
            .fetch_add(reclaimed.max(0).unsigned_abs(), Relaxed);
    }

    fn start_heartbeat(self: &Arc<Self>) {
        if self.heartbeat.swap(true, Relaxed) {
            return;
        }
        let set = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("bulkhead-leases-{}", self.name))
            .spawn(move || set.beat());
        if let Err(error) = spawned {
            // Without a heartbeat the leases expire after `lease_ttl`; the next call retries.
            self.heartbeat.store(false, Relaxed);
            tracing::warn!(
                bulkhead = &*self.name,
                "cannot start the heartbeat of the cluster concurrency limit ({error}); its \
                 leases expire after `lease_ttl`"
            );
        }
    }

    /// The heartbeat thread: a sync every `lease_ttl / 3`, and at once when a call ended
    /// (unless the store is backing off); on close, one last sync releases everything.
    fn beat(self: Arc<Self>) {
        let mut due = Instant::now() + self.interval();
        loop {
            {
                let mut books = self.books.lock();
                while !self.closed.load(Relaxed)
                    && Instant::now() < due
                    && ((books.idle.is_empty() && books.stale.is_empty())
                        || self.store.is_failing())
                {
                    if self.wake.wait_until(&mut books, due).timed_out() {
                        break;
                    }
                    if !books.pending.is_empty() && !self.store.is_failing() {
                        break;
                    }
                }
            }
            if self.closed.load(Relaxed) {
                let mut books = self.books.lock();
                let all = std::mem::take(&mut *books);
                books.idle = [all.held, all.pending, all.idle, all.stale].concat();
                drop(books);
                self.sync(false);
                return;
            }
            let renew = Instant::now() >= due;
            if renew {
                due = Instant::now() + self.interval();
            }
            self.sync(renew);
        }
    }

    /// One heartbeat round trip: releases idle leases, registers the pending ones and, with
    /// `renew`, extends the held ones.
    fn sync(&self, renew: bool) {
        let (release, held, pending) = {
            let mut books = self.books.lock();
            let mut release = std::mem::take(&mut books.idle);
            release.append(&mut books.stale);
            let held = if renew {
                books.held.clone()
            } else {
                Vec::new()
            };
            (release, held, books.pending.clone())
        };
        if release.is_empty() && held.is_empty() && pending.is_empty() {
            return;
        }
        let count = |ids: &Vec<i64>| i64::try_from(ids.len()).unwrap_or(i64::MAX);
        let mut args = vec![self.ttl_ms(), count(&release), count(&held)];
        args.extend(&release);
        args.extend(&held);
        args.extend(&pending);
        let now = || self.clock.now();
        match self.store.call(&SYNC, &args, 3, &now) {
            Ok(answer) => {
                let c = &self.counters;
                c.renewed
                    .fetch_add(answer[0].max(0).unsigned_abs(), Relaxed);
                c.expired
                    .fetch_add(answer[1].max(0).unsigned_abs(), Relaxed);
                self.count_reclaimed(answer[2]);
                let mut books = self.books.lock();
                for id in pending {
                    match books.pending.iter().position(|p| *p == id) {
                        Some(at) => {
                            books.pending.swap_remove(at);
                            books.held.push(id);
                        }
                        // Its call ended meanwhile: the lease just added is released next.
                        None => books.idle.push(id),
                    }
                }
            }
            Err(error) => {
                self.counters.store_errors.fetch_add(1, Relaxed);
                self.store.log_error(&self.name, &error, self.clock.now());
                self.books.lock().stale.extend(release);
            }
        }
    }

    /// Stops the heartbeat after one last sync that releases every lease of the set.
    fn close(&self) {
        self.closed.store(true, Relaxed);
        let _books = self.books.lock();
        self.wake.notify_all();
    }
}

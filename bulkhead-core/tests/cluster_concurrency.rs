//! Cluster-wide concurrency limits (a semaphore's `cluster:`): leases in a real
//! `redis-server` on 127.0.0.1, shared by several OS processes (this test binary, run as
//! [`lease_child`]).
//!
//! Without `redis-server` on the `PATH` these tests say so on stderr and pass (set
//! `BULKHEAD_REQUIRE_REDIS=1`, as CI does, to make that a failure instead). To run them:
//! `apt-get install redis-server`, then `cargo test -p bulkheads-core --test
//! cluster_concurrency`.
//!
//! Concurrency across processes is counted by the parent: every call sends `+` on a Unix
//! datagram socket once it runs and `-` before it ends, so the parent's count of a moment
//! is never above the calls really holding a lease then (each call's interval as the
//! parent sees it lies inside its real one, and one socket keeps the order of sends).

mod redis_support;
mod support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration as StdDuration, Instant};

use bulkhead_config_types::{
    BulkheadConfig, ClusterLimitConfig, Config, Duration, OnStoreError, RateLimitStore,
};
use bulkhead_core::{
    Bulkhead, BulkheadError, LeaseSnapshot, Registry, SemaphoreBulkhead, check_cluster_stores,
    prometheus, system_clock,
};
use futures_executor::block_on;

use redis_support::{Server, every_fault};
use support::semaphore;

/// A semaphore of `limit` permits whose limit is the cluster's, with leases in `url`.
fn config(url: &str, prefix: &str, limit: u32, on_error: OnStoreError) -> BulkheadConfig {
    let mut config = BulkheadConfig::semaphore(semaphore(limit, 0));
    config.cluster = Some(ClusterLimitConfig {
        store: RateLimitStore {
            key_prefix: prefix.to_owned(),
            on_store_error: on_error,
            replicas: 3,
            response_timeout: Duration::from_millis(200),
            ..RateLimitStore::redis(url)
        },
        lease_ttl: Duration::from_millis(1200),
    });
    config
}

fn build(config: &BulkheadConfig) -> SemaphoreBulkhead {
    let Bulkhead::Semaphore(b) = Bulkhead::from_config("partner", config, system_clock()) else {
        unreachable!("a semaphore config builds a semaphore")
    };
    b
}

fn leases(b: &SemaphoreBulkhead) -> LeaseSnapshot {
    b.snapshot()
        .leases
        .expect("a cluster-wide limit reports its leases")
}

fn zcard(server: &Server, key: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query(&mut server.admin())
        .expect("ZCARD")
}

fn members(server: &Server, key: &str) -> Vec<String> {
    let mut ids: Vec<String> = redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(&mut server.admin())
        .expect("ZRANGE");
    ids.sort();
    ids
}

/// The parent's count of running calls, from the children's `+` and `-`.
struct Counter {
    path: std::path::PathBuf,
    /// (since the start, calls running) after every change.
    changes: Arc<Mutex<Vec<(StdDuration, i64)>>>,
    stop: Arc<AtomicBool>,
}

impl Counter {
    fn new(tag: &str) -> Counter {
        let path =
            std::env::temp_dir().join(format!("bulkhead-leases-{tag}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let socket = UnixDatagram::bind(&path).expect("a datagram socket");
        socket
            .set_read_timeout(Some(StdDuration::from_millis(50)))
            .expect("a read timeout");
        let changes = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, stopped) = (Arc::clone(&changes), Arc::clone(&stop));
        let start = Instant::now();
        std::thread::spawn(move || {
            let (mut running, mut buf) = (0i64, [0u8; 64]);
            while !stopped.load(SeqCst) {
                let Ok(n) = socket.recv(&mut buf) else {
                    continue;
                };
                for byte in &buf[..n] {
                    running += if *byte == b'+' { 1 } else { -1 };
                }
                seen.lock().unwrap().push((start.elapsed(), running));
            }
        });
        Counter {
            path,
            changes,
            stop,
        }
    }

    /// The most calls running at once between `from` and `to` (since the start).
    fn max_between(&self, from: StdDuration, to: StdDuration) -> i64 {
        self.changes
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0)
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Starts a child process in `role` (see [`lease_child`]).
fn child(role: &str, url: &str, env: &[(&str, String)]) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--ignored", "--exact", "lease_child", "--nocapture"])
        .env("LEASE_CHILD_ROLE", role)
        .env("LEASE_CHILD_REDIS", url)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("a child process")
}

/// Waits for the child's stdout line starting with `tag`, and returns its rest.
fn line(out: &mut impl Iterator<Item = std::io::Result<String>>, tag: &str) -> String {
    for line in out.by_ref() {
        let line = line.expect("the child's output");
        if let Some(rest) = line.strip_prefix(tag) {
            return rest.trim().to_owned();
        }
    }
    panic!("the child ended before printing `{tag}`")
}

/// The tests of this file run one at a time (each starts processes and servers, and
/// several measure how long things take): each holds this lock.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const PREFIX: &str = "test:leases:";
const KEY: &str = "test:leases:partner:leases";

#[test]
#[ignore = "a child process of the multi-process tests, which run it"]
fn lease_child() {
    let role = std::env::var("LEASE_CHILD_ROLE").expect("run by a multi-process test");
    let url = std::env::var("LEASE_CHILD_REDIS").expect("a Redis URL");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let limit: u32 = var("LEASE_CHILD_LIMIT").parse().unwrap_or(4);
    let on_error = match var("LEASE_CHILD_MODE").as_str() {
        "allow" => OnStoreError::Allow,
        "refuse" => OnStoreError::Refuse,
        _ => OnStoreError::Local,
    };
    let mut config = config(&url, PREFIX, limit, on_error);
    if let (Some(cluster), Ok(ms)) = (&mut config.cluster, var("LEASE_CHILD_TIMEOUT_MS").parse()) {
        // The multi-process runs keep a loaded machine's slow answers from counting as
        // store errors: the bounds they check are those of a Redis that is up or down.
        cluster.store.response_timeout = Duration::from_millis(ms);
        cluster.lease_ttl = Duration::from_millis(3 * ms);
    }
    let bulkhead = Arc::new(build(&config));
    match role.as_str() {
        // Calls of ~5ms from 8 threads until LEASE_CHILD_SECS, each reported.
        "load" => {
            let socket = Arc::new(UnixDatagram::unbound().expect("a socket"));
            let to = var("LEASE_CHILD_SOCKET");
            let secs: f64 = var("LEASE_CHILD_SECS").parse().expect("seconds");
            let end = Instant::now() + StdDuration::from_secs_f64(secs);
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let (b, socket, to) = (Arc::clone(&bulkhead), Arc::clone(&socket), to.clone());
                    std::thread::spawn(move || {
                        let (mut admitted, mut refused) = (0u64, 0u64);
                        while Instant::now() < end {
                            let ran = b.call(|| {
                                let _ = socket.send_to(b"+", &to);
                                std::thread::sleep(StdDuration::from_millis(5));
                                let _ = socket.send_to(b"-", &to);
                            });
                            match ran {
                                Ok(()) => admitted += 1,
                                Err(BulkheadError::Full { .. }) => {
                                    refused += 1;
                                    std::thread::sleep(StdDuration::from_millis(1));
                                }
                                Err(other) => panic!("only Full refuses here: {other}"),
                            }
                        }
                        (admitted, refused)
                    })
                })
                .collect();
            let (mut admitted, mut refused) = (0, 0);
            for t in threads {
                let (a, r) = t.join().expect("a caller thread");
                admitted += a;
                refused += r;
            }
            println!("done {admitted} {refused} {:?}", leases(&bulkhead));
        }
        // Holds `limit` calls until killed.
        "holder" => {
            let started = Arc::new(Barrier::new(limit as usize + 1));
            for _ in 0..limit {
                let (b, started) = (Arc::clone(&bulkhead), Arc::clone(&started));
                std::thread::spawn(move || {
                    b.call(|| {
                        started.wait();
                        std::thread::sleep(StdDuration::from_secs(3600));
                    })
                    .expect("the holder's calls are admitted");
                });
            }
            started.wait();
            println!("holding {limit}");
            std::thread::sleep(StdDuration::from_secs(3600));
        }
        // Holds one call until a line arrives on stdin, then ends it and reports.
        "stalled" => {
            let started = Arc::new(Barrier::new(2));
            let (b, s) = (Arc::clone(&bulkhead), Arc::clone(&started));
            let call = std::thread::spawn(move || {
                b.call(|| {
                    s.wait();
                    let mut line = String::new();
                    std::io::stdin().read_line(&mut line).expect("stdin");
                })
                .expect("the call is admitted");
            });
            started.wait();
            println!("holding 1");
            call.join().expect("the call");
            println!("ended");
            // The heartbeat releases the idle lease at once.
            std::thread::sleep(StdDuration::from_millis(500));
        }
        other => panic!("unknown role {other}"),
    }
}

/// Three processes, eight callers each, on one limit of 6: the calls running at once,
/// counted by the parent, never exceed 6, and reach it; Redis never holds more than 6
/// leases (sampled).
#[test]
fn processes_sharing_a_limit_never_run_more_than_it() {
    let _serial = serial();
    let Some(server) = Server::start() else {
        return;
    };
    let counter = Counter::new("share");
    let env = [
        ("LEASE_CHILD_LIMIT", "6".to_owned()),
        ("LEASE_CHILD_SECS", "2".to_owned()),
        ("LEASE_CHILD_MODE", "refuse".to_owned()),
        ("LEASE_CHILD_TIMEOUT_MS", "1000".to_owned()),
        ("LEASE_CHILD_SOCKET", counter.path.display().to_string()),
    ];
    let children: Vec<_> = (0..3).map(|_| child("load", &server.url(), &env)).collect();
    let mut most_in_redis = 0;
    for _ in 0..40 {
        most_in_redis = most_in_redis.max(zcard(&server, KEY));
        std::thread::sleep(StdDuration::from_millis(25));
    }
    for c in children {
        let out = c.wait_with_output().expect("the child ends");
        assert!(out.status.success(), "a child failed: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("done "), "{text}");
    }
    let most = counter.max_between(StdDuration::ZERO, StdDuration::from_secs(3600));
    let _ = writeln!(
        std::io::stderr(),
        "three processes, limit 6: at most {most} calls at once, {most_in_redis} leases in Redis"
    );
    assert!(most <= 6, "{most} calls ran at once for a limit of 6");
    assert_eq!(most, 6, "24 callers keep the limit busy");
    assert!(most_in_redis <= 6, "{most_in_redis} leases in Redis");
}

/// A process holding every lease is killed (SIGKILL): its leases stop counting within
/// `lease_ttl` (1.2s) of its last heartbeat, and the next caller reclaims them. The time
/// from the kill to the first admission is printed (the figure the docs quote).
#[test]
fn a_killed_process_leases_are_reclaimed_within_lease_ttl() {
    let _serial = serial();
    let Some(server) = Server::start() else {
        return;
    };
    let mut holder = child(
        "holder",
        &server.url(),
        &[("LEASE_CHILD_LIMIT", "4".to_owned())],
    );
    let mut out = BufReader::new(holder.stdout.take().expect("piped")).lines();
    assert_eq!(line(&mut out, "holding"), "4");
    let here = build(&config(&server.url(), PREFIX, 4, OnStoreError::Refuse));
    assert!(
        matches!(here.call(|| ()), Err(BulkheadError::Full { .. })),
        "every lease is held by the other process"
    );
    holder.kill().expect("kill -9");
    let killed = Instant::now();
    holder.wait().expect("the holder is gone");
    let reclaimed_after = loop {
        if here.call(|| ()).is_ok() {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < StdDuration::from_secs(30),
            "the dead process's leases were never reclaimed"
        );
        std::thread::sleep(StdDuration::from_millis(10));
    };
    let snapshot = leases(&here);
    assert!((1..=4).contains(&snapshot.reclaimed), "{snapshot:?}");
    assert_eq!(snapshot.store_errors, 0, "{snapshot:?}");
    let _ = writeln!(
        std::io::stderr(),
        "kill -9 of a process holding 4 leases (lease_ttl 1.2s): reclaimed {reclaimed_after:?} \
         after the kill"
    );
    // Not before the expiry (the last heartbeat was at most a third of the lease before
    // the kill), and within the lease (with a generous second for a loaded machine).
    assert!(
        reclaimed_after >= StdDuration::from_millis(1200) / 3
            && reclaimed_after <= StdDuration::from_millis(1200 + 1000),
        "{reclaimed_after:?}"
    );
}

/// A process whose heartbeat stops (SIGSTOP) longer than `lease_ttl` loses its lease to
/// another process; when it resumes and its call ends, its release removes its own lease
/// only: the other process's leases stay, exactly as they were.
#[test]
fn a_release_after_expiry_never_frees_another_processes_lease() {
    let _serial = serial();
    let Some(server) = Server::start() else {
        return;
    };
    let mut stalled = child(
        "stalled",
        &server.url(),
        &[("LEASE_CHILD_LIMIT", "2".to_owned())],
    );
    let mut out = BufReader::new(stalled.stdout.take().expect("piped")).lines();
    assert_eq!(line(&mut out, "holding"), "1");
    let pid = stalled.id().to_string();
    let signal = |sig: &str| {
        assert!(
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .expect("kill")
                .success()
        );
    };
    signal("-STOP");
    let here = Arc::new(build(&config(
        &server.url(),
        PREFIX,
        2,
        OnStoreError::Refuse,
    )));
    // One lease is free at once; the stalled one's expires after at most 1.2s.
    let release = Arc::new(Barrier::new(3));
    let (admitted, running) = std::sync::mpsc::channel();
    let mut holders = Vec::new();
    let deadline = Instant::now() + StdDuration::from_secs(20);
    while holders.len() < 2 {
        assert!(Instant::now() < deadline, "the stalled lease never expired");
        let (b, r, tx) = (Arc::clone(&here), Arc::clone(&release), admitted.clone());
        let refused = admitted.clone();
        let holder = std::thread::spawn(move || {
            b.call(|| {
                tx.send(true).expect("the test waits");
                r.wait();
            })
            .inspect_err(|_| refused.send(false).expect("the test waits"))
        });
        if running.recv().expect("the caller answers") {
            holders.push(holder);
        } else {
            assert!(
                matches!(
                    holder.join().expect("a caller"),
                    Err(BulkheadError::Full { .. })
                ),
                "refused while the stalled lease lives"
            );
            std::thread::sleep(StdDuration::from_millis(20));
        }
    }
    let ours = members(&server, KEY);
    assert_eq!(ours.len(), 2, "this process holds both leases: {ours:?}");
    assert_eq!(leases(&here).reclaimed, 1);
    signal("-CONT");
    stalled
        .stdin
        .as_mut()
        .expect("piped")
        .write_all(b"end\n")
        .expect("tell the call to end");
    assert_eq!(line(&mut out, "ended"), "");
    stalled.wait().expect("the child ends");
    // Resumed, its heartbeat may first add its expired lease again (its call still ran);
    // its release then removes that lease, and only that one.
    let deadline = Instant::now() + StdDuration::from_secs(10);
    while members(&server, KEY) != ours {
        assert!(
            Instant::now() < deadline && members(&server, KEY).len() > ours.len(),
            "the resumed process's release took a lease of another: {:?}, was {ours:?}",
            members(&server, KEY)
        );
        std::thread::sleep(StdDuration::from_millis(10));
    }
    release.wait();
    for holder in holders {
        assert_eq!(holder.join().expect("a caller"), Ok(()));
    }
}

/// The heartbeat keeps a lease alive past `lease_ttl` while its call runs: another
/// bulkhead on the same key (another process, as far as Redis can tell) is refused for
/// three lease lifetimes; after the call, the lease is released and the other is admitted.
#[test]
fn a_running_call_keeps_its_lease_past_lease_ttl() {
    let _serial = serial();
    let Some(server) = Server::start() else {
        return;
    };
    let cfg = config(&server.url(), "test:renew:", 1, OnStoreError::Refuse);
    let (holder, other) = (Arc::new(build(&cfg)), build(&cfg));
    let (started, done) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let (h, s, d) = (Arc::clone(&holder), Arc::clone(&started), Arc::clone(&done));
    let call = std::thread::spawn(move || {
        h.call(|| {
            s.wait();
            d.wait();
        })
    });
    started.wait();
    let until = Instant::now() + StdDuration::from_millis(3 * 1200);
    while Instant::now() < until {
        assert!(
            matches!(other.call(|| ()), Err(BulkheadError::Full { .. })),
            "the running call's lease is renewed"
        );
        std::thread::sleep(StdDuration::from_millis(100));
    }
    done.wait();
    call.join().expect("the call").expect("admitted");
    let renewed = leases(&holder).renewed;
    assert!(renewed >= 2, "renewed {renewed} times in 3.6s");
    let deadline = Instant::now() + StdDuration::from_secs(10);
    while other.call(|| ()).is_err() {
        assert!(
            Instant::now() < deadline,
            "the ended call's lease was released"
        );
        std::thread::sleep(StdDuration::from_millis(5));
    }
    let text = prometheus::encode(&[holder.snapshot()]);
    assert!(
        text.contains("bulkhead_cluster_leases_renewed_total{bulkhead=\"partner\"}"),
        "{text}"
    );
}

/// The leases in `key` that have not expired, on Redis's clock.
fn unexpired(server: &Server, key: &str) -> u64 {
    let mut admin = server.admin();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut admin).expect("TIME");
    let now_ms = secs * 1000 + micros / 1000;
    redis::cmd("ZCOUNT")
        .arg(key)
        .arg(format!("({now_ms}"))
        .arg("+inf")
        .query(&mut admin)
        .expect("ZCOUNT")
}

/// Waits (at most 10 s) until `key` holds `leases` unexpired leases.
fn await_unexpired(server: &Server, key: &str, leases: u64, what: &str) {
    let deadline = Instant::now() + StdDuration::from_secs(10);
    while unexpired(server, key) != leases {
        assert!(
            Instant::now() < deadline,
            "{what}: {} unexpired leases in {key} after 10s, not {leases}",
            unexpired(server, key)
        );
        std::thread::sleep(StdDuration::from_millis(5));
    }
}

/// Reloads change the cluster-wide limit while calls run, and each call gives its lease
/// back to the lease set it took it from:
/// - switched on under a running call: that call took no lease, and its end gives back
///   none of the leases of the calls admitted after;
/// - moved to another store under running calls: their leases stay in the old store,
///   renewed past `lease_ttl`, until each call ends; the new store counts only the calls
///   admitted after the reload, and none of them loses its lease to an old call's end;
/// - switched off under a running call: its lease is renewed until it ends, then released.
#[test]
fn a_reload_under_running_calls_gives_each_lease_back_to_the_set_it_came_from() {
    let _serial = serial();
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url();
    let plain = BulkheadConfig::semaphore(semaphore(4, 0));
    let (first, second) = (
        config(&url, "test:reload-a:", 4, OnStoreError::Refuse),
        config(&url, "test:reload-b:", 4, OnStoreError::Refuse),
    );
    let (key_a, key_b) = (
        "test:reload-a:partner:leases",
        "test:reload-b:partner:leases",
    );
    let deploy = |bulkhead: &BulkheadConfig| {
        let mut deploy = Config::default();
        deploy
            .bulkheads
            .insert("partner".to_owned(), bulkhead.clone());
        deploy
    };
    let registry = Registry::new();
    registry.register("partner", &plain).expect("registered");
    let b = registry.semaphore("partner").expect("a semaphore");
    // Longer than `lease_ttl` (1.2 s): a lease nobody renews has expired by then.
    let past_ttl = StdDuration::from_millis(2500);

    let before = block_on(b.acquire_async()).expect("admitted");
    registry.reload(&deploy(&first)).expect("switched on");
    let a1 = block_on(b.acquire_async()).expect("admitted");
    let a2 = block_on(b.acquire_async()).expect("admitted");
    assert_eq!((leases(&b).held, unexpired(&server, key_a)), (2, 2));
    drop(before);
    assert_eq!(
        leases(&b).held,
        2,
        "the call admitted before the switch took no lease and gave none back"
    );

    registry.reload(&deploy(&second)).expect("moved");
    let b1 = block_on(b.acquire_async()).expect("admitted");
    assert_eq!(
        leases(&b).held,
        1,
        "the new store counts the calls admitted after"
    );
    assert_eq!(unexpired(&server, key_b), 1);
    std::thread::sleep(past_ttl);
    assert_eq!(
        unexpired(&server, key_a),
        2,
        "the old store's leases of the calls still running are renewed"
    );
    drop(a1);
    assert_eq!(
        leases(&b).held,
        1,
        "an old call's end gives its lease back to the old store"
    );
    await_unexpired(&server, key_a, 1, "one old call ended");
    drop(a2);
    await_unexpired(&server, key_a, 0, "the last old call ended");
    assert_eq!((leases(&b).held, unexpired(&server, key_b)), (1, 1));

    registry.reload(&deploy(&plain)).expect("switched off");
    assert_eq!(b.snapshot().leases, None);
    std::thread::sleep(past_ttl);
    assert_eq!(
        unexpired(&server, key_b),
        1,
        "the lease of the call still running is renewed"
    );
    drop(b1);
    await_unexpired(&server, key_b, 0, "its call ended");
    let c = b.snapshot().calls;
    assert_eq!((c.permitted, c.refused.full), (4, 0), "{c:?}");
}

/// Three processes (`replicas: 3`, limit 12, so a share of 4) with eight callers each,
/// while Redis is killed (after 1.5s) and restarted empty (after 2.5s), for each
/// `on_store_error`. The most calls running at once in each phase are printed (the
/// figures the docs quote) and held to the documented bounds: `refuse` never above the
/// limit; `local` at most `limit + replicas × share` while the calls leased before the
/// kill drain, and the limit from the return on (each process keeps within its share for
/// a while after Redis answers again, so those still deciding on their own and those
/// back on Redis never add up past it); `allow` is unbounded while Redis is down and back
/// to the limit after it returns.
#[test]
fn a_redis_kill_and_return_stay_within_the_bound_for_each_on_store_error() {
    let _serial = serial();
    for mode in ["local", "refuse", "allow"] {
        let Some(mut server) = Server::start() else {
            return;
        };
        let port = server.port;
        let counter = Counter::new(mode);
        let env = [
            ("LEASE_CHILD_LIMIT", "12".to_owned()),
            ("LEASE_CHILD_SECS", "6".to_owned()),
            ("LEASE_CHILD_MODE", mode.to_owned()),
            ("LEASE_CHILD_TIMEOUT_MS", "1000".to_owned()),
            ("LEASE_CHILD_SOCKET", counter.path.display().to_string()),
        ];
        let start = Instant::now();
        let children: Vec<_> = (0..3).map(|_| child("load", &server.url(), &env)).collect();
        let at = |ms: u64| StdDuration::from_millis(ms);
        std::thread::sleep(at(1500).saturating_sub(start.elapsed()));
        let killed = start.elapsed();
        server.kill();
        std::thread::sleep(at(2500).saturating_sub(start.elapsed()));
        let restarted = Server::start_on(port);
        let back = start.elapsed();
        let mut outs = Vec::new();
        for c in children {
            let out = c.wait_with_output().expect("the child ends");
            assert!(out.status.success(), "a child failed: {out:?}");
            outs.push(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        drop(restarted);
        let phases = [
            ("before", StdDuration::ZERO, killed),
            ("down", killed, back),
            ("return", back, back + at(2000)),
            ("after", back + at(2000), at(3_600_000)),
        ];
        let most: Vec<i64> = phases
            .iter()
            .map(|(_, from, to)| counter.max_between(*from, *to))
            .collect();
        let _ = writeln!(
            std::io::stderr(),
            "{mode}: most calls at once (limit 12, replicas 3): before {}, Redis down {}, \
             first two seconds back {}, after {}; children: {outs:?}",
            most[0],
            most[1],
            most[2],
            most[3]
        );
        assert!(most[0] <= 12, "{mode}: {most:?}");
        assert!(most[3] <= 12, "{mode}: after the return: {most:?}");
        match mode {
            "refuse" => assert!(most.iter().all(|m| *m <= 12), "{mode}: {most:?}"),
            "local" => assert!(most[1] <= 12 + 3 * 4 && most[2] <= 12, "{mode}: {most:?}"),
            _ => {}
        }
    }
}

/// Every fault a server can show, on the lease path: no decision waits longer than
/// `response_timeout` (200ms) of wall-clock time end to end; each is a store error
/// (`refuse`: the fake answers would admit) and the warning says what happened (see
/// `redis_support::every_fault`).
#[test]
fn no_lease_decision_waits_past_response_timeout_whatever_the_server_does() {
    let _serial = serial();
    let budget = StdDuration::from_millis(200);
    every_fault("concurrency limit", budget, |fake, url| {
        let b = build(&config(url, PREFIX, 10, OnStoreError::Refuse));
        let mut slowest = StdDuration::ZERO;
        for _ in 0..3 {
            let start = Instant::now();
            let result = b.call(|| ());
            slowest = slowest.max(start.elapsed());
            assert!(
                matches!(result, Err(BulkheadError::Full { .. })),
                "{fake:?}: a store error refuses, got {result:?}"
            );
            // Past the reconnect delay (100ms, then 200ms): the next call asks again.
            std::thread::sleep(StdDuration::from_millis(450));
        }
        assert!(leases(&b).store_errors >= 3, "{fake:?}");
        slowest
    });
}

/// A paused (`CLIENT PAUSE`) or sleeping (`DEBUG SLEEP`) Redis costs a lease decision one
/// `response_timeout`, then follows `on_store_error` (here `local`: admitted on the
/// process's share); once Redis answers again the next decision is Redis's. Printed: the
/// slowest decision of each.
#[test]
fn a_paused_or_sleeping_redis_costs_one_response_timeout() {
    let _serial = serial();
    let Some(server) = Server::start() else {
        return;
    };
    let budget = StdDuration::from_millis(200);
    for fault in ["CLIENT PAUSE", "DEBUG SLEEP"] {
        let b = build(&config(
            &server.url(),
            "test:pause:",
            6,
            OnStoreError::Local,
        ));
        assert_eq!(b.call(|| ()), Ok(()), "Redis answers at first");
        // The heartbeat releases that lease at once; then it has nothing to send.
        std::thread::sleep(StdDuration::from_millis(200));
        let admin = std::thread::spawn({
            let mut admin = server.admin();
            move || match fault {
                "CLIENT PAUSE" => redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(1000)
                    .arg("ALL")
                    .query::<()>(&mut admin),
                _ => redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg(1)
                    .query::<()>(&mut admin),
            }
        });
        std::thread::sleep(StdDuration::from_millis(100));
        let before = leases(&b).store_errors;
        let start = Instant::now();
        let result = b.call(|| ());
        let took = start.elapsed();
        assert_eq!(result, Ok(()), "{fault}: admitted on the local share");
        assert_eq!(leases(&b).store_errors, before + 1, "{fault}");
        redis_support::within_budget(&format!("leases, {fault}"), took, budget);
        admin.join().expect("the admin thread").expect(fault);
        if fault == "CLIENT PAUSE" {
            std::thread::sleep(StdDuration::from_millis(1000));
        }
        let deadline = Instant::now() + StdDuration::from_secs(10);
        loop {
            let errors = leases(&b).store_errors;
            assert_eq!(b.call(|| ()), Ok(()));
            if leases(&b).store_errors == errors {
                break;
            }
            assert!(Instant::now() < deadline, "{fault}: Redis decides again");
            std::thread::sleep(StdDuration::from_millis(50));
        }
    }
}

/// The lease key overwritten with another type is reported by the health check with the
/// fix, and an unusable URL is reported as such; the decision is a counted store error.
#[test]
fn the_health_check_reports_a_lease_key_of_another_type_with_the_fix() {
    let _serial = serial();
    let Some(server) = Server::start() else {
        return;
    };
    let key = "test:health:partner:leases";
    redis::cmd("SET")
        .arg(key)
        .arg("not a sorted set")
        .query::<()>(&mut server.admin())
        .expect("SET");
    let registry = bulkhead_core::Registry::new();
    registry
        .register(
            "partner",
            &config(&server.url(), "test:health:", 3, OnStoreError::Refuse),
        )
        .expect("registered");
    let checks = check_cluster_stores(&registry);
    assert_eq!(checks.len(), 1);
    let why = checks[0].result.clone().unwrap_err();
    assert!(
        why.contains(key)
            && why.contains(&format!("redis-cli DEL {key}"))
            && why.contains("sorted set"),
        "{why}"
    );
    let b = registry.semaphore("partner").expect("a semaphore");
    assert!(matches!(b.call(|| ()), Err(BulkheadError::Full { .. })));
    assert_eq!(leases(&b).store_errors, 1);
    redis::cmd("DEL")
        .arg(key)
        .query::<()>(&mut server.admin())
        .expect("DEL");
    assert_eq!(check_cluster_stores(&registry)[0].result, Ok(()));
}

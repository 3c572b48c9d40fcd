//! The admin router (feature `axum`), served on 127.0.0.1 and spoken to over real
//! HTTP/1.1: the JSON of every bulkhead, the events stream, the write path's tokens, and a
//! slow events client that must not slow calls down.
//!
//! Deterministic: a test waits on what the server sends (response heads, stream lines),
//! never on time; a deadline only turns a hang into a failure.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bulkhead::axum::Admin;
use bulkhead::{BulkheadError, bulkhead};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const DECLARED: &str = include_str!("../bulkheads.yaml");
const TOKEN: &str = "correct horse battery staple";

#[bulkhead("admin-orders")]
fn order() -> Result<(), BulkheadError> {
    Ok(())
}

#[bulkhead("admin-reports")]
fn report() -> Result<(), BulkheadError> {
    Ok(())
}

#[bulkhead("admin-storm")]
fn storm() -> Result<(), BulkheadError> {
    Ok(())
}

/// Registers the test's bulkheads (a first call does), once, before any test holds a
/// permit of theirs.
fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        order().unwrap();
        report().unwrap();
        storm().unwrap();
    });
}

/// Held by each test that writes deploys: `PUT /config` replaces the deploy in force, so
/// write tests take turns (reads run alongside).
async fn writes() -> tokio::sync::MutexGuard<'static, ()> {
    static WRITES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    WRITES.lock().await
}

/// Serves `admin` on 127.0.0.1, with connect info (the peer address is logged).
async fn serve(admin: Admin) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = admin.router();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One request on its own connection (`Connection: close`), read to the end.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra: &[&str],
    body: impl AsRef<[u8]>,
) -> Reply {
    let body = body.as_ref();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nUser-Agent: admin-test\r\nContent-Length: {}\r\n",
        body.len()
    );
    for line in extra {
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    // A server may answer a body it refuses (too large) before reading all of it.
    let _ = stream.write_all(body).await;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Reply {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// Opens `GET /events` and reads the response head: once it is in, the
/// server's listener is subscribed.
async fn open_events(addr: SocketAddr) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            return reader;
        }
    }
}

/// Reads the stream until a line satisfies `wanted`, returning it.
async fn read_until(reader: &mut BufReader<TcpStream>, wanted: impl Fn(&str) -> bool) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).await.unwrap();
        assert!(n > 0, "the stream ended");
        if wanted(&line) {
            return line;
        }
    }
}

/// Runs `test` with a deadline that only turns a hang into a failure.
async fn within_a_minute<F: std::future::Future>(test: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the test hung")
}

/// The line of `name`'s entry in the declared `bulkheads.yaml`.
fn declared_line(name: &str) -> usize {
    DECLARED
        .lines()
        .position(|l| l.trim_start().starts_with(&format!("{name}:")))
        .map(|i| i + 1)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_bulkheads_lists_every_bulkhead_with_kind_config_site_and_snapshot() {
    register();
    let addr = serve(Admin::new()).await;
    within_a_minute(async {
        // Other tests register bulkheads meanwhile: the list holds every one registered
        // before the request and only ones registered by its end.
        let before = bulkhead::registry().names();
        let reply = request(addr, "GET", "/bulkheads", &[], "").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let after = bulkhead::registry().names();
        let list = reply.json();
        let list = list.as_array().expect("an array");
        let names: Vec<&str> = list.iter().map(|b| b["name"].as_str().unwrap()).collect();
        assert!(
            before.iter().all(|n| names.contains(&n.as_str())),
            "{names:?}"
        );
        assert!(
            names.iter().all(|n| after.iter().any(|a| a == n)),
            "{names:?}"
        );
        assert!(names.is_sorted(), "{names:?}");
        for declared in bulkhead::declarations().names() {
            assert!(names.contains(&declared), "{declared} in {names:?}");
        }
        for name in ["admin-orders", "admin-reports", "admin-storm"] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }

        let orders = &list[names.iter().position(|n| *n == "admin-orders").unwrap()];
        assert_eq!(orders["kind"], "semaphore");
        assert_eq!(orders["config"]["kind"], "semaphore");
        assert_eq!(orders["config"]["max_concurrent_calls"], 1);
        assert_eq!(orders["declared_at"]["file"], "bulkheads.yaml");
        assert_eq!(orders["declared_at"]["line"], declared_line("admin-orders"));
        let function = orders["functions"][0]["path"].as_str().unwrap();
        assert!(function.ends_with("::order"), "{function}");
        assert_eq!(orders["snapshot"]["name"], "admin-orders");
        assert_eq!(orders["snapshot"]["limit"], 1);
        assert!(orders["snapshot"]["calls"]["permitted"].as_u64().unwrap() >= 1);
        assert!(orders["snapshot"]["wait_time"]["buckets"].is_array());

        let reports = &list[names.iter().position(|n| *n == "admin-reports").unwrap()];
        assert_eq!(reports["kind"], "thread-pool");
        assert_eq!(reports["config"]["queue_capacity"], 1);
        assert_eq!(reports["snapshot"]["queue_capacity"], 1);

        let one = request(addr, "GET", "/bulkheads/admin-storm", &[], "").await;
        assert_eq!(one.status, 200);
        assert_eq!(one.json()["snapshot"]["kind"], "semaphore");
        let missing = request(addr, "GET", "/bulkheads/no-such-bulkhead", &[], "").await;
        assert_eq!(missing.status, 404);
        assert!(
            missing.json()["error"]
                .as_str()
                .unwrap()
                .contains("no-such-bulkhead")
        );

        let metrics = request(addr, "GET", "/metrics", &[], "").await;
        assert_eq!(metrics.status, 200);
        assert!(
            metrics
                .head
                .to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4")
        );
        assert!(
            metrics
                .body
                .contains("bulkhead_limit{bulkhead=\"admin-orders\"} 1\n")
        );

        let reloads = request(addr, "GET", "/reloads", &[], "").await;
        assert_eq!(reloads.status, 200);
        assert!(reloads.json()["refused"].is_u64());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_stream_delivers_a_refusal() {
    register();
    let addr = serve(Admin::new()).await;
    within_a_minute(async {
        let mut events = open_events(addr).await;
        // The one permit of `admin-orders` is held on one thread; a call on another is
        // refused.
        std::thread::scope(|s| {
            let orders = bulkhead::registry().semaphore("admin-orders").unwrap();
            let held = orders.try_acquire().unwrap();
            s.spawn(|| assert!(matches!(order(), Err(BulkheadError::Full { .. }))))
                .join()
                .unwrap();
            drop(held);
        });
        let line = read_until(&mut events, |l| {
            l.starts_with("data: ") && l.contains("\"admin-orders\"") && l.contains("\"refused\"")
        })
        .await;
        let event: Value = serde_json::from_str(line.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(event["kind"], "semaphore");
        assert_eq!(event["reason"], "full");
        assert!(event["message"].as_str().unwrap().contains("admin-orders"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_stream_delivers_a_call_timeout_as_timed_out_not_refused() {
    use bulkhead::config::{BulkheadConfig, Duration as ConfigDuration, SemaphoreConfig};
    let addr = serve(Admin::new()).await;
    within_a_minute(async {
        let mut events = open_events(addr).await;
        let limits = SemaphoreConfig::default();
        let slow = bulkhead::SemaphoreBulkhead::new("admin-timed-out", &limits);
        slow.configure(&BulkheadConfig {
            timeout: Some(ConfigDuration::from_millis(10)),
            ..BulkheadConfig::semaphore(limits)
        })
        .unwrap();
        let answer = slow.call_async(std::future::pending::<()>()).await;
        assert!(matches!(answer, Err(BulkheadError::CallTimeout { .. })));
        let line = read_until(&mut events, |l| {
            l.starts_with("data: ")
                && l.contains("\"admin-timed-out\"")
                && !l.contains("\"permitted\"")
                && !l.contains("\"finished\"")
        })
        .await;
        let event: Value = serde_json::from_str(line.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(event["event"], "timed_out", "{event}");
        assert_eq!(event["reason"], "call_timeout");
        assert!(
            event["message"]
                .as_str()
                .unwrap()
                .contains("admin-timed-out")
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_stream_delivers_every_deploys_outcome() {
    register();
    let _writes = writes().await;
    let addr = serve(Admin::new()).await;
    within_a_minute(async {
        let mut events = open_events(addr).await;
        // A deploy that could not be read: refused, nothing applied, reported like any.
        let unreadable = |_: &bulkhead::DeployBase| {
            Err::<bulkhead::CheckedDeploy, _>("deploy.yaml: error: cannot read the deploy file")
        };
        bulkhead::registry()
            .deploy_with("the events test", false, unreadable)
            .unwrap_err();
        let line = read_until(&mut events, |l| {
            l.starts_with("data: ") && l.contains("\"deploy\"") && l.contains("the events test")
        })
        .await;
        let event: Value = serde_json::from_str(line.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(event["result"], "refused");
        assert!(
            event["message"]
                .as_str()
                .unwrap()
                .contains("cannot read the deploy file"),
            "{event}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_path_needs_the_right_token_and_resizes() {
    register();
    let _writes = writes().await;
    let read_only = serve(Admin::new()).await;
    let writable = serve(Admin::new().without_env().write_token(TOKEN)).await;
    let pool_limit = || {
        bulkhead::registry()
            .thread_pool("admin-reports")
            .unwrap()
            .snapshot()
            .limit
    };
    let resize = r#"{"max_threads": 2}"#;
    let bearer = format!("Authorization: Bearer {TOKEN}");
    within_a_minute(async {
        // Without a token every write route answers 405, as JSON.
        let put_off = request(read_only, "PUT", "/config", &[&bearer], "bulkheads: {}\n").await;
        assert_eq!(put_off.status, 405, "{}", put_off.body);
        assert!(
            put_off.json()["error"]
                .as_str()
                .unwrap()
                .contains("read-only")
        );
        let off = request(
            read_only,
            "PATCH",
            "/bulkheads/admin-reports",
            &[&bearer],
            resize,
        )
        .await;
        assert_eq!(off.status, 405);

        let anonymous = request(writable, "PATCH", "/bulkheads/admin-reports", &[], resize).await;
        assert_eq!(anonymous.status, 401);
        assert!(
            anonymous
                .head
                .to_ascii_lowercase()
                .contains("www-authenticate: bearer")
        );
        let wrong = request(
            writable,
            "PATCH",
            "/bulkheads/admin-reports",
            &["Authorization: Bearer correct horse battery stapler"],
            resize,
        )
        .await;
        assert_eq!(wrong.status, 403);
        assert_eq!(pool_limit(), 1, "refused requests change nothing");

        let resized = request(
            writable,
            "PATCH",
            "/bulkheads/admin-reports",
            &[&bearer],
            resize,
        )
        .await;
        assert_eq!(resized.status, 200, "{}", resized.body);
        assert_eq!(
            resized.json()["resized"],
            serde_json::json!(["admin-reports"])
        );
        assert_eq!(pool_limit(), 2);

        // An invalid change: 422 with the diagnostic, nothing applied.
        let invalid = request(
            writable,
            "PATCH",
            "/bulkheads/admin-reports",
            &[&bearer],
            r#"{"max_threads": "many"}"#,
        )
        .await;
        assert_eq!(invalid.status, 422, "{}", invalid.body);
        assert!(
            invalid.json()["error"]
                .as_str()
                .unwrap()
                .contains("max_threads")
        );
        assert_eq!(pool_limit(), 2);

        // A whole deploy, layered over the declaration.
        let deploy = "bulkheads:\n  admin-reports: { max_threads: 3 }\n";
        let applied = request(writable, "PUT", "/config", &[&bearer], deploy).await;
        assert_eq!(applied.status, 200, "{}", applied.body);
        assert_eq!(pool_limit(), 3);
        let broken = "bulkheads:\n  admin-reports: { kind: semaphore }\n";
        let refused = request(writable, "PUT", "/config", &[&bearer], broken).await;
        assert_eq!(refused.status, 422, "{}", refused.body);
        assert!(
            refused.json()["error"]
                .as_str()
                .unwrap()
                .contains("PUT /config")
        );
        assert_eq!(pool_limit(), 3);
        let status = bulkhead::registry().reload_status();
        assert!(status.last_error.is_some());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_events_client_loses_events_and_never_slows_calls() {
    register();
    let addr = serve(Admin::new().events_buffer(16)).await;
    within_a_minute(async {
        // A client that stops reading once subscribed.
        let mut slow = open_events(addr).await;
        let before = bulkhead::axum::events_dropped();
        let storm_bulkhead = bulkhead::registry().semaphore("admin-storm").unwrap();
        let refused_before = storm_bulkhead.snapshot().calls.refused.full;
        // Refusals until the client's buffer (and the sockets behind it) are full and
        // events are dropped: every call returns at once all the while.
        let started = std::time::Instant::now();
        let calls = std::thread::scope(|s| {
            let held = storm_bulkhead.try_acquire().unwrap();
            let calls = s
                .spawn(|| {
                    let mut calls = 0u64;
                    // Well past the first drop: other tests' clients read, and lose few if any.
                    while bulkhead::axum::events_dropped() - before < 10_000 {
                        assert!(matches!(storm(), Err(BulkheadError::Full { .. })));
                        calls += 1;
                        assert!(calls < 50_000_000, "the events buffer never filled");
                    }
                    calls
                })
                .join()
                .unwrap();
            drop(held);
            calls
        });
        // For the record, not a check: what a refused call cost with the client stuck.
        eprintln!(
            "{calls} refusals with a stuck events client: {:?} each",
            started.elapsed() / u32::try_from(calls).unwrap_or(u32::MAX)
        );
        assert_eq!(
            storm_bulkhead.snapshot().calls.refused.full - refused_before,
            calls,
            "every call was refused and counted"
        );
        // Reading again, the client is told it lost events.
        let notice = read_until(&mut slow, |l| l.starts_with("event: dropped")).await;
        assert!(notice.starts_with("event: dropped"));
        let data = read_until(&mut slow, |l| l.starts_with("data: ")).await;
        let dropped: Value =
            serde_json::from_str(data.trim_start_matches("data: ").trim()).unwrap();
        assert!(dropped["dropped"].as_u64().unwrap() >= 1);
    })
    .await;
}

/// A semaphore bulkhead registered by hand (no declaration): a deploy sizes it too.
fn hand_registered(name: &str) -> bulkhead::SemaphoreBulkhead {
    use bulkhead::config::{BulkheadConfig, SemaphoreConfig};
    let config = BulkheadConfig::semaphore(SemaphoreConfig {
        max_concurrent_calls: 1,
        ..SemaphoreConfig::default()
    });
    bulkhead::registry()
        .register(name, &config)
        .unwrap()
        .as_semaphore()
        .cloned()
        .unwrap()
}

fn limit_patch(limit: u32) -> String {
    format!("{{\"max_concurrent_calls\": {limit}}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_patches_to_different_bulkheads_all_survive() {
    const WRITERS: usize = 8;
    const ROUNDS: u32 = 50;
    let _writes = writes().await;
    let bulkheads: Vec<_> = (0..WRITERS)
        .map(|i| hand_registered(&format!("patched-{i}")))
        .collect();
    let addr = serve(Admin::new().without_env().write_token(TOKEN)).await;
    let bearer = format!("Authorization: Bearer {TOKEN}");
    within_a_minute(async {
        for round in 0..ROUNDS {
            let limit = round + 2;
            let start = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS));
            let writers: Vec<_> = (0..WRITERS)
                .map(|i| {
                    let (start, bearer) = (start.clone(), bearer.clone());
                    tokio::spawn(async move {
                        start.wait().await;
                        let path = format!("/bulkheads/patched-{i}");
                        request(addr, "PATCH", &path, &[&bearer], &limit_patch(limit)).await
                    })
                })
                .collect();
            for writer in writers {
                let reply = writer.await.unwrap();
                assert_eq!(reply.status, 200, "{}", reply.body);
                let in_force = &reply.json()["config"]["max_concurrent_calls"];
                assert_eq!(in_force, &serde_json::json!(limit), "{}", reply.body);
            }
            // Every change answered 200 is in force: none was lost to another.
            for (i, bulkhead) in bulkheads.iter().enumerate() {
                assert_eq!(bulkhead.limit(), limit, "patched-{i} in round {round}");
            }
        }
        let status = bulkhead::registry().reload_status();
        let source = status.in_force.expect("a deploy is in force");
        assert!(source.starts_with("PATCH /bulkheads/patched-"), "{source}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_patches_to_one_key_leave_one_winner_each_answer_stating_its_value() {
    const WRITERS: u32 = 8;
    let _writes = writes().await;
    let contested = hand_registered("patched-contested");
    let addr = serve(Admin::new().without_env().write_token(TOKEN)).await;
    let bearer = format!("Authorization: Bearer {TOKEN}");
    within_a_minute(async {
        for round in 0..10 {
            let start = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS as usize));
            let writers: Vec<_> = (0..WRITERS)
                .map(|i| {
                    let (start, bearer) = (start.clone(), bearer.clone());
                    let limit = 100 * round + i + 2;
                    tokio::spawn(async move {
                        start.wait().await;
                        let path = "/bulkheads/patched-contested";
                        let body = limit_patch(limit);
                        (limit, request(addr, "PATCH", path, &[&bearer], &body).await)
                    })
                })
                .collect();
            let mut sent = Vec::new();
            for writer in writers {
                let (limit, reply) = writer.await.unwrap();
                assert_eq!(reply.status, 200, "{}", reply.body);
                // Each answer states the value its own change put in force.
                let stated = &reply.json()["config"]["max_concurrent_calls"];
                assert_eq!(stated, &serde_json::json!(limit), "{}", reply.body);
                sent.push(limit);
            }
            let winner = contested.limit();
            assert!(sent.contains(&winner), "{winner} is one of {sent:?}");
            let read = request(addr, "GET", "/bulkheads/patched-contested", &[], "").await;
            let shown = &read.json()["config"]["max_concurrent_calls"];
            assert_eq!(shown, &serde_json::json!(winner), "{}", read.body);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_keeps_the_rest_of_the_deploy_in_force_and_a_put_replaces_it() {
    let _writes = writes().await;
    let kept = hand_registered("patched-kept");
    let other = hand_registered("patched-other");
    let addr = serve(Admin::new().without_env().write_token(TOKEN)).await;
    let bearer = format!("Authorization: Bearer {TOKEN}");
    within_a_minute(async {
        let put = "bulkheads:\n  patched-kept: { max_concurrent_calls: 9 }\n";
        let applied = request(addr, "PUT", "/config", &[&bearer], put).await;
        assert_eq!(applied.status, 200, "{}", applied.body);
        assert_eq!(
            kept.limit(),
            9,
            "a deploy sizes a bulkhead registered by hand"
        );
        let patched = request(
            addr,
            "PATCH",
            "/bulkheads/patched-other",
            &[&bearer],
            &limit_patch(4),
        )
        .await;
        assert_eq!(patched.status, 200, "{}", patched.body);
        assert_eq!(
            (kept.limit(), other.limit()),
            (9, 4),
            "the PUT's entry survives the PATCH"
        );
        let replaced = request(addr, "PUT", "/config", &[&bearer], "bulkheads: {}\n").await;
        assert_eq!(replaced.status, 200, "{}", replaced.body);
        assert_eq!(
            (kept.limit(), other.limit()),
            (1, 1),
            "a PUT replaces the deploy in force"
        );
        let reloads = request(addr, "GET", "/reloads", &[], "").await.json();
        assert!(
            reloads["in_force"]
                .as_str()
                .unwrap()
                .starts_with("PUT /config by 127.0.0.1:"),
            "{reloads}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_is_json_and_a_bad_body_is_a_422_placed_in_it() {
    register();
    let _writes = writes().await;
    // A bulkhead named like a route is still reachable: no route shadows a name.
    hand_registered("events");
    let read_only = serve(Admin::new()).await;
    let addr = serve(Admin::new().without_env().write_token(TOKEN)).await;
    let bearer = format!("Authorization: Bearer {TOKEN}");
    within_a_minute(async {
        for (method, path, status) in [
            ("GET", "/nowhere", 404),
            ("GET", "/bulkheads/", 404),
            ("GET", "/bulkheads/no-such-bulkhead", 404),
            ("GET", "/bulkheads/%FF", 400),
            ("GET", "/reloads/", 404),
            ("DELETE", "/bulkheads", 405),
            ("POST", "/config", 405),
        ] {
            let reply = request(read_only, method, path, &[], "").await;
            assert_eq!(reply.status, status, "{method} {path}: {}", reply.body);
            assert!(
                reply.json()["error"].is_string(),
                "{method} {path}: {}",
                reply.body
            );
        }
        let named_events = request(read_only, "GET", "/bulkheads/events", &[], "").await;
        assert_eq!(named_events.status, 200, "{}", named_events.body);
        assert_eq!(named_events.json()["name"], "events");

        let patch = |body: &'static str| {
            let bearer = bearer.clone();
            async move { request(addr, "PATCH", "/bulkheads/admin-orders", &[&bearer], body).await }
        };
        // Malformed JSON: 422, placed at the fault.
        let malformed = patch("{\"max_concurrent_calls\": 2,,}").await;
        assert_eq!(malformed.status, 422, "{}", malformed.body);
        let placed = &malformed.json()["diagnostics"][0];
        assert_eq!(
            (placed["line"].as_u64(), placed["column"].as_u64()),
            (Some(1), Some(28)),
            "{placed}"
        );
        // Not an object.
        let array = patch("[1, 2]").await;
        assert_eq!(array.status, 422, "{}", array.body);
        assert!(
            array.json()["error"]
                .as_str()
                .unwrap()
                .contains("not a JSON object"),
            "{}",
            array.body
        );
        // A bad value on the body's second line: placed on line 2 of the body.
        let bad_value = patch("{\n  \"max_concurrent_calls\": \"lots\"\n}").await;
        assert_eq!(bad_value.status, 422, "{}", bad_value.body);
        let placed = &bad_value.json()["diagnostics"][0];
        assert_eq!(placed["line"].as_u64(), Some(2), "{placed}");
        assert_eq!(
            placed["key_path"], "bulkheads.admin-orders.max_concurrent_calls",
            "{placed}"
        );
        // Every one of them was recorded as a refused deploy.
        let reloads = request(addr, "GET", "/reloads", &[], "").await.json();
        assert!(
            reloads["last_error"]["message"]
                .as_str()
                .unwrap()
                .contains("max_concurrent_calls")
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_body_not_utf8_or_over_1_mib_is_refused_in_json_and_recorded() {
    register();
    let _writes = writes().await;
    let addr = serve(Admin::new().without_env().write_token(TOKEN)).await;
    let bearer = format!("Authorization: Bearer {TOKEN}");
    within_a_minute(async {
        let before = bulkhead::registry().reload_status().refused;
        let too_large = format!(
            "# {}\nbulkheads: {{}}\n",
            "x".repeat(bulkhead::config::MAX_SOURCE_BYTES)
        );
        for (method, path, body, status, placed) in [
            (
                "PUT",
                "/config",
                &b"bulkheads: {}\n  # caf\xc3\xa9 \xff"[..],
                400,
                Some((2, 10)),
            ),
            (
                "PATCH",
                "/bulkheads/admin-orders",
                &b"\xff\xfe"[..],
                400,
                Some((1, 1)),
            ),
            ("PUT", "/config", too_large.as_bytes(), 413, None),
            (
                "PATCH",
                "/bulkheads/admin-orders",
                too_large.as_bytes(),
                413,
                None,
            ),
        ] {
            let reply = request(addr, method, path, &[&bearer], body).await;
            assert_eq!(reply.status, status, "{method} {path}: {}", reply.body);
            assert!(
                reply.head.contains("content-type: application/json"),
                "{}",
                reply.head
            );
            let json = reply.json();
            assert!(json["error"].is_string(), "{json}");
            let diagnostic = &json["diagnostics"][0];
            if let Some((line, column)) = placed {
                assert!(
                    diagnostic["message"]
                        .as_str()
                        .unwrap()
                        .contains("not UTF-8"),
                    "{diagnostic}"
                );
                assert_eq!(
                    (diagnostic["line"].as_u64(), diagnostic["column"].as_u64()),
                    (Some(line), Some(column)),
                    "{diagnostic}"
                );
            } else {
                assert!(
                    diagnostic["message"].as_str().unwrap().contains("1 MiB"),
                    "{diagnostic}"
                );
            }
        }
        // Each was recorded as a refused deploy, like every other.
        let status = bulkhead::registry().reload_status();
        assert_eq!(status.refused, before + 4, "{status:?}");
        let last = request(addr, "GET", "/reloads", &[], "").await.json();
        assert!(
            last["last_error"]["message"]
                .as_str()
                .unwrap()
                .contains("1 MiB"),
            "{last}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_events_buffer_is_clamped_and_the_client_cap_answers_503() {
    register();
    let addr = serve(Admin::new().events_buffer(usize::MAX).max_event_clients(1)).await;
    within_a_minute(async {
        let mut first = open_events(addr).await;
        let second = request(addr, "GET", "/events", &[], "").await;
        assert_eq!(second.status, 503, "{}", second.body);
        assert!(
            second.json()["error"]
                .as_str()
                .unwrap()
                .contains("1 event clients"),
            "{}",
            second.body
        );
        assert!(
            second.head.to_ascii_lowercase().contains("retry-after"),
            "{}",
            second.head
        );
        // The first still listens, through its clamped buffer.
        storm().unwrap();
        read_until(&mut first, |line| {
            line.contains("\"bulkhead\":\"admin-storm\"")
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_ends_open_event_streams_and_finishes() {
    register();
    let admin = Admin::new();
    let streams = admin.event_streams();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (shut_down, shutdown) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, admin.router())
            .with_graceful_shutdown(async move {
                let _ = shutdown.await;
                streams.close();
            })
            .await
    });
    within_a_minute(async {
        let mut stream = open_events(addr).await;
        shut_down.send(()).unwrap();
        // The drain finishes: the server's future completes while the client is still
        // connected, and the client sees its stream end.
        server.await.unwrap().unwrap();
        let mut rest = String::new();
        stream.read_to_string(&mut rest).await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_guards_every_read_route() {
    register();
    let addr = serve(Admin::new().read_token("reader").write_token(TOKEN)).await;
    within_a_minute(async {
        for path in [
            "/bulkheads",
            "/bulkheads/admin-orders",
            "/events",
            "/metrics",
            "/reloads",
        ] {
            let anonymous = request(addr, "GET", path, &[], "").await;
            assert_eq!(anonymous.status, 401, "{path}: {}", anonymous.body);
            let wrong = request(addr, "GET", path, &["Authorization: Bearer read"], "").await;
            assert_eq!(wrong.status, 403, "{path}: {}", wrong.body);
        }
        for token in ["reader", TOKEN] {
            let auth = format!("Authorization: Bearer {token}");
            let reply = request(addr, "GET", "/bulkheads/admin-orders", &[&auth], "").await;
            assert_eq!(reply.status, 200, "{}", reply.body);
        }
    })
    .await;
}

/// Every log line of the test binary, as the `fmt` subscriber prints it.
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    Arc::clone(LOGS.get_or_init(|| {
        #[derive(Clone)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(Arc::clone(&logs));
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        logs
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_password_never_leaves_the_process() {
    const SECRET: &str = "planted-hunter2";
    let logs = captured_logs();
    register();
    let _writes = writes().await;
    let secret_token = "planted-token-hunter2";
    let admin = Admin::new()
        .without_env()
        .write_token(secret_token)
        .read_token(SECRET);
    let debug = format!("{admin:?}");
    let addr = serve(admin).await;
    let bearer = format!("Authorization: Bearer {secret_token}");
    let mut seen = vec![debug];
    within_a_minute(async {
        let store = format!(
            "rate_limit: {{ limit_for_period: 100, refresh_period: 1s, scope: cluster, \
             store: {{ redis: \"redis://:{SECRET}@127.0.0.1:1/0\" }} }}"
        );
        let leases = format!("cluster: {{ store: {{ redis: \"redis://:{SECRET}@127.0.0.1:1/2\" }} }}");
        let put = format!("bulkheads:\n  admin-orders: {{ {store}, {leases} }}\n");
        let applied = request(addr, "PUT", "/config", &[&bearer], &put).await;
        assert_eq!(applied.status, 200, "{}", applied.body);
        let patch = format!(
            "{{\"rate_limit\": {{\"limit_for_period\": 50, \"refresh_period\": \"1s\", \
             \"scope\": \"cluster\", \"store\": {{\"redis\": \"redis://:{SECRET}@127.0.0.1:1/1\"}}}}}}"
        );
        let patched = request(addr, "PATCH", "/bulkheads/admin-orders", &[&bearer], &patch).await;
        assert_eq!(patched.status, 200, "{}", patched.body);
        assert!(patched.body.contains("redis://…@127.0.0.1:1/1"), "{}", patched.body);
        // A refused one, quoting a malformed URL in its diagnostic.
        let broken = put.replace("redis://", "redis//");
        let refused = request(addr, "PUT", "/config", &[&bearer], &broken).await;
        assert_eq!(refused.status, 422, "{}", refused.body);
        seen.extend([applied.body, patched.body, refused.body]);
        let auth = format!("Authorization: Bearer {SECRET}");
        for path in ["/bulkheads", "/bulkheads/admin-orders", "/reloads", "/metrics"] {
            let reply = request(addr, "GET", path, &[&auth], "").await;
            assert_eq!(reply.status, 200, "{path}: {}", reply.body);
            seen.push(reply.body);
        }
        assert!(
            seen.iter().any(|t| t.contains("redis://…@127.0.0.1:1/2")),
            "the cluster limit's store is shown, redacted: {seen:?}"
        );
    })
    .await;
    let registry = bulkhead::registry();
    seen.push(format!("{:?}", registry.config("admin-orders").unwrap()));
    seen.push(format!("{:?}", registry.deploy_base()));
    seen.push(format!("{:?}", registry.reload_status()));
    seen.push(String::from_utf8_lossy(&logs.lock().unwrap()).into_owned());
    assert!(
        seen.last().unwrap().contains("deploy applied"),
        "the log was captured"
    );
    for text in &seen {
        assert!(!text.contains(SECRET), "the password leaked: {text}");
        assert!(!text.contains(secret_token), "the token leaked: {text}");
    }
    // Back to the declared sizes, for the other tests.
    let reset = bulkhead::install(&bulkhead::Config::default());
    reset.unwrap();
}

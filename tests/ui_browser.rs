//! The admin router's live page (`GET /admin/ui`) in a real browser: headless chromium
//! loads it from a server on 127.0.0.1 while calls hold three bulkheads in a known state
//! (running, queued, refused, partitions and keys), and every number the page shows is
//! compared with the registry's snapshot. A screenshot is saved under the target
//! directory (`tmp/ui-browser.png`).
//!
//! Needs `chromium` on the `PATH` (Debian: `apt-get install chromium`), or its path in
//! `BULKHEAD_CHROMIUM`. Without one the tests say so and pass, unless
//! `BULKHEAD_REQUIRE_BROWSER=1` (as in CI), which makes a missing browser a failure.
//!
//! Deterministic: the calls are held by latches while the page is read, so the registry
//! does not change under it; the browser runs on virtual time (`--virtual-time-budget`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use bulkhead::axum::Admin;
use bulkhead::{BulkheadError, bulkhead};
use serde_json::Value;

mod support;
use support::Latch;

// The three bulkheads of this test (bulkheads.yaml): `ui-orders` a semaphore of 4 whose
// saturation turns `warning` at half its limit, `ui-reports` a pool of 2 threads and a
// queue of 2, `ui-tenants` a semaphore of 4 with partitions and one call per key.

/// A call's body: with `hold`, it says it started and waits for the gate.
fn held(hold: Option<(&Latch, &Barrier)>) {
    if let Some((gate, started)) = hold {
        started.wait();
        gate.wait();
    }
}

#[bulkhead("ui-orders")]
fn order(hold: Option<(&Latch, &Barrier)>) -> Result<(), BulkheadError> {
    held(hold);
    Ok(())
}

#[bulkhead("ui-reports")]
fn report(gate: Option<&Latch>) -> Result<(), BulkheadError> {
    if let Some(gate) = gate {
        gate.wait();
    }
    Ok(())
}

#[bulkhead("ui-tenants", partition = "batch", key = tenant)]
fn batch(tenant: &str, hold: Option<(&Latch, &Barrier)>) -> Result<(), BulkheadError> {
    held(hold);
    Ok(())
}

#[bulkhead("ui-tenants", partition = "live", key = tenant)]
fn live(tenant: &str, hold: Option<(&Latch, &Barrier)>) -> Result<(), BulkheadError> {
    held(hold);
    Ok(())
}

const OURS: [&str; 3] = ["ui-orders", "ui-reports", "ui-tenants"];

/// The browser, or `None` (said plainly) when there is none and none is required.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("BULKHEAD_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            ["chromium", "chromium-browser", "google-chrome"]
                .iter()
                .find_map(|name| {
                    std::env::split_paths(&std::env::var_os("PATH")?)
                        .map(|dir| dir.join(name))
                        .find(|path| path.is_file())
                })
        });
    if found.is_none() {
        let message = "no chromium found: the live page's browser test needs Debian's `chromium` \
             (`apt-get install chromium`) on the PATH, or its path in BULKHEAD_CHROMIUM";
        assert!(
            std::env::var_os("BULKHEAD_REQUIRE_BROWSER").is_none(),
            "{message} (BULKHEAD_REQUIRE_BROWSER is set, so this is a failure)"
        );
        eprintln!("skipped: {message}");
    }
    found
}

/// Runs headless chromium on `url` with `args`, killing it if it hangs; its stdout.
fn run_browser(browser: &std::path::Path, args: &[&str], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--hide-scrollbars",
            "--virtual-time-budget=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
        out
    });
    // A guard against a hung browser, not a measurement: a page on virtual time renders
    // in a few seconds.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium failed: {status}");
            break;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("chromium did not finish loading {url} within two minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// The text of the element marked `data-v="key"`, and its `data-seconds`, in the dump.
fn shown(dom: &str, key: &str) -> (String, Option<String>) {
    let marker = format!("data-v=\"{key}\"");
    let at = dom
        .find(&marker)
        .unwrap_or_else(|| panic!("the page shows no `{key}`"));
    let tag_start = dom[..at].rfind('<').unwrap();
    let tag_end = at + dom[at..].find('>').unwrap();
    let tag = &dom[tag_start..tag_end];
    let seconds = tag.find("data-seconds=\"").map(|i| {
        let rest = &tag[i + "data-seconds=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    });
    let text_end = tag_end + 1 + dom[tag_end + 1..].find('<').unwrap();
    (dom[tag_end + 1..text_end].to_owned(), seconds)
}

fn text(dom: &str, key: &str) -> String {
    shown(dom, key).0
}

/// The saturation colour of a bulkhead's card.
fn card_saturation(dom: &str, name: &str) -> String {
    let marker = format!("<article data-bulkhead=\"{name}\" data-saturation=\"");
    let at = dom
        .find(&marker)
        .unwrap_or_else(|| panic!("no card for {name}"));
    let rest = &dom[at + marker.len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// A p99 the page shows (`data-seconds`), against the snapshot's (`null` when empty).
fn assert_p99(dom: &str, key: &str, snapshot: &Value) {
    let (_, seconds) = shown(dom, key);
    let seconds = seconds.unwrap_or_else(|| panic!("`{key}` has no data-seconds"));
    match snapshot.as_f64() {
        Some(expected) => assert_eq!(seconds.parse::<f64>().unwrap(), expected, "{key}"),
        None => assert_eq!(seconds, "null", "{key}"),
    }
}

/// Serves the admin router on 127.0.0.1 with a read token (the page's data routes need
/// `Authorization: Bearer ui-secret`) behind a layer that ends the first events stream at
/// once, so that the page has to reconnect. Returns the address and the number of events
/// requests seen.
fn serve(runtime: &tokio::runtime::Runtime) -> (SocketAddr, Arc<AtomicUsize>) {
    let events_requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&events_requests);
    let guard = move |request: Request, next: Next| {
        let counted = Arc::clone(&counted);
        async move {
            let path = request.uri().path().to_owned();
            if path == "/admin/events" && counted.fetch_add(1, Ordering::SeqCst) == 0 {
                // The stream drops right away: an empty event stream, then the end.
                return Response::builder()
                    .header(http::header::CONTENT_TYPE, "text/event-stream")
                    .body(axum::body::Body::empty())
                    .unwrap();
            }
            next.run(request).await
        }
    };
    let app = Router::new()
        .nest("/admin", Admin::new().read_token("ui-secret").router())
        .layer(middleware::from_fn(guard));
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(async move { axum::serve(listener, app).await });
    (addr, events_requests)
}

/// Spins (yielding) until `done`; a guard against a stuck setup, not a timing threshold.
fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "never reached: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn snapshot(name: &str) -> Value {
    serde_json::to_value(bulkhead::registry().get(name).unwrap().snapshot()).unwrap()
}

#[test]
fn the_live_page_shows_what_the_registry_holds() {
    let Some(browser) = chromium() else { return };
    let _timing = bulkhead::events::time_calls();
    // A bulkhead registered by hand, for the page's filter to hide.
    let other = bulkhead::config::BulkheadConfig::semaphore(Default::default());
    bulkhead::registry().register("other-api", &other).unwrap();
    // Completed calls first, so that the histograms have something to show.
    for _ in 0..20 {
        order(None).unwrap();
        report(None).unwrap();
        live("warm-up", None).unwrap();
    }
    let gate = Latch::default();
    let orders_started = Barrier::new(4);
    let tenants_started = Barrier::new(4);
    let fourth = Latch::default();
    let fourth_started = Barrier::new(2);
    // Whatever happens below, the held calls are let go (a failed assertion would
    // otherwise wait for them for ever).
    struct OpenOnDrop<'a>(&'a Latch);
    impl Drop for OpenOnDrop<'_> {
        fn drop(&mut self) {
            self.0.open();
        }
    }
    std::thread::scope(|s| {
        let _release = (OpenOnDrop(&gate), OpenOnDrop(&fourth));
        // ui-orders: 3 of 4 running (75 %: `warning` by its config, `ok` by the defaults),
        // then the 4th permit taken and 5 calls refused `full`, then the 4th let go.
        for _ in 0..3 {
            let hold = (&gate, &orders_started);
            s.spawn(move || order(Some(hold)).unwrap());
        }
        orders_started.wait();
        // ui-reports: 2 running, 2 queued (the queue full: `critical`), 3 refused.
        for _ in 0..4 {
            let gate = &gate;
            s.spawn(move || report(Some(gate)).unwrap());
        }
        until("ui-reports runs 2 and queues 2", || {
            let pool = bulkhead::registry()
                .thread_pool("ui-reports")
                .unwrap()
                .snapshot();
            pool.active == 2 && pool.queued == 2
        });
        for _ in 0..3 {
            assert!(matches!(report(None), Err(BulkheadError::Full { .. })));
        }
        // ui-tenants: two batch tenants and one live one in flight; a second call of
        // tenant `t1` is refused by its per-key cap.
        for (tenant, is_batch) in [("t1", true), ("t2", true), ("t3", false)] {
            let hold = (&gate, &tenants_started);
            s.spawn(move || {
                if is_batch {
                    batch(tenant, Some(hold)).unwrap();
                } else {
                    live(tenant, Some(hold)).unwrap();
                }
            });
        }
        tenants_started.wait();
        assert!(matches!(
            batch("t1", None),
            Err(BulkheadError::KeyLimit { .. })
        ));
        let hold = (&fourth, &fourth_started);
        s.spawn(move || order(Some(hold)).unwrap());
        fourth_started.wait();
        for _ in 0..5 {
            assert!(matches!(order(None), Err(BulkheadError::Full { .. })));
        }
        fourth.open();
        until("ui-orders back to 3 running", || {
            bulkhead::registry()
                .semaphore("ui-orders")
                .unwrap()
                .snapshot()
                .active
                == 3
        });

        check_the_page(&browser);
    });
}

fn check_the_page(browser: &std::path::Path) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (addr, events_requests) = serve(&runtime);
    let page = format!("http://{addr}/admin/ui?filter=ui-#token=ui-secret");
    let dom = run_browser(browser, &["--dump-dom"], &page);
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-browser.png");
    run_browser(
        browser,
        &[
            "--window-size=1280,1100",
            &format!("--screenshot={}", screenshot.display()),
        ],
        &page,
    );
    assert!(
        screenshot.is_file(),
        "no screenshot at {}",
        screenshot.display()
    );
    println!("screenshot of the live page: {}", screenshot.display());

    // The page polled the snapshots with the token, and reopened the events stream after
    // the guard ended the first one.
    assert!(
        dom.contains("data-polls=\""),
        "the page never rendered a snapshot:\n{dom}"
    );
    let connections: usize = dom
        .split("data-connections=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .expect("the page opened the events stream");
    assert!(
        connections >= 2,
        "the page did not reconnect ({connections} connections)"
    );
    assert!(events_requests.load(Ordering::SeqCst) >= 2);
    assert!(
        dom.contains("data-state=\"live\""),
        "the events stream is not live again"
    );

    for name in OURS {
        let s = snapshot(name);
        let int = |field: &str| s[field].as_u64().unwrap().to_string();
        assert_eq!(
            text(&dom, &format!("{name}.kind")),
            s["kind"].as_str().unwrap()
        );
        assert_eq!(
            text(&dom, &format!("{name}.saturation")),
            s["saturation"].as_str().unwrap()
        );
        assert_eq!(
            card_saturation(&dom, name),
            s["saturation"].as_str().unwrap()
        );
        for field in ["active", "limit", "waiting"] {
            assert_eq!(
                text(&dom, &format!("{name}.{field}")),
                int(field),
                "{name}.{field}"
            );
        }
        assert_eq!(
            text(&dom, &format!("{name}.permitted")),
            s["calls"]["permitted"].to_string()
        );
        for (reason, n) in s["calls"]["refused"].as_object().unwrap() {
            let key = format!("{name}.refused.{reason}");
            if n.as_u64().unwrap() > 0 {
                assert_eq!(text(&dom, &key), n.to_string(), "{key}");
                let rate = text(&dom, &format!("{name}.refused_per_second.{reason}"));
                assert!(
                    rate.parse::<f64>().is_ok_and(|r| r >= 0.0),
                    "{key}/s: {rate}"
                );
            } else {
                assert!(
                    !dom.contains(&format!("data-v=\"{key}\"")),
                    "{key} shown as 0"
                );
            }
        }
        assert_p99(
            &dom,
            &format!("{name}.call_p99"),
            &s["call_duration"]["p99_seconds"],
        );
        assert_p99(
            &dom,
            &format!("{name}.wait_p99"),
            &s["wait_time"]["p99_seconds"],
        );
        if s["queue_capacity"].is_u64() {
            for field in ["queued", "queue_capacity"] {
                assert_eq!(
                    text(&dom, &format!("{name}.{field}")),
                    int(field),
                    "{name}.{field}"
                );
            }
            assert_p99(
                &dom,
                &format!("{name}.queue_p99"),
                &s["queue_time"]["p99_seconds"],
            );
        }
        for p in s["partitions"].as_array().unwrap() {
            let partition = p["name"].as_str().unwrap();
            for field in ["guaranteed", "in_flight", "admitted", "borrowed", "refused"] {
                let key = format!("{name}.partition.{partition}.{field}");
                assert_eq!(text(&dom, &key), p[field].to_string(), "{key}");
            }
        }
        if let Some(keys) = s["per_key"].as_object() {
            for field in ["keys_tracked", "keys_at_limit"] {
                assert_eq!(
                    text(&dom, &format!("{name}.{field}")),
                    keys[field].to_string(),
                    "{name}.{field}"
                );
            }
        }
    }
    // What the state above makes of them, so that a page showing stale or default
    // figures cannot match by accident.
    assert_eq!(text(&dom, "ui-orders.active"), "3");
    assert_eq!(text(&dom, "ui-orders.refused.full"), "5");
    assert_eq!(card_saturation(&dom, "ui-orders"), "warning");
    assert_eq!(text(&dom, "ui-reports.queued"), "2");
    assert_eq!(text(&dom, "ui-reports.refused.full"), "3");
    assert_eq!(card_saturation(&dom, "ui-reports"), "critical");
    assert_eq!(text(&dom, "ui-tenants.partition.batch.in_flight"), "2");
    assert_eq!(text(&dom, "ui-tenants.refused.key_limit"), "1");
    assert_eq!(text(&dom, "ui-tenants.keys_tracked"), "3");
    // `?filter=ui-` hides every other bulkhead of the registry (there are dozens).
    let cards: Vec<&str> = dom
        .split("<article ")
        .skip(1)
        .map(|c| &c[..c.find('>').unwrap()])
        .collect();
    assert!(
        cards.len() > OURS.len(),
        "the page lists only {} bulkheads",
        cards.len()
    );
    for card in cards {
        let ours = OURS
            .iter()
            .any(|name| card.contains(&format!("data-bulkhead=\"{name}\"")));
        assert_eq!(card.contains("hidden"), !ours, "filtered wrongly: {card}");
    }
}

#[test]
fn without_the_token_the_page_asks_for_one() {
    let Some(browser) = chromium() else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (addr, _) = serve(&runtime);
    let dom = run_browser(
        &browser,
        &["--dump-dom"],
        &format!("http://{addr}/admin/ui"),
    );
    assert!(
        dom.contains("<form id=\"auth\">"),
        "the token form is hidden:\n{dom}"
    );
    assert!(dom.contains("answered 401: it needs a read token"), "{dom}");
    assert!(
        !dom.contains("<article"),
        "the page shows bulkheads it was refused"
    );
}

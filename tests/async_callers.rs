//! A synchronous thread-pool function called from axum handlers, against a real server on
//! 127.0.0.1: under 200 concurrent requests the pool and its queue fill, the rest are
//! refused with 503 at once, and an unrelated route keeps answering while the pool is
//! saturated — the runtime's workers are not stuck waiting for the pool.
//!
//! Deterministic: the pool's bodies wait on a gate the test opens only after it has seen
//! every refusal and the unrelated route's answers. Latencies are printed, never asserted.

use std::io::Write;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use bulkhead::async_caller::{Caller, caller};
use bulkhead::axum::Refusal;
use bulkhead::{BulkheadError, bulkhead};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Closed until the test opens it; the pool's bodies wait here.
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

static GATE: Gate = Gate {
    open: Mutex::new(false),
    opened: Condvar::new(),
};

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.opened.notify_all();
    }
}

/// The slow dependency: a synchronous function on a thread-pool bulkhead (2 workers,
/// queue of 4), called from async handlers as plain code would.
#[bulkhead("axum-render")]
fn render(page: u64) -> Result<String, BulkheadError> {
    GATE.wait();
    Ok(format!("page {page}"))
}

async fn render_page(Path(page): Path<u64>) -> Result<String, Refusal> {
    Ok(render(page)?)
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

async fn get_status(client: &HttpClient, url: String) -> (u16, Duration) {
    let started = Instant::now();
    let uri: hyper::Uri = url.parse().expect("a valid uri");
    let response = client.get(uri).await.expect("the server answers");
    let status = response.status().as_u16();
    if status == 503 {
        // A refusal tells the client when to retry and names nothing inside the service.
        let retry_after = response.headers().get("retry-after").expect("Retry-After");
        let secs: u64 = retry_after
            .to_str()
            .expect("ascii")
            .parse()
            .expect("seconds");
        assert!((1..=60).contains(&secs), "{secs}");
        assert!(response.headers().get("x-bulkhead").is_none());
    }
    let _ = response.into_body().collect().await;
    (status, started.elapsed())
}

/// Ends the test process with a message if the test is still running after `limit`. The
/// test's own guards are tokio timers, which a runtime whose workers are all stuck could
/// never fire: this thread is outside the runtime. Dropping the returned sender (at the end
/// of the test, or while it unwinds) stops the watchdog.
fn watchdog(limit: Duration) -> mpsc::Sender<()> {
    let (running, finished) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if finished.recv_timeout(limit) == Err(RecvTimeoutError::Timeout) {
            // Straight to the process's stderr: the test harness's capture of `eprintln!`
            // would be lost with the exit.
            let _ = writeln!(
                std::io::stderr(),
                "the test still runs after {limit:?}: the runtime's workers are stuck \
                 (a hang, reported as a failure)"
            );
            std::process::exit(101);
        }
    });
    running
}

/// The 99th percentile of some latencies.
fn p99(mut latencies: Vec<Duration>) -> Duration {
    latencies.sort();
    let index = (latencies.len() * 99).div_ceil(100).saturating_sub(1);
    latencies[index.min(latencies.len() - 1)]
}

async fn home_latencies(client: &HttpClient, base: &str, n: usize) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        let (status, took) = get_status(client, format!("{base}/home")).await;
        assert_eq!(status, 200, "the unrelated route answers");
        latencies.push(took);
    }
    latencies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_sync_pool_refuses_and_unrelated_route_stays_responsive() {
    const REQUESTS: usize = 200;
    const ADMITTED: usize = 2 + 4; // workers + queue
    let _watchdog = watchdog(Duration::from_secs(240));
    let app = Router::new()
        .route("/render/{page}", get(render_page))
        .route("/home", get(|| async { "home" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port on 127.0.0.1");
    let base = format!("http://{}", listener.local_addr().expect("bound"));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client: HttpClient = Client::builder(TokioExecutor::new()).build(HttpConnector::new());

    let idle = home_latencies(&client, &base, 50).await;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for page in 0..REQUESTS {
        let (client, tx, url) = (client.clone(), tx.clone(), format!("{base}/render/{page}"));
        tokio::spawn(async move {
            let _ = tx.send(get_status(&client, url).await);
        });
    }
    // Every request beyond the pool and its queue is refused while the admitted ones wait
    // at the gate. A runtime stuck on blocked workers would never get here: the guard
    // turns that into a failure instead of a hang.
    let guard = Duration::from_secs(120);
    let mut refused = 0;
    for _ in 0..REQUESTS - ADMITTED {
        let (status, _) = tokio::time::timeout(guard, rx.recv())
            .await
            .expect("refusals arrive while the pool is saturated")
            .expect("a response");
        assert_eq!(
            status, 503,
            "only refusals can answer while the gate is closed"
        );
        refused += 1;
    }
    // The pool is still saturated (the gate is closed): the unrelated route answers.
    let saturated = home_latencies(&client, &base, 50).await;
    let snapshot = bulkhead::registry()
        .get("axum-render")
        .expect("declared")
        .snapshot();
    assert_eq!(
        (snapshot.active, snapshot.queued),
        (2, 4),
        "pool and queue full while /home answered"
    );

    GATE.open();
    let mut served = 0;
    for _ in 0..ADMITTED {
        let (status, _) = rx.recv().await.expect("a response");
        assert_eq!(status, 200);
        served += 1;
    }
    println!(
        "{REQUESTS} concurrent requests: {served} served, {refused} refused (503); \
         /home p99 idle {:?}, p99 while the pool was saturated {:?}",
        p99(idle),
        p99(saturated)
    );
    assert_eq!((served, refused), (ADMITTED, REQUESTS - ADMITTED));
    server.abort();
}

#[test]
fn a_plain_thread_is_a_thread() {
    assert_eq!(caller(), Caller::Thread);
}

#[tokio::test(flavor = "current_thread")]
async fn a_task_on_a_current_thread_runtime_is_detected() {
    assert_eq!(caller(), Caller::CurrentThreadTask);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_task_on_a_multi_thread_runtime_is_detected() {
    assert_eq!(caller(), Caller::MultiThreadTask);
}

#[bulkhead("warn-render")]
fn thumbnail(size: u32) -> Result<u32, BulkheadError> {
    Ok(size / 2)
}

/// A `Write` that keeps what the subscriber writes, for the test to read.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_blocking_call_from_an_async_task_is_logged_once_per_function_with_the_fix() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        assert_eq!(thumbnail(8).expect("admitted"), 4);
        assert_eq!(thumbnail(6).expect("admitted"), 3);
    });
    let log = String::from_utf8(captured.0.lock().unwrap_or_else(|e| e.into_inner()).clone())
        .expect("utf-8");
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "one WARN per function: {log}");
    assert!(warnings[0].contains("thumbnail"), "{log}");
    assert!(warnings[0].contains("warn-render"), "{log}");
    assert!(warnings[0].contains("async fn"), "names the fix: {log}");
    assert!(
        warnings[0].contains("current-thread runtime"),
        "says what it blocks: {log}"
    );
}

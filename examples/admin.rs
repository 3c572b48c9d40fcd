//! The admin router under a light load: every bulkhead as JSON, its events as a stream,
//! `/metrics`, and live resizing with a token — optionally following a deploy file.
//!
//! ```sh
//! cargo run --example admin                                   # http://127.0.0.1:9899/admin/ui
//! cargo run --example admin -- --watch deploy/prod.yaml       # also follows the file
//! curl -s localhost:9899/admin/bulkheads/inventory
//! curl -sN localhost:9899/admin/events             # server-sent events
//! curl -s -X PATCH -H 'Authorization: Bearer demo-token' \
//!      -d '{"max_concurrent_calls": 8}' localhost:9899/admin/bulkheads/inventory
//! ```
//!
//! `inventory` (a semaphore of 4 permits, fail fast) and `reports` (2 threads, a queue of
//! 2) are declared in the crate's `bulkheads.yaml`; six callers offer more than either can
//! take, so refusals show in the snapshots, the events and the metrics. Resize `inventory`
//! to 8 and its refusals stop. The write token is `BULKHEAD_ADMIN_TOKEN`, or `demo-token`.
//! `-- --addr HOST:PORT` serves elsewhere; `-- --check` serves on a free port, makes the
//! requests above itself, prints what came back, then shuts the server down gracefully
//! with an event stream open (the stream ends, so the drain finishes) and exits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use axum::Router;
use bulkhead::axum::Admin;
use bulkhead::{BulkheadError, bulkhead};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[bulkhead("inventory")]
fn check_stock(sku: u64) -> Result<u64, BulkheadError> {
    thread::sleep(Duration::from_millis(5));
    Ok(sku % 7)
}

#[bulkhead("reports", fallback = report_unavailable)]
fn render_report(id: u64) -> String {
    thread::sleep(Duration::from_millis(20));
    format!("report {id}")
}

fn report_unavailable(id: u64, _refused: BulkheadError) -> String {
    format!("report {id} unavailable")
}

#[path = "support/load.rs"]
mod load;

/// One caller's call: a stock check and a report, then a short pause.
fn call_both(n: u64) {
    let _ = check_stock(n);
    let _ = render_report(n);
    thread::sleep(Duration::from_millis(2));
}

fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let check = std::env::args().any(|a| a == "--check");
    let token = std::env::var("BULKHEAD_ADMIN_TOKEN").unwrap_or_else(|_| "demo-token".into());
    let _watching = match flag("--watch") {
        Some(path) => {
            let guard = bulkhead::Watch::new(&path).start()?;
            println!("following {path}");
            Some(guard)
        }
        None => None,
    };

    // Register the bulkheads and start the load.
    let _ = check_stock(0);
    let _ = render_report(0);
    let stop = Arc::new(AtomicBool::new(false));
    load::start_load(6, &stop, call_both);

    let admin = Admin::new()
        .write_token(token.clone())
        .max_event_clients(16);
    // Event streams last as long as their clients: a graceful shutdown closes them first.
    let streams = admin.event_streams();
    let app = Router::new().nest("/admin", admin.router());
    let (shut_down, shutdown) = tokio::sync::oneshot::channel::<()>();
    let addr = if check {
        "127.0.0.1:0".to_owned()
    } else {
        flag("--addr").unwrap_or_else(|| "127.0.0.1:9899".into())
    };
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let addr = listener.local_addr()?;
    println!("serving http://{addr}/admin/bulkheads (write token: {token})");
    println!("live page: http://{addr}/admin/ui");
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            // A real service waits for its termination signal here.
            let _ = shutdown.await;
            streams.close();
        })
        .await
    });

    if !check {
        server.await??;
        return Ok(());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (method, path, body) in [
        ("GET", "/admin/bulkheads/inventory", ""),
        (
            "PATCH",
            "/admin/bulkheads/inventory",
            r#"{"max_concurrent_calls": 8}"#,
        ),
        ("GET", "/admin/reloads", ""),
    ] {
        let reply = request(addr, method, path, &token, body).await?;
        println!("\n$ {method} {path} {body}\n{reply}");
    }
    let metrics = request(addr, "GET", "/admin/metrics", &token, "").await?;
    println!("\n$ GET /admin/metrics | grep refusals_total");
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("bulkhead_refusals_total"))
    {
        println!("{line}");
    }
    // A graceful shutdown with an event stream open: the stream ends, the server stops.
    let mut events = tokio::net::TcpStream::connect(addr).await?;
    let open = format!("GET /admin/events HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    events.write_all(open.as_bytes()).await?;
    let mut head = [0u8; 12];
    events.read_exact(&mut head).await?;
    println!("\n$ GET /admin/events\n{}", String::from_utf8_lossy(&head));
    let _ = shut_down.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .map_err(|_| "the server did not shut down with an event stream open")???;
    println!("shut down gracefully with an event stream open");
    stop.store(true, Ordering::Relaxed);
    Ok(())
}

/// One HTTP/1.1 request with the token, its status line and body.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: &str,
) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await?;
    let status = raw.lines().next().unwrap_or_default().to_owned();
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok(format!("{status}\n{body}"))
}

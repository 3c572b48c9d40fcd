//! `/metrics` during load: the Prometheus exposition of every bulkhead while callers hammer
//! a semaphore bulkhead and a small thread pool.
//!
//! ```sh
//! cargo run --example metrics                            # prints /metrics mid-load, then a summary
//! cargo run --example metrics -- --serve 127.0.0.1:9898  # serves /metrics until interrupted
//! curl -s localhost:9898/metrics | grep -E 'queue_depth|refusals_total'
//! ```
//!
//! `inventory` (a semaphore of 4 permits, fail fast) and `reports` (2 threads, a queue of
//! 2) are declared in the crate's `bulkheads.yaml`. Eight callers offer more than either can
//! take, so the exposition shows active calls at the limit, a standing queue
//! (`bulkhead_queue_depth`, the number to page on), refusals by reason, wait and queue
//! time histograms and the saturation level. Refusals also log at WARN (target `bulkhead`).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use bulkhead::{BulkheadError, bulkhead, prometheus};

#[path = "support/load.rs"]
mod load;

/// A stock check: a fast dependency behind a semaphore bulkhead.
#[bulkhead("inventory")]
fn check_stock(sku: u64) -> Result<u64, BulkheadError> {
    thread::sleep(Duration::from_millis(2));
    Ok(sku % 7)
}

/// A report: a slow dependency behind a thread pool; refused calls get a placeholder.
#[bulkhead("reports", fallback = report_unavailable)]
fn render_report(id: u64) -> String {
    thread::sleep(Duration::from_millis(15));
    format!("report {id}")
}

fn report_unavailable(id: u64, refused: BulkheadError) -> String {
    format!("report {id} unavailable ({})", refused.reason())
}

/// One caller's call: a stock check and a report.
fn call_both(n: u64) {
    let _ = check_stock(n);
    let _ = render_report(n);
}

fn serve(addr: &str) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr)?;
    println!("serving http://{}/metrics", listener.local_addr()?);
    for stream in listener.incoming() {
        let mut stream = stream?;
        let mut request_line = String::new();
        BufReader::new(&stream).read_line(&mut request_line)?;
        let (status, content_type, body) = if request_line.starts_with("GET /metrics") {
            (
                "200 OK",
                prometheus::CONTENT_TYPE,
                prometheus::encode_registry(bulkhead::registry()),
            )
        } else {
            ("404 Not Found", "text/plain", "try /metrics\n".to_owned())
        };
        write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let callers = load::start_load(8, &stop, call_both);

    if let Some(at) = args.iter().position(|a| a == "--serve") {
        let addr = args.get(at + 1).map_or("127.0.0.1:9898", String::as_str);
        return serve(addr);
    }

    // Let the load build up, then scrape once, as Prometheus would.
    thread::sleep(Duration::from_millis(500));
    println!("# GET /metrics (mid-load)");
    print!("{}", prometheus::encode_registry(bulkhead::registry()));

    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        let _ = caller.join();
    }

    println!("\n# after the load");
    for s in bulkhead::registry().snapshot() {
        // Quantiles are bucket bounds: "at most".
        let ms = |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("≤{d:?}"));
        println!(
            "{:<10} {:<11} permitted {:>5}  refused {:>5}  wait p50 {:>8} p99 {:>8}  queue p99 {:>8}  saturation {}",
            s.name.as_str(),
            s.kind.as_str(),
            s.calls.permitted,
            s.calls.refused.total(),
            ms(s.wait_time.p50()),
            ms(s.wait_time.p99()),
            ms(s.queue_time.and_then(|q| q.p99())),
            s.saturation,
        );
    }
    Ok(())
}

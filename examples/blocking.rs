//! Bulkheads in plain blocking code: no async runtime, just threads.
//!
//! ```sh
//! cargo run --example blocking
//! ```
//!
//! A batch job renders reports on the `reports` thread-pool bulkhead (2 worker threads and
//! a queue of 2, declared in the crate's `bulkheads.yaml`) and reserves stock through the
//! `inventory` semaphore bulkhead (4 calls at once, fail fast). Eight threads ask for a
//! report at once: four are admitted (two run, two queue) and four are refused with
//! `BulkheadError::Full` right away, instead of piling up in an unbounded queue.

use std::thread;
use std::time::{Duration, Instant};

use bulkhead::BulkheadError;

/// Why a report was not rendered.
#[derive(Debug)]
enum ReportError {
    /// The `reports` pool was full: nothing ran, try again later.
    Busy(BulkheadError),
}

impl From<BulkheadError> for ReportError {
    fn from(refused: BulkheadError) -> Self {
        ReportError::Busy(refused)
    }
}

/// Renders a report on a `reports` worker thread; the caller blocks until it is done, so
/// the borrowed title is fine.
#[bulkhead::bulkhead("reports")]
fn render_report(title: &str) -> Result<String, ReportError> {
    thread::sleep(Duration::from_millis(200)); // the slow part: queries, PDF rendering
    let worker = thread::current().name().unwrap_or("?").to_string();
    Ok(format!("{title} (rendered on {worker})"))
}

/// Reserves stock for an order: at most 4 at once, on the caller's own thread.
#[bulkhead::bulkhead("inventory")]
fn reserve(sku: u32, quantity: u32) -> Result<u32, BulkheadError> {
    thread::sleep(Duration::from_millis(5));
    Ok(sku * 1000 + quantity)
}

fn main() {
    let started = Instant::now();
    let outcomes: Vec<(usize, Result<String, ReportError>, Duration)> = thread::scope(|s| {
        let callers: Vec<_> = (1..=8)
            .map(|n| {
                s.spawn(move || {
                    let asked = Instant::now();
                    let title = format!("report {n}");
                    let outcome = render_report(&title);
                    (n, outcome, asked.elapsed())
                })
            })
            .collect();
        callers
            .into_iter()
            .map(|caller| caller.join().expect("a caller thread panicked"))
            .collect()
    });

    for (n, outcome, took) in &outcomes {
        match outcome {
            Ok(report) => println!("caller {n}: {report} after {}ms", took.as_millis()),
            Err(ReportError::Busy(refused)) => println!(
                "caller {n}: refused after {}ms ({}): {refused}",
                took.as_millis(),
                refused.reason()
            ),
        }
    }
    let rendered = outcomes.iter().filter(|(_, o, _)| o.is_ok()).count();
    println!(
        "{rendered} of {} reports rendered, {} refused at once, in {}ms",
        outcomes.len(),
        outcomes.len() - rendered,
        started.elapsed().as_millis()
    );

    match reserve(42, 3) {
        Ok(reservation) => println!("reserved stock: reservation {reservation}"),
        Err(refused) => println!("inventory refused: {refused}"),
    }

    for snapshot in bulkhead::registry().snapshot() {
        println!(
            "{:<10} {:<11} limit {:>2}  completed {:>2}  refused {:>2}",
            snapshot.name.as_str(),
            snapshot.kind.as_str(),
            snapshot.limit,
            snapshot.calls.completed,
            snapshot.calls.refused.total(),
        );
    }
}

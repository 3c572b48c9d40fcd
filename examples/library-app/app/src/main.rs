//! An application using a library (`geo-client`) that declares its own bulkheads, and
//! sizing them for its own traffic with a deploy file.
//!
//! ```sh
//! cargo run -p library-app                # deploy.yaml resizes the library's bulkheads
//! cargo run -p library-app -- --defaults  # the library's own defaults
//! cargo run -p library-app -- --check-config examples/library-app/app/deploy.yaml   # CI
//! ```
//!
//! The library's bulkheads are in the registry from the start, before any call, because
//! `#[bulkhead]` compiles each declaration into the binary. Twelve threads geocode at
//! once. With the library's defaults (2 threads, queue 4) six are refused; with
//! `deploy.yaml` installed at start-up (8 threads, queue 16) all are served. (A real deploy
//! reads its file from disk with `Deploy::file`; it is embedded here so the example runs
//! from any directory.)

use std::process::ExitCode;
use std::thread;
use std::time::Instant;

const DEPLOY_PATH: &str = "examples/library-app/app/deploy.yaml";
const DEPLOY: &str = include_str!("../deploy.yaml");

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, files @ ..] = args.as_slice()
        && flag == "--check-config"
    {
        // The deploy files checked against every bulkhead this program declares, in this
        // crate and in the libraries it links; undeclared names are errors here.
        let check = bulkhead::check_deploy(files, true);
        print!("{}", check.human());
        return check.exit_code();
    }
    match run(args.iter().any(|arg| arg == "--defaults")) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn run(defaults: bool) -> Result<(), String> {
    println!("declared by the program (before any call):");
    for declared in bulkhead::declarations() {
        println!(
            "  {:<9} {:<11} at {}, used by {}",
            declared.name(),
            declared.kind().as_str(),
            declared.declared_at(),
            declared.functions()[0].path,
        );
    }
    if defaults {
        println!("using the library's own defaults (geo/bulkheads.yaml)");
    } else {
        // At start-up, before the library's first call: its bulkheads get the deploy's sizes.
        let report = bulkhead::Deploy::new()
            .yaml(DEPLOY_PATH, DEPLOY)
            .map_err(|diagnostics| diagnostics.to_string())?
            .env()
            .install()
            .map_err(|err| err.to_string())?;
        println!(
            "installed {DEPLOY_PATH}: resized {}",
            report.resized.join(", ")
        );
    }

    let started = Instant::now();
    let results: Vec<_> = thread::scope(|s| {
        let callers: Vec<_> = (0..12)
            .map(|n| s.spawn(move || geo_client::geocode(&format!("{n} Main Street"))))
            .collect();
        callers
            .into_iter()
            .map(|caller| caller.join().map_err(|_| "a caller panicked".to_string()))
            .collect::<Result<_, _>>()
    })?;
    let served = results.iter().filter(|r| r.is_ok()).count();
    if let Some(err) = results.iter().find_map(|r| r.as_ref().err()) {
        println!("e.g. {err}");
    }
    println!(
        "geocoded {served} of {} addresses in {}ms",
        results.len(),
        started.elapsed().as_millis()
    );
    let tile = geo_client::tile(12, 2048, 1361).map_err(|err| err.to_string())?;
    println!("fetched a tile of {} bytes", tile.len());

    for snapshot in bulkhead::registry().snapshot() {
        println!(
            "{:<9} {:<11} limit {:>2}  queue capacity {:>2}  completed {:>2}  refused {:>2}",
            snapshot.name.as_str(),
            snapshot.kind.as_str(),
            snapshot.limit,
            snapshot.queue_capacity.unwrap_or(0),
            snapshot.calls.completed,
            snapshot.calls.refused.total(),
        );
    }
    Ok(())
}

//! The watched deploy file (feature `watch`): real files in a temporary directory, changed
//! the three ways deploys change them — an edit in place, an atomic rename over the file,
//! and the Kubernetes `..data` symlink swap — each observed through the registry; an
//! invalid edit that changes nothing; the watcher stopping with its guard; a broken file
//! failing the start.
//!
//! One test, in phases: reloads apply to the whole process-wide registry, so the phases
//! share it one after another. The watcher reacts to the file system on its own thread,
//! so each phase polls the registry until the change shows, with a generous deadline.

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkhead::{BulkheadError, Watch, bulkhead};

#[bulkhead("watched")]
fn watched() -> Result<(), BulkheadError> {
    Ok(())
}

fn limit() -> u32 {
    bulkhead::registry()
        .semaphore("watched")
        .expect("registered by its first call")
        .limit()
}

fn deploy(limit: u32) -> String {
    format!("bulkheads:\n  watched: {{ max_concurrent_calls: {limit} }}\n")
}

/// Polls `done` until it holds; panics after 20 s (a change shows in well under 2 s).
/// Prints how long it took (a figure for the record, not a check).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("{what}: {:?}", started.elapsed());
}

fn start(path: &Path) -> bulkhead::WatchGuard {
    Watch::new(path)
        .without_env()
        .debounce(Duration::from_millis(100))
        .start()
        .expect("the deploy file applies and its directory can be watched")
}

/// The `ERROR` lines of target `bulkhead`, each as its message and fields
/// (`message field=value …`): a subscriber for the whole test binary (it has one test).
fn capture_errors() -> Arc<Mutex<Vec<String>>> {
    use tracing_subscriber::layer::SubscriberExt;

    struct Errors(Arc<Mutex<Vec<String>>>);
    struct Message<'a>(&'a mut String);
    impl tracing::field::Visit for Message<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0.insert_str(0, &format!("{value:?}"));
            } else {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
    }
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Errors {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let meta = event.metadata();
            if *meta.level() == tracing::Level::ERROR && meta.target() == "bulkhead" {
                let mut message = String::new();
                event.record(&mut Message(&mut message));
                self.0.lock().unwrap().push(message);
            }
        }
    }
    let lines = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(Errors(Arc::clone(&lines)));
    tracing::subscriber::set_global_default(subscriber).unwrap();
    lines
}

#[cfg(unix)]
fn symlink(target: &str, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

#[test]
fn edits_renames_and_symlink_swaps_resize_and_bad_edits_change_nothing() {
    let errors = capture_errors();
    watched().unwrap();
    let dir = tempfile::tempdir().unwrap();

    // An edit in place, then an atomic rename over the file.
    let plain = dir.path().join("prod.yaml");
    fs::write(&plain, deploy(3)).unwrap();
    let guard = start(&plain);
    assert_eq!(limit(), 3, "applied at start");

    fs::write(&plain, deploy(4)).unwrap();
    eventually("the edit to apply", || limit() == 4);

    let staged = dir.path().join(".prod.yaml.tmp");
    fs::write(&staged, deploy(5)).unwrap();
    fs::rename(&staged, &plain).unwrap();
    eventually("the atomic rename to apply", || limit() == 5);

    // Dropping the guard ends the watcher's thread, and with it the only code that reads
    // and applies the file.
    let status = guard.status();
    assert!(status.is_watching());
    drop(guard);
    assert!(!status.is_watching());
    assert_eq!(status.applied(), 3);

    // A ConfigMap volume: prod.yaml -> ..data/prod.yaml, ..data -> ..<timestamp>.
    #[cfg(unix)]
    {
        let volume = dir.path().join("configmap");
        fs::create_dir_all(volume.join("..2026_12_01_00_00_00.1")).unwrap();
        fs::write(volume.join("..2026_12_01_00_00_00.1/prod.yaml"), deploy(6)).unwrap();
        symlink("..2026_12_01_00_00_00.1", &volume.join("..data"));
        symlink("..data/prod.yaml", &volume.join("prod.yaml"));
        let mounted = volume.join("prod.yaml");
        let guard = start(&mounted);
        assert_eq!(limit(), 6);

        // The kubelet's update: a new directory, a new symlink, renamed over `..data`.
        fs::create_dir_all(volume.join("..2026_12_01_00_05_00.2")).unwrap();
        fs::write(volume.join("..2026_12_01_00_05_00.2/prod.yaml"), deploy(7)).unwrap();
        symlink("..2026_12_01_00_05_00.2", &volume.join("..data_tmp"));
        fs::rename(volume.join("..data_tmp"), volume.join("..data")).unwrap();
        eventually("the symlink swap to apply", || limit() == 7);
        drop(guard);
    }

    // An invalid edit: nothing changes, the error is counted and readable.
    let guard = start(&plain);
    let before = bulkhead::registry().reload_status();
    let status = guard.status();
    fs::write(
        &plain,
        "bulkheads:\n  watched: { max_concurrent_calls: lots }\n",
    )
    .unwrap();
    eventually("the invalid edit to be refused", || status.refused() >= 1);
    assert_eq!(limit(), 5);
    let after = bulkhead::registry().reload_status();
    assert!(after.refused > before.refused, "counted: {after:?}");
    let diagnostic = status.last_error().expect("the diagnostic is kept");
    assert!(
        diagnostic.contains("prod.yaml:2:"),
        "names the file and line: {diagnostic}"
    );
    assert!(diagnostic.contains("max_concurrent_calls"), "{diagnostic}");
    let kept = after.last_error.expect("the registry keeps the last error");
    assert_eq!(kept.message, diagnostic);
    // Logged at ERROR once per refused change, with the diagnostic.
    let logged = errors.lock().unwrap().clone();
    assert_eq!(logged.len() as u64, status.refused(), "{logged:?}");
    assert!(
        logged.iter().all(|line| line.contains("prod.yaml:2:")),
        "{logged:?}"
    );
    // One line per event: the multi-line diagnostic is a field, its line breaks escaped.
    assert!(logged.iter().all(|line| !line.contains('\n')), "{logged:?}");

    // The next good edit applies again.
    fs::write(&plain, deploy(8)).unwrap();
    eventually("the corrected edit to apply", || limit() == 8);
    drop(guard);

    // A file that does not apply at start-up fails the start, and applies nothing.
    let broken = dir.path().join("broken.yaml");
    fs::write(&broken, "bulkheads:\n  watched: { kind: thread-pool }\n").unwrap();
    let err = Watch::new(&broken).without_env().start().unwrap_err();
    assert!(matches!(err, bulkhead::WatchError::Config(_)), "{err}");
    assert!(err.to_string().contains("broken.yaml"), "{err}");
    assert_eq!(limit(), 8);

    // A file larger than any config is refused, not read whole.
    let huge = dir.path().join("huge.yaml");
    let mut text = deploy(9);
    text.push_str(&"#".repeat(bulkhead::config::MAX_SOURCE_BYTES));
    fs::write(&huge, text).unwrap();
    let err = Watch::new(&huge).without_env().start().unwrap_err();
    assert!(err.to_string().contains("1 MiB"), "{err}");
    assert_eq!(limit(), 8);
}

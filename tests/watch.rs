//! The watched deploy file (feature `watch`): real files in a temporary directory, changed
//! the three ways deploys change them — an edit in place, an atomic rename over the file,
//! and the Kubernetes `..data` symlink swap — each observed through the registry; an
//! invalid edit that changes nothing; the watcher stopping with its guard; a broken file
//! failing the start.
//!
//! One test, in phases: reloads apply to the whole process-wide registry, so the phases
//! share it one after another. The watcher reacts to the file system on its own thread,
//! so each phase waits on the registry's record of the watcher's deploys (no polling).

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Waits until `done` holds, checking it once now and again after each deploy the registry
/// records (the watcher's every read of a changed file ends in one, applied or refused,
/// and its status is written from that record): no polling, and nothing is timed. The
/// deadline only turns a watcher that never reads the file into a failure instead of a hang.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let (recorded, outcomes) = std::sync::mpsc::channel();
    let _listening =
        bulkhead::registry().subscribe_deploys(move |_: &bulkhead::DeployOutcome<'_>| {
            let _ = recorded.send(());
        });
    while !done() {
        outcomes
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no deploy was recorded while waiting for {what}"));
    }
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
    // `fs::write` truncates, then writes: the watcher may see the empty file in between
    // (refused too), so the wait is for the invalid edit's own refusal.
    eventually("the invalid edit to be refused", || {
        status
            .last_error()
            .is_some_and(|e| e.contains("prod.yaml:2:"))
    });
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
        logged.iter().all(|line| line.contains("prod.yaml")),
        "{logged:?}"
    );
    assert!(
        logged.last().unwrap().contains("prod.yaml:2:"),
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

    #[cfg(unix)]
    hostile_files(&errors);
    drift(dir.path());
}

/// Replaces `file` by whatever `make` builds at a staging path, with an atomic rename.
fn swap_in(file: &Path, make: impl FnOnce(&Path)) {
    let staged = file.with_extension("staged");
    let _ = fs::remove_file(&staged);
    let _ = fs::remove_dir(&staged);
    make(&staged);
    fs::rename(&staged, file).unwrap();
}

/// Special files, loops, bad bytes and the save sequences of editors, each swapped in for
/// the watched file: refused by type or content without blocking, recorded as a failed
/// deploy everywhere one is (the watcher's status, the registry's reload status and so
/// `GET /reloads`, the metric, one ERROR line), the sizes kept; the next good file applies.
#[cfg(unix)]
fn hostile_files(errors: &Arc<Mutex<Vec<String>>>) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hostile.yaml");
    fs::write(&file, deploy(20)).unwrap();
    let guard = start(&file);
    let status = guard.status();
    assert_eq!(limit(), 20);
    let good = std::cell::Cell::new(20);

    let refused_metric = || {
        let text = bulkhead::prometheus::encode_registry(bulkhead::registry());
        text.lines()
            .find(|l| l.starts_with("bulkhead_config_reloads_total{result=\"error\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let refusal = |what: &str, expected: &str, make: &dyn Fn(&Path)| {
        let (before, registry_before) = (status.refused(), bulkhead::registry().reload_status());
        let (metric_before, logged_before) = (refused_metric(), errors.lock().unwrap().len());
        make(&file);
        eventually(what, || {
            status.refused() > before && status.last_error().is_some_and(|e| e.contains(expected))
        });
        let message = status.last_error().unwrap();
        assert!(message.contains("hostile.yaml"), "{what}: {message}");
        assert_eq!(limit(), good.get(), "{what} changed nothing");
        // Each refusal (a swap may be seen in two steps) counted everywhere alike.
        let refusals = status.refused() - before;
        let registry_after = bulkhead::registry().reload_status();
        assert_eq!(
            registry_after.refused - registry_before.refused,
            refusals,
            "{what}"
        );
        assert_eq!(
            registry_after.last_error.unwrap().message,
            message,
            "{what}"
        );
        assert_eq!(
            refused_metric() - metric_before,
            refusals as f64,
            "{what}: the metric"
        );
        let logged = errors.lock().unwrap()[logged_before..].to_vec();
        assert_eq!(
            logged.len() as u64,
            refusals,
            "{what}: one ERROR line each: {logged:?}"
        );
        assert!(logged.iter().all(|l| !l.contains('\n')), "{logged:?}");
        assert!(logged.last().unwrap().contains(expected), "{logged:?}");
        assert!(status.is_watching(), "{what}: still watching");
        assert!(
            status.drifted(),
            "{what}: the running config differs from the file"
        );
    };
    let recovers = |what: &str, limit_now: u32| {
        fs::write(&file, deploy(limit_now)).unwrap();
        eventually(what, || limit() == limit_now);
        good.set(limit_now);
        assert!(!status.drifted());
    };

    refusal(
        "a FIFO",
        "a named pipe (FIFO), not a regular file",
        &|file| {
            swap_in(file, |staged| {
                let made = std::process::Command::new("mkfifo").arg(staged).status();
                assert!(made.unwrap().success());
            })
        },
    );
    // A later valid file applies: the FIFO blocked nothing.
    swap_in(&file, |staged| fs::write(staged, deploy(21)).unwrap());
    eventually("a file after the FIFO", || limit() == 21);
    good.set(21);

    // A directory cannot be renamed over a file: the file is removed, then the directory
    // made in its place.
    refusal("a directory", "a directory, not a regular file", &|file| {
        fs::remove_file(file).unwrap();
        fs::create_dir(file).unwrap();
    });
    // A file cannot be renamed over a directory: it is removed, then the file written.
    fs::remove_dir(&file).unwrap();
    fs::write(&file, deploy(22)).unwrap();
    eventually("a file after the directory", || limit() == 22);
    good.set(22);

    refusal("a symlink loop", "a loop of symbolic links", &|file| {
        let other = file.with_extension("other");
        symlink(file.file_name().unwrap().to_str().unwrap(), &other);
        swap_in(file, |staged| {
            symlink(other.file_name().unwrap().to_str().unwrap(), staged)
        });
    });
    swap_in(&file, |staged| fs::write(staged, deploy(23)).unwrap());
    eventually("a file after the loop", || limit() == 23);
    good.set(23);

    refusal("bytes that are not UTF-8", "not UTF-8", &|file| {
        fs::write(
            file,
            b"bulkheads:\n  watched: { max_concurrent_calls: \xff }\n",
        )
        .unwrap()
    });
    recovers("a file after the bad bytes", 24);

    // Truncate, then write (an editor saving in place, a `>` redirection): the empty file
    // in between is refused, so the bulkheads never fall back to their declared sizes.
    refusal("the truncated file", "bulkheads: {}", &|file| {
        fs::File::create(file).unwrap();
    });
    recovers("the write after the truncation", 25);
    refusal("a file of comments only", "the deploy is empty", &|file| {
        fs::write(file, "# nothing yet\n\n   \n").unwrap()
    });
    recovers("a file after the comments", 26);

    // Delete, then recreate.
    refusal("the deleted file", "there is no such file", &|file| {
        fs::remove_file(file).unwrap()
    });
    recovers("the recreated file", 27);

    // Dropping the guard returns promptly whatever the file is, a FIFO included.
    swap_in(&file, |staged| {
        assert!(
            std::process::Command::new("mkfifo")
                .arg(staged)
                .status()
                .unwrap()
                .success()
        )
    });
    eventually("the last FIFO to be refused", || {
        status.last_error().is_some_and(|e| e.contains("FIFO")) && status.refused() >= 8
    });
    let (dropped, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(guard);
        dropped.send(()).unwrap();
    });
    done.recv_timeout(Duration::from_secs(20))
        .expect("dropping the guard returned");
    assert!(!status.is_watching());
}

/// A deploy applied by anything but the watched file makes the drift visible, and the
/// file's next change ends it.
fn drift(dir: &Path) {
    let file = dir.join("drift.yaml");
    fs::write(&file, deploy(30)).unwrap();
    let guard = start(&file);
    let status = guard.status();
    assert!(!status.drifted());
    let mut other = bulkhead::Config::default();
    other.bulkheads.insert(
        "watched".into(),
        bulkhead::registry().config("watched").unwrap(),
    );
    bulkhead::install(&other).unwrap();
    assert!(status.drifted(), "a deploy from code is in force");
    assert_eq!(
        bulkhead::registry().reload_status().in_force.as_deref(),
        Some("a config built in code")
    );
    fs::write(&file, deploy(31)).unwrap();
    eventually("the file's next change", || limit() == 31);
    assert!(!status.drifted());
}

//! What the tests against Redis share (`cluster_rate_limit.rs`, `cluster_concurrency.rs`):
//! a real `redis-server` on a free port of 127.0.0.1, and fake servers that misbehave.
#![allow(dead_code)] // each test binary uses a part

use std::io::{BufRead, BufReader, Write as _};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration as StdDuration;

/// A `redis-server` child process on a free port; killed when dropped.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
}

impl Server {
    /// A new server, or `None` (after saying so) when `redis-server` is not installed.
    pub fn start() -> Option<Server> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("BULKHEAD_REQUIRE_REDIS").is_none(),
                "BULKHEAD_REQUIRE_REDIS is set but redis-server is not on the PATH"
            );
            static SAID: std::sync::Once = std::sync::Once::new();
            // Straight to the process's stderr: the test harness captures `eprintln!`.
            SAID.call_once(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: the cluster tests against Redis need `redis-server` on the PATH; \
                     install it (apt-get install redis-server), then run cargo test -p \
                     bulkhead-core --test cluster_rate_limit --test cluster_concurrency"
                );
            });
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        Some(Server::start_on(port))
    }

    /// A server on `port`, once it accepts connections.
    pub fn start_on(port: u16) -> Server {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--logfile", ""])
            .args(["--enable-debug-command", "local"])
            .current_dir(std::env::temp_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut log = String::new();
        loop {
            match lines.next() {
                Some(Ok(line)) => {
                    log.push_str(&line);
                    log.push('\n');
                    if line.contains("Ready to accept connections") {
                        break;
                    }
                }
                _ => panic!("redis-server on port {port} exited before it was ready:\n{log}"),
            }
        }
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Server {
            child: Some(child),
            port,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A connection for the test's own commands.
    pub fn admin(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("the test connects to its redis-server")
    }

    /// Kills the server (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `INFO stats` `total_connections_received`.
    pub fn connections_received(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut self.admin())
            .expect("INFO stats");
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("INFO stats has total_connections_received")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a fake server on 127.0.0.1 treats each connection.
#[derive(Clone, Copy, Debug)]
pub enum Fake {
    /// Accepts, reads, never answers.
    Silent,
    /// Answers each command with a valid script answer, one byte every 40ms.
    Dribbling,
    /// Answers with an HTTP response.
    Garbage,
    /// Announces a bulk string of a terabyte, then sends bytes for as long as it is read.
    Endless,
    /// Answers each command correctly, 150ms after it came (a slow handshake: the URL has
    /// a password and a database, so a decision is `AUTH`, `SELECT` and the script).
    SlowHandshake,
}

/// A fake server on a free port that treats every connection as `fake`; it lives until
/// the test process ends (its threads are detached).
pub fn fake_server(fake: Fake) -> u16 {
    use std::io::Read as _;

    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("an address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let answer = b"*3\r\n:1\r\n:0\r\n:5\r\n";
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let sent = match fake {
                        Fake::Silent => continue,
                        Fake::Dribbling => answer.iter().try_for_each(|b| {
                            std::thread::sleep(StdDuration::from_millis(40));
                            stream.write_all(&[*b])
                        }),
                        Fake::Garbage => stream
                            .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
                        Fake::Endless => stream.write_all(b"$1000000000000\r\n").and_then(|()| {
                            (0..100_000).try_for_each(|_| stream.write_all(&[b'x'; 1024]))
                        }),
                        Fake::SlowHandshake => {
                            std::thread::sleep(StdDuration::from_millis(150));
                            let command = String::from_utf8_lossy(&buf);
                            if command.contains("EVAL") {
                                stream.write_all(answer)
                            } else {
                                stream.write_all(b"+OK\r\n")
                            }
                        }
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// One `WARN` event: its text and, if it has one, its `store_errors` field.
#[derive(Clone, Debug)]
pub struct Warning {
    pub text: String,
    pub store_errors: Option<u64>,
}

/// The `WARN` events of every thread of this test process, collected by one process-wide
/// subscriber; a test picks out its own by what they name (a fake server's port, a key).
/// The first call installs it: call it before what should warn.
///
/// Not a subscriber scoped to the test's thread (`with_default`): `tracing` caches, per
/// callsite and for the whole process, whether any subscriber wants its events, when the
/// callsite is first hit. Hit first on another thread (an earlier test's lease heartbeat
/// logging a store error after its Redis was gone) while the scoped subscriber is the only
/// one alive, the callsite is cached as wanted by nobody, and the test's own warning from
/// it is dropped: the test then fails although the library warned.
pub fn warnings() -> &'static Warnings {
    static WARNINGS: std::sync::OnceLock<Warnings> = std::sync::OnceLock::new();
    WARNINGS.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt as _;
        let warnings = Warnings::default();
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(warnings.clone()),
        )
        .expect("no other subscriber is set in the cluster tests");
        warnings
    })
}

/// Collects every `WARN` event (see [`warnings`]).
#[derive(Clone, Default)]
pub struct Warnings(Arc<std::sync::Mutex<Vec<Warning>>>);

impl Warnings {
    /// The warnings so far whose text contains `about`.
    pub fn about(&self, about: &str) -> Vec<Warning> {
        let all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.iter()
            .filter(|w| w.text.contains(about))
            .cloned()
            .collect()
    }
}

impl tracing::field::Visit for Warning {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if field.name() == "store_errors" {
            self.store_errors = Some(value);
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.text = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        let mut warning = Warning {
            text: String::new(),
            store_errors: None,
        };
        event.record(&mut warning);
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(warning);
    }
}

/// Each fake server, and what the warning of a decision against it says.
pub const FAULTS: [(Fake, &str); 5] = [
    (Fake::Silent, "no answer from Redis within 200ms"),
    (Fake::Dribbling, "no answer from Redis within 200ms"),
    (Fake::Garbage, "did not answer in the Redis protocol"),
    (Fake::Endless, "did not answer in the Redis protocol"),
    (Fake::SlowHandshake, "no answer from Redis within 200ms"),
];

/// Prints the slowest decision `what` made (the figure the docs quote) and checks it was
/// decided within `response_timeout` (`budget`) plus the scheduling slack of a loaded
/// 2-core machine.
pub fn within_budget(what: &str, took: StdDuration, budget: StdDuration) {
    let _ = writeln!(
        std::io::stderr(),
        "{what}: slowest decision {took:?} for a response_timeout of {budget:?}"
    );
    assert!(
        took <= budget + StdDuration::from_millis(800),
        "{what}: a decision took {took:?} for a response_timeout of {budget:?}"
    );
}

/// For every fake server: `decide` makes a few decisions against the store at the URL it
/// is given (with a password and a database for the slow handshake, so a decision is
/// `AUTH`, `SELECT` and the script) and returns the slowest; checked against
/// `budget` (its `response_timeout`) with a generous 800ms on top for a loaded machine,
/// and a warning of the cluster `limit` ("rate limit", "concurrency limit") must name the
/// fault and never the password. The slowest decision of each fault is printed (the
/// figures the docs quote).
pub fn every_fault(limit: &str, budget: StdDuration, decide: impl Fn(Fake, &str) -> StdDuration) {
    let warnings = warnings();
    for (fake, said) in FAULTS {
        let port = fake_server(fake);
        let url = match fake {
            Fake::SlowHandshake => format!("redis://:secret@127.0.0.1:{port}/3"),
            _ => format!("redis://127.0.0.1:{port}/"),
        };
        within_budget(&format!("{limit}, {fake:?}"), decide(fake, &url), budget);
        let mine = warnings.about(&format!("127.0.0.1:{port}"));
        assert!(
            mine.iter()
                .any(|w| w.text.contains(said) && w.text.contains(limit))
                && !mine.iter().any(|w| w.text.contains("secret")),
            "{fake:?}: the warning says `{said}` (and never the password): {mine:?}"
        );
    }
}

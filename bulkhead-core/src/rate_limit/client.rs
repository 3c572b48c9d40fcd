//! The Redis connection of the cluster-wide limits: every exchange — connecting, `AUTH`,
//! `SELECT`, the script and its answer — under **one** deadline.
//!
//! The `redis` crate's synchronous client bounds each socket read, not an exchange: its
//! handshake (`CLIENT SETINFO`, `AUTH`, `SELECT`) waits a full read timeout per command, and
//! a server that dribbles its answer a byte at a time resets the read timeout with each
//! byte, so a call could be held for seconds. Here the crate still parses URLs, encodes
//! commands and parses answers; the socket is ours: before each read or write its timeout
//! is set to what is left of the deadline, a name is resolved on a helper thread waited
//! for no longer than that, and an answer longer than [`MAX_ANSWER`] bytes is refused (a
//! server speaking garbage cannot make the process allocate).

/// The longest answer read from Redis, in bytes: the scripts answer a few numbers.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) const MAX_ANSWER: usize = 4096;

/// Why an exchange with Redis failed, in the reader's terms.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The deadline passed: nothing (or not all) of the answer came in time.
    NoAnswer,
    /// The connection could not be made or was lost.
    Connection(String),
    /// Redis answered with an error (`code` is its first word, such as `WRONGTYPE`).
    Server { code: String, message: String },
    /// The bytes received are not an answer of the Redis protocol.
    Garbage(String),
}

impl Failure {
    /// The failure as a sentence, for a deadline of `budget`.
    pub(crate) fn describe(&self, budget: std::time::Duration) -> String {
        match self {
            Failure::NoAnswer => format!(
                "no answer from Redis within {}",
                bulkhead_config_types::Duration::from_std(budget)
            ),
            Failure::Connection(why) => why.clone(),
            Failure::Server { message, .. } => format!("Redis answered with an error: {message}"),
            Failure::Garbage(why) => {
                format!("the server did not answer in the Redis protocol ({why}); is it Redis?")
            }
        }
    }
}

#[cfg(feature = "redis")]
pub(crate) use with_redis::*;
#[cfg(not(feature = "redis"))]
pub(crate) use without_redis::*;

#[cfg(feature = "redis")]
mod with_redis {
    use std::io::{self, Read, Write};
    use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
    use std::time::{Duration, Instant};

    use redis::{ConnectionAddr, IntoConnectionInfo, Value};

    use super::{Failure, MAX_ANSWER};

    /// Where and how to connect: parsed once from the URL.
    #[derive(Debug)]
    pub(crate) struct Client {
        host: String,
        port: u16,
        /// `AUTH [username] password`, if the URL has a password.
        auth: Option<(Option<String>, String)>,
        db: i64,
    }

    /// One open connection.
    pub(crate) struct Connection {
        stream: TcpStream,
        parser: redis::Parser,
    }

    /// Parses `url` (already read from its variable and checked to be `redis://…` by
    /// `RateLimitStore::url`).
    pub(crate) fn open(url: &str) -> Result<Client, String> {
        let shown = bulkhead_config_types::redact_url(url);
        let info = url.into_connection_info().map_err(|e| {
            format!(
                "`{shown}` is not a usable Redis URL ({e}): write \
                 `redis://[:password@]host[:port][/db]`"
            )
        })?;
        let ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
            return Err(format!("`{shown}` is not a TCP Redis URL"));
        };
        let settings = info.redis_settings();
        Ok(Client {
            host,
            port,
            auth: settings
                .password()
                .map(|p| (settings.username().map(str::to_owned), p.to_owned())),
            db: settings.db(),
        })
    }

    impl Client {
        /// `host:port`, for messages (never the password).
        pub(crate) fn address(&self) -> String {
            format!("{}:{}", self.host, self.port)
        }

        /// A new connection, authenticated and on its database, by `deadline`.
        pub(crate) fn connect(&self, deadline: Instant) -> Result<Connection, Failure> {
            let addr = self.resolve(deadline)?;
            let left = left(deadline)?;
            let stream = TcpStream::connect_timeout(&addr, left).map_err(|e| {
                if e.kind() == io::ErrorKind::TimedOut {
                    Failure::NoAnswer
                } else {
                    Failure::Connection(format!("cannot connect to Redis at {addr}: {e}"))
                }
            })?;
            let _ = stream.set_nodelay(true);
            let mut connection = Connection {
                stream,
                parser: redis::Parser::new(),
            };
            if let Some((user, password)) = &self.auth {
                let mut auth = redis::cmd("AUTH");
                if let Some(user) = user {
                    auth.arg(user);
                }
                auth.arg(password);
                connection.query(&auth, deadline)?;
            }
            if self.db != 0 {
                connection.query(redis::cmd("SELECT").arg(self.db), deadline)?;
            }
            Ok(connection)
        }

        /// The server's address; a name is resolved on a helper thread, waited for only
        /// until `deadline` (the system resolver has no timeout of its own).
        fn resolve(&self, deadline: Instant) -> Result<SocketAddr, Failure> {
            if let Ok(ip) = self.host.parse::<IpAddr>() {
                return Ok(SocketAddr::new(ip, self.port));
            }
            let (host, port) = (self.host.clone(), self.port);
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            std::thread::Builder::new()
                .name("bulkhead-redis-resolve".into())
                .spawn(move || {
                    let found = (host.as_str(), port)
                        .to_socket_addrs()
                        .map(|mut addrs| addrs.next());
                    let _ = tx.send(found);
                })
                .map_err(|e| Failure::Connection(format!("cannot start a resolver thread: {e}")))?;
            match rx.recv_timeout(left(deadline)?) {
                Ok(Ok(Some(addr))) => Ok(addr),
                Ok(Ok(None)) => Err(Failure::Connection(format!(
                    "the Redis host `{}` has no address",
                    self.host
                ))),
                Ok(Err(e)) => Err(Failure::Connection(format!(
                    "cannot resolve the Redis host `{}`: {e}",
                    self.host
                ))),
                Err(_) => Err(Failure::NoAnswer),
            }
        }
    }

    impl Connection {
        /// Sends `cmd` and reads its answer, both by `deadline`. An error answer is a
        /// [`Failure::Server`].
        pub(crate) fn query(
            &mut self,
            cmd: &redis::Cmd,
            deadline: Instant,
        ) -> Result<Value, Failure> {
            self.stream
                .set_write_timeout(Some(left(deadline)?))
                .map_err(lost)?;
            self.stream
                .write_all(&cmd.get_packed_command())
                .map_err(|e| match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Failure::NoAnswer,
                    _ => lost(e),
                })?;
            let mut reader = Bounded {
                stream: &self.stream,
                deadline,
                left: MAX_ANSWER,
                failed: None,
            };
            let parsed = self.parser.parse_value(&mut reader);
            if let Some(failure) = reader.failed {
                return Err(failure);
            }
            match parsed {
                Ok(Value::ServerError(error)) => Err(Failure::Server {
                    code: error.code().to_owned(),
                    message: error.to_string(),
                }),
                Ok(value) => Ok(value),
                Err(e) if e.is_connection_dropped() || e.is_io_error() => Err(Failure::Connection(
                    format!("Redis closed the connection: {e}"),
                )),
                Err(e) => Err(Failure::Garbage(e.to_string())),
            }
        }
    }

    /// A Lua script, sent by its hash (`EVALSHA`) and in full the first time a server
    /// does not know it.
    pub(crate) struct Script {
        source: &'static str,
        hash: String,
    }

    impl Script {
        pub(crate) fn new(source: &'static str) -> Self {
            Script {
                source,
                hash: redis::Script::new(source).get_hash().to_owned(),
            }
        }
    }

    impl Connection {
        /// Runs `script` on `key` with `args` (numbers or words), by `deadline`; its answer is a list of
        /// integers (as numbers or decimal strings).
        pub(crate) fn eval<A: redis::ToRedisArgs>(
            &mut self,
            script: &Script,
            key: &str,
            args: &[A],
            deadline: Instant,
        ) -> Result<Vec<i64>, Failure> {
            let command = |name: &str, body: &str| {
                let mut cmd = redis::cmd(name);
                cmd.arg(body).arg(1).arg(key).arg(args);
                cmd
            };
            let answer = match self.query(&command("EVALSHA", &script.hash), deadline) {
                Err(Failure::Server { code, .. }) if code == "NOSCRIPT" => {
                    self.query(&command("EVAL", script.source), deadline)?
                }
                answer => answer?,
            };
            let Value::Array(items) = answer else {
                return Err(Failure::Garbage(format!(
                    "{answer:?} is not the script's list"
                )));
            };
            items
                .into_iter()
                .map(|item| match item {
                    Value::Int(n) => Ok(n),
                    Value::BulkString(bytes) => std::str::from_utf8(&bytes)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| Failure::Garbage("a number that is not one".into())),
                    other => Err(Failure::Garbage(format!("{other:?} is not a number"))),
                })
                .collect()
        }
    }

    /// The socket as a reader that stops at the deadline and after [`MAX_ANSWER`] bytes,
    /// remembering why.
    struct Bounded<'a> {
        stream: &'a TcpStream,
        deadline: Instant,
        left: usize,
        failed: Option<Failure>,
    }

    impl Read for Bounded<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let fail = |me: &mut Self, failure: Failure| {
                let error = io::Error::other(failure.describe(Duration::ZERO));
                me.failed = Some(failure);
                Err(error)
            };
            let Ok(left) = left(self.deadline) else {
                return fail(self, Failure::NoAnswer);
            };
            if self.left == 0 {
                return fail(
                    self,
                    Failure::Garbage(format!("an answer longer than {MAX_ANSWER} bytes")),
                );
            }
            if let Err(e) = self.stream.set_read_timeout(Some(left)) {
                return fail(self, lost(e));
            }
            let n = buf.len().min(self.left);
            match (&*self.stream).read(&mut buf[..n]) {
                Ok(0) => fail(
                    self,
                    Failure::Connection("Redis closed the connection".into()),
                ),
                Ok(read) => {
                    self.left -= read;
                    Ok(read)
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    fail(self, Failure::NoAnswer)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
                Err(e) => fail(self, lost(e)),
            }
        }
    }

    /// What is left until `deadline`, or [`Failure::NoAnswer`] once it has passed.
    fn left(deadline: Instant) -> Result<Duration, Failure> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(Failure::NoAnswer)
        } else {
            Ok(left)
        }
    }

    fn lost(e: io::Error) -> Failure {
        Failure::Connection(format!("the connection to Redis failed: {e}"))
    }
}

/// Without the `redis` feature no store can be used.
#[cfg(not(feature = "redis"))]
mod without_redis {
    use std::time::Instant;

    use super::Failure;

    /// No client can be built without the feature.
    #[derive(Debug)]
    pub(crate) enum Client {}
    /// No connection can be made without the feature.
    pub(crate) enum Connection {}
    /// A script that is never sent.
    pub(crate) struct Script;

    impl Script {
        pub(crate) fn new(_: &'static str) -> Self {
            Script
        }
    }

    pub(crate) fn open(_: &str) -> Result<Client, String> {
        Err(
            "this program was built without the `redis` feature of bulkhead, so `scope: cluster` \
             cannot reach Redis; enable the feature (`bulkheads = { features = [\"redis\"] }`)"
                .to_owned(),
        )
    }

    impl Client {
        pub(crate) fn address(&self) -> String {
            match *self {}
        }

        pub(crate) fn connect(&self, _: Instant) -> Result<Connection, Failure> {
            match *self {}
        }
    }

    impl Connection {
        pub(crate) fn eval<A>(
            &mut self,
            _: &Script,
            _: &str,
            _: &[A],
            _: Instant,
        ) -> Result<Vec<i64>, Failure> {
            match *self {}
        }
    }
}

//! The Redis commands: argument checking, and each command as ramstore operations
//! (see `docs/architecture.md`, "Redis protocol", for the mapping and its costs).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::future::join_all;
use ramstore_client::RejectRules;
use ramstore_wire::counter::{parse_f64 as parse_float, CounterText};

use crate::backend::{Outcome, ReadInto, ReadResult, StoreError, WriteResult};
use crate::glob;
use crate::protocol::{parse_i64, Encoder, Version};
use crate::server::{Shared, Sink};

/// Databases SELECT accepts (`db0` … `db15`, Redis's default count).
pub const MAX_DATABASES: u32 = 16;
/// Attempts of a read-modify-write (INCR, APPEND, SET … GET) that lost a race to
/// another writer before it answers an error instead of trying again.
pub const MAX_CAS_ATTEMPTS: usize = 100;
/// Most keys KEYS returns; beyond it KEYS fails and points to SCAN (one reply of
/// every key of a large table would exhaust the server's memory).
pub const MAX_KEYS_REPLY: usize = 1_000_000;
/// Most bytes of keys or values one MGET or KEYS reply may carry; beyond it the
/// command answers an error instead of building the reply (an MGET of 65,536
/// 1 MiB values would otherwise hold 64 GiB in the server's memory).
pub const MAX_REPLY_BYTES: usize = 64 << 20;
/// Most enumeration batches one SCAN call fetches while looking for COUNT keys.
pub const MAX_SCAN_BATCHES: usize = 16;
/// Largest GET value buffer a connection keeps between commands, in bytes.
pub const MAX_KEPT_VALUE_BUFFER: usize = 64 * 1024;
/// Longest client name (CLIENT SETNAME), in bytes.
pub const MAX_CLIENT_NAME_BYTES: usize = 256;
/// The Redis version reported to clients (HELLO, INFO): the command set above is
/// what clients of this version expect to find.
pub const REDIS_COMPAT_VERSION: &str = "7.0.0";

/// What the connection does after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Close,
}

/// A command's name, arity (Redis convention: n = exactly n arguments counting the
/// name, −n = at least n), flags and key positions, for arity checks and COMMAND.
struct Spec {
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    first_key: i64,
    last_key: i64,
    step: i64,
}

const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
    }
}

const NOKEYS: (i64, i64, i64) = (0, 0, 0);
const ONEKEY: (i64, i64, i64) = (1, 1, 1);
const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom"];
const A: &[&str] = &["fast", "noauth"];

static COMMANDS: &[Spec] = &[
    spec("ping", -1, &["fast"], NOKEYS),
    spec("echo", 2, &["fast"], NOKEYS),
    spec("hello", -1, A, NOKEYS),
    spec("auth", -2, A, NOKEYS),
    spec("select", 2, &["fast"], NOKEYS),
    spec("get", 2, R, ONEKEY),
    spec("set", -3, W, ONEKEY),
    spec("setnx", 3, W, ONEKEY),
    spec("getset", 3, W, ONEKEY),
    spec("mget", -2, R, (1, -1, 1)),
    spec("mset", -3, W, (1, -1, 2)),
    spec("del", -2, &["write"], (1, -1, 1)),
    spec("unlink", -2, &["write", "fast"], (1, -1, 1)),
    spec("exists", -2, R, (1, -1, 1)),
    spec("strlen", 2, R, ONEKEY),
    spec("append", 3, W, ONEKEY),
    spec("incr", 2, W, ONEKEY),
    spec("incrby", 3, W, ONEKEY),
    spec("decr", 2, W, ONEKEY),
    spec("decrby", 3, W, ONEKEY),
    spec("incrbyfloat", 3, W, ONEKEY),
    spec("dbsize", 1, &["readonly"], NOKEYS),
    spec("scan", -2, &["readonly"], NOKEYS),
    spec("keys", 2, &["readonly"], NOKEYS),
    spec("flushdb", -1, &["write"], NOKEYS),
    spec("info", -1, &["loading"], NOKEYS),
    spec("client", -2, &["loading"], NOKEYS),
    spec("command", -1, &["loading"], NOKEYS),
    spec("config", -2, &["loading"], NOKEYS),
    spec("quit", -1, A, NOKEYS),
    spec("rs.getv", 2, R, ONEKEY),
    spec("rs.cas", 4, W, ONEKEY),
];

fn find_spec(name: &[u8]) -> Option<&'static Spec> {
    COMMANDS
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Whether the command named `name` takes a key as its first argument (GET, SET,
/// MGET, …): the one a pipeline's later commands prefetch.
pub fn key_first(name: &[u8]) -> bool {
    find_spec(name).is_some_and(|s| s.first_key == 1)
}

fn arity_ok(spec: &Spec, argc: usize) -> bool {
    let argc = i64::try_from(argc).unwrap_or(i64::MAX);
    let arity = i64::from(spec.arity);
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

/// Lossy text of an argument, for error messages (shortened).
fn shown(arg: &[u8]) -> String {
    let s = String::from_utf8_lossy(&arg[..arg.len().min(128)]);
    s.replace(['\r', '\n'], " ")
}

fn eq(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const SYNTAX: &str = "ERR syntax error";

/// One client connection's state.
pub struct Connection {
    shared: Arc<Shared>,
    version: Version,
    db: u32,
    authenticated: bool,
    id: u64,
    name: Option<Vec<u8>>,
    /// The current database's table id once known (cleared by SELECT): saves
    /// the shared table cache's lock on every command.
    table: Option<u64>,
    /// GET's value buffer, reused from command to command (no allocation per GET).
    value: Vec<u8>,
}

/// A read-modify-write's answer for the client, or the error to reply.
type RmwResult<T> = Result<Result<T, String>, StoreError>;

impl Connection {
    pub fn new(shared: Arc<Shared>) -> Self {
        let authenticated = shared.config.require_pass.is_none();
        let id = shared.new_client_id();
        Self {
            shared,
            version: Version::Resp2,
            db: 0,
            authenticated,
            id,
            name: None,
            table: None,
            value: Vec::new(),
        }
    }

    pub fn version(&self) -> Version {
        self.version
    }

    fn error(&self, sink: &mut Sink, message: &str) {
        sink.reply(self.version, |e| e.error(message));
    }

    fn store_error(&self, sink: &mut Sink, e: &StoreError) {
        self.error(sink, &e.resp_message());
    }

    /// Replies with `outcome` rendered by `render`, now or once it is durable.
    fn finish<T: Send + 'static>(
        &self,
        sink: &mut Sink,
        outcome: Outcome<T>,
        render: impl FnOnce(&mut Encoder<'_>, T) + Send + 'static,
    ) {
        let version = self.version;
        match outcome {
            Outcome::Ready(Ok(v)) => sink.reply(version, |e| render(e, v)),
            Outcome::Ready(Err(err)) => self.store_error(sink, &err),
            Outcome::Pending(f) => sink.later(Box::pin(async move {
                let mut out = Vec::new();
                let mut enc = Encoder::new(&mut out, version);
                match f.await {
                    Ok(v) => render(&mut enc, v),
                    Err(err) => enc.error(&err.resp_message()),
                }
                out
            })),
        }
    }

    /// Runs one command and appends its reply to `sink`.
    pub async fn execute(&mut self, args: &[&[u8]], sink: &mut Sink) -> Flow {
        let Some((&name, rest)) = args.split_first() else {
            return Flow::Continue;
        };
        let Some(spec) = find_spec(name) else {
            let mut msg = format!(
                "ERR unknown command '{}', with args beginning with:",
                shown(name)
            );
            for a in rest.iter().take(8) {
                msg.push_str(&format!(" '{}'", shown(a)));
            }
            self.error(sink, &msg);
            return Flow::Continue;
        };
        if !arity_ok(spec, args.len()) {
            self.error(
                sink,
                &format!("ERR wrong number of arguments for '{}' command", spec.name),
            );
            return Flow::Continue;
        }
        if !self.authenticated && !spec.flags.contains(&"noauth") {
            self.error(sink, "NOAUTH Authentication required.");
            return Flow::Continue;
        }
        match spec.name {
            "ping" => match rest {
                [] => sink.reply(self.version, |e| e.simple("PONG")),
                [msg] => sink.reply(self.version, |e| e.bulk(msg)),
                _ => self.error(sink, "ERR wrong number of arguments for 'ping' command"),
            },
            "echo" => sink.reply(self.version, |e| e.bulk(rest[0])),
            "quit" => {
                sink.reply(self.version, |e| e.ok());
                return Flow::Close;
            }
            "hello" => self.hello(rest, sink),
            "auth" => self.auth(rest, sink),
            "select" => match parse_i64(rest[0]) {
                Some(n) if (0..i64::from(MAX_DATABASES)).contains(&n) => {
                    // In range by the check above.
                    self.db = n as u32;
                    self.table = None;
                    sink.reply(self.version, |e| e.ok());
                }
                Some(_) => self.error(sink, "ERR DB index is out of range"),
                None => self.error(sink, NOT_INTEGER),
            },
            "client" => self.client(rest, sink),
            "command" => self.command(rest, sink),
            "config" => self.config(rest, sink),
            "info" => self.info(rest, sink).await,
            _ => self.data_command(spec.name, rest, sink).await,
        }
        Flow::Continue
    }

    /// The commands that touch the current database's table.
    async fn data_command(&mut self, name: &str, rest: &[&[u8]], sink: &mut Sink) {
        let table = match self.table {
            Some(t) => t,
            None => match self.shared.backend.table_id(self.db).await {
                Ok(t) => {
                    self.table = Some(t);
                    t
                }
                Err(e) => return self.store_error(sink, &e),
            },
        };
        let backend = &self.shared.backend;
        match name {
            "get" => {
                let mut value = std::mem::take(&mut self.value);
                match backend.read_into(table, rest[0], &mut value).await {
                    ReadInto::Ready(Ok(found)) => sink.reply(self.version, |e| match found {
                        Some(_) => e.bulk(&value),
                        None => e.null(),
                    }),
                    ReadInto::Ready(Err(err)) => self.store_error(sink, &err),
                    ReadInto::Pending(f) => {
                        self.finish(sink, Outcome::Pending(f), |e, r| match r {
                            Some((v, _)) => e.bulk(&v),
                            None => e.null(),
                        })
                    }
                }
                // A huge value's buffer is not kept for the connection's life.
                if value.capacity() <= MAX_KEPT_VALUE_BUFFER {
                    value.clear();
                    self.value = value;
                }
            }
            "strlen" => {
                let o = backend.read(table, rest[0]).await;
                self.finish(sink, o, |e, r| {
                    e.integer(r.map_or(0, |(v, _)| i64::try_from(v.len()).unwrap_or(i64::MAX)))
                });
            }
            "rs.getv" => {
                let o = backend.read(table, rest[0]).await;
                self.finish(sink, o, |e, r| match r {
                    Some((v, version)) => {
                        e.array(2);
                        e.bulk(&v);
                        e.integer(i64::try_from(version).unwrap_or(i64::MAX));
                    }
                    None => e.null_array(),
                });
            }
            "rs.cas" => {
                let Some(version) = std::str::from_utf8(rest[1])
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    return self.error(sink, NOT_INTEGER);
                };
                let rules = if version == 0 {
                    RejectRules::must_not_exist()
                } else {
                    RejectRules::version_must_equal(version)
                };
                let o = backend.write(table, rest[0], rest[2], rules).await;
                self.finish(sink, o, |e, r| match r {
                    WriteResult::Written(v) => e.integer(i64::try_from(v).unwrap_or(i64::MAX)),
                    _ => e.null(),
                });
            }
            "set" => self.set(table, rest, sink).await,
            "setnx" => {
                let o = backend
                    .write(table, rest[0], rest[1], RejectRules::must_not_exist())
                    .await;
                self.finish(sink, o, |e, r| {
                    e.integer(i64::from(matches!(r, WriteResult::Written(_))))
                });
            }
            "getset" => match self.set_get(table, rest[0], rest[1], None).await {
                Ok(old) => self.reply_read(sink, old),
                Err(e) => self.store_error(sink, &e),
            },
            "mget" => {
                let mut outcomes = Vec::with_capacity(rest.len());
                let mut bytes = 0usize;
                for key in rest {
                    let o = backend.read(table, key).await;
                    if let Outcome::Ready(Ok(Some((v, _)))) = &o {
                        bytes += v.len();
                        if bytes > MAX_REPLY_BYTES {
                            return self.error(sink, &too_big_reply());
                        }
                    }
                    outcomes.push(o);
                }
                self.finish(sink, join(outcomes), |e, values: Vec<ReadResult>| {
                    e.array(values.len());
                    for v in values {
                        match v {
                            Some((v, _)) => e.bulk(&v),
                            None => e.null(),
                        }
                    }
                });
            }
            "mset" => {
                if !rest.len().is_multiple_of(2) {
                    return self.error(sink, "ERR wrong number of arguments for 'mset' command");
                }
                let mut outcomes = Vec::with_capacity(rest.len() / 2);
                for pair in rest.chunks_exact(2) {
                    outcomes.push(
                        backend
                            .write(table, pair[0], pair[1], RejectRules::default())
                            .await,
                    );
                }
                self.finish(sink, join(outcomes), |e, _| e.ok());
            }
            "del" | "unlink" => {
                let mut outcomes = Vec::with_capacity(rest.len());
                for key in rest {
                    outcomes.push(backend.remove(table, key).await);
                }
                self.finish(sink, join(outcomes), |e, removed: Vec<Option<u64>>| {
                    e.integer(removed.iter().filter(|r| r.is_some()).count() as i64)
                });
            }
            "exists" => {
                let mut outcomes = Vec::with_capacity(rest.len());
                for key in rest {
                    outcomes.push(backend.read(table, key).await);
                }
                self.finish(sink, join(outcomes), |e, found: Vec<ReadResult>| {
                    e.integer(found.iter().filter(|r| r.is_some()).count() as i64)
                });
            }
            "append" => {
                let suffix = rest[1];
                let r = self
                    .read_modify_write(table, rest[0], |old| {
                        let mut v = old.map(<[u8]>::to_vec).unwrap_or_default();
                        v.extend_from_slice(suffix);
                        Ok(v)
                    })
                    .await;
                self.reply_rmw(sink, r, |e, v| {
                    e.integer(i64::try_from(v.len()).unwrap_or(i64::MAX))
                });
            }
            "incr" | "decr" | "incrby" | "decrby" => {
                let delta = match rest.get(1) {
                    None => 1,
                    Some(d) => match parse_i64(d) {
                        Some(d) => d,
                        None => return self.error(sink, NOT_INTEGER),
                    },
                };
                let delta = if name.starts_with("decr") {
                    match delta.checked_neg() {
                        Some(d) => d,
                        None => return self.error(sink, NOT_INTEGER),
                    }
                } else {
                    delta
                };
                let r = self
                    .read_modify_write(table, rest[0], |old| {
                        let current = match old {
                            None => 0,
                            Some(v) => parse_i64(v).ok_or_else(|| NOT_INTEGER.to_string())?,
                        };
                        let next = current.checked_add(delta).ok_or_else(|| {
                            "ERR increment or decrement would overflow".to_string()
                        })?;
                        // The stored form of counters, shared with native
                        // increments (`ramstore_wire::counter`).
                        Ok(CounterText::from_i64(next).as_bytes().to_vec())
                    })
                    .await;
                self.reply_rmw(sink, r, |e, v| {
                    // The value was just formatted from an i64.
                    e.integer(parse_i64(&v).unwrap_or_default())
                });
            }
            "incrbyfloat" => {
                let Some(delta) = parse_float(rest[1]) else {
                    return self.error(sink, NOT_FLOAT);
                };
                let r = self
                    .read_modify_write(table, rest[0], |old| {
                        let current = match old {
                            None => 0.0,
                            Some(v) => parse_float(v).ok_or_else(|| NOT_FLOAT.to_string())?,
                        };
                        let next = current + delta;
                        if !next.is_finite() {
                            return Err("ERR increment would produce NaN or Infinity".into());
                        }
                        Ok(CounterText::from_f64(next).as_bytes().to_vec())
                    })
                    .await;
                self.reply_rmw(sink, r, |e, v| e.bulk(&v));
            }
            "dbsize" => match self.walk(table, |_| {}).await {
                Ok(n) => sink.reply(self.version, |e| e.integer(n as i64)),
                Err(e) => self.store_error(sink, &e),
            },
            "keys" => {
                let pattern = rest[0];
                let mut keys = Vec::new();
                let mut bytes = 0usize;
                let mut too_many = false;
                let walked = self
                    .walk(table, |key| {
                        if glob::matches(pattern, key) {
                            bytes += key.len();
                            if keys.len() < MAX_KEYS_REPLY && bytes <= MAX_REPLY_BYTES {
                                keys.push(key.to_vec());
                            } else {
                                too_many = true;
                            }
                        }
                    })
                    .await;
                match walked {
                    Err(e) => self.store_error(sink, &e),
                    Ok(_) if too_many => self.error(
                        sink,
                        &format!(
                            "ERR KEYS matched more than {MAX_KEYS_REPLY} keys or {MAX_REPLY_BYTES} bytes; use SCAN"
                        ),
                    ),
                    Ok(_) => sink.reply(self.version, |e| {
                        e.array(keys.len());
                        for k in &keys {
                            e.bulk(k);
                        }
                    }),
                }
            }
            "scan" => self.scan(table, rest, sink).await,
            "flushdb" => {
                if rest.len() > 1
                    || rest
                        .first()
                        .is_some_and(|a| !eq(a, "sync") && !eq(a, "async"))
                {
                    return self.error(sink, SYNTAX);
                }
                match self.flush(table).await {
                    Ok(()) => sink.reply(self.version, |e| e.ok()),
                    Err(e) => self.store_error(sink, &e),
                }
            }
            other => self.error(sink, &format!("ERR unknown command '{other}'")),
        }
    }

    fn reply_read(&self, sink: &mut Sink, r: ReadResult) {
        sink.reply(self.version, |e| match r {
            Some((v, _)) => e.bulk(&v),
            None => e.null(),
        });
    }

    fn reply_rmw(
        &self,
        sink: &mut Sink,
        r: RmwResult<Vec<u8>>,
        render: impl FnOnce(&mut Encoder<'_>, Vec<u8>),
    ) {
        match r {
            Ok(Ok(v)) => sink.reply(self.version, |e| render(e, v)),
            Ok(Err(msg)) => self.error(sink, &msg),
            Err(e) => self.store_error(sink, &e),
        }
    }

    /// Reads `key`, computes its new value with `f` and writes it only if nobody
    /// wrote the key meanwhile (a version compare-and-swap, or create-only for an
    /// absent key); retries on a lost race. Returns the new value.
    async fn read_modify_write(
        &self,
        table: u64,
        key: &[u8],
        f: impl Fn(Option<&[u8]>) -> Result<Vec<u8>, String>,
    ) -> RmwResult<Vec<u8>> {
        let backend = &self.shared.backend;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let current = backend.read(table, key).await.resolve().await?;
            let next = match f(current.as_ref().map(|(v, _)| v.as_slice())) {
                Ok(v) => v,
                Err(msg) => return Ok(Err(msg)),
            };
            let rules = match &current {
                Some((_, version)) => RejectRules::version_must_equal(*version),
                None => RejectRules::must_not_exist(),
            };
            match backend
                .write(table, key, &next, rules)
                .await
                .resolve()
                .await?
            {
                WriteResult::Written(_) => return Ok(Ok(next)),
                // Another writer got in between: read again.
                _ => continue,
            }
        }
        Ok(Err(format!(
            "TRYAGAIN key changed concurrently {MAX_CAS_ATTEMPTS} times in a row"
        )))
    }

    /// SET key value with GET: writes `value` unless `condition` (NX: must not
    /// exist, XX: must exist) fails, and returns the old value either way.
    async fn set_get(
        &self,
        table: u64,
        key: &[u8],
        value: &[u8],
        condition: Option<bool>,
    ) -> Result<ReadResult, StoreError> {
        let backend = &self.shared.backend;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let current = backend.read(table, key).await.resolve().await?;
            let allowed = match condition {
                Some(true) => current.is_none(),
                Some(false) => current.is_some(),
                None => true,
            };
            if !allowed {
                return Ok(current);
            }
            let rules = match &current {
                Some((_, version)) => RejectRules::version_must_equal(*version),
                None => RejectRules::must_not_exist(),
            };
            if let WriteResult::Written(_) = backend
                .write(table, key, value, rules)
                .await
                .resolve()
                .await?
            {
                return Ok(current);
            }
        }
        Err(StoreError::NotDurable(format!(
            "key changed concurrently {MAX_CAS_ATTEMPTS} times in a row"
        )))
    }

    async fn set(&self, table: u64, rest: &[&[u8]], sink: &mut Sink) {
        let (key, value) = (rest[0], rest[1]);
        // Some(true): NX, Some(false): XX.
        let mut condition = None;
        let mut get = false;
        let mut i = 2;
        while i < rest.len() {
            let opt = rest[i];
            if eq(opt, "nx") && condition != Some(false) {
                condition = Some(true);
            } else if eq(opt, "xx") && condition != Some(true) {
                condition = Some(false);
            } else if eq(opt, "get") {
                get = true;
            } else if eq(opt, "keepttl") {
                // Keys never expire yet, so there is no time to live to keep.
            } else if ["ex", "px", "exat", "pxat"].iter().any(|w| eq(opt, w)) {
                return self.error(
                    sink,
                    "ERR SET EX/PX/EXAT/PXAT is not supported: ramstore keys do not expire yet",
                );
            } else {
                return self.error(sink, SYNTAX);
            }
            i += 1;
        }
        if get {
            match self.set_get(table, key, value, condition).await {
                Ok(old) => self.reply_read(sink, old),
                Err(e) => self.store_error(sink, &e),
            }
            return;
        }
        let rules = match condition {
            Some(true) => RejectRules::must_not_exist(),
            Some(false) => RejectRules::must_exist(),
            None => RejectRules::default(),
        };
        let o = self.shared.backend.write(table, key, value, rules).await;
        self.finish(sink, o, |e, r| match r {
            WriteResult::Written(_) => e.ok(),
            _ => e.null(),
        });
    }

    /// Calls `each` with every key of `table`; returns how many there were.
    async fn walk(&self, table: u64, mut each: impl FnMut(&[u8])) -> Result<usize, StoreError> {
        let mut cursor = 0;
        let mut n = 0;
        loop {
            let (batch, next) = self.shared.backend.scan_batch(table, cursor).await?;
            for o in &batch {
                each(&o.key);
            }
            n += batch.len();
            match next {
                Some(c) => cursor = c,
                None => return Ok(n),
            }
        }
    }

    /// Removes every key of `table`, a batch at a time (the removes of a batch wait
    /// for replication together).
    async fn flush(&self, table: u64) -> Result<(), StoreError> {
        let backend = &self.shared.backend;
        let mut cursor = 0;
        loop {
            let (batch, next) = backend.scan_batch(table, cursor).await?;
            let mut outcomes = Vec::with_capacity(batch.len());
            for o in &batch {
                outcomes.push(backend.remove(table, &o.key).await);
            }
            join(outcomes).resolve().await?;
            match next {
                Some(c) => cursor = c,
                None => return Ok(()),
            }
        }
    }

    async fn scan(&self, table: u64, rest: &[&[u8]], sink: &mut Sink) {
        let Some(mut cursor) = std::str::from_utf8(rest[0])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        else {
            return self.error(sink, "ERR invalid cursor");
        };
        let mut pattern: Option<&[u8]> = None;
        let mut count = 10usize;
        let mut only_strings = true;
        let mut i = 1;
        while i < rest.len() {
            let Some(&value) = rest.get(i + 1) else {
                return self.error(sink, SYNTAX);
            };
            if eq(rest[i], "match") {
                pattern = Some(value);
            } else if eq(rest[i], "count") {
                match parse_i64(value) {
                    Some(n) if n >= 1 => count = usize::try_from(n).unwrap_or(usize::MAX),
                    Some(_) => return self.error(sink, SYNTAX),
                    None => return self.error(sink, NOT_INTEGER),
                }
            } else if eq(rest[i], "type") {
                only_strings = eq(value, "string");
            } else {
                return self.error(sink, SYNTAX);
            }
            i += 2;
        }
        let mut keys = Vec::new();
        let mut seen = 0;
        let mut next_cursor = 0;
        for _ in 0..MAX_SCAN_BATCHES {
            let (batch, next) = match self.shared.backend.scan_batch(table, cursor).await {
                Ok(b) => b,
                Err(e) => return self.store_error(sink, &e),
            };
            seen += batch.len();
            keys.extend(
                batch
                    .into_iter()
                    .filter(|o| only_strings && pattern.is_none_or(|p| glob::matches(p, &o.key)))
                    .map(|o| o.key),
            );
            // Redis's cursor 0 means "done"; an enumeration cursor is a key hash
            // that only moves forward from 0, so a live cursor is never 0.
            next_cursor = next.unwrap_or(0);
            match next {
                Some(c) if seen < count => cursor = c,
                _ => break,
            }
        }
        sink.reply(self.version, |e| {
            e.array(2);
            e.bulk(next_cursor.to_string().as_bytes());
            e.array(keys.len());
            for k in &keys {
                e.bulk(k);
            }
        });
    }

    fn hello(&mut self, rest: &[&[u8]], sink: &mut Sink) {
        let mut version = self.version;
        let mut i = 0;
        if let Some(&v) = rest.first() {
            match parse_i64(v) {
                Some(2) => version = Version::Resp2,
                Some(3) => version = Version::Resp3,
                Some(_) => return self.error(sink, "NOPROTO unsupported protocol version"),
                None => {
                    return self.error(
                        sink,
                        "ERR Protocol version is not an integer or out of range",
                    )
                }
            }
            i = 1;
        }
        let mut name = None;
        while i < rest.len() {
            if eq(rest[i], "auth") && i + 2 < rest.len() {
                if !self.check_password(rest[i + 1], rest[i + 2]) {
                    return self.error(
                        sink,
                        "WRONGPASS invalid username-password pair or user is disabled.",
                    );
                }
                self.authenticated = true;
                i += 3;
            } else if eq(rest[i], "setname") && i + 1 < rest.len() {
                name = Some(rest[i + 1]);
                i += 2;
            } else {
                return self.error(sink, SYNTAX);
            }
        }
        if !self.authenticated {
            return self.error(
                sink,
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            );
        }
        if let Some(n) = name {
            if let Err(msg) = valid_name(n) {
                return self.error(sink, msg);
            }
            self.name = Some(n.to_vec());
        }
        self.version = version;
        let proto = match version {
            Version::Resp2 => 2,
            Version::Resp3 => 3,
        };
        let id = self.id;
        sink.reply(version, |e| {
            e.map(7);
            e.bulk(b"server");
            e.bulk(b"redis");
            e.bulk(b"version");
            e.bulk(REDIS_COMPAT_VERSION.as_bytes());
            e.bulk(b"proto");
            e.integer(proto);
            e.bulk(b"id");
            e.integer(i64::try_from(id).unwrap_or(i64::MAX));
            e.bulk(b"mode");
            e.bulk(b"standalone");
            e.bulk(b"role");
            e.bulk(b"master");
            e.bulk(b"modules");
            e.array(0);
        });
    }

    fn check_password(&self, user: &[u8], pass: &[u8]) -> bool {
        if user != b"default" {
            return false;
        }
        match &self.shared.config.require_pass {
            // No password configured: the default user needs none (see the crate
            // docs: AUTH is accepted, as the issue asks, rather than refused).
            None => true,
            Some(p) => constant_time_eq(p.as_bytes(), pass),
        }
    }

    fn auth(&mut self, rest: &[&[u8]], sink: &mut Sink) {
        let (user, pass) = match rest {
            [pass] => (&b"default"[..], *pass),
            [user, pass] => (*user, *pass),
            _ => return self.error(sink, SYNTAX),
        };
        if self.check_password(user, pass) {
            self.authenticated = true;
            sink.reply(self.version, |e| e.ok());
        } else {
            self.error(
                sink,
                "WRONGPASS invalid username-password pair or user is disabled.",
            );
        }
    }

    fn client(&mut self, rest: &[&[u8]], sink: &mut Sink) {
        let sub = rest[0];
        if eq(sub, "id") && rest.len() == 1 {
            let id = i64::try_from(self.id).unwrap_or(i64::MAX);
            sink.reply(self.version, |e| e.integer(id));
        } else if eq(sub, "getname") && rest.len() == 1 {
            let name = self.name.clone();
            sink.reply(self.version, |e| match &name {
                Some(n) => e.bulk(n),
                None => e.null(),
            });
        } else if eq(sub, "setname") && rest.len() == 2 {
            match valid_name(rest[1]) {
                Ok(()) => {
                    self.name = (!rest[1].is_empty()).then(|| rest[1].to_vec());
                    sink.reply(self.version, |e| e.ok());
                }
                Err(msg) => self.error(sink, msg),
            }
        } else if eq(sub, "setinfo") && rest.len() == 3 {
            // Client libraries announce their name and version; nothing to keep.
            sink.reply(self.version, |e| e.ok());
        } else {
            self.error(
                sink,
                &format!(
                    "ERR unknown subcommand or wrong number of arguments for 'CLIENT|{}' (ramstore supports ID, GETNAME, SETNAME, SETINFO)",
                    shown(sub)
                ),
            );
        }
    }

    fn command(&self, rest: &[&[u8]], sink: &mut Sink) {
        match rest.first() {
            None => sink.reply(self.version, |e| {
                e.array(COMMANDS.len());
                for s in COMMANDS {
                    command_info(e, s);
                }
            }),
            Some(sub) if eq(sub, "count") => {
                sink.reply(self.version, |e| e.integer(COMMANDS.len() as i64))
            }
            Some(sub) if eq(sub, "info") => sink.reply(self.version, |e| {
                e.array(rest.len() - 1);
                for name in &rest[1..] {
                    match find_spec(name) {
                        Some(s) => command_info(e, s),
                        None => e.null_array(),
                    }
                }
            }),
            // Clients ask for docs to show hints; having none is allowed.
            Some(sub) if eq(sub, "docs") => sink.reply(self.version, |e| e.map(0)),
            Some(sub) => self.error(
                sink,
                &format!(
                    "ERR unknown subcommand '{}' (ramstore supports COMMAND, COMMAND COUNT, INFO, DOCS)",
                    shown(sub)
                ),
            ),
        }
    }

    fn config(&self, rest: &[&[u8]], sink: &mut Sink) {
        if !eq(rest[0], "get") || rest.len() < 2 {
            return self.error(
                sink,
                "ERR ramstore supports only CONFIG GET parameter [parameter ...]",
            );
        }
        let c = &self.shared.config;
        let params: [(&str, String); 6] = [
            ("databases", MAX_DATABASES.to_string()),
            ("port", c.port.to_string()),
            ("maxmemory", c.memory_bytes.to_string()),
            ("appendonly", "no".into()),
            ("save", String::new()),
            ("timeout", "0".into()),
        ];
        let mut hits: Vec<&(&str, String)> = Vec::new();
        for p in &params {
            if rest[1..]
                .iter()
                .any(|pat| glob::matches(&pat.to_ascii_lowercase(), p.0.as_bytes()))
            {
                hits.push(p);
            }
        }
        sink.reply(self.version, |e| {
            e.map(hits.len());
            for (k, v) in &hits {
                e.bulk(k.as_bytes());
                e.bulk(v.as_bytes());
            }
        });
    }

    async fn info(&self, rest: &[&[u8]], sink: &mut Sink) {
        let all = rest.is_empty()
            || rest
                .iter()
                .any(|s| eq(s, "all") || eq(s, "default") || eq(s, "everything"));
        let wants = |name: &str| all || rest.iter().any(|s| eq(s, name));
        let shared = &self.shared;
        let mut text = String::new();
        if wants("server") {
            text.push_str(&format!(
                "# Server\r\nredis_version:{REDIS_COMPAT_VERSION}\r\nramstore_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
                env!("CARGO_PKG_VERSION"),
                std::process::id(),
                shared.config.port,
                shared.config.clock.elapsed(shared.started).as_secs()
            ));
        }
        if wants("clients") {
            text.push_str(&format!(
                "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
                shared.stats.connected.load(Ordering::Relaxed),
                crate::server::MAX_CONNECTIONS
            ));
        }
        if wants("memory") {
            let stats = shared.backend.local_stats().await;
            let get = |k: &str| {
                stats
                    .lines()
                    .find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                    .unwrap_or("0")
                    .to_string()
            };
            text.push_str(&format!(
                "# Memory\r\nused_memory:{}\r\nramstore_live_object_bytes:{}\r\nramstore_tombstone_bytes:{}\r\nmaxmemory:{}\r\nramstore_objects:{}\r\nramstore_durability:{}\r\n",
                get("live_object_bytes").parse::<u64>().unwrap_or(0)
                    + get("tombstone_bytes").parse::<u64>().unwrap_or(0),
                get("live_object_bytes"),
                get("tombstone_bytes"),
                get("memory_bytes"),
                get("objects"),
                get("durability"),
            ));
            // Where the server's resident memory is (issue 17): `used_memory_rss` as
            // Redis has it (the process's resident set), and ramstore's split of
            // it; a part the server cannot measure (not Linux), or all of them
            // without a local server, is left out.
            for (field, key) in [
                ("used_memory_rss", "resident_bytes"),
                ("ramstore_resident_peak_bytes", "resident_peak_bytes"),
                ("ramstore_log_resident_bytes", "log_resident_bytes"),
                (
                    "ramstore_hash_table_resident_bytes",
                    "hash_table_resident_bytes",
                ),
                ("ramstore_other_resident_bytes", "other_resident_bytes"),
            ] {
                let value = stats
                    .lines()
                    .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')));
                if let Some(bytes) = value.and_then(|v| v.parse::<u64>().ok()) {
                    text.push_str(&format!("{field}:{bytes}\r\n"));
                }
            }
            // Whether the log refuses writes for lack of memory (writes get -OOM
            // once it has for longer than the patience), for how long, and the
            // NO_SPACE answers so far.
            text.push_str(&format!(
                "ramstore_refusing_writes:{}\r\nramstore_refusing_writes_ms:{}\r\nramstore_no_space_answers:{}\r\n\r\n",
                get("refusing_writes"),
                get("refusing_writes_ms"),
                get("no_space_answers"),
            ));
        }
        if wants("stats") {
            let s = &shared.stats;
            text.push_str(&format!(
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\nprotocol_errors:{}\r\n\r\n",
                s.connections_received.load(Ordering::Relaxed),
                s.commands_processed.load(Ordering::Relaxed),
                s.rejected_connections.load(Ordering::Relaxed),
                s.protocol_errors.load(Ordering::Relaxed),
            ));
        }
        if wants("keyspace") {
            text.push_str("# Keyspace\r\n");
            // Counting keys enumerates each database (see DBSIZE's cost).
            for (db, table) in shared.backend.known_databases() {
                match self.walk(table, |_| {}).await {
                    Ok(0) => {}
                    Ok(n) => text.push_str(&format!("db{db}:keys={n},expires=0,avg_ttl=0\r\n")),
                    Err(e) => return self.store_error(sink, &e),
                }
            }
        }
        sink.reply(self.version, |e| e.text(&text));
    }
}

fn too_big_reply() -> String {
    format!("ERR the reply would exceed {MAX_REPLY_BYTES} bytes; ask for fewer keys")
}

fn command_info(e: &mut Encoder<'_>, s: &Spec) {
    e.array(6);
    e.bulk(s.name.as_bytes());
    e.integer(i64::from(s.arity));
    e.array(s.flags.len());
    for f in s.flags {
        e.simple(f);
    }
    e.integer(s.first_key);
    e.integer(s.last_key);
    e.integer(s.step);
}

fn valid_name(name: &[u8]) -> Result<(), &'static str> {
    if name.len() > MAX_CLIENT_NAME_BYTES {
        return Err("ERR client name is too long");
    }
    if name.iter().any(|&b| b <= b' ' || b > b'~') {
        return Err("ERR Client names cannot contain spaces, newlines or special characters.");
    }
    Ok(())
}

/// Compares passwords in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Outcomes of several operations as one: ready if all are, else pending on all.
fn join<T: Send + 'static>(outcomes: Vec<Outcome<T>>) -> Outcome<Vec<T>> {
    if outcomes.iter().all(|o| matches!(o, Outcome::Ready(_))) {
        return Outcome::Ready(
            outcomes
                .into_iter()
                .map(|o| match o {
                    Outcome::Ready(r) => r,
                    // Not reached: every outcome is ready (checked above).
                    Outcome::Pending(_) => Err(StoreError::BadAnswer("pending outcome".into())),
                })
                .collect(),
        );
    }
    Outcome::Pending(Box::pin(async move {
        // Every outcome is awaited, so each write's durability is known before
        // the reply, even after an error; the first error in command order wins.
        join_all(outcomes.into_iter().map(Outcome::resolve))
            .await
            .into_iter()
            .collect()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_first_for_key_commands_only() {
        for name in [&b"GET"[..], b"set", b"MGET", b"incrby", b"rs.getv"] {
            assert!(key_first(name), "{}", shown(name));
        }
        for name in [&b"PING"[..], b"echo", b"SELECT", b"scan", b"nosuch"] {
            assert!(!key_first(name), "{}", shown(name));
        }
    }

    #[test]
    fn arity_ok_exact_and_minimum() {
        let get = find_spec(b"GET").expect("get");
        assert!(arity_ok(get, 2));
        assert!(!arity_ok(get, 1));
        assert!(!arity_ok(get, 3));
        let mget = find_spec(b"mget").expect("mget");
        assert!(!arity_ok(mget, 1));
        assert!(arity_ok(mget, 2));
        assert!(arity_ok(mget, 9));
        assert!(find_spec(b"nosuch").is_none());
        assert!(find_spec(b"Rs.GetV").is_some());
    }

    #[test]
    fn valid_name_rejects_spaces_and_long_names() {
        assert!(valid_name(b"worker-1").is_ok());
        assert!(valid_name(b"a b").is_err());
        assert!(valid_name(&[b'a'; MAX_CLIENT_NAME_BYTES + 1]).is_err());
    }

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }

    #[test]
    fn join_ready_and_pending() {
        let ready: Outcome<Vec<u32>> = join(vec![Outcome::Ready(Ok(1)), Outcome::Ready(Ok(2))]);
        assert!(matches!(ready, Outcome::Ready(Ok(ref v)) if v == &[1, 2]));
        let failed: Outcome<Vec<u32>> = join(vec![
            Outcome::Ready(Ok(1)),
            Outcome::Ready(Err(StoreError::NotDurable("x".into()))),
        ]);
        assert!(matches!(failed, Outcome::Ready(Err(_))));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let pending = join(vec![
            Outcome::Ready(Ok(1u32)),
            Outcome::Pending(Box::pin(async { Ok(2u32) })),
        ]);
        assert!(matches!(pending, Outcome::Pending(_)));
        assert_eq!(rt.block_on(pending.resolve()), Ok(vec![1, 2]));
    }
}

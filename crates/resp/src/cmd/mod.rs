//! The Redis commands: each parsed once into a typed [`Command`] that borrows its
//! arguments from the frame, then run as ramstore operations (see
//! `docs/architecture.md`, "Redis protocol", for the mapping and its costs).
//!
//! The path of a command ([`Connection::execute`]): [`lookup`] finds its row in
//! the one command table ([`spec::COMMANDS`]) and checks the argument count; the
//! connection checks authentication against the row's flags; the row's parse
//! function (in the command's family file) checks the arguments and builds the
//! typed command; [`Connection::run`] resolves the current database's table if the
//! command needs one and hands the command to its family. The checks come in
//! Redis's order (unknown command, arity, NOAUTH, then the arguments), so every
//! error line is the one Redis would send first.
//!
//! Families, one file each (mini-redis's layout): [`connection`] (PING, ECHO,
//! HELLO, AUTH, SELECT, CLIENT, QUIT), [`strings`] (GET, SET, SETNX, GETSET, GETDEL,
//! GETEX, GETRANGE, SUBSTR, SETRANGE, MGET, MSET, MSETNX, STRLEN, APPEND, RS.GETV,
//! RS.CAS), [`expiry`] (EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL,
//! EXPIRETIME, PEXPIRETIME, PERSIST, SETEX, PSETEX, and the expiry options of
//! SET and GETEX), [`bits`] (GETBIT, SETBIT, BITCOUNT), [`counters`] (INCR, DECR, INCRBY, DECRBY,
//! INCRBYFLOAT), [`keys`] (DEL, UNLINK, EXISTS, TOUCH, TYPE, RENAME, RENAMENX,
//! COPY, SCAN, KEYS), [`server`] (COMMAND, CONFIG, INFO, DBSIZE, FLUSHDB,
//! FLUSHALL) and [`multi`] (MULTI, EXEC, DISCARD, WATCH, UNWATCH; the queued
//! commands run inside one ramstore transaction by `queued.rs`). Commands that
//! read then write, or touch several keys, run outside MULTI as a transaction of
//! their own through the same `queued.rs` forms (`atomic.rs`).
//!
//! Parsing neither allocates nor copies: a GET or SET is parsed into slices of the
//! connection's read buffer (`tests/no_alloc.rs`). Only error replies allocate.
//!
//! Thread-safety: a [`Connection`] belongs to the task serving its socket; the
//! [`Shared`] state it points to is `Send + Sync`.

mod atomic;
pub mod bitpos;
pub mod bits;
pub mod connection;
pub mod counters;
pub mod expiry;
pub mod keys;
pub mod lcs;
pub mod multi;
mod offsets;
mod queued;
pub mod server;
pub mod spec;
pub mod strings;

use std::sync::Arc;

use futures_util::future::join_all;
use ramstore_client::{ExpiryChange, RejectRules};

use crate::backend::{Outcome, ReadResult, StoreError, WriteResult};
use crate::long_double::LongDouble;
use crate::protocol::{Encoder, Version};
use crate::shared::Shared;
use crate::sink::Sink;

pub use connection::{ClientSub, Hello, MAX_CLIENT_NAME_BYTES};
pub use expiry::{Deadline, Expire, GetExOption, SetExpiry, TtlKind};
pub use keys::{Scan, MAX_KEYS_REPLY, MAX_SCAN_BATCHES};
pub use multi::{MultiState, MAX_EXEC_ATTEMPTS, MAX_QUEUED_COMMANDS, MAX_WATCHED_KEYS};
pub use server::CommandSub;
pub use spec::{find_spec, key_first, Spec, COMMANDS};
pub use strings::{Set, SetCondition, MAX_KEPT_VALUE_BUFFER};

/// Databases SELECT accepts (`db0` … `db15`, Redis's default count).
pub const MAX_DATABASES: u32 = 16;
/// Attempts of a read-modify-write (INCR, APPEND, SET … GET) that lost a race to
/// another writer before it answers an error instead of trying again.
pub const MAX_CAS_ATTEMPTS: usize = 100;
/// Most bytes of keys or values one MGET or KEYS reply may carry; beyond it the
/// command answers an error instead of building the reply (an MGET of 65,536
/// 1 MiB values would otherwise hold 64 GiB in the server's memory).
pub const MAX_REPLY_BYTES: usize = 64 << 20;
/// The Redis version reported to clients (HELLO, INFO): the command set above is
/// what clients of this version expect to find.
pub const REDIS_COMPAT_VERSION: &str = "7.0.0";

const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";

/// What the connection does after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Close,
}

/// A command, parsed and checked, borrowing its keys and values from the frame.
/// One variant per row of [`COMMANDS`] ([`Command::name`] is the row's name).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Command<'a> {
    // connection.rs
    Ping {
        message: Option<&'a [u8]>,
    },
    Echo {
        message: &'a [u8],
    },
    Hello(Hello<'a>),
    /// `user` is `None` for the one-argument form (the default user).
    Auth {
        user: Option<&'a [u8]>,
        pass: &'a [u8],
    },
    Select {
        db: u32,
    },
    Client(ClientSub<'a>),
    Quit,
    // strings.rs
    Get {
        key: &'a [u8],
    },
    Set(Set<'a>),
    SetNx {
        key: &'a [u8],
        value: &'a [u8],
    },
    GetSet {
        key: &'a [u8],
        value: &'a [u8],
    },
    MGet {
        keys: &'a [&'a [u8]],
    },
    /// Keys and values alternate (an even count, checked).
    MSet {
        pairs: &'a [&'a [u8]],
    },
    StrLen {
        key: &'a [u8],
    },
    /// GETRANGE (and its old name SUBSTR, `substr`): bytes `start..=end` of
    /// the value, negative offsets counting from its end.
    GetRange {
        key: &'a [u8],
        start: i64,
        end: i64,
        substr: bool,
    },
    /// GETDEL: the value, and the key deleted (atomically: a transaction).
    GetDel {
        key: &'a [u8],
    },
    /// GETEX: GET, then the key's expiry changed as `option` says
    /// (`expiry.rs`).
    GetEx {
        key: &'a [u8],
        option: GetExOption<'a>,
    },
    // expiry.rs
    /// SETEX (`name` "setex") and PSETEX: SET with a time to live.
    SetEx {
        key: &'a [u8],
        value: &'a [u8],
        when: Deadline,
        name: &'static str,
    },
    /// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT.
    Expire(Expire<'a>),
    /// TTL, PTTL, EXPIRETIME, PEXPIRETIME.
    Ttl {
        key: &'a [u8],
        kind: TtlKind,
    },
    Persist {
        key: &'a [u8],
    },
    /// SETRANGE: `value` written at byte `offset`, zero-padded.
    SetRange {
        key: &'a [u8],
        offset: u64,
        value: &'a [u8],
    },
    /// MSETNX: every pair written, only if none of the keys exists.
    MSetNx {
        pairs: &'a [&'a [u8]],
    },
    // bits.rs
    GetBit {
        key: &'a [u8],
        offset: u64,
    },
    SetBit {
        key: &'a [u8],
        offset: u64,
        on: bool,
    },
    /// BITCOUNT: `args` after the key, checked when it runs (Redis 7 answers 0
    /// for a missing key whatever they are).
    BitCount {
        key: &'a [u8],
        args: &'a [&'a [u8]],
    },
    /// LCS of the values of `a` and `b` (missing: empty).
    Lcs {
        a: &'a [u8],
        b: &'a [u8],
        options: lcs::LcsOptions,
    },
    /// BITPOS: the bit sought; `args` after it, checked when it runs (a
    /// missing key answers without them).
    BitPos {
        key: &'a [u8],
        bit: bool,
        args: &'a [&'a [u8]],
    },
    Append {
        key: &'a [u8],
        suffix: &'a [u8],
    },
    /// RS.GETV: the value and its version.
    GetV {
        key: &'a [u8],
    },
    /// RS.CAS: write if the version is `version` (0: if absent).
    Cas {
        key: &'a [u8],
        version: u64,
        value: &'a [u8],
    },
    // counters.rs: `by` is the delta added, negative for DECR and DECRBY.
    Incr {
        key: &'a [u8],
        by: i64,
    },
    IncrBy {
        key: &'a [u8],
        by: i64,
    },
    Decr {
        key: &'a [u8],
        by: i64,
    },
    DecrBy {
        key: &'a [u8],
        by: i64,
    },
    IncrByFloat {
        key: &'a [u8],
        by: LongDouble,
    },
    // keys.rs
    Del {
        keys: &'a [&'a [u8]],
    },
    Unlink {
        keys: &'a [&'a [u8]],
    },
    Exists {
        keys: &'a [&'a [u8]],
    },
    /// TOUCH: how many of the keys exist (keys have no access time to update).
    Touch {
        keys: &'a [&'a [u8]],
    },
    /// RENAME (`nx`: RENAMENX): the value moved to `new_key`.
    Rename {
        key: &'a [u8],
        new_key: &'a [u8],
        nx: bool,
    },
    /// COPY [REPLACE], within the current database.
    Copy {
        source: &'a [u8],
        destination: &'a [u8],
        replace: bool,
    },
    /// TYPE: `string` or `none` (strings are the only type so far).
    Type {
        key: &'a [u8],
    },
    Scan(Scan<'a>),
    Keys {
        pattern: &'a [u8],
    },
    // server.rs
    Command(CommandSub<'a>),
    Config {
        patterns: &'a [&'a [u8]],
    },
    Info {
        sections: &'a [&'a [u8]],
    },
    DbSize,
    FlushDb,
    FlushAll,
    // multi.rs
    Multi,
    Exec,
    Discard,
    Watch {
        keys: &'a [&'a [u8]],
    },
    Unwatch,
}

impl Command<'_> {
    /// The command's name as in its row of [`COMMANDS`].
    pub fn name(&self) -> &'static str {
        match self {
            Command::Ping { .. } => "ping",
            Command::Echo { .. } => "echo",
            Command::Hello(_) => "hello",
            Command::Auth { .. } => "auth",
            Command::Select { .. } => "select",
            Command::Client(_) => "client",
            Command::Quit => "quit",
            Command::Get { .. } => "get",
            Command::Set(_) => "set",
            Command::SetNx { .. } => "setnx",
            Command::GetSet { .. } => "getset",
            Command::MGet { .. } => "mget",
            Command::MSet { .. } => "mset",
            Command::StrLen { .. } => "strlen",
            Command::GetRange { substr: false, .. } => "getrange",
            Command::GetRange { substr: true, .. } => "substr",
            Command::GetDel { .. } => "getdel",
            Command::GetEx { .. } => "getex",
            Command::SetEx { name, .. } => name,
            Command::Expire(e) => e.name,
            Command::Ttl { kind, .. } => kind.name(),
            Command::Persist { .. } => "persist",
            Command::SetRange { .. } => "setrange",
            Command::MSetNx { .. } => "msetnx",
            Command::GetBit { .. } => "getbit",
            Command::SetBit { .. } => "setbit",
            Command::BitCount { .. } => "bitcount",
            Command::BitPos { .. } => "bitpos",
            Command::Lcs { .. } => "lcs",
            Command::Rename { nx: false, .. } => "rename",
            Command::Rename { nx: true, .. } => "renamenx",
            Command::Copy { .. } => "copy",
            Command::Append { .. } => "append",
            Command::GetV { .. } => "rs.getv",
            Command::Cas { .. } => "rs.cas",
            Command::Incr { .. } => "incr",
            Command::IncrBy { .. } => "incrby",
            Command::Decr { .. } => "decr",
            Command::DecrBy { .. } => "decrby",
            Command::IncrByFloat { .. } => "incrbyfloat",
            Command::Del { .. } => "del",
            Command::Unlink { .. } => "unlink",
            Command::Exists { .. } => "exists",
            Command::Touch { .. } => "touch",
            Command::Type { .. } => "type",
            Command::Scan(_) => "scan",
            Command::Keys { .. } => "keys",
            Command::Command(_) => "command",
            Command::Config { .. } => "config",
            Command::Info { .. } => "info",
            Command::DbSize => "dbsize",
            Command::FlushDb => "flushdb",
            Command::FlushAll => "flushall",
            Command::Multi => "multi",
            Command::Exec => "exec",
            Command::Discard => "discard",
            Command::Watch { .. } => "watch",
            Command::Unwatch => "unwatch",
        }
    }
}

/// Why a command was refused before it ran; `Display` is the Redis error line
/// the client gets (code and message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("ERR unknown command '{name}', with args beginning with:{args}")]
    UnknownCommand {
        name: String,
        /// The first arguments, each as ` 'arg'`.
        args: String,
    },
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(&'static str),
    #[error("{}", NOT_INTEGER)]
    NotInteger,
    /// DECRBY of i64::MIN, whose negation overflows (Redis 7's text).
    #[error("ERR decrement would overflow")]
    DecrementOverflow,
    #[error("{}", NOT_FLOAT)]
    NotFloat,
    #[error("ERR syntax error")]
    Syntax,
    /// An error whose whole line is Redis's fixed text for it.
    #[error("{0}")]
    Message(&'static str),
    #[error("ERR invalid cursor")]
    InvalidCursor,
    #[error("ERR DB index is out of range")]
    DbIndexOutOfRange,
    /// A time that is not positive or overflows, for command `{0}`.
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpireTime(&'static str),
    /// EXPIRE's option that is none of NX, XX, GT, LT (Redis 7's text).
    #[error("ERR Unsupported option {0}")]
    UnsupportedOption(String),
    #[error("NOPROTO unsupported protocol version")]
    UnsupportedProtocol,
    #[error("ERR Protocol version is not an integer or out of range")]
    ProtocolNotInteger,
    #[error("ERR client name is too long")]
    ClientNameTooLong,
    #[error("ERR Client names cannot contain spaces, newlines or special characters.")]
    ClientNameInvalid,
    #[error("ERR unknown subcommand or wrong number of arguments for 'CLIENT|{0}' (ramstore supports ID, GETNAME, SETNAME, SETINFO)")]
    ClientSubcommand(String),
    #[error("ERR unknown subcommand '{0}' (ramstore supports COMMAND, COMMAND COUNT, INFO, DOCS)")]
    CommandSubcommand(String),
    #[error("ERR ramstore supports only CONFIG GET parameter [parameter ...]")]
    ConfigNotGet,
}

/// Finds the row of the command `args` names (its first element) and checks the
/// argument count. Empty `args` names no command: an unknown command with no name.
pub fn lookup(args: &[&[u8]]) -> Result<&'static Spec, ParseError> {
    let Some((&name, rest)) = args.split_first() else {
        return Err(ParseError::UnknownCommand {
            name: String::new(),
            args: String::new(),
        });
    };
    let Some(spec) = find_spec(name) else {
        let mut shown_args = String::new();
        for a in rest.iter().take(8) {
            shown_args.push_str(&format!(" '{}'", shown(a)));
        }
        return Err(ParseError::UnknownCommand {
            name: shown(name),
            args: shown_args,
        });
    };
    if !spec.arity_ok(args.len()) {
        return Err(ParseError::WrongArity(spec.name));
    }
    Ok(spec)
}

/// Parses a whole command (name and arguments) into its typed form: [`lookup`],
/// then the row's parse function.
pub fn parse<'a>(args: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let spec = lookup(args)?;
    (spec.parse)(&args[1..])
}

/// Lossy text of an argument, for error messages (shortened).
fn shown(arg: &[u8]) -> String {
    let s = String::from_utf8_lossy(&arg[..arg.len().min(128)]);
    s.replace(['\r', '\n'], " ")
}

fn eq(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

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
    /// MULTI's queue and WATCH's keys.
    multi: MultiState,
}

/// A read-modify-write's answer for the client, or the error to reply.
type RmwResult<T> = Result<Result<T, String>, StoreError>;

impl Connection {
    /// Whether the client may run any command: it authenticated, or no password
    /// is required. Until then the parser holds it to Redis's limits for strangers.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

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
            multi: MultiState::default(),
        }
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// Runs one command and appends its reply to `sink`.
    pub async fn execute(&mut self, args: &[&[u8]], sink: &mut Sink) -> Flow {
        if args.is_empty() {
            return Flow::Continue;
        }
        // A command refused before it runs makes a MULTI's EXEC fail (Redis's
        // EXECABORT); errors of its arguments are found when EXEC runs it.
        let spec = match lookup(args) {
            Ok(spec) => spec,
            Err(e) => {
                self.multi.flag();
                return self.refuse(sink, &e);
            }
        };
        // Before the arguments are looked at, as Redis does: an unauthenticated
        // client learns nothing from the error it gets.
        if !self.authenticated && !spec.allowed_before_auth() {
            self.multi.flag();
            self.error(sink, "NOAUTH Authentication required.");
            return Flow::Continue;
        }
        if self.multi.active() && !multi::runs_inside_multi(spec.name) {
            return self.queue(spec.name, args, sink);
        }
        match (spec.parse)(&args[1..]) {
            Ok(command) => self.run(command, sink).await,
            Err(e) => self.refuse(sink, &e),
        }
    }

    fn refuse(&self, sink: &mut Sink, e: &ParseError) -> Flow {
        self.error(sink, &e.to_string());
        Flow::Continue
    }

    /// Runs a parsed command: those that do not touch the database here, the
    /// others once the current database's table is known.
    pub async fn run(&mut self, command: Command<'_>, sink: &mut Sink) -> Flow {
        match command {
            Command::Ping { message } => self.ping(message, sink),
            Command::Echo { message } => sink.reply(self.version, |e| e.bulk(message)),
            Command::Quit => {
                sink.reply(self.version, |e| e.ok());
                return Flow::Close;
            }
            Command::Hello(hello) => self.hello(hello, sink),
            Command::Auth { user, pass } => self.auth(user, pass, sink),
            Command::Select { db } => self.select(db, sink),
            Command::Client(sub) => self.client(sub, sink),
            Command::Command(sub) => self.command(sub, sink),
            Command::Config { patterns } => self.config(patterns, sink),
            Command::Info { sections } => self.info(sections, sink).await,
            Command::Multi => self.multi(sink),
            Command::Exec => return self.exec(sink).await,
            Command::Discard => self.discard(sink),
            Command::Unwatch => self.unwatch(sink),
            Command::Watch { keys } => self.watch(keys, sink).await,
            data => match self.table().await {
                Ok(table) => self.run_data(table, data, sink).await,
                Err(e) => self.store_error(sink, &e),
            },
        }
        Flow::Continue
    }

    /// The commands that touch the current database's table.
    async fn run_data(&mut self, table: u64, command: Command<'_>, sink: &mut Sink) {
        match command {
            Command::Get { key } => self.get(table, key, sink).await,
            Command::Set(set) => self.set(table, set, sink).await,
            Command::SetNx { key, value } => self.setnx(table, key, value, sink).await,
            Command::GetSet { key, value } => self.getset(table, key, value, sink).await,
            Command::MGet { keys } => self.mget(table, keys, sink).await,
            Command::MSet { pairs } => self.mset(table, pairs, sink).await,
            Command::StrLen { key } => self.strlen(table, key, sink).await,
            Command::GetRange {
                key, start, end, ..
            } => self.getrange(table, key, start, end, sink).await,
            Command::GetEx { key, option } => self.getex(table, key, option, sink).await,
            Command::SetEx {
                key,
                value,
                when,
                name,
            } => self.setex(table, (key, value), when, name, sink).await,
            Command::Expire(e) => self.expire(table, e, sink).await,
            Command::Ttl { key, kind } => self.ttl(table, key, kind, sink).await,
            Command::Persist { key } => self.persist(table, key, sink).await,
            Command::GetBit { key, offset } => self.getbit(table, key, offset, sink).await,
            Command::BitCount { key, args } => self.bitcount(table, key, args, sink).await,
            Command::BitPos { key, bit, args } => self.bitpos(table, key, bit, args, sink).await,
            // Read then write, or several keys: as a transaction of their own
            // (`atomic.rs`), so each is atomic as in Redis.
            atomic @ (Command::GetDel { .. }
            | Command::SetRange { .. }
            | Command::MSetNx { .. }
            | Command::SetBit { .. }
            | Command::Rename { .. }
            | Command::Copy { .. }
            | Command::Lcs { .. }) => self.run_atomically(table, atomic, sink).await,
            Command::Append { key, suffix } => self.append(table, key, suffix, sink).await,
            Command::GetV { key } => self.getv(table, key, sink).await,
            Command::Cas {
                key,
                version,
                value,
            } => self.cas(table, key, version, value, sink).await,
            Command::Incr { key, by }
            | Command::IncrBy { key, by }
            | Command::Decr { key, by }
            | Command::DecrBy { key, by } => self.incr_by(table, key, by, sink).await,
            Command::IncrByFloat { key, by } => self.incr_by_float(table, key, by, sink).await,
            Command::Del { keys } | Command::Unlink { keys } => self.del(table, keys, sink).await,
            Command::Exists { keys } | Command::Touch { keys } => {
                self.exists(table, keys, sink).await
            }
            Command::Type { key } => self.key_type(table, key, sink).await,
            Command::Scan(scan) => self.scan(table, scan, sink).await,
            Command::Keys { pattern } => self.keys(table, pattern, sink).await,
            Command::DbSize => self.dbsize(table, sink).await,
            Command::FlushDb => self.flushdb(table, sink).await,
            Command::FlushAll => self.flushall(sink).await,
            // Run by `run` without a table; not reached.
            other => self.error(sink, &format!("ERR unknown command '{}'", other.name())),
        }
    }

    /// The current database's table id (created on first use).
    async fn table(&mut self) -> Result<u64, StoreError> {
        if let Some(t) = self.table {
            return Ok(t);
        }
        let t = self.shared.backend.table_id(self.db).await?;
        self.table = Some(t);
        Ok(t)
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
    /// absent key); retries on a lost race. Returns the new value. (APPEND and the
    /// counters: Redis runs them atomically on one thread; ramstore has no
    /// server-side string operations, so a conditional write stands in, R§4.)
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
            // The key keeps its time to live, as Redis's APPEND keeps it.
            match backend
                .write_expiring(table, key, &next, rules, ExpiryChange::Keep)
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
}

fn too_big_reply() -> String {
    format!("ERR the reply would exceed {MAX_REPLY_BYTES} bytes; ask for fewer keys")
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
    use proptest::prelude::*;

    use super::*;

    fn args<'a>(words: &'a [&'a str]) -> Vec<&'a [u8]> {
        words.iter().map(|w| w.as_bytes()).collect()
    }

    #[test]
    fn lookup_unknown_command_names_it_and_its_first_arguments() {
        let err = lookup(&args(&["NOSUCH", "a", "b\r\nc"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b  c'"
        );
    }

    #[test]
    fn lookup_wrong_arity_names_the_command_in_lower_case() {
        let err = lookup(&args(&["GET"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ERR wrong number of arguments for 'get' command"
        );
        assert_eq!(lookup(&args(&["GeT", "k"])).map(|s| s.name), Ok("get"));
    }

    #[test]
    fn parse_borrows_from_the_frame() {
        let frame = args(&["set", "key", "value"]);
        let Ok(Command::Set(set)) = parse(&frame) else {
            panic!("SET parses");
        };
        assert!(std::ptr::eq(set.key, frame[1]));
        assert!(std::ptr::eq(set.value, frame[2]));
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

    /// A command name: one of the table's in random case, or any bytes.
    fn name() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (0..COMMANDS.len(), any::<u64>()).prop_map(|(i, case)| {
                COMMANDS[i]
                    .name
                    .bytes()
                    .enumerate()
                    .map(|(j, b)| {
                        if case >> (j % 64) & 1 == 1 {
                            b.to_ascii_uppercase()
                        } else {
                            b
                        }
                    })
                    .collect()
            }),
            proptest::collection::vec(any::<u8>(), 0..12),
        ]
    }

    /// An argument: an option word the parsers look for, a number, or any bytes.
    fn argument() -> impl Strategy<Value = Vec<u8>> {
        let words = [
            "nx",
            "XX",
            "get",
            "keepttl",
            "ex",
            "PX",
            "match",
            "count",
            "type",
            "string",
            "auth",
            "setname",
            "default",
            "id",
            "getname",
            "setinfo",
            "info",
            "docs",
            "sync",
            "async",
            "all",
            "0",
            "1",
            "2",
            "3",
            "-1",
            "16",
            "1.5",
            "inf",
            "nan",
            "9223372036854775807",
            "-9223372036854775808",
            "18446744073709551615",
            "",
        ];
        prop_oneof![
            (0..words.len()).prop_map(move |i| words[i].as_bytes().to_vec()),
            any::<i64>().prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..10),
        ]
    }

    proptest! {
        /// Any argument vector: the parser answers without panicking, and what it
        /// parses is the command its first argument names, with an argument count
        /// its row allows.
        #[test]
        fn parse_never_panics_and_names_round_trip(
            name in name(),
            rest in proptest::collection::vec(argument(), 0..8),
        ) {
            let mut frame: Vec<&[u8]> = vec![&name];
            frame.extend(rest.iter().map(Vec::as_slice));
            match parse(&frame) {
                Ok(command) => {
                    prop_assert!(command.name().as_bytes().eq_ignore_ascii_case(&name));
                    let spec = find_spec(command.name().as_bytes());
                    prop_assert!(spec.is_some_and(|s| s.name == command.name()));
                    prop_assert!(spec.is_some_and(|s| s.arity_ok(frame.len())));
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}

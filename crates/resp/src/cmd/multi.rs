//! Transaction commands: MULTI, EXEC, DISCARD, WATCH, UNWATCH, with Redis's
//! semantics on ramstore's multi-object transactions (SOSP'15 §6; design notes
//! "Redis MULTI/EXEC"), across keys on any server.
//!
//! After MULTI every command but EXEC, DISCARD, MULTI, WATCH and QUIT is queued
//! and answered `+QUEUED`. A command refused while queueing (an unknown command, a
//! wrong argument count, NOAUTH, or one with no transactional form here: SCAN,
//! KEYS, DBSIZE, FLUSHDB, RS.CAS) flags the transaction, and EXEC then answers
//! `EXECABORT` and runs nothing. Errors in a command's arguments surface at EXEC
//! as that command's reply, as in Redis. A nested MULTI and a WATCH inside MULTI
//! are errors that leave the transaction as it was.
//!
//! EXEC runs the queue as one ramstore transaction (`queued.rs`): the reads record
//! versions, the writes are buffered, and commit applies them all or none. If
//! commit aborts because another client changed something the queue read, the
//! queue runs again (it changed nothing), at most [`MAX_EXEC_ATTEMPTS`] times:
//! Redis runs EXEC with nothing in between, so a retried run is what Redis could
//! have done.
//!
//! WATCH records each key's version when it is called. EXEC first reads the
//! watched keys inside the transaction: if one's version differs, EXEC answers the
//! null array and applies nothing; otherwise commit checks the versions, so a
//! change up to the commit aborts too. (A key created and deleted again between
//! WATCH and EXEC reads as absent both times and does not abort, where Redis's
//! would: an absent object has no version to compare.) EXEC and DISCARD forget
//! the watched keys, as UNWATCH does.

use std::time::Duration;

use ramstore_client::{ClientError, Transaction};
use rand::Rng as _;

use super::queued::{refused_in_transaction, run_queued};
use super::{Command, Connection, Flow, ParseError};
use crate::backend::StoreError;
use crate::protocol::Encoder;
use crate::sink::Sink;

/// Commands one MULTI may queue; one more is refused (and flags the transaction).
pub const MAX_QUEUED_COMMANDS: usize = 10_000;
/// Bytes of arguments one MULTI may queue.
pub const MAX_QUEUED_BYTES: usize = 16 << 20;
/// Keys one connection may watch at once.
pub const MAX_WATCHED_KEYS: usize = ramstore_wire::MAX_TX_OBJECTS;
/// Runs of an EXEC whose commit was aborted by a conflicting writer before EXEC
/// answers an error instead of trying again.
pub const MAX_EXEC_ATTEMPTS: u32 = 100;
/// The back-off between runs starts here and doubles up to
/// [`EXEC_BACKOFF_MAX_MS`], with jitter, so two clients that keep aborting each
/// other drift apart.
const EXEC_BACKOFF_INITIAL_MS: u64 = 1;
const EXEC_BACKOFF_MAX_MS: u64 = 64;

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// A key watched since WATCH: its table, and its version then (0: absent).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Watched {
    table: u64,
    key: Vec<u8>,
    version: u64,
}

/// A connection's transaction state.
#[derive(Debug, Default)]
pub struct MultiState {
    /// The queued commands' arguments (name first) while inside MULTI.
    queue: Option<Vec<Vec<Vec<u8>>>>,
    queued_bytes: usize,
    /// A command was refused while queueing: EXEC answers EXECABORT.
    dirty: bool,
    watched: Vec<Watched>,
}

impl MultiState {
    /// Whether the connection is between MULTI and EXEC or DISCARD.
    pub fn active(&self) -> bool {
        self.queue.is_some()
    }

    /// Records that a command was refused; only inside MULTI does it matter.
    pub(super) fn flag(&mut self) {
        if self.active() {
            self.dirty = true;
        }
    }

    fn reset(&mut self) {
        *self = MultiState::default();
    }
}

pub(super) fn parse_multi<'a>(_: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Multi)
}

pub(super) fn parse_exec<'a>(_: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Exec)
}

pub(super) fn parse_discard<'a>(_: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Discard)
}

pub(super) fn parse_watch<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Watch { keys: rest })
}

pub(super) fn parse_unwatch<'a>(_: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Unwatch)
}

/// Whether the command named `name` (lower case) runs at once inside MULTI
/// instead of being queued (Redis's list).
pub(super) fn runs_inside_multi(name: &str) -> bool {
    matches!(name, "exec" | "discard" | "multi" | "watch" | "quit")
}

impl Connection {
    /// Queues a command inside MULTI (`name`, its lower-case name, is known and
    /// its argument count right): `+QUEUED`, or an error that flags the
    /// transaction.
    pub(super) fn queue(&mut self, name: &str, args: &[&[u8]], sink: &mut Sink) -> Flow {
        if refused_in_transaction(name) {
            self.multi.dirty = true;
            self.error(
                sink,
                &format!(
                    "ERR '{}' cannot run inside MULTI on ramstore (a transaction reads and \
                     writes single keys)",
                    name
                ),
            );
            return Flow::Continue;
        }
        let bytes: usize = args.iter().map(|a| a.len()).sum();
        let Some(queue) = self.multi.queue.as_mut() else {
            // Only called inside MULTI; answer as if it had run outside.
            self.error(sink, "ERR not inside MULTI");
            return Flow::Continue;
        };
        if queue.len() >= MAX_QUEUED_COMMANDS || self.multi.queued_bytes + bytes > MAX_QUEUED_BYTES
        {
            self.multi.dirty = true;
            self.error(
                sink,
                &format!(
                    "ERR a transaction holds at most {MAX_QUEUED_COMMANDS} commands and \
                     {MAX_QUEUED_BYTES} bytes of arguments"
                ),
            );
            return Flow::Continue;
        }
        queue.push(args.iter().map(|a| a.to_vec()).collect());
        self.multi.queued_bytes += bytes;
        sink.reply(self.version, |e| e.simple("QUEUED"));
        Flow::Continue
    }

    pub(super) fn multi(&mut self, sink: &mut Sink) {
        if self.multi.active() {
            return self.error(sink, "ERR MULTI calls can not be nested");
        }
        self.multi.queue = Some(Vec::new());
        sink.reply(self.version, |e| e.ok());
    }

    pub(super) fn discard(&mut self, sink: &mut Sink) {
        if !self.multi.active() {
            return self.error(sink, "ERR DISCARD without MULTI");
        }
        self.multi.reset();
        sink.reply(self.version, |e| e.ok());
    }

    pub(super) fn unwatch(&mut self, sink: &mut Sink) {
        self.multi.watched.clear();
        sink.reply(self.version, |e| e.ok());
    }

    /// WATCH: records each key's version now (0: absent).
    pub(super) async fn watch(&mut self, keys: &[&[u8]], sink: &mut Sink) {
        if self.multi.active() {
            return self.error(sink, "ERR WATCH inside MULTI is not allowed");
        }
        if self.multi.watched.len() + keys.len() > MAX_WATCHED_KEYS {
            return self.error(
                sink,
                &format!("ERR a connection watches at most {MAX_WATCHED_KEYS} keys"),
            );
        }
        let table = match self.table().await {
            Ok(t) => t,
            Err(e) => return self.store_error(sink, &e),
        };
        for key in keys {
            let read = self.shared.backend.read(table, key).await.resolve().await;
            match read {
                Ok(found) => self.multi.watched.push(Watched {
                    table,
                    key: key.to_vec(),
                    version: found.map_or(0, |(_, v)| v),
                }),
                Err(e) => return self.store_error(sink, &e),
            }
        }
        sink.reply(self.version, |e| e.ok());
    }

    /// EXEC: runs the queue as one transaction (see the module documentation).
    pub(super) async fn exec(&mut self, sink: &mut Sink) -> Flow {
        if !self.multi.active() {
            self.error(sink, "ERR EXEC without MULTI");
            return Flow::Continue;
        }
        let state = std::mem::take(&mut self.multi);
        if state.dirty {
            self.error(sink, EXECABORT);
            return Flow::Continue;
        }
        let queue = state.queue.unwrap_or_default();
        let client = self.shared.backend.client().clone();
        let options = client.options();
        let (db, table) = (self.db, self.table);
        let mut backoff_ms = EXEC_BACKOFF_INITIAL_MS;
        // Commands that do not touch the database answer into a sink of their
        // own, whose bytes become their slot of EXEC's reply.
        let mut own = sink.detached();
        for _ in 0..MAX_EXEC_ATTEMPTS {
            let mut tx = client.transaction();
            match watched_unchanged(&mut tx, &state.watched).await {
                Ok(true) => {}
                Ok(false) => {
                    sink.reply(self.version, |e| e.null_array());
                    return Flow::Continue;
                }
                Err(e) => {
                    self.store_error(sink, &StoreError::Client(e));
                    return Flow::Continue;
                }
            }
            let mut replies = Vec::new();
            let mut flow = Flow::Continue;
            for args in &queue {
                let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                match self.run_one(&mut tx, &argv, &mut own, &mut replies).await {
                    Ok(f) => {
                        if f == Flow::Close {
                            flow = Flow::Close;
                        }
                    }
                    Err(e) => {
                        self.error(sink, &exec_error(&e));
                        return Flow::Continue;
                    }
                }
            }
            match tx.commit().await {
                Ok(()) => {
                    sink.reply(self.version, |e| {
                        e.array(queue.len());
                        e.out.extend_from_slice(&replies);
                    });
                    return flow;
                }
                Err(ClientError::Aborted) => {
                    // Nothing applied: run the queue again from the same state.
                    (self.db, self.table) = (db, table);
                    let ms = options
                        .rng
                        .as_rand()
                        .gen_range(backoff_ms.div_ceil(2)..=backoff_ms);
                    backoff_ms = (backoff_ms * 2).min(EXEC_BACKOFF_MAX_MS);
                    options.clock.sleep(Duration::from_millis(ms)).await;
                }
                Err(e) => {
                    self.error(sink, &exec_error(&e));
                    return Flow::Continue;
                }
            }
        }
        self.error(
            sink,
            &format!(
                "TRYAGAIN the transaction was aborted by conflicting writes {MAX_EXEC_ATTEMPTS} \
                 times in a row; nothing was applied"
            ),
        );
        Flow::Continue
    }

    /// Runs one queued command inside `tx`, appending its reply to `replies`.
    /// `Err`: the whole EXEC fails.
    async fn run_one(
        &mut self,
        tx: &mut Transaction,
        args: &[&[u8]],
        own: &mut Sink,
        replies: &mut Vec<u8>,
    ) -> Result<Flow, ClientError> {
        let command = match super::parse(args) {
            Ok(c) => c,
            Err(e) => {
                Encoder::new(replies, self.version).error(&e.to_string());
                return Ok(Flow::Continue);
            }
        };
        match command {
            Command::Ping { message } => self.ping(message, own),
            Command::Echo { message } => own.reply(self.version, |e| e.bulk(message)),
            Command::Hello(hello) => self.hello(hello, own),
            Command::Auth { user, pass } => self.auth(user, pass, own),
            Command::Select { db } => self.select(db, own),
            Command::Client(sub) => self.client(sub, own),
            Command::Command(sub) => self.command(sub, own),
            Command::Config { patterns } => self.config(patterns, own),
            Command::Info { sections } => self.info(sections, own).await,
            // EXEC already forgot the watched keys.
            Command::Unwatch => own.reply(self.version, |e| e.ok()),
            Command::Quit => {
                own.reply(self.version, |e| e.ok());
                replies.extend_from_slice(&own.take_ready());
                return Ok(Flow::Close);
            }
            data => {
                let table = self.table().await.map_err(|e| match e {
                    StoreError::Client(c) => c,
                    other => ClientError::Internal(other.to_string()),
                })?;
                let mut e = Encoder::new(replies, self.version);
                return run_queued(tx, table, data, &mut e)
                    .await
                    .map(|()| Flow::Continue);
            }
        }
        replies.extend_from_slice(&own.take_ready());
        Ok(Flow::Continue)
    }
}

/// Reads every watched key inside `tx`: `false` if one's version is no longer
/// the one WATCH saw (EXEC then applies nothing). The reads make commit check
/// the versions too.
async fn watched_unchanged(tx: &mut Transaction, watched: &[Watched]) -> Result<bool, ClientError> {
    for w in watched {
        let (_, version) = tx.read_with_version(w.table, &w.key).await?;
        if version != w.version {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The error line of an EXEC that failed as a whole.
fn exec_error(e: &ClientError) -> String {
    match e {
        ClientError::TxTooLarge(what) => {
            format!("ERR the transaction is too large ({what}); nothing was applied")
        }
        other => StoreError::Client(other.clone()).resp_message(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{lookup, parse};
    use super::*;

    fn frame<'a>(words: &'a [&'a str]) -> Vec<&'a [u8]> {
        words.iter().map(|w| w.as_bytes()).collect()
    }

    #[test]
    fn parse_transaction_commands_and_their_arity() {
        assert_eq!(parse(&frame(&["multi"])), Ok(Command::Multi));
        assert_eq!(parse(&frame(&["EXEC"])), Ok(Command::Exec));
        assert_eq!(parse(&frame(&["Discard"])), Ok(Command::Discard));
        assert_eq!(parse(&frame(&["unwatch"])), Ok(Command::Unwatch));
        let watch = frame(&["WATCH", "a", "b"]);
        assert!(matches!(parse(&watch), Ok(Command::Watch { keys }) if keys.len() == 2));
        for bad in [
            &["WATCH"][..],
            &["MULTI", "x"],
            &["EXEC", "x"],
            &["DISCARD", "x"],
        ] {
            let err = lookup(&frame(bad)).expect_err("wrong arity");
            assert!(matches!(err, ParseError::WrongArity(_)), "{bad:?}: {err}");
        }
    }

    #[test]
    fn runs_inside_multi_is_redis_list() {
        let now: Vec<&str> = crate::cmd::COMMANDS
            .iter()
            .filter(|s| runs_inside_multi(s.name))
            .map(|s| s.name)
            .collect();
        assert_eq!(now, ["quit", "multi", "exec", "discard", "watch"]);
    }

    #[test]
    fn refused_in_transaction_only_table_walks_cas_and_expiry() {
        let refused: Vec<&str> = crate::cmd::COMMANDS
            .iter()
            .filter(|s| refused_in_transaction(s.name))
            .map(|s| s.name)
            .collect();
        assert_eq!(
            refused,
            [
                "setex",
                "psetex",
                "expire",
                "pexpire",
                "expireat",
                "pexpireat",
                "ttl",
                "pttl",
                "expiretime",
                "pexpiretime",
                "persist",
                "dbsize",
                "scan",
                "keys",
                "flushdb",
                "flushall",
                "rs.cas"
            ]
        );
    }

    #[test]
    fn flag_marks_only_an_open_transaction() {
        let mut state = MultiState::default();
        state.flag();
        assert!(!state.dirty, "outside MULTI nothing is flagged");
        state.queue = Some(Vec::new());
        state.flag();
        assert!(state.dirty && state.active());
        state.reset();
        assert!(!state.active() && !state.dirty);
    }
}

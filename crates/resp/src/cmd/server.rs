//! Server commands: COMMAND, CONFIG, INFO, DBSIZE, FLUSHDB.
//!
//! COMMAND reports the one command table ([`super::COMMANDS`]); COMMAND DOCS
//! answers an empty map (clients ask for hints; having none is allowed). CONFIG
//! is read-only (CONFIG GET of a few parameters clients and tools look for).
//! INFO has Redis's field names where one exists, plus `ramstore_*` fields
//! (memory split, refused writes). DBSIZE, FLUSHDB and INFO's keyspace walk the
//! whole table (Redis keeps a count; ramstore enumerates, O(objects)); FLUSHDB
//! removes key by key, a batch's removes replicated together, and its
//! SYNC/ASYNC option changes nothing.

use std::sync::atomic::Ordering;

use super::{
    eq, join, shown, Command, Connection, ParseError, Spec, COMMANDS, MAX_DATABASES,
    REDIS_COMPAT_VERSION,
};
use crate::backend::StoreError;
use crate::glob;
use crate::protocol::Encoder;
use crate::sink::Sink;

/// COMMAND's subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandSub<'a> {
    /// COMMAND: every command's row.
    All,
    Count,
    /// COMMAND INFO name …: each row, or null for an unknown name.
    Info(&'a [&'a [u8]]),
    Docs,
}

pub(super) fn parse_command<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let sub = match rest {
        [] => CommandSub::All,
        [sub, ..] if eq(sub, "count") => CommandSub::Count,
        [sub, names @ ..] if eq(sub, "info") => CommandSub::Info(names),
        [sub, ..] if eq(sub, "docs") => CommandSub::Docs,
        [sub, ..] => return Err(ParseError::CommandSubcommand(shown(sub))),
    };
    Ok(Command::Command(sub))
}

pub(super) fn parse_config<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [sub, patterns @ ..] if eq(sub, "get") && !patterns.is_empty() => {
            Ok(Command::Config { patterns })
        }
        _ => Err(ParseError::ConfigNotGet),
    }
}

pub(super) fn parse_info<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Info { sections: rest })
}

pub(super) fn parse_dbsize<'a>(_rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::DbSize)
}

pub(super) fn parse_flushdb<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [] => Ok(Command::FlushDb),
        [mode] if eq(mode, "sync") || eq(mode, "async") => Ok(Command::FlushDb),
        _ => Err(ParseError::Syntax),
    }
}

pub(super) fn parse_flushall<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    // The same options as FLUSHDB (ASYNC or SYNC: both flush before answering).
    parse_flushdb(rest).map(|_| Command::FlushAll)
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

/// The value of `key` in the server statistics' `key=value` lines.
fn stat<'s>(stats: &'s str, key: &str) -> Option<&'s str> {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

impl Connection {
    pub(super) fn command(&self, sub: CommandSub<'_>, sink: &mut Sink) {
        match sub {
            CommandSub::All => sink.reply(self.version, |e| {
                e.array(COMMANDS.len());
                for s in COMMANDS {
                    command_info(e, s);
                }
            }),
            CommandSub::Count => sink.reply(self.version, |e| e.integer(COMMANDS.len() as i64)),
            CommandSub::Info(names) => sink.reply(self.version, |e| {
                e.array(names.len());
                for name in names {
                    match super::find_spec(name) {
                        Some(s) => command_info(e, s),
                        None => e.null_array(),
                    }
                }
            }),
            CommandSub::Docs => sink.reply(self.version, |e| e.map(0)),
        }
    }

    pub(super) fn config(&self, patterns: &[&[u8]], sink: &mut Sink) {
        let c = &self.shared.config;
        let params: [(&str, String); 6] = [
            ("databases", MAX_DATABASES.to_string()),
            ("port", c.port.to_string()),
            ("maxmemory", c.memory_bytes.to_string()),
            ("appendonly", "no".into()),
            ("save", String::new()),
            ("timeout", "0".into()),
        ];
        let hits: Vec<&(&str, String)> = params
            .iter()
            .filter(|p| {
                patterns
                    .iter()
                    .any(|pat| glob::matches(&pat.to_ascii_lowercase(), p.0.as_bytes()))
            })
            .collect();
        sink.reply(self.version, |e| {
            e.map(hits.len());
            for (k, v) in &hits {
                e.bulk(k.as_bytes());
                e.bulk(v.as_bytes());
            }
        });
    }

    pub(super) async fn info(&self, sections: &[&[u8]], sink: &mut Sink) {
        let all = sections.is_empty()
            || sections
                .iter()
                .any(|s| eq(s, "all") || eq(s, "default") || eq(s, "everything"));
        let wants = |name: &str| all || sections.iter().any(|s| eq(s, name));
        let mut text = String::new();
        if wants("server") {
            self.info_server(&mut text);
        }
        if wants("clients") {
            self.info_clients(&mut text);
        }
        if wants("memory") {
            let stats = self.shared.backend.local_stats().await;
            info_memory(&mut text, &stats);
        }
        if wants("stats") {
            self.info_stats(&mut text);
        }
        if wants("keyspace") {
            if let Err(e) = self.info_keyspace(&mut text).await {
                return self.store_error(sink, &e);
            }
        }
        sink.reply(self.version, |e| e.text(&text));
    }

    fn info_server(&self, text: &mut String) {
        let shared = &self.shared;
        text.push_str(&format!(
            "# Server\r\nredis_version:{REDIS_COMPAT_VERSION}\r\nramstore_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            shared.config.port,
            shared.config.clock.elapsed(shared.started).as_secs()
        ));
    }

    fn info_clients(&self, text: &mut String) {
        text.push_str(&format!(
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
            self.shared.stats.connected.load(Ordering::Relaxed),
            crate::shared::MAX_CONNECTIONS
        ));
    }

    fn info_stats(&self, text: &mut String) {
        let s = &self.shared.stats;
        text.push_str(&format!(
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\nprotocol_errors:{}\r\n\r\n",
            s.connections_received.load(Ordering::Relaxed),
            s.commands_processed.load(Ordering::Relaxed),
            s.rejected_connections.load(Ordering::Relaxed),
            s.protocol_errors.load(Ordering::Relaxed),
        ));
    }

    async fn info_keyspace(&self, text: &mut String) -> Result<(), StoreError> {
        text.push_str("# Keyspace\r\n");
        // Counting keys enumerates each database (see DBSIZE's cost).
        for (db, table) in self.shared.backend.known_databases() {
            let n = self.walk(table, |_| {}).await?;
            if n > 0 {
                text.push_str(&format!("db{db}:keys={n},expires=0,avg_ttl=0\r\n"));
            }
        }
        Ok(())
    }

    pub(super) async fn dbsize(&self, table: u64, sink: &mut Sink) {
        match self.walk(table, |_| {}).await {
            Ok(n) => sink.reply(self.version, |e| e.integer(n as i64)),
            Err(e) => self.store_error(sink, &e),
        }
    }

    pub(super) async fn flushdb(&self, table: u64, sink: &mut Sink) {
        match self.flush(table).await {
            Ok(()) => sink.reply(self.version, |e| e.ok()),
            Err(e) => self.store_error(sink, &e),
        }
    }

    /// FLUSHALL: every database's table emptied (`db0` … `db15`); a database
    /// whose table was never created has nothing to flush.
    pub(super) async fn flushall(&self, sink: &mut Sink) {
        let client = self.shared.backend.client();
        for db in 0..MAX_DATABASES {
            let table = match client.get_table_id(&format!("db{db}")).await {
                Ok(table) => table,
                Err(ramstore_client::ClientError::TableDoesntExist) => continue,
                Err(e) => return self.store_error(sink, &StoreError::Client(e)),
            };
            if let Err(e) = self.flush(table).await {
                return self.store_error(sink, &e);
            }
        }
        sink.reply(self.version, |e| e.ok());
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
}

/// INFO's memory section from the local master's statistics.
fn info_memory(text: &mut String, stats: &str) {
    let get = |k: &str| stat(stats, k).unwrap_or("0");
    let bytes = |k: &str| get(k).parse::<u64>().unwrap_or(0);
    text.push_str(&format!(
        "# Memory\r\nused_memory:{}\r\nramstore_live_object_bytes:{}\r\nramstore_tombstone_bytes:{}\r\nmaxmemory:{}\r\nramstore_objects:{}\r\nramstore_durability:{}\r\n",
        bytes("live_object_bytes") + bytes("tombstone_bytes"),
        get("live_object_bytes"),
        get("tombstone_bytes"),
        get("memory_bytes"),
        get("objects"),
        get("durability"),
    ));
    // Where the server's resident memory is (issue 17): `used_memory_rss` as
    // Redis has it (the process's resident set), and ramstore's split of it; a
    // part the server cannot measure (not Linux), or all of them without a local
    // server, is left out.
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
        if let Some(bytes) = stat(stats, key).and_then(|v| v.parse::<u64>().ok()) {
            text.push_str(&format!("{field}:{bytes}\r\n"));
        }
    }
    // Whether the log refuses writes for lack of memory (writes get -OOM once it
    // has for longer than the patience), for how long, and the NO_SPACE answers
    // so far.
    text.push_str(&format!(
        "ramstore_refusing_writes:{}\r\nramstore_refusing_writes_ms:{}\r\nramstore_no_space_answers:{}\r\n\r\n",
        get("refusing_writes"),
        get("refusing_writes_ms"),
        get("no_space_answers"),
    ));
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn parsed(words: &[&str]) -> Result<String, String> {
        let frame: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        parse(&frame)
            .map(|c| format!("{c:?}"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parse_server_commands_good_arguments() {
        assert_eq!(parsed(&["COMMAND"]), Ok("Command(All)".into()));
        assert_eq!(parsed(&["command", "Count"]), Ok("Command(Count)".into()));
        assert_eq!(
            parsed(&["command", "info", "get"]),
            Ok("Command(Info([[103, 101, 116]]))".into())
        );
        assert_eq!(
            parsed(&["command", "docs", "x"]),
            Ok("Command(Docs)".into())
        );
        assert_eq!(
            parsed(&["config", "GET", "port"]),
            Ok("Config { patterns: [[112, 111, 114, 116]] }".into())
        );
        assert_eq!(parsed(&["info"]), Ok("Info { sections: [] }".into()));
        assert_eq!(parsed(&["dbsize"]), Ok("DbSize".into()));
        assert_eq!(parsed(&["flushdb"]), Ok("FlushDb".into()));
        assert_eq!(parsed(&["flushdb", "ASYNC"]), Ok("FlushDb".into()));
    }

    #[test]
    fn parse_server_commands_wrong_arity() {
        for words in [&["dbsize", "x"][..], &["config"]] {
            let name = words[0];
            assert_eq!(
                parsed(words),
                Err(format!(
                    "ERR wrong number of arguments for '{name}' command"
                ))
            );
        }
    }

    #[test]
    fn parse_server_commands_bad_options() {
        assert_eq!(
            parsed(&["command", "list"]),
            Err("ERR unknown subcommand 'list' (ramstore supports COMMAND, COMMAND COUNT, INFO, DOCS)".into())
        );
        let config_error =
            Err("ERR ramstore supports only CONFIG GET parameter [parameter ...]".to_string());
        assert_eq!(parsed(&["config", "set", "port", "1"]), config_error);
        assert_eq!(parsed(&["config", "get"]), config_error);
        assert_eq!(parsed(&["flushdb", "now"]), Err("ERR syntax error".into()));
        assert_eq!(
            parsed(&["flushdb", "sync", "async"]),
            Err("ERR syntax error".into())
        );
    }

    #[test]
    fn info_memory_sums_used_memory_and_skips_unmeasured_parts() {
        let mut text = String::new();
        info_memory(
            &mut text,
            "live_object_bytes=100\ntombstone_bytes=20\nresident_bytes=4096\n",
        );
        assert!(text.contains("used_memory:120\r\n"), "{text}");
        assert!(text.contains("used_memory_rss:4096\r\n"), "{text}");
        assert!(!text.contains("ramstore_log_resident_bytes"), "{text}");
        assert!(text.contains("ramstore_objects:0\r\n"), "{text}");
    }
}

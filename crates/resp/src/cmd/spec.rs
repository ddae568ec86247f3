//! The command table: every command's name, arity, flags and key positions, as
//! Redis's `COMMAND` reports them, and the function that parses its arguments.
//!
//! One table serves three readers: [`super::lookup`] (is the name known, is the
//! argument count right), `COMMAND` (`super::server`), and the pipeline prefetch
//! ([`key_first`]). Each row names its family's parse function, so a command is
//! added in one place and cannot be known to one reader and missing from another.

use super::{
    bitpos, bits, connection, counters, expiry, keys, lcs, multi, server, strings, Command,
    ParseError,
};

/// Parses a command's arguments (after its name), already checked against the
/// arity, into a typed [`Command`] that borrows them.
pub type ParseFn = for<'a> fn(&'a [&'a [u8]]) -> Result<Command<'a>, ParseError>;

/// A command's name, arity (Redis convention: n = exactly n arguments counting the
/// name, −n = at least n), flags and key positions, for arity checks and COMMAND.
#[derive(Debug)]
pub struct Spec {
    /// The lower-case name, as COMMAND reports it.
    pub name: &'static str,
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i64,
    pub last_key: i64,
    pub step: i64,
    /// Turns the arguments into the typed command.
    pub parse: ParseFn,
}

impl Spec {
    /// Whether `argc` arguments (counting the name) fit the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// Whether the command may run before the client authenticated (Redis's
    /// `noauth` flag: HELLO, AUTH, QUIT).
    pub fn allowed_before_auth(&self) -> bool {
        self.flags.contains(&"noauth")
    }
}

const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
    parse: ParseFn,
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        parse,
    }
}

const NOKEYS: (i64, i64, i64) = (0, 0, 0);
const ONEKEY: (i64, i64, i64) = (1, 1, 1);
const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom"];
const A: &[&str] = &["fast", "noauth"];
const WF: &[&str] = &["write", "fast"];

/// Every command ramstore answers, in the order COMMAND lists them.
pub static COMMANDS: &[Spec] = &[
    spec("ping", -1, &["fast"], NOKEYS, connection::parse_ping),
    spec("echo", 2, &["fast"], NOKEYS, connection::parse_echo),
    spec("hello", -1, A, NOKEYS, connection::parse_hello),
    spec("auth", -2, A, NOKEYS, connection::parse_auth),
    spec("select", 2, &["fast"], NOKEYS, connection::parse_select),
    spec("get", 2, R, ONEKEY, strings::parse_get),
    spec("set", -3, W, ONEKEY, strings::parse_set),
    spec("setnx", 3, W, ONEKEY, strings::parse_setnx),
    spec("getset", 3, W, ONEKEY, strings::parse_getset),
    spec("mget", -2, R, (1, -1, 1), strings::parse_mget),
    spec("mset", -3, W, (1, -1, 2), strings::parse_mset),
    spec("del", -2, &["write"], (1, -1, 1), keys::parse_del),
    spec(
        "unlink",
        -2,
        &["write", "fast"],
        (1, -1, 1),
        keys::parse_unlink,
    ),
    spec("exists", -2, R, (1, -1, 1), keys::parse_exists),
    spec("touch", -2, R, (1, -1, 1), keys::parse_touch),
    spec("type", 2, R, ONEKEY, keys::parse_type),
    spec("rename", 3, &["write"], (1, 2, 1), keys::parse_rename),
    spec("renamenx", 3, WF, (1, 2, 1), keys::parse_renamenx),
    spec("copy", -3, &["write"], (1, 2, 1), keys::parse_copy),
    spec("strlen", 2, R, ONEKEY, strings::parse_strlen),
    spec(
        "getrange",
        4,
        &["readonly"],
        ONEKEY,
        strings::parse_getrange,
    ),
    spec("substr", 4, &["readonly"], ONEKEY, strings::parse_substr),
    spec(
        "getdel",
        2,
        &["write", "fast"],
        ONEKEY,
        strings::parse_getdel,
    ),
    spec("getex", -2, WF, ONEKEY, expiry::parse_getex),
    spec("setex", 4, W, ONEKEY, expiry::parse_setex),
    spec("psetex", 4, W, ONEKEY, expiry::parse_psetex),
    spec("expire", -3, WF, ONEKEY, expiry::parse_expire),
    spec("pexpire", -3, WF, ONEKEY, expiry::parse_pexpire),
    spec("expireat", -3, WF, ONEKEY, expiry::parse_expireat),
    spec("pexpireat", -3, WF, ONEKEY, expiry::parse_pexpireat),
    spec("ttl", 2, R, ONEKEY, expiry::parse_ttl),
    spec("pttl", 2, R, ONEKEY, expiry::parse_pttl),
    spec("expiretime", 2, R, ONEKEY, expiry::parse_expiretime),
    spec("pexpiretime", 2, R, ONEKEY, expiry::parse_pexpiretime),
    spec("persist", 2, WF, ONEKEY, expiry::parse_persist),
    spec("setrange", 4, W, ONEKEY, strings::parse_setrange),
    spec("msetnx", -3, W, (1, -1, 2), strings::parse_msetnx),
    spec("getbit", 3, R, ONEKEY, bits::parse_getbit),
    spec("setbit", 4, W, ONEKEY, bits::parse_setbit),
    spec("bitcount", -2, &["readonly"], ONEKEY, bits::parse_bitcount),
    spec("bitpos", -3, &["readonly"], ONEKEY, bitpos::parse_bitpos),
    spec("lcs", -3, &["readonly"], (1, 2, 1), lcs::parse_lcs),
    spec("append", 3, W, ONEKEY, strings::parse_append),
    spec("incr", 2, W, ONEKEY, counters::parse_incr),
    spec("incrby", 3, W, ONEKEY, counters::parse_incrby),
    spec("decr", 2, W, ONEKEY, counters::parse_decr),
    spec("decrby", 3, W, ONEKEY, counters::parse_decrby),
    spec("incrbyfloat", 3, W, ONEKEY, counters::parse_incrbyfloat),
    spec("dbsize", 1, &["readonly"], NOKEYS, server::parse_dbsize),
    spec("scan", -2, &["readonly"], NOKEYS, keys::parse_scan),
    spec("keys", 2, &["readonly"], NOKEYS, keys::parse_keys),
    spec("flushdb", -1, &["write"], NOKEYS, server::parse_flushdb),
    spec("flushall", -1, &["write"], NOKEYS, server::parse_flushall),
    spec("info", -1, &["loading"], NOKEYS, server::parse_info),
    spec("client", -2, &["loading"], NOKEYS, connection::parse_client),
    spec("command", -1, &["loading"], NOKEYS, server::parse_command),
    spec("config", -2, &["loading"], NOKEYS, server::parse_config),
    spec("quit", -1, A, NOKEYS, connection::parse_quit),
    spec("rs.getv", 2, R, ONEKEY, strings::parse_getv),
    spec("rs.cas", 4, W, ONEKEY, strings::parse_cas),
    spec("multi", 1, &["fast"], NOKEYS, multi::parse_multi),
    spec("exec", 1, &["skip_slowlog"], NOKEYS, multi::parse_exec),
    spec("discard", 1, &["fast"], NOKEYS, multi::parse_discard),
    spec("watch", -2, &["fast"], (1, -1, 1), multi::parse_watch),
    spec("unwatch", 1, &["fast"], NOKEYS, multi::parse_unwatch),
];

/// The row of the command named `name` (any case), if ramstore has it.
pub fn find_spec(name: &[u8]) -> Option<&'static Spec> {
    COMMANDS
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Whether the command named `name` takes a key as its first argument (GET, SET,
/// MGET, …): the one a pipeline's later commands prefetch.
pub fn key_first(name: &[u8]) -> bool {
    find_spec(name).is_some_and(|s| s.first_key == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_first_for_key_commands_only() {
        for name in [&b"GET"[..], b"set", b"MGET", b"incrby", b"rs.getv"] {
            assert!(key_first(name), "{}", String::from_utf8_lossy(name));
        }
        for name in [&b"PING"[..], b"echo", b"SELECT", b"scan", b"nosuch"] {
            assert!(!key_first(name), "{}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn arity_ok_exact_and_minimum() {
        let get = find_spec(b"GET").expect("get");
        assert!(get.arity_ok(2));
        assert!(!get.arity_ok(1));
        assert!(!get.arity_ok(3));
        let mget = find_spec(b"mget").expect("mget");
        assert!(!mget.arity_ok(1));
        assert!(mget.arity_ok(2));
        assert!(mget.arity_ok(9));
        assert!(find_spec(b"nosuch").is_none());
        assert!(find_spec(b"Rs.GetV").is_some());
    }

    #[test]
    fn commands_names_unique_and_lower_case() {
        for (i, s) in COMMANDS.iter().enumerate() {
            assert_eq!(s.name, s.name.to_ascii_lowercase());
            assert!(
                COMMANDS[..i].iter().all(|t| t.name != s.name),
                "{} twice",
                s.name
            );
        }
    }

    #[test]
    fn allowed_before_auth_hello_auth_quit_only() {
        let allowed: Vec<&str> = COMMANDS
            .iter()
            .filter(|s| s.allowed_before_auth())
            .map(|s| s.name)
            .collect();
        assert_eq!(allowed, ["hello", "auth", "quit"]);
    }
}

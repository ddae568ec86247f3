//! The Redis protocol front end end to end: `ramstore dev --resp-port P` driven by
//! the real `redis-cli` (Debian's redis-tools) for every supported command, by raw
//! sockets for pipelining and malformed input, by the Python `redis` client library
//! (tests/python/test_resp.py), and across servers (forwarded keys, a crashed
//! master's keys served again after recovery).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, run_cli, Cluster, Dev};
use ramstore_client::{BlockingClient, ClientOptions};

/// `ramstore dev` with the Redis protocol on its own free port.
struct RespDev {
    dev: Dev,
    resp_port: u16,
    _dir: tempfile::TempDir,
}

impl RespDev {
    fn start(servers: u16, extra: &[&str]) -> RespDev {
        let dir = tempfile::tempdir().expect("temp dir");
        let servers_arg = servers.to_string();
        for _ in 0..5 {
            let resp_port = free_port();
            let port_arg = resp_port.to_string();
            let mut args = vec![
                "--servers",
                &servers_arg,
                "--memory",
                "64MiB",
                "--backup-frames",
                "8",
                "--resp-port",
                &port_arg,
            ];
            args.extend_from_slice(extra);
            let dev = Dev::start(dir.path(), servers, &args);
            if dev.banner.iter().any(|l| l.contains("Redis protocol")) {
                return RespDev {
                    dev,
                    resp_port,
                    _dir: dir,
                };
            }
        }
        panic!("ramstore dev --resp-port did not start");
    }

    /// Runs `redis-cli -p PORT --no-raw ARGS` (typed output: `"v"`, `(integer) 1`,
    /// `(nil)`, `(error) …`) and returns its stdout, trimmed.
    fn cli(&self, args: &[&str]) -> String {
        self.cli_stdin(args, "")
    }

    /// Like [`RespDev::cli`], with `stdin` as commands sent on the same connection.
    fn cli_stdin(&self, args: &[&str], stdin: &str) -> String {
        redis_cli(self.resp_port, args, stdin)
    }

    /// The "served by storage server N (ADDR)" address from the banner.
    fn resp_server_addr(&self) -> String {
        let line = self
            .dev
            .banner
            .iter()
            .find(|l| l.starts_with("Redis protocol"))
            .expect("Redis protocol banner line");
        let open = line.find('(').expect("( in banner");
        let rest = &line[open + 1..];
        let rest = &rest[rest.find('(').expect("second (") + 1..];
        rest[..rest.find(')').expect(")")].to_string()
    }

    fn client(&self) -> BlockingClient {
        BlockingClient::connect(ClientOptions {
            operation_deadline: Duration::from_secs(30),
            ..ClientOptions::new(&self.dev.addr)
        })
        .expect("client connects")
    }
}

fn redis_cli(port: u16, args: &[&str], stdin: &str) -> String {
    let port = port.to_string();
    let mut child = Command::new("redis-cli")
        .args(["-p", &port, "--no-raw"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run redis-cli (Debian: apt-get install redis-tools): {e}")
        });
    let mut input = child.stdin.take().expect("stdin piped");
    input.write_all(stdin.as_bytes()).expect("write stdin");
    drop(input);
    let out = child.wait_with_output().expect("redis-cli output");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("Could not connect"),
        "redis-cli {args:?}: {err}"
    );
    text
}

#[test]
fn redis_cli_every_command() {
    let d = RespDev::start(1, &["--replicas", "0"]);
    // Connection commands.
    assert_eq!(d.cli(&["PING"]), "PONG");
    assert_eq!(d.cli(&["PING", "hi"]), "\"hi\"");
    assert_eq!(d.cli(&["ECHO", "hello world"]), "\"hello world\"");
    assert_eq!(
        d.cli(&["AUTH", "anything"]),
        "(error) ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
    );
    assert_eq!(d.cli(&["AUTH", "default", "anything"]), "OK");
    assert_eq!(d.cli(&["QUIT"]), "OK");
    // SET and its options.
    assert_eq!(d.cli(&["SET", "k", "v1"]), "OK");
    assert_eq!(d.cli(&["GET", "k"]), "\"v1\"");
    assert_eq!(d.cli(&["GET", "missing"]), "(nil)");
    assert_eq!(d.cli(&["SET", "k", "x", "NX"]), "(nil)");
    assert_eq!(d.cli(&["SET", "k2", "x", "NX"]), "OK");
    assert_eq!(d.cli(&["SET", "missing", "x", "XX"]), "(nil)");
    assert_eq!(d.cli(&["GET", "missing"]), "(nil)");
    assert_eq!(d.cli(&["SET", "k", "v2", "XX"]), "OK");
    assert_eq!(d.cli(&["SET", "k", "v3", "GET"]), "\"v2\"");
    assert_eq!(d.cli(&["SET", "fresh", "f", "GET"]), "(nil)");
    assert_eq!(d.cli(&["GET", "fresh"]), "\"f\"");
    assert_eq!(d.cli(&["SET", "k", "y", "NX", "GET"]), "\"v3\"");
    assert_eq!(d.cli(&["GET", "k"]), "\"v3\"");
    assert_eq!(
        d.cli(&["SET", "k", "y", "NX", "XX"]),
        "(error) ERR syntax error"
    );
    assert_eq!(d.cli(&["SET", "k", "y", "EX", "100"]), "OK");
    assert_eq!(d.cli(&["TTL", "k"]), "(integer) 100");
    assert_eq!(d.cli(&["SET", "k", "v3", "KEEPTTL"]), "OK");
    assert_eq!(d.cli(&["TTL", "k"]), "(integer) 100");
    assert_eq!(d.cli(&["SET", "k", "v3"]), "OK");
    assert_eq!(d.cli(&["TTL", "k"]), "(integer) -1");
    assert_eq!(d.cli(&["GET", "k"]), "\"v3\"");
    assert_eq!(d.cli(&["SETNX", "k", "z"]), "(integer) 0");
    assert_eq!(d.cli(&["SETNX", "nx", "z"]), "(integer) 1");
    assert_eq!(d.cli(&["GETSET", "k", "v4"]), "\"v3\"");
    assert_eq!(d.cli(&["GETSET", "gs", "first"]), "(nil)");
    assert_eq!(d.cli(&["GET", "k"]), "\"v4\"");
    // Multi-key commands.
    assert_eq!(d.cli(&["MSET", "a", "1", "b", "2"]), "OK");
    assert_eq!(
        d.cli(&["MSET", "a", "1", "b"]),
        "(error) ERR wrong number of arguments for 'mset' command"
    );
    assert_eq!(
        d.cli(&["MGET", "a", "b", "nope"]),
        "1) \"1\"\n2) \"2\"\n3) (nil)"
    );
    assert_eq!(d.cli(&["EXISTS", "a", "a", "nope"]), "(integer) 2");
    assert_eq!(d.cli(&["DEL", "a", "nope"]), "(integer) 1");
    assert_eq!(d.cli(&["UNLINK", "b"]), "(integer) 1");
    assert_eq!(d.cli(&["EXISTS", "a", "b"]), "(integer) 0");
    // Strings and counters.
    assert_eq!(d.cli(&["STRLEN", "k"]), "(integer) 2");
    assert_eq!(d.cli(&["STRLEN", "nope"]), "(integer) 0");
    assert_eq!(d.cli(&["APPEND", "k", "xyz"]), "(integer) 5");
    assert_eq!(d.cli(&["APPEND", "ap", "new"]), "(integer) 3");
    assert_eq!(d.cli(&["GET", "k"]), "\"v4xyz\"");
    // GETRANGE / SUBSTR (Redis's documented examples), GETDEL, TYPE, TOUCH.
    assert_eq!(d.cli(&["SET", "s", "This is a string"]), "OK");
    assert_eq!(d.cli(&["GETRANGE", "s", "0", "3"]), "\"This\"");
    assert_eq!(d.cli(&["GETRANGE", "s", "-3", "-1"]), "\"ing\"");
    assert_eq!(d.cli(&["GETRANGE", "s", "0", "-1"]), "\"This is a string\"");
    assert_eq!(d.cli(&["SUBSTR", "s", "10", "100"]), "\"string\"");
    assert_eq!(d.cli(&["GETRANGE", "s", "5", "2"]), "\"\"");
    assert_eq!(d.cli(&["GETRANGE", "nope", "0", "-1"]), "\"\"");
    assert_eq!(
        d.cli(&["GETRANGE", "s", "a", "1"]),
        "(error) ERR value is not an integer or out of range"
    );
    assert_eq!(d.cli(&["TYPE", "s"]), "string");
    assert_eq!(d.cli(&["TYPE", "nope"]), "none");
    assert_eq!(d.cli(&["TOUCH", "s", "s", "nope"]), "(integer) 2");
    assert_eq!(d.cli(&["GETDEL", "s"]), "\"This is a string\"");
    assert_eq!(d.cli(&["GETDEL", "s"]), "(nil)");
    assert_eq!(d.cli(&["EXISTS", "s"]), "(integer) 0");
    assert_eq!(
        d.cli_stdin(
            &[],
            "SET t v\nMULTI\nGETRANGE t 0 0\nGETDEL t\nTYPE t\nEXEC\n"
        ),
        "OK\nOK\nQUEUED\nQUEUED\nQUEUED\n1) \"v\"\n2) \"v\"\n3) none"
    );
    // SETRANGE, GETEX, MSETNX, GETBIT / SETBIT, RENAME / RENAMENX, COPY.
    assert_eq!(d.cli(&["SET", "hw", "Hello World"]), "OK");
    assert_eq!(d.cli(&["SETRANGE", "hw", "6", "Redis"]), "(integer) 11");
    assert_eq!(d.cli(&["GET", "hw"]), "\"Hello Redis\"");
    assert_eq!(d.cli(&["SETRANGE", "pad", "3", "x"]), "(integer) 4");
    assert_eq!(d.cli(&["GET", "pad"]), "\"\\x00\\x00\\x00x\"");
    assert_eq!(d.cli(&["SETRANGE", "nokey", "5", ""]), "(integer) 0");
    assert_eq!(d.cli(&["EXISTS", "nokey"]), "(integer) 0");
    assert_eq!(
        d.cli(&["SETRANGE", "hw", "-1", "x"]),
        "(error) ERR offset is out of range"
    );
    assert_eq!(d.cli(&["GETEX", "hw"]), "\"Hello Redis\"");
    assert_eq!(d.cli(&["GETEX", "hw", "PERSIST"]), "\"Hello Redis\"");
    assert_eq!(d.cli(&["GETEX", "hw", "BOGUS"]), "(error) ERR syntax error");
    assert_eq!(d.cli(&["GETEX", "hw", "EX", "100"]), "\"Hello Redis\"");
    assert_eq!(d.cli(&["TTL", "hw"]), "(integer) 100");
    assert_eq!(d.cli(&["GETEX", "hw", "PERSIST"]), "\"Hello Redis\"");
    assert_eq!(d.cli(&["TTL", "hw"]), "(integer) -1");
    assert_eq!(d.cli(&["MSETNX", "n1", "a", "n2", "b"]), "(integer) 1");
    assert_eq!(d.cli(&["MSETNX", "n2", "x", "n3", "y"]), "(integer) 0");
    assert_eq!(d.cli(&["EXISTS", "n3"]), "(integer) 0");
    assert_eq!(d.cli(&["GET", "n2"]), "\"b\"");
    assert_eq!(d.cli(&["SETBIT", "bits", "7", "1"]), "(integer) 0");
    assert_eq!(d.cli(&["SETBIT", "bits", "7", "0"]), "(integer) 1");
    assert_eq!(d.cli(&["SETBIT", "bits", "1", "1"]), "(integer) 0");
    assert_eq!(d.cli(&["GETBIT", "bits", "1"]), "(integer) 1");
    assert_eq!(d.cli(&["GETBIT", "bits", "100"]), "(integer) 0");
    assert_eq!(d.cli(&["GET", "bits"]), "\"@\"");
    assert_eq!(d.cli(&["BITCOUNT", "bits"]), "(integer) 1");
    assert_eq!(d.cli(&["BITCOUNT", "bits", "0", "0", "BIT"]), "(integer) 0");
    assert_eq!(d.cli(&["BITCOUNT", "bits", "1", "1", "BIT"]), "(integer) 1");
    assert_eq!(d.cli(&["BITCOUNT", "nope", "x", "y", "z"]), "(integer) 0");
    assert_eq!(
        d.cli(&["BITCOUNT", "bits", "0"]),
        "(error) ERR syntax error"
    );
    assert_eq!(
        d.cli(&["SETBIT", "bits", "1", "2"]),
        "(error) ERR bit is not an integer or out of range"
    );
    assert_eq!(
        d.cli(&["GETBIT", "bits", "-1"]),
        "(error) ERR bit offset is not an integer or out of range"
    );
    assert_eq!(d.cli(&["RENAME", "n1", "r1"]), "OK");
    assert_eq!(d.cli(&["GET", "r1"]), "\"a\"");
    assert_eq!(d.cli(&["EXISTS", "n1"]), "(integer) 0");
    assert_eq!(d.cli(&["RENAME", "n1", "r1"]), "(error) ERR no such key");
    assert_eq!(d.cli(&["RENAME", "r1", "r1"]), "OK");
    assert_eq!(d.cli(&["RENAMENX", "r1", "n2"]), "(integer) 0");
    assert_eq!(d.cli(&["RENAMENX", "r1", "r2"]), "(integer) 1");
    assert_eq!(d.cli(&["COPY", "r2", "c2"]), "(integer) 1");
    assert_eq!(d.cli(&["COPY", "r2", "n2"]), "(integer) 0");
    assert_eq!(d.cli(&["COPY", "r2", "n2", "REPLACE"]), "(integer) 1");
    assert_eq!(
        d.cli(&["MGET", "r2", "c2", "n2"]),
        "1) \"a\"\n2) \"a\"\n3) \"a\""
    );
    assert_eq!(d.cli(&["COPY", "gone", "c3"]), "(integer) 0");
    assert_eq!(
        d.cli(&["COPY", "r2", "r2"]),
        "(error) ERR source and destination objects are the same"
    );
    assert_eq!(
        d.cli(&["COPY", "r2", "c4", "NOPE"]),
        "(error) ERR syntax error"
    );
    assert_eq!(
        d.cli_stdin(
            &[],
            "MULTI\nRENAME r2 r3\nSETRANGE r3 1 bc\nSETBIT r3 7 0\nGET r3\nEXEC\n"
        ),
        "OK\nQUEUED\nQUEUED\nQUEUED\nQUEUED\n1) OK\n2) (integer) 3\n3) (integer) 1\n4) \"`bc\""
    );
    assert_eq!(
        d.cli(&["DEL", "hw", "pad", "n2", "bits", "c2", "r3"]),
        "(integer) 6"
    );
    assert_eq!(d.cli(&["INCR", "c"]), "(integer) 1");
    assert_eq!(d.cli(&["INCRBY", "c", "10"]), "(integer) 11");
    assert_eq!(d.cli(&["DECR", "c"]), "(integer) 10");
    assert_eq!(d.cli(&["DECRBY", "c", "3"]), "(integer) 7");
    assert_eq!(d.cli(&["GET", "c"]), "\"7\"");
    assert_eq!(d.cli(&["INCRBYFLOAT", "f", "1.5"]), "\"1.5\"");
    assert_eq!(d.cli(&["INCRBYFLOAT", "f", "2"]), "\"3.5\"");
    // Redis's long double, not an f64 (issue 24): 0.1 three times is 0.3.
    for expected in ["0.1", "0.2", "0.3"] {
        assert_eq!(
            d.cli(&["INCRBYFLOAT", "tenths", "0.1"]),
            format!("\"{expected}\"")
        );
    }
    assert_eq!(
        d.cli(&["INCRBYFLOAT", "tenths", "inf"]),
        "(error) ERR increment would produce NaN or Infinity"
    );
    assert_eq!(
        d.cli(&["INCR", "k"]),
        "(error) ERR value is not an integer or out of range"
    );
    assert_eq!(
        d.cli(&["INCRBY", "c", "x"]),
        "(error) ERR value is not an integer or out of range"
    );
    assert_eq!(d.cli(&["SET", "big", "9223372036854775807"]), "OK");
    assert_eq!(
        d.cli(&["INCR", "big"]),
        "(error) ERR increment or decrement would overflow"
    );
    // Versions: RS.GETV and RS.CAS.
    assert_eq!(d.cli(&["SET", "cas", "one"]), "OK");
    let getv = d.cli(&["RS.GETV", "cas"]);
    let lines: Vec<&str> = getv.lines().collect();
    assert_eq!(lines.len(), 2, "{getv}");
    assert_eq!(lines[0], "1) \"one\"");
    let version: u64 = lines[1]
        .trim_start_matches("2) (integer) ")
        .parse()
        .unwrap_or_else(|e| panic!("version in {getv:?}: {e}"));
    assert!(version > 0);
    assert_eq!(
        d.cli(&["RS.CAS", "cas", &(version + 100).to_string(), "x"]),
        "(nil)"
    );
    let new_version = d.cli(&["RS.CAS", "cas", &version.to_string(), "two"]);
    let new_version: u64 = new_version
        .trim_start_matches("(integer) ")
        .parse()
        .unwrap_or_else(|e| panic!("{new_version:?}: {e}"));
    assert!(new_version > version);
    assert_eq!(d.cli(&["GET", "cas"]), "\"two\"");
    assert_eq!(
        d.cli(&["RS.CAS", "cas", &version.to_string(), "three"]),
        "(nil)"
    );
    // Version 0 means "only if the key does not exist".
    let created = d.cli(&["RS.CAS", "newcas", "0", "created"]);
    assert!(created.starts_with("(integer) "), "{created}");
    assert_eq!(d.cli(&["RS.CAS", "newcas", "0", "again"]), "(nil)");
    assert_eq!(d.cli(&["RS.GETV", "nope"]), "(nil)");
    // Keyspace: DBSIZE, KEYS, SCAN, INFO, FLUSHDB.
    let keys_now = [
        "ap", "big", "c", "cas", "f", "fresh", "gs", "k", "k2", "newcas", "nx", "tenths",
    ];
    assert_eq!(d.cli(&["DBSIZE"]), format!("(integer) {}", keys_now.len()));
    let mut keys: Vec<String> = d
        .cli(&["KEYS", "*"])
        .lines()
        .map(|l| {
            l.split_once(") ")
                .map_or(l, |p| p.1)
                .trim_matches('"')
                .to_string()
        })
        .collect();
    keys.sort();
    assert_eq!(keys, keys_now);
    let k_keys = d.cli(&["KEYS", "k*"]);
    assert_eq!(k_keys.lines().count(), 2, "{k_keys}");
    let scan = d.cli(&["SCAN", "0", "MATCH", "c*", "COUNT", "1000"]);
    let scan_lines: Vec<&str> = scan.lines().collect();
    assert_eq!(scan_lines.first(), Some(&"1) \"0\""), "{scan}");
    assert_eq!(scan_lines.len(), 3, "{scan}");
    // redis-cli --scan walks the cursor to the end.
    let mut scanned: Vec<String> = d
        .cli(&["--scan"])
        .lines()
        .map(|l| l.trim_matches('"').to_string())
        .collect();
    scanned.sort();
    assert_eq!(scanned, keys_now);
    assert_eq!(d.cli(&["SCAN", "x"]), "(error) ERR invalid cursor");
    // Enough data for several enumeration batches (256 KiB each): SCAN's cursor
    // must carry across them, and DBSIZE/KEYS/FLUSHDB walk them all.
    let big = "x".repeat(10_000);
    let mut mset = String::from("SELECT 3\n");
    for i in 0..60 {
        mset.push_str(&format!("SET big{i} {big}\n"));
    }
    let replies = d.cli_stdin(&[], &mset);
    assert_eq!(replies.lines().filter(|l| *l == "OK").count(), 61);
    let first = d.cli(&["-n", "3", "SCAN", "0", "COUNT", "1"]);
    assert!(
        !first.starts_with("1) \"0\""),
        "one batch cannot hold 600 KB: {first}"
    );
    assert_eq!(d.cli(&["-n", "3", "--scan"]).lines().count(), 60);
    assert_eq!(d.cli(&["-n", "3", "DBSIZE"]), "(integer) 60");
    assert_eq!(d.cli(&["-n", "3", "KEYS", "big5*"]).lines().count(), 11);
    assert_eq!(d.cli(&["-n", "3", "FLUSHDB"]), "OK");
    assert_eq!(d.cli(&["-n", "3", "DBSIZE"]), "(integer) 0");
    let info = d.cli(&["INFO"]);
    for section in ["# Server", "# Clients", "# Memory", "# Stats", "# Keyspace"] {
        assert!(info.contains(section), "{section} in {info}");
    }
    assert!(
        info.contains(&format!("db0:keys={},", keys_now.len())),
        "{info}"
    );
    assert!(info.contains("connected_clients:1"), "{info}");
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    assert!(used > 0, "{info}");
    let keyspace = d.cli(&["INFO", "keyspace"]);
    assert!(!keyspace.contains("# Server"), "{keyspace}");
    assert_eq!(d.cli(&["FLUSHDB"]), "OK");
    assert_eq!(d.cli(&["DBSIZE"]), "(integer) 0");
    assert_eq!(d.cli(&["GET", "k"]), "(nil)");
    // Databases: SELECT n is table db{n}.
    assert_eq!(
        d.cli_stdin(&[], "SELECT 2\nSET k in-db2\nGET k\n"),
        "OK\nOK\n\"in-db2\""
    );
    assert_eq!(d.cli(&["-n", "2", "GET", "k"]), "\"in-db2\"");
    assert_eq!(d.cli(&["GET", "k"]), "(nil)");
    // FLUSHALL empties every database, not only the current one.
    assert_eq!(d.cli(&["SET", "k0", "in-db0"]), "OK");
    assert_eq!(d.cli(&["FLUSHALL", "ASYNC"]), "OK");
    assert_eq!(d.cli(&["-n", "2", "GET", "k"]), "(nil)");
    assert_eq!(d.cli(&["GET", "k0"]), "(nil)");
    assert_eq!(d.cli(&["FLUSHALL", "now"]), "(error) ERR syntax error");
    assert_eq!(
        d.cli(&["SELECT", "16"]),
        "(error) ERR DB index is out of range"
    );
    // Client, command, config.
    let client = d.cli_stdin(
        &[],
        "CLIENT GETNAME\nCLIENT SETNAME worker\nCLIENT GETNAME\nCLIENT ID\n",
    );
    let lines: Vec<&str> = client.lines().collect();
    assert_eq!(&lines[..3], ["(nil)", "OK", "\"worker\""], "{client}");
    assert!(lines[3].starts_with("(integer) "), "{client}");
    let count = d.cli(&["COMMAND", "COUNT"]);
    let count: usize = count
        .trim_start_matches("(integer) ")
        .parse()
        .unwrap_or_else(|e| panic!("{count}: {e}"));
    assert!(count >= 32, "{count}");
    assert_eq!(d.cli(&["COMMAND", "DOCS"]), "(empty array)");
    assert!(d.cli(&["COMMAND"]).contains("\"rs.getv\""));
    assert_eq!(
        d.cli(&["CONFIG", "GET", "databases"]),
        "1) \"databases\"\n2) \"16\""
    );
    // HELLO and RESP3.
    let hello = d.cli(&["HELLO", "3"]);
    assert!(
        hello.contains("\"proto\"") && hello.contains("3"),
        "{hello}"
    );
    assert_eq!(d.cli(&["-3", "GET", "nope"]), "(nil)");
    assert_eq!(d.cli(&["-3", "SET", "r3", "v"]), "OK");
    assert_eq!(d.cli(&["-3", "GET", "r3"]), "\"v\"");
    assert_eq!(
        d.cli(&["HELLO", "4"]),
        "(error) NOPROTO unsupported protocol version"
    );
    // Unknown commands and bad arity answer errors; the connection stays open.
    let after_errors = d.cli_stdin(&[], "NOSUCH a b\nGET\nGET a b\nPING\n");
    assert_eq!(
        after_errors,
        "(error) ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b'\n\
         (error) ERR wrong number of arguments for 'get' command\n\
         (error) ERR wrong number of arguments for 'get' command\n\
         PONG"
    );
}

#[test]
fn redis_cli_requirepass_gates_commands() {
    let d = RespDev::start(1, &["--replicas", "0", "--requirepass", "s3cret"]);
    assert_eq!(
        d.cli(&["GET", "k"]),
        "(error) NOAUTH Authentication required."
    );
    assert_eq!(
        d.cli(&["AUTH", "wrong"]),
        "(error) WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(
        d.cli_stdin(&[], "AUTH s3cret\nSET k v\nGET k\n"),
        "OK\nOK\n\"v\""
    );
    assert_eq!(
        d.cli_stdin(&[], "AUTH default s3cret\nGET k\n"),
        "OK\n\"v\""
    );
    assert_eq!(
        d.cli(&["-a", "s3cret", "--no-auth-warning", "GET", "k"]),
        "\"v\""
    );
    let hello = d.cli(&["HELLO", "3", "AUTH", "default", "s3cret"]);
    assert!(hello.contains("\"proto\""), "{hello}");

    // A stranger may not make the server wait for, and hold, a large command
    // (Redis's limits: 10 arguments, 16 KiB each, before AUTH): an error and a
    // closed connection as soon as the length is read.
    for (bad, text) in [
        (
            &b"*100\r\n"[..],
            "-ERR Protocol error: unauthenticated multibulk length\r\n",
        ),
        (
            &b"*2\r\n$4\r\nAUTH\r\n$1000000\r\n"[..],
            "-ERR Protocol error: unauthenticated bulk length\r\n",
        ),
    ] {
        // Read until the server closes (a read timeout fails the test).
        let (got, closed) = exchange(d.resp_port, bad, |_| false);
        assert_eq!(String::from_utf8_lossy(&got), text);
        assert!(closed, "the connection stays open after {text}");
    }
    // Once authenticated, the same connection may send large commands.
    let mut big =
        b"*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$100000\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'x', 100_000));
    big.extend_from_slice(b"\r\n*2\r\n$6\r\nSTRLEN\r\n$1\r\nb\r\n");
    let (got, _) = exchange(d.resp_port, &big, |g| g.ends_with(b":100000\r\n"));
    assert_eq!(String::from_utf8_lossy(&got), "+OK\r\n+OK\r\n:100000\r\n");
}

/// Sends `bytes` in one write and reads until `done` says the replies are all
/// there or the peer closes; returns the replies and whether the peer closed.
fn exchange(port: u16, bytes: &[u8], done: impl Fn(&[u8]) -> bool) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(bytes).expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(&got) && Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("read after {} bytes: {e}", got.len()),
        }
    }
    (got, false)
}

#[test]
fn raw_socket_pipelining_and_malformed_input() {
    let d = RespDev::start(1, &["--replicas", "0"]);
    let port = d.resp_port;
    // 500 SETs and 500 GETs in one write: 1000 replies in order.
    let mut pipeline = Vec::new();
    let mut expected = Vec::new();
    for i in 0..500 {
        let (k, v) = (format!("p{i}"), format!("value-{i}"));
        pipeline.extend_from_slice(
            format!(
                "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
                k.len(),
                v.len()
            )
            .as_bytes(),
        );
        expected.extend_from_slice(b"+OK\r\n");
    }
    for i in 0..500 {
        let (k, v) = (format!("p{i}"), format!("value-{i}"));
        pipeline
            .extend_from_slice(format!("*2\r\n$3\r\nGET\r\n${}\r\n{k}\r\n", k.len()).as_bytes());
        expected.extend_from_slice(format!("${}\r\n{v}\r\n", v.len()).as_bytes());
    }
    let (got, _) = exchange(port, &pipeline, |g| g.len() >= expected.len());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&expected)
    );

    // Inline commands (telnet style) work.
    let (got, _) = exchange(port, b"PING\r\nGET p1\r\n", |g| g.len() >= 7 + 13);
    assert_eq!(got, b"+PONG\r\n$7\r\nvalue-1\r\n");

    // Unknown commands keep the connection; later commands are answered.
    let (got, _) = exchange(port, b"*1\r\n$4\r\nNOPE\r\n*1\r\n$4\r\nPING\r\n", |g| {
        g.ends_with(b"+PONG\r\n")
    });
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("-ERR unknown command 'NOPE'"), "{text}");
    assert!(text.ends_with("+PONG\r\n"), "{text}");

    // Malformed framing: an error, then the server closes the connection.
    for bad in [
        &b"*1\r\n:5\r\n"[..],
        b"*abc\r\n",
        b"*1\r\n$-7\r\n",
        b"*1\r\n$99999999999\r\n",
        b"*1\r\n$3\r\nGETxx",
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048577\r\n",
    ] {
        let (got, closed) = exchange(port, bad, |_| false);
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("-ERR Protocol error: "), "{bad:?}: {text}");
        assert!(closed, "{bad:?}: connection not closed");
    }
    // A value of exactly 1 MiB (ramstore's limit) is stored and read back.
    let value = vec![b'x'; 1 << 20];
    let mut big = format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n", value.len()).into_bytes();
    big.extend_from_slice(&value);
    big.extend_from_slice(b"\r\n*2\r\n$6\r\nSTRLEN\r\n$3\r\nbig\r\n");
    let (got, _) = exchange(port, &big, |g| g.len() >= 5 + 10);
    assert_eq!(got, b"+OK\r\n:1048576\r\n");
    // A reply that would exceed 64 MiB (MGET of 65 × 1 MiB) is refused, not built.
    let mut mget = b"*66\r\n$4\r\nMGET\r\n".to_vec();
    for _ in 0..65 {
        mget.extend_from_slice(b"$3\r\nbig\r\n");
    }
    mget.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    let (got, closed) = exchange(port, &mget, |g| g.ends_with(b"+PONG\r\n"));
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("-ERR the reply would exceed"), "{text}");
    assert!(!closed, "{text}");
    // An oversized key is refused with an error; the connection stays open.
    let key = vec![b'k'; 70_000];
    let mut req = format!("*3\r\n$3\r\nSET\r\n${}\r\n", key.len()).into_bytes();
    req.extend_from_slice(&key);
    req.extend_from_slice(b"\r\n$1\r\nv\r\n*1\r\n$4\r\nPING\r\n");
    let (got, closed) = exchange(port, &req, |g| g.ends_with(b"+PONG\r\n"));
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("-ERR too large"), "{text}");
    assert!(text.ends_with("+PONG\r\n") && !closed, "{text}");
    // Regression (issue 18): an APPEND past 1 MiB says what is too large, not
    // "too large: TOO_LARGE:  (…)".
    let mib = vec![b'v'; 1 << 20];
    let mut req = format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n", mib.len()).into_bytes();
    req.extend_from_slice(&mib);
    req.extend_from_slice(b"\r\n*3\r\n$6\r\nAPPEND\r\n$3\r\nbig\r\n$1\r\nx\r\n");
    req.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    let (got, closed) = exchange(port, &req, |g| g.ends_with(b"+PONG\r\n"));
    assert_eq!(
        String::from_utf8_lossy(&got),
        "+OK\r\n-ERR too large: the key or the value would be over the limit (keys are at \
         most 64 KiB, values 1 MiB)\r\n+PONG\r\n"
    );
    assert!(!closed);
    // The server survived all of it.
    assert_eq!(d.cli(&["GET", "p499"]), "\"value-499\"");
}

#[test]
fn redis_py_client_library() {
    let d = RespDev::start(1, &["--replicas", "0"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/test_resp.py");
    let out = Command::new("python3")
        .arg(&script)
        .env("RESP_PORT", d.resp_port.to_string())
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python redis client test failed ({}):\n{stdout}\n{stderr}\n(the `redis` package is needed: pip install -r tests/python/requirements.txt)",
        out.status
    );
    assert!(stderr.contains("OK"), "unittest summary missing:\n{stderr}");
}

/// Keys whose table lives on another master are forwarded (one extra hop) and
/// behave the same; what RESP wrote is what the native client reads.
#[test]
fn forwarded_keys_on_another_master() {
    let d = RespDev::start(2, &["--replicas", "1"]);
    let resp_server = d.resp_server_addr();
    // db1 is created on first use, on the least loaded master: not db0's.
    assert_eq!(
        d.cli_stdin(&[], "SELECT 1\nSET fk fv\nGET fk\n"),
        "OK\nOK\n\"fv\""
    );
    let client = d.client();
    let db1 = client.get_table_id("db1").expect("db1 exists");
    let owners: Vec<String> = client
        .tablet_map()
        .expect("tablet map")
        .into_iter()
        .filter(|t| t.table_id == db1)
        .map(|t| t.address)
        .collect();
    assert_eq!(owners.len(), 1);
    assert_ne!(
        owners[0], resp_server,
        "db1 should live on the other master"
    );
    // Every kind of operation works forwarded.
    let n = |args: &[&str]| d.cli(&[&["-n", "1"], args].concat());
    assert_eq!(n(&["INCR", "fc"]), "(integer) 1");
    assert_eq!(n(&["INCRBY", "fc", "41"]), "(integer) 42");
    assert_eq!(n(&["SET", "fk", "x", "NX"]), "(nil)");
    assert_eq!(n(&["MSET", "a", "1", "b", "2"]), "OK");
    assert_eq!(
        n(&["MGET", "a", "b", "fk"]),
        "1) \"1\"\n2) \"2\"\n3) \"fv\""
    );
    assert_eq!(n(&["DBSIZE"]), "(integer) 4");
    assert_eq!(n(&["DEL", "a", "b"]), "(integer) 2");
    // The transactional commands, on a forwarded table.
    assert_eq!(n(&["RENAME", "fk", "fk2"]), "OK");
    assert_eq!(n(&["GETDEL", "fk2"]), "\"fv\"");
    assert_eq!(n(&["MSETNX", "m1", "x", "m2", "y"]), "(integer) 1");
    assert_eq!(n(&["COPY", "m1", "m3"]), "(integer) 1");
    assert_eq!(n(&["SETRANGE", "m3", "1", "yz"]), "(integer) 3");
    assert_eq!(
        n(&["MGET", "m1", "m3", "fk"]),
        "1) \"x\"\n2) \"xyz\"\n3) (nil)"
    );
    assert_eq!(n(&["DEL", "m1", "m2", "m3"]), "(integer) 3");
    assert_eq!(n(&["SET", "fk", "fv"]), "OK");
    // The native client reads what RESP wrote, as bytes.
    let (value, _) = client.read(db1, b"fc").expect("read fc");
    assert_eq!(value, b"42");
    // And RESP reads what the native client wrote.
    client.write(db1, b"native", b"hello").expect("write");
    assert_eq!(n(&["GET", "native"]), "\"hello\"");
    drop(d);
}

/// Acknowledged RESP writes are replicated like native ones: after the master
/// serving them is declared crashed, its data is recovered from backups and the
/// Redis front end serves it again (now forwarded to the recovery master).
#[test]
fn acknowledged_writes_survive_master_crash() {
    let d = RespDev::start(3, &["--replicas", "2"]);
    let mut cmds = String::new();
    for i in 0..200 {
        cmds.push_str(&format!("SET key{i} value{i}\n"));
    }
    let replies = d.cli_stdin(&[], &cmds);
    assert_eq!(
        replies.lines().filter(|l| *l == "OK").count(),
        200,
        "{replies}"
    );
    let client = d.client();
    let db0 = client.get_table_id("db0").expect("db0");
    let owner = client
        .tablet_map()
        .expect("map")
        .into_iter()
        .find(|t| t.table_id == db0)
        .expect("db0 tablet");
    assert_eq!(owner.address, d.resp_server_addr());
    let id = owner.server_id.to_string();
    let out = run_cli(&["crash-server", &id, "--coordinator", &d.dev.addr], &[]);
    out.ok();
    // Recovery puts db0 on another master; the front end forwards there.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let moved = client
            .tablet_map()
            .map(|m| {
                m.iter()
                    .any(|t| t.table_id == db0 && t.server_id != owner.server_id)
            })
            .unwrap_or(false);
        if moved {
            break;
        }
        assert!(Instant::now() < deadline, "db0 was not recovered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut gets = String::new();
    for i in 0..200 {
        gets.push_str(&format!("GET key{i}\n"));
    }
    let values = d.cli_stdin(&[], &gets);
    let expected: Vec<String> = (0..200).map(|i| format!("\"value{i}\"")).collect();
    assert_eq!(values.lines().collect::<Vec<_>>(), expected);
}

/// Native increments (`ramstore incr`, the client library) and Redis's INCR family
/// read and write one counter form, decimal text: each continues the other's
/// counters, and both refuse the same non-numbers and overflows.
#[test]
fn native_incr_and_redis_incr_share_counters() {
    let d = RespDev::start(1, &["--replicas", "0"]);
    let env = [("RAMSTORE_COORDINATOR", d.dev.addr.as_str())];
    let incr = |key: &str, delta: &str| run_cli(&["incr", "db0", key, delta], &env);

    // Native first: Redis reads "1" and continues.
    assert!(incr("visits", "1").ok().starts_with("1 (version "));
    assert_eq!(d.cli(&["get", "visits"]), "\"1\"");
    assert_eq!(d.cli(&["incr", "visits"]), "(integer) 2");
    assert_eq!(d.cli(&["incrby", "visits", "40"]), "(integer) 42");
    assert!(incr("visits", "-2").ok().starts_with("40 (version "));
    assert_eq!(d.cli(&["decr", "visits"]), "(integer) 39");

    // Redis first: a SET of decimal text is a native counter.
    assert_eq!(d.cli(&["set", "hits", "41"]), "OK");
    assert!(incr("hits", "1").ok().starts_with("42 (version "));
    assert_eq!(d.cli(&["get", "hits"]), "\"42\"");

    // Floats: INCRBYFLOAT's text is the client library's f64 counter, and back.
    let client = d.client();
    let db0 = client.get_table_id("db0").expect("db0");
    assert_eq!(d.cli(&["incrbyfloat", "price", "10.5"]), "\"10.5\"");
    assert_eq!(client.increment_f64(db0, b"price", 0.1).unwrap().0, 10.6);
    assert_eq!(d.cli(&["get", "price"]), "\"10.6\"");
    assert_eq!(client.increment_f64(db0, b"apples", 3.0).unwrap().0, 3.0);
    assert_eq!(d.cli(&["get", "apples"]), "\"3\"");
    assert_eq!(d.cli(&["incr", "apples"]), "(integer) 4");

    // The same refusals both ways, and nothing changes.
    assert_eq!(
        client.increment_i64(db0, b"price", 1),
        Err(ramstore_client::ClientError::NotNumeric)
    );
    assert_eq!(
        d.cli(&["incr", "price"]),
        "(error) ERR value is not an integer or out of range"
    );
    for text in ["bob", "+1", "01", " 1"] {
        assert_eq!(d.cli(&["set", "name", text]), "OK");
        let out = incr("name", "1");
        assert_ne!(out.code, Some(0), "{text:?}: {out:?}");
        assert!(out.stderr.contains("decimal text"), "{text:?}: {out:?}");
        assert_eq!(
            d.cli(&["incr", "name"]),
            "(error) ERR value is not an integer or out of range",
            "{text:?}"
        );
        assert_eq!(d.cli(&["get", "name"]), format!("{text:?}"));
    }
    assert_eq!(d.cli(&["set", "max", &i64::MAX.to_string()]), "OK");
    let out = incr("max", "1");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("overflow"), "{out:?}");
    assert_eq!(
        d.cli(&["incr", "max"]),
        "(error) ERR increment or decrement would overflow"
    );
    assert_eq!(d.cli(&["get", "max"]), format!("\"{}\"", i64::MAX));
}

/// `ramstore server --resp-listen` on one server of a two-server cluster, with
/// databases spread over both masters (`--resp-table-span 2`): half the keys are
/// local, half forwarded, and SCAN/DBSIZE walk both tablets.
#[test]
fn server_resp_listen_spans_masters() {
    let mut cluster = Cluster::start(1);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let server = cluster.add_server_with(
        "127.0.0.1:0",
        &["--resp-listen", &listen, "--resp-table-span", "2"],
    );
    let banner = server.proc.stdout_lines().join("\n");
    assert!(
        banner.contains(&format!("Redis protocol on {listen}")),
        "{banner}"
    );
    let mut cmds = String::new();
    for i in 0..100 {
        cmds.push_str(&format!("SET s{i} v{i}\n"));
    }
    let replies = redis_cli(port, &[], &cmds);
    assert_eq!(
        replies.lines().filter(|l| *l == "OK").count(),
        100,
        "{replies}"
    );
    let client = cluster.client();
    let db0 = client.get_table_id("db0").expect("db0");
    let tablets: Vec<_> = client
        .tablet_map()
        .expect("map")
        .into_iter()
        .filter(|t| t.table_id == db0)
        .collect();
    assert_eq!(tablets.len(), 2, "{tablets:?}");
    assert_ne!(tablets[0].server_id, tablets[1].server_id, "{tablets:?}");
    assert_eq!(redis_cli(port, &["DBSIZE"], ""), "(integer) 100");
    assert_eq!(redis_cli(port, &["--scan"], "").lines().count(), 100);
    let mut gets = String::new();
    for i in 0..100 {
        gets.push_str(&format!("GET s{i}\n"));
    }
    let values = redis_cli(port, &[], &gets);
    let expected: Vec<String> = (0..100).map(|i| format!("\"v{i}\"")).collect();
    assert_eq!(values.lines().collect::<Vec<_>>(), expected);
}

/// A `redis-server` on a free port with nothing saved, for the differential
/// test; stopped when dropped.
struct RedisServer {
    child: std::process::Child,
    port: u16,
}

impl RedisServer {
    fn start() -> RedisServer {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server ({e}): the differential test needs it \
                     (scripts/install-test-deps installs Debian's redis-server)"
                )
            });
        let server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        // Ready once it accepts a connection (it listens only after loading).
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(redis_cli(port, &["PING"], ""), "PONG");
        server
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 24's differential test: random command sequences over the supported
/// string and keyspace commands (`tests/python/differential.py`), sent to a
/// real redis-server and to `ramstore dev`, in RESP2 and RESP3; every reply
/// must be byte-identical. On a mismatch the script prints a shrunk
/// reproducer.
#[test]
fn differential_against_redis_server() {
    let redis = RedisServer::start();
    let d = RespDev::start(1, &["--replicas", "0"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/differential.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([&redis.port.to_string(), &d.resp_port.to_string()])
        .args(["--seeds", "40", "--first", "1", "--commands", "250"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "ramstore's replies differ from redis-server's ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("every reply byte-identical"), "{stdout}");
}

/// Key expiry through `redis-cli`, Redis 7's replies: the EXPIRE family with
/// its conditions, TTL and its family, PERSIST, SETEX/PSETEX, GETEX's options
/// and SET's, and an expired key absent everywhere (GET, EXISTS, SCAN).
#[test]
fn redis_cli_expiry_commands() {
    let d = RespDev::start(1, &["--replicas", "0"]);
    let c = |args: &[&str]| d.cli(args);
    assert_eq!(c(&["TTL", "nokey"]), "(integer) -2");
    assert_eq!(c(&["PTTL", "nokey"]), "(integer) -2");
    assert_eq!(c(&["EXPIRETIME", "nokey"]), "(integer) -2");
    assert_eq!(c(&["EXPIRE", "nokey", "10"]), "(integer) 0");
    assert_eq!(c(&["PERSIST", "nokey"]), "(integer) 0");
    assert_eq!(c(&["SET", "k", "v"]), "OK");
    assert_eq!(c(&["TTL", "k"]), "(integer) -1");
    assert_eq!(c(&["PEXPIRETIME", "k"]), "(integer) -1");
    assert_eq!(c(&["PERSIST", "k"]), "(integer) 0");
    assert_eq!(c(&["EXPIRE", "k", "100", "XX"]), "(integer) 0");
    assert_eq!(c(&["EXPIRE", "k", "100", "GT"]), "(integer) 0");
    assert_eq!(c(&["EXPIRE", "k", "100", "NX"]), "(integer) 1");
    assert_eq!(c(&["TTL", "k"]), "(integer) 100");
    assert_eq!(c(&["EXPIRE", "k", "200", "LT"]), "(integer) 0");
    assert_eq!(c(&["EXPIRE", "k", "200", "GT"]), "(integer) 1");
    assert_eq!(c(&["EXPIRE", "k", "50", "XX", "LT"]), "(integer) 1");
    assert_eq!(c(&["TTL", "k"]), "(integer) 50");
    let pttl: i64 = c(&["PTTL", "k"])
        .trim_start_matches("(integer) ")
        .parse()
        .expect("PTTL is an integer");
    assert!((49_000..=50_000).contains(&pttl), "{pttl}");
    assert_eq!(c(&["PEXPIREAT", "k", "99999999999999"]), "(integer) 1");
    assert_eq!(c(&["PEXPIRETIME", "k"]), "(integer) 99999999999999");
    assert_eq!(c(&["EXPIRETIME", "k"]), "(integer) 99999999999");
    assert_eq!(c(&["PERSIST", "k"]), "(integer) 1");
    assert_eq!(c(&["TTL", "k"]), "(integer) -1");
    // INCR and APPEND keep a key's TTL, SET clears it.
    assert_eq!(c(&["SET", "n", "1", "EX", "100"]), "OK");
    assert_eq!(c(&["INCR", "n"]), "(integer) 2");
    assert_eq!(c(&["APPEND", "n", "0"]), "(integer) 2");
    assert_eq!(c(&["TTL", "n"]), "(integer) 100");
    assert_eq!(c(&["SET", "n", "1"]), "OK");
    assert_eq!(c(&["TTL", "n"]), "(integer) -1");
    assert_eq!(c(&["SETEX", "s", "100", "v"]), "OK");
    assert_eq!(c(&["TTL", "s"]), "(integer) 100");
    assert_eq!(c(&["PSETEX", "s", "100000", "v"]), "OK");
    assert_eq!(c(&["TTL", "s"]), "(integer) 100");
    assert_eq!(c(&["SET", "s", "w", "GET", "PX", "100000"]), "\"v\"");
    assert_eq!(c(&["TTL", "s"]), "(integer) 100");
    // Errors, in Redis 7's words.
    let expire_error = |cmd: &str| format!("(error) ERR invalid expire time in '{cmd}' command");
    assert_eq!(c(&["SET", "k", "v", "EX", "0"]), expire_error("set"));
    assert_eq!(c(&["SETEX", "k", "-1", "v"]), expire_error("setex"));
    assert_eq!(c(&["PSETEX", "k", "0", "v"]), expire_error("psetex"));
    assert_eq!(c(&["GETEX", "k", "PX", "0"]), expire_error("getex"));
    assert_eq!(
        c(&["EXPIRE", "k", "9223372036854775807"]),
        expire_error("expire")
    );
    assert_eq!(
        c(&["SET", "k", "v", "EX", "10", "KEEPTTL"]),
        "(error) ERR syntax error"
    );
    assert_eq!(
        c(&["EXPIRE", "k", "10", "NX", "XX"]),
        "(error) ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(
        c(&["EXPIRE", "k", "10", "GT", "LT"]),
        "(error) ERR GT and LT options at the same time are not compatible"
    );
    assert_eq!(
        c(&["EXPIRE", "k", "10", "bogus"]),
        "(error) ERR Unsupported option bogus"
    );
    assert_eq!(
        c(&["EXPIRE", "k", "abc"]),
        "(error) ERR value is not an integer or out of range"
    );
    assert_eq!(c(&["GETEX", "nokey", "EX", "abc"]), "(nil)");
    // A time in the past: the key is gone at once.
    assert_eq!(c(&["SET", "gone", "v"]), "OK");
    assert_eq!(c(&["EXPIRE", "gone", "-1"]), "(integer) 1");
    assert_eq!(c(&["GET", "gone"]), "(nil)");
    assert_eq!(c(&["EXISTS", "gone"]), "(integer) 0");
    assert_eq!(c(&["SET", "gone", "v", "PXAT", "1"]), "OK");
    assert_eq!(c(&["GET", "gone"]), "(nil)");
    assert_eq!(c(&["SET", "gone", "v"]), "OK");
    assert_eq!(c(&["GETEX", "gone", "EXAT", "1"]), "\"v\"");
    assert_eq!(c(&["GET", "gone"]), "(nil)");
    // A key that expires while nobody looks is gone for reads and scans.
    assert_eq!(c(&["SET", "soon", "v", "PX", "200"]), "OK");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(c(&["GET", "soon"]), "(nil)");
    assert_eq!(c(&["TTL", "soon"]), "(integer) -2");
    assert!(!c(&["KEYS", "*"]).contains("soon"));
    // Inside MULTI the expiry commands are refused while queueing.
    assert!(
        d.cli_stdin(&[], "MULTI\nEXPIRE k 10\nEXEC\n")
            .contains("EXECABORT"),
        "EXPIRE inside MULTI"
    );
}

/// Expiry is in the log (R§4): after the master holding the keys crashes and
/// is recovered from its backups, a key whose time passed stays gone and one
/// whose time has not keeps its deadline.
#[test]
fn expiry_survives_master_crash() {
    // R = 1 of 3 servers: after the crash the recovery master still has a
    // backup, so the expirer's tombstones (and misses waiting on them) become
    // durable.
    let d = RespDev::start(3, &["--replicas", "1"]);
    let replies = d.cli_stdin(
        &[],
        "SET live v EX 3600\nSET short v PX 300\nSET plain v\nPEXPIRETIME live\n",
    );
    let lines: Vec<&str> = replies.lines().collect();
    assert_eq!(lines[..3], ["OK", "OK", "OK"], "{replies}");
    let deadline_before = lines[3].to_string();
    let client = d.client();
    let db0 = client.get_table_id("db0").expect("db0");
    let owner = client
        .tablet_map()
        .expect("map")
        .into_iter()
        .find(|t| t.table_id == db0)
        .expect("db0 tablet");
    let id = owner.server_id.to_string();
    run_cli(&["crash-server", &id, "--coordinator", &d.dev.addr], &[]).ok();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let moved = client
            .tablet_map()
            .map(|m| {
                m.iter()
                    .any(|t| t.table_id == db0 && t.server_id != owner.server_id)
            })
            .unwrap_or(false);
        if moved {
            break;
        }
        assert!(Instant::now() < deadline, "db0 was not recovered");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(d.cli(&["PEXPIRETIME", "live"]), deadline_before);
    assert_eq!(d.cli(&["GET", "live"]), "\"v\"");
    assert_eq!(
        d.cli(&["GET", "short"]),
        "(nil)",
        "an expired key came back"
    );
    assert_eq!(d.cli(&["TTL", "short"]), "(integer) -2");
    assert_eq!(d.cli(&["TTL", "plain"]), "(integer) -1");
}

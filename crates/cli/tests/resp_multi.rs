//! Redis MULTI / EXEC / DISCARD / WATCH / UNWATCH (issue 21) end to end on a
//! cluster whose databases span every server (`ramstore server --resp-listen
//! --resp-table-span N`), over raw sockets: a differential
//! table of command sequences and the replies Redis gives them (its documented
//! transaction semantics), the queue run as one ramstore transaction across
//! servers, and WATCH races between connections.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{free_port, Cluster};
use ramstore_client::{key_hash, BlockingClient, ClientError};

/// A cluster of `servers` storage servers, the last of which also serves the
/// Redis protocol with every database spread over all of them
/// (`--resp-table-span`): most keys of a transaction live on other servers.
struct RespCluster {
    cluster: Cluster,
    port: u16,
}

impl RespCluster {
    fn start(servers: usize) -> RespCluster {
        let mut cluster = Cluster::start(servers - 1);
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let span = servers.to_string();
        let server = cluster.add_server_with(
            "127.0.0.1:0",
            &["--resp-listen", &listen, "--resp-table-span", &span],
        );
        let banner = server.proc.stdout_lines().join("\n");
        assert!(banner.contains("Redis protocol on"), "{banner}");
        RespCluster { cluster, port }
    }

    fn client(&self) -> BlockingClient {
        self.cluster.client()
    }

    fn conn(&self) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Conn {
            reader: BufReader::new(stream.try_clone().expect("clone")),
            stream,
        }
    }
}

/// One RESP2 connection that sends a command and reads its reply, shown as
/// redis-cli shows it (`OK`, `(integer) 2`, `"v"`, `(nil)`, `(error) ERR …`,
/// arrays as `[a, b]`, the null array as `(nil array)`).
struct Conn {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn cmd(&mut self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut out = format!("*{}\r\n", words.len()).into_bytes();
        for w in &words {
            out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
        }
        self.stream.write_all(&out).expect("send");
        self.reply()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.reader.read_line(&mut l).expect("reply line");
        assert!(l.ends_with("\r\n"), "a whole line: {l:?}");
        l.truncate(l.len() - 2);
        l
    }

    fn reply(&mut self) -> String {
        let l = self.line();
        let (kind, rest) = l.split_at(1);
        match kind {
            "+" => rest.to_string(),
            "-" => format!("(error) {rest}"),
            ":" => format!("(integer) {rest}"),
            "$" => {
                let n: i64 = rest.parse().expect("bulk length");
                if n < 0 {
                    return "(nil)".into();
                }
                let mut b = vec![0; n as usize + 2];
                self.reader.read_exact(&mut b).expect("bulk");
                b.truncate(n as usize);
                format!("\"{}\"", String::from_utf8_lossy(&b))
            }
            "*" => {
                let n: i64 = rest.parse().expect("array length");
                if n < 0 {
                    return "(nil array)".into();
                }
                let items: Vec<String> = (0..n).map(|_| self.reply()).collect();
                format!("[{}]", items.join(", "))
            }
            other => panic!("unexpected reply type {other:?} in {l:?}"),
        }
    }
}

/// Runs `steps` (command, expected reply; an expected reply ending in `*` is a
/// prefix) on one connection, in order.
fn check(conn: &mut Conn, steps: &[(&str, &str)]) {
    for (command, expected) in steps {
        let got = conn.cmd(command);
        match expected.strip_suffix('*') {
            Some(prefix) => assert!(
                got.starts_with(prefix),
                "{command}: got {got}, expected {expected}"
            ),
            None => assert_eq!(&got, expected, "{command}"),
        }
    }
}

/// Redis's documented transaction semantics, sequence by sequence: each step is
/// what Redis 7 answers (redis.io "Transactions"; multi.c).
#[test]
fn multi_exec_answers_as_redis_does() {
    let d = RespCluster::start(3);
    let mut c = d.conn();
    let cases: &[&[(&str, &str)]] = &[
        // The queue runs in order; later commands see earlier writes.
        &[
            ("MULTI", "OK"),
            ("SET a 1", "QUEUED"),
            ("INCR a", "QUEUED"),
            ("INCRBY a 10", "QUEUED"),
            ("GET a", "QUEUED"),
            ("EXEC", "[OK, (integer) 2, (integer) 12, \"12\"]"),
            ("GET a", "\"12\""),
        ],
        // An empty transaction.
        &[("MULTI", "OK"), ("EXEC", "[]")],
        // EXEC and DISCARD outside MULTI.
        &[
            ("EXEC", "(error) ERR EXEC without MULTI"),
            ("DISCARD", "(error) ERR DISCARD without MULTI"),
        ],
        // Nested MULTI and WATCH inside MULTI are errors that keep the queue.
        &[
            ("MULTI", "OK"),
            ("SET n 1", "QUEUED"),
            ("MULTI", "(error) ERR MULTI calls can not be nested"),
            ("WATCH n", "(error) ERR WATCH inside MULTI is not allowed"),
            ("EXEC", "[OK]"),
            ("GET n", "\"1\""),
        ],
        // A command refused while queueing (unknown, wrong arity) aborts EXEC
        // and nothing applies; the transaction is over afterwards.
        &[
            ("MULTI", "OK"),
            ("SET x 1", "QUEUED"),
            ("NOSUCH x", "(error) ERR unknown command*"),
            (
                "GET",
                "(error) ERR wrong number of arguments for 'get' command",
            ),
            (
                "EXEC",
                "(error) EXECABORT Transaction discarded because of previous errors.",
            ),
            ("GET x", "(nil)"),
            ("EXEC", "(error) ERR EXEC without MULTI"),
        ],
        // DISCARD drops the queue.
        &[
            ("MULTI", "OK"),
            ("SET d 1", "QUEUED"),
            ("DISCARD", "OK"),
            ("GET d", "(nil)"),
        ],
        // Errors in arguments and at run time are that command's reply; the
        // other commands still apply.
        &[
            ("SET s hello", "OK"),
            ("MULTI", "OK"),
            ("INCR s", "QUEUED"),
            ("SET t 1 BADOPTION", "QUEUED"),
            ("INCRBY t notanumber", "QUEUED"),
            ("SET t 2", "QUEUED"),
            (
                "EXEC",
                "[(error) ERR value is not an integer or out of range, (error) ERR syntax \
                 error, (error) ERR value is not an integer or out of range, OK]",
            ),
            ("GET t", "\"2\""),
            ("GET s", "\"hello\""),
        ],
        // The string commands inside a transaction.
        &[
            ("SET old v0", "OK"),
            ("MULTI", "OK"),
            ("SETNX old v1", "QUEUED"),
            ("SETNX fresh f", "QUEUED"),
            ("GETSET old v2", "QUEUED"),
            ("SET old v3 XX GET", "QUEUED"),
            ("SET missing m XX", "QUEUED"),
            ("SET fresh g NX", "QUEUED"),
            ("MSET m1 a m2 b", "QUEUED"),
            ("MGET m1 m2 nothing", "QUEUED"),
            ("APPEND m1 cd", "QUEUED"),
            ("STRLEN m1", "QUEUED"),
            ("INCRBYFLOAT fl 1.5", "QUEUED"),
            ("DECR cnt", "QUEUED"),
            ("EXISTS m1 m1 nothing", "QUEUED"),
            ("DEL m2 m2 nothing", "QUEUED"),
            ("EXISTS m2", "QUEUED"),
            ("PING", "QUEUED"),
            ("ECHO hi", "QUEUED"),
            (
                "EXEC",
                "[(integer) 0, (integer) 1, \"v0\", \"v2\", (nil), (nil), OK, [\"a\", \"b\", \
                 (nil)], (integer) 3, (integer) 3, \"1.5\", (integer) -1, (integer) 2, \
                 (integer) 1, (integer) 0, PONG, \"hi\"]",
            ),
            ("GET old", "\"v3\""),
            ("GET fresh", "\"f\""),
            ("GET m1", "\"acd\""),
            ("EXISTS m2", "(integer) 0"),
            ("GET cnt", "\"-1\""),
        ],
        // Commands with no transactional form are refused while queueing.
        &[
            ("MULTI", "OK"),
            ("KEYS *", "(error) ERR 'keys' cannot run inside MULTI*"),
            ("EXEC", "(error) EXECABORT*"),
        ],
        // SELECT inside the queue moves the later commands to another database.
        &[
            ("MULTI", "OK"),
            ("SELECT 3", "QUEUED"),
            ("SET indb3 yes", "QUEUED"),
            ("EXEC", "[OK, OK]"),
            ("GET indb3", "\"yes\""),
            ("SELECT 0", "OK"),
            ("GET indb3", "(nil)"),
        ],
        // WATCH: unchanged keys commit; a key changed since WATCH (here by this
        // very connection, which Redis counts too) makes EXEC answer the null
        // array and apply nothing; EXEC forgets the watched keys.
        &[
            ("SET w 1", "OK"),
            ("WATCH w", "OK"),
            ("MULTI", "OK"),
            ("SET w 2", "QUEUED"),
            ("EXEC", "[OK]"),
            ("WATCH w nothing", "OK"),
            ("SET w 3", "OK"),
            ("MULTI", "OK"),
            ("SET w 4", "QUEUED"),
            ("SET other x", "QUEUED"),
            ("EXEC", "(nil array)"),
            ("GET w", "\"3\""),
            ("GET other", "(nil)"),
            ("MULTI", "OK"),
            ("SET w 5", "QUEUED"),
            ("EXEC", "[OK]"),
        ],
        // UNWATCH forgets the keys: a later change does not abort.
        &[
            ("WATCH u", "OK"),
            ("SET u 1", "OK"),
            ("UNWATCH", "OK"),
            ("MULTI", "OK"),
            ("GET u", "QUEUED"),
            ("EXEC", "[\"1\"]"),
        ],
        // DISCARD forgets the watched keys too.
        &[
            ("WATCH v", "OK"),
            ("SET v 1", "OK"),
            ("MULTI", "OK"),
            ("DISCARD", "OK"),
            ("MULTI", "OK"),
            ("SET v 2", "QUEUED"),
            ("EXEC", "[OK]"),
        ],
    ];
    for case in cases {
        check(&mut c, case);
    }
}

#[test]
fn exec_applies_the_queue_atomically_across_servers() {
    let d = RespCluster::start(3);
    let mut c = d.conn();
    // Enough keys that they land on all three servers' tablets of db0.
    c.cmd("MULTI");
    for i in 0..30 {
        assert_eq!(c.cmd(&format!("SET key{i} v{i}")), "QUEUED");
    }
    let reply = c.cmd("EXEC");
    assert_eq!(reply, format!("[{}]", vec!["OK"; 30].join(", ")));
    let client = d.client();
    let table = client.get_table_id("db0").expect("db0");
    let mut servers = std::collections::BTreeSet::new();
    for i in 0..30 {
        let key = format!("key{i}");
        let (value, _) = client.read(table, key.as_bytes()).expect("written");
        assert_eq!(value, format!("v{i}").into_bytes());
        let hash = key_hash(key.as_bytes());
        let map = client.tablet_map().expect("tablet map");
        let owner = map
            .iter()
            .find(|t| t.table_id == table && t.start_hash <= hash && hash <= t.end_hash)
            .expect("a tablet holds the key");
        servers.insert(owner.server_id);
    }
    assert_eq!(servers.len(), 3, "the keys span the servers: {servers:?}");
    // A write by another client between WATCH and EXEC, to a key on another
    // server than most of the queue's, aborts the whole queue.
    c.cmd("WATCH key0");
    client.write(table, b"key0", b"changed").expect("write");
    c.cmd("MULTI");
    for i in 0..30 {
        c.cmd(&format!("SET key{i} new"));
    }
    assert_eq!(c.cmd("EXEC"), "(nil array)");
    for i in 1..30 {
        let key = format!("key{i}");
        assert_eq!(
            client.read(table, key.as_bytes()).expect("read").0,
            format!("v{i}").into_bytes(),
            "nothing of the aborted EXEC applied"
        );
    }
    assert_eq!(
        client.read(table, b"absent"),
        Err(ClientError::ObjectDoesntExist)
    );
}

/// Two clients run Redis's optimistic-lock increment (WATCH, GET, MULTI, SET,
/// EXEC) interleaved: the second EXEC gets the null array.
#[test]
fn watch_race_second_exec_gets_nil() {
    let d = RespCluster::start(2);
    let (mut a, mut b) = (d.conn(), d.conn());
    check(&mut a, &[("SET counter 10", "OK"), ("WATCH counter", "OK")]);
    check(&mut b, &[("WATCH counter", "OK")]);
    assert_eq!(a.cmd("GET counter"), "\"10\"");
    assert_eq!(b.cmd("GET counter"), "\"10\"");
    check(
        &mut a,
        &[
            ("MULTI", "OK"),
            ("SET counter 11", "QUEUED"),
            ("EXEC", "[OK]"),
        ],
    );
    check(
        &mut b,
        &[
            ("MULTI", "OK"),
            ("SET counter 11", "QUEUED"),
            ("EXEC", "(nil array)"),
        ],
    );
    assert_eq!(a.cmd("GET counter"), "\"11\"");
}

/// Many connections increment one counter with WATCH/MULTI/EXEC, retrying on a
/// nil EXEC: no increment is lost and none is doubled.
#[test]
fn watch_concurrent_increments_lose_nothing() {
    const THREADS: usize = 4;
    const INCREMENTS: usize = 15;
    let d = RespCluster::start(2);
    d.conn().cmd("SET hits 0");
    let nils = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let mut c = d.conn();
            let nils = &nils;
            s.spawn(move || {
                for _ in 0..INCREMENTS {
                    loop {
                        c.cmd("WATCH hits");
                        let n: i64 = c.cmd("GET hits").trim_matches('"').parse().expect("n");
                        c.cmd("MULTI");
                        c.cmd(&format!("SET hits {}", n + 1));
                        match c.cmd("EXEC").as_str() {
                            "[OK]" => break,
                            "(nil array)" => {
                                nils.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            other => panic!("EXEC answered {other}"),
                        }
                    }
                }
            });
        }
    });
    let total = THREADS * INCREMENTS;
    assert_eq!(d.conn().cmd("GET hits"), format!("\"{total}\""));
    eprintln!(
        "{} EXECs of {total} increments got nil",
        nils.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// Plain INCR inside MULTI from many connections at once (no WATCH): EXEC
/// retries an aborted commit itself, so every increment applies exactly once.
#[test]
fn multi_incr_from_many_connections_applies_each_once() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 10;
    let d = RespCluster::start(3);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let mut c = d.conn();
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    check(
                        &mut c,
                        &[
                            ("MULTI", "OK"),
                            ("INCR left", "QUEUED"),
                            ("DECR right", "QUEUED"),
                        ],
                    );
                    let r = c.cmd("EXEC");
                    assert!(r.starts_with("[(integer) "), "{r}");
                }
            });
        }
    });
    let n = THREADS * ROUNDS;
    let mut c = d.conn();
    assert_eq!(c.cmd("GET left"), format!("\"{n}\""));
    assert_eq!(c.cmd("GET right"), format!("\"-{n}\""));
}

//! Resource exhaustion through real processes (issue 6): a full master log, full
//! backups, oversize requests and a backup disk too small for its frames file are
//! each answered with a clear status (or a clear start-up error), the processes
//! stay up, and every acknowledged write stays readable (docs/design.md §1: "a full log
//! answers retry later, never an out-of-memory abort").

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{free_port, spawn_ramstore, wait_until, Cluster, READY_TIMEOUT};
use ramstore_client::{BlockingClient, ClientError, ClientOptions};

/// Value size of the filling writes (64 KiB values fill a small log quickly).
const FILL_VALUE_BYTES: usize = 60 * 1024;
/// Most filling writes a test makes before it expects to have hit the limit.
const MAX_FILL_WRITES: usize = 4_000;

fn key(i: usize) -> Vec<u8> {
    format!("fill-{i:05}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(FILL_VALUE_BYTES, b'a' + (i % 26) as u8);
    v
}

/// Writes new keys until a write fails; returns the acknowledged keys and the
/// error that stopped the writes.
fn fill(client: &BlockingClient, table: u64) -> (Vec<usize>, ClientError) {
    let mut acked = Vec::new();
    for i in 0..MAX_FILL_WRITES {
        match client.write(table, &key(i), &value(i)) {
            Ok(_) => acked.push(i),
            Err(e) => return (acked, e),
        }
    }
    panic!("{MAX_FILL_WRITES} writes of {FILL_VALUE_BYTES} bytes all succeeded: nothing filled up");
}

/// Every acknowledged key reads back its own value.
#[track_caller]
fn assert_all_readable(client: &BlockingClient, table: u64, acked: &[usize]) {
    for &i in acked {
        let (v, _) = client
            .read(table, &key(i))
            .unwrap_or_else(|e| panic!("acknowledged key {i} unreadable: {e}"));
        assert!(v == value(i), "acknowledged key {i} has another value");
    }
}

/// `key=value` statistics of the server at `addr`.
fn stat(client: &BlockingClient, addr: &str, name: &str) -> String {
    client
        .server_stats(addr)
        .expect("server stats")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {name} in the stats of {addr}"))
}

fn short_deadline_client(cluster: &Cluster) -> BlockingClient {
    BlockingClient::connect(cluster.options(Duration::from_secs(3))).expect("client connects")
}

#[test]
fn exhaustion_full_master_log_answers_no_space_and_keeps_acknowledged_writes() {
    let mut cluster = Cluster::start(0);
    cluster.add_server_with("127.0.0.1:0", &["--memory", "32MiB"]);
    let addr = cluster.servers[0].addr.clone();
    // A deadline far beyond the patience: the typed error must come from the
    // patience, not the deadline.
    let patience = Duration::from_secs(1);
    let client = BlockingClient::connect(ClientOptions {
        no_space_patience: patience,
        ..cluster.options(Duration::from_secs(60))
    })
    .expect("client connects");
    let table = client.create_table("full", 1).expect("create table");

    let (acked, err) = fill(&client, table);
    // The client retried NO_SPACE for its patience, then said which log is full.
    match &err {
        ClientError::NoSpace { server, waited } => {
            assert_eq!(server, &addr, "{err}");
            assert!(*waited >= patience, "gave up after the patience: {err}");
            assert!(err.to_string().contains("is full"), "{err}");
        }
        other => panic!("expected NoSpace after the patience, got {other}"),
    }
    assert!(!acked.is_empty(), "some writes fit before the log was full");
    let refused: u64 = stat(&client, &addr, "no_space_answers")
        .parse()
        .expect("a number");
    assert!(refused > 0, "the server counted its NO_SPACE answers");
    assert_eq!(stat(&client, &addr, "refusing_writes"), "1");
    let status = cluster.cli(&["status"]);
    assert!(
        status
            .ok()
            .contains(&format!("REFUSING WRITES: server 1 ({addr})")),
        "{status:#?}"
    );
    // The CLI says so in one line (a value as large as the filling ones: a
    // small one may still fit).
    let big = String::from_utf8(value(MAX_FILL_WRITES)).expect("ASCII");
    let put = cluster.cli(&["put", "full", "one-more", &big]);
    let line = put.one_line_error();
    assert!(
        line.contains("out of memory") && line.contains(&addr),
        "{line}"
    );

    // Still up, nothing acknowledged lost.
    assert!(cluster.servers[0]
        .proc
        .wait_timeout(Duration::ZERO)
        .is_none());
    client.ping(&addr).expect("the server still answers pings");
    assert_all_readable(&client, table, &acked);

    // Deleting makes room again: the cleaner reclaims the dead objects and writes
    // are accepted once more (a generous deadline: cleaning runs in the background).
    for &i in &acked[..acked.len() / 2] {
        client
            .remove(table, &key(i))
            .expect("deletes are accepted in a full log");
    }
    let patient = BlockingClient::connect(ClientOptions {
        no_space_patience: Duration::from_secs(60),
        ..cluster.options(Duration::from_secs(60))
    })
    .expect("client");
    patient
        .write(table, b"after-cleaning", b"fits again")
        .expect("a write after deletes and cleaning");
    assert_all_readable(&client, table, &acked[acked.len() / 2..]);
    // An accepted write ends the refusals.
    assert_eq!(stat(&client, &addr, "refusing_writes"), "0");
    assert!(
        !cluster.cli(&["status"]).ok().contains("REFUSING WRITES"),
        "status after writes are accepted again"
    );
}

#[test]
fn exhaustion_full_backups_stall_writes_with_retry_and_keep_acknowledged_writes() {
    // Two servers replicating to each other (R = 1), each backup with room for two
    // segment replicas: the masters' logs outgrow the backups.
    let mut cluster = Cluster::start(0);
    let dirs: Vec<String> = (0..2)
        .map(|i| {
            cluster
                .dir
                .path()
                .join(format!("b{i}"))
                .display()
                .to_string()
        })
        .collect();
    for dir in &dirs {
        cluster.add_server_with(
            "127.0.0.1:0",
            &[
                "--memory",
                "96MiB",
                "--replicas",
                "1",
                "--backup-dir",
                dir,
                "--backup-frames",
                "2",
            ],
        );
    }
    let client = short_deadline_client(&cluster);
    let table = client
        .create_table("full-backups", 2)
        .expect("create table");

    let (acked, err) = fill(&client, table);
    assert!(
        matches!(err, ClientError::DeadlineExceeded { .. }),
        "writes wait for durability and time out: {err}"
    );
    assert!(
        !acked.is_empty(),
        "some writes fit before the backups were full"
    );
    let full = cluster
        .servers
        .iter()
        .any(|s| stat(&client, &s.addr, "backup_frames_free") == "0");
    assert!(full, "a backup ran out of frames");

    for s in &mut cluster.servers {
        assert!(
            s.proc.wait_timeout(Duration::ZERO).is_none(),
            "{} exited\n{}",
            s.proc.name,
            s.proc.transcript()
        );
    }
    for s in &cluster.servers {
        client.ping(&s.addr).expect("servers still answer pings");
    }
    // Every acknowledged object reads at once, the newest included. Regression: a
    // read used to wait for the log's newest sync point, which includes the writes
    // that cannot replicate while the backups are full, instead of the object's own
    // end (docs/reliability.md, "Findings").
    assert_all_readable(&client, table, &acked);

    // A new backup gives the masters room: their heads are placed there and every
    // acknowledged write reads back.
    let dir = cluster.dir.path().join("b2").display().to_string();
    cluster.add_server_with(
        "127.0.0.1:0",
        &[
            "--memory",
            "32MiB",
            "--replicas",
            "1",
            "--backup-dir",
            &dir,
            "--backup-frames",
            "16",
        ],
    );
    let patient =
        BlockingClient::connect(cluster.options(Duration::from_secs(60))).expect("client");
    assert_all_readable(&patient, table, &acked);
}

#[test]
fn exhaustion_oversize_requests_are_too_large_and_change_nothing() {
    let mut cluster = Cluster::start(0);
    cluster.add_server("127.0.0.1:0");
    let addr = cluster.servers[0].addr.clone();
    let client = short_deadline_client(&cluster);
    let table = client.create_table("big", 1).expect("create table");
    client.write(table, b"k", b"small").expect("write");

    let huge_value = vec![1u8; (1 << 20) + 1];
    let err = client.write(table, b"k", &huge_value).unwrap_err();
    assert!(matches!(err, ClientError::TooLarge(_)), "{err}");
    let huge_key = vec![2u8; (64 << 10) + 1];
    let err = client.write(table, &huge_key, b"v").unwrap_err();
    assert!(matches!(err, ClientError::TooLarge(_)), "{err}");
    let err = client.read(table, &huge_key).unwrap_err();
    assert!(matches!(err, ClientError::TooLarge(_)), "{err}");

    assert_eq!(client.read(table, b"k").expect("read").0, b"small");
    client.ping(&addr).expect("the server still answers pings");
}

/// Runs `cmd ARGS` and asserts success.
fn sh(cmd: &str, args: &[&str]) {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Unmounts the tmpfs when the test ends, also on a panic.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn exhaustion_backup_disk_too_small_is_refused_at_start_with_a_clear_error() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: cannot mount a small tmpfs; this test runs as root in CI");
        return;
    }
    let cluster = Cluster::start(0);
    let mnt = cluster.dir.path().join("small-disk");
    std::fs::create_dir_all(&mnt).expect("mount point");
    let mnt_arg = mnt.display().to_string();
    sh(
        "mount",
        &["-t", "tmpfs", "-o", "size=20m", "tmpfs", &mnt_arg],
    );
    let _mount = Mount(mnt.clone());
    let backup = mnt.join("backup").display().to_string();
    // Four 8 MiB frames do not fit in 20 MiB: the frames file is allocated up front
    // (posix_fallocate), so the full disk shows now, not when a replica arrives.
    let mut server = spawn_ramstore(
        "server on a small disk",
        &[
            "server",
            "--coordinator",
            cluster.addr(),
            "--listen",
            "127.0.0.1:0",
            "--memory",
            "32MiB",
            "--backup-dir",
            &backup,
            "--backup-frames",
            "4",
        ],
        &[],
    );
    let status = server
        .wait_timeout(READY_TIMEOUT)
        .unwrap_or_else(|| panic!("the server did not exit\n{}", server.transcript()));
    assert!(!status.success(), "{}", server.transcript());
    let transcript = server.transcript();
    assert!(
        transcript.contains("error:") && transcript.to_lowercase().contains("space"),
        "the error names the full disk:\n{transcript}"
    );
    assert!(
        !server
            .stdout_lines()
            .iter()
            .any(|l| l.starts_with("ramstore server ")),
        "it never reported ready:\n{transcript}"
    );
}

/// One RESP reply, as far as these tests need them.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
}

/// Reads one reply (simple string, error, integer or bulk string).
fn read_reply(r: &mut impl BufRead) -> Reply {
    let mut line = String::new();
    let n = r
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("reading a RESP reply (the server did not answer): {e}"));
    assert!(n > 0, "the server closed the connection");
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(1);
    match kind {
        "+" => Reply::Simple(rest.to_string()),
        "-" => Reply::Error(rest.to_string()),
        ":" => Reply::Integer(rest.parse().expect("an integer reply")),
        "$" => {
            let len: i64 = rest.parse().expect("a bulk length");
            if len < 0 {
                return Reply::Bulk(None);
            }
            let mut body = vec![0; len as usize + 2];
            r.read_exact(&mut body).expect("a bulk body");
            body.truncate(len as usize);
            Reply::Bulk(Some(body))
        }
        _ => panic!("unexpected reply line {line:?}"),
    }
}

/// Appends one command as a RESP array of bulk strings.
fn encode_command(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// A Redis connection whose requests are written from another thread, so a long
/// pipeline cannot deadlock against replies the test has not read yet.
struct RespConn {
    stream: TcpStream,
    replies: BufReader<TcpStream>,
}

/// How long any reply may take before the test calls it a hang: far beyond the
/// patience (1 s here), far below "forever".
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

impl RespConn {
    fn connect(port: u16) -> RespConn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to RESP");
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .expect("read timeout");
        let replies = BufReader::new(stream.try_clone().expect("clone stream"));
        RespConn { stream, replies }
    }

    /// Sends `commands` (as one pipeline) and reads one reply per command.
    fn pipeline(&mut self, commands: Vec<Vec<Vec<u8>>>) -> Vec<Reply> {
        let n = commands.len();
        let mut writer = self.stream.try_clone().expect("clone stream");
        let sender = std::thread::spawn(move || {
            let mut buf = Vec::new();
            for c in &commands {
                let args: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
                encode_command(&args, &mut buf);
                if buf.len() > 1 << 20 {
                    writer.write_all(&buf).expect("send pipeline");
                    buf.clear();
                }
            }
            writer.write_all(&buf).expect("send pipeline");
        });
        let replies = (0..n).map(|_| read_reply(&mut self.replies)).collect();
        sender.join().expect("sender thread");
        replies
    }

    fn command(&mut self, args: &[&[u8]]) -> Reply {
        let mut buf = Vec::new();
        encode_command(args, &mut buf);
        self.stream.write_all(&buf).expect("send command");
        read_reply(&mut self.replies)
    }

    /// A field of `INFO memory`.
    fn info_memory(&mut self, field: &str) -> String {
        let Reply::Bulk(Some(text)) = self.command(&[b"INFO", b"memory"]) else {
            panic!("INFO answers a bulk string");
        };
        String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
            .unwrap_or_else(|| panic!("no {field} in INFO memory"))
    }
}

/// Issue 17: a pipelined Redis client filling a small server past its limit gets
/// `-OOM` for the writes that do not fit instead of a hang (the whole pipeline is
/// answered, each refused write after the first without waiting the patience
/// again); deletes still work on the full log; after them writes are accepted
/// again; every acknowledged write reads back.
#[test]
fn exhaustion_resp_pipeline_on_a_full_log_gets_oom_then_recovers_after_deletes() {
    let mut cluster = Cluster::start(0);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    cluster.add_server_with(
        "127.0.0.1:0",
        &[
            "--memory",
            "32MiB",
            "--resp-listen",
            &listen,
            "--no-space-wait-ms",
            "1000",
        ],
    );
    let mut conn = RespConn::connect(port);
    assert_eq!(conn.info_memory("ramstore_refusing_writes"), "0");

    // Twice what 32 MiB can hold, in one pipeline.
    let n = 1_000;
    let sets = (0..n)
        .map(|i| vec![b"SET".to_vec(), key(i), value(i)])
        .collect();
    let replies = conn.pipeline(sets);
    let mut acked = Vec::new();
    let mut oom = Vec::new();
    for (i, r) in replies.iter().enumerate() {
        match r {
            Reply::Simple(s) if s == "OK" => acked.push(i),
            Reply::Error(e) if e.starts_with("OOM command not allowed") => oom.push(i),
            other => panic!("SET {i}: unexpected reply {other:?}"),
        }
    }
    assert!(!acked.is_empty(), "some SETs fit before the log was full");
    assert!(oom.len() > n / 4, "{} of {n} SETs answered OOM", oom.len());
    assert_eq!(conn.info_memory("ramstore_refusing_writes"), "1");
    let answers: u64 = conn
        .info_memory("ramstore_no_space_answers")
        .parse()
        .expect("a number");
    assert!(answers >= oom.len() as u64, "{answers} NO_SPACE answers");

    // Deletes work on the full log.
    let deleted = &acked[..acked.len() / 2];
    let dels = deleted
        .iter()
        .map(|&i| vec![b"DEL".to_vec(), key(i)])
        .collect();
    for (r, &i) in conn.pipeline(dels).iter().zip(deleted) {
        assert_eq!(r, &Reply::Integer(1), "DEL of acknowledged key {i}");
    }

    // The cleaner reclaims the deleted values (in the background: a generous
    // bound), then writes are accepted again.
    wait_until(
        "a SET after the deletes",
        Duration::from_secs(60),
        || match conn.command(&[b"SET", b"after-deletes", b"fits again"]) {
            Reply::Simple(s) if s == "OK" => Some(()),
            Reply::Error(e) if e.starts_with("OOM") => None,
            other => panic!("SET after deletes: {other:?}"),
        },
    );
    assert_eq!(conn.info_memory("ramstore_refusing_writes"), "0");

    // Nothing acknowledged and not deleted was lost.
    let kept = &acked[acked.len() / 2..];
    let gets = kept
        .iter()
        .map(|&i| vec![b"GET".to_vec(), key(i)])
        .collect();
    for (r, &i) in conn.pipeline(gets).iter().zip(kept) {
        assert!(
            r == &Reply::Bulk(Some(value(i))),
            "acknowledged key {i} reads back its value"
        );
    }
    for &i in deleted {
        assert_eq!(
            conn.command(&[b"GET", &key(i)]),
            Reply::Bulk(None),
            "deleted key {i}"
        );
    }
    for &i in &oom {
        assert_eq!(
            conn.command(&[b"EXISTS", &key(i)]),
            Reply::Integer(0),
            "refused key {i}"
        );
    }
}

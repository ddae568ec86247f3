//! Resource exhaustion through real processes (issue 6): a full master log, full
//! backups, oversize requests and a backup disk too small for its frames file are
//! each answered with a clear status (or a clear start-up error), the processes
//! stay up, and every acknowledged write stays readable (DESIGN §1: "a full log
//! answers retry later, never an out-of-memory abort").

mod common;

use std::time::Duration;

use common::{Cluster, Proc, READY_TIMEOUT};
use ramstore_client::{BlockingClient, ClientError};

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
    let client = short_deadline_client(&cluster);
    let table = client.create_table("full", 1).expect("create table");

    let (acked, err) = fill(&client, table);
    // The client retried NO_SPACE until its deadline and says so.
    match &err {
        ClientError::DeadlineExceeded { last_attempt, .. } => assert!(
            last_attempt.to_lowercase().contains("space"),
            "last attempt names the full log: {err}"
        ),
        other => panic!("expected the deadline after NO_SPACE answers, got {other}"),
    }
    assert!(!acked.is_empty(), "some writes fit before the log was full");
    let refused: u64 = stat(&client, &addr, "no_space_answers")
        .parse()
        .expect("a number");
    assert!(refused > 0, "the server counted its NO_SPACE answers");

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
    let patient =
        BlockingClient::connect(cluster.options(Duration::from_secs(60))).expect("client");
    patient
        .write(table, b"after-cleaning", b"fits again")
        .expect("a write after deletes and cleaning");
    assert_all_readable(&client, table, &acked[acked.len() / 2..]);
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
    let mut server = Proc::spawn(
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

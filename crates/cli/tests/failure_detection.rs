//! Failure detection across real processes (R§7.2, R§7.11): servers ping each other
//! at random and the coordinator confirms before declaring a crash. A SIGKILLed
//! server is declared crashed quickly; a SIGSTOPped one once its pings time out, and
//! when it resumes it learns it is a zombie, answers no read, and exits by itself.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{runtime, wait_until, Cluster};
use ramstore_client::BlockingClient;
use ramstore_rpc::{TcpTransport, Transport};
use ramstore_wire::{decode_response, encode_request, RejectRules, Request, Response, Status};

/// Generous bound on detecting a SIGKILLed server (the goal is ≤ 500 ms, measured
/// by `scripts/bench-detection`; test machines are noisy).
const KILL_DETECTION_BOUND: Duration = Duration::from_secs(3);
/// How long anything else that needs the cluster to react may take.
const PATIENCE: Duration = Duration::from_secs(15);
/// The exit code of a server that learned it is a zombie (`ZOMBIE_EXIT_CODE`).
const ZOMBIE_EXIT_CODE: i32 = 4;

/// Server `id`'s state (`up`, `crashed`, ...) in the coordinator's server list.
fn server_state(client: &BlockingClient, coordinator: &str, id: u64) -> Option<String> {
    let stats: BTreeMap<String, String> = client
        .server_stats(coordinator)
        .ok()?
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let entry = stats.get(&format!("server.{id}"))?;
    entry.split_whitespace().nth(1).map(str::to_string)
}

#[test]
fn sigkill_server_is_declared_crashed_within_bound() {
    let mut cluster = Cluster::start(4);
    let client = cluster.client();
    let ids: Vec<u64> = cluster.servers.iter().map(|s| s.id).collect();
    // Every server has the full list (so they ping each other) before the crash.
    std::thread::sleep(Duration::from_millis(500));
    let victim = 1;
    let victim_id = ids[victim];
    let killed = Instant::now();
    cluster.servers[victim].proc.kill();
    wait_until("the killed server to be declared crashed", PATIENCE, || {
        (server_state(&client, cluster.addr(), victim_id).as_deref() == Some("crashed"))
            .then_some(())
    });
    let detected = killed.elapsed();
    eprintln!("SIGKILL detected in {} ms", detected.as_millis());
    assert!(
        detected < KILL_DETECTION_BOUND,
        "detection took {detected:?}\n{}",
        cluster.coordinator.proc.transcript()
    );
    // Nobody else was taken down with it.
    for (i, id) in ids.iter().enumerate().filter(|(i, _)| *i != victim) {
        assert_eq!(
            server_state(&client, cluster.addr(), *id).as_deref(),
            Some("up"),
            "server {i}"
        );
    }
}

/// Sends one Read of `key` straight to `addr` (no client retries) and returns the
/// value if it was served.
fn raw_read(addr: &str, table_id: u64, key: &[u8]) -> Result<Vec<u8>, String> {
    let mut frame = Vec::new();
    let read = Request::Read {
        table_id,
        rules: RejectRules::default(),
        key,
    };
    encode_request(0, &read, &mut frame).expect("encodes");
    let bytes = runtime()
        .block_on(TcpTransport::new().call(addr, frame, Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    match decode_response(&bytes) {
        Ok((h, Response::Read { value, .. })) if h.status == Status::Ok => Ok(value.to_vec()),
        Ok((h, other)) => Err(format!("{:?}: {other:?}", h.status)),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn sigstop_server_is_declared_crashed_and_exits_after_sigcont() {
    let mut cluster = Cluster::start(0);
    for i in 0..3 {
        let dir = cluster.dir.path().join(format!("backup-{i}"));
        let dir = dir.to_str().expect("utf-8 path").to_string();
        cluster.add_server_with(
            "127.0.0.1:0",
            &[
                "--backup-dir",
                &dir,
                "--backup-frames",
                "4",
                "--replicas",
                "1",
            ],
        );
    }
    let client = cluster.client();
    let table = client.create_table("t", 1).expect("create table");
    client.write(table, b"k", b"v").expect("write");
    let owner_id = client
        .tablet_map()
        .expect("tablet map")
        .into_iter()
        .find(|t| t.table_id == table)
        .expect("a tablet")
        .server_id;
    let victim = cluster
        .servers
        .iter()
        .position(|s| s.id == owner_id)
        .expect("the owner is one of ours");
    let victim_addr = cluster.servers[victim].addr.clone();
    assert_eq!(raw_read(&victim_addr, table, b"k"), Ok(b"v".to_vec()));

    // Hung, not dead: its pings time out and it is declared crashed.
    cluster.servers[victim].proc.signal(libc::SIGSTOP);
    wait_until(
        "the stopped server to be declared crashed",
        PATIENCE,
        || {
            (server_state(&client, cluster.addr(), owner_id).as_deref() == Some("crashed"))
                .then_some(())
        },
    );
    // Long enough that a resumed server must check its status before serving.
    std::thread::sleep(Duration::from_secs(4));

    // Resumed, it is a zombie: a read sent right away is refused or unanswered, and
    // the process exits by itself (R§7.11).
    cluster.servers[victim].proc.signal(libc::SIGCONT);
    let read = raw_read(&victim_addr, table, b"k");
    assert!(read.is_err(), "a zombie served a read: {read:?}");
    let status = cluster.servers[victim]
        .proc
        .wait_timeout(PATIENCE)
        .unwrap_or_else(|| {
            panic!(
                "the zombie did not exit\n{}",
                cluster.servers[victim].proc.transcript()
            )
        });
    assert_eq!(
        status.code(),
        Some(ZOMBIE_EXIT_CODE),
        "{}",
        cluster.servers[victim].proc.transcript()
    );
    assert!(
        cluster.servers[victim]
            .proc
            .transcript()
            .contains("declared this server crashed"),
        "{}",
        cluster.servers[victim].proc.transcript()
    );
    let after = raw_read(&victim_addr, table, b"k");
    assert!(after.is_err(), "an exited zombie answered: {after:?}");
    // The others are still up.
    for s in cluster.servers.iter().filter(|s| s.id != owner_id) {
        assert_eq!(
            server_state(&client, cluster.addr(), s.id).as_deref(),
            Some("up")
        );
    }
}

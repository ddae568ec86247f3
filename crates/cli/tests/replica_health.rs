//! Replica health across real processes (issue 17, R§8): replicas a live master
//! still needs are freed behind its back by BackupFree RPCs sent straight to its
//! backups — a closed segment's on both backups, and the open head's on one —
//! and the master re-creates them from memory: writes and reads go on, and a
//! later SIGKILL of the master is recovered with every acknowledged object.
//!
//! Three servers with R = 2: the master's two replicas of a segment can only be
//! on the two other servers, so each re-created replica lands on the very backup
//! that lost it. A fourth joins before the crash, so the recovery masters (two
//! left) can make the recovered data durable on R = 2 backups besides themselves.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{run_cli, runtime, wait_until, Cluster};
use ramstore_backup::{BackupClient, BackupReplica};
use ramstore_client::{BlockingClient, ClientOptions};
use ramstore_rpc::TcpTransport;

/// How long a condition that needs the cluster to react may take on a slow
/// machine (nothing is timed; this only bounds a hang).
const PATIENCE: Duration = Duration::from_secs(120);
/// Bytes of each value: 120 of them fill more than one 8 MiB segment, so the
/// master's log has a closed segment and an open head.
const VALUE_BYTES: usize = 100_000;

fn backup_client() -> BackupClient {
    BackupClient::new(Arc::new(TcpTransport::new())).with_rpc_deadline(Duration::from_secs(20))
}

fn stats(client: &BlockingClient, addr: &str) -> BTreeMap<String, String> {
    client
        .server_stats(addr)
        .unwrap_or_else(|e| panic!("stats of {addr}: {e}"))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(stats: &BTreeMap<String, String>, key: &str) -> u64 {
    stats
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("numeric {key} in {stats:#?}"))
}

/// Server `id`'s state word in the coordinator's list.
fn state_of(client: &BlockingClient, cluster: &Cluster, id: u64) -> String {
    stats(client, cluster.addr())
        .get(&format!("server.{id}"))
        .and_then(|e| e.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_default()
}

fn value(i: u32) -> Vec<u8> {
    let mut v = vec![(i % 251) as u8; VALUE_BYTES];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

/// The replicas of `master` each backup offers.
fn replicas_of(
    rt: &tokio::runtime::Runtime,
    client: &BackupClient,
    backups: &[String],
    master: u64,
) -> Vec<Vec<BackupReplica>> {
    rt.block_on(async {
        let mut all = Vec::new();
        for addr in backups {
            all.push(
                client
                    .get_replicas(addr, master)
                    .await
                    .expect("replica list"),
            );
        }
        all
    })
}

/// Starts server number `i` (R = 2, a backup, replica checks every 50 ms).
fn add_server(cluster: &mut Cluster, i: usize) {
    let dir = cluster.dir.path().join(format!("server-{i}"));
    let dir = dir.display().to_string();
    cluster.add_server_with(
        "127.0.0.1:0",
        &[
            "--replicas",
            "2",
            "--backup-dir",
            &dir,
            "--backup-frames",
            "24",
            "--memory",
            "96MiB",
            "--replica-check-interval-ms",
            "50",
        ],
    );
}

#[test]
fn replicas_freed_behind_a_live_masters_back_are_recreated_and_recovered() {
    let mut cluster = Cluster::start_with_coordinator_args(0, &[]);
    for i in 0..3 {
        add_server(&mut cluster, i);
    }
    let c = BlockingClient::connect(ClientOptions {
        operation_deadline: Duration::from_secs(60),
        ..ClientOptions::new(cluster.addr())
    })
    .expect("client connects");
    let table = c.create_table("t", 1).unwrap();
    let owner = c
        .tablet_map()
        .unwrap()
        .iter()
        .find(|t| t.table_id == table)
        .map(|t| t.server_id)
        .expect("the table has an owner");
    let master = cluster
        .servers
        .iter()
        .position(|s| s.id == owner)
        .expect("the owner is one of ours");
    let master_addr = cluster.servers[master].addr.clone();
    let backups: Vec<String> = cluster
        .servers
        .iter()
        .filter(|s| s.id != owner)
        .map(|s| s.addr.clone())
        .collect();
    let mut acknowledged: BTreeMap<Vec<u8>, (Vec<u8>, u64)> = BTreeMap::new();
    for i in 0..120u32 {
        let key = format!("before-{i}").into_bytes();
        let version = c.write(table, &key, &value(i)).unwrap();
        acknowledged.insert(key, (value(i), version));
    }

    // A closed segment both backups hold, and the head one of them holds open.
    let rt = runtime();
    let client = backup_client();
    let held = replicas_of(&rt, &client, &backups, owner);
    let closed = held[0]
        .iter()
        .filter(|r| r.closed && held[1].iter().any(|o| o.segment_id == r.segment_id))
        .map(|r| r.segment_id)
        .min()
        .unwrap_or_else(|| panic!("a closed segment on both backups: {held:?}"));
    let head = held[1]
        .iter()
        .filter(|r| !r.closed)
        .map(|r| r.segment_id)
        .max()
        .unwrap_or_else(|| panic!("an open head on the second backup: {held:?}"));
    rt.block_on(async {
        for addr in &backups {
            client.free(addr, owner, closed).await.expect("free");
        }
        client.free(&backups[1], owner, head).await.expect("free");
    });
    let after = replicas_of(&rt, &client, &backups, owner);
    assert!(
        after.iter().flatten().all(|r| r.segment_id != closed),
        "segment {closed} is on no backup now: {after:?}"
    );

    // Writes and reads go on (each waits at most the client's deadline).
    for i in 0..40u32 {
        let key = format!("after-{i}").into_bytes();
        let version = c.write(table, &key, &value(1000 + i)).unwrap();
        acknowledged.insert(key, (value(1000 + i), version));
        let (read, read_version) = c.read(table, b"before-0").unwrap();
        assert!(read == value(0) && read_version == acknowledged[&b"before-0"[..]].1);
    }

    // The closed segment is on both backups again, closed; the head's replica is
    // back on the second backup (the old head was moved and closed, R§8).
    wait_until("the freed replicas to be re-created", PATIENCE, || {
        let held = replicas_of(&rt, &client, &backups, owner);
        let on_both = |id: u64| {
            held.iter()
                .all(|b| b.iter().any(|r| r.segment_id == id && r.closed))
        };
        (on_both(closed) && on_both(head)).then_some(())
    });
    let master_stats = stats(&c, &master_addr);
    assert!(
        num(&master_stats, "replicas_found_lost") >= 3,
        "{master_stats:#?}"
    );
    assert!(
        num(&master_stats, "replica_checks") >= 1,
        "{master_stats:#?}"
    );

    // A crash of the master now loses nothing acknowledged (R§7).
    add_server(&mut cluster, 3);
    let victim = cluster.servers.remove(master);
    drop(victim); // SIGKILL
    let deadline = Instant::now() + PATIENCE;
    while state_of(&c, &cluster, owner) != "removed" {
        if Instant::now() > deadline {
            eprintln!("{}", cluster.coordinator.proc.transcript());
            for s in &cluster.servers {
                eprintln!("{}", s.proc.transcript());
            }
            panic!("timed out waiting for server {owner} to be recovered");
        }
        thread::sleep(Duration::from_millis(20));
    }
    for (key, (value, version)) in &acknowledged {
        let (read, read_version) = c
            .read(table, key)
            .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(key)));
        assert!(
            read == *value && read_version == *version,
            "{}: version {read_version}, acknowledged {version}",
            String::from_utf8_lossy(key)
        );
    }
}

/// A pace outside the stated range is refused before anything starts, with the
/// range in the message (clap's usage error, exit code 2).
#[test]
fn replica_check_interval_outside_its_range_is_refused() {
    for bad in ["5", "3600001", "soon"] {
        let out = run_cli(
            &[
                "server",
                "--coordinator",
                "127.0.0.1:1",
                "--replica-check-interval-ms",
                bad,
            ],
            &[],
        );
        assert_eq!(out.code, Some(2), "{bad}: {out:#?}");
        assert!(
            out.stderr.contains("0 (off) or 10 to 3600000 milliseconds"),
            "{bad}: {out:#?}"
        );
    }
}

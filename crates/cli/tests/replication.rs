//! Replication across real processes on 127.0.0.1 (issue 4): masters replicate
//! their logs to R backups and acknowledge a write only once all R hold it; a lost
//! backup's replicas are re-created on another; a restarted backup keeps or frees
//! the replicas it finds on disk by their master's state; full backups slow writes
//! down instead of failing them; a corrupted replica on disk is never offered.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{runtime, wait_until, Cluster, Server};
use ramstore_backup::{BackupClient, BackupReplica, BackupWriteFlags};
use ramstore_client::BlockingClient;
use ramstore_rpc::TcpTransport;

/// Bytes of a log segment (and of a backup frame's data area).
const SEGMENT_BYTES: u64 = 8 << 20;
/// Bytes of metadata after each frame's data area in `replicas.frames`.
const FRAME_METADATA_BYTES: u64 = 4096;
/// Frames of every backup these tests start (each preallocates 8 MiB a frame).
const FRAMES: &str = "16";
/// How long a condition that needs the cluster to react may take on a slow machine.
const PATIENCE: Duration = Duration::from_secs(30);

fn backup_client() -> BackupClient {
    BackupClient::new(Arc::new(TcpTransport::new())).with_rpc_deadline(Duration::from_secs(20))
}

/// A server's (or the coordinator's) GetServerStats lines as a map.
fn stats(client: &BlockingClient, addr: &str) -> BTreeMap<String, String> {
    client
        .server_stats(addr)
        .unwrap_or_else(|e| panic!("stats of {addr}: {e}"))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[track_caller]
fn num(stats: &BTreeMap<String, String>, key: &str) -> u64 {
    stats
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("numeric {key} in {stats:#?}"))
}

/// Server `id`'s state (`up`, `crashed`, ...) in the coordinator's server list.
fn server_state(client: &BlockingClient, coordinator: &str, id: u64) -> Option<String> {
    let s = stats(client, coordinator);
    let entry = s.get(&format!("server.{id}"))?;
    entry.split_whitespace().nth(1).map(str::to_string)
}

/// The end of every server's output, for failure messages.
fn diagnostics(cluster: &Cluster) -> String {
    cluster
        .servers
        .iter()
        .map(|s| {
            let t = s.proc.transcript();
            let cut = t.len().saturating_sub(6000);
            let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(0);
            format!("=== {} ({}) ===\n{}", s.proc.name, s.addr, &t[cut..])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A backup directory under the cluster's temporary directory.
fn backup_dir(cluster: &Cluster, name: &str) -> String {
    cluster
        .dir
        .path()
        .join(name)
        .to_str()
        .expect("UTF-8 temp path")
        .to_string()
}

/// Starts a storage server with a backup in `dir` and `more` arguments; returns its
/// index in `cluster.servers`.
fn add_backup_server(cluster: &mut Cluster, listen: &str, dir: &str, more: &[&str]) -> usize {
    let mut extra = vec!["--backup-dir", dir, "--backup-frames", FRAMES];
    extra.extend_from_slice(more);
    cluster.add_server_with(listen, &extra);
    cluster.servers.len() - 1
}

/// The server owning the only tablet of `table`.
fn owner_of(client: &BlockingClient, table: u64) -> u64 {
    let tablets: Vec<_> = client
        .tablet_map()
        .expect("tablet map")
        .into_iter()
        .filter(|t| t.table_id == table)
        .collect();
    assert_eq!(tablets.len(), 1, "{tablets:?}");
    tablets[0].server_id
}

fn value_of(i: usize, len: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(len, (i % 251) as u8);
    v
}

/// Reads back every acknowledged write: the value written, at the version the
/// write was acknowledged with.
fn check_acknowledged(client: &BlockingClient, table: u64, acked: &[(usize, u64)], len: usize) {
    for &(i, version) in acked {
        let key = format!("key-{i}");
        let (value, v) = client
            .read(table, key.as_bytes())
            .unwrap_or_else(|e| panic!("acknowledged {key} (version {version}) is readable: {e}"));
        assert_eq!(v, version, "version of acknowledged {key}");
        assert!(value == value_of(i, len), "value of acknowledged {key}");
    }
}

/// A thread writing `key-0`, `key-1`, ... (each once) until stopped, recording
/// every acknowledged (index, version) and every error.
struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(usize, u64)>>>,
    handle: Option<thread::JoinHandle<Vec<String>>>,
}

impl Writer {
    fn start(client: BlockingClient, table: u64, len: usize) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (s, a) = (stop.clone(), acked.clone());
        let handle = thread::spawn(move || {
            let mut errors = Vec::new();
            let mut i = 0;
            while !s.load(Ordering::Relaxed) {
                let key = format!("key-{i}");
                match client.write(table, key.as_bytes(), &value_of(i, len)) {
                    Ok(version) => a.lock().unwrap().push((i, version)),
                    Err(e) => errors.push(format!("{key}: {e}")),
                }
                i += 1;
            }
            errors
        });
        Writer {
            stop,
            acked,
            handle: Some(handle),
        }
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Stops the thread; every acknowledged write and every error.
    fn finish(mut self) -> (Vec<(usize, u64)>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let errors = self
            .handle
            .take()
            .expect("running")
            .join()
            .expect("writer thread");
        let acked = std::mem::take(&mut *self.acked.lock().unwrap());
        (acked, errors)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The segment ids of `master`'s replicas the backup at `addr` offers.
fn replicas_on(
    rt: &tokio::runtime::Runtime,
    backups: &BackupClient,
    addr: &str,
    master: u64,
) -> Vec<BackupReplica> {
    rt.block_on(backups.get_replicas(addr, master))
        .unwrap_or_else(|e| panic!("replicas of master {master} on {addr}: {e}"))
}

#[test]
fn backup_crash_during_writes_keeps_writes_acknowledged_and_recreates_replicas() {
    const VALUE: usize = 8 * 1024;
    let mut cluster = Cluster::start(0);
    let dirs: Vec<String> = (0..4)
        .map(|i| backup_dir(&cluster, &format!("backup-{i}")))
        .collect();
    for dir in &dirs[..3] {
        add_backup_server(&mut cluster, "127.0.0.1:0", dir, &["--replicas", "2"]);
    }
    let client = cluster.client();
    let table = client.create_table("t", 1).expect("create table");
    let owner_id = owner_of(&client, table);
    let owner = cluster
        .servers
        .iter()
        .position(|s| s.id == owner_id)
        .expect("the owner is one of ours");
    let victim = (0..3).find(|&i| i != owner).expect("a backup-only server");
    let survivor = (0..3)
        .find(|&i| i != owner && i != victim)
        .expect("the other backup");
    let owner_addr = cluster.servers[owner].addr.clone();
    let survivor_addr = cluster.servers[survivor].addr.clone();
    let victim_id = cluster.servers[victim].id;

    // More than a segment, so closed segments as well as the head lose a replica.
    let writer = Writer::start(cluster.client(), table, VALUE);
    let segment_writes = (SEGMENT_BYTES as usize) / VALUE;
    wait_until("writes before the crash", PATIENCE, || {
        (writer.count() > segment_writes + segment_writes / 2).then_some(())
    });
    cluster.servers[victim].proc.kill();
    cluster.wait_until(
        "the coordinator to declare the backup crashed",
        PATIENCE,
        || {
            (server_state(&client, cluster.addr(), victim_id).as_deref() == Some("crashed"))
                .then_some(())
        },
    );

    // R = 2 but only one backup is left: nothing is acknowledged (writes wait
    // and are retried). Everything made durable before the crash was answered long
    // ago, so the count stays put over this window.
    let stalled = writer.count();
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        writer.count(),
        stalled,
        "writes were acknowledged with only one backup up for R=2"
    );

    let new = add_backup_server(&mut cluster, "127.0.0.1:0", &dirs[3], &["--replicas", "2"]);
    let new_addr = cluster.servers[new].addr.clone();
    let deadline = std::time::Instant::now() + PATIENCE;
    while writer.count() <= stalled + 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "writes are not acknowledged again ({} acknowledged, {stalled} before the new backup)\nmaster: {:#?}\n{}",
            writer.count(),
            stats(&client, &owner_addr),
            diagnostics(&cluster)
        );
        thread::sleep(Duration::from_millis(10));
    }
    let (acked, errors) = writer.finish();
    assert!(errors.is_empty(), "writes failed: {errors:#?}");
    check_acknowledged(&client, table, &acked, VALUE);

    let master = stats(&client, &owner_addr);
    assert_eq!(master["durability"], "R=2", "{master:#?}");
    assert!(num(&master, "rereplications") > 0, "{master:#?}");

    // Every segment is on R live backups again: whatever the survivor holds closed
    // (it held a replica of every segment) the new backup holds too.
    let rt = runtime();
    let backups = backup_client();
    wait_until("the lost replicas to be re-created", PATIENCE, || {
        let on_new: BTreeSet<u64> = replicas_on(&rt, &backups, &new_addr, owner_id)
            .iter()
            .map(|r| r.segment_id)
            .collect();
        let closed_on_survivor: BTreeSet<u64> =
            replicas_on(&rt, &backups, &survivor_addr, owner_id)
                .iter()
                .filter(|r| r.closed)
                .map(|r| r.segment_id)
                .collect();
        (!closed_on_survivor.is_empty() && closed_on_survivor.is_subset(&on_new)).then_some(())
    });
    let backup = stats(&client, &new_addr);
    assert!(num(&backup, "backup_replicas") > 0, "{backup:#?}");
    for server in &mut cluster.servers {
        if server.id != victim_id {
            assert!(
                server.proc.wait_timeout(Duration::ZERO).is_none(),
                "{} exited\n{}",
                server.proc.name,
                server.proc.transcript()
            );
        }
    }
}

/// Writes a small closed replica of (`master`, `segment`) to the backup at `addr`.
fn put_replica(
    rt: &tokio::runtime::Runtime,
    backups: &BackupClient,
    addr: &str,
    master: u64,
    segment: u64,
) {
    let flags = BackupWriteFlags {
        open: true,
        close: true,
        atomic: false,
        reserve: false,
    };
    let bytes = format!("segment {segment} of master {master}").into_bytes();
    rt.block_on(backups.write(addr, master, segment, 0, &bytes, flags))
        .unwrap_or_else(|e| panic!("replica {master}/{segment} on {addr}: {e}"));
}

fn segment_ids(replicas: &[BackupReplica]) -> Vec<u64> {
    replicas.iter().map(|r| r.segment_id).collect()
}

/// Kills `cluster.servers[i]` and starts a new process with the same arguments on
/// the same address (a new server id; the coordinator marks the old id removed).
fn restart_server(cluster: &mut Cluster, i: usize, extra: &[&str]) {
    let addr = cluster.servers[i].addr.clone();
    cluster.servers[i].proc.kill();
    cluster.servers[i] =
        Server::start(cluster.addr(), &addr, extra).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cluster.servers[i].addr, addr);
}

#[test]
fn backup_restart_keeps_replicas_by_master_state() {
    // No server is declared crashed here: a server restarted on its address
    // replaces its old entry, which becomes removed.
    let mut cluster = Cluster::start_with_coordinator_args(0, &["--failure-timeout-ms", "600000"]);
    // Masters whose replicas the backup holds (DRAM-only themselves, so they never
    // replicate or free anything: only the backup's retention acts on the replicas).
    let up = cluster.add_server("127.0.0.1:0").id;
    let removed = cluster.add_server("127.0.0.1:0").id;
    let removed_index = cluster.servers.len() - 1;
    let unknown = 1_000_000;
    let dir = backup_dir(&cluster, "backup");
    let b = add_backup_server(&mut cluster, "127.0.0.1:0", &dir, &[]);
    let old_backup_id = cluster.servers[b].id;
    let addr = cluster.servers[b].addr.clone();

    let rt = runtime();
    let backups = backup_client();
    for master in [up, removed, unknown] {
        for segment in 1..=3 {
            put_replica(&rt, &backups, &addr, master, segment);
        }
    }

    // The backup crashes; while it is down one master is replaced (its old id is
    // removed); then the backup comes back on the same directory and address.
    cluster.servers[b].proc.kill();
    restart_server(&mut cluster, removed_index, &[]);
    let backup_extra = ["--backup-dir", dir.as_str(), "--backup-frames", FRAMES];
    restart_server(&mut cluster, b, &backup_extra);
    assert_ne!(cluster.servers[b].id, old_backup_id);

    let client = cluster.client();
    // The first server list has reached the backup once it fences its own old id
    // and the replaced master (both removed).
    wait_until("the backup to apply a server list", PATIENCE, || {
        let s = stats(&client, &addr);
        (num(&s, "backup_fenced_masters") >= 2 && num(&s, "backup_retention_frees") >= 3)
            .then_some(())
    });
    let s = stats(&client, &addr);
    assert_eq!(num(&s, "backup_retention_frees"), 3, "{s:#?}");
    assert_eq!(num(&s, "backup_replicas"), 6, "{s:#?}");
    assert_eq!(
        segment_ids(&replicas_on(&rt, &backups, &addr, up)),
        [1, 2, 3],
        "an up master's replicas are kept"
    );
    assert_eq!(
        segment_ids(&replicas_on(&rt, &backups, &addr, removed)),
        [0u64; 0],
        "a removed master's replicas are freed"
    );
    assert_eq!(
        segment_ids(&replicas_on(&rt, &backups, &addr, unknown)),
        [1, 2, 3],
        "replicas of a master the list does not know are kept"
    );
    let kept = rt
        .block_on(backups.read_replica(&addr, up, 2))
        .expect("a kept replica is readable");
    assert!(kept.closed);
    assert_eq!(
        &kept.bytes[..],
        format!("segment 2 of master {up}").as_bytes()
    );

    // A later list decides again: once the up master is replaced too, its replicas
    // found at start-up are freed.
    let up_index = cluster
        .servers
        .iter()
        .position(|s| s.id == up)
        .expect("the up master");
    restart_server(&mut cluster, up_index, &[]);
    wait_until(
        "the replaced master's replicas to be freed",
        PATIENCE,
        || (num(&stats(&client, &addr), "backup_retention_frees") >= 6).then_some(()),
    );
    assert_eq!(
        segment_ids(&replicas_on(&rt, &backups, &addr, up)),
        [0u64; 0]
    );
    let s = stats(&client, &addr);
    assert_eq!(num(&s, "backup_retention_frees"), 6, "{s:#?}");
    assert_eq!(num(&s, "backup_replicas"), 3, "{s:#?}");
}

/// `servers` servers with R = 1 whose backups keep at most `buffers` replicas
/// open; 28 MiB of 1 MiB values (several segments per master) written one by one
/// into a table spread over all of them: every write succeeds and reads back, and
/// no server exits.
fn writes_through_small_backup_buffers(buffers: &str, servers: usize) {
    const VALUE: usize = 1 << 20;
    const WRITES: usize = 28;
    let mut cluster = Cluster::start(0);
    for i in 0..servers {
        let dir = backup_dir(&cluster, &format!("backup-{i}"));
        add_backup_server(
            &mut cluster,
            "127.0.0.1:0",
            &dir,
            &["--replicas", "1", "--backup-open-buffers", buffers],
        );
    }
    let client =
        BlockingClient::connect(cluster.options(Duration::from_secs(60))).expect("client connects");
    let table = client
        .create_table("big", servers as u32)
        .expect("create table");
    let mut acked = Vec::new();
    for i in 0..WRITES {
        let key = format!("key-{i}");
        let version = client
            .write(table, key.as_bytes(), &value_of(i, VALUE))
            .unwrap_or_else(|e| {
                panic!(
                    "write {i} of {WRITES} fails: {e}\n{}",
                    diagnostics(&cluster)
                )
            });
        acked.push((i, version));
    }
    check_acknowledged(&client, table, &acked, VALUE);
    for server in &mut cluster.servers {
        assert!(
            server.proc.wait_timeout(Duration::ZERO).is_none(),
            "{} exited\n{}",
            server.proc.name,
            server.proc.transcript()
        );
        let s = stats(&client, &server.addr);
        assert_eq!(s["backup_open_buffers_max"], buffers, "{s:#?}");
    }
}

/// Three masters share backups with the fewest open buffers allowed (2): heads
/// of different masters compete for them, a full backup answers NO_SPACE and the
/// master tries again later or elsewhere (R§7.1) — slower writes, no failures.
#[test]
fn full_backup_buffers_give_back_pressure_not_failure() {
    writes_through_small_backup_buffers("2", 3);
}

/// A master's only backup with 2 open buffers: enough for a head transition
/// (the next head opens before the last one closes, R§7.4).
#[test]
fn two_backup_buffers_suffice_for_a_head_transition() {
    writes_through_small_backup_buffers("2", 2);
}

/// Flips one byte of the frames file at `offset`.
fn flip_byte(path: &Path, offset: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open the frames file");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).expect("read a byte");
    b[0] ^= 0x5a;
    f.write_all_at(&b, offset).expect("write a byte");
}

/// The frame of `frames` whose data area starts with `prefix`.
fn frame_holding(frames: &Path, count: u64, prefix: &[u8]) -> u64 {
    let f = std::fs::File::open(frames).expect("open the frames file");
    let found: Vec<u64> = (0..count)
        .filter(|&frame| {
            let mut buf = vec![0u8; prefix.len()];
            f.read_exact_at(&mut buf, frame * (SEGMENT_BYTES + FRAME_METADATA_BYTES))
                .expect("read a frame");
            buf == prefix
        })
        .collect();
    assert_eq!(found.len(), 1, "exactly one frame holds the replica");
    found[0]
}

#[test]
fn corrupt_frame_is_detected_and_never_used() {
    const VALUE: usize = 1 << 20;
    let mut cluster = Cluster::start(0);
    let dir = backup_dir(&cluster, "backup");
    let b = add_backup_server(&mut cluster, "127.0.0.1:0", &dir, &[]);
    let backup_addr = cluster.servers[b].addr.clone();
    // A master (DRAM-only otherwise) whose only possible backup is `b`.
    cluster.add_server_with("127.0.0.1:0", &["--replicas", "1"]);
    let master = cluster.servers.len() - 1;
    let master_id = cluster.servers[master].id;
    let client = cluster.client();
    // Create the table on the master: `b` is the least loaded too, so make one
    // table per server and use the master's.
    let tables: Vec<u64> = (0..2)
        .map(|i| client.create_table(&format!("t{i}"), 1).expect("create"))
        .collect();
    let table = *tables
        .iter()
        .find(|&&t| owner_of(&client, t) == master_id)
        .expect("a table on the master");
    // Two and a half segments: at least two replicas get closed (on disk).
    let mut acked = Vec::new();
    for i in 0..20 {
        let v = client
            .write(table, format!("key-{i}").as_bytes(), &value_of(i, VALUE))
            .expect("write");
        acked.push((i, v));
    }
    check_acknowledged(&client, table, &acked, VALUE);

    let rt = runtime();
    let backups = backup_client();
    let closed: Vec<BackupReplica> = replicas_on(&rt, &backups, &backup_addr, master_id)
        .into_iter()
        .filter(|r| r.closed)
        .collect();
    assert!(closed.len() >= 2, "{closed:?}");
    let bytes: Vec<Vec<u8>> = closed
        .iter()
        .map(|r| {
            rt.block_on(backups.read_replica(&backup_addr, master_id, r.segment_id))
                .expect("read a closed replica")
                .bytes
                .to_vec()
        })
        .collect();

    // The master crashes first (its replicas are now what recovery would read),
    // then the backup; one closed replica gets a flipped byte in the middle.
    cluster.servers[master].proc.kill();
    cluster.servers[b].proc.kill();
    let frames: PathBuf = Path::new(&dir).join("replicas.frames");
    let (victim, intact) = (&closed[0], &closed[1]);
    let frame = frame_holding(&frames, FRAMES.parse().unwrap(), &bytes[0][..64 * 1024]);
    flip_byte(
        &frames,
        frame * (SEGMENT_BYTES + FRAME_METADATA_BYTES) + u64::from(victim.length) / 2,
    );

    let backup_extra = ["--backup-dir", dir.as_str(), "--backup-frames", FRAMES];
    restart_server(&mut cluster, b, &backup_extra);
    let offered = replicas_on(&rt, &backups, &backup_addr, master_id);
    assert!(
        !offered.iter().any(|r| r.segment_id == victim.segment_id),
        "the corrupt replica {} is offered: {offered:?}",
        victim.segment_id
    );
    assert!(offered.contains(intact), "{offered:?}");
    assert!(
        rt.block_on(backups.read_replica(&backup_addr, master_id, victim.segment_id))
            .is_err(),
        "the corrupt replica can be read"
    );
    let again = rt
        .block_on(backups.read_replica(&backup_addr, master_id, intact.segment_id))
        .expect("the intact replica is readable");
    assert!(again.closed);
    assert!(again.bytes == bytes[1], "the intact replica is byte-exact");
    // The restart reported the damage.
    wait_until("the restart to report the corrupt frame", PATIENCE, || {
        let log = cluster.servers[b].proc.transcript();
        log.contains("backup frame held nothing usable")
            .then_some(())
    });
}

/// `servers` servers, each with a backup and R = 1, under a coordinator that never
/// declares a server crashed (a restarted server replaces its old entry), and a
/// table `t` of span 1. Backups sync (fsync), so an open head's replica is on disk
/// when a backup dies and the restarted backup still holds it. Returns the
/// cluster, the backup directories, the table, and the owner's index and id.
fn restart_cluster(servers: usize) -> (Cluster, Vec<String>, u64, usize, u64) {
    let mut cluster = Cluster::start_with_coordinator_args(0, &["--failure-timeout-ms", "600000"]);
    let dirs: Vec<String> = (0..servers)
        .map(|i| backup_dir(&cluster, &format!("backup-{i}")))
        .collect();
    for dir in &dirs {
        // `add_backup_server` gives the directory and frames itself.
        add_backup_server(&mut cluster, "127.0.0.1:0", dir, &restart_args(dir)[4..]);
    }
    let client = cluster.client();
    let table = client.create_table("t", 1).expect("create table");
    let owner_id = owner_of(&client, table);
    let master = cluster
        .servers
        .iter()
        .position(|s| s.id == owner_id)
        .expect("the owner is one of ours");
    (cluster, dirs, table, master, owner_id)
}

/// The arguments of a server of [`restart_cluster`] on backup directory `dir`.
fn restart_args(dir: &str) -> [&str; 8] {
    [
        "--backup-dir",
        dir,
        "--backup-frames",
        FRAMES,
        "--replicas",
        "1",
        "--backup-sync",
        "fsync",
    ]
}

#[test]
fn backup_restart_under_a_live_master_lets_its_writes_continue() {
    const VALUE: usize = 1 << 20;
    let (mut cluster, dirs, table, master, owner_id) = restart_cluster(2);
    let client = cluster.client();
    // The master's only backup.
    let b = 1 - master;
    let write = |i: usize| {
        client
            .write(table, format!("key-{i}").as_bytes(), &value_of(i, VALUE))
            .map(|v| (i, v))
    };
    // Closed replicas and an open head on the backup.
    let mut acked: Vec<(usize, u64)> = (0..20).map(|i| write(i).expect("write")).collect();

    restart_server(&mut cluster, b, &restart_args(&dirs[b]));
    // The master has the server list showing the backup's old id removed once its
    // own backup fences that id (both act on the same list).
    let master_addr = cluster.servers[master].addr.clone();
    wait_until("the master to learn of the restart", PATIENCE, || {
        (num(&stats(&client, &master_addr), "backup_fenced_masters") >= 1).then_some(())
    });
    for i in 20..30 {
        acked.push(write(i).unwrap_or_else(|e| {
            panic!(
                "write {i} after the backup restarted: {e}\nmaster: {:#?}\n{}",
                stats(&client, &master_addr),
                diagnostics(&cluster)
            )
        }));
    }
    check_acknowledged(&client, table, &acked, VALUE);
    // No stale copy is left behind: the restarted backup holds exactly one replica
    // of each segment the master still tracks (R§8: re-created ones replaced the
    // copies it kept).
    let rt = runtime();
    let backups = backup_client();
    let backup_addr = cluster.servers[b].addr.clone();
    wait_until("the backup to hold only current replicas", PATIENCE, || {
        let held = replicas_on(&rt, &backups, &backup_addr, owner_id).len() as u64;
        let tracked = num(&stats(&client, &master_addr), "replicated_segments");
        (held == tracked).then_some(())
    });
}

/// Three servers with R = 1: a backup of the master restarts and keeps its replicas
/// (the master is UP). The master re-creates them — on the other backup or on the
/// restarted one — and then frees every copy the restarted backup kept (R§8: "keep
/// until the master confirms re-replication"): in the end that backup holds only
/// replicas the master still tracks there, and all acknowledged data is readable.
#[test]
fn restarted_backup_is_left_with_no_stale_replicas() {
    const VALUE: usize = 1 << 20;
    let (mut cluster, dirs, table, master, owner_id) = restart_cluster(3);
    let client = cluster.client();
    let write = |i: usize| {
        client
            .write(table, format!("key-{i}").as_bytes(), &value_of(i, VALUE))
            .map(|v| (i, v))
    };
    let mut acked: Vec<(usize, u64)> = (0..30).map(|i| write(i).expect("write")).collect();
    let rt = runtime();
    let backups = backup_client();
    // Restart the backup holding the most of the master's replicas.
    let b = (0..3)
        .filter(|&i| i != master)
        .max_by_key(|&i| replicas_on(&rt, &backups, &cluster.servers[i].addr, owner_id).len())
        .expect("two backups");
    restart_server(&mut cluster, b, &restart_args(&dirs[b]));
    let master_addr = cluster.servers[master].addr.clone();
    // The master learned of the restart and re-created what the old id held.
    wait_until("the master to re-replicate", PATIENCE, || {
        (num(&stats(&client, &master_addr), "rereplications") >= 1).then_some(())
    });
    for i in 30..40 {
        acked.push(write(i).expect("write after the restart"));
    }
    check_acknowledged(&client, table, &acked, VALUE);
    let backup_addr = cluster.servers[b].addr.clone();
    let other = 3 - master - b;
    let other_addr = cluster.servers[other].addr.clone();
    wait_until("stale replicas to be freed", PATIENCE, || {
        let on_restarted = replicas_on(&rt, &backups, &backup_addr, owner_id).len() as u64;
        let on_other = replicas_on(&rt, &backups, &other_addr, owner_id).len() as u64;
        let tracked = num(&stats(&client, &master_addr), "replicated_segments");
        // R = 1: each tracked segment has exactly one replica, on one of the two.
        (on_restarted + on_other == tracked).then_some(())
    });
}

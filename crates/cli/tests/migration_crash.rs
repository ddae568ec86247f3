//! Lineage fault tolerance of live migration (K§2.3.4, issue 20) against real
//! processes: a source, a target or the active coordinator (with a standby on
//! etcd) is SIGKILLed in the middle of a migration under mixed load, and
//! afterwards every acknowledged write is readable at its newest value, deleted
//! keys stay deleted, the history is linearizable, and the migration is
//! finished or rolled back — never stuck.
//!
//! Servers replicate with R = 1 so every log survives its master on a backup.
//! The pulls are slowed with the servers' test knob
//! (`RAMSTORE_TEST_MIGRATION_PULL_PAUSE_MS`, `storage_service::migration`) so
//! that the kill lands mid-migration whatever the machine's load; each test
//! checks that it did.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{
    free_port, owner_of, spawn_ramstore, wait_until, write_all, Cluster, Proc, Server,
    READY_TIMEOUT,
};
use ramstore_checker::{check, CheckOptions};
use ramstore_client::{BlockingClient, ClientError, ClientOptions, MigrationMode};
use ramstore_harness::etcd::TestEtcd;
use ramstore_harness::workload::{Workload, WorkloadConfig};

/// Stable objects written before the migration.
const STABLE: usize = 20_000;
/// Stable keys the test deletes or rewrites while the migration runs: `i % 3 ==
/// 0` deleted, `i % 3 == 1` rewritten, the rest untouched.
const TOUCHED: usize = 300;
/// How long each background puller pauses after a batch (the servers' test
/// knob): 20,000 objects in 16 KiB batches take several seconds to pull.
const PULL_PAUSE_MS: &str = "150";
/// How long the cluster may take to detect a crash and recover.
const PATIENCE: Duration = Duration::from_secs(60);

fn stable_key(i: usize) -> Vec<u8> {
    format!("stable-{i}").into_bytes()
}

fn stable_value(i: usize) -> Vec<u8> {
    format!("v{i}-").repeat(4).into_bytes()
}

fn rewritten_value(i: usize) -> Vec<u8> {
    format!("rewritten-{i}").into_bytes()
}

/// Every server process started from here pulls slowly. All tests of this file
/// set the same value, so setting it from several threads is harmless.
fn slow_pulls() {
    std::env::set_var("RAMSTORE_TEST_MIGRATION_PULL_PAUSE_MS", PULL_PAUSE_MS);
}

/// Arguments of a server replicating with R = 1 into `dir`.
fn server_args(dir: &std::path::Path) -> Vec<String> {
    let dir = dir.display().to_string();
    [
        "--replicas",
        "1",
        "--backup-dir",
        &dir,
        "--memory",
        "128MiB",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A file-store coordinator and three replicating servers.
fn cluster() -> Cluster {
    slow_pulls();
    let mut cluster = Cluster::start(0);
    for i in 0..3 {
        let args = server_args(&cluster.dir.path().join(format!("server-{i}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cluster.add_server_with("127.0.0.1:0", &args);
    }
    cluster
}

/// A client of `coordinators`, once one of them answers (a standby listens only
/// after it has taken over).
fn client(coordinators: &str) -> BlockingClient {
    wait_until("a coordinator to answer", PATIENCE, || {
        BlockingClient::connect(options(coordinators)).ok()
    })
}

fn options(coordinators: &str) -> ClientOptions {
    ClientOptions {
        operation_deadline: Duration::from_secs(60),
        ..ClientOptions::new(coordinators)
    }
}

/// Creates table `t` in one tablet holding the stable objects; its id.
fn load(c: &BlockingClient) -> u64 {
    let t = c.create_table("t", 1).unwrap();
    let keys: Vec<Vec<u8>> = (0..STABLE).map(stable_key).collect();
    let values: Vec<Vec<u8>> = (0..STABLE).map(stable_value).collect();
    write_all(c, t, &keys, &values, 500);
    t
}

/// A migration in the middle of its pulls, with load running.
struct Running {
    t: u64,
    id: u64,
    source: u64,
    target: u64,
    config: WorkloadConfig,
    workload: Workload,
}

/// Loads the table, starts the mixed load, migrates the tablet to a server
/// other than its owner (`pick` chooses among the others), and deletes and
/// rewrites [`TOUCHED`] stable keys on the target while it pulls. Panics if the
/// migration is not still pulling afterwards.
fn start_migration(coordinators: &str, servers: &[u64], seed: u64) -> Running {
    let c = client(coordinators);
    let t = load(&c);
    let source = owner_of(&c, t);
    let target = *servers.iter().find(|id| **id != source).unwrap();
    let config = WorkloadConfig {
        workers: 3,
        seed,
        ..WorkloadConfig::default()
    };
    let workload =
        Workload::start(&config, t, Instant::now(), &options(coordinators), None).unwrap();
    thread::sleep(Duration::from_millis(300));
    let id = c.migrate_tablet("t", 0, u64::MAX, target).unwrap();
    assert_eq!(owner_of(&c, t), target, "ownership moved at once");
    for i in 0..TOUCHED {
        match i % 3 {
            0 => {
                let removed = c.remove(t, &stable_key(i)).unwrap();
                assert!(removed.is_some(), "stable key {i} existed");
            }
            1 => {
                c.write(t, &stable_key(i), &rewritten_value(i)).unwrap();
            }
            _ => {}
        }
    }
    let state = c
        .migrations()
        .unwrap()
        .into_iter()
        .find(|m| m.id == id)
        .map(|m| m.state);
    assert_eq!(
        state.as_deref(),
        Some("pulling"),
        "the crash must land mid-migration (raise PULL_PAUSE_MS if the pulls got faster)"
    );
    Running {
        t,
        id,
        source,
        target,
        config,
        workload,
    }
}

/// Waits until migration `id` is no longer in progress (done or rolled back).
fn wait_settled(c: &BlockingClient, id: u64) {
    wait_until("the migration to finish or roll back", PATIENCE, || {
        let listed = c.migrations().ok()?;
        (!listed.iter().any(|m| m.id == id && !m.is_finished())).then_some(())
    });
}

/// After the crash: the history is linearizable, every stable key holds its
/// newest acknowledged value (or stays deleted), and `owner` serves the range.
fn verify(coordinators: &str, run: Running, owner: u64) {
    let c = client(coordinators);
    wait_settled(&c, run.id);
    thread::sleep(Duration::from_millis(300));
    let history = run.workload.stop(&run.config, &c);
    // Exactly once: completion records move with a migration, so a retry that
    // reaches the target gets the first answer (RIFL §4.3).
    let report = check(&history, &CheckOptions::default());
    assert!(report.is_clean(), "{report}");
    assert_eq!(owner_of(&c, run.t), owner);
    let keys: Vec<Vec<u8>> = (0..STABLE).map(stable_key).collect();
    for (chunk, ks) in keys.chunks(500).enumerate() {
        let items: Vec<(u64, &[u8])> = ks.iter().map(|k| (run.t, k.as_slice())).collect();
        for (j, got) in c.multi_read(&items).into_iter().enumerate() {
            let i = chunk * 500 + j;
            match (i < TOUCHED, i % 3, got) {
                (true, 0, Err(ClientError::ObjectDoesntExist)) => {}
                (true, 0, other) => panic!("deleted key {i} came back: {other:?}"),
                (true, 1, Ok((v, _))) => assert_eq!(v, rewritten_value(i), "key {i}"),
                (_, _, Ok((v, _))) => assert_eq!(v, stable_value(i), "key {i}"),
                (_, _, Err(e)) => panic!("stable key {i} lost: {e}"),
            }
        }
    }
    let in_progress = c.migrations().unwrap();
    assert!(
        in_progress.iter().all(|m| m.is_finished()),
        "nothing stuck: {in_progress:?}"
    );
}

fn slot(cluster: &Cluster, id: u64) -> usize {
    cluster.servers.iter().position(|s| s.id == id).unwrap()
}

#[test]
fn migration_target_killed_mid_way_rolls_back_onto_the_source_and_loses_nothing() {
    let mut cluster = cluster();
    let ids: Vec<u64> = cluster.servers.iter().map(|s| s.id).collect();
    let run = start_migration(cluster.addr(), &ids, 201);
    let (source, target) = (run.source, run.target);
    let i = slot(&cluster, target);
    cluster.servers[i].proc.kill();
    let (addr, id) = (cluster.addr().to_string(), run.id);
    verify(&addr, run, source);
    // Regression (known limit 3): the rolled-back migration was no longer
    // listed. It is, with its outcome, in the list, its JSON and the API.
    let listed = client(&addr).migrations().unwrap();
    let m = listed.iter().find(|m| m.id == id).expect("still listed");
    assert!(m.is_rolled_back(), "{m:?}");
    assert_eq!((m.source, m.target), (source, target));
    let table = cluster.cli(&["migrations"]);
    assert!(table.ok().contains("rolled back"), "{}", table.ok());
    let json: serde_json::Value =
        serde_json::from_str(cluster.cli(&["migrations", "--json"]).ok()).unwrap();
    let entry = json["migrations"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["id"] == id))
        .cloned()
        .unwrap_or_default();
    assert_eq!(entry["state"], "rolled_back", "{json}");
}

#[test]
fn migration_source_killed_mid_way_finishes_from_its_recovered_copy_and_loses_nothing() {
    let mut cluster = cluster();
    let ids: Vec<u64> = cluster.servers.iter().map(|s| s.id).collect();
    let run = start_migration(cluster.addr(), &ids, 202);
    let (source, target, id) = (run.source, run.target, run.id);
    let i = slot(&cluster, source);
    cluster.servers[i].proc.kill();
    let addr = cluster.addr().to_string();
    verify(&addr, run, target);
    let c = client(&addr);
    let done = c.migrations().unwrap();
    let done = done.iter().find(|m| m.id == id).expect("listed as done");
    assert!(done.is_done(), "{done:?}");
    assert_ne!(done.source, source, "a recovered copy was the last source");
    let listed = cluster.cli(&["migrations"]);
    assert!(!listed.ok().contains("pulling"), "{}", listed.ok());
}

/// A stop-and-copy migration of the whole of table `t` in the middle of its
/// copy: its id, source and target, and the thread waiting for
/// `MigrateTablet` (which answers only after the copy).
struct Copying {
    t: u64,
    id: u64,
    source: u64,
    target: u64,
    request: thread::JoinHandle<Result<u64, ClientError>>,
}

fn start_copy(cluster: &Cluster) -> Copying {
    let c = client(cluster.addr());
    let t = load(&c);
    let source = owner_of(&c, t);
    let target = cluster.server_other_than(source);
    let mc = client(cluster.addr());
    let request = thread::spawn(move || {
        mc.migrate_tablet_with_mode("t", 0, u64::MAX, target, MigrationMode::StopAndCopy)
    });
    let id = wait_until("the copy to start", PATIENCE, || {
        let listed = c.migrations().ok()?;
        listed
            .into_iter()
            .find(|m| m.state == "copying")
            .map(|m| m.id)
    });
    Copying {
        t,
        id,
        source,
        target,
        request,
    }
}

/// After a crash mid-copy: the migration is listed rolled back, its request
/// failed, `owner` serves the range (neither the crashed server nor, for a
/// crashed source, a half-copied target's stale tablet), and every object
/// reads back.
fn verify_copy_rolled_back(cluster: &Cluster, copy: Copying, owner: impl Fn(u64) -> bool) {
    let c = client(cluster.addr());
    wait_settled(&c, copy.id);
    let listed = c.migrations().unwrap();
    let m = listed.iter().find(|m| m.id == copy.id).expect("listed");
    assert!(m.is_rolled_back(), "{m:?}");
    assert!(
        listed.iter().all(|m| m.is_finished()),
        "nothing stuck: {listed:?}"
    );
    let answer = copy.request.join().unwrap();
    assert!(
        answer.is_err(),
        "the request of a rolled-back copy fails: {answer:?}"
    );
    // A crashed source's range is recovered after the migration rolled back.
    wait_until("the range to be served by its owner", PATIENCE, || {
        owner(owner_of(&c, copy.t)).then_some(())
    });
    let keys: Vec<Vec<u8>> = (0..STABLE).map(stable_key).collect();
    for (chunk, ks) in keys.chunks(500).enumerate() {
        let items: Vec<(u64, &[u8])> = ks.iter().map(|k| (copy.t, k.as_slice())).collect();
        for (j, got) in c.multi_read(&items).into_iter().enumerate() {
            let i = chunk * 500 + j;
            match got {
                Ok((v, _)) => assert_eq!(v, stable_value(i), "key {i}"),
                Err(e) => panic!("stable key {i} lost: {e}"),
            }
        }
    }
}

/// Regression (known limit 5): a stop-and-copy whose target crashed mid-copy
/// stayed `Copying` for ever.
#[test]
fn stop_and_copy_target_killed_mid_copy_rolls_back_onto_the_source() {
    let mut cluster = cluster();
    let copy = start_copy(&cluster);
    let (source, target) = (copy.source, copy.target);
    let i = slot(&cluster, target);
    cluster.servers[i].proc.kill();
    verify_copy_rolled_back(&cluster, copy, |owner| owner == source);
}

/// Regression (known limit 5): a stop-and-copy whose source crashed mid-copy
/// stayed `Copying` for ever.
#[test]
fn stop_and_copy_source_killed_mid_copy_rolls_back_and_recovers_the_range() {
    let mut cluster = cluster();
    let copy = start_copy(&cluster);
    let source = copy.source;
    let i = slot(&cluster, source);
    cluster.servers[i].proc.kill();
    verify_copy_rolled_back(&cluster, copy, |owner| owner != source);
}

/// Starts `ramstore coordinator` on `addr` with the etcd store (and `extra`).
fn coordinator(name: &str, addr: &str, store: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["coordinator", "--listen", addr, "--store", store];
    args.extend_from_slice(extra);
    spawn_ramstore(name, &args, &[])
}

#[test]
fn migration_coordinator_killed_mid_way_the_standby_finishes_it_and_nothing_is_lost() {
    slow_pulls();
    let etcd = TestEtcd::start().unwrap_or_else(|e| panic!("{e}"));
    let store = etcd.store_arg();
    let addr_a = format!("127.0.0.1:{}", free_port());
    let addr_b = format!("127.0.0.1:{}", free_port());
    let mut a = coordinator("coordinator A", &addr_a, &store, &[]);
    a.wait_for_line(
        |l| l.starts_with("ramstore coordinator listening on "),
        READY_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut b = coordinator("coordinator B", &addr_b, &store, &["--standby"]);
    b.wait_for_line(
        |l| l.starts_with("ramstore coordinator standing by"),
        READY_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let coordinators = format!("{addr_a},{addr_b}");
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<Vec<String>> = (0..3)
        .map(|i| server_args(&dir.path().join(format!("server-{i}"))))
        .collect();
    let args: Vec<Vec<&str>> = args
        .iter()
        .map(|a| a.iter().map(String::as_str).collect())
        .collect();
    let specs: Vec<(&str, &[&str])> = args.iter().map(|a| ("127.0.0.1:0", &a[..])).collect();
    let servers = Server::start_all(&coordinators, &specs).unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<u64> = servers.iter().map(|s| s.id).collect();
    let run = start_migration(&coordinators, &ids, 203);
    let target = run.target;
    a.kill();
    verify(&coordinators, run, target);
    drop(servers);
    drop(b);
    drop(etcd);
}

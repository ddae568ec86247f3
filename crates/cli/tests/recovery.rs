//! Crash recovery across real processes on 127.0.0.1 (issue 5, R§7): a master
//! killed under load is recovered onto the others from its backups, with nothing
//! acknowledged lost, nothing deleted coming back, versions never going back, and
//! the calls issued meanwhile completing; two masters killed at once, a recovery
//! master killed during a recovery, and an incomplete log (recovery waits, serves
//! nothing partial) are recovered too.
//!
//! Servers run with R = 2 (R = 1 where a test needs a log on one backup); a test
//! that kills k servers starts enough that the rest can still hold R replicas.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{wait_until, Cluster};
use ramstore_client::{BlockingClient, ClientError, ClientOptions, RejectRules};

/// How long a condition that needs the cluster to react may take on a slow machine.
const PATIENCE: Duration = Duration::from_secs(120);
/// Keys each load worker owns (no two workers share a key, so each has an exact
/// model of its keys).
const KEYS_PER_WORKER: usize = 150;

/// Arguments of a replicating storage server with its backup in `dir`.
fn server_args(dir: &str, replicas: &str) -> Vec<String> {
    [
        "--replicas",
        replicas,
        "--backup-dir",
        dir,
        "--backup-frames",
        "24",
        "--memory",
        "96MiB",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A coordinator and `n` servers replicating with R = `replicas`; `coordinator`
/// are more coordinator arguments.
fn cluster(n: usize, replicas: &str, coordinator: &[&str]) -> Cluster {
    let mut cluster = Cluster::start_with_coordinator_args(0, coordinator);
    for i in 0..n {
        let dir = backup_dir(&cluster, i);
        let args = server_args(&dir, replicas);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cluster.add_server_with("127.0.0.1:0", &args);
    }
    cluster
}

fn backup_dir(cluster: &Cluster, i: usize) -> String {
    cluster
        .dir
        .path()
        .join(format!("server-{i}"))
        .display()
        .to_string()
}

fn client(cluster: &Cluster) -> BlockingClient {
    BlockingClient::connect(ClientOptions {
        operation_deadline: Duration::from_secs(60),
        ..ClientOptions::new(cluster.addr())
    })
    .expect("client connects")
}

/// The coordinator's stats lines as a map.
fn coordinator_stats(client: &BlockingClient, cluster: &Cluster) -> BTreeMap<String, String> {
    client
        .server_stats(cluster.addr())
        .expect("coordinator stats")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Server `id`'s state word in the coordinator's list.
fn state_of(client: &BlockingClient, cluster: &Cluster, id: u64) -> String {
    coordinator_stats(client, cluster)
        .get(&format!("server.{id}"))
        .and_then(|e| e.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_default()
}

/// Waits until server `id` is removed: recovered (R§7). On a timeout, prints
/// every process's log before failing.
fn wait_recovered(client: &BlockingClient, cluster: &Cluster, id: u64) {
    let deadline = Instant::now() + PATIENCE;
    while state_of(client, cluster, id) != "removed" {
        if Instant::now() > deadline {
            eprintln!("{}", cluster.coordinator.proc.transcript());
            for s in &cluster.servers {
                eprintln!("{}", s.proc.transcript());
            }
            panic!("timed out waiting for server {id} to be recovered");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// What a worker knows of one of its keys: the acknowledged value and version,
/// or deleted; and the highest version it ever saw for the key.
#[derive(Debug, Clone, Default)]
struct KeyModel {
    current: Option<(Vec<u8>, u64)>,
    highest: u64,
}

/// One load worker: mixed writes, deletes, conditional writes and reads on its
/// own keys, checked against its model as it goes.
fn worker(
    client: BlockingClient,
    table: u64,
    worker_id: usize,
    stop: Arc<AtomicBool>,
) -> WorkerResult {
    let mut model: BTreeMap<Vec<u8>, KeyModel> = BTreeMap::new();
    let mut ops = 0u64;
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let k = (i * 7919) % KEYS_PER_WORKER;
        let key = format!("w{worker_id}-k{k}").into_bytes();
        let value = format!("w{worker_id}-op{i}-{}", "x".repeat(i % 90)).into_bytes();
        let m = model.entry(key.clone()).or_default();
        let advance = |m: &mut KeyModel, version: u64, what: &str| -> Result<(), String> {
            if version <= m.highest {
                return Err(format!(
                    "{what} of {:?} got version {version}, not above {}",
                    String::from_utf8_lossy(&key),
                    m.highest
                ));
            }
            m.highest = version;
            Ok(())
        };
        match i % 4 {
            0 => {
                let version = client
                    .write(table, &key, &value)
                    .map_err(|e| format!("write failed: {e}"))?;
                advance(m, version, "write")?;
                m.current = Some((value, version));
            }
            1 => {
                let removed = client
                    .remove(table, &key)
                    .map_err(|e| format!("remove failed: {e}"))?;
                if let Some(v) = removed {
                    m.highest = m.highest.max(v);
                }
                m.current = None;
            }
            2 => {
                // Conditional write: only over the version the model knows.
                let rules = match &m.current {
                    Some((_, v)) => RejectRules {
                        given_version: *v,
                        version_ne_given: true,
                        ..RejectRules::default()
                    },
                    None => RejectRules::must_not_exist(),
                };
                match client.write_with_rules(table, &key, &value, &rules) {
                    Ok(version) => {
                        advance(m, version, "conditional write")?;
                        m.current = Some((value, version));
                    }
                    // A retry of a write whose answer was lost finds its own
                    // write: read back to tell (at-least-once retries).
                    Err(ClientError::WrongVersion { .. }) | Err(ClientError::ObjectExists) => {
                        let (now, version) = client
                            .read(table, &key)
                            .map_err(|e| format!("read after a refused write: {e}"))?;
                        if now != value {
                            return Err(format!(
                                "conditional write refused although the model holds the current version: {:?}",
                                String::from_utf8_lossy(&key)
                            ));
                        }
                        advance(m, version, "retried conditional write")?;
                        m.current = Some((value, version));
                    }
                    Err(e) => return Err(format!("conditional write failed: {e}")),
                }
            }
            _ => check_key(&client, table, &key, m)?,
        }
        ops += 1;
    }
    Ok((ops, model))
}

/// Reads `key` and compares it with the model.
fn check_key(client: &BlockingClient, table: u64, key: &[u8], m: &KeyModel) -> Result<(), String> {
    let name = String::from_utf8_lossy(key);
    match (client.read(table, key), &m.current) {
        (Ok((value, version)), Some((want, want_version))) => {
            if &value != want || version != *want_version {
                return Err(format!(
                    "{name}: read version {version}, acknowledged version {want_version}"
                ));
            }
        }
        (Ok((_, version)), None) => {
            return Err(format!(
                "{name}: deleted, but read back at version {version}"
            ))
        }
        (Err(ClientError::ObjectDoesntExist), None) => {}
        (Err(ClientError::ObjectDoesntExist), Some((_, v))) => {
            return Err(format!("{name}: acknowledged at version {v}, but lost"))
        }
        (Err(e), _) => return Err(format!("{name}: read failed: {e}")),
    }
    Ok(())
}

/// What a worker ends with: operations done and its model of its keys, or the
/// first failure it saw.
type WorkerResult = Result<(u64, BTreeMap<Vec<u8>, KeyModel>), String>;

/// Starts `workers` load workers on `table`.
fn start_load(
    cluster: &Cluster,
    table: u64,
    workers: usize,
) -> (Arc<AtomicBool>, Vec<thread::JoinHandle<WorkerResult>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = (0..workers)
        .map(|w| {
            let c = client(cluster);
            let stop = stop.clone();
            thread::spawn(move || worker(c, table, w, stop))
        })
        .collect();
    (stop, handles)
}

/// Stops the load and checks every worker's keys against its model.
fn finish_load(
    cluster: &Cluster,
    table: u64,
    stop: Arc<AtomicBool>,
    handles: Vec<thread::JoinHandle<WorkerResult>>,
) -> u64 {
    stop.store(true, Ordering::Relaxed);
    let c = client(cluster);
    let mut total = 0;
    for h in handles {
        let (ops, model) = h
            .join()
            .expect("worker thread")
            .unwrap_or_else(|e| panic!("a call during recovery failed or saw wrong data: {e}"));
        total += ops;
        for (key, m) in &model {
            check_key(&c, table, key, m).unwrap_or_else(|e| panic!("after recovery: {e}"));
        }
    }
    total
}

/// The server ids that own some tablet of `table`.
fn owners(client: &BlockingClient, table: u64) -> Vec<u64> {
    let mut ids: Vec<u64> = client
        .tablet_map()
        .expect("tablet map")
        .iter()
        .filter(|t| t.table_id == table)
        .map(|t| t.server_id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[test]
fn recovery_after_sigkill_of_a_master_under_load_loses_nothing_acknowledged() {
    let mut cluster = cluster(4, "2", &[]);
    let c = client(&cluster);
    let table = c.create_table("t", 4).unwrap();
    let (stop, handles) = start_load(&cluster, table, 3);
    thread::sleep(Duration::from_millis(1500));
    let victim = cluster.servers.remove(1);
    let victim_id = victim.id;
    let killed_at = Instant::now();
    drop(victim); // SIGKILL
    wait_recovered(&c, &cluster, victim_id);
    let recovered_in = killed_at.elapsed();
    // Keep the load going a little after the recovery.
    thread::sleep(Duration::from_millis(500));
    let ops = finish_load(&cluster, table, stop, handles);
    assert!(ops > 100, "the load made progress: {ops} operations");
    assert!(!owners(&c, table).contains(&victim_id));
    let stats = coordinator_stats(&c, &cluster);
    assert!(
        stats["recoveries_completed"].parse::<u64>().unwrap() >= 1,
        "{stats:?}"
    );
    eprintln!("recovered in {recovered_in:?}; {ops} operations checked");
}

#[test]
fn recovery_of_two_masters_killed_at_once() {
    // Five servers: the three left can still hold R = 2 replicas of each other.
    let mut cluster = cluster(5, "2", &[]);
    let c = client(&cluster);
    let table = c.create_table("t", 8).unwrap();
    let (stop, handles) = start_load(&cluster, table, 2);
    thread::sleep(Duration::from_millis(1000));
    let a = cluster.servers.remove(3);
    let b = cluster.servers.remove(0);
    let ids = [a.id, b.id];
    drop(a);
    drop(b); // both SIGKILLed
    for id in ids {
        wait_recovered(&c, &cluster, id);
    }
    thread::sleep(Duration::from_millis(300));
    finish_load(&cluster, table, stop, handles);
    let left = owners(&c, table);
    assert!(left.iter().all(|id| !ids.contains(id)), "{left:?}");
}

#[test]
fn recovery_master_killed_during_a_recovery_is_retried_elsewhere() {
    // Small partitions, so the crashed master's tablet is spread over every
    // recovery master (each gets some).
    // Five servers: the three left after two deaths still hold R = 2 replicas.
    // Small partitions spread the crashed tablet over every recovery master, and
    // a long failure timeout keeps a frozen server UP (so it gets partitions)
    // for a while.
    let mut cluster = cluster(
        5,
        "2",
        &[
            "--recovery-partition-entries",
            "20",
            "--failure-timeout-ms",
            "4000",
        ],
    );
    let c = client(&cluster);
    let table = c.create_table("t", 1).unwrap();
    let owner = owners(&c, table)[0];
    let mut expected = BTreeMap::new();
    for i in 0..300 {
        let key = format!("k{i}").into_bytes();
        let version = c.write(table, &key, format!("v{i}").as_bytes()).unwrap();
        expected.insert(key, (format!("v{i}").into_bytes(), version));
    }
    let crashed_i = cluster.servers.iter().position(|s| s.id == owner).unwrap();
    // Freeze one would-be recovery master, so it takes its partitions without
    // answering; then kill the owner (and declare it crashed at once), wait
    // until the recovery is under way, and kill the frozen recovery master in
    // the middle of it.
    let frozen_i = (crashed_i + 1) % cluster.servers.len();
    cluster.servers[frozen_i].proc.signal(libc::SIGSTOP);
    let frozen_id = cluster.servers[frozen_i].id;
    let crashed = cluster.servers.remove(crashed_i);
    drop(crashed);
    c.crash_server(owner).unwrap();
    wait_until("the recovery to start replaying", PATIENCE, || {
        coordinator_stats(&c, &cluster)
            .get(&format!("recovery.{owner}"))
            .filter(|p| p.contains("replaying"))
            .map(|_| ())
    });
    let frozen_i = cluster
        .servers
        .iter()
        .position(|s| s.id == frozen_id)
        .unwrap();
    let mut frozen = cluster.servers.remove(frozen_i);
    frozen.proc.kill();
    frozen.proc.signal(libc::SIGCONT);
    wait_recovered(&c, &cluster, owner);
    wait_recovered(&c, &cluster, frozen_id);
    let log = cluster.coordinator.proc.transcript();
    assert!(
        log.contains("a partition failed; it is retried"),
        "the frozen recovery master's partitions failed and were retried: {log}"
    );
    for (key, (value, version)) in &expected {
        assert_eq!(
            c.read(table, key).unwrap(),
            (value.clone(), *version),
            "{}",
            String::from_utf8_lossy(key)
        );
    }
}

#[test]
fn incomplete_log_makes_recovery_wait_and_serve_nothing_partial() {
    // A and C share a failure domain and B has its own, so every replica of A's
    // log is on B's backup (never in A's domain, R§7.1).
    let mut cluster = Cluster::start_with_coordinator_args(0, &[]);
    for (i, domain) in ["a", "b", "a"].iter().enumerate() {
        let dir = backup_dir(&cluster, i);
        let mut args = server_args(&dir, "1");
        args.extend(["--failure-domain".to_string(), domain.to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cluster.add_server_with("127.0.0.1:0", &args);
    }
    let c = client(&cluster);
    let table = c.create_table("t", 3).unwrap();
    let mut expected = BTreeMap::new();
    for i in 0..200 {
        let key = format!("k{i}").into_bytes();
        let version = c.write(table, &key, format!("v{i}").as_bytes()).unwrap();
        expected.insert(key, (format!("v{i}").into_bytes(), version));
    }
    let a_id = cluster.servers[0].id;
    let b_id = cluster.servers[1].id;
    // Who owns each key before the crash.
    let map = c.tablet_map().unwrap();
    let owner_of = |key: &[u8]| {
        let hash = ramstore_client::key_hash(key);
        map.iter()
            .find(|t| t.table_id == table && (t.start_hash..=t.end_hash).contains(&hash))
            .map(|t| t.server_id)
            .expect("every key has an owner")
    };
    let a_keys: Vec<Vec<u8>> = expected
        .keys()
        .filter(|k| owner_of(k) == a_id)
        .cloned()
        .collect();
    let c_keys: Vec<Vec<u8>> = expected
        .keys()
        .filter(|k| ![a_id, b_id].contains(&owner_of(k)))
        .cloned()
        .collect();
    assert!(!a_keys.is_empty() && !c_keys.is_empty());
    let b_dir = backup_dir(&cluster, 1);
    let b = cluster.servers.remove(1);
    let a = cluster.servers.remove(0);
    drop(a);
    drop(b); // both SIGKILLed: A's log is on no running backup
    wait_until("A declared crashed", PATIENCE, || {
        (state_of(&c, &cluster, a_id) == "crashed").then_some(())
    });
    // Recovery waits: A's keys are not served (no partial answer, no "doesn't
    // exist") while its log is incomplete.
    thread::sleep(Duration::from_secs(2));
    assert_eq!(state_of(&c, &cluster, a_id), "crashed");
    let short = BlockingClient::connect(ClientOptions {
        operation_deadline: Duration::from_millis(800),
        ..ClientOptions::new(cluster.addr())
    })
    .unwrap();
    for key in a_keys.iter().take(3) {
        match short.read(table, key) {
            Err(ClientError::ObjectDoesntExist) => {
                panic!("a key of an unrecovered tablet was reported missing")
            }
            Ok(v) => panic!("a key of an unrecovered tablet was served: {v:?}"),
            Err(_) => {}
        }
    }
    // B comes back on its directory: its backup offers A's log again, and A is
    // recovered onto the running masters.
    let mut args = server_args(&b_dir, "1");
    args.extend(["--failure-domain".to_string(), "b".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cluster.add_server_with("127.0.0.1:0", &args);
    wait_recovered(&c, &cluster, a_id);
    for key in a_keys.iter().chain(&c_keys) {
        assert_eq!(
            c.read(table, key).unwrap(),
            expected[key],
            "{}",
            String::from_utf8_lossy(key)
        );
    }
}

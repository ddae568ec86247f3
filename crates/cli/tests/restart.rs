//! Process restarts: a coordinator killed with SIGKILL and restarted on the same
//! port and state directory, and a storage server replaced by a new process (a new
//! server id) on the same address.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{Cluster, Server};
use ramstore_client::{key_hash, BlockingClient, ClientError, MultiWriteOp, TabletInfo};

/// `n` keys named `prefix-i`.
fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}-{i}").into_bytes())
        .collect()
}

fn write_all(c: &BlockingClient, table: u64, keys: &[Vec<u8>]) {
    let ops: Vec<_> = keys
        .iter()
        .map(|k| MultiWriteOp::new(table, k, k))
        .collect();
    for r in c.multi_write(&ops) {
        r.expect("write succeeds");
    }
}

/// The tablets of `table`, sorted by start hash.
fn tablets_of(c: &BlockingClient, table: u64) -> Vec<TabletInfo> {
    let mut t: Vec<_> = c
        .tablet_map()
        .expect("tablet map")
        .into_iter()
        .filter(|t| t.table_id == table)
        .collect();
    t.sort_by_key(|t| t.start_hash);
    t
}

fn owner(tablets: &[TabletInfo], key: &[u8]) -> u64 {
    let h = key_hash(key);
    tablets
        .iter()
        .find(|t| (t.start_hash..=t.end_hash).contains(&h))
        .expect("covered")
        .server_id
}

/// `ramstore tables`: name → (id, tablets).
fn tables(cluster: &Cluster) -> BTreeMap<String, (u64, usize)> {
    cluster
        .cli(&["tables"])
        .ok()
        .lines()
        .skip(1)
        .filter(|l| *l != "(no tables)")
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (
                w[0].to_string(),
                (w[1].parse().unwrap(), w[2].parse().unwrap()),
            )
        })
        .collect()
}

/// `ramstore status --all` server rows (removed servers too): id → (address,
/// state, tablets).
fn status(cluster: &Cluster) -> BTreeMap<u64, (String, String, usize)> {
    let out = cluster.cli(&["status", "--all"]);
    let text = out.ok();
    let lines: Vec<&str> = text.lines().collect();
    // Server rows follow the two header lines and end at the tables summary.
    lines[2..]
        .iter()
        .take_while(|l| !l.contains("table(s)"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (
                w[0].parse().unwrap(),
                (w[1].to_string(), w[2].to_string(), w[3].parse().unwrap()),
            )
        })
        .collect()
}

/// A writer thread that writes and reads back its own keys until stopped; counts
/// successes and records the first failure.
struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    handle: Option<thread::JoinHandle<Result<(), String>>>,
}

impl Load {
    fn start(c: BlockingClient, table: u64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let (s, d) = (stop.clone(), done.clone());
        let handle = thread::spawn(move || {
            let mut i = 0u64;
            while !s.load(Ordering::Relaxed) {
                let key = format!("load-{}", i % 500);
                let value = i.to_string();
                let v = c
                    .write(table, key.as_bytes(), value.as_bytes())
                    .map_err(|e| format!("write {key}: {e}"))?;
                let got = c
                    .read(table, key.as_bytes())
                    .map_err(|e| format!("read {key}: {e}"))?;
                if got != (value.clone().into_bytes(), v) {
                    return Err(format!("read {key}: {got:?}, wrote {value} at {v}"));
                }
                d.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            Ok(())
        });
        Load {
            stop,
            done,
            handle: Some(handle),
        }
    }

    fn wait_for_progress(&self, at_least: u64) {
        let start = self.done.load(Ordering::Relaxed);
        common::wait_until("client load progress", Duration::from_secs(20), || {
            (self.done.load(Ordering::Relaxed) >= start + at_least).then_some(())
        });
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let result = self.handle.take().unwrap().join().expect("load thread");
        result.unwrap_or_else(|e| panic!("client load failed: {e}"));
        self.done.load(Ordering::Relaxed)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A coordinator killed with SIGKILL and restarted on the same port and state
/// directory still has every table under the same id and tablets; the storage
/// servers keep serving throughout (a client writing and reading all along sees no
/// error, and data written before is intact); afterwards tables can be created
/// (with fresh ids), used and dropped, and new clients connect.
#[test]
fn coordinator_restart_keeps_tables_and_servers_keep_serving() {
    let mut cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();
    let u = c.create_table("u", 1).unwrap();
    let data = keys("before", 300);
    write_all(&c, t, &data);
    let before_tables = tables(&cluster);
    assert_eq!(before_tables["t"], (t, 2));
    assert_eq!(before_tables["u"], (u, 1));
    let before_map = tablets_of(&c, t);

    let load = Load::start(cluster.client(), t);
    load.wait_for_progress(20);
    cluster.coordinator.proc.kill();
    // Object operations need no coordinator while the map is warm.
    for k in &data {
        assert_eq!(&c.read(t, k).unwrap().0, k);
    }
    load.wait_for_progress(20);
    let out = cluster.cli(&["tables"]);
    assert!(out.error_line(3).contains("cannot reach coordinator"));

    cluster.restart_coordinator();
    load.wait_for_progress(20);
    assert_eq!(
        tables(&cluster),
        before_tables,
        "same tables, ids and tablets"
    );
    let rows = status(&cluster);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for server in &cluster.servers {
        let (addr, state, tablets) = &rows[&server.id];
        assert_eq!(
            (addr.as_str(), state.as_str()),
            (server.addr.as_str(), "up")
        );
        assert!(*tablets >= 1);
    }

    // The old client and a new one see the same map and data.
    let fresh = cluster.client();
    assert_eq!(tablets_of(&fresh, t), before_map);
    assert_eq!(tablets_of(&c, t), before_map);
    for client in [&c, &fresh] {
        for k in &data {
            assert_eq!(&client.read(t, k).unwrap().0, k);
        }
    }
    write_all(&c, u, &keys("after", 50));
    let v = fresh.create_table("v", 2).unwrap();
    assert!(
        v > u,
        "table ids are not reused after a restart ({v} after {u})"
    );
    assert_eq!(c.get_table_id("t").unwrap(), t);
    write_all(&c, v, &keys("v", 100));
    let v_tablets = tablets_of(&c, v);
    let owners: std::collections::BTreeSet<u64> = v_tablets.iter().map(|t| t.server_id).collect();
    assert_eq!(
        owners.len(),
        2,
        "the new table spans both servers: {v_tablets:?}"
    );
    for k in keys("v", 100) {
        assert_eq!(fresh.read(v, &k).unwrap().0, k);
    }
    let done = load.finish();
    assert!(done > 60);

    fresh.drop_table("u").unwrap();
    assert_eq!(c.read(u, b"after-1"), Err(ClientError::TableDoesntExist));
    assert!(!tables(&cluster).contains_key("u"));
}

/// A coordinator restarted twice in a row (the second time right after start)
/// still has its tables.
#[test]
fn coordinator_restarts_back_to_back_keep_tables() {
    let mut cluster = Cluster::start(1);
    let c = cluster.client();
    let t = c.create_table("t", 1).unwrap();
    c.write(t, b"k", b"v").unwrap();
    cluster.restart_coordinator();
    cluster.restart_coordinator();
    assert_eq!(tables(&cluster)["t"], (t, 1));
    let fresh = cluster.client();
    assert_eq!(fresh.get_table_id("t").unwrap(), t);
    assert_eq!(fresh.read(t, b"k").unwrap().0, b"v");
}

/// Two servers, with a coordinator that does not declare a silent server crashed
/// during the test: these tests replace a server the coordinator still believes UP.
/// (A server the failure detector has declared CRASHED keeps its tablets for crash
/// recovery, R§7.3; a restart does not take them over.)
fn replacement_cluster() -> Cluster {
    Cluster::start_with_coordinator_args(2, &["--failure-timeout-ms", "3600000"])
}

/// A storage server killed and replaced by a new process on the same address gets
/// a new id; the coordinator marks the old id removed and gives its tablets to the
/// new server. The old server's objects are lost (DRAM only), the other server's
/// are intact, and the table works again: writes and reads succeed on both halves,
/// enumeration returns exactly what exists, and new tables use only live servers.
#[test]
fn server_restart_with_new_identity_takes_over_its_tablets() {
    let mut cluster = replacement_cluster();
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();
    let data = keys("k", 400);
    write_all(&c, t, &data);
    let before = tablets_of(&c, t);
    let victim = cluster.servers.remove(0);
    let (old_id, addr) = (victim.id, victim.addr.clone());
    let survivor = cluster.servers[0].id;
    let (lost, kept): (Vec<_>, Vec<_>) = data.iter().partition(|k| owner(&before, k) == old_id);
    assert!(!lost.is_empty() && !kept.is_empty());

    drop(victim); // SIGKILL
                  // While it is down, status says it cannot be reached.
    let rows = status(&cluster);
    assert_eq!(rows[&old_id].1, "unreachable", "{rows:?}");
    assert_eq!(rows[&survivor].1, "up", "{rows:?}");

    let replacement = Server::start(cluster.addr(), &addr, &[]).unwrap_or_else(|e| panic!("{e}"));
    let new_id = replacement.id;
    assert_eq!(replacement.addr, addr);
    assert!(new_id > old_id && new_id != survivor, "a new id: {new_id}");
    cluster.servers.push(replacement);

    // The first write to the moved tablet waits (inside the client) until the new
    // server owns it.
    let probe = lost[0];
    c.write(t, probe, b"again").unwrap();
    assert_eq!(c.read(t, probe).unwrap().0, b"again");
    for k in &lost[1..] {
        assert_eq!(
            c.read(t, k),
            Err(ClientError::ObjectDoesntExist),
            "lost with its server"
        );
    }
    for k in &kept {
        assert_eq!(
            &c.read(t, k).unwrap().0,
            *k,
            "the other server's data is intact"
        );
    }
    let after = tablets_of(&c, t);
    assert_eq!(after.len(), 2);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!((b.start_hash, b.end_hash), (a.start_hash, a.end_hash));
        let expected = if b.server_id == old_id {
            new_id
        } else {
            b.server_id
        };
        assert_eq!(a.server_id, expected, "{after:?}");
        assert_eq!(a.address, b.address);
    }
    write_all(&c, t, &data);
    let fresh = cluster.client();
    for k in &data {
        assert_eq!(&fresh.read(t, k).unwrap().0, k);
    }
    let enumerated: Vec<_> = fresh.enumerate(t).map(|o| o.unwrap().key).collect();
    assert_eq!(enumerated.len(), data.len());

    let rows = status(&cluster);
    assert_eq!(rows[&old_id].1, "removed", "{rows:?}");
    assert_eq!(rows[&new_id].1, "up", "{rows:?}");
    assert_eq!(rows[&survivor].1, "up", "{rows:?}");
    let stats = c.server_stats(cluster.addr()).unwrap();
    assert!(
        stats.contains(&format!("server.{old_id}={addr} removed ")),
        "{stats}"
    );

    // A new table lands on live servers only.
    let w = c.create_table("w", 4).unwrap();
    for tablet in tablets_of(&c, w) {
        assert!([new_id, survivor].contains(&tablet.server_id), "{tablet:?}");
    }
    write_all(&c, w, &keys("w", 100));
}

/// After a server is replaced, `ramstore status` attributes tablets to server ids:
/// the removed id owns none, the new one owns what the old one did.
#[test]
fn status_of_a_replaced_server_shows_no_tablets() {
    let mut cluster = replacement_cluster();
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();
    write_all(&c, t, &keys("k", 10));
    let victim = cluster.servers.remove(0);
    let (old_id, addr) = (victim.id, victim.addr.clone());
    drop(victim);
    let replacement = Server::start(cluster.addr(), &addr, &[]).unwrap_or_else(|e| panic!("{e}"));
    let new_id = replacement.id;
    cluster.servers.push(replacement);
    write_all(&c, t, &keys("k", 10));

    let rows = status(&cluster);
    assert_eq!(
        rows[&new_id],
        (addr.clone(), "up".to_string(), 1),
        "{rows:?}"
    );
    assert_eq!(
        rows[&old_id],
        (addr, "removed".to_string(), 0),
        "a removed server owns no tablets: {rows:?}"
    );
}

/// With the default failure detector, a storage server killed with SIGKILL is
/// declared crashed by the coordinator and recovered (R§7): `ramstore status` shows
/// it removed with no tablet, and its tablet moved to the other server. (The
/// servers run with R = 0 here, so the tablet restarts empty.)
#[test]
fn a_killed_server_is_declared_crashed() {
    let mut cluster = Cluster::start(2);
    let c = cluster.client();
    c.create_table("t", 2).unwrap();
    let victim = cluster.servers.remove(0);
    let victim_id = victim.id;
    let survivor = cluster.servers[0].id;
    drop(victim); // SIGKILL
    let start = std::time::Instant::now();
    loop {
        let rows = status(&cluster);
        if rows[&victim_id].1 == "removed" {
            assert_eq!(rows[&victim_id].2, 0, "{rows:?}");
            assert_eq!(
                rows[&survivor],
                (rows[&survivor].0.clone(), "up".into(), 2),
                "{rows:?}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never declared crashed: {rows:?}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

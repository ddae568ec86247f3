//! The operator's surface of live migration (issue 20) against real processes:
//! a target without the free memory is refused up front, progress is shown
//! while a migration is in flight, a migration can be cancelled without losing
//! an acknowledged write, `rebalance` evens out the masters, and `status` shows
//! tablets and migrations (docs/operations.md "Splitting, migrating and
//! rebalancing").

mod common;

use std::time::Duration;

use common::{wait_until, write_all, Cluster};
use ramstore_client::{BlockingClient, ClientError};

fn key(i: usize) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

fn value(i: usize, len: usize) -> Vec<u8> {
    let mut v = format!("v{i}-").into_bytes();
    v.resize(len, b'x');
    v
}

/// Writes `n` objects of `len` bytes to table `t`.
fn load(c: &BlockingClient, t: u64, n: usize, len: usize) {
    let keys: Vec<Vec<u8>> = (0..n).map(key).collect();
    let values: Vec<Vec<u8>> = (0..n).map(|i| value(i, len)).collect();
    write_all(c, t, &keys, &values, 200);
}

/// The owners of table `t`'s tablets, by start hash.
fn owners(c: &BlockingClient, t: u64) -> Vec<(u64, u64)> {
    c.tablet_map()
        .unwrap()
        .iter()
        .filter(|x| x.table_id == t)
        .map(|x| (x.start_hash, x.server_id))
        .collect()
}

#[test]
fn migrate_tablet_to_a_server_without_free_memory_is_refused_and_changes_nothing() {
    let mut cluster = Cluster::start(0);
    cluster.add_server_with("127.0.0.1:0", &["--memory", "128MiB"]);
    let c = cluster.client();
    let t = c.create_table("big", 1).unwrap();
    // About 40 MB: more than 90% of the small server's 32 MiB.
    load(&c, t, 40_000, 1_000);
    let small = cluster
        .add_server_with("127.0.0.1:0", &["--memory", "32MiB"])
        .id;
    let before = owners(&c, t);
    let e = c
        .migrate_tablet("big", 0, u64::MAX, small)
        .expect_err("the small server cannot take the tablet");
    match &e {
        ClientError::InvalidRequest(message) => {
            assert!(message.contains("can take only"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(owners(&c, t), before, "the owner is the same");
    assert!(c.migrations().unwrap().is_empty(), "no migration recorded");
    let out = cluster.cli(&["migrate", "big", "--to", &small.to_string()]);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("can take only"), "{}", out.stderr);
    let (v, _) = c.read(t, &key(7)).unwrap();
    assert_eq!(v, value(7, 1_000));
}

/// Two 128 MiB servers and table `t` in one tablet on one of them with `n`
/// objects of `len` bytes: the cluster, the table, its owner and the other.
fn two_servers_loaded(n: usize, len: usize) -> (Cluster, u64, u64, u64) {
    let mut cluster = Cluster::start(0);
    cluster.add_server_with("127.0.0.1:0", &["--memory", "128MiB"]);
    let c = cluster.client();
    let t = c.create_table("t", 1).unwrap();
    load(&c, t, n, len);
    let other = cluster
        .add_server_with("127.0.0.1:0", &["--memory", "128MiB"])
        .id;
    let owner = owners(&c, t)[0].1;
    (cluster, t, owner, other)
}

#[test]
fn cancel_migration_mid_way_under_writes_keeps_every_acknowledged_write_and_returns_the_range() {
    const N: usize = 40_000;
    let (cluster, t, source, target) = two_servers_loaded(N, 1_000);
    let c = cluster.client();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A client overwriting loaded keys and adding new ones all along; it keeps
    // the newest value acknowledged for each key.
    let writer = {
        let c = cluster.client();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut acked = std::collections::BTreeMap::new();
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let k = if i.is_multiple_of(2) {
                    key(i % N)
                } else {
                    format!("new-{i}").into_bytes()
                };
                let v = format!("w{i}").into_bytes();
                c.write(t, &k, &v).expect("every write is acknowledged");
                acked.insert(k, v);
                i += 1;
            }
            acked
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let id = c.migrate_tablet("t", 0, u64::MAX, target).unwrap();
    assert_eq!(owners(&c, t), vec![(0, target)], "ownership moved");
    c.cancel_migration(id)
        .expect("a migration in progress can be cancelled");
    let listed = c.migrations().unwrap();
    let m = listed.iter().find(|m| m.id == id).expect("listed");
    assert!(m.state == "cancelling" || m.state == "cancelled", "{m:?}");
    // The loaded objects and the writer's new ones so far.
    assert!(
        m.total_objects.is_some_and(|n| n >= N as u64),
        "the range's total is known: {m:?}"
    );
    c.cancel_migration(id)
        .expect("cancelling twice is harmless");
    let back = wait_until("the range to come back", Duration::from_secs(120), || {
        c.migrations()
            .unwrap()
            .into_iter()
            .find(|r| r.returns == Some(id) && r.is_done())
    });
    assert_eq!((back.source, back.target), (target, source));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writer.join().unwrap();
    assert!(acked.len() > 10, "the writer ran: {}", acked.len());
    assert_eq!(
        owners(&c, t),
        vec![(0, source)],
        "the source owns the range"
    );
    for (k, v) in &acked {
        let (got, _) = c.read(t, k).unwrap();
        assert_eq!(
            &got,
            v,
            "newest acknowledged value of {:?}",
            String::from_utf8_lossy(k)
        );
    }
    for i in (1..N).step_by(2) {
        let (got, _) = c.read(t, &key(i)).unwrap();
        assert_eq!(got, value(i, 1_000), "object {i}");
    }
    // Finished and unknown ids get a clear error.
    for bad in [id, back.id, 999] {
        match c.cancel_migration(bad) {
            Err(ClientError::InvalidRequest(message)) => {
                assert!(message.contains("no migration"), "{message}")
            }
            other => panic!("cancel {bad}: {other:?}"),
        }
    }
    let out = cluster.cli(&["migrate", "--cancel", "999"]);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("no migration 999"), "{}", out.stderr);
}

#[test]
fn migrations_shows_moved_and_total_bytes() {
    let (cluster, _t, _source, target) = two_servers_loaded(5_000, 500);
    let out = cluster.cli(&["migrate", "t", "--to", &target.to_string(), "--json"]);
    let json: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(json["total_objects"], 5_000, "{json}");
    assert!(json["mb_per_s"].as_f64().unwrap() > 0.0, "{json}");
    let listed = cluster.cli(&["migrations", "--json"]);
    let json: serde_json::Value = serde_json::from_str(listed.ok()).unwrap();
    let m = &json["migrations"][0];
    assert_eq!(m["state"], "done", "{json}");
    assert_eq!(m["objects"], 5_000, "{json}");
    assert_eq!(m["percent"], 100.0, "{json}");
    assert!(
        m["total_bytes"].as_u64().unwrap() >= m["bytes"].as_u64().unwrap(),
        "{json}"
    );
    let table = cluster.cli(&["migrations"]);
    assert!(table.ok().contains("100%"), "{}", table.ok());
}

/// Each master's bytes of table `t`, from its statistics.
fn loads(c: &BlockingClient, cluster: &Cluster) -> Vec<u64> {
    cluster
        .servers
        .iter()
        .map(|s| {
            let text = c.server_stats(&s.addr).unwrap();
            text.lines()
                .filter(|l| l.starts_with("tablet."))
                .filter_map(|l| l.split("bytes=").nth(1)?.parse::<u64>().ok())
                .sum()
        })
        .collect()
}

#[test]
fn rebalance_after_adding_a_server_puts_every_master_in_the_band_and_keeps_every_object_once() {
    const N: usize = 30_000;
    let mut cluster = Cluster::start(0);
    for _ in 0..2 {
        cluster.add_server_with("127.0.0.1:0", &["--memory", "128MiB"]);
    }
    let c = cluster.client();
    let empty = cluster.cli(&["rebalance"]);
    assert!(empty.ok().contains("nothing to do"), "{}", empty.ok());
    let t = c.create_table("t", 2).unwrap();
    load(&c, t, N, 500);
    cluster.add_server_with("127.0.0.1:0", &["--memory", "128MiB"]);
    let before = loads(&c, &cluster);
    assert_eq!(before[2], 0, "the new server holds nothing: {before:?}");
    let dry = cluster.cli(&["rebalance", "--dry-run"]);
    assert!(dry.ok().contains("move"), "{}", dry.ok());
    assert_eq!(loads(&c, &cluster), before, "a dry run changes nothing");

    let out = cluster.cli(&["rebalance", "--json"]);
    let json: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(json["balanced"], true, "{json}");
    let after = loads(&c, &cluster);
    let mean = after.iter().sum::<u64>() as f64 / after.len() as f64;
    for (i, bytes) in after.iter().enumerate() {
        let off = (*bytes as f64 - mean).abs() / mean;
        assert!(
            off <= 0.1,
            "server {i} holds {bytes} bytes, mean {mean}: {after:?}"
        );
    }
    let mut seen = std::collections::BTreeMap::new();
    for o in c.enumerate(t) {
        *seen.entry(o.unwrap().key).or_insert(0usize) += 1;
    }
    assert_eq!(seen.len(), N, "every object enumerated");
    assert!(seen.values().all(|n| *n == 1), "each exactly once");
    for i in (0..N).step_by(97) {
        assert_eq!(c.read(t, &key(i)).unwrap().0, value(i, 500), "object {i}");
    }
    let again = cluster.cli(&["rebalance"]);
    assert!(again.ok().contains("nothing to do"), "{}", again.ok());
    let status = cluster.cli(&["status"]);
    assert!(status.ok().contains("TABLETS"), "{}", status.ok());
}

//! Live migration while both masters' cleaners work at high memory utilisation
//! (about 75% live, the rest churned dead)
//! (issue 20's "migration while the cleaner runs at high utilisation"): the
//! source's cleaner relocates objects its pull scans are reading, and the
//! target's cleaner relocates pulled records while more arrive (K§2.3, L§4).
//! Every object of the moved tablet must reach the target at its newest value,
//! and the churned tables must keep theirs.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{owner_of, wait_until, write_all, Cluster};
use ramstore_client::BlockingClient;

/// Each master's log memory: small, so the churn below fills most of it.
const MEMORY: &str = "48MiB";
/// Objects of the migrated tablet (about 5 MiB).
const MOVED: usize = 20_000;
/// Objects of each churned table (about 29 MiB: with the moved tablet, ~75% of
/// a master's log in live data, and the churn keeps the rest mostly dead). Not
/// more: a target must stay below 90% of its memory after taking the tablet, or
/// the migration is refused up front (and the log counts some dead bytes too).
const CHURNED: usize = 115_000;
const VALUE_BYTES: usize = 240;

fn key(prefix: &str, i: usize) -> Vec<u8> {
    format!("{prefix}-{i}").into_bytes()
}

/// A value that names its key and generation, padded to [`VALUE_BYTES`].
fn value(i: usize, generation: u64) -> Vec<u8> {
    let mut v = format!("{i}:{generation}:").into_bytes();
    v.resize(VALUE_BYTES, b'.');
    v
}

fn load(c: &BlockingClient, table: u64, prefix: &str, count: usize) {
    let keys: Vec<Vec<u8>> = (0..count).map(|i| key(prefix, i)).collect();
    let values: Vec<Vec<u8>> = (0..count).map(|i| value(i, 0)).collect();
    write_all(c, table, &keys, &values, 500);
}

/// `compactions + combined_passes` of the server at `addr`.
fn cleaner_passes(c: &BlockingClient, addr: &str) -> u64 {
    let stats = c.server_stats(addr).unwrap();
    ["compactions", "combined_passes"]
        .iter()
        .map(|k| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("{k} in the stats:\n{stats}"))
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

/// Overwrites random objects of `table` until `stop`; the last generation of
/// each object it wrote.
fn churn(c: BlockingClient, table: u64, prefix: &str, seed: u64, stop: &AtomicBool) -> Vec<u64> {
    let mut last = vec![0u64; CHURNED];
    let mut x = seed | 1;
    let mut generation = 0;
    while !stop.load(Ordering::Relaxed) {
        // xorshift: a cheap, seeded pick of the object to overwrite.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % CHURNED as u64) as usize;
        generation += 1;
        c.write(table, &key(prefix, i), &value(i, generation))
            .expect("churn write (NO_SPACE is retried by the client)");
        last[i] = generation;
    }
    last
}

#[test]
fn migrate_tablet_while_both_cleaners_run_at_high_utilisation_moves_every_object() {
    let mut cluster = Cluster::start(0);
    for _ in 0..2 {
        cluster.add_server_with("127.0.0.1:0", &["--memory", MEMORY]);
    }
    let c = cluster.client();
    let moved = c.create_table("moved", 1).unwrap();
    let source = owner_of(&c, moved);
    let target = cluster.server_other_than(source);
    // One churned table per master: tables are placed by the coordinator, so
    // make tables until each master owns one.
    let mut churned: Vec<(u64, String, u64)> = Vec::new();
    for n in 0..8 {
        let name = format!("churn{n}");
        let t = c.create_table(&name, 1).unwrap();
        let owner = owner_of(&c, t);
        if churned.iter().all(|(_, _, o)| *o != owner) {
            churned.push((t, name, owner));
        }
        if churned.len() == 2 {
            break;
        }
    }
    assert_eq!(
        churned.len(),
        2,
        "the coordinator put every table on one master"
    );
    load(&c, moved, "moved", MOVED);
    for (t, name, _) in &churned {
        load(&c, *t, name, CHURNED);
    }

    // Churn both masters until they clean, then migrate while they keep cleaning.
    let stop = Arc::new(AtomicBool::new(false));
    let churners: Vec<_> = churned
        .iter()
        .enumerate()
        .map(|(n, (t, name, _))| {
            let (client, stop, name, t) = (cluster.client(), stop.clone(), name.clone(), *t);
            thread::spawn(move || churn(client, t, &name, 17 + n as u64, &stop))
        })
        .collect();
    let addrs: Vec<String> = [source, target]
        .iter()
        .map(|id| {
            let s = cluster.servers.iter().find(|s| s.id == *id).unwrap();
            s.addr.clone()
        })
        .collect();
    let before: Vec<u64> = addrs.iter().map(|a| cleaner_passes(&c, a)).collect();
    wait_until(
        "both masters' cleaners to run",
        Duration::from_secs(60),
        || {
            let now: Vec<u64> = addrs.iter().map(|a| cleaner_passes(&c, a)).collect();
            now.iter().zip(&before).all(|(n, b)| n > b).then_some(())
        },
    );
    // There and back: each master is the source once and the target once.
    for (to, to_index) in [(target, 1), (source, 0)] {
        let during: Vec<u64> = addrs.iter().map(|a| cleaner_passes(&c, a)).collect();
        let id = c.migrate_tablet("moved", 0, u64::MAX, to).unwrap();
        let info = wait_until("the migration to finish", Duration::from_secs(120), || {
            c.migrations()
                .unwrap()
                .into_iter()
                .find(|m| m.id == id && m.is_done())
        });
        let after: Vec<u64> = addrs.iter().map(|a| cleaner_passes(&c, a)).collect();
        eprintln!(
            "cleaner passes (source, target): migration start {during:?}, end {after:?}; {info:?}"
        );
        assert_eq!(owner_of(&c, moved), to);
        assert_eq!(info.objects, Some(MOVED as u64), "{info:?}");
        // The target's cleaner ran while the tablet moved: its memory filled with
        // pulled records on top of its own churn.
        assert!(
            after[to_index] > during[to_index],
            "the target's cleaner never ran during the migration: {during:?} → {after:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let lasts: Vec<Vec<u64>> = churners.into_iter().map(|h| h.join().unwrap()).collect();

    for i in 0..MOVED {
        let (v, _) = c.read(moved, &key("moved", i)).unwrap();
        assert_eq!(v, value(i, 0), "moved object {i}");
    }
    for ((t, name, _), last) in churned.iter().zip(&lasts) {
        for (i, generation) in last.iter().enumerate() {
            let (v, _) = c.read(*t, &key(name, i)).unwrap();
            assert_eq!(v, value(i, *generation), "{name} object {i}");
        }
    }
}

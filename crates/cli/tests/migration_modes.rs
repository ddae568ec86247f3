//! The benchmark baselines of live migration (issue 20, `scripts/bench-migration`)
//! against real processes: without PriorityPulls and stop-and-copy each move
//! every object of a tablet exactly, while a client reading the tablet the whole
//! time sees no failed operation and no wrong value; stop-and-copy moves
//! ownership only after the copy, so `MigrateTablet` returns with the migration
//! already done.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{owner_of, wait_until, write_all, Cluster};
use ramstore_client::MigrationMode;

const OBJECTS: usize = 20_000;

fn key(i: usize) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    format!("value-{i}-").repeat(10).into_bytes()
}

/// Two servers and table `t` in one tablet holding the objects: the cluster,
/// the table id, the owner and the other server.
fn setup() -> (Cluster, u64, u64, u64) {
    let mut cluster = Cluster::start(0);
    for _ in 0..2 {
        cluster.add_server_with("127.0.0.1:0", &["--memory", "128MiB"]);
    }
    let c = cluster.client();
    let t = c.create_table("t", 1).unwrap();
    let keys: Vec<Vec<u8>> = (0..OBJECTS).map(key).collect();
    let values: Vec<Vec<u8>> = (0..OBJECTS).map(value).collect();
    write_all(&c, t, &keys, &values, 500);
    let owner = owner_of(&c, t);
    let other = cluster.server_other_than(owner);
    (cluster, t, owner, other)
}

/// A client reading every object in turn until stopped: how many reads it
/// made, and every failure or wrong value it saw.
fn start_reader(
    cluster: &Cluster,
    t: u64,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<(usize, Vec<String>)> {
    let c = cluster.client();
    thread::spawn(move || {
        let (mut reads, mut bad) = (0, Vec::new());
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            match c.read(t, &key(i)) {
                Ok((v, _)) if v == value(i) => {}
                Ok(_) => bad.push(format!("object {i}: wrong value")),
                Err(e) => bad.push(format!("object {i}: {e}")),
            }
            reads += 1;
            i = (i + 7919) % OBJECTS;
        }
        (reads, bad)
    })
}

/// Migrates `t` in `mode` under the reader and checks everything moved.
fn migrate_under_reads(mode: MigrationMode) {
    let (cluster, t, source, target) = setup();
    let c = cluster.client();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = start_reader(&cluster, t, stop.clone());
    thread::sleep(Duration::from_millis(300));
    let id = c
        .migrate_tablet_with_mode("t", 0, u64::MAX, target, mode)
        .unwrap();
    assert_eq!(owner_of(&c, t), target, "the target owns the range");
    if mode == MigrationMode::StopAndCopy {
        let listed = c.migrations().unwrap();
        assert!(
            listed.iter().any(|m| m.id == id && m.is_done()),
            "stop-and-copy returns after the copy: {listed:?}"
        );
    }
    let done = wait_until("the migration to finish", Duration::from_secs(60), || {
        c.migrations()
            .unwrap()
            .into_iter()
            .find(|m| m.id == id && m.is_done())
    });
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (reads, bad) = reader.join().unwrap();
    assert!(
        bad.is_empty(),
        "{} bad reads, first: {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
    assert!(reads > 0, "the reader ran");
    assert_eq!(done.source, source);
    assert_eq!(
        done.objects,
        Some(OBJECTS as u64),
        "every object was pulled once: {done:?}"
    );
    for i in 0..OBJECTS {
        let (v, _) = c.read(t, &key(i)).unwrap();
        assert_eq!(v, value(i), "object {i}");
    }
}

#[test]
fn migrate_tablet_with_mode_no_priority_pulls_moves_every_object_without_failed_reads() {
    migrate_under_reads(MigrationMode::NoPriorityPulls);
}

#[test]
fn migrate_tablet_with_mode_stop_and_copy_moves_ownership_after_the_copy() {
    migrate_under_reads(MigrationMode::StopAndCopy);
}

#[test]
fn migrate_cli_stop_and_copy_waits_for_the_copy_and_reports_the_mode() {
    let (cluster, t, _, target) = setup();
    let out = cluster.cli(&[
        "migrate",
        "t",
        "--to",
        &ramstore_client::server_id::index(target).to_string(),
        "--stop-and-copy",
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(json["state"], "done");
    assert_eq!(json["mode"], "stop-and-copy");
    assert_eq!(json["objects"].as_u64(), Some(OBJECTS as u64), "{json}");
    let c = cluster.client();
    assert_eq!(owner_of(&c, t), target);
}

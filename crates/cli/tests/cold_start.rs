//! Cold start (issue 4): after every process of a cluster — or the one process of
//! `ramstore dev` — is SIGKILLed and started again on the same directories, every
//! acknowledged object is back with its version, deleted objects stay deleted, and
//! new versions are higher than any given before.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Coordinator, Dev, Server};
use ramstore_client::{BlockingClient, ClientError, ClientOptions};

/// Objects written per test, some big enough that heads fill and segments close.
const OBJECTS: usize = 600;

fn client(coordinator: &str) -> BlockingClient {
    let mut options = ClientOptions::new(coordinator);
    options.operation_deadline = Duration::from_secs(60);
    BlockingClient::connect(options).expect("client connects")
}

fn value(i: usize, round: u8) -> Vec<u8> {
    // Every tenth value is 64 KiB, the rest 1 KiB: about 4.5 MiB per round over
    // three masters.
    let len = if i.is_multiple_of(10) {
        64 * 1024
    } else {
        1024
    };
    (0..len).map(|j| (i + j) as u8 ^ round).collect()
}

/// Writes, overwrites and deletes; returns what must be there afterwards
/// (key → Some((value, version)) or None for deleted).
fn write_history(client: &BlockingClient, table: u64) -> BTreeMap<String, Option<(Vec<u8>, u64)>> {
    let mut expected = BTreeMap::new();
    for round in 0..2u8 {
        for i in 0..OBJECTS {
            if round == 1 && !i.is_multiple_of(3) {
                continue;
            }
            let key = format!("key-{i}");
            let v = value(i, round);
            let version = client
                .write(table, key.as_bytes(), &v)
                .expect("write acknowledged");
            expected.insert(key, Some((v, version)));
        }
    }
    for i in (0..OBJECTS).filter(|i| i.is_multiple_of(7)) {
        let key = format!("key-{i}");
        client
            .remove(table, key.as_bytes())
            .expect("remove acknowledged");
        expected.insert(key, None);
    }
    expected
}

fn check(client: &BlockingClient, table: u64, expected: &BTreeMap<String, Option<(Vec<u8>, u64)>>) {
    for (key, want) in expected {
        match (client.read(table, key.as_bytes()), want) {
            (Ok((value, version)), Some((v, ver))) => {
                assert_eq!(version, *ver, "version of {key}");
                assert!(value == *v, "value of {key} differs");
            }
            (Err(ClientError::ObjectDoesntExist), None) => {}
            (got, want) => panic!(
                "{key}: got {:?}, want {:?}",
                got.map(|(_, v)| v),
                want.as_ref().map(|(_, v)| v)
            ),
        }
    }
    // Versions never go back: rewriting a deleted key gives a version above every
    // version seen before the crash.
    let max_before = expected
        .values()
        .flatten()
        .map(|(_, v)| *v)
        .max()
        .unwrap_or(0);
    let deleted = expected
        .iter()
        .find(|(_, w)| w.is_none())
        .map(|(k, _)| k.clone())
        .expect("some key was deleted");
    let version = client
        .write(table, deleted.as_bytes(), b"again")
        .expect("write after restart");
    assert!(
        version > max_before,
        "new version {version} must exceed {max_before}"
    );
}

#[test]
fn dev_sigkill_then_restart_brings_back_every_acknowledged_object() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        "--servers",
        "3",
        "--memory",
        "64MiB",
        "--backup-frames",
        "16",
    ];
    let mut dev = Dev::start(dir.path(), 3, &extra);
    let port = dev.port;
    let expected = {
        let c = client(&dev.addr);
        let table = c.create_table("cold", 3).expect("create table");
        write_history(&c, table)
    };
    dev.proc.kill();
    let dev = Dev::start_on(port, dir.path(), &extra).expect("dev restarts on the same directory");
    let c = client(&dev.addr);
    let table = c.get_table_id("cold").expect("table survives");
    check(&c, table, &expected);
}

#[test]
fn cluster_sigkill_of_every_process_then_restart_brings_back_every_acknowledged_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("coordinator");
    let coordinator = Coordinator::start(&store);
    let port = coordinator.port();
    let addr = format!("127.0.0.1:{port}");
    let listens: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", common::free_port()))
        .collect();
    let backup_dirs: Vec<String> = (0..3)
        .map(|i| dir.path().join(format!("backup-{i}")).display().to_string())
        .collect();
    let start_all = |addr: &str| -> Vec<Server> {
        let extras: Vec<[&str; 6]> = backup_dirs
            .iter()
            .map(|b| {
                [
                    "--replicas",
                    "2",
                    "--backup-dir",
                    b.as_str(),
                    "--backup-frames",
                    "16",
                ]
            })
            .collect();
        let specs: Vec<(&str, &[&str])> = listens
            .iter()
            .zip(&extras)
            .map(|(l, e)| (l.as_str(), &e[..]))
            .collect();
        Server::start_all(addr, &specs).expect("servers start")
    };
    let mut servers = start_all(&addr);
    let expected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let c = client(&addr);
        let table = c.create_table("cold", 3).expect("create table");
        write_history(&c, table)
    }));
    let expected = match expected {
        Ok(e) => e,
        Err(p) => {
            for s in &servers {
                eprintln!("--- server {} ---\n{}", s.id, s.proc.transcript());
            }
            std::panic::resume_unwind(p)
        }
    };
    let mut coordinator = coordinator;
    for s in &mut servers {
        s.proc.kill();
    }
    coordinator.proc.kill();
    drop(servers);
    drop(coordinator);
    let coordinator = Coordinator::start_on(port, &store).expect("coordinator restarts");
    let servers = start_all(&addr);
    let c = client(&addr);
    let table = c.get_table_id("cold").expect("table survives");
    let checked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&c, table, &expected)));
    if let Err(p) = checked {
        eprintln!("{}", coordinator.proc.transcript());
        for s in &servers {
            eprintln!("--- server {} ---\n{}", s.id, s.proc.transcript());
        }
        std::panic::resume_unwind(p)
    }
}

/// A restart whose coordinator state was wiped (its directory deleted) starts at
/// once and empty: no tablet waits for the old logs, so nothing waits for them.
#[test]
fn dev_restart_with_a_wiped_coordinator_starts_empty_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        "--servers",
        "2",
        "--memory",
        "64MiB",
        "--backup-frames",
        "16",
    ];
    let mut dev = Dev::start(dir.path(), 2, &extra);
    let port = dev.port;
    {
        let c = client(&dev.addr);
        let table = c.create_table("gone", 2).expect("create table");
        c.write(table, b"k", b"v").expect("write");
    }
    dev.proc.kill();
    std::fs::remove_dir_all(dir.path().join("coordinator")).unwrap();
    // Ready within the harness's ready timeout: far below the 60 s a cold start
    // would wait for logs some tablet still needs.
    let dev = Dev::start_on(port, dir.path(), &extra).expect("dev restarts at once");
    let c = client(&dev.addr);
    assert!(matches!(
        c.get_table_id("gone"),
        Err(ClientError::TableDoesntExist)
    ));
    // Ids start over in a fresh coordinator: neither restarted server may take
    // the other's new id for its own old one and replace it.
    let stats = c.server_stats(&dev.addr).expect("coordinator stats");
    let states: Vec<&str> = stats
        .lines()
        .filter(|l| l.starts_with("server."))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(states, ["up", "up"], "{stats}");
}

/// Expiry survives a cold start (issue 24; R§4: the expiry is in the
/// object's log entry): after SIGKILL and restart, a key whose time passed
/// stays gone, one whose time has not keeps its deadline, and one made
/// persistent never expires.
#[test]
fn dev_sigkill_then_restart_keeps_expiry_times() {
    let dir = tempfile::tempdir().unwrap();
    // Three servers, so each master's log is on other servers' backups.
    let extra = [
        "--servers",
        "3",
        "--memory",
        "64MiB",
        "--backup-frames",
        "16",
    ];
    let mut dev = Dev::start(dir.path(), 3, &extra);
    let port = dev.port;
    let hour = Duration::from_secs(3600);
    let (table, live_at) = {
        let c = client(&dev.addr);
        let table = c.create_table("ttl", 3).expect("create table");
        c.write_with_ttl(table, b"live", b"v", hour).expect("write");
        c.write_with_ttl(table, b"short", b"v", Duration::from_millis(300))
            .expect("write");
        c.write_with_ttl(table, b"kept", b"v", Duration::from_millis(300))
            .expect("write");
        assert!(c.persist(table, b"kept").expect("persist"));
        c.write(table, b"plain", b"v").expect("write");
        let live_at = c.expiry(table, b"live").expect("expiry");
        assert!(live_at.is_some());
        (table, live_at)
    };
    dev.proc.kill();
    // "short" (300 ms) has expired by the time the cluster is back.
    std::thread::sleep(Duration::from_millis(400));
    let dev = Dev::start_on(port, dir.path(), &extra).expect("dev restarts on the same directory");
    let c = client(&dev.addr);
    assert_eq!(c.get_table_id("ttl").expect("table survives"), table);
    assert_eq!(c.expiry(table, b"live"), Ok(live_at));
    assert_eq!(c.read(table, b"live").expect("live").0, b"v");
    assert_eq!(
        c.read(table, b"short").map(|(v, _)| v),
        Err(ClientError::ObjectDoesntExist),
        "an expired key came back"
    );
    assert_eq!(c.expiry(table, b"kept"), Ok(None));
    assert_eq!(c.expiry(table, b"plain"), Ok(None));
}

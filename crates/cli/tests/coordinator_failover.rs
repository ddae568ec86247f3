//! Coordinator failover on etcd with real processes (R§9): an active coordinator and
//! a standby share an etcd; the active one is SIGKILLed under a client load; the
//! standby takes over within twice the lease TTL, the load goes on, coordinator
//! operations work again, no table is lost and every acknowledged write is readable.
//!
//! etcd must be installed (`/usr/bin/etcd` or on PATH): without it this test fails,
//! saying how to install it (CI installs it in `.ci/run`).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{free_port, run_cli, runtime, spawn_ramstore, Proc, Server, READY_TIMEOUT};
use ramstore_client::{Client, ClientOptions};
use ramstore_harness::etcd::TestEtcd;

/// The lease TTL the coordinators run with (the default, given explicitly).
const LEASE_TTL_MS: u64 = 2_000;
/// Keys the load writes before and after the crash, at least.
const MIN_WRITES_EACH_SIDE: usize = 50;

fn ready_line(l: &str) -> bool {
    l.starts_with("ramstore coordinator listening on ")
}

/// Starts `ramstore coordinator` on `addr` with the etcd store (and `extra`).
fn coordinator(name: &str, addr: &str, store: &str, extra: &[&str]) -> Proc {
    let ttl = LEASE_TTL_MS.to_string();
    let mut args = vec![
        "coordinator",
        "--listen",
        addr,
        "--store",
        store,
        "--lease-ttl-ms",
        &ttl,
    ];
    args.extend_from_slice(extra);
    spawn_ramstore(name, &args, &[])
}

#[test]
fn coordinator_failover_standby_takes_over_under_load() {
    let etcd = TestEtcd::start().unwrap_or_else(|e| panic!("{e}"));
    let store = etcd.store_arg();
    let addr_a = format!("127.0.0.1:{}", free_port());
    let addr_b = format!("127.0.0.1:{}", free_port());
    // Every process is spawned from this thread: a child dies with the thread that
    // spawned it (PR_SET_PDEATHSIG).
    let mut a = coordinator("coordinator A", &addr_a, &store, &[]);
    a.wait_for_line(ready_line, READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut b = coordinator("coordinator B", &addr_b, &store, &["--standby"]);
    b.wait_for_line(
        |l| l.starts_with("ramstore coordinator standing by"),
        READY_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let coordinators = format!("{addr_a},{addr_b}");
    let no_args: &[&str] = &[];
    let servers = Server::start_all(&coordinators, &[("127.0.0.1:0", no_args); 3])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(servers.len(), 3);

    let rt = runtime();
    let options = ClientOptions {
        operation_deadline: Duration::from_secs(20),
        ..ClientOptions::new(coordinators.clone())
    };
    let client = rt
        .block_on(Client::connect(options))
        .expect("client connects");
    let t1 = rt
        .block_on(client.create_table("t1", 3))
        .expect("create t1");

    // The load: writes of fresh keys, each acknowledged one remembered, and reads
    // of acknowledged keys, from another thread until told to stop.
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (client, acked, errors, stop) =
            (client.clone(), acked.clone(), errors.clone(), stop.clone());
        thread::spawn(move || {
            let rt = runtime();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("key-{i}");
                let value = format!("value-{i}");
                match rt.block_on(client.write(t1, key.as_bytes(), value.as_bytes())) {
                    Ok(_) => acked.lock().unwrap().push((key, value)),
                    Err(e) => errors.lock().unwrap().push(format!("write {key}: {e}")),
                }
                if i.is_multiple_of(4) {
                    let probe = acked.lock().unwrap().get(i as usize / 2).cloned();
                    if let Some((k, v)) = probe {
                        match rt.block_on(client.read(t1, k.as_bytes())) {
                            Ok((got, _)) if got == v.as_bytes() => {}
                            Ok((got, _)) => errors
                                .lock()
                                .unwrap()
                                .push(format!("read {k}: {:?}", String::from_utf8_lossy(&got))),
                            Err(e) => errors.lock().unwrap().push(format!("read {k}: {e}")),
                        }
                    }
                }
                i += 1;
                thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let wait_acked = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while acked.lock().unwrap().len() < n {
            assert!(Instant::now() < deadline, "the load stalled at {n} writes");
            thread::sleep(Duration::from_millis(10));
        }
    };
    wait_acked(MIN_WRITES_EACH_SIDE);

    // Crash the active coordinator mid-load.
    a.kill();
    let killed = Instant::now();
    let before_crash = acked.lock().unwrap().len();
    // An operation that needs the coordinator, issued at once: the client moves on
    // to the standby's address and retries until it has taken over.
    let t2 = rt
        .block_on(client.create_table("t2", 2))
        .expect("create t2 after the crash");
    let create_took = killed.elapsed();
    b.wait_for_line(ready_line, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("the standby did not take over: {e}"));
    let took_over = killed.elapsed();
    // Reads and writes go to the masters: they went on while no coordinator ran.
    let during_takeover = acked.lock().unwrap().len() - before_crash;
    assert!(
        during_takeover > 0,
        "no write was acknowledged during the takeover"
    );
    assert!(
        took_over < Duration::from_millis(2 * LEASE_TTL_MS),
        "takeover took {took_over:?}, more than twice the lease TTL\n{}",
        b.transcript()
    );
    assert!(t2 > t1, "table ids are never reused: t1 {t1}, t2 {t2}");
    assert!(create_took < Duration::from_secs(10), "{create_took:?}");
    eprintln!(
        "takeover {took_over:?} after the crash; create-table across it took \
         {create_took:?}; writes acknowledged: {before_crash} before the crash, \
         {during_takeover} during the takeover"
    );
    wait_acked(before_crash + MIN_WRITES_EACH_SIDE);
    stop.store(true, Ordering::Relaxed);
    load.join().expect("load thread");

    let errors = errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "load errors: {errors:?}");
    // No table is lost and the new coordinator answers for both.
    assert_eq!(rt.block_on(client.get_table_id("t1")).expect("t1"), t1);
    assert_eq!(rt.block_on(client.get_table_id("t2")).expect("t2"), t2);
    let map = rt.block_on(client.tablet_map()).expect("tablet map");
    assert_eq!(map.iter().filter(|t| t.table_id == t1).count(), 3);
    assert_eq!(map.iter().filter(|t| t.table_id == t2).count(), 2);
    // Every acknowledged write is still there.
    let acked = acked.lock().unwrap().clone();
    for (k, v) in &acked {
        let (got, _) = rt
            .block_on(client.read(t1, k.as_bytes()))
            .unwrap_or_else(|e| panic!("read {k}: {e}"));
        assert_eq!(got, v.as_bytes(), "{k}");
    }
    // The new coordinator's table also works, and the CLI finds it by the list.
    rt.block_on(client.write(t2, b"after", b"failover"))
        .expect("write to t2");
    let out = run_cli(&["tables", "--coordinator", &coordinators], &[]);
    let text = out.ok();
    assert!(text.contains("t1") && text.contains("t2"), "{text}");
    let stats = rt
        .block_on(client.server_stats(&coordinators))
        .expect("coordinator stats");
    let up = stats.lines().filter(|l| l.contains(" up ")).count();
    assert_eq!(up, 3, "every server is still up:\n{stats}");
    drop(servers);
    drop(b);
    drop(etcd);
}

#[test]
fn coordinator_exits_when_it_loses_its_lease() {
    let mut etcd = TestEtcd::start().unwrap_or_else(|e| panic!("{e}"));
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = coordinator("coordinator", &addr, &etcd.store_arg(), &[]);
    c.wait_for_line(ready_line, READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}"));
    // Without etcd no keepalive succeeds: within one TTL of the last successful one
    // the coordinator must stop acting, i.e. exit (R§9).
    etcd.kill();
    let killed = Instant::now();
    let status = c
        .wait_timeout(Duration::from_millis(2 * LEASE_TTL_MS))
        .unwrap_or_else(|| panic!("still running after 2 TTLs\n{}", c.transcript()));
    assert_eq!(
        status.code(),
        Some(ramstore_coordinator::EXIT_LEADERSHIP_LOST),
        "{}",
        c.transcript()
    );
    assert!(killed.elapsed() <= Duration::from_millis(LEASE_TTL_MS + 500));
    // Give the stderr reader a moment to collect the last words.
    thread::sleep(Duration::from_millis(50));
    assert!(
        c.transcript().contains("lost coordinator leadership"),
        "{}",
        c.transcript()
    );
    // Nobody answers at its address any more.
    assert!(std::net::TcpStream::connect(&addr).is_err());
}

#[test]
fn coordinator_without_etcd_fails_at_start_with_a_clear_error() {
    let dead = format!("etcd://127.0.0.1:{}", free_port());
    let out = run_cli(
        &["coordinator", "--listen", "127.0.0.1:0", "--store", &dead],
        &[],
    );
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("does not answer"), "{out:?}");
}

#[test]
fn coordinator_standby_and_lease_flags_need_an_etcd_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = format!("file:{}", dir.path().display());
    let out = run_cli(&["coordinator", "--store", &store, "--standby"], &[]);
    // A usage error (issue 18: exit code 2, as clap's own).
    assert!(
        out.error_line(2).contains("--standby needs an etcd store"),
        "{out:?}"
    );
    let out = run_cli(
        &["coordinator", "--store", &store, "--lease-ttl-ms", "3000"],
        &[],
    );
    assert!(
        out.error_line(2).contains("only applies to an etcd store"),
        "{out:?}"
    );
    // clap reports bad values itself (exit code 2).
    for (args, says) in [
        (
            &["coordinator", "--store", "etcd://localhost"][..],
            "needs a port",
        ),
        (
            &[
                "coordinator",
                "--store",
                "etcd://h:1",
                "--lease-ttl-ms",
                "1500",
            ][..],
            "outside",
        ),
        (
            &[
                "coordinator",
                "--store",
                "etcd://h:1",
                "--lease-ttl-ms",
                "2500",
            ][..],
            "whole number of seconds",
        ),
        (&["coordinator", "--store", "zk://h:1"][..], "unknown store"),
    ] {
        let out = run_cli(args, &[]);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {out:?}");
    }
}

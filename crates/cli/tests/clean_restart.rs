//! Restarts as an operator sees them: a clean stop (SIGINT/SIGTERM) is recorded, so
//! the next start is an ordinary restart (INFO), not a crash recovery (WARN); a
//! server keeps its id across restarts of its directory; `status` hides removed
//! servers and earlier runs unless `--all`; logs carry no colour codes when stderr
//! is not a terminal; a failed `ramstore dev` start removes what it created.

mod common;

use std::time::Duration;

use common::{run_cli, Cluster, Dev, Server, READY_TIMEOUT};

/// `ramstore status [--all]` rows as (id, state), up to the tables summary.
fn rows(coordinator: &str, args: &[&str]) -> Vec<(String, String)> {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--coordinator", coordinator]);
    run_cli(&all, &[])
        .ok()
        .lines()
        .skip(2)
        .take_while(|l| !l.contains("table(s)"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[2].to_string())
        })
        .collect()
}

fn row(id: &str, state: &str) -> (String, String) {
    (id.to_string(), state.to_string())
}

/// The stderr part of a process's transcript.
fn stderr_of(transcript: &str) -> &str {
    transcript
        .split_once("stderr ---\n")
        .map_or(transcript, |(_, e)| e)
}

/// Ctrl-C on `ramstore dev`, then a start on the same directory: the servers keep
/// their ids, every object is back, and the restart's log says so at INFO — no
/// WARN line at all, no "recovering a crashed master" — and carries no ANSI
/// colour codes (stderr is a pipe here). `status` lists the two servers; `--all`
/// also the previous runs, removed.
#[test]
fn dev_clean_restart_keeps_server_ids_and_logs_no_crash() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--memory", "64MiB", "--backup-frames", "8"];
    let mut dev = Dev::start(dir.path(), 2, &args);
    let addr = dev.addr.clone();
    let env = [("RAMSTORE_COORDINATOR", addr.as_str())];
    run_cli(&["create-table", "demo", "--span", "2"], &env).ok();
    for i in 0..20 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        run_cli(&["put", "demo", &k, &v], &env).ok();
    }
    assert_eq!(
        rows(&dev.addr, &["status"]),
        [row("1", "up"), row("2", "up")]
    );
    let first = dev.proc.transcript();
    assert!(
        !first.contains('\u{1b}'),
        "no ANSI codes on a pipe:\n{first}"
    );

    dev.proc.signal(libc::SIGINT);
    let exit = dev.proc.wait_timeout(READY_TIMEOUT).expect("dev stops");
    assert_eq!(exit.code(), Some(0), "{}", dev.proc.transcript());
    let stopped = dev.proc.transcript();
    assert!(stopped.contains("stopped cleanly"), "{stopped}");
    for server in ["server-1", "server-2"] {
        let marker = dir.path().join(server).join("backup").join("server.clean");
        assert!(
            marker.exists(),
            "{} records the clean stop",
            marker.display()
        );
    }
    let port = dev.port;
    drop(dev);

    let dev = Dev::start_on(port, dir.path(), &args).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..20 {
        let out = run_cli(&["get", "demo", &format!("k{i}")], &env);
        assert_eq!(out.ok(), format!("v{i}\n"), "acknowledged data survives");
    }
    common::wait_until("the restart's recovery", Duration::from_secs(30), || {
        (rows(&addr, &["status", "--all"])
            == [
                row("1.0", "removed"),
                row("1", "up"),
                row("2.0", "removed"),
                row("2", "up"),
            ])
        .then_some(())
    });
    assert_eq!(
        rows(&addr, &["status"]),
        [row("1", "up"), row("2", "up")],
        "the same server ids"
    );
    let log = dev.proc.transcript();
    let stderr = stderr_of(&log);
    assert!(
        stderr.contains("restart after a clean stop"),
        "the servers know: {log}"
    );
    assert!(
        stderr.contains("recovering the data of a server that stopped cleanly"),
        "the coordinator reports a restart: {log}"
    );
    assert!(
        !stderr.contains("recovering a crashed master"),
        "no crash recovery: {log}"
    );
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains(" WARN ")).collect();
    assert!(warnings.is_empty(), "no warnings: {warnings:#?}\n{log}");
    assert!(!log.contains('\u{1b}'), "no ANSI codes on a pipe:\n{log}");
}

/// A SIGKILLed `ramstore dev` restarts with the same server ids too, but that
/// was a crash, and the log says so.
#[test]
fn dev_crash_restart_keeps_server_ids_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--memory", "64MiB", "--backup-frames", "8"];
    let mut dev = Dev::start(dir.path(), 2, &args);
    let addr = dev.addr.clone();
    let env = [("RAMSTORE_COORDINATOR", addr.as_str())];
    run_cli(&["create-table", "demo", "--span", "2"], &env).ok();
    run_cli(&["put", "demo", "hello", "world"], &env).ok();
    let port = dev.port;
    dev.proc.kill();
    drop(dev);

    let dev = Dev::start_on(port, dir.path(), &args).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run_cli(&["get", "demo", "hello"], &env).ok(), "world\n");
    assert_eq!(rows(&addr, &["status"]), [row("1", "up"), row("2", "up")]);
    let log = dev.proc.transcript();
    let stderr = stderr_of(&log);
    assert!(stderr.contains("restart after a crash"), "{log}");
    assert!(stderr.contains("recovering a crashed master"), "{log}");
}

/// `ramstore server` stopped with SIGTERM tells the coordinator it is leaving: its
/// data is recovered onto the others at once, logged at INFO, with no crash
/// warning anywhere. Restarted on its backup directory and address, it is the same
/// server id (its next run); `status` shows one row for it, `status --all` the
/// earlier run, removed. Every object is readable throughout.
#[test]
fn server_sigterm_leaves_cleanly_and_restart_keeps_its_id() {
    let mut cluster = Cluster::start(0);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    for d in &dirs {
        let dir = d.path().display().to_string();
        cluster.add_server_with(
            "127.0.0.1:0",
            &[
                "--backup-dir",
                &dir,
                "--backup-frames",
                "16",
                "--replicas",
                "1",
            ],
        );
    }
    let c = cluster.client();
    let t = c.create_table("t", 3).unwrap();
    for i in 0..60 {
        let k = format!("k{i}");
        c.write(t, k.as_bytes(), k.as_bytes()).unwrap();
    }
    let victim = cluster.servers.remove(0);
    let (victim_id, victim_addr) = (victim.id, victim.addr.clone());
    let mut victim = victim;
    victim.proc.signal(libc::SIGTERM);
    let exit = victim
        .proc
        .wait_timeout(READY_TIMEOUT)
        .expect("server stops");
    assert_eq!(exit.code(), Some(0), "{}", victim.proc.transcript());
    drop(victim);

    // Recovered onto the other two at once; readable again.
    for i in 0..60 {
        let k = format!("k{i}");
        assert_eq!(c.read(t, k.as_bytes()).unwrap().0, k.as_bytes());
    }
    let shown = victim_id.to_string();
    common::wait_until(
        "the stopped server removed",
        Duration::from_secs(30),
        || {
            rows(cluster.addr(), &["status", "--all"])
                .contains(&row(&shown, "removed"))
                .then_some(())
        },
    );
    assert!(
        !rows(cluster.addr(), &["status"])
            .iter()
            .any(|(id, _)| *id == shown),
        "a removed server is hidden"
    );

    let dir = dirs[0].path().display().to_string();
    let restarted = Server::start(
        cluster.addr(),
        &victim_addr,
        &[
            "--backup-dir",
            &dir,
            "--backup-frames",
            "16",
            "--replicas",
            "1",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        ramstore_wire::server_id::index(restarted.id),
        victim_id,
        "the same server id"
    );
    assert_eq!(ramstore_wire::server_id::incarnation(restarted.id), 1);
    cluster.servers.push(restarted);
    let listed = rows(cluster.addr(), &["status"]);
    assert_eq!(
        listed.iter().filter(|(id, _)| *id == shown).count(),
        1,
        "{listed:?}"
    );
    assert!(listed.contains(&row(&shown, "up")), "{listed:?}");
    let all = rows(cluster.addr(), &["status", "--all"]);
    assert!(
        all.contains(&row(&format!("{shown}.0"), "removed")),
        "{all:?}"
    );
    for i in 0..60 {
        let k = format!("k{i}");
        assert_eq!(c.read(t, k.as_bytes()).unwrap().0, k.as_bytes());
    }

    let log = cluster.coordinator.proc.transcript();
    assert!(
        log.contains("server stopped cleanly"),
        "the coordinator was told: {log}"
    );
    assert!(
        !log.contains("recovering a crashed master"),
        "no crash recovery: {log}"
    );
    assert!(!log.contains('\u{1b}'), "no ANSI codes on a pipe:\n{log}");
}

/// A `ramstore dev` that cannot start (its coordinator port is taken) removes the
/// directory it made, with its preallocated backup files, and says so; a
/// directory that existed before is left alone.
#[test]
fn dev_failed_start_removes_what_it_created() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("dev");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let dir_arg = dir.display().to_string();
    let out = run_cli(
        &[
            "dev", "--port", &port, "--dir", &dir_arg, "--memory", "64MiB",
        ],
        &[],
    );
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(!dir.exists(), "the new directory is removed: {out:?}");
    assert!(out.stderr.contains("removed"), "{out:?}");

    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), b"x").unwrap();
    let out = run_cli(
        &[
            "dev", "--port", &port, "--dir", &dir_arg, "--memory", "64MiB",
        ],
        &[],
    );
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(dir.join("keep").exists(), "an existing directory stays");
    drop(taken);
}

/// The banner says how much disk the backups take up front.
#[test]
fn dev_banner_states_the_disk_it_preallocates() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start(
        dir.path(),
        2,
        &["--memory", "64MiB", "--backup-frames", "8"],
    );
    let line = dev
        .banner
        .iter()
        .find(|l| l.starts_with("Backups:"))
        .unwrap_or_else(|| panic!("{:?}", dev.banner));
    // 8 frames of 8 MiB + 4 KiB, for 2 servers.
    assert!(line.contains("128.1 MiB of disk"), "{line}");
    assert!(line.contains("8 frames x 8 MiB x 2 servers"), "{line}");
}

//! The README's quick start, as a user would follow it: start `ramstore dev`, then
//! run exactly the commands its banner suggests (which must be the README's), and
//! stop it with Ctrl-C.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{run_cli, Dev, READY_TIMEOUT};

/// The commands of the README's "Run it" section, in order: the `export` line and
/// each `ramstore ...` command (with the `target/release/` path removed).
fn readme_commands() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    readme
        .lines()
        .map(str::trim)
        .filter_map(|l| {
            if l.starts_with("export RAMSTORE_COORDINATOR=") {
                Some(l.to_string())
            } else {
                l.strip_prefix("target/release/")
                    .filter(|c| c.starts_with("ramstore "))
                    .map(str::to_string)
            }
        })
        .collect()
}

/// The commands the banner suggests: the `export` line and each `ramstore ...` line.
fn banner_commands(banner: &[String]) -> Vec<String> {
    banner
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with("export ") || l.starts_with("ramstore "))
        .filter(|l| !l.starts_with("ramstore dev:"))
        .map(str::to_string)
        .collect()
}

/// `ramstore dev` with its defaults (but a free port and a temporary directory)
/// prints a banner naming the coordinator, two servers with 512 MiB each and the
/// warning that two servers keep one replica, not three; the commands it suggests are the README's and work as shown
/// with RAMSTORE_COORDINATOR set as it says (create-table, put, get printing
/// "world", status listing both servers); Ctrl-C (SIGINT) stops it cleanly.
#[test]
fn quickstart_commands_from_the_dev_banner_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut dev = Dev::start(dir.path(), 2, &[]);
    let p = dev.port;
    let banner = dev.banner.join("\n");
    let first = &dev.banner[0];
    assert!(
        first.starts_with(&format!(
            "ramstore dev: coordinator on 127.0.0.1:{p} (state in {}",
            dir.path().display()
        )),
        "{banner}"
    );
    assert!(
        first.ends_with(&format!(
            "2 storage server(s) on 127.0.0.1:{}, 127.0.0.1:{}, 512 MiB of log memory each.",
            p + 1,
            p + 2
        )),
        "{banner}"
    );
    assert!(
        banner.contains("WARNING: 1 replica(s) per segment (at most servers - 1 = 1)"),
        "{banner}"
    );
    assert!(dir.path().join("coordinator").is_dir(), "state in --dir");

    let commands = banner_commands(&dev.banner);
    assert_eq!(
        commands,
        [
            format!("export RAMSTORE_COORDINATOR=127.0.0.1:{p}"),
            "ramstore create-table demo".to_string(),
            "ramstore put demo hello world".to_string(),
            "ramstore get demo hello".to_string(),
            "ramstore status".to_string(),
        ],
        "{banner}"
    );
    let mut readme = readme_commands();
    assert!(
        !readme.is_empty(),
        "the README shows the quick start commands"
    );
    assert_eq!(
        readme.remove(0),
        "export RAMSTORE_COORDINATOR=127.0.0.1:7000",
        "README exports the default address"
    );
    assert_eq!(
        readme,
        commands[1..],
        "the README shows the banner's commands"
    );

    // Follow the banner exactly.
    let (name, value) = commands[0]
        .strip_prefix("export ")
        .and_then(|e| e.split_once('='))
        .expect("export NAME=VALUE");
    let env = [(name, value)];
    let mut outputs = Vec::new();
    for command in &commands[1..] {
        let args: Vec<&str> = command.split_whitespace().skip(1).collect();
        let out = run_cli(&args, &env);
        assert_eq!(out.code, Some(0), "`{command}` failed: {out:#?}");
        outputs.push(out);
    }
    assert_eq!(outputs[0].stdout, "table 'demo' has id 1\n");
    assert!(
        outputs[1].stdout.starts_with("version "),
        "{:?}",
        outputs[1]
    );
    assert_eq!(outputs[2].stdout, "world\n");
    let status = &outputs[3].stdout;
    let lines: Vec<&str> = status.lines().collect();
    assert!(
        lines[0].starts_with(&format!("coordinator 127.0.0.1:{p}: ")),
        "{status}"
    );
    let mut rows: Vec<Vec<&str>> = lines[2..lines.len() - 1]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{status}");
    // Servers start concurrently (cold start), so ids follow enlistment, not ports.
    rows.sort_by_key(|r| r[1].to_string());
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(
            row[1],
            format!("127.0.0.1:{}", p + 1 + i as u16),
            "{status}"
        );
        assert_eq!(row[2], "up", "{status}");
        assert_eq!(row[6], "512.0", "memory MiB: {status}");
        // Two dev servers: each master's log has one replica, on the other.
        assert_eq!(row[8], "R=1", "{status}");
        // Each backup holds the other master's open head (one of 8 open buffers;
        // its bytes so far are in the file): 64 frames × 8 MiB.
        // (Columns 9-12 are the resident split: RSS, log, hash table, other.)
        assert_eq!(row[13..15], ["1", "1/8"], "backup: {status}");
        assert!(row[15].ends_with("B/512.0MiB"), "backup disk: {status}");
    }
    assert_eq!(
        lines[lines.len() - 1],
        "1 table(s), 1 tablet(s)",
        "{status}"
    );

    // "Press Ctrl-C to stop."
    dev.proc.signal(libc::SIGINT);
    let exit = dev.proc.wait_timeout(READY_TIMEOUT).expect("dev stops");
    assert_eq!(exit.code(), Some(0), "{}", dev.proc.transcript());
    common::wait_until("the 'stopping' line", Duration::from_secs(5), || {
        dev.proc
            .stdout_lines()
            .iter()
            .any(|l| l == "stopping")
            .then_some(())
    });
    let out = run_cli(&["get", "demo", "hello"], &env);
    assert!(out.one_line_error().contains("cannot reach coordinator"));
}

/// `ramstore dev` restarted on the same port and directory after a SIGKILL keeps its
/// tables (the coordinator's state is in the directory) and their data: each server
/// reloads its log from the other's backup (cold start), and the table works on.
/// The servers keep their ids (1 and 2); their previous runs show only with
/// `status --all`, as removed runs 1.0 and 2.0.
#[test]
fn dev_restart_keeps_tables_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut dev = Dev::start(dir.path(), 2, &["--memory", "64MiB"]);
    let env = [("RAMSTORE_COORDINATOR", dev.addr.clone())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run_cli(&["create-table", "demo", "--span", "2"], &env).ok();
    run_cli(&["put", "demo", "hello", "world"], &env).ok();
    let port = dev.port;
    dev.proc.kill();
    drop(dev);

    let _dev =
        Dev::start_on(port, dir.path(), &["--memory", "64MiB"]).unwrap_or_else(|e| panic!("{e}"));
    let tables = run_cli(&["tables"], &env);
    let row: Vec<&str> = tables
        .ok()
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row, ["demo", "1", "2"], "{tables:?}");
    assert_eq!(
        run_cli(&["get", "demo", "hello"], &env).ok(),
        "world\n",
        "acknowledged data survives"
    );
    run_cli(&["put", "demo", "hello", "again"], &env).ok();
    assert_eq!(run_cli(&["get", "demo", "hello"], &env).ok(), "again\n");
    // Rows (id, state) of `status [--all]`, up to the tables summary.
    let rows = |args: &[&str]| -> Vec<(String, String)> {
        run_cli(args, &env)
            .ok()
            .lines()
            .skip(2)
            .take_while(|l| !l.contains("table(s)"))
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w[0].to_string(), w[2].to_string())
            })
            .collect()
    };
    let up = |id: &str| (id.to_string(), "up".to_string());
    assert_eq!(
        rows(&["status"]),
        [up("1"), up("2")],
        "the same two servers"
    );
    let removed = |id: &str| (id.to_string(), "removed".to_string());
    common::wait_until("the previous runs removed", Duration::from_secs(30), || {
        let all = rows(&["status", "--all"]);
        (all == [removed("1.0"), up("1"), removed("2.0"), up("2")]).then_some(())
    });
}

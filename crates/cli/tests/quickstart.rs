//! The README's quick start, as a user would follow it: its "Run it" and "Redis
//! clients" code blocks, top to bottom. `ramstore dev` starts (and prints exactly
//! the commands the README shows), the commands run in the other terminal, the
//! first `dev` is stopped with Ctrl-C and started again with a Redis port, and the
//! `console` session prints what the README shows.

mod common;

/// The README's Rust example (`cargo run -p ramstore-client --example quickstart`),
/// compiled into this test so it runs against the same `dev`.
#[path = "../../client/examples/quickstart.rs"]
#[allow(dead_code)] // its `main` is for `cargo run`; the test calls `run`
mod rust_example;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{free_port, free_port_run, run_cli, Dev, READY_TIMEOUT};

/// One step of the README's quick start.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `cargo run --release --bin ramstore -- dev ARGS` or `target/release/ramstore
    /// dev ARGS`, in the first terminal; `stop_first` when the README's text before
    /// it says to stop the running one with Ctrl-C.
    Dev { args: Vec<String>, stop_first: bool },
    /// `export NAME=VALUE` in the other terminal.
    Export { name: String, value: String },
    /// `target/release/ramstore ARGS`, with the output a `console` block shows.
    Ramstore {
        args: Vec<String>,
        expected: Option<Vec<String>>,
    },
    /// `$ redis-cli -p PORT ARGS` in a `console` block, and its output.
    RedisCli {
        port: u16,
        args: Vec<String>,
        expected: Vec<String>,
    },
}

/// The steps of the README from "## Run it" up to "## Test".
fn readme_steps() -> Vec<Step> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let start = readme.find("## Run it").expect("a \"Run it\" section");
    let end = readme[start..]
        .find("## Test")
        .map_or(readme.len(), |e| start + e);
    let mut steps = Vec::new();
    // The block being read: None outside code, Some(console?) inside.
    let mut block: Option<bool> = None;
    let mut prose = String::new();
    let words = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_string).collect() };
    for line in readme[start..end].lines() {
        let trimmed = line.trim();
        match block {
            None if trimmed.starts_with("```") => {
                block = Some(trimmed == "```console");
            }
            None => prose.push_str(&format!("{trimmed}\n")),
            Some(_) if trimmed == "```" => {
                block = None;
                prose.clear();
            }
            Some(false) => {
                let dev = trimmed
                    .strip_prefix("cargo run --release --bin ramstore -- dev")
                    .or_else(|| trimmed.strip_prefix("target/release/ramstore dev"));
                if let Some(rest) = dev {
                    steps.push(Step::Dev {
                        args: words(rest),
                        stop_first: prose.contains("Ctrl-C"),
                    });
                } else if let Some(export) = trimmed.strip_prefix("export ") {
                    let (name, value) = export.split_once('=').expect("export NAME=VALUE");
                    steps.push(Step::Export {
                        name: name.into(),
                        value: value.into(),
                    });
                } else if let Some(rest) = trimmed.strip_prefix("target/release/ramstore ") {
                    steps.push(Step::Ramstore {
                        args: words(rest),
                        expected: None,
                    });
                } else {
                    assert!(
                        trimmed.is_empty() || trimmed.starts_with('#'),
                        "the quick start test does not know this README command: {trimmed:?}"
                    );
                }
            }
            Some(true) => {
                if let Some(command) = trimmed.strip_prefix("$ ") {
                    if let Some(rest) = command.strip_prefix("target/release/ramstore ") {
                        steps.push(Step::Ramstore {
                            args: words(rest),
                            expected: Some(Vec::new()),
                        });
                    } else if let Some(rest) = command.strip_prefix("redis-cli -p ") {
                        let mut w = words(rest);
                        let port = w.remove(0).parse().expect("redis-cli -p PORT");
                        steps.push(Step::RedisCli {
                            port,
                            args: w,
                            expected: Vec::new(),
                        });
                    } else {
                        panic!(
                            "the quick start test does not know this README command: {command:?}"
                        );
                    }
                } else {
                    match steps.last_mut() {
                        Some(
                            Step::Ramstore {
                                expected: Some(out),
                                ..
                            }
                            | Step::RedisCli { expected: out, .. },
                        ) => out.push(line.to_string()),
                        other => panic!("output without a command in the README: {other:?}"),
                    }
                }
            }
        }
    }
    steps
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

/// The first `ramstore dev` of the README with its defaults (but a free port and a
/// temporary directory) prints a banner naming the coordinator, two servers with
/// 512 MiB each and the warning that two servers keep one replica, not three.
fn check_banner(dev: &Dev, dir: &Path) {
    let p = dev.port;
    let banner = dev.banner.join("\n");
    let first = &dev.banner[0];
    assert!(
        first.starts_with(&format!(
            "ramstore dev: coordinator on 127.0.0.1:{p} (state in {}",
            dir.display()
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
    assert!(dir.join("coordinator").is_dir(), "state in --dir");
}

/// What the README's commands without shown output must print: create-table,
/// put, get printing "world", status listing both servers.
fn check_output(args: &[String], stdout: &str, p: u16) {
    match args[0].as_str() {
        "create-table" => assert_eq!(stdout, "table 'demo' has id 1\n"),
        "put" => assert!(stdout.starts_with("version "), "{stdout}"),
        "get" => assert_eq!(stdout, "world\n"),
        "status" => {
            let lines: Vec<&str> = stdout.lines().collect();
            assert!(
                lines[0].starts_with(&format!("coordinator 127.0.0.1:{p}: ")),
                "{stdout}"
            );
            let mut rows: Vec<Vec<&str>> = lines[2..lines.len() - 1]
                .iter()
                .map(|l| l.split_whitespace().collect())
                .collect();
            assert_eq!(rows.len(), 2, "{stdout}");
            // Servers start concurrently (cold start), so ids follow enlistment.
            rows.sort_by_key(|r| r[1].to_string());
            for (i, row) in rows.iter().enumerate() {
                assert_eq!(
                    row[1],
                    format!("127.0.0.1:{}", p + 1 + i as u16),
                    "{stdout}"
                );
                assert_eq!(row[2], "up", "{stdout}");
                assert_eq!(row[6], "512.0", "memory MiB: {stdout}");
                // Two dev servers: each master's log has one replica, on the other.
                assert_eq!(row[8], "R=1", "{stdout}");
                // Each backup holds the other master's open head (one of 8 open
                // buffers; its bytes so far are in the file): 64 frames × 8 MiB.
                // (Columns 9-12 are the resident split: RSS, log, hash table, other.)
                assert_eq!(row[13..15], ["1", "1/8"], "backup: {stdout}");
                assert!(row[15].ends_with("B/512.0MiB"), "backup disk: {stdout}");
            }
            assert_eq!(
                lines[lines.len() - 1],
                "1 table(s), 1 tablet(s)",
                "{stdout}"
            );
        }
        other => panic!("no check for `ramstore {other}`"),
    }
}

/// Stops `dev` as the README says (Ctrl-C, i.e. SIGINT): it prints "stopping" and
/// exits 0.
fn ctrl_c(dev: &mut Dev) {
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
}

/// The README's quick start, top to bottom: every step runs as shown (with the
/// test's ports and directory for the README's 7000, 6380 and the default
/// directory) and prints what the README says; the first `dev`'s banner suggests
/// exactly the README's commands; its data is still there after the Ctrl-C
/// restart with a Redis port; the last `dev` stops cleanly on Ctrl-C.
#[test]
fn readme_quick_start_top_to_bottom() {
    let steps = readme_steps();
    let dev_starts = steps
        .iter()
        .filter(|s| matches!(s, Step::Dev { .. }))
        .count();
    assert_eq!(dev_starts, 2, "dev, then dev with a Redis port: {steps:#?}");
    assert!(
        matches!(&steps[0], Step::Dev { args, stop_first: false } if args.is_empty()),
        "the README starts with `ramstore dev`: {steps:#?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let port = free_port_run(2);
    let resp_port = free_port();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut dev: Option<Dev> = None;
    let mut first_commands = Vec::new();
    let mut redis_steps = 0;
    for step in &steps {
        match step {
            Step::Dev { args, stop_first } => {
                if let Some(running) = dev.as_mut() {
                    assert!(
                        stop_first,
                        "the README says to stop the first dev: {step:?}"
                    );
                    ctrl_c(running);
                }
                drop(dev.take());
                let args: Vec<String> = args
                    .iter()
                    .map(|a| {
                        if a == "6380" {
                            resp_port.to_string()
                        } else {
                            a.clone()
                        }
                    })
                    .collect();
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let started =
                    Dev::start_on(port, dir.path(), &args).unwrap_or_else(|e| panic!("{e}"));
                if first_commands.is_empty() {
                    check_banner(&started, dir.path());
                    first_commands = banner_commands(&started.banner);
                }
                dev = Some(started);
            }
            Step::Export { name, value } => {
                assert_eq!(
                    format!("export {name}={value}"),
                    "export RAMSTORE_COORDINATOR=127.0.0.1:7000"
                );
                assert_eq!(
                    first_commands.first().map(String::as_str),
                    Some(format!("export RAMSTORE_COORDINATOR=127.0.0.1:{port}").as_str()),
                    "the banner's export"
                );
                env.push((name.clone(), format!("127.0.0.1:{port}")));
            }
            Step::Ramstore { args, expected } => {
                let env: Vec<(&str, &str)> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let argv: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = run_cli(&argv, &env);
                assert_eq!(
                    out.code,
                    Some(0),
                    "`ramstore {}` failed: {out:#?}",
                    args.join(" ")
                );
                match expected {
                    Some(lines) => assert_eq!(out.stdout, format!("{}\n", lines.join("\n"))),
                    None => check_output(args, &out.stdout, port),
                }
            }
            Step::RedisCli {
                port: readme_port,
                args,
                expected,
            } => {
                assert_eq!(*readme_port, 6380, "redis-cli uses the port dev was given");
                // A terminal shows typed replies ("hello", (integer) 1); so does
                // --no-raw when the output is a pipe.
                let out = Command::new("redis-cli")
                    .args(["-p", &resp_port.to_string(), "--no-raw"])
                    .args(args)
                    .stdin(Stdio::null())
                    .output()
                    .unwrap_or_else(|e| {
                        panic!("cannot run redis-cli (scripts/install-test-deps): {e}")
                    });
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert_eq!(
                    stdout.trim_end(),
                    expected.join("\n"),
                    "redis-cli {args:?}: {out:?}"
                );
                redis_steps += 1;
            }
        }
    }
    assert!(
        redis_steps >= 4,
        "README shows a redis-cli session: {steps:#?}"
    );

    // The README's "Run it" commands are the first dev's banner's.
    let readme_commands: Vec<String> = steps
        .iter()
        .take_while(|s| {
            !matches!(
                s,
                Step::Dev {
                    stop_first: true,
                    ..
                }
            )
        })
        .filter_map(|s| match s {
            Step::Ramstore {
                args,
                expected: None,
            } => Some(format!("ramstore {}", args.join(" "))),
            _ => None,
        })
        .collect();
    assert_eq!(
        readme_commands,
        first_commands[1..],
        "the README shows the banner's commands"
    );

    // "From Rust, see crates/client/examples/quickstart.rs (… against ramstore dev)".
    let dev_addr = dev.as_ref().expect("dev running").addr.clone();
    check_rust_example(&dev_addr);

    // "Press Ctrl-C to stop."
    let mut dev = dev.expect("dev running");
    ctrl_c(&mut dev);
    let env = [("RAMSTORE_COORDINATOR", dev.addr.as_str())];
    let out = run_cli(&["get", "demo", "hello"], &env);
    assert!(out.error_line(3).contains("cannot reach coordinator"));
}

/// The README's Rust example against `dev` at `addr`: every step does what the
/// example says.
fn check_rust_example(addr: &str) {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md");
    assert!(
        readme.contains("cargo run -p ramstore-client --example quickstart"),
        "the README names the example"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let found = runtime
        .block_on(rust_example::run(addr.to_string()))
        .unwrap_or_else(|e| panic!("the Rust example failed: {e}"));
    assert_eq!(found.len(), 6, "{found:#?}");
    assert!(
        found[0].starts_with("greeting = hello (version "),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("stale update refused (version is "),
        "{found:#?}"
    );
    assert_eq!(
        found[2..],
        [
            "visits = 1",
            "batch wrote 10 objects",
            // greeting, visits and the ten users.
            "the table holds 12 objects",
            "greeting deleted",
        ],
        "{found:#?}"
    );
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

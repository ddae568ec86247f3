//! The `ramstore` command line against real processes: what every data and admin
//! command prints, exit codes, one-line errors, `RAMSTORE_COORDINATOR`, argument
//! errors, and the process commands' own failures.
//!
//! A value just over 1 MiB cannot be passed as one argument (Linux limits a single
//! argument to 128 KiB), so TOO_LARGE is exercised here with a key one byte over the
//! 65,535-byte limit, and for values through the client (`client_api.rs`).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{dead_addr, free_port, run_cli, Cluster, Proc, READY_TIMEOUT};

/// The rows of `ramstore tables` after the header: name → (id, tablets).
fn parse_tables(out: &str) -> BTreeMap<String, (u64, usize)> {
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(header, ["TABLE", "ID", "TABLETS"], "{out}");
    lines
        .filter(|l| *l != "(no tables)")
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 3, "{l:?}");
            (
                w[0].to_string(),
                (w[1].parse().unwrap(), w[2].parse().unwrap()),
            )
        })
        .collect()
}

/// One server row of `ramstore status`.
#[derive(Debug)]
struct StatusRow {
    id: u64,
    address: String,
    state: String,
    tablets: usize,
    objects: String,
    durability: String,
    /// The resident split in MiB: process (RSS), log, hash table, other.
    resident: [f64; 4],
    /// The backup columns: "REPLICAS BUFFERS USED/CAPACITY", or "backup off".
    backup: String,
}

/// `ramstore status`: the server rows, and the summary line.
fn parse_status(out: &str) -> (Vec<StatusRow>, String) {
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("coordinator 127.0.0.1:") && lines[0].contains("server list version"),
        "{out}"
    );
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(header[..3], ["ID", "ADDRESS", "STATUS"], "{out}");
    let rows = lines[2..lines.len() - 1]
        .iter()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // Nine columns, four of resident memory, then three of backup or the
            // two words "backup off".
            assert!(w.len() == 15 || w.len() == 16, "{l:?}");
            StatusRow {
                id: w[0].parse().unwrap(),
                address: w[1].to_string(),
                state: w[2].to_string(),
                tablets: w[3].parse().unwrap(),
                objects: w[4].to_string(),
                durability: w[8].to_string(),
                resident: std::array::from_fn(|i| {
                    w[9 + i]
                        .parse()
                        .unwrap_or_else(|_| panic!("resident MiB in {l:?}"))
                }),
                backup: w[13..].join(" "),
            }
        })
        .collect();
    (rows, lines[lines.len() - 1].to_string())
}

/// The version in "version N".
fn version_of(line: &str) -> u64 {
    line.trim_end()
        .strip_prefix("version ")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("not a version line: {line:?}"))
}

/// Every data and admin command on a two-server cluster: create-table (idempotent),
/// tables, put (plain, --if-version, --create-only), get (with --version on stderr),
/// del, incr (default delta, positive, negative), scan (with --limit), status and
/// drop-table (which frees the table's objects), each printing its result on
/// stdout and exiting 0.
#[test]
fn data_commands_print_results_and_exit_zero() {
    let cluster = Cluster::start(2);
    let out = cluster.cli(&["tables"]);
    assert_eq!(out.ok(), "TABLE ID TABLETS\n(no tables)\n");

    assert_eq!(
        cluster.cli(&["create-table", "users", "--span", "2"]).ok(),
        "table 'users' has id 1\n"
    );
    assert_eq!(
        cluster.cli(&["create-table", "users"]).ok(),
        "table 'users' has id 1\n",
        "idempotent"
    );
    assert_eq!(
        cluster.cli(&["create-table", "logs"]).ok(),
        "table 'logs' has id 2\n"
    );
    let tables = parse_tables(cluster.cli(&["tables"]).ok());
    assert_eq!(
        tables,
        BTreeMap::from([("logs".into(), (2, 1)), ("users".into(), (1, 2))])
    );

    let v1 = version_of(cluster.cli(&["put", "users", "alice", "30"]).ok());
    let out = cluster.cli(&["get", "users", "alice"]);
    assert_eq!((out.ok(), out.stderr.as_str()), ("30\n", ""));
    let out = cluster.cli(&["get", "users", "alice", "--version"]);
    assert_eq!(out.ok(), "30\n");
    assert_eq!(version_of(&out.stderr), v1);

    let v1s = v1.to_string();
    let v2 = version_of(
        cluster
            .cli(&["put", "users", "alice", "31", "--if-version", &v1s])
            .ok(),
    );
    assert!(v2 > v1);
    let v3 = version_of(
        cluster
            .cli(&["put", "users", "bob", "25", "--create-only"])
            .ok(),
    );
    let spaced = "a value with spaces, tabs\tand ünïcödé";
    let v4 = version_of(cluster.cli(&["put", "users", "carol", spaced]).ok());
    // Printed for a terminal, the tab is escaped; --raw prints it as it is.
    assert_eq!(
        cluster.cli(&["get", "users", "carol"]).ok(),
        "a value with spaces, tabs\\tand ünïcödé\n"
    );
    assert_eq!(
        cluster.cli(&["get", "users", "carol", "--raw"]).ok(),
        spaced
    );
    let big = "x".repeat(100_000);
    cluster.cli(&["put", "logs", "big", &big]).ok();
    assert_eq!(
        cluster.cli(&["get", "logs", "big"]).ok(),
        format!("{big}\n")
    );

    let out = cluster.cli(&["scan", "users", "--raw"]);
    let mut lines: Vec<&str> = out.ok().lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            format!("alice\t31\t{v2}"),
            format!("bob\t25\t{v3}"),
            format!("carol\t{spaced}\t{v4}"),
        ]
    );
    assert_eq!(out.stderr, "");
    let out = cluster.cli(&["scan", "users"]);
    assert_eq!(out.ok().lines().count(), 4, "a header and 3 rows: {out:?}");
    assert_eq!(out.stderr, "3 object(s)\n");
    let out = cluster.cli(&["scan", "users", "--limit", "2"]);
    assert_eq!(out.ok().lines().count(), 3, "a header and 2 rows: {out:?}");
    assert_eq!(out.stderr, "2 object(s)\n");
    let out = cluster.cli(&["scan", "users", "--limit", "0"]);
    assert_eq!(
        (out.ok(), out.stderr.as_str()),
        ("KEY VALUE VERSION\n", "0 object(s)\n")
    );

    let out = cluster.cli(&["incr", "users", "visits"]);
    assert!(out.ok().starts_with("1 (version "), "{out:?}");
    let out = cluster.cli(&["incr", "users", "visits", "41"]);
    assert!(out.ok().starts_with("42 (version "), "{out:?}");
    let out = cluster.cli(&["incr", "users", "visits", "-50"]);
    assert!(out.ok().starts_with("-8 (version "), "{out:?}");
    let version: u64 = out
        .stdout
        .trim_end()
        .strip_prefix("-8 (version ")
        .and_then(|v| v.strip_suffix(')'))
        .and_then(|v| v.parse().ok())
        .expect("incr prints the new version");
    let out = cluster.cli(&["get", "users", "visits", "--version"]);
    assert_eq!(version_of(&out.stderr), version);

    assert_eq!(
        cluster.cli(&["del", "users", "bob"]).ok(),
        format!("deleted 'bob' (it had version {v3})\n")
    );
    assert_eq!(
        cluster.cli(&["del", "users", "bob"]).ok(),
        "'bob' did not exist\n"
    );

    let out = cluster.cli(&["status"]);
    let (rows, summary) = parse_status(out.ok());
    assert_eq!(summary, "2 table(s), 3 tablet(s)");
    assert_eq!(rows.len(), 2, "{}", out.stdout);
    for server in &cluster.servers {
        let row = rows.iter().find(|r| r.id == server.id).expect("listed");
        assert_eq!(row.address, server.addr);
        assert_eq!(row.state, "up");
        assert_eq!(row.durability, "dram-only");
        assert_eq!(row.backup, "backup off", "started without --backup-dir");
        assert!(row.objects.parse::<u64>().is_ok(), "{row:?}");
        // The resident split adds up (to the printed rounding): the 64 MiB log and
        // its hash table (64 MiB / 640 ≈ 102 Ki buckets, 6.4 MiB) are within it.
        let [rss, log, hash, other] = row.resident;
        assert!((rss - (log + hash + other)).abs() <= 0.2, "{row:?}");
        assert!(log > 0.0 && log <= 64.0, "{row:?}");
        assert!(hash > 0.0 && hash <= 8.0 + 1.0 + 2.0, "{row:?}");
    }
    assert_eq!(rows.iter().map(|r| r.tablets).sum::<usize>(), 3);
    let objects: u64 = rows.iter().map(|r| r.objects.parse::<u64>().unwrap()).sum();
    assert_eq!(objects, 4, "alice, carol, visits and big");

    assert_eq!(
        cluster.cli(&["drop-table", "users"]).ok(),
        "dropped table 'users'\n"
    );
    let tables = parse_tables(cluster.cli(&["tables"]).ok());
    assert_eq!(tables, BTreeMap::from([("logs".into(), (2, 1))]));
    let (rows, summary) = parse_status(cluster.cli(&["status"]).ok());
    assert_eq!(summary, "1 table(s), 1 tablet(s)");
    let objects: u64 = rows.iter().map(|r| r.objects.parse::<u64>().unwrap()).sum();
    assert_eq!(
        objects, 1,
        "the dropped table's objects are freed: {rows:?}"
    );
    assert_eq!(
        cluster.cli(&["create-table", "users"]).ok(),
        "table 'users' has id 3\n",
        "ids are not reused"
    );
    let out = cluster.cli(&["scan", "users"]);
    assert_eq!(
        (out.ok(), out.stderr.as_str()),
        ("KEY VALUE VERSION\n", "0 object(s)\n")
    );
}

/// Failures print exactly one `error: ...` line on stderr, nothing on stdout, and
/// exit 1: unknown tables (for every command that names one), missing objects,
/// refused conditional writes, a key over the limit, a non-counter or overflowing
/// increment, conflicting flags and a bad table name.
#[test]
fn errors_are_one_line_with_exit_code_one() {
    let cluster = Cluster::start(2);
    cluster.cli(&["create-table", "t", "--span", "2"]).ok();
    let unknown = "error: unknown table 'nope' (create it with `ramstore create-table nope`)";
    for args in [
        &["drop-table", "nope"][..],
        &["put", "nope", "k", "v"],
        &["get", "nope", "k"],
        &["del", "nope", "k"],
        &["incr", "nope", "k"],
        &["scan", "nope"],
    ] {
        let out = cluster.cli(args);
        assert_eq!(out.one_line_error(), unknown, "{args:?}");
    }

    let out = cluster.cli(&["get", "t", "missing"]);
    assert_eq!(
        out.one_line_error(),
        "error: 'missing' not found in table 't'"
    );

    let v = version_of(cluster.cli(&["put", "t", "k", "v"]).ok());
    let wrong = (v + 10).to_string();
    let out = cluster.cli(&["put", "t", "k", "w", "--if-version", &wrong]);
    assert_eq!(
        out.one_line_error(),
        format!("error: not written: the object's version is {v}")
    );
    let out = cluster.cli(&["put", "t", "fresh", "w", "--if-version", "1"]);
    assert_eq!(
        out.one_line_error(),
        "error: not written: 'fresh' does not exist"
    );
    let out = cluster.cli(&["put", "t", "k", "w", "--create-only"]);
    assert_eq!(
        out.one_line_error(),
        "error: not written: 'k' already exists"
    );
    // Conflicting flags are a usage error (exit 2), refused before any request.
    let out = cluster.cli(&["put", "t", "k", "w", "--create-only", "--if-version", "1"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: the argument '--create-only' cannot be used with '--if-version"),
        "{out:?}"
    );
    assert_eq!(
        cluster.cli(&["get", "t", "k"]).ok(),
        "v\n",
        "nothing written"
    );

    let long_key = "k".repeat(65_536);
    for args in [
        &["put", "t", &long_key, "v"][..],
        &["get", "t", &long_key],
        &["del", "t", &long_key],
        &["incr", "t", &long_key],
    ] {
        let out = cluster.cli(args);
        let line = out.one_line_error();
        assert!(
            line.starts_with("error: too large: "),
            "{}: {line}",
            args[0]
        );
        assert!(line.contains("65536"), "{line}");
    }
    let max_key = "k".repeat(65_535);
    cluster.cli(&["put", "t", &max_key, "v"]).ok();
    assert_eq!(cluster.cli(&["get", "t", &max_key]).ok(), "v\n");

    let out = cluster.cli(&["incr", "t", "k"]);
    assert_eq!(
        out.one_line_error(),
        "error: 'k' does not hold an integer in decimal text such as 42 (counters are stored \
         as Redis stores them; an 8-byte binary counter of an earlier ramstore must be \
         rewritten: see docs/operations.md, \"Counters\")"
    );
    let max = i64::MAX.to_string();
    cluster.cli(&["incr", "t", "n", &max]).ok();
    let out = cluster.cli(&["incr", "t", "n"]);
    assert_eq!(out.one_line_error(), "error: the increment overflowed");
    assert!(cluster.cli(&["incr", "t", "n", "0"]).ok().starts_with(&max));

    let out = cluster.cli(&["create-table", ""]);
    let line = out.one_line_error();
    assert!(line.contains("table name"), "{line}");
    let out = cluster.cli(&["create-table", "wide", "--span", "100000"]);
    let line = out.one_line_error();
    assert!(line.contains("span"), "{line}");
}

/// With no coordinator at the address, every data command fails at once with one
/// line naming the address, the cause and how to set it, and exit code 3.
#[test]
fn unreachable_coordinator_is_one_line_error() {
    let addr = dead_addr();
    let expected = format!(
        "error: cannot reach coordinator at {addr}: connection refused: nothing listens on \
         {addr} (is `ramstore dev` running? set --coordinator or RAMSTORE_COORDINATOR)"
    );
    for args in [
        &["create-table", "t"][..],
        &["drop-table", "t"],
        &["tables"],
        &["put", "t", "k", "v"],
        &["get", "t", "k"],
        &["del", "t", "k"],
        &["incr", "t", "k"],
        &["scan", "t"],
        &["status"],
    ] {
        let started = Instant::now();
        let mut all = args.to_vec();
        all.extend_from_slice(&["--coordinator", &addr]);
        let out = run_cli(&all, &[]);
        assert_eq!(out.error_line(3), expected, "{args:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?} failed fast"
        );
    }
    let out = run_cli(&["tables"], &[("RAMSTORE_COORDINATOR", &addr)]);
    assert_eq!(out.error_line(3), expected);
}

/// `RAMSTORE_COORDINATOR` selects the cluster when `--coordinator` is not given;
/// `--coordinator` wins over it; with neither, 127.0.0.1:7000 is used.
#[test]
fn coordinator_env_var_is_honoured() {
    let cluster = Cluster::start(1);
    let env = [("RAMSTORE_COORDINATOR", cluster.addr())];
    assert_eq!(
        run_cli(&["create-table", "envt"], &env).ok(),
        "table 'envt' has id 1\n"
    );
    run_cli(&["put", "envt", "k", "from env"], &env).ok();
    assert_eq!(run_cli(&["get", "envt", "k"], &env).ok(), "from env\n");
    assert!(parse_tables(run_cli(&["tables"], &env).ok()).contains_key("envt"));
    let (rows, _) = parse_status(run_cli(&["status"], &env).ok());
    assert_eq!(rows.len(), 1);

    // The flag overrides the variable.
    let dead = dead_addr();
    let out = run_cli(
        &["get", "envt", "k", "--coordinator", cluster.addr()],
        &[("RAMSTORE_COORDINATOR", &dead)],
    );
    assert_eq!(out.ok(), "from env\n");
    let out = run_cli(&["get", "envt", "k", "--coordinator", &dead], &env);
    assert!(out.error_line(3).contains(&dead));

    // Neither: the default address (checked only if nothing listens there).
    if std::net::TcpListener::bind("127.0.0.1:7000").is_ok() {
        let out = run_cli(&["tables"], &[]);
        assert!(out.error_line(3).contains("127.0.0.1:7000"), "{out:?}");
    }
}

/// Malformed command lines are refused by the argument parser with exit code 2
/// and an error or usage message on stderr; `--help` and `--version` succeed.
#[test]
fn usage_errors_exit_with_code_two() {
    for args in [
        &[][..],
        &["frobnicate"],
        &["put", "t", "k"],
        &["get", "t"],
        &["create-table"],
        &["create-table", "t", "--span", "many"],
        &["incr", "t", "k", "lots"],
        &["put", "t", "k", "v", "--if-version", "-1"],
        &["scan", "t", "--limit", "x"],
        &["coordinator", "--listen", "127.0.0.1:0"],
        &["coordinator", "--store", "bogus:x"],
        &["server", "--coordinator", "127.0.0.1:1", "--memory", "lots"],
        &["dev", "--port", "70000"],
    ] {
        let out = run_cli(args, &[]);
        assert_eq!(out.code, Some(2), "{args:?}: {out:#?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:#?}");
        assert!(
            out.stderr.starts_with("error: ") || out.stderr.contains("Usage: ramstore"),
            "{args:?}: {out:#?}"
        );
    }
    let help = run_cli(&["--help"], &[]);
    for command in [
        "dev",
        "coordinator",
        "server",
        "create-table",
        "drop-table",
        "tables",
        "put",
        "get",
        "del",
        "incr",
        "scan",
        "status",
    ] {
        assert!(
            help.ok()
                .lines()
                .any(|l| l.trim_start().starts_with(command)),
            "--help lists {command}: {}",
            help.stdout
        );
    }
    let version = run_cli(&["--version"], &[]);
    assert_eq!(
        version.ok(),
        format!("ramstore {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// The process commands fail with one clear line and exit 1 when they cannot
/// start: a coordinator whose port is taken or whose state directory another
/// coordinator holds, and `ramstore dev` with no servers.
#[test]
fn process_commands_report_start_failures() {
    let cluster = Cluster::start(0);
    let dir = tempfile::tempdir().unwrap();

    // Port taken (by the running coordinator).
    let store = format!("file:{}", dir.path().join("c").display());
    let out = run_cli(
        &["coordinator", "--listen", cluster.addr(), "--store", &store],
        &[],
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(out.stdout.is_empty(), "{out:#?}");
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: starting the coordinator on ") && last.contains("cannot listen"),
        "{out:#?}"
    );
    // The cause once, not once per error that wraps it (issue 18).
    assert_eq!(
        last.matches("Address already in use").count(),
        1,
        "{out:#?}"
    );

    // State directory locked by the running coordinator.
    let listen = format!("127.0.0.1:{}", free_port());
    let store = format!("file:{}", cluster.coordinator.store.display());
    let out = run_cli(
        &["coordinator", "--listen", &listen, "--store", &store],
        &[],
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: starting the coordinator on "),
        "{out:#?}"
    );

    // No servers: a usage error, before anything starts.
    let port = free_port().to_string();
    let dev_dir = dir.path().join("dev").display().to_string();
    let out = run_cli(
        &["dev", "--servers", "0", "--port", &port, "--dir", &dev_dir],
        &[],
    );
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(
        out.stderr
            .starts_with("error: invalid value '0' for '--servers <SERVERS>'"),
        "{out:#?}"
    );
    assert!(!dir.path().join("dev").exists(), "nothing made");
}

/// `ramstore server --metrics-listen` serves Prometheus text over HTTP that counts
/// the operations the server answered.
#[test]
fn server_metrics_endpoint_serves_prometheus_text() {
    let mut cluster = Cluster::start(0);
    let server = common::Server::start(
        cluster.addr(),
        "127.0.0.1:0",
        &["--metrics-listen", "127.0.0.1:0"],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let line = server
        .proc
        .stdout_lines()
        .into_iter()
        .find(|l| l.starts_with("ramstore server "))
        .unwrap();
    let url = line
        .split("metrics on http://")
        .nth(1)
        .unwrap_or_else(|| panic!("metrics address in {line:?}"));
    let metrics_addr = url.split('/').next().unwrap().to_string();
    cluster.servers.push(server);

    cluster.cli(&["create-table", "m"]).ok();
    cluster.cli(&["put", "m", "k", "v"]).ok();
    cluster.cli(&["get", "m", "k"]).ok();

    let mut stream = TcpStream::connect(&metrics_addr).unwrap();
    stream.set_read_timeout(Some(READY_TIMEOUT)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP response");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("text/plain"), "{head}");
    assert!(body.contains("ramstore_objects 1"), "{body}");
    assert!(
        body.contains("ramstore_op_latency_seconds_count{op=\"write\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("ramstore_op_latency_seconds_count{op=\"read\"} 1"),
        "{body}"
    );
}

/// Once a process has printed its ready line it stops cleanly (exit code 0) on
/// SIGTERM, and `ramstore dev` on Ctrl-C (SIGINT) — also when the signal comes
/// right after the line (tried several times: the window is small).
#[test]
fn processes_stop_cleanly_on_a_signal_right_after_ready() {
    let mut cluster = Cluster::start(0);
    let exit_of = |proc: &mut Proc, signal: i32| {
        proc.signal(signal);
        let status = proc.wait_timeout(READY_TIMEOUT).expect("the process stops");
        (status.code(), proc.transcript())
    };
    for attempt in 0..10 {
        let mut server = common::Server::start(cluster.addr(), "127.0.0.1:0", &[])
            .unwrap_or_else(|e| panic!("{e}"));
        let (code, transcript) = exit_of(&mut server.proc, libc::SIGTERM);
        assert_eq!(
            code,
            Some(0),
            "server, attempt {attempt}: {transcript}\n{}",
            cluster.coordinator.proc.transcript()
        );
    }
    let dir = tempfile::tempdir().unwrap();
    for attempt in 0..10 {
        let mut coordinator = common::Coordinator::start(&dir.path().join(attempt.to_string()));
        let (code, transcript) = exit_of(&mut coordinator.proc, libc::SIGTERM);
        assert_eq!(
            code,
            Some(0),
            "coordinator, attempt {attempt}: {transcript}"
        );
    }
    for attempt in 0..5 {
        let mut dev = common::Dev::start(&dir.path().join(format!("dev{attempt}")), 1, &[]);
        let (code, transcript) = exit_of(&mut dev.proc, libc::SIGINT);
        assert_eq!(code, Some(0), "dev, attempt {attempt}: {transcript}");
        common::wait_until("dev's 'stopping' line", Duration::from_secs(5), || {
            dev.proc
                .stdout_lines()
                .iter()
                .any(|l| l == "stopping")
                .then_some(())
        });
    }
    let (code, transcript) = exit_of(&mut cluster.coordinator.proc, libc::SIGTERM);
    assert_eq!(code, Some(0), "{transcript}");
}

/// Table names are any UTF-8 of 1 to 255 bytes. A name the coordinator accepts is
/// listed by `ramstore tables` under its own name and id and counted by
/// `ramstore status` — also with `=`, spaces or a line break in it (or such a name
/// is refused at creation with a one-line error).
#[test]
fn tables_lists_names_with_special_characters() {
    let cluster = Cluster::start(1);
    let mut created = Vec::new();
    for name in ["a=b", "two words", "line\nbreak", "tab\there", "plain"] {
        let out = cluster.cli(&["create-table", name]);
        if out.code == Some(0) {
            let id: u64 = out
                .stdout
                .trim_end()
                .rsplit(' ')
                .next()
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("{out:?}"));
            created.push((name, id));
        } else {
            out.one_line_error();
        }
    }
    // The table shows each name escaped, on one row with its id and tablets.
    let tables = cluster.cli(&["tables"]);
    let text = tables.ok();
    for (name, id) in &created {
        let escaped = name.replace('\n', "\\n").replace('\t', "\\t");
        assert!(
            text.lines().any(|l| l.starts_with(&escaped)
                && l.split_whitespace()
                    .rev()
                    .take(2)
                    .eq([1.to_string(), id.to_string()])),
            "table {name:?} (id {id}) is listed as {escaped:?}:\n{text}"
        );
    }
    // JSON gives the exact names.
    let json: serde_json::Value =
        serde_json::from_str(cluster.cli(&["tables", "--json"]).ok()).expect("tables --json");
    let listed: Vec<(String, u64)> = json
        .as_array()
        .expect("array")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["id"].as_u64().unwrap(),
            )
        })
        .collect();
    let created_owned: Vec<(String, u64)> =
        created.iter().map(|(n, id)| (n.to_string(), *id)).collect();
    assert_eq!(listed, created_owned);
    let status = cluster.cli(&["status"]);
    let summary = status.ok().lines().last().unwrap_or_default().to_string();
    assert_eq!(
        summary,
        format!("{n} table(s), {n} tablet(s)", n = created.len()),
        "{created:?}"
    );
}

/// Key expiry from the command line (issue 24): `put --ttl`, `ttl` (table,
/// raw and JSON) and `persist`, and an expired object read as absent.
#[test]
fn expiry_commands_put_ttl_persist() {
    let cluster = Cluster::start(1);
    cluster.cli(&["create-table", "t"]).ok();
    cluster.cli(&["put", "t", "dave", "1", "--ttl", "100"]).ok();
    let out = cluster.cli(&["ttl", "t", "dave", "--raw"]);
    let ms: u64 = out.ok().trim().parse().expect("ms left");
    assert!((99_000..=100_000).contains(&ms), "{ms}");
    assert!(cluster
        .cli(&["ttl", "t", "dave"])
        .ok()
        .starts_with("'dave' expires in 99."));
    assert_eq!(
        cluster.cli(&["persist", "t", "dave"]).ok(),
        "'dave' no longer expires\n"
    );
    assert_eq!(
        cluster.cli(&["ttl", "t", "dave"]).ok(),
        "'dave' never expires\n"
    );
    let json: serde_json::Value =
        serde_json::from_str(cluster.cli(&["ttl", "t", "dave", "--json"]).ok()).expect("json");
    assert_eq!(
        json,
        serde_json::json!({"expires_at_ms": null, "ttl_ms": null})
    );
    assert_eq!(cluster.cli(&["persist", "t", "dave", "--raw"]).ok(), "0\n");
    cluster.cli(&["put", "t", "eve", "1", "--ttl", "1"]).ok();
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    assert_ne!(cluster.cli(&["get", "t", "eve"]).code, Some(0));
    assert_ne!(cluster.cli(&["ttl", "t", "eve"]).code, Some(0));
}

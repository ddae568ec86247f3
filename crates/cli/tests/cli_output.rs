//! The `ramstore` command line as a shell user meets it (issue 18): values from
//! standard input and files up to the 1 MiB limit, escaped and raw output,
//! `--output table|json|raw` golden outputs for the data and admin commands, closed
//! pipes, exit codes (0 ok, 1 refused or not found, 2 usage, 3 unreachable) with a
//! distinct message for each way the coordinator cannot be reached, shell
//! completions, `--coordinator` before the subcommand, and `--config` files for
//! `server` and `coordinator`.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{dead_addr, free_port, spawn_ramstore, Cluster, BIN, READY_TIMEOUT};
use serde_json::{json, Value};

/// The 1 MiB value limit (ramstore_wire::MAX_VALUE_BYTES).
const MIB: usize = 1 << 20;

/// A finished command: exit code, exact stdout bytes, stderr text.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

impl Run {
    #[track_caller]
    fn ok(&self) -> &[u8] {
        assert_eq!(self.code, Some(0), "command failed: {self:?}");
        &self.stdout
    }

    #[track_caller]
    fn text(&self) -> String {
        String::from_utf8(self.ok().to_vec()).expect("UTF-8 stdout")
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_slice(self.ok()).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// Asserts exit code `code`, nothing on stdout and one `error: ` line on
    /// stderr; returns the line.
    #[track_caller]
    fn error(&self, code: i32) -> &str {
        assert_eq!(self.code, Some(code), "exit code: {self:?}");
        assert!(self.stdout.is_empty(), "no stdout on error: {self:?}");
        let line = self.stderr.strip_suffix('\n').expect("a line");
        assert!(
            !line.contains('\n') && line.starts_with("error: "),
            "{self:?}"
        );
        line
    }
}

/// Runs `ramstore ARGS` with `stdin` (nothing if `None`), RAMSTORE_COORDINATOR unset.
fn run(args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("RAMSTORE_COORDINATOR")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ramstore");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        let input = input.to_vec();
        // The command may stop reading early (input over the limit): ignore EPIPE.
        thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
    }
    let out = child.wait_with_output().expect("ramstore output");
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `run` against `cluster`.
fn at(cluster: &Cluster, args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--coordinator", cluster.addr()]);
    run(&all, stdin)
}

/// A value of `len` bytes of every byte value.
fn binary_value(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// `put T K -` takes the value from standard input and `--value-file` from a file,
/// exactly, up to 1 MiB; `get --raw` gives back exactly those bytes. One byte more
/// fails with one line and exit code 1, and writes nothing.
#[test]
fn put_values_from_stdin_and_file_up_to_one_mib() {
    let cluster = Cluster::start(1);
    at(&cluster, &["create-table", "t"], None).ok();
    let max = binary_value(MIB);

    let put = at(&cluster, &["put", "t", "stdin", "-"], Some(&max));
    assert!(put.text().starts_with("version "), "{put:?}");
    assert_eq!(
        at(&cluster, &["get", "t", "stdin", "--raw"], None).ok(),
        &max[..]
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("value.bin");
    std::fs::write(&file, &max).unwrap();
    let file_arg = file.to_str().unwrap();
    at(
        &cluster,
        &["put", "t", "file", "--value-file", file_arg],
        None,
    )
    .ok();
    assert_eq!(
        at(&cluster, &["get", "t", "file", "-o", "raw"], None).ok(),
        &max[..]
    );

    // An empty value from stdin is a value.
    at(&cluster, &["put", "t", "empty", "-"], Some(b"")).ok();
    assert_eq!(
        at(&cluster, &["get", "t", "empty", "--raw"], None).ok(),
        b""
    );

    let over = binary_value(MIB + 1);
    let out = at(&cluster, &["put", "t", "big", "-"], Some(&over));
    assert_eq!(
        out.error(1),
        "error: too large: standard input holds more than 1048576 bytes (values ≤ 1 MiB)"
    );
    std::fs::write(&file, &over).unwrap();
    let out = at(
        &cluster,
        &["put", "t", "big", "--value-file", file_arg],
        None,
    );
    assert_eq!(
        out.error(1),
        format!(
            "error: too large: the value file {file_arg} holds more than 1048576 bytes \
             (values ≤ 1 MiB)"
        )
    );
    let out = at(&cluster, &["get", "t", "big"], None);
    assert_eq!(out.error(1), "error: 'big' not found in table 't'");

    let out = at(
        &cluster,
        &["put", "t", "k", "--value-file", "/nonexistent/v"],
        None,
    );
    assert!(
        out.error(1)
            .starts_with("error: cannot open the value file /nonexistent/v: "),
        "{out:?}"
    );
    // A value and --value-file, or neither: usage errors.
    assert_eq!(
        at(
            &cluster,
            &["put", "t", "k", "v", "--value-file", file_arg],
            None
        )
        .code,
        Some(2)
    );
    assert_eq!(at(&cluster, &["put", "t", "k"], None).code, Some(2));
}

/// Golden outputs of every data and admin command in each format. `table` (the
/// default) escapes stored bytes so that none reaches the terminal as a control
/// character; `raw` prints them exactly; `json` is one document with text as
/// `key`/`value` and other bytes as `key_base64`/`value_base64`.
#[test]
fn output_formats_golden() {
    let cluster = Cluster::start(1);
    let ok = |args: &[&str]| at(&cluster, args, None).text();

    assert_eq!(ok(&["create-table", "demo"]), "table 'demo' has id 1\n");
    assert_eq!(ok(&["create-table", "demo", "--output", "raw"]), "1\n");
    assert_eq!(
        at(&cluster, &["create-table", "demo", "--json"], None).json(),
        json!({"table": "demo", "id": 1})
    );

    assert_eq!(ok(&["put", "demo", "hello", "world"]), "version 1\n");
    assert_eq!(ok(&["put", "demo", "hello", "world", "--raw"]), "2\n");
    assert_eq!(
        at(&cluster, &["put", "demo", "hello", "world", "--json"], None).json(),
        json!({"version": 3, "bytes": 5})
    );
    // A value with a terminal escape, a tab, a newline, a backslash and bytes that
    // are not UTF-8.
    let nasty: &[u8] = b"a\tb\nc\\d\x1b[2J\xff\xfe";
    at(&cluster, &["put", "demo", "nasty", "-"], Some(nasty)).ok();

    assert_eq!(ok(&["get", "demo", "hello"]), "world\n");
    assert_eq!(ok(&["get", "demo", "hello", "--output", "raw"]), "world");
    assert_eq!(
        at(&cluster, &["get", "demo", "hello", "-o", "json"], None).json(),
        json!({"key": "hello", "value": "world", "version": 3})
    );
    assert_eq!(
        ok(&["get", "demo", "nasty"]),
        "a\\tb\\nc\\\\d\\x1b[2J\\xff\\xfe\n"
    );
    assert_eq!(
        at(&cluster, &["get", "demo", "nasty", "--raw"], None).ok(),
        nasty
    );
    assert_eq!(
        at(&cluster, &["get", "demo", "nasty", "--json"], None).json(),
        json!({"key": "nasty", "value_base64": "YQliCmNcZBtbMkr//g==", "version": 1})
    );

    let scan = at(&cluster, &["scan", "demo"], None);
    let mut lines: Vec<&str> = std::str::from_utf8(scan.ok()).unwrap().lines().collect();
    assert_eq!(
        lines.remove(0),
        "KEY   VALUE                     VERSION",
        "{scan:?}"
    );
    lines.sort();
    assert_eq!(
        lines,
        [
            "hello world                           3",
            "nasty a\\tb\\nc\\\\d\\x1b[2J\\xff\\xfe       1",
        ],
        "{scan:?}"
    );
    assert_eq!(scan.stderr, "2 object(s)\n");
    let mut items = at(&cluster, &["scan", "demo", "--json"], None).json();
    let items = items.as_array_mut().expect("array");
    items.sort_by_key(|o| o["version"].as_u64());
    assert_eq!(
        *items,
        [
            json!({"key": "nasty", "value_base64": "YQliCmNcZBtbMkr//g==", "version": 1}),
            json!({"key": "hello", "value": "world", "version": 3}),
        ]
    );
    // raw: KEY<TAB>VALUE<TAB>VERSION with the exact bytes, nothing on stderr.
    let mut nasty_record = b"nasty\t".to_vec();
    nasty_record.extend_from_slice(nasty);
    nasty_record.extend_from_slice(b"\t1\n");
    let records = [b"hello\tworld\t3\n".to_vec(), nasty_record];
    let raw = at(&cluster, &["scan", "demo", "--raw", "--limit", "1"], None);
    assert!(records.iter().any(|r| raw.ok() == &r[..]), "{raw:?}");
    assert!(raw.stderr.is_empty(), "{raw:?}");
    let raw = at(&cluster, &["scan", "demo", "--raw"], None);
    assert!(
        raw.ok() == [&records[0][..], &records[1]].concat()
            || raw.ok() == [&records[1][..], &records[0]].concat(),
        "{raw:?}"
    );
    assert_eq!(
        at(&cluster, &["scan", "demo", "--json", "--limit", "0"], None).json(),
        json!([])
    );

    assert_eq!(
        ok(&["del", "demo", "hello"]),
        "deleted 'hello' (it had version 3)\n"
    );
    assert_eq!(ok(&["del", "demo", "hello"]), "'hello' did not exist\n");
    assert_eq!(ok(&["del", "demo", "nasty", "--raw"]), "1\n");
    assert_eq!(ok(&["del", "demo", "nasty", "--raw"]), "");
    assert_eq!(
        at(&cluster, &["del", "demo", "hello", "--json"], None).json(),
        json!({"deleted": false, "version": null})
    );

    // incr: the counter's value, and its version.
    let incr = ok(&["incr", "demo", "n", "5"]);
    assert!(incr.starts_with("5 (version "), "{incr}");
    assert_eq!(ok(&["incr", "demo", "n", "-2", "--raw"]), "3\n");
    let incr = at(&cluster, &["incr", "demo", "n", "--json"], None).json();
    assert_eq!(incr["value"], 4, "{incr}");
    assert!(incr["version"].is_u64(), "{incr}");

    ok(&["create-table", "two words", "--span", "1"]);
    assert_eq!(
        ok(&["tables"]),
        "TABLE     ID TABLETS\ndemo       1       1\ntwo words  2       1\n"
    );
    assert_eq!(ok(&["tables", "--raw"]), "demo\t1\t1\ntwo words\t2\t1\n");
    assert_eq!(
        at(&cluster, &["tables", "--json"], None).json(),
        json!([
            {"name": "demo", "id": 1, "tablets": 1},
            {"name": "two words", "id": 2, "tablets": 1},
        ])
    );

    let status = at(&cluster, &["status", "--json"], None).json();
    assert_eq!(status["coordinator"], cluster.addr());
    assert_eq!(status["tables"], 2);
    assert_eq!(status["tablets"], 2);
    let servers = status["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 1, "{status}");
    let server = &servers[0];
    assert_eq!(server["address"], cluster.servers[0].addr.as_str());
    assert_eq!(server["status"], "up");
    assert_eq!(server["tablets"], 2);
    assert_eq!(server["memory_bytes"], 64 * MIB);
    assert_eq!(server["refusing_writes"], false);
    assert_eq!(server["backup"], "off", "{status}");
    assert_eq!(status["recoveries"], json!([]));
    let raw = at(&cluster, &["status", "--raw"], None).text();
    let cells: Vec<&str> = raw.trim_end().split('\t').collect();
    assert_eq!(
        cells[..4],
        [
            cluster.servers[0].id.to_string().as_str(),
            cluster.servers[0].addr.as_str(),
            "up",
            "2"
        ],
        "{raw}"
    );
    let table = at(&cluster, &["status"], None).text();
    let header = table.lines().nth(1).unwrap_or_default();
    assert!(
        header
            .split_whitespace()
            .take(3)
            .eq(["ID", "ADDRESS", "STATUS"]),
        "{table}"
    );
    assert!(header.ends_with("BACKUP DISK"), "{table}");

    assert_eq!(
        ok(&["drop-table", "two words"]),
        "dropped table 'two words'\n"
    );
    assert_eq!(ok(&["drop-table", "demo", "--raw"]), "");
    // --json and --raw are one choice.
    assert_eq!(
        at(&cluster, &["tables", "--json", "--raw"], None).code,
        Some(2)
    );
}

/// Spawns `ramstore ARGS` with its standard output a pipe whose reading end is
/// already closed, as after `… | head -1` has exited; returns its exit code and
/// stderr.
fn run_into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors, which we then own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just created and are owned here only.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    let out = Command::new(BIN)
        .args(args)
        .env_remove("RAMSTORE_COORDINATOR")
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run ramstore");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A command whose standard output is closed (`ramstore status | head -1`,
/// `ramstore tables | true`) ends quietly: no panic, nothing on stderr, exit code
/// 141 as coreutils under `set -o pipefail`.
#[test]
fn closed_stdout_ends_quietly() {
    let cluster = Cluster::start(1);
    at(&cluster, &["create-table", "t"], None).ok();
    at(&cluster, &["put", "t", "k", "-"], Some(&binary_value(MIB))).ok();
    let addr = cluster.addr();
    for args in [
        &["status"][..],
        &["tables"],
        &["tables", "--json"],
        &["scan", "t", "--raw"],
        &["scan", "t", "--json"],
        &["get", "t", "k", "--raw"],
        &["get", "t", "k"],
        &["completions", "bash"],
    ] {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--coordinator", addr]);
        if args[0] == "completions" {
            all.truncate(2);
        }
        let (code, stderr) = run_into_closed_pipe(&all);
        assert_eq!((code, stderr.as_str()), (Some(141), ""), "{args:?}");
    }
    // In a shell, with a reader that stops after one line.
    let script = format!(
        "set -o pipefail; {BIN} status --coordinator {addr} | head -1; \
         {BIN} tables --coordinator {addr} | true"
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(&format!("coordinator {addr}: ")),
        "{out:?}"
    );
    assert_eq!(stdout.lines().count(), 1, "{out:?}");
    assert!(out.stderr.is_empty(), "quiet: {out:?}");
    assert!(matches!(out.status.code(), Some(0 | 141)), "{out:?}");
}

/// A listener that accepts connections and closes each at once, as a coordinator
/// at its connection limit does.
fn busy_listener() -> (String, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    listener.set_nonblocking(true).unwrap();
    let handle = thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            match listener.accept() {
                Ok((mut s, _)) => {
                    let mut buf = [0u8; 64];
                    s.set_read_timeout(Some(Duration::from_millis(200))).ok();
                    let _ = s.read(&mut buf);
                    drop(s);
                }
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    (addr, handle)
}

/// Exit codes: 0 done, 1 refused or not found, 2 usage (the parser's and ours), 3
/// unreachable — each way of not reaching the coordinator with its own message.
#[test]
fn exit_codes_and_unreachable_messages() {
    let cluster = Cluster::start(1);
    at(&cluster, &["create-table", "t"], None).ok();
    assert_eq!(at(&cluster, &["get", "t", "nope"], None).code, Some(1));
    assert_eq!(
        at(&cluster, &["put", "t", "k", "v", "--if-version", "9"], None).code,
        Some(1)
    );
    assert_eq!(at(&cluster, &["scan", "missing"], None).code, Some(1));

    for args in [
        &["put", "t", "k", "v", "--create-only", "--if-version", "1"][..],
        &["dev", "--servers", "0"],
        &["dev", "--port", "0"],
        &["tables", "--coordinator", "127.0.0.1"],
        &["tables", "--coordinator", "host:port"],
        &["tables", "--coordinator", ""],
        &["tables", "--output", "yaml"],
        &["server"],
        &["completions", "tcsh"],
        &["bench", "--clients", "0"],
    ] {
        let out = run(args, None);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        assert!(out.stderr.starts_with("error: "), "{args:?}: {out:?}");
    }
    let out = run(&["tables", "--coordinator", "127.0.0.1"], None);
    assert_eq!(
        out.error(2),
        "error: coordinator address '127.0.0.1' has no port (e.g. 127.0.0.1:7000)"
    );

    // Refused: nothing listens.
    let dead = dead_addr();
    let out = run(&["tables", "--coordinator", &dead], None);
    let line = out.error(3);
    assert!(
        line.starts_with(&format!(
            "error: cannot reach coordinator at {dead}: connection refused"
        )),
        "{line}"
    );
    assert!(line.contains("is `ramstore dev` running?"), "{line}");

    // The host name does not resolve.
    let out = run(
        &["status", "--coordinator", "no-such-host.invalid:7000"],
        None,
    );
    let line = out.error(3);
    assert!(
        line.starts_with(
            "error: cannot reach coordinator at no-such-host.invalid:7000: cannot resolve the \
             host name 'no-such-host.invalid'"
        ),
        "{line}"
    );

    // Busy: accepted and closed unanswered.
    let (busy, _listener) = busy_listener();
    let out = run(&["tables", "--coordinator", &busy, "--timeout", "3"], None);
    let line = out.error(3);
    assert!(
        line.starts_with(&format!("error: cannot reach coordinator at {busy}: busy:")),
        "{line}"
    );

    // Timeout: accepted, never answered.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let out = run(
        &["tables", "--coordinator", &silent_addr, "--timeout", "3"],
        None,
    );
    let line = out.error(3);
    assert!(
        line.starts_with(&format!(
            "error: cannot reach coordinator at {silent_addr}: timed out"
        )),
        "{line}"
    );
    drop(silent);
}

/// `--coordinator` may come before the subcommand; after it, it wins.
#[test]
fn coordinator_flag_before_the_subcommand() {
    let cluster = Cluster::start(1);
    let addr = cluster.addr();
    assert_eq!(
        run(&["--coordinator", addr, "create-table", "t"], None).text(),
        "table 't' has id 1\n"
    );
    let dead = dead_addr();
    run(
        &["--coordinator", &dead, "tables", "--coordinator", addr],
        None,
    )
    .ok();
    assert_eq!(
        run(
            &["--coordinator", addr, "tables", "--coordinator", &dead],
            None
        )
        .code,
        Some(3)
    );
}

/// `ramstore completions SHELL` prints a completion script that knows the
/// subcommands.
#[test]
fn completions_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_ramstore()"),
        ("zsh", "#compdef ramstore"),
        ("fish", "complete -c ramstore"),
    ] {
        let script = run(&["completions", shell], None).text();
        assert!(script.contains(marker), "{shell}: {script}");
        for sub in ["create-table", "scan", "status", "completions"] {
            assert!(script.contains(sub), "{shell} completes {sub}");
        }
    }
}

/// `ramstore coordinator --config FILE` and `ramstore server --config FILE` take
/// their flags from a TOML file with the same names; flags on the command line
/// override it; unknown settings and unreadable files are usage errors.
#[test]
fn config_file_for_coordinator_and_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let coordinator_toml = dir.path().join("coordinator.toml");
    std::fs::write(
        &coordinator_toml,
        format!(
            "# a coordinator\nlisten = \"127.0.0.1:{port}\"\nstore = \"file:{}\"\n\
             ping_interval_ms = 100\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let mut coordinator = spawn_ramstore(
        "coordinator",
        &[
            "coordinator",
            "--config",
            coordinator_toml.to_str().unwrap(),
        ],
        &[],
    );
    let ready = coordinator
        .wait_for_line(
            |l| l.starts_with("ramstore coordinator listening on "),
            READY_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = format!("127.0.0.1:{port}");
    assert!(ready.contains(&addr), "{ready}");

    let server_toml = dir.path().join("server.toml");
    std::fs::write(
        &server_toml,
        format!(
            "coordinator = [\"{addr}\"]\nlisten = \"127.0.0.1:0\"\nmemory = \"32MiB\"\n\
             replicas = 0\nprefault-memory = false\n"
        ),
    )
    .unwrap();
    // The command line's --memory overrides the file's.
    let mut server = spawn_ramstore(
        "server",
        &[
            "server",
            "--config",
            server_toml.to_str().unwrap(),
            "--memory",
            "48MiB",
        ],
        &[],
    );
    server
        .wait_for_line(|l| l.starts_with("ramstore server "), READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}"));
    let status = run(&["status", "--json", "--coordinator", &addr], None).json();
    assert_eq!(status["servers"][0]["memory_bytes"], 48 * MIB, "{status}");
    assert_eq!(status["servers"][0]["status"], "up", "{status}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "memroy = \"1GiB\"\n").unwrap();
    let out = run(&["server", "--config", bad.to_str().unwrap()], None);
    assert_eq!(
        out.error(2),
        format!(
            "error: config file {}: unknown setting 'memroy' (the settings are the flags of \
             `ramstore server --help`, without the dashes)",
            bad.display()
        )
    );
    let out = run(&["coordinator", "--config", "/nonexistent/c.toml"], None);
    assert!(
        out.error(2)
            .starts_with("error: cannot read the config file /nonexistent/c.toml"),
        "{out:?}"
    );
    // A value the flag refuses is refused from the file too.
    std::fs::write(&bad, "memory = \"lots\"\n").unwrap();
    let out = run(
        &[
            "server",
            "--config",
            bad.to_str().unwrap(),
            "--coordinator",
            &addr,
        ],
        None,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--memory"), "{out:?}");
    drop(server);
    drop(coordinator);
}

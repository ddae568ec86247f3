//! Local clusters for end-to-end tests: a coordinator (its state in a temporary
//! directory), storage servers and `ramstore dev` as real processes on 127.0.0.1,
//! and one-shot CLI commands whose output and exit code are captured — the
//! fixtures of `crates/cli/tests`. (The soak harness's [`crate::Cluster`] adds
//! etcd, standbys, network namespaces, proxies and disks on top of the same
//! [`Proc`].)
//!
//! Every child process is owned by a [`Proc`], which kills (SIGKILL) and reaps it
//! when dropped — also when a test panics — and which asks the kernel to kill the
//! child should the spawning thread die first, so no test ever leaves a process
//! behind. Readiness is the line each process prints once it serves; nothing sleeps
//! for a fixed time.
//!
//! The `ramstore` binary is the one cargo built next to the running test
//! ([`ramstore_bin`]; `RAMSTORE_BIN` overrides it).

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use ramstore_client::{BlockingClient, ClientOptions, MultiWriteOp};
use tempfile::TempDir;

use crate::process::{guard, Proc, Spawn};
use crate::HarnessError;

/// The `ramstore` binary under test: `RAMSTORE_BIN` if set, else the `ramstore`
/// that cargo builds next to an integration test (`target/PROFILE/ramstore`, the
/// test itself being `target/PROFILE/deps/NAME-HASH`).
pub fn ramstore_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(path) = std::env::var_os("RAMSTORE_BIN") {
            return PathBuf::from(path);
        }
        // Without a path to the test executable nothing here can run: say so.
        let exe = std::env::current_exe().expect("the test executable's path");
        let mut dir = exe.parent().expect("the test executable's directory").to_path_buf();
        if dir.ends_with("deps") {
            dir.pop();
        }
        let bin = dir.join("ramstore");
        assert!(
            bin.exists(),
            "{} does not exist: build the ramstore binary (cargo test -p ramstore-cli does) or set RAMSTORE_BIN",
            bin.display()
        );
        bin
    })
}

/// Starts `ramstore ARGS` with `envs` (RAMSTORE_COORDINATOR is never inherited);
/// panics if it cannot be started at all.
pub fn spawn_ramstore(name: &str, args: &[&str], envs: &[(&str, &str)]) -> Proc {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    Proc::start(Spawn {
        name,
        program: ramstore_bin(),
        args: &args,
        envs,
        netns: None,
        log: None,
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

/// How long a process may take to print its ready line (debug builds on a busy
/// machine are slow to start).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a one-shot CLI command may run before it is killed and the test fails.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(30);
/// Log memory of each storage server the harness starts.
pub const SERVER_MEMORY: &str = "64MiB";

/// A small runtime for tests that call async APIs (`BackupClient`) from threads.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Lowest port [`try_free_port`] hands out (below it: well-known services).
const TEST_PORT_FLOOR: u16 = 10_000;

/// A port that was free a moment ago, for a process started later to bind.
///
/// Why not port 0's pick: the kernel takes port-0 binds *and every outgoing
/// connection's source port* from one ephemeral range, so between this call and
/// the later bind a client connection anywhere on the machine can take the port
/// ("Address already in use", seen in CI). The ports handed out here lie below
/// that range, where only explicit binds go; a per-process cursor (started at a
/// pid-dependent place) keeps this process's tests from being handed one port
/// twice, and a trial bind skips ports in use.
pub fn try_free_port() -> Result<u16, HarnessError> {
    try_free_ports(1)
}

/// The first of `count` consecutive ports that were all free a moment ago, from
/// the same cursor as [`try_free_port`] (so no other test is handed one of them).
fn try_free_ports(count: u16) -> Result<u16, HarnessError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CURSOR: AtomicU32 = AtomicU32::new(u32::MAX);
    let ceiling = ephemeral_range_start().max(TEST_PORT_FLOOR + 1000);
    let count = count.max(1);
    let span = u32::from(ceiling - TEST_PORT_FLOOR - count);
    // Start where another test binary (another pid) is unlikely to be.
    let seed = std::process::id().wrapping_mul(2_654_435_761) % span;
    let _ = CURSOR.compare_exchange(u32::MAX, seed, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span.min(4096) {
        let offset = CURSOR.fetch_add(u32::from(count), Ordering::Relaxed) % span;
        // In range by construction: offset + count <= span + count = ceiling - floor.
        let first = TEST_PORT_FLOOR + offset as u16;
        if (first..first + count).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return Ok(first);
        }
    }
    if count > 1 {
        return Err(HarnessError::Io(format!(
            "no run of {count} free ports found"
        )));
    }
    // Everything tried was busy: fall back to the kernel's pick.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| HarnessError::Io(format!("bind 127.0.0.1:0: {e}")))
}

/// The first port of the kernel's ephemeral range (Linux default 32768).
fn ephemeral_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// [`try_free_port`] for tests: panics if nothing can bind.
pub fn free_port() -> u16 {
    try_free_port().unwrap_or_else(|e| panic!("{e}"))
}

/// An address nothing listens on, so connecting is refused at once: port 1 (a
/// privileged port no test can bind), unless something happens to serve there.
pub fn dead_addr() -> String {
    let addr = "127.0.0.1:1";
    let timeout = Duration::from_millis(200);
    let refused = std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), timeout).is_err();
    if refused {
        addr.to_string()
    } else {
        format!("127.0.0.1:{}", free_port())
    }
}

/// A port `p` such that `p..=p + extra` were all free a moment ago.
pub fn free_port_run(extra: u16) -> u16 {
    try_free_ports(extra.saturating_add(1)).unwrap_or_else(|e| panic!("{e}"))
}

/// The server that owns `table`, which must be one tablet (panics otherwise).
pub fn owner_of(client: &BlockingClient, table: u64) -> u64 {
    let map = client.tablet_map().expect("tablet map");
    let mine: Vec<_> = map.iter().filter(|x| x.table_id == table).collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    mine[0].server_id
}

/// Writes `keys[i] = values[i]` into `table` by multi-writes of `batch` objects;
/// panics on any failed write (a test's loading step).
pub fn write_all(
    client: &BlockingClient,
    table: u64,
    keys: &[Vec<u8>],
    values: &[Vec<u8>],
    batch: usize,
) {
    for (ks, vs) in keys.chunks(batch).zip(values.chunks(batch)) {
        let ops: Vec<_> = ks
            .iter()
            .zip(vs)
            .map(|(k, v)| MultiWriteOp::new(table, k, v))
            .collect();
        for r in client.multi_write(&ops) {
            r.expect("load write");
        }
    }
}

/// The result of a one-shot CLI command.
#[derive(Debug, Clone)]
pub struct CliOutput {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    /// Asserts success (exit code 0) and returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "command failed: {self:#?}");
        &self.stdout
    }

    /// Asserts a failure reported as exactly one `error: ...` line on stderr with
    /// nothing on stdout and exit code 1; returns that line.
    #[track_caller]
    pub fn one_line_error(&self) -> &str {
        self.error_line(1)
    }

    /// Like [`CliOutput::one_line_error`] with exit code `code` (3: unreachable).
    #[track_caller]
    pub fn error_line(&self, code: i32) -> &str {
        assert_eq!(
            self.code,
            Some(code),
            "expected exit code {code}: {self:#?}"
        );
        assert!(self.stdout.is_empty(), "no stdout on error: {self:#?}");
        let line = self
            .stderr
            .strip_suffix('\n')
            .unwrap_or_else(|| panic!("stderr ends with a newline: {self:#?}"));
        assert!(!line.contains('\n'), "error is one line: {self:#?}");
        assert!(line.starts_with("error: "), "error line: {self:#?}");
        line
    }
}

/// Runs `ramstore ARGS` to completion with `envs` (RAMSTORE_COORDINATOR is not
/// inherited from the test's environment); killed after [`CLI_TIMEOUT`].
pub fn run_cli(args: &[&str], envs: &[(&str, &str)]) -> CliOutput {
    let bin = ramstore_bin();
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env_remove("RAMSTORE_COORDINATOR")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = guard(&mut cmd)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {} {args:?}: {e}", bin.display()));
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let deadline = Instant::now() + CLI_TIMEOUT;
    let status = loop {
        match child.try_wait().expect("try_wait") {
            Some(status) => break status,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "`ramstore {}` ran longer than {CLI_TIMEOUT:?}",
                    args.join(" ")
                );
            }
            None => thread::sleep(Duration::from_millis(2)),
        }
    };
    // Lossy: `get` prints values as they are (a counter is 8 binary bytes).
    let text = |h: thread::JoinHandle<Vec<u8>>| {
        String::from_utf8_lossy(&h.join().expect("reader thread")).into_owned()
    };
    CliOutput {
        code: status.code(),
        stdout: text(out),
        stderr: text(err),
    }
}

/// A coordinator process.
pub struct Coordinator {
    pub proc: Proc,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub store: PathBuf,
    /// More arguments it was started with (kept for restarts).
    pub extra: Vec<String>,
}

impl Coordinator {
    /// Starts a coordinator on `127.0.0.1:port` with its state in `store`.
    pub fn start_on(port: u16, store: &Path) -> Result<Coordinator, HarnessError> {
        Coordinator::start_on_with(port, store, &[])
    }

    /// [`Coordinator::start_on`] with more arguments (e.g. `--failure-timeout-ms`).
    pub fn start_on_with(
        port: u16,
        store: &Path,
        extra: &[&str],
    ) -> Result<Coordinator, HarnessError> {
        let listen = format!("127.0.0.1:{port}");
        let store_arg = format!("file:{}", store.display());
        let mut args = vec!["coordinator", "--listen", &listen, "--store", &store_arg];
        args.extend_from_slice(extra);
        let mut proc = spawn_ramstore("coordinator", &args, &[]);
        let line = proc.wait_for_line(
            |l| l.starts_with("ramstore coordinator listening on "),
            READY_TIMEOUT,
        )?;
        let printed = line
            .split_whitespace()
            .nth(4)
            .expect("address in the ready line");
        assert_eq!(printed, listen, "the coordinator listens where asked");
        Ok(Coordinator {
            proc,
            addr: listen,
            store: store.to_path_buf(),
            extra: extra.iter().map(|a| a.to_string()).collect(),
        })
    }

    /// Starts a coordinator on a free port (retrying if another process takes the
    /// port between choosing and binding it).
    pub fn start(store: &Path) -> Coordinator {
        Coordinator::start_with(store, &[])
    }

    /// [`Coordinator::start`] with more arguments.
    pub fn start_with(store: &Path, extra: &[&str]) -> Coordinator {
        let mut last = String::new();
        for _ in 0..5 {
            match Coordinator::start_on_with(free_port(), store, extra) {
                Ok(c) => return c,
                Err(e) => last = e.to_string(),
            }
        }
        panic!("coordinator did not start: {last}");
    }

    pub fn port(&self) -> u16 {
        self.addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port")
    }
}

/// A storage server process.
pub struct Server {
    pub proc: Proc,
    /// The id the coordinator gave it.
    pub id: u64,
    /// Where it serves (`127.0.0.1:PORT`).
    pub addr: String,
}

impl Server {
    /// Starts a storage server listening on `listen` (e.g. `127.0.0.1:0`) that
    /// enlists with `coordinator`; `extra` are more arguments (`--memory` in them
    /// replaces the default [`SERVER_MEMORY`], `--replicas` the default 0).
    pub fn start(coordinator: &str, listen: &str, extra: &[&str]) -> Result<Server, HarnessError> {
        Server::ready(Server::spawn(coordinator, listen, extra))
    }

    /// Spawns `ramstore server` with the harness's defaults (see [`Server::start`]).
    fn spawn(coordinator: &str, listen: &str, extra: &[&str]) -> Proc {
        let mut args = vec!["server", "--coordinator", coordinator, "--listen", listen];
        if !extra.contains(&"--memory") {
            args.extend_from_slice(&["--memory", SERVER_MEMORY]);
        }
        // Servers of tests about something else keep their log in DRAM only, so a
        // one-server cluster accepts writes; replication tests pass --replicas.
        if !extra.contains(&"--replicas") {
            args.extend_from_slice(&["--replicas", "0"]);
        }
        args.extend_from_slice(extra);
        spawn_ramstore("server", &args, &[])
    }

    /// Starts servers concurrently (each `(listen, extra)`, as in [`Server::start`])
    /// and waits until all are ready: servers restarted after a cold stop reload
    /// their logs from each other's backups before they report ready. The
    /// processes are spawned from this thread, since a child is killed when the
    /// thread that spawned it ends (`PR_SET_PDEATHSIG`).
    pub fn start_all(
        coordinator: &str,
        servers: &[(&str, &[&str])],
    ) -> Result<Vec<Server>, HarnessError> {
        let procs: Vec<Proc> = servers
            .iter()
            .map(|(listen, extra)| Server::spawn(coordinator, listen, extra))
            .collect();
        procs.into_iter().map(Server::ready).collect()
    }

    /// Waits for a spawned server's ready line.
    fn ready(mut proc: Proc) -> Result<Server, HarnessError> {
        let line = proc.wait_for_line(|l| l.starts_with("ramstore server "), READY_TIMEOUT)?;
        // "ramstore server ID listening on ADDR[,] ..."; ID is INDEX[.RUN].
        let words: Vec<&str> = line.split_whitespace().collect();
        let id = words
            .get(2)
            .and_then(|w| ramstore_wire::server_id::parse(w))
            .unwrap_or_else(|| panic!("server id in {line:?}"));
        assert_eq!(words.get(3..5), Some(&["listening", "on"][..]), "{line:?}");
        let addr = words[5].trim_end_matches(',').to_string();
        addr.parse::<SocketAddr>()
            .unwrap_or_else(|e| panic!("address in {line:?}: {e}"));
        proc.name = format!("server {id}");
        Ok(Server { proc, id, addr })
    }
}

/// A coordinator and storage servers, each its own process, with the coordinator's
/// state in a temporary directory. Dropping it kills every process, then removes the
/// directory.
pub struct Cluster {
    // Fields drop in this order: servers, coordinator, then the directory.
    pub servers: Vec<Server>,
    pub coordinator: Coordinator,
    pub dir: TempDir,
}

impl Cluster {
    /// A coordinator and `servers` storage servers.
    pub fn start(servers: usize) -> Cluster {
        Cluster::start_with_coordinator_args(servers, &[])
    }

    /// [`Cluster::start`] with more arguments for the coordinator.
    pub fn start_with_coordinator_args(servers: usize, coordinator_args: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let coordinator =
            Coordinator::start_with(&dir.path().join("coordinator"), coordinator_args);
        let mut cluster = Cluster {
            servers: Vec::new(),
            coordinator,
            dir,
        };
        for _ in 0..servers {
            cluster.add_server("127.0.0.1:0");
        }
        cluster
    }

    /// The id of the first server other than `id` (a migration's target, a
    /// victim that is not the owner); panics if `id` is the only server.
    pub fn server_other_than(&self, id: u64) -> u64 {
        self.servers
            .iter()
            .map(|s| s.id)
            .find(|other| *other != id)
            .unwrap_or_else(|| panic!("no server other than {id}"))
    }

    /// Starts one more storage server listening on `listen`.
    pub fn add_server(&mut self, listen: &str) -> &Server {
        self.add_server_with(listen, &[])
    }

    /// Starts one more storage server listening on `listen`, with more arguments.
    pub fn add_server_with(&mut self, listen: &str, extra: &[&str]) -> &Server {
        let server =
            Server::start(&self.coordinator.addr, listen, extra).unwrap_or_else(|e| panic!("{e}"));
        self.servers.push(server);
        self.servers.last().expect("just pushed")
    }

    /// The coordinator's address.
    pub fn addr(&self) -> &str {
        &self.coordinator.addr
    }

    /// [`wait_until`], but a timeout also shows the end of the coordinator's output
    /// (its decisions: suspicions, crashes, recoveries), so a failure says why.
    #[track_caller]
    pub fn wait_until<T>(&self, what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
        let Some(v) = poll_until(timeout, f) else {
            let transcript = self.coordinator.proc.transcript();
            let lines: Vec<&str> = transcript.lines().collect();
            let tail = lines[lines.len().saturating_sub(60)..].join("\n");
            panic!("timed out waiting for {what}; the coordinator's last lines:\n{tail}");
        };
        v
    }

    /// Client options for this cluster with an operation deadline of `deadline`.
    pub fn options(&self, deadline: Duration) -> ClientOptions {
        ClientOptions {
            operation_deadline: deadline,
            ..ClientOptions::new(self.addr())
        }
    }

    /// A blocking client with a 20 s operation deadline.
    pub fn client(&self) -> BlockingClient {
        BlockingClient::connect(self.options(Duration::from_secs(20))).expect("client connects")
    }

    /// Runs `ramstore ARGS --coordinator ADDR`.
    pub fn cli(&self, args: &[&str]) -> CliOutput {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--coordinator", self.addr()]);
        run_cli(&all, &[])
    }

    /// Kills the coordinator (SIGKILL: a crash) and starts a new one on the same
    /// port and state directory.
    pub fn restart_coordinator(&mut self) {
        let port = self.coordinator.port();
        let store = self.coordinator.store.clone();
        self.coordinator.proc.kill();
        let extra = self.coordinator.extra.clone();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        self.coordinator =
            Coordinator::start_on_with(port, &store, &extra).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// `ramstore dev` on a free run of ports (coordinator on `port`, servers after it).
pub struct Dev {
    pub proc: Proc,
    /// The coordinator's address.
    pub addr: String,
    pub port: u16,
    /// Every stdout line up to and including "Press Ctrl-C to stop.".
    pub banner: Vec<String>,
    pub dir: PathBuf,
}

impl Dev {
    /// Starts `ramstore dev --port P --dir DIR EXTRA` on a free run of `1 + servers`
    /// ports and waits for its whole banner.
    pub fn start(dir: &Path, servers: u16, extra: &[&str]) -> Dev {
        let mut last = String::new();
        for _ in 0..5 {
            match Dev::start_on(free_port_run(servers), dir, extra) {
                Ok(dev) => return dev,
                Err(e) => last = e.to_string(),
            }
        }
        panic!("ramstore dev did not start: {last}");
    }

    /// Starts `ramstore dev --port PORT --dir DIR EXTRA` and waits for its banner.
    pub fn start_on(port: u16, dir: &Path, extra: &[&str]) -> Result<Dev, HarnessError> {
        let port_arg = port.to_string();
        let dir_arg = dir.display().to_string();
        let mut args = vec!["dev", "--port", &port_arg, "--dir", &dir_arg];
        args.extend_from_slice(extra);
        let mut proc = spawn_ramstore("ramstore dev", &args, &[]);
        proc.wait_for_line(|l| l.starts_with("Press Ctrl-C"), READY_TIMEOUT)?;
        let banner = proc.stdout_lines();
        Ok(Dev {
            proc,
            addr: format!("127.0.0.1:{port}"),
            port,
            banner,
            dir: dir.to_path_buf(),
        })
    }
}

/// Polls `f` every few milliseconds until it returns `Some`, for at most `timeout`.
#[track_caller]
pub fn wait_until<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    // A `match`, not a closure, so the panic names the caller (`track_caller`).
    match poll_until(timeout, f) {
        Some(v) => v,
        None => panic!("timed out waiting for {what}"),
    }
}

/// Polls `f` every few milliseconds until it returns `Some`; `None` once `timeout`
/// has passed.
fn poll_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

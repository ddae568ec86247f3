//! A throwaway single-member etcd for tests: started on 127.0.0.1 on free ports with a
//! temporary data directory, ready once it answers `/health`, killed and removed
//! when dropped.
//!
//! The binary is `$RAMSTORE_ETCD_BIN`, else `/usr/bin/etcd`, else `etcd` on `PATH`.
//! A missing etcd is an error that says how to install it: tests that need etcd fail
//! rather than skip (CI installs it, see `.ci/run`).
//!
//! On Linux the child is also killed if the thread that started it ends
//! (`PR_SET_PDEATHSIG`), so start it from the test's main thread.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long etcd may take to answer `/health` after it was started.
pub const ETCD_READY_TIMEOUT_MS: u64 = 20_000;
/// Attempts with fresh ports when etcd fails to start (a port taken meanwhile).
const START_ATTEMPTS: usize = 4;
/// Pause between readiness checks.
const READY_POLL_MS: u64 = 20;
/// Deadline of one `/health` request.
const HEALTH_TIMEOUT_MS: u64 = 500;

/// Distinguishes the data directories of etcds started by one process.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A running etcd (see the module documentation).
#[derive(Debug)]
pub struct TestEtcd {
    child: Option<Child>,
    dir: PathBuf,
    /// `127.0.0.1:PORT` of the client URL.
    pub client_addr: String,
}

/// The etcd binary to run, or an error saying how to get one.
pub fn etcd_binary() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("RAMSTORE_ETCD_BIN") {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("RAMSTORE_ETCD_BIN={} is not a file", bin.display()))
        };
    }
    let usr_bin = Path::new("/usr/bin/etcd");
    if usr_bin.is_file() {
        return Ok(usr_bin.to_path_buf());
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcd"))
            .find(|p| p.is_file())
    });
    on_path.ok_or_else(|| {
        "etcd is not installed (looked for $RAMSTORE_ETCD_BIN, /usr/bin/etcd and etcd on \
         PATH): these tests need a real etcd; install it with `apt-get install -y \
         etcd-server` (CI does this in .ci/run)"
            .to_owned()
    })
}

fn free_port() -> Result<u16, String> {
    crate::local::try_free_port().map_err(|e| e.to_string())
}

/// Where test etcds keep their data: a tmpfs (`/dev/shm`) when there is one. A
/// test etcd's durability does not matter, and on a disk its fsyncs stall for
/// seconds when the machine is busy (a whole test suite on two cores): lease
/// keepalives then miss their TTL and every coordinator steps down (seen in a
/// chaos run at load average 7).
fn scratch_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let writable =
        shm.is_dir() && std::fs::metadata(shm).is_ok_and(|m| !m.permissions().readonly());
    if writable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Removes the data directories of every test etcd that process `pid` started
/// (for a harness interrupted before its `TestEtcd`s were dropped).
pub fn remove_dirs_of_process(pid: u32) {
    let prefix = format!("ramstore-test-etcd-{pid}-");
    let Ok(entries) = std::fs::read_dir(scratch_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl TestEtcd {
    /// Starts etcd and waits until it answers; retries with other ports if it
    /// exits at once (a port was taken between choosing and binding it).
    pub fn start() -> Result<TestEtcd, String> {
        let bin = etcd_binary()?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match Self::start_once(&bin) {
                Ok(etcd) => return Ok(etcd),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_once(bin: &Path) -> Result<TestEtcd, String> {
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let dir = scratch_dir().join(format!(
            "ramstore-test-etcd-{}-{n}-{client_port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let log_path = dir.join("etcd.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let name = format!("test{n}");
        let mut cmd = Command::new(bin);
        cmd.arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--name", &name])
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("{name}={peer_url}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        kill_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut etcd = TestEtcd {
            child: Some(child),
            dir,
            client_addr: format!("127.0.0.1:{client_port}"),
        };
        etcd.wait_ready()?;
        Ok(etcd)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_millis(ETCD_READY_TIMEOUT_MS);
        loop {
            if health(&self.client_addr) {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .map(|c| matches!(c.try_wait(), Ok(Some(_))))
                .unwrap_or(true);
            if exited || Instant::now() >= deadline {
                let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
                let tail: String = log
                    .lines()
                    .rev()
                    .take(15)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(format!(
                    "etcd on {} {} (log {}):\n{tail}",
                    self.client_addr,
                    if exited {
                        "exited at start"
                    } else {
                        "did not become healthy in time"
                    },
                    self.dir.join("etcd.log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(READY_POLL_MS));
        }
    }

    /// The store spec for a coordinator: `etcd://127.0.0.1:PORT`.
    pub fn store_arg(&self) -> String {
        format!("etcd://{}", self.client_addr)
    }

    /// Kills etcd (SIGKILL) and waits for it; its data directory stays until drop.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether etcd at `addr` answers `GET /health` with a healthy status.
fn health(addr: &str) -> bool {
    let timeout = Duration::from_millis(HEALTH_TIMEOUT_MS);
    let Ok(sock) = addr.parse() else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&sock, timeout) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let request = format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

#[cfg(target_os = "linux")]
fn kill_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only makes one
    // async-signal-safe system call.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn kill_with_parent(_cmd: &mut Command) {}

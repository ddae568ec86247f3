//! One child process of a test or of the harness: its stdout lines go to a channel
//! (so a caller can wait for the line a process prints once it serves — nothing
//! sleeps for a fixed time to "let it start") and are kept, with the tail of its
//! stderr, for failure messages; optionally both also go to a log file (the soak
//! harness keeps every process's log for its failure reports).
//!
//! A child is killed (SIGKILL) and reaped when its [`Proc`] is dropped, and the
//! kernel kills it should the thread that spawned it end first (`PR_SET_PDEATHSIG`),
//! so a crashed test or soak never leaves a cluster behind. That signal is tied to
//! the spawning *thread*: spawn every process of a cluster from the thread that
//! owns it (`Cluster` checks this).
//!
//! Memory: stdout lines are all kept (tests read a whole banner; servers print a
//! ready line and log to stderr), stderr only its last [`STDERR_KEPT_BYTES`].

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::HarnessError;

/// Lines of a log shown in a failure report (its tail).
pub const LOG_TAIL_LINES: usize = 60;
/// How much of a process's stderr is kept in memory (its end).
pub const STDERR_KEPT_BYTES: usize = 256 * 1024;
/// How long an ended process's output may take to be read to its end (what it
/// wrote before exiting can still sit in the pipes); bounded because a grandchild
/// that inherited a pipe can keep it open.
const OUTPUT_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// What to start: `program ARGS` with `envs` (and never the caller's
/// `RAMSTORE_COORDINATOR`), optionally inside a network namespace and with its
/// output also appended to a log file.
pub struct Spawn<'a> {
    pub name: &'a str,
    pub program: &'a Path,
    pub args: &'a [String],
    pub envs: &'a [(&'a str, &'a str)],
    /// Run inside this network namespace (`ip netns exec NS program …`).
    pub netns: Option<&'a str>,
    /// Also append stdout and stderr to this file.
    pub log: Option<&'a Path>,
}

/// A running (or finished) child process.
pub struct Proc {
    pub name: String,
    child: Child,
    lines: Receiver<String>,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    log_path: Option<PathBuf>,
    exited: Option<ExitStatus>,
    stopped: bool,
    /// Pump threads started, and how many have read their pipe to the end.
    pumps: usize,
    pumps_done: Arc<AtomicUsize>,
}

/// Applies the options every child gets: killed if the spawning thread dies.
pub fn guard(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec and makes one
    // async-signal-safe system call.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

type Log = Option<Arc<Mutex<File>>>;

fn append(log: &Log, text: &str) {
    if let Some(log) = log {
        let mut f = log.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = f.write_all(text.as_bytes());
    }
}

/// Copies stdout line by line to the log, the kept lines and the channel.
fn pump_stdout(
    from: impl Read + Send + 'static,
    log: Log,
    kept: Arc<Mutex<Vec<String>>>,
    tx: mpsc::Sender<String>,
    done: Arc<AtomicUsize>,
) {
    thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            append(&log, &format!("{line}\n"));
            kept.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(line.clone());
            let _ = tx.send(line);
        }
        done.fetch_add(1, Ordering::Release);
    });
}

/// Copies stderr as it comes to the log and the kept tail.
fn pump_stderr(
    mut from: impl Read + Send + 'static,
    log: Log,
    kept: Arc<Mutex<String>>,
    done: Arc<AtomicUsize>,
) {
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            let text = String::from_utf8_lossy(&buf[..n]);
            append(&log, &text);
            let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
            kept.push_str(&text);
            if kept.len() > STDERR_KEPT_BYTES {
                let mut cut = kept.len() - STDERR_KEPT_BYTES / 2;
                while !kept.is_char_boundary(cut) {
                    cut += 1;
                }
                kept.drain(..cut);
            }
        }
        done.fetch_add(1, Ordering::Release);
    });
}

impl Proc {
    /// Starts the process `spec` describes.
    pub fn start(spec: Spawn<'_>) -> Result<Proc, HarnessError> {
        let mut cmd = match spec.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(spec.program);
                c
            }
            None => Command::new(spec.program),
        };
        cmd.args(spec.args)
            .env_remove("RAMSTORE_COORDINATOR")
            .envs(spec.envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let log = match spec.log {
            Some(path) => {
                let mut f = File::options()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| HarnessError::Io(format!("{}: {e}", path.display())))?;
                let _ = writeln!(
                    f,
                    "=== {}: {} {}",
                    spec.name,
                    spec.program.display(),
                    spec.args.join(" ")
                );
                Some(Arc::new(Mutex::new(f)))
            }
            None => None,
        };
        let mut child = guard(&mut cmd).spawn().map_err(|e| HarnessError::Spawn {
            name: spec.name.to_string(),
            why: format!("{} {:?}: {e}", spec.program.display(), spec.args),
        })?;
        let (tx, lines) = mpsc::channel();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let pumps_done = Arc::new(AtomicUsize::new(0));
        let mut pumps = 0;
        if let Some(out) = child.stdout.take() {
            pump_stdout(out, log.clone(), stdout.clone(), tx, pumps_done.clone());
            pumps += 1;
        }
        if let Some(err) = child.stderr.take() {
            pump_stderr(err, log, stderr.clone(), pumps_done.clone());
            pumps += 1;
        }
        Ok(Proc {
            name: spec.name.to_string(),
            child,
            lines,
            stdout,
            stderr,
            log_path: spec.log.map(Path::to_path_buf),
            exited: None,
            stopped: false,
            pumps,
            pumps_done,
        })
    }

    /// Starts `program ARGS` with its output appended to `log_path` (the soak
    /// harness's processes).
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        netns: Option<&str>,
        log_path: &Path,
    ) -> Result<Proc, HarnessError> {
        Proc::start(Spawn {
            name,
            program,
            args,
            envs: &[],
            netns,
            log: Some(log_path),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the process printed so far (stdout, and the kept tail of stderr).
    pub fn transcript(&self) -> String {
        format!(
            "--- {} stdout ---\n{}\n--- {} stderr ---\n{}",
            self.name,
            self.stdout_lines().join("\n"),
            self.name,
            self.stderr.lock().unwrap_or_else(PoisonError::into_inner)
        )
    }

    /// Every stdout line so far.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits for a stdout line that satisfies `pred` (earlier lines are skipped).
    /// An error (with the log tail or transcript) if the process ends or `timeout`
    /// passes first.
    pub fn wait_for_line(
        &mut self,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<String, HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if pred(&line) => return Ok(line),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(HarnessError::NotReady {
                        name: self.name.clone(),
                        why: format!("no expected line within {timeout:?}"),
                        log: self.log_tail(),
                    })
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait_timeout(Duration::from_secs(5));
                    // Let the stderr pump collect the last words.
                    thread::sleep(Duration::from_millis(50));
                    return Err(HarnessError::NotReady {
                        name: self.name.clone(),
                        why: format!("ended ({status:?}) before the expected line"),
                        log: self.log_tail(),
                    });
                }
            }
        }
    }

    /// The last [`LOG_TAIL_LINES`] lines of the process's log file, or its
    /// transcript when it has none.
    pub fn log_tail(&self) -> String {
        match &self.log_path {
            Some(path) => log_tail(path, LOG_TAIL_LINES),
            None => self.transcript(),
        }
    }

    /// The log file its output is appended to, if any.
    pub fn log_path(&self) -> Option<&Path> {
        self.log_path.as_deref()
    }

    /// SIGKILL (a crash) and reap. Idempotent.
    pub fn kill(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }

    /// Sends `signal` unless the process was reaped (its pid cannot have been reused
    /// before that).
    pub fn signal(&mut self, signal: i32) {
        if self.exited.is_none() {
            if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
                // SAFETY: kill(2) on our own unreaped child.
                unsafe {
                    libc::kill(pid, signal);
                }
            }
            match signal {
                libc::SIGSTOP => self.stopped = true,
                libc::SIGCONT => self.stopped = false,
                _ => {}
            }
        }
    }

    /// Whether the process was stopped (SIGSTOP) and not continued.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The exit status if the process has ended (does not block).
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.drain_output();
                self.exited = Some(status);
            }
        }
        self.exited
    }

    /// Waits (bounded) until the pump threads have read everything the ended
    /// process wrote, so a transcript taken after its exit is complete: without
    /// this a test that saw the exit could read the transcript before the last
    /// error line arrived (a flaky "the error names the full disk" failure).
    fn drain_output(&self) {
        let deadline = Instant::now() + OUTPUT_DRAIN_TIMEOUT;
        while self.pumps_done.load(Ordering::Acquire) < self.pumps && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits up to `timeout` for the process to end; `None` if it is still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_exited() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped (SIGSTOP) process; no SIGCONT needed.
        self.kill();
    }
}

/// The last `n` lines of a file (empty if unreadable).
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    format!(
        "--- {} (last {} lines) ---\n{}",
        path.display(),
        lines.len() - from,
        lines[from..].join("\n")
    )
}

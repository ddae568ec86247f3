//! One child process of the harness: its stdout and stderr go to a log file (kept
//! for failure reports) and its stdout lines also to a channel, so the harness can
//! wait for the line a process prints once it serves — nothing sleeps for a fixed
//! time to "let it start".
//!
//! A child is killed (SIGKILL) and reaped when its [`Proc`] is dropped, and the
//! kernel kills it should the thread that spawned it end first (`PR_SET_PDEATHSIG`),
//! so a crashed test or soak never leaves a cluster behind. That signal is tied to
//! the spawning *thread*: the harness spawns every process from the thread that made
//! the cluster (`Cluster` checks this).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::HarnessError;

/// Lines of a log shown in a failure report (its tail).
pub const LOG_TAIL_LINES: usize = 60;

/// A running (or finished) child process.
pub struct Proc {
    pub name: String,
    child: Child,
    lines: Receiver<String>,
    log_path: PathBuf,
    exited: Option<ExitStatus>,
    stopped: bool,
}

/// Copies `from` into the shared log file line by line, sending stdout lines on.
fn pump(from: impl Read + Send + 'static, log: Arc<Mutex<File>>, tx: Option<mpsc::Sender<String>>) {
    thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if let Ok(mut f) = log.lock() {
                let _ = writeln!(f, "{line}");
            }
            if let Some(tx) = &tx {
                let _ = tx.send(line);
            }
        }
    });
}

impl Proc {
    /// Starts `program ARGS` (with `envs`), its output appended to `log_path`.
    /// `netns`: run inside that network namespace (`ip netns exec NS program …`).
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        netns: Option<&str>,
        log_path: &Path,
    ) -> Result<Proc, HarnessError> {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(program);
                c
            }
            None => Command::new(program),
        };
        cmd.args(args)
            .env_remove("RAMSTORE_COORDINATOR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
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
        let mut log = File::options()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(|e| HarnessError::Io(format!("{}: {e}", log_path.display())))?;
        let _ = writeln!(log, "=== {name}: {} {}", program.display(), args.join(" "));
        let mut child = cmd.spawn().map_err(|e| HarnessError::Spawn {
            name: name.to_string(),
            why: format!("{}: {e}", program.display()),
        })?;
        let log = Arc::new(Mutex::new(log));
        let (tx, lines) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            pump(out, log.clone(), Some(tx));
        }
        if let Some(err) = child.stderr.take() {
            pump(err, log, None);
        }
        Ok(Proc {
            name: name.to_string(),
            child,
            lines,
            log_path: log_path.to_path_buf(),
            exited: None,
            stopped: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a stdout line that satisfies `pred` (earlier lines are skipped).
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
                        why: format!("no ready line within {timeout:?}"),
                        log: self.log_tail(),
                    })
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait_timeout(Duration::from_secs(5));
                    // Let the stderr pump write the last words.
                    thread::sleep(Duration::from_millis(50));
                    return Err(HarnessError::NotReady {
                        name: self.name.clone(),
                        why: format!("ended ({status:?}) before its ready line"),
                        log: self.log_tail(),
                    });
                }
            }
        }
    }

    /// The last [`LOG_TAIL_LINES`] lines of the process's log.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log_path, LOG_TAIL_LINES)
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
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
                self.exited = Some(status);
            }
        }
        self.exited
    }

    /// Waits up to `timeout` for the process to end.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_exited() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
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

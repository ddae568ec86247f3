//! Writes and deletes that retry `NoSpace` until the background cleaner has made
//! room, with a progress watchdog.
//!
//! `WriteError::NoSpace` is the store's back-pressure: the log is full until the
//! cleaner frees seglets. A benchmark must not count it as a failure, but it must not
//! spin forever either: an operation that has not gone through after
//! a limit ([`STALL_LIMIT`] unless set) is reported as a stall (the run is then `completed: false`).

use std::time::{Duration, Instant};

use ramstore_master::{ObjectStore, RejectRules, WriteError};

/// How long one operation may keep getting `NoSpace` before the run gives up.
pub const STALL_LIMIT: Duration = Duration::from_secs(30);
/// Retries that only yield the core before sleeping: the cleaner usually frees a
/// seglet within microseconds when it is already running.
const YIELDS_BEFORE_SLEEP: u32 = 16;
/// Back-off between retries once yielding did not help.
const BACKOFF: Duration = Duration::from_micros(50);

/// Why an operation did not complete.
#[derive(Debug)]
pub enum Abort {
    /// `NoSpace` for longer than the limit.
    Stalled(Duration),
    /// Any other error: a bug in the benchmark or the engine.
    Failed(WriteError),
}

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Abort::Stalled(limit) => {
                write!(f, "no progress for {:.0}s (NoSpace)", limit.as_secs_f64())
            }
            Abort::Failed(e) => write!(f, "operation failed: {e}"),
        }
    }
}

/// Counts of `NoSpace` back-pressure seen by one thread.
#[derive(Debug, Clone, Copy)]
pub struct Backpressure {
    /// How long one operation may keep getting `NoSpace`.
    pub limit: Duration,
    /// `NoSpace` answers (each followed by a retry).
    pub nospace: u64,
    /// Operations that saw at least one `NoSpace`.
    pub stalled_ops: u64,
    /// Time spent between the first `NoSpace` of an operation and its success.
    pub stalled_ns: u64,
    /// Longest such time for one operation.
    pub max_stall_ns: u64,
}

impl Default for Backpressure {
    fn default() -> Self {
        Self::with_limit(STALL_LIMIT)
    }
}

impl Backpressure {
    pub fn with_limit(limit: Duration) -> Self {
        Self {
            limit,
            nospace: 0,
            stalled_ops: 0,
            stalled_ns: 0,
            max_stall_ns: 0,
        }
    }

    /// Runs `op` until it succeeds, retrying `NoSpace` with back-off.
    pub fn retry<T>(&mut self, mut op: impl FnMut() -> Result<T, WriteError>) -> Result<T, Abort> {
        let mut first_fail: Option<Instant> = None;
        let mut attempts = 0u32;
        loop {
            match op() {
                Ok(v) => {
                    if let Some(t) = first_fail {
                        let ns = t.elapsed().as_nanos() as u64;
                        self.stalled_ops += 1;
                        self.stalled_ns += ns;
                        self.max_stall_ns = self.max_stall_ns.max(ns);
                    }
                    return Ok(v);
                }
                Err(e) if e.is_retryable() => {
                    self.nospace += 1;
                    let since = *first_fail.get_or_insert_with(Instant::now);
                    if since.elapsed() > self.limit {
                        return Err(Abort::Stalled(self.limit));
                    }
                    attempts += 1;
                    if attempts <= YIELDS_BEFORE_SLEEP {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(BACKOFF);
                    }
                }
                Err(e) => return Err(Abort::Failed(e)),
            }
        }
    }

    /// Writes `key` = `value` in `table`, retrying `NoSpace`.
    pub fn write(
        &mut self,
        store: &ObjectStore,
        table: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<u64, Abort> {
        let rules = RejectRules::default();
        self.retry(|| store.write(table, key, value, &rules))
    }

    /// Deletes `key` from `table`, retrying `NoSpace`. Returns whether it existed.
    pub fn remove(&mut self, store: &ObjectStore, table: u64, key: &[u8]) -> Result<bool, Abort> {
        let rules = RejectRules::default();
        self.retry(|| store.remove(table, key, &rules).map(|v| v.is_some()))
    }
}

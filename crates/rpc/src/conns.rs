//! The table of a listener's open connections and the time limits on them
//! (issue 17: bounded per-connection memory and time on every port).
//!
//! Every connection registers here when accepted and records, with two relaxed
//! atomic stores and no lock, which phase it is in: idle (no partial request, no
//! reply waiting to go out), reading a partial request, writing replies, or busy
//! with its own requests' work. A sweeper ([`ConnTable::run_sweeper`]) wakes a few
//! times per timeout and shuts down the socket of every connection that has sat in
//! a phase too long: a partial request or a reply write that made no progress for
//! the request timeout (a client sending one byte per second, or never reading its
//! replies), an idle connection for the idle timeout (0: never). Shutting the
//! socket down (rather than signalling the task) wakes the connection's own read or
//! write with an error, so the hot path carries no timer at all.
//!
//! At the connection limit, a new connection evicts the connection that has been
//! idle the longest instead of being refused, so thousands of idle clients cannot
//! lock out new clients or the cluster's own traffic. Only when no connection is
//! idle is the newcomer refused.
//!
//! Invariant: an entry is in the table only while its socket is open (the handle
//! is dropped before the socket), and the sweeper shuts sockets down only under the
//! table's lock, so it never touches a descriptor number the process reused.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_clock::{system_clock, Clock};

/// How long a request may take to arrive once its first byte has, and a reply
/// write may block without progress, by default (`--request-timeout-ms`).
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// How long a connection may sit idle by default (`--idle-timeout-ms`; 0: never).
/// Off, as Redis's `timeout 0`: at the connection limit the oldest idle
/// connection is evicted instead, which keeps room for new clients without
/// closing the long-lived, often quiet connections between servers.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 0;
/// Longest timeout accepted (a day): beyond it a timeout is meaningless.
pub const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;
/// The sweeper checks at least this often (and at least four times per timeout),
/// so a timeout fires at most a quarter late, and never more than a second late.
const MAX_SWEEP_PERIOD_MS: u64 = 1_000;
/// The sweeper checks at most this often.
const MIN_SWEEP_PERIOD_MS: u64 = 10;

/// No partial request buffered and no reply waiting to be written.
const IDLE: u8 = 0;
/// Part of a request has arrived.
const READING: u8 = 1;
/// Replies are being written (the client may not be reading them).
const WRITING: u8 = 2;
/// Waiting for the connection's own slow requests (which may take long, e.g. a
/// recovery) before reading more: neither timed out nor evicted.
const BUSY: u8 = 3;

/// The limits of one listener's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections served at once (at least 1).
    pub max_connections: usize,
    /// See [`DEFAULT_REQUEST_TIMEOUT_MS`]; 0: never.
    pub request_timeout_ms: u64,
    /// See [`DEFAULT_IDLE_TIMEOUT_MS`]; 0: never.
    pub idle_timeout_ms: u64,
}

impl ConnLimits {
    /// The defaults with `max_connections`.
    pub fn with_max_connections(max_connections: usize) -> Self {
        Self {
            max_connections,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
        }
    }
}

/// What the table did, for the servers' statistics.
#[derive(Debug, Default)]
pub struct ConnCounters {
    /// Idle connections closed to make room for a new one at the limit.
    pub evicted: AtomicU64,
    /// Connections closed because a request or reply stalled.
    pub request_timeouts: AtomicU64,
    /// Connections closed for being idle too long.
    pub idle_timeouts: AtomicU64,
}

/// One connection's phase, written by its task and read by the sweeper.
#[derive(Debug)]
struct ConnState {
    fd: RawFd,
    phase: AtomicU8,
    /// When the phase began or last made progress, in the table's coarse ms.
    since_ms: AtomicU64,
    /// Set once the sweeper or an eviction shut the socket down.
    closing: AtomicBool,
    /// Requests of this connection running on their own tasks (slow requests,
    /// writes waiting for replication): a connection with any is not idle, since
    /// closing it would lose their answers.
    in_flight: AtomicU32,
}

impl ConnState {
    fn idle(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == IDLE
            && self.in_flight.load(Ordering::Relaxed) == 0
            && !self.closing.load(Ordering::Relaxed)
    }
}

/// One request of a connection running on its own task; see
/// [`ConnHandle::task_started`].
#[derive(Debug)]
pub struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The open connections of one listener; see the module documentation.
#[derive(Debug)]
pub struct ConnTable {
    limits: ConnLimits,
    /// The time the timeouts are measured in (the system clock, or a simulated one).
    clock: Arc<dyn Clock>,
    started: Instant,
    /// Milliseconds since `started`, refreshed by the sweeper and on accept: a
    /// coarse clock connections read without a system call.
    now_ms: AtomicU64,
    next_id: AtomicU64,
    conns: parking_lot::Mutex<HashMap<u64, Arc<ConnState>>>,
    /// Entries whose socket was shut down but whose task has not ended yet.
    closing: AtomicUsize,
    pub counters: ConnCounters,
}

/// A registered connection; dropping it unregisters the connection, so it must be
/// dropped before the socket is closed.
#[derive(Debug)]
pub struct ConnHandle {
    table: Arc<ConnTable>,
    id: u64,
    state: Arc<ConnState>,
}

impl ConnHandle {
    /// Nothing buffered and nothing to write.
    #[inline]
    pub fn idle(&self) {
        self.set(IDLE);
    }

    /// Part of a request is buffered; `progressed`: a request completed or the
    /// connection was idle since the last call, so the request timeout restarts.
    #[inline]
    pub fn reading(&self, progressed: bool) {
        if progressed || self.state.phase.load(Ordering::Relaxed) != READING {
            self.set(READING);
        }
    }

    /// Bytes arrived: a connection that was idle is now reading a request (so it
    /// is not evicted while it runs it); one already reading keeps its start time.
    #[inline]
    pub fn received(&self) {
        self.reading(false);
    }

    /// A request goes on to its own task; the connection is not idle until the
    /// returned guard is dropped (with the task).
    #[inline]
    pub fn task_started(&self) -> InFlight {
        self.state.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.state.clone())
    }

    /// About to write replies.
    #[inline]
    pub fn writing(&self) {
        self.set(WRITING);
    }

    /// Waiting for this connection's own slow requests.
    #[inline]
    pub fn busy(&self) {
        self.set(BUSY);
    }

    #[inline]
    fn set(&self, phase: u8) {
        self.state
            .since_ms
            .store(self.table.now_ms.load(Ordering::Relaxed), Ordering::Relaxed);
        self.state.phase.store(phase, Ordering::Relaxed);
    }
}

impl ConnHandle {
    /// The limits of the table this connection is in.
    pub fn limits(&self) -> ConnLimits {
        self.table.limits
    }

    /// The clock of the table this connection is in.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.table.clock
    }
}

impl Drop for ConnHandle {
    fn drop(&mut self) {
        let mut conns = self.table.conns.lock();
        conns.remove(&self.id);
        if self.state.closing.load(Ordering::Relaxed) {
            self.table.closing.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl ConnTable {
    /// A table on the system clock.
    pub fn new(limits: ConnLimits) -> Arc<Self> {
        Self::with_clock(limits, system_clock())
    }

    /// A table whose timeouts run on `clock`.
    pub fn with_clock(limits: ConnLimits, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            limits: ConnLimits {
                max_connections: limits.max_connections.max(1),
                ..limits
            },
            started: clock.now(),
            clock,
            now_ms: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            conns: parking_lot::Mutex::default(),
            closing: AtomicUsize::new(0),
            counters: ConnCounters::default(),
        })
    }

    pub fn limits(&self) -> ConnLimits {
        self.limits
    }

    /// The clock the timeouts run on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Connections registered (including ones being closed).
    pub fn len(&self) -> usize {
        self.conns.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn tick(&self) -> u64 {
        let now = self.clock.elapsed(self.started).as_millis() as u64;
        self.now_ms.store(now, Ordering::Relaxed);
        now
    }

    /// Registers the connection whose socket is `fd`. At the limit, shuts down the
    /// connection idle the longest to make room; `None` if none is idle (the caller
    /// refuses the newcomer).
    pub fn admit(self: &Arc<Self>, fd: RawFd) -> Option<ConnHandle> {
        let now = self.tick();
        let mut conns = self.conns.lock();
        let live = conns.len() - self.closing.load(Ordering::Relaxed);
        if live >= self.limits.max_connections {
            let oldest = conns
                .values()
                .filter(|c| c.idle())
                .min_by_key(|c| c.since_ms.load(Ordering::Relaxed))?;
            self.close(oldest);
            self.counters.evicted.fetch_add(1, Ordering::Relaxed);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState {
            fd,
            phase: AtomicU8::new(IDLE),
            since_ms: AtomicU64::new(now),
            closing: AtomicBool::new(false),
            in_flight: AtomicU32::new(0),
        });
        conns.insert(id, state.clone());
        Some(ConnHandle {
            table: self.clone(),
            id,
            state,
        })
    }

    /// Shuts `conn`'s socket down; its task then sees end of stream or an error.
    /// Called with the table locked (see the module invariant).
    fn close(&self, conn: &ConnState) {
        if conn.closing.swap(true, Ordering::Relaxed) {
            return;
        }
        self.closing.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `shutdown` only changes the state of an open socket, and `fd` is
        // open: its entry is in the table, which the caller has locked, and entries
        // leave the table before their socket closes.
        unsafe {
            libc::shutdown(conn.fd, libc::SHUT_RDWR);
        }
    }

    /// Closes every connection over its time limit; returns how many.
    pub fn sweep(&self) -> usize {
        let now = self.tick();
        let ConnLimits {
            request_timeout_ms,
            idle_timeout_ms,
            ..
        } = self.limits;
        let conns = self.conns.lock();
        let mut closed = 0;
        for conn in conns.values() {
            if conn.closing.load(Ordering::Relaxed) {
                continue;
            }
            let waited = now.saturating_sub(conn.since_ms.load(Ordering::Relaxed));
            let over = |limit: u64| limit > 0 && waited > limit;
            match conn.phase.load(Ordering::Relaxed) {
                READING | WRITING if over(request_timeout_ms) => {
                    self.counters
                        .request_timeouts
                        .fetch_add(1, Ordering::Relaxed);
                }
                IDLE if conn.in_flight.load(Ordering::Relaxed) == 0 && over(idle_timeout_ms) => {
                    self.counters.idle_timeouts.fetch_add(1, Ordering::Relaxed);
                }
                _ => continue,
            }
            self.close(conn);
            closed += 1;
        }
        closed
    }

    /// How often the sweeper runs: four times per shortest timeout, within
    /// [`MIN_SWEEP_PERIOD_MS`]..=[`MAX_SWEEP_PERIOD_MS`].
    pub fn sweep_period(&self) -> Duration {
        let shortest = [self.limits.request_timeout_ms, self.limits.idle_timeout_ms]
            .into_iter()
            .filter(|&t| t > 0)
            .min()
            .unwrap_or(4 * MAX_SWEEP_PERIOD_MS);
        Duration::from_millis((shortest / 4).clamp(MIN_SWEEP_PERIOD_MS, MAX_SWEEP_PERIOD_MS))
    }

    /// Sweeps every [`ConnTable::sweep_period`] until dropped.
    pub async fn run_sweeper(self: Arc<Self>) {
        let period = self.sweep_period();
        loop {
            self.clock.sleep(period).await;
            self.sweep();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use ramstore_clock::ManualClock;

    use super::*;

    fn limits(max_connections: usize) -> ConnLimits {
        ConnLimits {
            max_connections,
            request_timeout_ms: 0,
            idle_timeout_ms: 0,
        }
    }

    /// Whether the socket at the other end of `peer` was shut down (reads see the
    /// end of the stream at once).
    fn shut_down(peer: &mut UnixStream) -> bool {
        peer.set_nonblocking(true).unwrap();
        matches!(peer.read(&mut [0u8; 1]), Ok(0))
    }

    #[test]
    fn admit_at_the_limit_evicts_the_connection_idle_longest() {
        let clock = ManualClock::new();
        let table = ConnTable::with_clock(limits(2), clock.handle());
        let (a, mut a_peer) = UnixStream::pair().unwrap();
        let (b, mut b_peer) = UnixStream::pair().unwrap();
        let (c, mut c_peer) = UnixStream::pair().unwrap();
        let ha = table.admit(a.as_raw_fd()).expect("under the limit");
        let hb = table.admit(b.as_raw_fd()).expect("under the limit");
        // `a` goes idle first, `b` a few (coarse-clock) milliseconds later.
        ha.idle();
        clock.advance(Duration::from_millis(5));
        table.tick();
        hb.idle();
        let hc = table
            .admit(c.as_raw_fd())
            .expect("an idle connection makes room");
        assert!(
            shut_down(&mut a_peer),
            "the oldest idle connection is evicted"
        );
        assert!(!shut_down(&mut b_peer));
        assert!(!shut_down(&mut c_peer));
        assert_eq!(table.counters.evicted.load(Ordering::Relaxed), 1);
        drop((ha, hb, hc));
        assert!(table.is_empty());
    }

    #[test]
    fn admit_at_the_limit_refuses_when_no_connection_is_idle() {
        let table = ConnTable::new(limits(1));
        let (a, mut a_peer) = UnixStream::pair().unwrap();
        let (b, _b_peer) = UnixStream::pair().unwrap();
        let ha = table.admit(a.as_raw_fd()).expect("under the limit");
        ha.reading(true);
        assert!(table.admit(b.as_raw_fd()).is_none());
        ha.busy();
        assert!(table.admit(b.as_raw_fd()).is_none());
        assert!(
            !shut_down(&mut a_peer),
            "a busy connection is never evicted"
        );
        // Nor one whose requests still run on their own tasks.
        ha.idle();
        let task = ha.task_started();
        assert!(table.admit(b.as_raw_fd()).is_none());
        // Once it is idle it can be evicted.
        drop(task);
        assert!(table.admit(b.as_raw_fd()).is_some());
        assert!(shut_down(&mut a_peer));
    }

    #[test]
    fn sweep_closes_a_partial_request_after_the_request_timeout_only() {
        let clock = ManualClock::new();
        let table = ConnTable::with_clock(
            ConnLimits {
                request_timeout_ms: 20,
                ..limits(8)
            },
            clock.handle(),
        );
        let (a, mut a_peer) = UnixStream::pair().unwrap();
        let (b, mut b_peer) = UnixStream::pair().unwrap();
        let reading = table.admit(a.as_raw_fd()).unwrap();
        let idle = table.admit(b.as_raw_fd()).unwrap();
        reading.reading(true);
        idle.idle();
        assert_eq!(table.sweep(), 0, "nothing is over its limit yet");
        // No progress: the mark is not refreshed.
        clock.advance(Duration::from_millis(20));
        reading.reading(false);
        assert_eq!(
            table.sweep(),
            0,
            "at exactly the timeout it is not over yet"
        );
        clock.advance(Duration::from_millis(1));
        assert_eq!(table.sweep(), 1);
        assert!(shut_down(&mut a_peer));
        assert!(
            !shut_down(&mut b_peer),
            "idle connections stay with no idle timeout"
        );
        assert_eq!(table.counters.request_timeouts.load(Ordering::Relaxed), 1);
        assert_eq!(table.sweep(), 0, "a connection is closed once");
    }

    #[test]
    fn sweep_closes_idle_connections_after_the_idle_timeout() {
        let clock = ManualClock::new();
        let table = ConnTable::with_clock(
            ConnLimits {
                idle_timeout_ms: 20,
                ..limits(8)
            },
            clock.handle(),
        );
        let (a, mut a_peer) = UnixStream::pair().unwrap();
        let (b, mut b_peer) = UnixStream::pair().unwrap();
        let idle = table.admit(a.as_raw_fd()).unwrap();
        let busy = table.admit(b.as_raw_fd()).unwrap();
        idle.idle();
        busy.busy();
        clock.advance(Duration::from_millis(21));
        assert_eq!(table.sweep(), 1);
        assert!(shut_down(&mut a_peer));
        assert!(!shut_down(&mut b_peer), "a busy connection is not idle");
        assert_eq!(table.counters.idle_timeouts.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn sweep_period_is_a_quarter_of_the_shortest_timeout_within_bounds() {
        let period = |request_timeout_ms, idle_timeout_ms| {
            ConnTable::new(ConnLimits {
                max_connections: 1,
                request_timeout_ms,
                idle_timeout_ms,
            })
            .sweep_period()
        };
        assert_eq!(period(0, 0), Duration::from_millis(MAX_SWEEP_PERIOD_MS));
        assert_eq!(
            period(30_000, 0),
            Duration::from_millis(MAX_SWEEP_PERIOD_MS)
        );
        assert_eq!(period(30_000, 400), Duration::from_millis(100));
        assert_eq!(period(1, 0), Duration::from_millis(MIN_SWEEP_PERIOD_MS));
    }

    #[tokio::test]
    async fn run_sweeper_sweeps_every_period_of_its_clock() {
        let clock = ManualClock::new();
        let table = ConnTable::with_clock(
            ConnLimits {
                idle_timeout_ms: 400,
                ..limits(8)
            },
            clock.handle(),
        );
        let (a, mut a_peer) = UnixStream::pair().unwrap();
        let idle = table.admit(a.as_raw_fd()).unwrap();
        idle.idle();
        let sweeper = tokio::spawn(table.clone().run_sweeper());
        // A quarter of the idle timeout: the sweeper sleeps 100 ms at a time.
        for round in 1..=4u64 {
            while clock.sleepers().is_empty() {
                tokio::task::yield_now().await;
            }
            assert_eq!(
                clock.sleepers(),
                vec![clock.origin() + Duration::from_millis(100 * round)]
            );
            assert!(!shut_down(&mut a_peer), "not over at {round}00 ms");
            clock.advance(Duration::from_millis(100));
            tokio::task::yield_now().await;
        }
        // 400 ms is not over the timeout; the sweep at 500 ms closes it.
        while clock.sleepers().is_empty() {
            tokio::task::yield_now().await;
        }
        clock.advance(Duration::from_millis(100));
        while table.counters.idle_timeouts.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(shut_down(&mut a_peer));
        sweeper.abort();
    }
}

//! What every connection of one RESP listener shares: its configuration, the
//! INFO counters, the connection table and the budget for large commands. Both the
//! connection loop (`server.rs`) and the commands (`cmd/`) read it; it depends on
//! neither.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ramstore_clock::{system_clock, Clock};
use ramstore_rpc::conns::{ConnLimits, ConnTable};
use tokio::sync::Semaphore;

use crate::backend::Backend;
use crate::poller::Poller;

/// Most client connections at once (Redis's `maxclients` default). At the limit a
/// new connection evicts the one idle the longest; if none is idle it is answered
/// an error and closed.
pub const MAX_CONNECTIONS: u64 = 10_000;

/// Bytes of read buffer beyond [`BASE_BUFFER_BYTES`] that all connections may hold
/// at once for large partial commands (each at most `MAX_COMMAND_BYTES`, 16 MiB):
/// 100 clients sending 15 MiB of a command each hold this much, not 1.4 GB. A
/// connection whose command does not fit waits without reading until others finish
/// or the request timeout closes it.
pub const LARGE_COMMAND_BUDGET_BYTES: usize = 128 << 20;

/// How the RESP front end is configured.
#[derive(Debug, Clone)]
pub struct RespConfig {
    /// The password AUTH must give before any other command (`--requirepass`);
    /// `None`: no authentication.
    pub require_pass: Option<String>,
    /// The port the listener is bound to (CONFIG GET port, INFO).
    pub port: u16,
    /// Bytes of log memory of the local master (CONFIG GET maxmemory, INFO).
    pub memory_bytes: u64,
    /// Event-loop threads serving connections; 0: the caller's runtime if it is
    /// a current-thread one, else 1 (see [`crate::start`]).
    pub threads: usize,
    /// How long an event loop keeps polling its sockets after the last read
    /// before it sleeps, in µs (`--resp-poll-us`; 0: sleep at once). See
    /// [`crate::poller`].
    pub poll_before_sleep_us: u64,
    /// The poller of the caller's event loop, for a front end served on it
    /// (`threads` 0 on a current-thread runtime, [`crate::start`]): `ramstore dev`
    /// shares one between its servers' native ports and the Redis port, so
    /// activity on any of them keeps the one loop polling; its owner runs it.
    /// `None`: the front end makes its own, with `poll_before_sleep_us`. Not
    /// used by dedicated event-loop threads (each has its own).
    pub loop_poller: Option<Arc<Poller>>,
    /// How long a command may take to arrive once begun, and a reply write may
    /// stall, before the connection is closed (`--request-timeout-ms`; 0: never).
    /// Redis has no such limit; a partial command must not hold memory forever.
    pub request_timeout_ms: u64,
    /// How long a connection may sit idle before it is closed (`--idle-timeout-ms`,
    /// Redis's `timeout`; 0: never, Redis's default).
    pub idle_timeout_ms: u64,
    /// The clock the time limits and INFO's uptime run on (default: the system
    /// clock).
    pub clock: Arc<dyn Clock>,
}

impl Default for RespConfig {
    fn default() -> Self {
        Self {
            require_pass: None,
            port: 0,
            memory_bytes: 0,
            threads: 1,
            poll_before_sleep_us: crate::poller::DEFAULT_POLL_BEFORE_SLEEP_US,
            loop_poller: None,
            request_timeout_ms: ramstore_rpc::conns::DEFAULT_REQUEST_TIMEOUT_MS,
            idle_timeout_ms: ramstore_rpc::conns::DEFAULT_IDLE_TIMEOUT_MS,
            clock: system_clock(),
        }
    }
}

/// Counters for INFO.
#[derive(Debug, Default)]
pub struct RespStats {
    pub connections_received: AtomicU64,
    pub connected: AtomicU64,
    pub commands_processed: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub protocol_errors: AtomicU64,
}

/// State shared by every connection of one listener.
pub struct Shared {
    pub backend: Backend,
    pub config: RespConfig,
    pub stats: RespStats,
    pub started: Instant,
    /// Every connection, for the connection limit and the time limits.
    pub conns: Arc<ConnTable>,
    /// See [`LARGE_COMMAND_BUDGET_BYTES`]; permits are KiB.
    pub(crate) large_commands: Arc<Semaphore>,
    next_client_id: AtomicU64,
}

impl Shared {
    pub fn new(backend: Backend, config: RespConfig) -> Self {
        let conns = ConnTable::with_clock(
            ConnLimits {
                max_connections: MAX_CONNECTIONS as usize,
                request_timeout_ms: config.request_timeout_ms,
                idle_timeout_ms: config.idle_timeout_ms,
            },
            config.clock.clone(),
        );
        let started = config.clock.now();
        Self {
            backend,
            config,
            conns,
            large_commands: Arc::new(Semaphore::new(LARGE_COMMAND_BUDGET_BYTES / 1024)),
            stats: RespStats::default(),
            started,
            next_client_id: AtomicU64::new(1),
        }
    }

    pub(crate) fn new_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }
}

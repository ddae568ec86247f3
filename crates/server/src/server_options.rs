//! How a storage server is started ([`ServerOptions`]) and why it could not be
//! ([`ServerError`]): read by `storage_server` (TCP), `in_process` and the parts
//! both are built from (`parts`), so none of them imports another for it (issue
//! 19: no import circles). `storage_server` re-exports every name.

use crate::cold_start;
use crate::failure_monitor::{MonitorConfig, ZombieHook};
use crate::placement::Placement;
use crate::replica_manager::MAX_REPLICAS;
use ramstore_backup::{BackupConfig, BackupError, SyncMode, FRAME_SEGMENT_BYTES};
use ramstore_clock::{system_clock, system_rng, Clock, Rng};
use ramstore_rpc::Poller;
use std::path::PathBuf;
use std::sync::Arc;
/// Frames in a backup's frames file by default: 64 × 8 MiB = 512 MiB of replicas
/// (plus 4 KiB of metadata per frame), room for the replicas of a few masters'
/// 1 GiB logs spread over a small cluster.
pub const DEFAULT_BACKUP_FRAMES: u32 = 64;

/// How a storage server is started.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to accept clients on (`127.0.0.1:0` picks a free port).
    pub listen: String,
    /// Address other processes use to reach this server; default: the bound address.
    pub advertise: Option<String>,
    /// The coordinator to enlist with.
    pub coordinator: String,
    /// Bytes of log memory.
    pub memory_bytes: usize,
    /// Where to serve Prometheus metrics (`None`: nowhere).
    pub metrics_listen: Option<String>,
    /// Where the backup keeps other masters' replicas (`<dir>/replicas.frames`);
    /// `None`: this server runs no backup and enlists as a master only.
    pub backup_dir: Option<PathBuf>,
    /// When backup writes are acknowledged (see `ramstore_backup`'s durability
    /// contract): [`SyncMode::Buffered`] is RAMCloud's (R§4.2).
    pub backup_sync: SyncMode,
    /// Frames in the frames file: the most replicas this backup holds. Fixed when
    /// the file is made; a restart must give the same number.
    pub backup_frames: u32,
    /// Most replicas open (buffered in memory, 8 MiB each) at once; beyond it the
    /// backup answers NO_SPACE so masters go elsewhere (R§7.1).
    pub backup_open_buffers: u32,
    /// Servers in one failure domain share a failure cause (a rack, a power
    /// supply): no two replicas of a segment, nor a replica and its master, are
    /// placed in one domain. Empty (the default): the server is its own domain.
    /// At most [`ramstore_wire::MAX_FAILURE_DOMAIN_BYTES`] bytes.
    pub failure_domain: String,
    /// How this master places its replicas: scattered over the cluster
    /// (R§7.1, the default) or one hop away where the failure domains allow
    /// (C§3.2; needs switches in the failure-domain field,
    /// `ramstore_wire::location`). Issue 22.
    pub placement: Placement,
    /// Replicas of each segment of this master's log on other servers' backups
    /// (R§4.2); 0 keeps the log in DRAM only. `ramstore server` defaults to
    /// [`crate::replica_manager::DEFAULT_REPLICAS`].
    pub replicas: usize,
    /// The failure monitor's timing (R§7.2, [`crate::failure_monitor`]): how often
    /// this server pings a random other server, and how long it waits for answers.
    pub monitor: MonitorConfig,
    /// What to do on learning this server was declared crashed (R§7.11); `None`:
    /// only stop serving object operations (in-process tests). The `ramstore` binary
    /// exits.
    pub on_zombie: Option<ZombieHook>,
    /// Fault all log memory in on a background thread right after start-up, so
    /// the kernel's zeroing of fresh pages never lands on writes or recovery
    /// replay (the process then holds `memory_bytes` resident). Off by default
    /// (`ramstore server --prefault-memory`): it keeps a core busy meanwhile.
    pub prefault_memory: bool,
    /// Where to serve the Redis protocol (`ramstore server --resp-listen`);
    /// `None`: nowhere. See `ramstore_resp`.
    pub resp_listen: Option<String>,
    /// The password Redis clients must give with AUTH (`--requirepass`).
    pub resp_require_pass: Option<String>,
    /// Masters each Redis database's table (`db{n}`) spans when the RESP front end
    /// creates it (`--resp-table-span`; 1: the whole database on one master).
    pub resp_table_span: u32,
    /// How long the Redis front end's event loop keeps polling its sockets after
    /// the last read before it sleeps, in µs (`--resp-poll-us`; 0: sleep at once;
    /// see `ramstore_rpc::poller`). Unused with [`ServerOptions::loop_poller`].
    pub resp_poll_us: u64,
    /// The poller of the event loop this server shares with others (`ramstore
    /// dev`: the coordinator, every server and the Redis port on one
    /// current-thread runtime): the native port and the Redis port report their
    /// reads and replication waits to it, so the loop polls rather than sleeps
    /// while any of them is busy — a native durable write's BackupWrites and
    /// acknowledgements included (R§5.1; `ramstore_rpc::poller`). The caller
    /// runs it. `None` (`ramstore server`, its own multi-thread runtime): the
    /// native port does not poll.
    pub loop_poller: Option<Arc<Poller>>,
    /// Client and peer connections served at once; a connection beyond this has
    /// its first request answered RETRY and is closed (`--max-connections`).
    pub max_connections: usize,
    /// How long a write refused for lack of memory (NO_SPACE, L§7) is retried by
    /// the Redis front end, and how long the log may refuse writes before refused
    /// writes are answered `-OOM` at once, in ms (`--no-space-wait-ms`; default
    /// [`crate::DEFAULT_NO_SPACE_WAIT_MS`], at most
    /// [`crate::MAX_NO_SPACE_WAIT_MS`]). See `storage_service::FullLog`.
    pub no_space_wait_ms: u64,
    /// Pause between this master's replica checks, in ms (one BackupGetReplicas
    /// to one backup, the backups in turn; `--replica-check-interval-ms`; 0: off).
    /// See [`crate::replica_manager`], "Replica health".
    pub replica_check_interval_ms: u64,
    /// Pause between rounds of the lease-expiry loop, in ms: client leases
    /// idle since the last round are checked with the coordinator and the
    /// records of expired ones dropped (RIFL §4.2;
    /// [`crate::client_lease_expiry`]; `--client-lease-check-ms`; 0: off).
    pub client_lease_check_ms: u64,
    /// Pause between the active expirer's rounds, in ms
    /// ([`crate::key_expiry`]; 0: off, expired objects then go only when
    /// written over or deleted, though reads never see them).
    pub expire_interval_ms: u64,
    /// How long a transaction may stay prepared here, undecided, before this
    /// master recovers it as a recovery manager, in ms (SOSP'15 §6.4;
    /// [`crate::tx_recovery`]; `--tx-recovery-timeout-ms`; 0: off).
    pub tx_recovery_timeout_ms: u64,
    /// How long a request may take to arrive once begun, and a reply write may
    /// stall, before the connection is closed, on the native and Redis ports
    /// (`--request-timeout-ms`; 0: never).
    pub request_timeout_ms: u64,
    /// How long a client connection may sit idle before it is closed, on the
    /// native and Redis ports (`--idle-timeout-ms`; 0: never).
    pub idle_timeout_ms: u64,
    /// The clock everything in the server runs on: its store, request timing,
    /// leases, pings, replication, recovery and connection limits (default: the
    /// system clock; a simulation gives its own).
    pub clock: Arc<dyn Clock>,
    /// Where the server's random choices come from: ping peers and nonces,
    /// replica placement, client jitter (default: the system's).
    pub rng: Arc<dyn Rng>,
}

impl ServerOptions {
    /// Options with the defaults for everything but the coordinator: listen on a
    /// free port of 127.0.0.1, 1 GiB of log memory, no metrics, no backup (set
    /// `backup_dir` to run one, with [`DEFAULT_BACKUP_FRAMES`] buffered frames).
    pub fn new(coordinator: impl Into<String>) -> Self {
        Self {
            listen: "127.0.0.1:0".into(),
            advertise: None,
            coordinator: coordinator.into(),
            memory_bytes: 1 << 30,
            metrics_listen: None,
            backup_dir: None,
            backup_sync: SyncMode::Buffered,
            backup_frames: DEFAULT_BACKUP_FRAMES,
            backup_open_buffers: ramstore_backup::DEFAULT_OPEN_BUFFERS,
            failure_domain: String::new(),
            placement: Placement::Scattered,
            replicas: 0,
            monitor: MonitorConfig::default(),
            on_zombie: None,
            prefault_memory: false,
            resp_listen: None,
            resp_require_pass: None,
            resp_table_span: 1,
            resp_poll_us: ramstore_resp::DEFAULT_POLL_BEFORE_SLEEP_US,
            loop_poller: None,
            max_connections: ramstore_rpc::DEFAULT_MAX_CONNECTIONS,
            no_space_wait_ms: crate::DEFAULT_NO_SPACE_WAIT_MS,
            replica_check_interval_ms: crate::replica_manager::DEFAULT_REPLICA_CHECK_INTERVAL_MS,
            client_lease_check_ms: crate::client_lease_expiry::DEFAULT_CLIENT_LEASE_CHECK_MS,
            expire_interval_ms: crate::key_expiry::DEFAULT_EXPIRE_INTERVAL_MS,
            tx_recovery_timeout_ms: crate::tx_recovery::DEFAULT_TX_RECOVERY_TIMEOUT_MS,
            request_timeout_ms: ramstore_rpc::conns::DEFAULT_REQUEST_TIMEOUT_MS,
            idle_timeout_ms: ramstore_rpc::conns::DEFAULT_IDLE_TIMEOUT_MS,
            clock: system_clock(),
            rng: system_rng(),
        }
    }

    /// The backup store's configuration these options describe.
    pub fn backup_config(&self) -> BackupConfig {
        BackupConfig {
            frame_count: self.backup_frames,
            segment_bytes: FRAME_SEGMENT_BYTES,
            max_open_buffers: self.backup_open_buffers,
            sync_mode: self.backup_sync,
        }
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ramstore_master::ConfigError),
    #[error("--replicas {0} is too many: at most {MAX_REPLICAS}")]
    Replicas(usize),
    /// The failure monitor's timing makes no sense.
    #[error("bad failure monitor settings: {0}")]
    Monitor(String),
    #[error(transparent)]
    ColdStart(#[from] cold_start::ColdStartError),
    #[error("coordinator at {addr} refused enlistment: {reason}")]
    Enlist { addr: String, reason: String },
    #[error(
        "the backup file in {} has {file_frames} frames but {configured} are configured; \
         start with --backup-frames {file_frames} (or move the file away to start empty)",
        dir.display()
    )]
    BackupGeometry {
        dir: PathBuf,
        file_frames: u64,
        configured: u32,
    },
    /// The backup store could not be opened or created. (`error` is not a
    /// `#[source]`: the message already says it, and error chains would repeat it.)
    #[error("backup store in {}: {error}", dir.display())]
    Backup { dir: PathBuf, error: BackupError },
    /// The Redis protocol front end could not start (its client could not reach
    /// the coordinator).
    #[error("Redis protocol front end: {0}")]
    Resp(String),
}

/// How long the server keeps trying to enlist before giving up.
pub const ENLIST_TIMEOUT_MS: u64 = 60_000;

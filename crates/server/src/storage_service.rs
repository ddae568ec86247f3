//! The storage server's RPC service: wire requests in, object store calls, wire
//! responses out (R§3, R Fig. 2).
//!
//! Where each part lives (the parent module holds only the state and its
//! accessors; the children depend on it, never the other way round):
//!
//! * `request_path`: the one path every request takes, for both front ends —
//!   guards, the store call and the durability point it returns, the lease again
//!   for reads, metrics, the replication wait.
//! * `object_ops`: the object-store calls both front ends make, each returning
//!   the durability its answer needs, and how store errors map to wire statuses.
//! * `native`: the native front end ([`ramstore_rpc::Service`]): decodes each
//!   frame once and dispatches it through the request path; long work
//!   (enumeration, dropping a tablet, recovery, backup requests that may wait for
//!   the disk, pinging a suspect) on its slow path (`slow_path`); its answers are
//!   frames (`wire_reply`).
//! * `direct`: the Redis front end's direct path ([`ramstore_resp::backend::LocalObjects`]).
//! * `stats`: the `key=value` statistics (GetServerStats, Redis `INFO`).
//! * [`FullLog`]: whether the master is refusing writes for lack of memory.
//!
//! The fast path (read, write, remove, increment, multi-ops, ping) runs on the task
//! that read the request and does not allocate: requests are decoded in place,
//! values are copied once from the log straight into the connection's output buffer,
//! and responses are encoded into that buffer. Enumeration and dropping a tablet are
//! long work and run off the fast path (on the blocking pool), and so does every
//! backup request that may wait for the disk ([`crate::backup_service`]).
//!
//! A server started without a backup directory answers the backup opcodes with
//! INVALID_REQUEST ("no backup service"); it also enlists without the backup
//! service, so masters never pick it.
//!
//! Thread-safety: [`StorageService`] is `Send + Sync` and shared by every
//! connection of both front ends; its state is atomics and short-held locks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use ramstore_backup::BackupClient;
use ramstore_clock::{Clock, Rng};
use ramstore_master::ObjectStore;

use crate::backup_service::BackupService;
use crate::metrics::Metrics;
use crate::replica_manager::ReplicaManager;

/// The Redis front end's direct path onto this master (no native wire format).
mod direct;
mod exactly_once;
/// Key expiry for both front ends: store calls and native answers.
mod expiry_ops;
/// Zombie state, lease and pings: the service's side of membership.
mod membership;
/// Live tablet migration, as source and as target (K§2.3).
pub(crate) mod migration;
#[cfg(test)]
mod migration_held_tests;
/// Client requests parked until their key arrives (K§2.3).
mod migration_park;
#[cfg(test)]
mod migration_park_tests;
/// Completion records that move with a migration (RIFL §4.3).
mod migration_records;
/// The source's side of live migration: fence and pulls (K§2.3).
mod migration_source;
/// Exactly-once multi-operations, one RIFL rpc id per item.
mod multi_once;
/// The native front end: frames in, frames out.
mod native;
/// The object-store calls of both front ends.
mod object_ops;
/// The life of one request, for both front ends.
pub(crate) mod request_path;
/// The native front end's slow path: long work handed off by `native`.
mod slow_path;
/// The server's statistics as text.
mod stats;
/// Transactions' prepare and decision on this participant (SOSP'15 §6).
mod transactions;
/// How the native front end answers.
mod wire_reply;

pub use crate::full_log::{FullLog, DEFAULT_NO_SPACE_WAIT_MS, MAX_NO_SPACE_WAIT_MS};

const _: () = assert!(ramstore_wire::MAX_KEY_BYTES == ramstore_log::MAX_KEY_BYTES);
const _: () = assert!(ramstore_wire::MAX_VALUE_BYTES == ramstore_log::MAX_VALUE_BYTES);
// A whole segment travels in one backup frame, and both ends cut frames alike.
const _: () = assert!(ramstore_wire::MAX_REPLICA_BYTES == ramstore_log::SEGMENT_BYTES);
const _: () =
    assert!(ramstore_wire::MAX_REPLICA_BYTES == ramstore_backup::FRAME_SEGMENT_BYTES as usize);
const _: () = assert!(ramstore_wire::MAX_FRAME_BYTES == ramstore_rpc::MAX_FRAME_BYTES);

/// Largest batch an enumeration response carries; with whole hash buckets on top it
/// stays far below the frame limit.
pub const MAX_ENUMERATE_BATCH_BYTES: usize = 2 << 20;
/// A multi-read stops adding values past this many bytes and answers the rest RETRY,
/// so the response fits in one frame; the client asks again for those.
pub const MAX_MULTI_READ_RESPONSE_BYTES: usize = 6 << 20;

/// Deadline of one bucket fetch during recovery (a whole segment's bucket).
const RECOVERY_FETCH_DEADLINE_MS: u64 = 10_000;

/// One entry of the server list the coordinator pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownServer {
    pub server_id: u64,
    pub up: bool,
    pub address: String,
    /// The server runs a backup service (may be chosen for replicas).
    pub backup: bool,
    /// Its failure domain (empty: the server is its own domain); see
    /// [`crate::placement`].
    pub failure_domain: String,
    /// Its backup's disk read speed in MB/s as measured at its start-up (0: no
    /// backup).
    pub backup_read_mbps: u32,
}

/// The storage server's service. Thread-safe; shared by every connection.
pub struct StorageService {
    store: ObjectStore,
    /// The master's replica manager; `None`: R = 0, writes live in DRAM only.
    replicas: Option<Arc<ReplicaManager>>,
    backup: Option<BackupService>,
    server_id: AtomicU64,
    pub(crate) server_list: Mutex<(u64, Vec<KnownServer>)>,
    /// Zombie state and membership lease (R§7.11; [`crate::membership_guard`]).
    pub(crate) failure: crate::membership_guard::MembershipGuard,
    metrics: Metrics,
    /// Updates answered NO_SPACE, and whether the log is refusing writes now.
    full_log: FullLog,
    /// Connections over the server's limit, answered RETRY and closed.
    connections_refused: AtomicU64,
    /// The native port's connections, for their counters (set by the server).
    conns: Option<Arc<ramstore_rpc::ConnTable>>,
    /// Fetches crashed masters' entries from backups when this master recovers a
    /// partition (R§7.6).
    recovery_client: BackupClient,
    /// The store's clock: request timing, leases, the full-log record and every
    /// wait of this server (read once per request: one dynamic call, no lock).
    pub(crate) clock: Arc<dyn Clock>,
    /// Where this server's random choices (ping peers, nonces) come from.
    pub(crate) rng: Arc<dyn Rng>,
    /// Where slow-path requests and recovery replay run (the blocking pool;
    /// inline in a simulation).
    pub(crate) blocking: crate::blocking::Blocking,
    /// Migrations in and out of this master (K§2.3).
    pub(crate) migrations: migration::Migrations,
    /// Transactions' locks and prepared ops on this participant (SOSP'15 §6).
    pub(crate) tx: ramstore_master::Transactions,
}

impl StorageService {
    /// A master only: backup requests are refused.
    pub fn new(store: ObjectStore) -> Self {
        Self::with_backup(store, None)
    }

    /// A master, and a backup if `backup` is given. It runs on its store's clock
    /// (`StoreConfig::clock`) and draws on the system's random source until
    /// [`StorageService::with_rng`].
    pub fn with_backup(store: ObjectStore, backup: Option<BackupService>) -> Self {
        let clock = store.clock().clone();
        let transport = ramstore_rpc::TcpTransport::with_clock(clock.clone());
        Self {
            store,
            replicas: None,
            backup,
            server_id: AtomicU64::new(0),
            server_list: Mutex::new((0, Vec::new())),
            failure: crate::membership_guard::MembershipGuard::new(clock.now()),
            metrics: Metrics::default(),
            full_log: FullLog::new(
                std::time::Duration::from_millis(DEFAULT_NO_SPACE_WAIT_MS),
                clock.now(),
            ),
            connections_refused: AtomicU64::new(0),
            conns: None,
            recovery_client: BackupClient::new(Arc::new(transport))
                .with_rpc_deadline(std::time::Duration::from_millis(RECOVERY_FETCH_DEADLINE_MS)),
            clock,
            rng: ramstore_clock::system_rng(),
            blocking: crate::blocking::Blocking::Pool,
            migrations: migration::Migrations::default(),
            tx: ramstore_master::Transactions::new(),
        }
    }

    /// The same service running its blocking work (slow-path requests, recovery
    /// replay) as `blocking` says: inline in a simulation (docs/design.md §7).
    pub fn with_blocking(mut self, blocking: crate::blocking::Blocking) -> Self {
        self.blocking = blocking;
        self
    }

    /// The same service fetching recovery data from backups over `transport`
    /// (default: TCP on the service's clock).
    pub fn with_recovery_transport(mut self, transport: Arc<dyn ramstore_rpc::Transport>) -> Self {
        self.recovery_client = BackupClient::new(transport)
            .with_rpc_deadline(std::time::Duration::from_millis(RECOVERY_FETCH_DEADLINE_MS));
        self
    }

    /// The same service drawing its random choices from `rng`.
    pub fn with_rng(mut self, rng: Arc<dyn Rng>) -> Self {
        self.rng = rng;
        self
    }

    /// The clock this server runs on (its store's).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The same service with `replicas` replicating its store's log (the store
    /// must have been created with it as its replica sink).
    pub fn with_replicas(mut self, replicas: Arc<ReplicaManager>) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// The same service, with `patience` for a full log: how long a run of
    /// NO_SPACE answers may last before the Redis front end answers refused writes
    /// `-OOM` at once ([`FullLog`], `ramstore server --no-space-wait-ms`).
    pub fn with_no_space_wait(mut self, patience: std::time::Duration) -> Self {
        self.full_log = FullLog::new(patience, self.clock.now());
        self
    }

    /// The master's record of refused writes: whether it is refusing writes for
    /// lack of memory now, and since when.
    pub fn full_log(&self) -> &FullLog {
        &self.full_log
    }

    /// The same service reporting the counters of the connection table `conns`
    /// (evictions and timeouts) in its statistics.
    pub fn with_conns(mut self, conns: Arc<ramstore_rpc::ConnTable>) -> Self {
        self.conns = Some(conns);
        self
    }

    /// The replica manager, if the master replicates.
    pub fn replicas(&self) -> Option<&Arc<ReplicaManager>> {
        self.replicas.as_ref()
    }

    pub fn store(&self) -> &ObjectStore {
        &self.store
    }

    /// This master's transactions: its locks, prepared ops and held commits.
    pub fn transactions(&self) -> &ramstore_master::Transactions {
        &self.tx
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The backup service, if this server runs one.
    pub fn backup(&self) -> Option<&BackupService> {
        self.backup.as_ref()
    }

    /// The id the coordinator gave this server (0 before enlistment).
    pub fn server_id(&self) -> u64 {
        self.server_id.load(Ordering::SeqCst)
    }

    pub fn set_server_id(&self, id: u64) {
        self.server_id.store(id, Ordering::SeqCst);
    }

    /// The newest server list pushed by the coordinator.
    pub fn server_list(&self) -> (u64, Vec<KnownServer>) {
        self.server_list.lock().clone()
    }
}

impl AsRef<ObjectStore> for StorageService {
    fn as_ref(&self) -> &ObjectStore {
        &self.store
    }
}

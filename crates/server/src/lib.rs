//! The ramstore storage server: one master's object store and, with a backup
//! directory, a backup's replica store, behind the RPC transport (R§3–5, docs/design.md §2).
//!
//! A server binds its listener first, then enlists with the coordinator, then owns
//! whatever tablets the coordinator hands it (TakeTabletOwnership is idempotent) and
//! answers UNKNOWN_TABLET for every other key. Requests are served on the task that
//! read them; enumeration and tablet drops run off the fast path.
//!
//! The request path (`storage_service/request_path.rs`): every request, whether it
//! came as a native frame or from the Redis front end's direct path, goes through
//! one function, `StorageService::serve`: guards (fenced off, zombie, membership
//! lease) → the object-store call, which returns the durability point its answer
//! needs as a value → the lease again for reads → metrics → the replication wait.
//! Invariants: no object operation runs on a fenced-off, zombie or unleased
//! master; no answer shows a state not yet on all R backups (R§4.2); the read path
//! neither allocates nor locks while what it read is durable; each frame is decoded
//! once per side of the `Service` trait.
//!
//! Thread-safety: [`StorageService`] is `Send + Sync`, shared by every connection
//! of both front ends; its background parts (failure monitor, replica manager,
//! backup) run on their own tasks and threads.
//!
//! In-process servers ([`in_process`], docs/design.md §7): the same parts built over
//! a transport the caller gives, with no listener or files; blocking work (slow
//! path, recovery replay, bucketing, retention frees) goes through the [`Blocking`]
//! seam — tokio's blocking pool in production, inline in the deterministic
//! simulator (`crates/sim`), which runs no threads.
//!
//! The failure monitor ([`failure_monitor`]) pings a random other server every
//! 100 ms, reports failed pings to the coordinator, renews the membership lease, and
//! makes a server that learns it was declared crashed (a zombie, R§7.11) refuse
//! object operations and call its zombie hook (the `ramstore` binary exits). The
//! state the request path checks — zombie flag, lease — is the
//! [`membership_guard`]'s, below both the service and the monitor: imports between
//! this crate's files point one way (`scripts/check-module-cycles`).
//!
//! The backup ([`backup_service`]) keeps other masters' segment replicas in
//! `<backup_dir>/replicas.frames` and serves BackupWrite, BackupFree,
//! BackupGetReplicas and BackupReadReplica; requests that may wait for the disk run
//! off the fast path.
//!
//! Memory: GetServerStats, the metrics and Redis `INFO memory` report the process's
//! resident memory split into the log, the hash table and everything else
//! ([`resident`]).
//!
//! Time and randomness: [`ServerOptions::clock`] and [`ServerOptions::rng`]
//! (`ramstore_clock`; the system's in the `ramstore` binary) are the only sources.
//! The clock becomes the store's (`StoreConfig::clock`), and everything else takes
//! it from there or from the options: the service's request timing, leases and
//! full-log record ([`StorageService::clock`]), the replica manager, the failure
//! monitor, recovery, cold start, the connection limits, the transports and the
//! Redis front end. The request path reads the clock twice per request (a dynamic
//! call, no lock, no allocation); a write's replication deadline holds tokio's timer
//! inline.
//!
//! Durability: the master's writes live in this process's DRAM until the master
//! replicates to backups (the replica manager, issue 4); `GetServerStats` says
//! `durability=dram-only`. What the backup half makes durable, and when, is
//! `ramstore_backup`'s contract under the configured [`SyncMode`].

pub mod backup_recovery;
pub mod backup_service;
pub mod blocking;
pub mod client_lease_expiry;
pub mod cold_start;
pub mod failure_monitor;
pub mod full_log;
pub mod in_process;
pub mod key_expiry;
pub mod membership_guard;
pub mod metrics;
mod parts;
pub mod ping;
pub mod placement;
pub mod recovery_master;
pub mod replica_manager;
pub mod resident;
pub mod server_options;
pub mod storage_server;
pub mod storage_service;
pub mod tx_recovery;

pub use backup_service::{BackupService, FRAMES_FILE, MAX_FAST_BACKUP_WRITE_BYTES};
pub use blocking::Blocking;
pub use failure_monitor::{MonitorConfig, ZombieHook};
pub use in_process::{start_in_process, InProcessParts, InProcessServer};
pub use ramstore_backup::{SyncMode, DEFAULT_OPEN_BUFFERS, MAX_FRAME_COUNT, MAX_OPEN_BUFFERS};
pub use ramstore_rpc::conns::{
    DEFAULT_IDLE_TIMEOUT_MS, DEFAULT_REQUEST_TIMEOUT_MS,
    MAX_TIMEOUT_MS as MAX_CONNECTION_TIMEOUT_MS,
};
pub use ramstore_rpc::DEFAULT_MAX_CONNECTIONS;
pub use replica_manager::{ReplicaManager, DEFAULT_REPLICAS, MAX_REPLICAS};
pub use storage_server::{start, ServerError, ServerOptions, StartedServer, DEFAULT_BACKUP_FRAMES};
pub use storage_service::{StorageService, DEFAULT_NO_SPACE_WAIT_MS, MAX_NO_SPACE_WAIT_MS};

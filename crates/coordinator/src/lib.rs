//! The state of ramstore's coordinator and its persistence: the server list, the
//! tables and their tablets (R§3), and the external storage they are written to before
//! any change is acted on (R§9). No networking: the RPC layer calls
//! [`CoordinatorCore`] and carries out the [`Action`]s it returns.
//!
//! Invariants:
//! - Server ids and table ids start at 1 and are never reused, also across drops,
//!   removals and coordinator restarts (the next ids are part of the persisted state).
//!   A server id is a stable index and an incarnation (`ramstore_wire::server_id`).
//! - A server's status only moves forward (Up → Crashed → Removed); a restarted
//!   server enlists under a new id (R§7.3): the next incarnation of its index if it
//!   names its index's newest incarnation, else a new index.
//! - Every table's tablets are contiguous, disjoint and cover `[0, u64::MAX]`; every
//!   tablet's owner is in the server list.
//! - `server_list_version` / `tablet_map_version` grow by one on every operation that
//!   changes the server list / any tablet, and never otherwise.
//! - A tablet migration (K§2.3, `migration`) is recorded before any master hears of
//!   it and its tablet changes owner in the same document write that records it
//!   `Pulling`; a range has at most one migration in progress, and a migrating
//!   tablet is neither split nor recovered from its target's log alone: lineage
//!   recovery (K§2.3.4, `migration_recovery`) replays a crashed target's log onto
//!   the source's fenced copy (roll back), or a crashed source's log onto another
//!   master that becomes the source.
//!
//! Durability contract (R§9, "write to external storage before acting"): every
//! mutating operation first writes the whole new state (one JSON document under the
//! key `state`, with a growing sequence number) to [`ExternalStorage`], and only when
//! that write has returned does it change the in-memory state and return its actions.
//! A failed write returns the error and changes nothing. A coordinator that restarts
//! finds every change whose actions it might have handed out, and reissues them with
//! [`CoordinatorCore::reissue_actions`]; all actions are idempotent at their receivers.
//! [`FileStorage`] makes a write durable with write-temp/fsync/rename/fsync-directory
//! and refuses a second coordinator on the same directory. [`EtcdStorage`] makes it
//! durable in etcd (replicated by Raft before etcd answers); there several
//! coordinators share the store, and only the one holding the leader lease
//! ([`election`]) may write: its puts and deletes are etcd transactions conditional on
//! the leader key it created (fencing), so a deposed leader's write fails with
//! [`StorageError::NotLeader`] and never lands, and the new leader, which reads the
//! state only after winning, sees every write its predecessor had acknowledged. An
//! etcd call that times out ([`etcd_storage::ETCD_OP_TIMEOUT_MS`]) fails with
//! [`StorageError::Backend`]; as for every failed write, the change is not applied,
//! though etcd may or may not hold it (the next state document replaces it whole).
//!
//! The RPC service ([`CoordinatorService`], `service.rs`) is a dispatcher over
//! parts that each own their state, in files named for them: the shared core and
//! transport (`cluster`), notifications and their retries (`notifier`), table and
//! membership changes (`changes`), zombie answers and leases (`membership`),
//! failure confirmation (`suspicion_driver`, deciding with `suspicion`) and crash
//! recovery (`recovery`, finding the log in `recovery_log`), live migration
//! (`migration`, cancelling in `migration_cancel`, masters' statistics in
//! `master_stats`) and the pure rebalancing planner (`rebalance`). Imports point from
//! the dispatcher to the parts, never back, and no files import each other in a
//! circle (`scripts/check-module-cycles`; docs/architecture.md, "Owned parts").
//!
//! Limitation until replication and crash recovery exist: a tablet moved off a
//! removed or replaced server starts empty on its new owner, because its objects were
//! only in the old process's DRAM.
//!
//! Time and randomness: every timer, deadline, lease and ping interval runs on
//! [`CoordinatorOptions::clock`] and every random choice (confirmation helpers,
//! nonces, recovery ids and partitions, fetch order) draws on
//! [`CoordinatorOptions::rng`] (`ramstore_clock`; the system's in the binary),
//! handed to [`CoordinatorService::new`] and [`EtcdStorage::connect_with_clock`].
//! Nothing here reads real time or a global generator, so the failure detector runs
//! unchanged on a manual clock (`tests/manual_clock.rs`).
//!
//! Thread-safety: [`CoordinatorCore`] is `Send + Sync` but not internally
//! synchronised; callers keep it behind one `Mutex` and hold it across each operation,
//! so storage writes happen in the order changes are applied. Storage implementations
//! are `Send + Sync`. Their calls are synchronous and may block the calling thread
//! (an fsync; an etcd round trip, bounded by its timeout), also when it is an async
//! worker. [`EtcdStorage`] never needs the caller's runtime: its etcd client lives on
//! a dedicated thread with its own current-thread runtime, reached over a channel,
//! which also renews the leader lease, so a busy or blocked coordinator runtime cannot
//! starve the lease, and a call from any runtime flavour cannot deadlock.

pub mod changes;
pub mod client_leases;
pub mod cluster;
pub mod coordinator;
pub mod election;
pub mod error;
pub mod etcd_storage;
pub mod failure_detector;
pub mod file_storage;
pub mod lease;
pub mod master_stats;
pub mod membership;
pub mod migration;
pub mod migration_cancel;
pub mod migration_orphans;
pub mod migration_recovery;
pub mod migration_unmoved;
pub mod migrations;
pub mod notifier;
pub mod partition;
pub mod process;
pub mod rebalance;
pub mod recovery;
pub mod recovery_log;
mod recovery_near;
pub mod server_list;
pub mod service;
pub mod state;
pub mod stats;
pub mod storage;
pub mod suspicion;
pub mod suspicion_driver;
pub mod tables;

pub use coordinator::{Action, CoordinatorCore};
pub use election::{
    campaign, validate_lease_ttl_ms, ElectionError, Leadership, LostCallback, DEFAULT_LEASE_TTL_MS,
    MAX_LEASE_TTL_MS, MIN_LEASE_TTL_MS,
};
pub use error::CoordinatorError;
pub use etcd_storage::{EtcdSpec, EtcdStorage};
pub use failure_detector::{
    FailureDetector, FailureDetectorConfig, DEFAULT_FAILURE_TIMEOUT_MS, DEFAULT_PING_INTERVAL_MS,
    DEFAULT_PING_TIMEOUT_MS, DEFAULT_UNRESPONSIVE_TIMEOUT_MS,
};
pub use file_storage::FileStorage;
pub use process::{
    exit_on_lost_leadership, start, start_with, start_with_options, CoordinatorOptions, StartError,
    StartedCoordinator, StoreSpec, EXIT_LEADERSHIP_LOST,
};
pub use server_list::{
    valid_failure_domain, ServerEntry, ServerId, ServerList, ServerStatus, MAX_ADDRESS_BYTES,
    MAX_FAILURE_DOMAIN_BYTES, SERVICE_BACKUP, SERVICE_MASTER,
};
pub use service::CoordinatorService;
pub use state::{CoordinatorState, STATE_KEY};
pub use storage::{ExternalStorage, MemoryStorage, StorageError, MAX_KEY_BYTES};
pub use tables::{
    split_hash_space, Table, Tables, TabletEntry, MAX_SERVER_SPAN, MAX_TABLE_NAME_BYTES,
};

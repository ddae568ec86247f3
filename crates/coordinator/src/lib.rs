//! The state of ramstore's coordinator and its persistence: the server list, the
//! tables and their tablets (R§3), and the external storage they are written to before
//! any change is acted on (R§9). No networking: the RPC layer calls
//! [`CoordinatorCore`] and carries out the [`Action`]s it returns.
//!
//! Invariants:
//! - Server ids and table ids start at 1 and are never reused, also across drops,
//!   removals and coordinator restarts (the next ids are part of the persisted state).
//! - A server's status only moves forward (Up → Crashed → Removed); a restarted
//!   server enlists under a new id (R§7.3).
//! - Every table's tablets are contiguous, disjoint and cover `[0, u64::MAX]`; every
//!   tablet's owner is in the server list.
//! - `server_list_version` / `tablet_map_version` grow by one on every operation that
//!   changes the server list / any tablet, and never otherwise.
//!
//! Durability contract (R§9, "write to external storage before acting"): every
//! mutating operation first writes the whole new state (one JSON document under the
//! key `state`, with a growing sequence number) to [`ExternalStorage`], and only when
//! that write has returned does it change the in-memory state and return its actions.
//! A failed write returns the error and changes nothing. A coordinator that restarts
//! finds every change whose actions it might have handed out, and reissues them with
//! [`CoordinatorCore::reissue_actions`]; all actions are idempotent at their receivers.
//! [`FileStorage`] makes a write durable with write-temp/fsync/rename/fsync-directory
//! and refuses a second coordinator on the same directory.
//!
//! Limitation until replication and crash recovery exist: a tablet moved off a
//! removed or replaced server starts empty on its new owner, because its objects were
//! only in the old process's DRAM.
//!
//! Thread-safety: [`CoordinatorCore`] is `Send + Sync` but not internally
//! synchronised; callers keep it behind one `Mutex` and hold it across each operation,
//! so storage writes happen in the order changes are applied. Storage implementations
//! are `Send + Sync`.

pub mod coordinator;
pub mod error;
pub mod failure_detector;
pub mod file_storage;
pub mod process;
pub mod server_list;
pub mod service;
pub mod state;
pub mod storage;
pub mod tables;

pub use coordinator::{Action, CoordinatorCore};
pub use error::CoordinatorError;
pub use failure_detector::{
    FailureDetector, FailureDetectorConfig, DEFAULT_FAILURE_TIMEOUT_MS, DEFAULT_PING_INTERVAL_MS,
};
pub use file_storage::FileStorage;
pub use process::{start, start_with, StartError, StartedCoordinator, StoreSpec};
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

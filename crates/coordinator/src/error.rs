//! Errors of the coordinator's operations. Every error leaves the coordinator's state
//! exactly as it was (an operation either persists and applies all of its change or
//! none of it).

use crate::server_list::{ServerId, MAX_ADDRESS_BYTES, MAX_FAILURE_DOMAIN_BYTES};
use crate::storage::StorageError;
use crate::tables::MAX_SERVER_SPAN;

/// Why a coordinator operation (or opening the coordinator) did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoordinatorError {
    /// No table has that name.
    #[error("table {0:?} doesn't exist")]
    TableDoesntExist(String),
    /// The table name is empty or too long.
    #[error("bad table name: {0}")]
    BadName(&'static str),
    /// The server address is empty or longer than [`MAX_ADDRESS_BYTES`].
    #[error("bad server address {address:?}: must be 1 to {MAX_ADDRESS_BYTES} bytes")]
    BadAddress { address: String },
    /// The failure domain is longer than [`MAX_FAILURE_DOMAIN_BYTES`] or holds
    /// whitespace or control characters.
    #[error(
        "bad failure domain {domain:?}: at most {MAX_FAILURE_DOMAIN_BYTES} bytes, \
         no spaces or control characters"
    )]
    BadFailureDomain { domain: String },
    /// More tablets were asked for than [`MAX_SERVER_SPAN`].
    #[error("server span {0} is larger than the limit of {MAX_SERVER_SPAN}")]
    BadServerSpan(u32),
    /// No master is UP to take the new table's tablets; retry after one enlists.
    #[error("no master server is up; retry later")]
    NoMasters,
    /// No server ever had that id.
    #[error("unknown {0}")]
    UnknownServer(ServerId),
    /// Every server index (or every incarnation of one) has been used.
    #[error("no server id is left to give")]
    ServerIdsExhausted,
    /// A recovered range is held by a server other than the crashed one and its
    /// recovery master (a bug or a concurrent change; nothing was applied).
    #[error("recovery conflict: table {table_id}'s tablet at {start_hash:#x} is held by {owner}")]
    RecoveryConflict {
        table_id: u64,
        start_hash: u64,
        owner: ServerId,
    },
    /// The tablet is being migrated (K§2.3): it cannot be split or migrated
    /// again until migration `0` is done.
    #[error("migration {0} of that range is in progress")]
    MigrationInProgress(u64),
    /// The range given is not exactly one tablet of the table.
    #[error("[{start_hash:#x}, {end_hash:#x}] is not exactly one tablet of table {table:?}; split it first (`ramstore split`)")]
    NotOneTablet {
        table: String,
        start_hash: u64,
        end_hash: u64,
    },
    /// The migration target cannot take the tablet.
    #[error("cannot migrate to {target}: {reason}")]
    BadMigrationTarget {
        target: ServerId,
        reason: &'static str,
    },
    /// Lineage recovery (K§2.3.4) found migration `0` no longer as it planned
    /// for (finished, or its source or target changed): nothing was applied.
    #[error("migration {0} changed during its lineage recovery")]
    LineageChanged(u64),
    /// The source master refused to give up the tablet (nothing changed).
    #[error("the source master refused the migration: {0}")]
    MigrationRefused(String),
    /// The migration target has too little free memory for the range (K§2.3;
    /// refused up front, nothing changed).
    #[error(
        "cannot migrate to {target}: the range holds {needed} bytes but the server can take \
         only {room} more (it must stay below {limit_pct}% of its memory)"
    )]
    TargetLacksMemory {
        target: ServerId,
        needed: u64,
        room: u64,
        limit_pct: u32,
    },
    /// No migration with that id is in progress (never started, or finished).
    #[error("no migration {0} is in progress (unknown id, or it has finished)")]
    NoSuchMigration(u64),
    /// The migration cannot be cancelled (it is the return of a cancelled one).
    #[error("migration {id} cannot be cancelled: {reason}")]
    CannotCancel { id: u64, reason: &'static str },
    /// A MigrationDone from a target declared crashed: lineage recovery rolls
    /// the migration back (K§2.3.4), so it is not recorded done; the answer
    /// is an error so that the target keeps what a roll-back needs.
    #[error("migration {0}'s target is no longer up; the migration is rolled back")]
    MigrationTargetCrashed(u64),
    /// A master did not answer a question the operation needs answered.
    #[error("server {0} did not answer; retry")]
    ServerDidNotAnswer(ServerId),
    /// External storage failed (the change was not applied), or the stored state could
    /// not be read back (at start-up).
    #[error("external storage: {0}")]
    Storage(#[from] StorageError),
    /// A client lease that expired or was never issued (RIFL §4.2).
    #[error("unknown client lease {0}")]
    UnknownLease(u64),
}

impl CoordinatorError {
    /// Whether the same request may succeed later without changes by the caller.
    pub fn is_retryable(&self) -> bool {
        matches!(self, CoordinatorError::NoMasters)
    }
}

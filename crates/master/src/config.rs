//! Configuration of one master's object store.

use std::sync::Arc;

use ramstore_clock::{system_clock, Clock};
use ramstore_log::{NoReplicas, ReplicaSink, SEGMENT_BYTES};

/// How the cleaner runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanerMode {
    /// On its own threads, concurrently with reads and writes (L§6). The default.
    Background { threads: usize },
    /// Only when [`crate::ObjectStore::clean_now`] is called (deterministic tests).
    Manual,
}

/// Configuration of an [`crate::ObjectStore`].
#[derive(Clone)]
pub struct StoreConfig {
    /// This master's id (written in segment headers).
    pub master_id: u64,
    /// Bytes of log memory, allocated at start-up.
    pub memory_bytes: usize,
    /// Bytes in a full segment (default 8 MiB).
    pub segment_bytes: usize,
    /// Hash table buckets (8 entries each); default: one per
    /// [`DEFAULT_MEMORY_BYTES_PER_BUCKET`] bytes of memory.
    pub hash_table_buckets: Option<usize>,
    /// Two-level cleaning when true; combined cleaning only when false.
    pub compaction: bool,
    /// On-disk log limit as a multiple of memory (L§5.2); default 2.
    pub disk_expansion_factor: f64,
    /// Share of memory only deletes may use (default 0.2%,
    /// `ramstore_log::DEFAULT_DELETE_RESERVE_FRACTION`; at least 2 seglets, at most
    /// 2 MiB: `ramstore_log::MAX_DELETE_RESERVE_BYTES`).
    pub delete_reserve_fraction: f64,
    /// Share of freeable memory live tombstones may take before combined cleaning is
    /// forced (L§5.2; default 0.4).
    pub tombstone_share_for_combined: f64,
    /// Most segments' worth of memory the cleaner keeps free ahead of writers
    /// (default 2, and never more than 1/64 of memory:
    /// `ramstore_log::balancer::CLEAN_AHEAD_MAX_MEMORY_SHARE`; 0 = L§5.2's rule
    /// alone).
    pub clean_ahead_segments: usize,
    pub cleaner: CleanerMode,
    /// Where appended bytes are reported for replication.
    pub replicas: Arc<dyn ReplicaSink>,
    /// The clock the cleaner threads pace themselves by, and the log's waits run
    /// on (default: the system clock).
    pub clock: Arc<dyn Clock>,
    /// Expired client lease ids each of the 16 shards of the completion-record
    /// table remembers before its floor rises (`crate::rifl::expired`).
    pub expired_leases_per_shard: usize,
    /// Most deadlines the active expirer's index holds (8 bytes each; default
    /// one per 256 bytes of memory, so at most 1/32 of it); beyond it the
    /// expirer falls back on sampled sweeps (`crate::deadlines`).
    pub max_deadline_notes: usize,
}

impl StoreConfig {
    /// Defaults for everything but the memory size.
    pub fn new(memory_bytes: usize) -> Self {
        Self {
            master_id: 0,
            memory_bytes,
            segment_bytes: SEGMENT_BYTES,
            hash_table_buckets: None,
            compaction: true,
            disk_expansion_factor: 2.0,
            delete_reserve_fraction: ramstore_log::DEFAULT_DELETE_RESERVE_FRACTION,
            tombstone_share_for_combined: ramstore_log::balancer::TOMBSTONE_SHARE_FOR_COMBINED,
            clean_ahead_segments: ramstore_log::balancer::CLEAN_AHEAD_SEGMENTS,
            cleaner: CleanerMode::Background { threads: 1 },
            replicas: Arc::new(NoReplicas),
            clock: system_clock(),
            expired_leases_per_shard: crate::rifl::DEFAULT_EXPIRED_PER_SHARD,
            max_deadline_notes: memory_bytes / DEFAULT_MEMORY_BYTES_PER_DEADLINE,
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("master_id", &self.master_id)
            .field("memory_bytes", &self.memory_bytes)
            .field("segment_bytes", &self.segment_bytes)
            .field("hash_table_buckets", &self.hash_table_buckets)
            .field("compaction", &self.compaction)
            .field("disk_expansion_factor", &self.disk_expansion_factor)
            .field("delete_reserve_fraction", &self.delete_reserve_fraction)
            .field(
                "tombstone_share_for_combined",
                &self.tombstone_share_for_combined,
            )
            .field("clean_ahead_segments", &self.clean_ahead_segments)
            .field("cleaner", &self.cleaner)
            .field("max_deadline_notes", &self.max_deadline_notes)
            .finish_non_exhaustive()
    }
}

/// Errors in configuration or tablet assignment.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error(transparent)]
    Log(#[from] ramstore_log::LogConfigError),
    #[error("tablet {table_id}:[{start_hash:#x}, {end_hash:#x}] is empty or overlaps another tablet of the table")]
    BadTablet {
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    },
    /// A new tenure of a tablet needs a fresh head segment (design notes
    /// "Tablet ctime"), and not even the emergency reserve could give one.
    #[error("no log memory for a new head segment to start a tablet's tenure; retry later")]
    NoSpaceForTenure,
    /// A migration's source holds objects of the range prepared by a
    /// transaction still waiting for its decision; retry later.
    #[error("a transaction holds objects of the range prepared; retry the migration later")]
    TransactionsInFlight,
}

/// Log memory per hash-table bucket by default: 640 bytes. A full log of
/// 100-byte objects (about 140 bytes each in the log, L Table 1's W1) fills the
/// eight slots of a bucket 4.6 deep on average, so few chains overflow (with
/// Poisson-distributed hashes about 4% of buckets, and fewer of the lookups,
/// pay a second cache miss, R§4.1), while the table costs 10% of the log's
/// memory rather than 12.5% at one bucket per 512 bytes — what let a server stay
/// within 1.5 × its live data in issue 17's memory benchmark.
pub const DEFAULT_MEMORY_BYTES_PER_BUCKET: usize = 640;

/// Default bytes of memory per deadline the expirer's index may hold (8 bytes
/// a note: at most 1/32 of memory; the smallest object with an expiry takes
/// about 40 bytes of log, so the bound is reached only when most of the log
/// is such objects, and then sampling covers the rest).
pub const DEFAULT_MEMORY_BYTES_PER_DEADLINE: usize = 256;

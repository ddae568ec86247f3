//! Log-structured memory for one ramstore master (papers L§3–7, R§4).
//!
//! All object data of a master lives in one append-only log carved from a single
//! allocation made at start-up (the *seglet pool*). The log is a sequence of
//! *segments*; each segment is a chain of 64 KiB *seglets*, so compaction can make a
//! segment shorter in memory without fragmenting the pool (L§5.1). Log entries are
//! self-describing and checksummed (`entry`), so a log can be parsed back from raw
//! bytes after a crash.
//!
//! Parts: [`Log`] (`log` and its children: head, reads, accounting, replica
//! reads, segment scans, side logs) owns the memory and the segment table;
//! [`SideLog`] (`log::side`) holds segments a bulk writer (a migration's target,
//! K§2.3) fills apart from the head and commits to the log all at once; [`Cleaner`]
//! (`cleaner`) is the two-level cleaner (L§4), a separate type that borrows a `Log`
//! and works through its `pub(crate)` interface, in plan / copy / commit steps;
//! `balancer` decides which level runs (L§5.2); `entry` is the on-log format;
//! `pool`, `segment`, `epoch`, `tombstones` and `upfront` are the leaves both use.
//! The log never imports the cleaner (`scripts/check-module-cycles`).
//!
//! Invariants:
//! - A [`LogRef`] names the first byte of an entry as a 48-bit offset into the pool.
//!   Seglet 0 is never handed out, so `LogRef(0)` never names an entry.
//! - Only the head segment, side-log segments not yet handed to the replica sink
//!   and the cleaner's private survivor segments are ever written; every other
//!   segment is immutable until it is freed.
//! - No digest names a side-log segment before [`Log::commit_side_logs`] has
//!   seen it closed on all its replicas.
//! - Seglets of a cleaned segment are reused only after every operation that was in
//!   progress when the segment left the log has finished (`epoch`, L§6.3).
//!
//! Thread-safety: all types here are `Send + Sync`. Readers never take a lock; the
//! head is appended to under one mutex; the cleaner runs concurrently on its own
//! threads (any number of [`Cleaner`]s over one log; combined passes take turns).
//!
//! Time: the log reads no time itself; its one wait (a replica copy that finds a
//! segment half-compacted backs off 100 µs) runs on [`LogConfig::clock`].
//!
//! Durability: none by itself. Every byte appended to the head and every survivor
//! segment produced by combined cleaning or filled by a side log is reported
//! through the
//! [`replica::ReplicaSink`] seam; the durability layer makes it durable.

pub mod balancer;
pub mod cleaner;
pub mod entry;
pub mod epoch;
#[allow(clippy::module_inception)]
pub mod log;
pub mod pool;
pub mod replica;
pub mod segment;
mod tombstones;
mod upfront;
pub mod varint;

pub use balancer::CleanKind;
pub use cleaner::{thread_cpu_ns, Cleaner, PassOutcome, Relocator};
pub use log::config::{
    HeadMetadata, LogConfig, LogConfigError, NoMetadata, DEFAULT_DELETE_RESERVE_FRACTION,
    MAX_DELETE_RESERVE_BYTES,
};
pub use log::head::{AppendError, Appended, DeadObject, NewObject};
pub use log::holds::{TombstoneHold, HOLD_ID_BIT};
pub use log::memory::LogStats;
pub use log::read::ObjectView;
pub use log::side::SideLog;
pub use log::Log;
pub use replica::{NoReplicas, ReplicaSink, SegmentRole};

/// Bytes in one seglet, the unit of log memory allocation (L§5.1).
pub const SEGLET_BYTES: usize = 64 * 1024;
/// Bytes in a full segment, the unit of replication and of cleaning on disk.
pub const SEGMENT_BYTES: usize = 8 * 1024 * 1024;
/// Seglets in a full segment.
pub const SEGLETS_PER_SEGMENT: usize = SEGMENT_BYTES / SEGLET_BYTES;
/// Longest key accepted, in bytes (docs/design.md §4).
pub const MAX_KEY_BYTES: usize = 64 * 1024 - 1;
/// Longest value accepted, in bytes (docs/design.md §4).
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Largest pool offset a [`LogRef`] can name (48 bits, docs/design.md §4).
pub const MAX_LOG_REF: u64 = (1 << 48) - 1;

const _: () = assert!(SEGMENT_BYTES.is_multiple_of(SEGLET_BYTES));
// The largest object entry (header + key + value + checksum) must fit in one segment,
// with room for the segment header and a tombstone written beside it.
const _: () = assert!(MAX_KEY_BYTES + MAX_VALUE_BYTES + 1024 < SEGMENT_BYTES / 2);

/// A reference to the first byte of a log entry: a 48-bit offset into the seglet pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogRef(pub u64);

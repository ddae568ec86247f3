//! How a log is configured: its sizes, its cleaner's knobs and the seams it reports
//! to (replicas, head metadata, clock), and the errors of a bad configuration.

use std::sync::Arc;

use ramstore_clock::Clock;

use crate::entry::TabletStat;
use crate::pool::PoolError;
use crate::replica::ReplicaSink;
use crate::{SEGLET_BYTES, SEGMENT_BYTES};

/// Facts the log writes at the start of every head segment besides the digest.
pub trait HeadMetadata: Send + Sync {
    /// The master's safe version: higher than any version it ever gave out for an
    /// object that no longer exists (R§3.1). Written into every head so versions stay
    /// monotonic across crashes even after tombstones are cleaned.
    fn safe_version(&self) -> u64;
    /// Per-tablet statistics (recovery partitions by them, R§7.5).
    fn tablet_stats(&self, out: &mut Vec<TabletStat>);
}

/// Head metadata for a log without tablets (tests, benchmarks of the log alone).
#[derive(Debug, Default)]
pub struct NoMetadata;

impl HeadMetadata for NoMetadata {
    fn safe_version(&self) -> u64 {
        0
    }
    fn tablet_stats(&self, _out: &mut Vec<TabletStat>) {}
}

/// The most memory kept for deletes only. The reserve lets deletes go on while the
/// cleaner turns the objects they kill into free seglets — one compaction pass,
/// milliseconds — and 2 MiB holds over 40,000 tombstones of short keys. More is
/// memory that holds no data: at 90% utilisation 1% of memory held back raises the
/// cleaner's copying by a tenth (measured: 1% of 1 GiB against 2 MiB, 414 k against
/// 461–523 k writes/s, docs/benchmarks.md, session 9).
pub const MAX_DELETE_RESERVE_BYTES: usize = 2 << 20;

/// Share of the pool kept for deletes by default: 0.2%, which reaches the 2 MiB
/// cap ([`MAX_DELETE_RESERVE_BYTES`]) at 1 GiB, so large logs keep what they
/// kept. It was 1%, which gave a 128 MiB log 1.3 MiB (20 seglets) of reserve, 1%
/// of its memory held from the dead objects compaction lives on where 1 GiB
/// holds 0.2%: at 90% utilisation that alone raised the bytes the cleaner copies
/// per byte written by a sixth (docs/benchmarks.md, issue 17 session 28). 256 KiB
/// at 128 MiB still holds about 7,000 tombstones of short keys, many compaction
/// passes' worth.
pub const DEFAULT_DELETE_RESERVE_FRACTION: f64 = 0.002;

/// Configuration of one log.
#[derive(Clone)]
pub struct LogConfig {
    /// Bytes of log memory (the seglet pool), allocated once at start-up.
    pub memory_bytes: usize,
    /// Bytes in a full segment; a multiple of the seglet size. Entries larger than a
    /// segment minus its metadata are refused as too large.
    pub segment_bytes: usize,
    /// The master that owns this log (written in every segment header).
    pub master_id: u64,
    /// The on-disk log may grow to this multiple of the memory size before combined
    /// cleaning is forced (L§5.2).
    pub disk_expansion_factor: f64,
    /// Two-level cleaning (compaction + combined) when true; combined only when false.
    pub compaction: bool,
    /// Fraction of the pool kept for tombstones only, so deletes succeed when writes
    /// no longer do (L§7); at most [`MAX_DELETE_RESERVE_BYTES`].
    pub delete_reserve_fraction: f64,
    /// Combined cleaning is forced once live tombstones take this share of the
    /// freeable memory (L§5.2: 0.4 there, chosen empirically).
    pub tombstone_share_for_combined: f64,
    /// The cleaner keeps at most this many segments' worth of memory free ahead of
    /// writers, and at most `balancer::CLEAN_AHEAD_MAX_MEMORY_SHARE` of memory (0:
    /// no cap, L§5.2's rule alone). See `balancer::choose`.
    pub clean_ahead_segments: usize,
    /// Where bytes to replicate are reported.
    pub replicas: Arc<dyn ReplicaSink>,
    /// Where head metadata comes from.
    pub metadata: Arc<dyn HeadMetadata>,
    /// The clock the log's waits run on (the system clock by default).
    pub clock: Arc<dyn Clock>,
}

impl LogConfig {
    /// A configuration with defaults for everything but the memory size.
    pub fn new(memory_bytes: usize) -> Self {
        Self {
            memory_bytes,
            segment_bytes: SEGMENT_BYTES,
            master_id: 0,
            disk_expansion_factor: 2.0,
            compaction: true,
            delete_reserve_fraction: DEFAULT_DELETE_RESERVE_FRACTION,
            tombstone_share_for_combined: crate::balancer::TOMBSTONE_SHARE_FOR_COMBINED,
            clean_ahead_segments: crate::balancer::CLEAN_AHEAD_SEGMENTS,
            replicas: Arc::new(crate::replica::NoReplicas),
            metadata: Arc::new(NoMetadata),
            clock: ramstore_clock::system_clock(),
        }
    }
}

impl std::fmt::Debug for LogConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogConfig")
            .field("memory_bytes", &self.memory_bytes)
            .field("segment_bytes", &self.segment_bytes)
            .field("master_id", &self.master_id)
            .field("disk_expansion_factor", &self.disk_expansion_factor)
            .field("compaction", &self.compaction)
            .field("delete_reserve_fraction", &self.delete_reserve_fraction)
            .field(
                "tombstone_share_for_combined",
                &self.tombstone_share_for_combined,
            )
            .field("clean_ahead_segments", &self.clean_ahead_segments)
            .finish_non_exhaustive()
    }
}

/// Errors creating a log.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LogConfigError {
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(
        "segment size {0} must be a multiple of {SEGLET_BYTES} and between 2 seglets and 256 MiB"
    )]
    BadSegmentSize(usize),
    #[error("disk expansion factor {0} must be at least 1")]
    BadExpansionFactor(f64),
    #[error("delete reserve fraction {0} must be between 0 and 0.5")]
    BadDeleteReserve(f64),
    #[error("tombstone share for combined cleaning {0} must be between 0 and 1")]
    BadTombstoneShare(f64),
}

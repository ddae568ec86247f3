//! Errors of backup store operations.

use std::io;

use crate::config::ConfigError;

/// Why a [`crate::BackupStore`] operation failed. Every variant leaves the store
/// consistent and usable: an operation that fails has either not happened or can be
/// repeated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// Every open-replica buffer is in use; the master should place this replica on
    /// another backup (R§7.1: "the backup can reject the request if it is
    /// overloaded").
    #[error("all {limit} open-replica buffers are in use")]
    BuffersFull { limit: u32 },
    /// Every frame of the file holds a replica.
    #[error("all {frames} frames hold replicas")]
    FramesFull { frames: u32 },
    /// No replica of this segment is held here.
    #[error("no replica of master {master_id} segment {segment_id}")]
    UnknownReplica { master_id: u64, segment_id: u64 },
    /// The replica is closed, so it is read-only (and cannot be opened again).
    #[error("replica of master {master_id} segment {segment_id} is closed")]
    Closed { master_id: u64, segment_id: u64 },
    /// `open` named a replica that is already open in the other mode.
    #[error(
        "replica of master {master_id} segment {segment_id} is already open with atomic={atomic}"
    )]
    AtomicMismatch {
        master_id: u64,
        segment_id: u64,
        atomic: bool,
    },
    /// A write started after the end of the replica's bytes: replicas are written
    /// contiguously, so bytes in between were lost on the way.
    #[error("write at offset {offset} leaves a gap after the replica's {length} bytes")]
    Gap { offset: u32, length: u32 },
    /// A write ends beyond the frame's segment area.
    #[error("write of {bytes} bytes at offset {offset} ends past the {segment_bytes}-byte frame")]
    PastFrameEnd {
        offset: u32,
        bytes: usize,
        segment_bytes: u32,
    },
    /// The replica was written in atomic mode and is not closed, so its bytes are not
    /// a valid replica yet (R§8) and are never offered.
    #[error("atomic replica of master {master_id} segment {segment_id} is not closed")]
    NotClosed { master_id: u64, segment_id: u64 },
    /// The replica's bytes on disk do not match the checksum recorded when they were
    /// written.
    #[error(
        "replica of master {master_id} segment {segment_id} is corrupt: \
         checksum {computed:#010x}, expected {expected:#010x}"
    )]
    Corrupt {
        master_id: u64,
        segment_id: u64,
        expected: u32,
        computed: u32,
    },
    /// The disk failed; `op` names what the store was doing.
    #[error("disk I/O failed while {op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// The configuration is outside the limits.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The disk's size is not the size the configuration describes, so the file was
    /// made with another geometry.
    #[error("disk holds {actual} bytes but the configuration describes {expected}")]
    FileSize { expected: u64, actual: u64 },
    /// A valid metadata block records another segment size than the configuration:
    /// the file was formatted with another geometry.
    #[error("frame {frame} was written with segment_bytes {found}, configured {configured}")]
    LayoutMismatch {
        frame: u32,
        found: u32,
        configured: u32,
    },
    /// The disk holds more open replicas than `max_open_buffers` can buffer.
    #[error("the disk holds {found} open replicas but only {limit} buffers are configured")]
    TooManyOpenReplicas { found: usize, limit: u32 },
}

impl BackupError {
    /// True for the errors that mean "this backup has no room now" (they map to
    /// a retry-elsewhere answer for the master, R§7.1): no free buffer or frame,
    /// or a disk out of space (ENOSPC: a thin-provisioned or shared device
    /// filling up). A full disk is not a broken one: answering it as a failure
    /// made masters treat the backup as failed and count on it no less.
    pub fn is_full(&self) -> bool {
        match self {
            Self::BuffersFull { .. } | Self::FramesFull { .. } => true,
            Self::Io { source, .. } => source.kind() == io::ErrorKind::StorageFull,
            _ => false,
        }
    }

    pub(crate) fn io(op: &'static str) -> impl FnOnce(io::Error) -> Self {
        move |source| Self::Io { op, source }
    }
}

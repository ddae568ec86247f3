//! Configuration of a backup store: the geometry of the frames file, the bound on
//! open-replica buffers, and when writes are acknowledged.

/// Segment area of a frame by default and at most: one full log segment (docs/design.md §4,
/// R§4.1 "8MB segments"). It must equal the master's segment size; tests configure
/// much smaller frames.
pub const FRAME_SEGMENT_BYTES: u32 = 8 * 1024 * 1024;
/// Alignment of segment areas and of frames: a page, so that a later `O_DIRECT` path
/// (DEPENDENCIES: large direct writes are 5–10× faster than buffered + fsync) can
/// write frames without bounce buffers.
pub const FRAME_ALIGN_BYTES: u32 = 4096;
/// Bytes after each segment area holding its metadata slots (the rest is reserved,
/// zero, and keeps the next frame aligned).
pub const METADATA_AREA_BYTES: u32 = FRAME_ALIGN_BYTES;
/// Most frames in one file (512 GiB of segments at 8 MiB).
pub const MAX_FRAME_COUNT: u32 = 1 << 16;
/// Open-replica buffers by default: 8 × 8 MiB = 64 MiB, the "few tens of megabytes"
/// that must be flushed on a power failure (R§4.2).
pub const DEFAULT_OPEN_BUFFERS: u32 = 8;
/// Most open-replica buffers a store may be configured with (1 GiB at 8 MiB).
pub const MAX_OPEN_BUFFERS: u32 = 128;

const _: () = assert!(FRAME_SEGMENT_BYTES.is_multiple_of(FRAME_ALIGN_BYTES));
const _: () = assert!(METADATA_AREA_BYTES.is_multiple_of(FRAME_ALIGN_BYTES));

/// When a write is acknowledged (the crate doc states the full contract).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// RAMCloud semantics (R§4.2): an open or write of a non-atomic replica returns
    /// once it is written to the file (in the page cache), without a sync, so it
    /// survives a crash of the backup process; `close` syncs. Acknowledged bytes of
    /// open replicas survive a power failure only if the machine can run
    /// [`crate::BackupStore::flush`] after the failure is detected (battery- or
    /// capacitor-backed power). Atomic replicas stay in memory until closed.
    Buffered,
    /// An open or write of a non-atomic replica returns only after it is on disk and
    /// `sync_data` returned, so it survives a power failure. Concurrent operations
    /// share one sync (group commit).
    Fsync,
}

/// Geometry and policy of one store. The geometry (`frame_count`, `segment_bytes`)
/// must be the same every time a file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupConfig {
    /// Frames in the file: the most replicas the store can hold.
    pub frame_count: u32,
    /// Bytes of a frame's segment area: the longest replica. A multiple of
    /// [`FRAME_ALIGN_BYTES`], at most [`FRAME_SEGMENT_BYTES`].
    pub segment_bytes: u32,
    /// Most replicas open (buffered in memory) at once; `open` beyond it fails with
    /// [`crate::BackupError::BuffersFull`] so the master picks another backup (R§7.1).
    pub max_open_buffers: u32,
    /// When writes are acknowledged.
    pub sync_mode: SyncMode,
}

/// A configuration outside the limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `segment_bytes` is zero, too large or not aligned.
    #[error(
        "segment_bytes {0} must be a non-zero multiple of {FRAME_ALIGN_BYTES} \
         and at most {FRAME_SEGMENT_BYTES}"
    )]
    SegmentBytes(u32),
    /// `frame_count` is zero or above [`MAX_FRAME_COUNT`].
    #[error("frame_count {0} must be between 1 and {MAX_FRAME_COUNT}")]
    FrameCount(u32),
    /// `max_open_buffers` is zero or above [`MAX_OPEN_BUFFERS`].
    #[error("max_open_buffers {0} must be between 1 and {MAX_OPEN_BUFFERS}")]
    OpenBuffers(u32),
}

impl BackupConfig {
    /// `frame_count` frames of [`FRAME_SEGMENT_BYTES`], [`DEFAULT_OPEN_BUFFERS`]
    /// buffers, [`SyncMode::Buffered`].
    pub fn new(frame_count: u32) -> Self {
        Self {
            frame_count,
            segment_bytes: FRAME_SEGMENT_BYTES,
            max_open_buffers: DEFAULT_OPEN_BUFFERS,
            sync_mode: SyncMode::Buffered,
        }
    }

    /// Checks every field against its limit.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.segment_bytes == 0
            || self.segment_bytes > FRAME_SEGMENT_BYTES
            || !self.segment_bytes.is_multiple_of(FRAME_ALIGN_BYTES)
        {
            return Err(ConfigError::SegmentBytes(self.segment_bytes));
        }
        if self.frame_count == 0 || self.frame_count > MAX_FRAME_COUNT {
            return Err(ConfigError::FrameCount(self.frame_count));
        }
        if self.max_open_buffers == 0 || self.max_open_buffers > MAX_OPEN_BUFFERS {
            return Err(ConfigError::OpenBuffers(self.max_open_buffers));
        }
        Ok(())
    }

    /// Frames an ordinary open may not take: kept for opens that free more than
    /// they take (`BackupStore::open_reclaiming`: survivors of combined cleaning
    /// and the heads that let cleaned segments be freed), so a master whose
    /// backups are full can always clean its way back (docs/design-notes.md "Full
    /// backups"). A cleaning pass under backup pressure takes one survivor frame,
    /// the head it rolls one, and a head refused before it one more, so 4 frames
    /// serve one master; larger stores keep 1/16 for several masters cleaning at
    /// once, at most 16. Stores of
    /// fewer than 16 frames (tests) keep none.
    pub fn reserved_frames(&self) -> u32 {
        if self.frame_count < 16 {
            0
        } else {
            (self.frame_count / 16).clamp(4, 16)
        }
    }

    /// Bytes of one frame: segment area plus metadata area.
    pub fn frame_bytes(&self) -> u64 {
        u64::from(self.segment_bytes) + u64::from(METADATA_AREA_BYTES)
    }

    /// Bytes of the whole file. Cannot overflow: both factors are 32-bit.
    pub fn file_bytes(&self) -> u64 {
        u64::from(self.frame_count) * self.frame_bytes()
    }

    /// Offset of frame `frame`'s segment area in the file.
    pub fn data_offset(&self, frame: u32) -> u64 {
        u64::from(frame) * self.frame_bytes()
    }

    /// Offset of frame `frame`'s metadata slot 0 in the file (slot 1 follows
    /// `metadata::METADATA_SLOT_BYTES` later).
    pub fn metadata_offset(&self, frame: u32) -> u64 {
        self.data_offset(frame) + u64::from(self.segment_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_default_ok() {
        assert_eq!(BackupConfig::new(10).validate(), Ok(()));
    }

    #[test]
    fn validate_rejects_out_of_range() {
        let ok = BackupConfig::new(10);
        for bad in [0, 1000, FRAME_SEGMENT_BYTES + FRAME_ALIGN_BYTES] {
            let c = BackupConfig {
                segment_bytes: bad,
                ..ok
            };
            assert_eq!(c.validate(), Err(ConfigError::SegmentBytes(bad)));
        }
        for bad in [0, MAX_FRAME_COUNT + 1] {
            let c = BackupConfig {
                frame_count: bad,
                ..ok
            };
            assert_eq!(c.validate(), Err(ConfigError::FrameCount(bad)));
        }
        for bad in [0, MAX_OPEN_BUFFERS + 1] {
            let c = BackupConfig {
                max_open_buffers: bad,
                ..ok
            };
            assert_eq!(c.validate(), Err(ConfigError::OpenBuffers(bad)));
        }
    }

    #[test]
    fn offsets_follow_layout() {
        let c = BackupConfig {
            segment_bytes: 8192,
            ..BackupConfig::new(3)
        };
        assert_eq!(c.frame_bytes(), 8192 + 4096);
        assert_eq!(c.file_bytes(), 3 * (8192 + 4096));
        assert_eq!(c.data_offset(2), 2 * (8192 + 4096));
        assert_eq!(c.metadata_offset(2), 2 * (8192 + 4096) + 8192);
        assert!(c
            .data_offset(1)
            .is_multiple_of(u64::from(FRAME_ALIGN_BYTES)));
    }
}

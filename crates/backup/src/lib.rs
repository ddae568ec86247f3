//! Replica storage for one ramstore backup: where the segment replicas of other
//! masters are kept on disk, how they are written, and what survives a restart
//! (R§4.2, R§7.4, R§8). The store does no networking: the RPC layer calls
//! [`BackupStore`]. Beside it, [`BackupClient`] is the other end of that RPC layer:
//! the typed calls masters, recovery and cold start make to a backup over the
//! `Transport` seam (one RPC per call, no retries inside; `Send + Sync`, cheap to
//! clone).
//!
//! A backup keeps one preallocated file of fixed-size *frames*; each frame holds one
//! replica of a master's log segment. A replica is *opened* by its master, receives
//! contiguous *writes* while it is the head (or a survivor segment being filled),
//! and is *closed* when complete; it is read back whole only in recovery, and
//! *freed* when its master no longer needs it.
//!
//! # On-disk layout
//!
//! The file is `frame_count` frames, back to back, nothing else. Frame `i` starts at
//! `i × (segment_bytes + METADATA_AREA_BYTES)`; with the default geometry that is
//! `i × (8 MiB + 4 KiB)`. Every frame, and so every segment area, is aligned to
//! [`FRAME_ALIGN_BYTES`].
//!
//! ```text
//!  frame i (starts at i × frame_bytes; frame_bytes = segment_bytes + 4096)
//! +---------------------------------+-----------+-----------+-----------------+
//! | segment area                    | slot 0    | slot 1    | reserved        |
//! | segment_bytes (≤ 8 MiB)         | 512 B     | 512 B     | 3072 B, zero    |
//! +---------------------------------+-----------+-----------+-----------------+
//!  <-- valid bytes [0, length) -->   <---------- metadata area, 4096 B -------->
//!  (rest of the area: no meaning)     slot 0 at +segment_bytes, slot 1 at +512
//!
//!  slot (512 B) = metadata block (64 B) + 448 B padding (written zero, never read)
//! ```
//!
//! Metadata block (all integers little-endian; the [`metadata`] module has the
//! encoder, the parser and the rules):
//!
//! ```text
//! offset  bytes  field          meaning
//! ------  -----  -------------  ------------------------------------------------------
//!      0      8  magic          b"RSBACKUP"
//!      8      2  version        u16 = 1
//!     10      2  flags          bit 0 CLOSED, bit 1 ATOMIC, other bits 0
//!     12      4  segment_bytes  u32, segment area size of this file
//!     16      8  master_id      u64
//!     24      8  segment_id     u64
//!     32      8  sequence       u64, store-wide, increasing: the newer slot wins
//!     40      4  frame_index    u32, the frame the block belongs in
//!     44      4  length         u32, valid bytes at the start of the segment area
//!     48      4  data_crc       u32, crc32c of bytes [0, length) of the segment area
//!     52      8  reserved       zero
//!     60      4  block_crc      u32, crc32c of bytes [0, 60) of the block
//! ```
//!
//! A blank (all-zero) slot means "nothing here". A frame's state is the newest
//! (highest `sequence`) valid block whose `data_crc` matches the segment area; if
//! neither slot yields one, the frame is free. Bytes of the segment area past
//! `length`, the slot padding and the reserved area have no meaning.
//!
//! # Invariants
//!
//! - Two slots per frame, written alternately: a metadata write never overwrites the
//!   newest block already written for the replica. In [`SyncMode::Fsync`] the next
//!   one is not written until the previous one's sync returned, so whatever a crash
//!   or power failure tears or reorders, the last acknowledged state of a replica is
//!   still on disk (R§7.4 needs the last acknowledged bytes of an open head). In
//!   [`SyncMode::Buffered`] blocks are not synced one by one: a crash of the process
//!   keeps the last acknowledged state (it is in the page cache), a power failure
//!   keeps only what the last sync made durable (see the durability contract).
//! - A closed replica's block is in both slots, so it survives damage to either.
//! - A replica's first block is written with the other slot blank, and `sequence`
//!   is above every block on disk, so nothing of a frame's earlier owner can win.
//! - A replica written in atomic mode is never offered — not by
//!   [`BackupStore::read_replica`], not after a restart — until it is closed (R§8:
//!   a master that crashes while re-replicating must not leave a short replica that
//!   looks complete).
//! - Every parser returns typed errors and never panics on any bytes.
//! - Every limit is a named constant or a [`BackupConfig`] field: frame size
//!   ([`FRAME_SEGMENT_BYTES`]), frame count ([`MAX_FRAME_COUNT`]), open buffers
//!   ([`DEFAULT_OPEN_BUFFERS`], [`MAX_OPEN_BUFFERS`]).
//!
//! # Thread-safety
//!
//! [`BackupStore`] is `Send + Sync`; all methods take `&self`. Operations on one
//! replica are serialized; operations on different replicas run in parallel, and
//! their syncs are shared (group commit). [`Disk`] implementations must accept
//! concurrent calls.
//!
//! Time: the store reads no clock and never sleeps; the only wait is a
//! [`FaultyDisk`]'s slow sync, on the `ramstore_clock::Clock` it was given
//! ([`FaultyDisk::with_clock`]), so a simulated disk is slow in simulated time.
//!
//! # Durability contract
//!
//! What each operation has put where when it returns `Ok`. *Written* means handed to
//! the OS (in the page cache, not synced): it survives a crash of the backup process,
//! but not a power failure or a crash of the machine's OS (both treated as a power
//! failure below). *Synced* means on disk after `sync_data`: it survives both.
//!
//! | operation | [`SyncMode::Buffered`]                | [`SyncMode::Fsync`]                   |
//! | --------- | ------------------------------------- | ------------------------------------- |
//! | `open`    | an empty open replica, written        | an empty open replica, synced         |
//! | `write`   | the bytes and their metadata, written | the bytes and their metadata, synced  |
//! | `close`   | the whole closed replica, synced      | the whole closed replica, synced      |
//! | `free`    | the blank slots, written              | the blank slots, synced               |
//! | `flush`   | every open non-atomic replica, synced | every open non-atomic replica, synced |
//!
//! Opens and writes of atomic replicas are memory only in both modes (a restart
//! drops an unfinished atomic replica anyway). So in both modes a crash of the
//! process loses no acknowledged byte of a non-atomic replica; the modes differ only
//! in what a power failure loses.
//!
//! **Buffered mode is RAMCloud's (R§4.2).** A write is acknowledged when its bytes
//! and metadata are written to the file (in the page cache), without a sync. That
//! survives a crash of the backup process, but a power failure only under an
//! assumption stated plainly here: *when power fails, the machine keeps running long
//! enough (battery- or capacitor-backed power) for the backup to call
//! [`BackupStore::flush`] and for that to finish*. At most
//! `max_open_buffers × segment_bytes` (64 MiB by default) is then unsynced. Without
//! that assumption, a power failure loses the unclosed bytes of every open replica
//! on every backup whose power fails — acknowledged writes included; across the
//! cluster they are lost only if every backup holding them loses power at once.
//!
//! **Fsync mode** acknowledges only what is on disk and synced, and assumes nothing
//! about power. Concurrent writers share one `sync_data` (group commit), so N
//! concurrent writes cost far fewer than N syncs. Writes to atomic replicas are
//! still acknowledged from memory in this mode: the bytes of an unfinished atomic
//! replica are discarded by a restart, so syncing them would buy nothing.
//!
//! In both modes, `close` returns only once the closed replica is on disk and
//! synced, and only then is its buffer released; bytes not yet synced are therefore
//! bounded by the open buffers. A failed operation may or may not have taken effect
//! on disk, but never destroys a state acknowledged before it.
//!
//! # Restart
//!
//! [`BackupStore::open_existing`] scans every frame. It keeps closed replicas and
//! open non-atomic replicas whose bytes match their checksum, drops open atomic
//! replicas, treats frames with corrupt metadata or corrupt data as free, and
//! returns a [`RestartSummary`] of what it found; it reads every kept replica once
//! to verify it. Which replicas are still *wanted* (R§8: the master is crashed, up,
//! or gone) is not decided here: the caller lists them and frees what it does not
//! need.

mod client;
mod config;
mod disk;
mod error;
mod faulty;
mod group_commit;
pub mod metadata;
mod scan;
mod store;

pub use client::{
    BackupClient, BackupClientError, BackupReplica, ReplicaBytes, DEFAULT_BACKUP_RPC_DEADLINE_MS,
};
pub use config::{
    BackupConfig, ConfigError, SyncMode, DEFAULT_OPEN_BUFFERS, FRAME_ALIGN_BYTES,
    FRAME_SEGMENT_BYTES, MAX_FRAME_COUNT, MAX_OPEN_BUFFERS, METADATA_AREA_BYTES,
};
pub use disk::{Disk, FileDisk, MemDisk, MEM_DISK_MAX_BYTES};
pub use error::BackupError;
pub use faulty::{FaultPlan, FaultyDisk};
/// The open/close/atomic flags of a backup write, as [`BackupClient::write`] takes them.
pub use ramstore_wire::BackupWriteFlags;
pub use scan::{CorruptFrame, FrameProblem, RestartSummary};
pub use store::{BackupStats, BackupStore, ReplicaInfo};

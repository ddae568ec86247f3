//! `BackupStore`: the replicas one backup holds for other masters, in one frames
//! file (R§4.2, R§7.4, R§8). The crate doc states the layout and the contract.
//!
//! # Locks
//!
//! One catalog mutex maps (master, segment) to a replica and owns the free frames
//! and free buffers; it is held only for map and list updates, never across I/O.
//! Each replica has its own mutex, held for the whole of an operation on it,
//! including its disk writes and its share of a group-committed sync. So operations
//! on one replica are serialized (a master replicates a segment in order anyway)
//! while operations on different replicas run in parallel and share syncs.
//! Lock order: replica, then catalog; the catalog mutex is never held while taking a
//! replica's.
//!
//! A replica's frame goes back to the free list only after its replica was marked
//! gone under the replica's lock, so an operation that looked the replica up before
//! a `free` finds it gone and never writes into a frame that has a new owner.
//!
//! # Metadata slots
//!
//! Every metadata write goes to the slot *not* holding the newest block written, so
//! the newest state already durable survives a torn or reordered write of the next
//! one. The replica lock is held until the write's sync returns, so a slot is never
//! overwritten while the other one is not yet durable. The first block of a replica
//! is written together with a blank second slot (one write), which wipes whatever an
//! earlier owner of the frame left there; a closed block is written to both slots,
//! so it survives damage to either and no older open state can stand in for it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::BackupConfig;
use crate::disk::Disk;
use crate::error::BackupError;
use crate::group_commit::GroupCommit;
use crate::metadata::METADATA_SLOTS_BYTES;
use crate::scan::{self, Recovered, RestartSummary};

// The operations of `BackupStore`, one idea per file; each adds an `impl` block and
// reaches the store's private state as a child module.
mod durability;
mod replica_ops;

/// crc32c of no bytes: the checksum of an empty replica.
const EMPTY_CRC: u32 = 0;

/// One replica, as [`BackupStore::list`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaInfo {
    /// The master whose segment this is.
    pub master_id: u64,
    /// The segment of that master's log.
    pub segment_id: u64,
    /// Valid bytes held.
    pub length: u32,
    /// Closed: complete and read-only.
    pub closed: bool,
    /// Written in atomic mode: offered for recovery only once closed.
    pub atomic: bool,
}

/// Counters of a store, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupStats {
    /// Frames in the file.
    pub frames_total: u32,
    /// Frames holding no replica.
    pub frames_free: u32,
    /// Replicas held (open and closed).
    pub replicas: u32,
    /// Open replicas, each holding one buffer.
    pub open_buffers_in_use: u32,
    /// The configured bound on open replicas.
    pub open_buffers_max: u32,
    /// Valid replica bytes written to the file: closed replicas, and what the newest
    /// metadata block of each open replica describes.
    pub bytes_on_disk: u64,
    /// `sync_data` calls made by operations (group commit makes this far smaller
    /// than the number of synced operations under concurrency).
    pub syncs: u64,
    /// Second copies of a closed block that could not be written; the replica is
    /// durable, with one copy of its metadata.
    pub metadata_copy_errors: u64,
}

type Key = (u64, u64);

/// The replica store of one backup. `Send + Sync`: share it by reference or `Arc`;
/// every method may be called from any number of threads at once.
pub struct BackupStore<D: Disk> {
    disk: D,
    config: BackupConfig,
    catalog: Mutex<Catalog>,
    group: GroupCommit,
    /// Sequence of the next metadata block; above every block on disk.
    next_sequence: AtomicU64,
    bytes_on_disk: AtomicU64,
    metadata_copy_errors: AtomicU64,
    /// Syncs that failed (see `ReplicaState::failures_seen`).
    sync_failures: AtomicU64,
}

impl<D: Disk> std::fmt::Debug for BackupStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupStore")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

struct Catalog {
    replicas: BTreeMap<Key, Arc<Replica>>,
    /// Frames holding no replica; the lowest index is at the end, so it goes first.
    free_frames: Vec<u32>,
    /// Open-replica buffers not in use, each with `segment_bytes` of capacity, so
    /// writes never reallocate.
    free_buffers: Vec<Vec<u8>>,
}

struct Replica {
    master_id: u64,
    segment_id: u64,
    frame: u32,
    atomic: bool,
    state: Mutex<ReplicaState>,
}

enum Phase {
    /// Accepting writes; the buffer holds exactly the replica's bytes.
    Open(Vec<u8>),
    /// Read-only; the bytes are on disk.
    Closed,
    /// Freed (or its open failed): the frame may belong to another replica now.
    Gone,
}

struct ReplicaState {
    phase: Phase,
    /// Valid bytes (the buffer's length while open).
    len: u32,
    /// crc32c of the valid bytes.
    crc: u32,
    /// Slot for the next metadata block; `None` until this replica wrote one (the
    /// first is written with a blank second slot).
    next_slot: Option<usize>,
    /// The valid bytes and a metadata block describing them were written to the
    /// disk (in [`SyncMode::Buffered`] not necessarily synced yet). Cleared by
    /// writes of atomic replicas (memory only) and by failed I/O, after which the
    /// next write to disk rewrites all the bytes.
    persisted: bool,
    /// [`BackupStore`]'s count of failed syncs when `persisted` was last judged. A
    /// failed sync may drop any dirty page of the file (Linux drops them after a
    /// failed fdatasync), so a replica that saw fewer failures than there have
    /// been rewrites all its bytes before it next relies on them.
    failures_seen: u64,
    /// Length described by the newest metadata block written (for stats).
    disk_len: u32,
}

impl Replica {
    fn key(&self) -> Key {
        (self.master_id, self.segment_id)
    }
}

impl<D: Disk> BackupStore<D> {
    /// Formats `disk` for `config`: sizes it to [`BackupConfig::file_bytes`] and
    /// blanks every metadata slot, so no replica of an earlier use survives.
    pub fn create(disk: D, config: BackupConfig) -> Result<Self, BackupError> {
        config.validate()?;
        let file_bytes = config.file_bytes();
        let actual = disk
            .len()
            .map_err(BackupError::io("reading the disk size"))?;
        if actual != file_bytes {
            disk.set_len(file_bytes)
                .map_err(BackupError::io("sizing the disk"))?;
        }
        let blank = [0u8; METADATA_SLOTS_BYTES];
        for frame in 0..config.frame_count {
            disk.write_at(config.metadata_offset(frame), &blank)
                .map_err(BackupError::io("formatting metadata"))?;
        }
        disk.sync_data()
            .map_err(BackupError::io("syncing the format"))?;
        Ok(Self::assemble(disk, config, Vec::new(), 0))
    }

    /// Opens a formatted disk after a restart: keeps every closed replica and every
    /// open non-atomic replica whose bytes match their checksum, frees everything
    /// else, and says what it found. Replicas kept open go back into buffers (and
    /// accept writes again); there must be at most `max_open_buffers` of them.
    pub fn open_existing(
        disk: D,
        config: BackupConfig,
    ) -> Result<(Self, RestartSummary), BackupError> {
        config.validate()?;
        let actual = disk
            .len()
            .map_err(BackupError::io("reading the disk size"))?;
        if actual != config.file_bytes() {
            return Err(BackupError::FileSize {
                expected: config.file_bytes(),
                actual,
            });
        }
        let scan = scan::scan(&disk, &config)?;
        let open = scan.recovered.iter().filter(|r| !r.meta.closed).count();
        if open > config.max_open_buffers as usize {
            return Err(BackupError::TooManyOpenReplicas {
                found: open,
                limit: config.max_open_buffers,
            });
        }
        if !scan.clear.is_empty() {
            let blank = [0u8; METADATA_SLOTS_BYTES];
            for &frame in &scan.clear {
                disk.write_at(config.metadata_offset(frame), &blank)
                    .map_err(BackupError::io("clearing a superseded frame"))?;
            }
            disk.sync_data()
                .map_err(BackupError::io("syncing cleared frames"))?;
        }
        let store = Self::assemble(disk, config, scan.recovered, scan.max_sequence);
        Ok((store, scan.summary))
    }

    fn assemble(
        disk: D,
        config: BackupConfig,
        recovered: Vec<Recovered>,
        max_sequence: u64,
    ) -> Self {
        let segment_bytes = config.segment_bytes as usize;
        let mut used = vec![false; config.frame_count as usize];
        let mut replicas = BTreeMap::new();
        let mut bytes_on_disk = 0u64;
        let mut open = 0u32;
        for r in recovered {
            used[r.frame as usize] = true;
            bytes_on_disk += u64::from(r.meta.length);
            let phase = match r.data {
                Some(buf) => {
                    open += 1;
                    Phase::Open(buf)
                }
                None => Phase::Closed,
            };
            let replica = Replica {
                master_id: r.meta.master_id,
                segment_id: r.meta.segment_id,
                frame: r.frame,
                atomic: r.meta.atomic,
                state: Mutex::new(ReplicaState {
                    phase,
                    len: r.meta.length,
                    crc: r.meta.data_crc,
                    // Never overwrite the slot the kept state came from.
                    next_slot: Some(r.slot ^ 1),
                    persisted: true,
                    failures_seen: 0,
                    disk_len: r.meta.length,
                }),
            };
            replicas.insert(replica.key(), Arc::new(replica));
        }
        let free_frames = (0..config.frame_count)
            .rev()
            .filter(|&f| !used[f as usize])
            .collect();
        let free_buffers = (open..config.max_open_buffers)
            .map(|_| Vec::with_capacity(segment_bytes))
            .collect();
        Self {
            disk,
            config,
            catalog: Mutex::new(Catalog {
                replicas,
                free_frames,
                free_buffers,
            }),
            group: GroupCommit::default(),
            next_sequence: AtomicU64::new(max_sequence + 1),
            bytes_on_disk: AtomicU64::new(bytes_on_disk),
            metadata_copy_errors: AtomicU64::new(0),
            sync_failures: AtomicU64::new(0),
        }
    }

    /// The valid bytes of a replica, for recovery. A closed replica is read from
    /// disk and checked against its checksum ([`BackupError::Corrupt`] if they
    /// differ); an open one is copied from its buffer. An open atomic replica is
    /// never returned ([`BackupError::NotClosed`]).
    pub fn read_replica(&self, master_id: u64, segment_id: u64) -> Result<Vec<u8>, BackupError> {
        let replica = self.lookup(master_id, segment_id)?;
        let st = replica.state.lock();
        match &st.phase {
            Phase::Gone => Err(BackupError::UnknownReplica {
                master_id,
                segment_id,
            }),
            Phase::Open(_) if replica.atomic => Err(BackupError::NotClosed {
                master_id,
                segment_id,
            }),
            Phase::Open(buf) => Ok(buf.clone()),
            Phase::Closed => {
                let mut out = vec![0u8; st.len as usize];
                self.disk
                    .read_at(self.config.data_offset(replica.frame), &mut out)
                    .map_err(BackupError::io("reading a replica"))?;
                let computed = crc32c::crc32c(&out);
                if computed != st.crc {
                    return Err(BackupError::Corrupt {
                        master_id,
                        segment_id,
                        expected: st.crc,
                        computed,
                    });
                }
                Ok(out)
            }
        }
    }

    /// Every replica held, ordered by (master id, segment id).
    pub fn list(&self) -> Vec<ReplicaInfo> {
        let replicas: Vec<Arc<Replica>> = self.catalog.lock().replicas.values().cloned().collect();
        replicas.iter().filter_map(|r| Self::info_of(r)).collect()
    }

    /// One replica, if held.
    pub fn info(&self, master_id: u64, segment_id: u64) -> Option<ReplicaInfo> {
        let replica = self.lookup(master_id, segment_id).ok()?;
        Self::info_of(&replica)
    }

    /// Current counters.
    pub fn stats(&self) -> BackupStats {
        let catalog = self.catalog.lock();
        BackupStats {
            frames_total: self.config.frame_count,
            frames_free: catalog.free_frames.len() as u32,
            replicas: catalog.replicas.len() as u32,
            open_buffers_in_use: self.config.max_open_buffers - catalog.free_buffers.len() as u32,
            open_buffers_max: self.config.max_open_buffers,
            bytes_on_disk: self.bytes_on_disk.load(Ordering::Relaxed),
            syncs: self.group.syncs(),
            metadata_copy_errors: self.metadata_copy_errors.load(Ordering::Relaxed),
        }
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &BackupConfig {
        &self.config
    }

    /// The disk under the store.
    pub fn disk(&self) -> &D {
        &self.disk
    }

    /// Stops the store and hands back its disk (what a restart reopens). Nothing is
    /// written or synced: open non-atomic replicas are in the file already (a
    /// restart on the same disk keeps them, like a restart after a process crash),
    /// but in buffered mode their bytes survive a power failure only once flushed.
    pub fn into_disk(self) -> D {
        self.disk
    }

    fn info_of(replica: &Replica) -> Option<ReplicaInfo> {
        let st = replica.state.lock();
        let closed = match st.phase {
            Phase::Gone => return None,
            Phase::Open(_) => false,
            Phase::Closed => true,
        };
        Some(ReplicaInfo {
            master_id: replica.master_id,
            segment_id: replica.segment_id,
            length: st.len,
            closed,
            atomic: replica.atomic,
        })
    }

    fn lookup(&self, master_id: u64, segment_id: u64) -> Result<Arc<Replica>, BackupError> {
        self.catalog
            .lock()
            .replicas
            .get(&(master_id, segment_id))
            .cloned()
            .ok_or(BackupError::UnknownReplica {
                master_id,
                segment_id,
            })
    }
}

#[cfg(test)]
#[path = "store_fault_tests.rs"]
mod fault_tests;
#[cfg(test)]
#[path = "store_restart_tests.rs"]
mod restart_tests;
#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;

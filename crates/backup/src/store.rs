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

use crate::config::{BackupConfig, SyncMode};
use crate::disk::Disk;
use crate::error::BackupError;
use crate::group_commit::GroupCommit;
use crate::metadata::{encode_slots, ReplicaMetadata, METADATA_SLOTS_BYTES, METADATA_SLOT_BYTES};
use crate::scan::{self, Recovered, RestartSummary};

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

    /// Starts a replica of `segment_id` of `master_id` in a free frame. In atomic
    /// mode the replica is never offered (read or kept over a restart) until it is
    /// closed: use it for re-replication, where a half-copied segment must not be
    /// mistaken for a short one (R§8).
    ///
    /// Idempotent: opening a replica that is open in the same mode succeeds and
    /// changes nothing. Fails with [`BackupError::BuffersFull`] when
    /// `max_open_buffers` replicas are open and [`BackupError::FramesFull`] when no
    /// frame is free (checked in that order), so the master can go elsewhere;
    /// [`BackupError::Closed`] if the replica is closed, and
    /// [`BackupError::AtomicMismatch`] if it is open in the other mode.
    /// A non-atomic open returns once an empty open replica is written to the file:
    /// synced in [`SyncMode::Fsync`], in the page cache in [`SyncMode::Buffered`].
    pub fn open(&self, master_id: u64, segment_id: u64, atomic: bool) -> Result<(), BackupError> {
        let key = (master_id, segment_id);
        // Each turn of the loop that finds a gone replica follows a free or failed
        // open that completed meanwhile, so the loop makes progress.
        loop {
            let mut catalog = self.catalog.lock();
            if let Some(existing) = catalog.replicas.get(&key).cloned() {
                drop(catalog);
                let st = existing.state.lock();
                return match st.phase {
                    Phase::Gone => continue,
                    Phase::Closed => Err(BackupError::Closed {
                        master_id,
                        segment_id,
                    }),
                    Phase::Open(_) if existing.atomic != atomic => {
                        Err(BackupError::AtomicMismatch {
                            master_id,
                            segment_id,
                            atomic: existing.atomic,
                        })
                    }
                    Phase::Open(_) => Ok(()),
                };
            }
            let Some(buf) = catalog.free_buffers.pop() else {
                return Err(BackupError::BuffersFull {
                    limit: self.config.max_open_buffers,
                });
            };
            let Some(frame) = catalog.free_frames.pop() else {
                catalog.free_buffers.push(buf);
                return Err(BackupError::FramesFull {
                    frames: self.config.frame_count,
                });
            };
            let replica = Arc::new(Replica {
                master_id,
                segment_id,
                frame,
                atomic,
                state: Mutex::new(ReplicaState {
                    phase: Phase::Open(buf),
                    len: 0,
                    crc: EMPTY_CRC,
                    next_slot: None,
                    persisted: false,
                    failures_seen: self.sync_failures.load(Ordering::Acquire),
                    disk_len: 0,
                }),
            });
            if !self.writes_through(atomic) {
                catalog.replicas.insert(key, replica);
                return Ok(());
            }
            // The open is acknowledged once on disk (fsync mode) or in the page
            // cache (buffered). The replica is visible meanwhile; anyone who finds
            // it waits for its lock.
            let mut st = replica.state.lock();
            catalog.replicas.insert(key, Arc::clone(&replica));
            drop(catalog);
            let meta = self.metadata(&replica, 0, EMPTY_CRC, false);
            let result = self
                .put_metadata(replica.frame, &mut st.next_slot, &meta)
                .and_then(|_| self.sync_if_fsync());
            return match result {
                Ok(()) => {
                    st.persisted = true;
                    Ok(())
                }
                Err(e) => {
                    self.retire(&replica, &mut st);
                    Err(e)
                }
            };
        }
    }

    /// Puts `bytes` at `offset` of an open replica. Writes are contiguous: `offset`
    /// may not exceed the replica's length ([`BackupError::Gap`]), and bytes before
    /// the end are overwritten — a retransmission of bytes already held changes
    /// nothing. Fails with [`BackupError::PastFrameEnd`] if the write would end past
    /// the frame, [`BackupError::Closed`] on a closed replica.
    ///
    /// Returns once the bytes and their metadata are written to the file: in the
    /// page cache, unsynced ([`SyncMode::Buffered`]; they survive a crash of this
    /// process) or synced ([`SyncMode::Fsync`]). Writes of atomic replicas return
    /// once in memory, in either mode: their partial bytes are worthless after a
    /// crash. On error the replica is as before.
    pub fn write(
        &self,
        master_id: u64,
        segment_id: u64,
        offset: u32,
        bytes: &[u8],
    ) -> Result<(), BackupError> {
        let segment_bytes = self.config.segment_bytes;
        let end = u64::from(offset) + bytes.len() as u64;
        if end > u64::from(segment_bytes) {
            return Err(BackupError::PastFrameEnd {
                offset,
                bytes: bytes.len(),
                segment_bytes,
            });
        }
        let replica = self.lookup(master_id, segment_id)?;
        let mut guard = replica.state.lock();
        self.forget_unsynced_after_failures(&mut guard);
        let ReplicaState {
            phase,
            len,
            crc,
            next_slot,
            persisted,
            disk_len,
            ..
        } = &mut *guard;
        let buf = match phase {
            Phase::Open(buf) => buf,
            Phase::Closed => {
                return Err(BackupError::Closed {
                    master_id,
                    segment_id,
                })
            }
            Phase::Gone => {
                return Err(BackupError::UnknownReplica {
                    master_id,
                    segment_id,
                })
            }
        };
        if offset > *len {
            return Err(BackupError::Gap {
                offset,
                length: *len,
            });
        }
        let (start, old_len) = (offset as usize, *len as usize);
        // `end` is at most `segment_bytes`, a u32.
        let (end, new_len) = (end as usize, (end as u32).max(*len));
        let overlap_end = end.min(old_len);
        let (overlap, fresh) = bytes.split_at(overlap_end - start);
        let same = buf[start..overlap_end] == *overlap;
        let through = self.writes_through(replica.atomic);
        if same && fresh.is_empty() && (*persisted || !through) {
            return Ok(());
        }
        let new_crc = if same {
            crc32c::crc32c_append(*crc, fresh)
        } else {
            let c = crc32c::crc32c_append(crc32c::crc32c(&buf[..start]), bytes);
            crc32c::crc32c_append(c, buf.get(end..).unwrap_or_default())
        };

        if through {
            let slot_before = *next_slot;
            let frame = replica.frame;
            let result = if *persisted {
                // Only what changed: the disk already holds the rest.
                if same {
                    self.write_data(frame, overlap_end, fresh)
                } else {
                    self.write_data(frame, start, bytes)
                }
            } else {
                // An earlier failure may have left anything in the frame.
                self.write_data(frame, 0, &buf[..start])
                    .and_then(|()| self.write_data(frame, start, bytes))
                    .and_then(|()| self.write_data(frame, end, buf.get(end..).unwrap_or_default()))
            }
            .and_then(|()| {
                let meta = self.metadata(&replica, new_len, new_crc, false);
                self.put_metadata(frame, next_slot, &meta)
            })
            .and_then(|_| self.sync_if_fsync());
            if let Err(e) = result {
                *next_slot = slot_before;
                *persisted = false;
                return Err(e);
            }
        }

        buf[start..overlap_end].copy_from_slice(overlap);
        buf.extend_from_slice(fresh);
        *len = new_len;
        *crc = new_crc;
        *persisted = through;
        if through {
            self.set_disk_len(disk_len, new_len);
        }
        Ok(())
    }

    /// Closes an open replica: writes its bytes (those not on disk yet) and a closed
    /// metadata block, syncs, and frees its buffer. The replica is read-only from
    /// then on. Returns once the closed replica is durable, in both modes. Closing a
    /// closed replica succeeds (a retransmitted close). On error the replica stays
    /// open and the close can be repeated.
    pub fn close(&self, master_id: u64, segment_id: u64) -> Result<(), BackupError> {
        let replica = self.lookup(master_id, segment_id)?;
        let mut guard = replica.state.lock();
        let st = &mut *guard;
        self.forget_unsynced_after_failures(st);
        let buf = match &st.phase {
            Phase::Open(buf) => buf,
            Phase::Closed => return Ok(()),
            Phase::Gone => {
                return Err(BackupError::UnknownReplica {
                    master_id,
                    segment_id,
                })
            }
        };
        let frame = replica.frame;
        let slot_before = st.next_slot;
        let meta = self.metadata(&replica, st.len, st.crc, true);
        let data = if st.persisted {
            Ok(())
        } else {
            self.write_data(frame, 0, buf)
        };
        let result = data
            .and_then(|()| self.put_metadata(frame, &mut st.next_slot, &meta))
            .and_then(|single| self.sync().map(|()| single));
        let single = match result {
            Ok(single) => single,
            Err(e) => {
                st.next_slot = slot_before;
                return Err(e);
            }
        };
        if let Some(slot) = single {
            // The closed block is durable in `slot`; the copy makes the other slot
            // say the same, so no older open block can stand in for the closed one
            // and either copy may rot. It becomes durable with a later sync, and
            // until then the first copy suffices.
            let other = self.slot_offset(frame, slot ^ 1);
            if self.disk.write_at(other, &meta.encode()).is_err() {
                self.metadata_copy_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        let len = st.len;
        st.persisted = true;
        self.set_disk_len(&mut st.disk_len, len);
        if let Phase::Open(mut buf) = std::mem::replace(&mut st.phase, Phase::Closed) {
            buf.clear();
            self.catalog.lock().free_buffers.push(buf);
        }
        Ok(())
    }

    /// Drops a replica, open or closed: blanks its metadata slots (so a restart does
    /// not bring it back) and returns its frame, and its buffer if open. In
    /// [`SyncMode::Fsync`] returns once the blank slots are durable; in
    /// [`SyncMode::Buffered`] they become durable with the next sync or
    /// [`BackupStore::flush`]. An unknown replica is an error
    /// ([`BackupError::UnknownReplica`]), which a retransmitted free may treat as
    /// success.
    pub fn free(&self, master_id: u64, segment_id: u64) -> Result<(), BackupError> {
        let replica = self.lookup(master_id, segment_id)?;
        let mut st = replica.state.lock();
        if matches!(st.phase, Phase::Gone) {
            return Err(BackupError::UnknownReplica {
                master_id,
                segment_id,
            });
        }
        let blank = [0u8; METADATA_SLOTS_BYTES];
        let result = self
            .disk
            .write_at(self.config.metadata_offset(replica.frame), &blank)
            .map_err(BackupError::io("clearing metadata"))
            .and_then(|()| match self.config.sync_mode {
                SyncMode::Fsync => self.sync(),
                SyncMode::Buffered => Ok(()),
            });
        if let Err(e) = result {
            // The slots may be half blank: the next block must rewrite both.
            st.next_slot = None;
            return Err(e);
        }
        self.retire(&replica, &mut st);
        Ok(())
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

    /// Writes every open non-atomic replica whose bytes are not all on disk (with an
    /// open metadata block) and syncs: what a backup runs when it learns that power
    /// is failing (R§4.2), or before a planned shutdown in buffered mode. Returns
    /// how many replicas it wrote: normally none, since opens and writes already
    /// wrote them, unsynced in buffered mode (only a replica whose last write to disk
    /// failed is written here); the sync is what makes them durable. Open atomic
    /// replicas are skipped: a restart drops them anyway.
    pub fn flush(&self) -> Result<usize, BackupError> {
        let replicas: Vec<Arc<Replica>> = self.catalog.lock().replicas.values().cloned().collect();
        let mut flushed = Vec::new();
        for replica in replicas.iter().filter(|r| !r.atomic) {
            let mut guard = replica.state.lock();
            let st = &mut *guard;
            if !matches!(st.phase, Phase::Open(_)) {
                continue;
            }
            self.forget_unsynced_after_failures(st);
            let Phase::Open(buf) = &st.phase else {
                continue;
            };
            if st.persisted {
                continue;
            }
            let slot_before = st.next_slot;
            let meta = self.metadata(replica, st.len, st.crc, false);
            let result = self
                .write_data(replica.frame, 0, buf)
                .and_then(|()| self.put_metadata(replica.frame, &mut st.next_slot, &meta));
            if let Err(e) = result {
                st.next_slot = slot_before;
                return Err(e);
            }
            st.persisted = true;
            let len = st.len;
            self.set_disk_len(&mut st.disk_len, len);
            flushed.push(Arc::clone(replica));
        }
        if let Err(e) = self.sync() {
            // A failed sync may have dropped the written pages: write them again next
            // time.
            for replica in &flushed {
                replica.state.lock().persisted = false;
            }
            return Err(e);
        }
        Ok(flushed.len())
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

    /// Whether an open or write of a replica goes to the file before it is
    /// acknowledged: in both modes for non-atomic replicas (buffered mode without a
    /// sync, so the bytes survive a crash of this process in the page cache; R§4.2
    /// leaves power failure to the flush assumption), never for atomic ones (a
    /// restart drops an unfinished atomic replica anyway).
    fn writes_through(&self, atomic: bool) -> bool {
        !atomic
    }

    /// Syncs the disk in fsync mode; buffered mode acknowledges from the page cache.
    fn sync_if_fsync(&self) -> Result<(), BackupError> {
        match self.config.sync_mode {
            SyncMode::Fsync => self.sync(),
            SyncMode::Buffered => Ok(()),
        }
    }

    fn metadata(
        &self,
        replica: &Replica,
        length: u32,
        data_crc: u32,
        closed: bool,
    ) -> ReplicaMetadata {
        ReplicaMetadata {
            master_id: replica.master_id,
            segment_id: replica.segment_id,
            sequence: self.next_sequence.fetch_add(1, Ordering::Relaxed),
            segment_bytes: self.config.segment_bytes,
            frame_index: replica.frame,
            length,
            data_crc,
            closed,
            atomic: replica.atomic,
        }
    }

    fn slot_offset(&self, frame: u32, slot: usize) -> u64 {
        self.config.metadata_offset(frame) + (slot * METADATA_SLOT_BYTES) as u64
    }

    fn write_data(&self, frame: u32, offset: usize, bytes: &[u8]) -> Result<(), BackupError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.disk
            .write_at(self.config.data_offset(frame) + offset as u64, bytes)
            .map_err(BackupError::io("writing replica bytes"))
    }

    /// Writes `meta` to the slot after the newest one written (see the module doc),
    /// or, for a replica's first block, to slot 0 with slot 1 blank — or a copy
    /// there if `meta` is closed. Advances `next_slot` only if the write succeeded;
    /// a caller whose later sync fails must put it back. Returns the slot written
    /// when it wrote only one.
    fn put_metadata(
        &self,
        frame: u32,
        next_slot: &mut Option<usize>,
        meta: &ReplicaMetadata,
    ) -> Result<Option<usize>, BackupError> {
        match *next_slot {
            None => {
                let second = meta.closed.then_some(meta);
                self.disk
                    .write_at(
                        self.config.metadata_offset(frame),
                        &encode_slots(Some(meta), second),
                    )
                    .map_err(BackupError::io("writing metadata"))?;
                *next_slot = Some(1);
                Ok(None)
            }
            Some(slot) => {
                self.disk
                    .write_at(self.slot_offset(frame, slot), &meta.encode())
                    .map_err(BackupError::io("writing metadata"))?;
                *next_slot = Some(slot ^ 1);
                Ok(Some(slot))
            }
        }
    }

    fn sync(&self) -> Result<(), BackupError> {
        self.group.sync(&self.disk).map_err(|e| {
            self.sync_failures.fetch_add(1, Ordering::AcqRel);
            BackupError::io("syncing the disk")(e)
        })
    }

    /// Marks the replica's bytes as not on disk if a sync failed since it last
    /// looked: the failure may have dropped its dirty pages.
    fn forget_unsynced_after_failures(&self, st: &mut ReplicaState) {
        let failures = self.sync_failures.load(Ordering::Acquire);
        if st.failures_seen != failures {
            st.persisted = false;
            st.failures_seen = failures;
        }
    }

    fn set_disk_len(&self, disk_len: &mut u32, len: u32) {
        let old = std::mem::replace(disk_len, len);
        if len >= old {
            self.bytes_on_disk
                .fetch_add(u64::from(len - old), Ordering::Relaxed);
        } else {
            self.bytes_on_disk
                .fetch_sub(u64::from(old - len), Ordering::Relaxed);
        }
    }

    /// Marks `replica` gone and returns its frame and buffer to the free lists.
    fn retire(&self, replica: &Replica, st: &mut ReplicaState) {
        let phase = std::mem::replace(&mut st.phase, Phase::Gone);
        self.set_disk_len(&mut st.disk_len, 0);
        let mut catalog = self.catalog.lock();
        let key = replica.key();
        if catalog
            .replicas
            .get(&key)
            .is_some_and(|r| std::ptr::eq(Arc::as_ptr(r), replica))
        {
            catalog.replicas.remove(&key);
        }
        catalog.free_frames.push(replica.frame);
        if let Phase::Open(mut buf) = phase {
            buf.clear();
            catalog.free_buffers.push(buf);
        }
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;

//! The life of a replica in a `BackupStore`: open in a free frame, write, close,
//! free (R§4.2, R§7.4). Each holds the replica's lock for the whole operation, its
//! disk writes and its share of a group-committed sync (lock order in `store.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::SyncMode;
use crate::disk::Disk;
use crate::error::BackupError;
use crate::metadata::METADATA_SLOTS_BYTES;

use super::{BackupStore, Phase, Replica, ReplicaState, EMPTY_CRC};

impl<D: Disk> BackupStore<D> {
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
    /// It never takes the frames kept for cleaning
    /// ([`crate::BackupConfig::reserved_frames`]).
    pub fn open(&self, master_id: u64, segment_id: u64, atomic: bool) -> Result<(), BackupError> {
        self.open_in(master_id, segment_id, atomic, false)
    }

    /// [`Self::open`] for a replica that frees more than it takes — a survivor of
    /// combined cleaning, or the head whose durability lets the cleaned segments'
    /// replicas go: it may take the frames an ordinary open leaves (docs/
    /// design-notes.md "Full backups").
    pub fn open_reclaiming(
        &self,
        master_id: u64,
        segment_id: u64,
        atomic: bool,
    ) -> Result<(), BackupError> {
        self.open_in(master_id, segment_id, atomic, true)
    }

    fn open_in(
        &self,
        master_id: u64,
        segment_id: u64,
        atomic: bool,
        reclaiming: bool,
    ) -> Result<(), BackupError> {
        let key = (master_id, segment_id);
        let kept_frames = if reclaiming {
            0
        } else {
            self.config.reserved_frames() as usize
        };
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
            let frame = if catalog.free_frames.len() > kept_frames {
                catalog.free_frames.pop()
            } else {
                None
            };
            let Some(frame) = frame else {
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
}

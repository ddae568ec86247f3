//! How a `BackupStore` puts bytes and metadata on disk and makes them durable:
//! data and metadata-slot writes, syncs (group-committed), flushing on power
//! failure (R§4.2), and retiring a replica's frame and buffer.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::config::SyncMode;
use crate::disk::Disk;
use crate::error::BackupError;
use crate::metadata::{encode_slots, ReplicaMetadata, METADATA_SLOT_BYTES};

use super::{BackupStore, Phase, Replica, ReplicaState};

impl<D: Disk> BackupStore<D> {
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

    /// Whether an open or write of a replica goes to the file before it is
    /// acknowledged: in both modes for non-atomic replicas (buffered mode without a
    /// sync, so the bytes survive a crash of this process in the page cache; R§4.2
    /// leaves power failure to the flush assumption), never for atomic ones (a
    /// restart drops an unfinished atomic replica anyway).
    pub(super) fn writes_through(&self, atomic: bool) -> bool {
        !atomic
    }

    /// Syncs the disk in fsync mode; buffered mode acknowledges from the page cache.
    pub(super) fn sync_if_fsync(&self) -> Result<(), BackupError> {
        match self.config.sync_mode {
            SyncMode::Fsync => self.sync(),
            SyncMode::Buffered => Ok(()),
        }
    }

    pub(super) fn metadata(
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

    pub(super) fn slot_offset(&self, frame: u32, slot: usize) -> u64 {
        self.config.metadata_offset(frame) + (slot * METADATA_SLOT_BYTES) as u64
    }

    pub(super) fn write_data(
        &self,
        frame: u32,
        offset: usize,
        bytes: &[u8],
    ) -> Result<(), BackupError> {
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
    pub(super) fn put_metadata(
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

    pub(super) fn sync(&self) -> Result<(), BackupError> {
        self.group.sync(&self.disk).map_err(|e| {
            self.sync_failures.fetch_add(1, Ordering::AcqRel);
            BackupError::io("syncing the disk")(e)
        })
    }

    /// Marks the replica's bytes as not on disk if a sync failed since it last
    /// looked: the failure may have dropped its dirty pages.
    pub(super) fn forget_unsynced_after_failures(&self, st: &mut ReplicaState) {
        let failures = self.sync_failures.load(Ordering::Acquire);
        if st.failures_seen != failures {
            st.persisted = false;
            st.failures_seen = failures;
        }
    }

    pub(super) fn set_disk_len(&self, disk_len: &mut u32, len: u32) {
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
    pub(super) fn retire(&self, replica: &Replica, st: &mut ReplicaState) {
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

//! The head: appends of objects and tombstones, and rolling to a new head segment
//! with a digest of the log (R§4.1, R§7.4, L§7).

use std::sync::atomic::Ordering;

use super::holds::TombstoneHold;
use super::{Head, Log, SegmentMeta, SegmentState, MAX_TABLET_STATS_PER_HEAD};
use crate::entry;
use crate::pool::AllocClass;
use crate::replica::SegmentRole;
use crate::segment::SegmentWriter;
use crate::LogRef;

/// Why an append did not happen. Nothing was written in either case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The log is full for this kind of append; retry after the cleaner has run.
    #[error("log memory is full; retry later")]
    NoSpace,
    /// The entry can never fit in a segment.
    #[error("entry of {0} bytes does not fit in a segment")]
    TooLarge(usize),
}

/// Where an append landed, for replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub segment_id: u64,
    pub offset: usize,
    pub len: usize,
    /// The reference of the appended object or tombstone (the last entry appended).
    pub entry: LogRef,
}

/// An object to append.
#[derive(Debug, Clone, Copy)]
pub struct NewObject<'a> {
    pub table_id: u64,
    pub key: &'a [u8],
    pub version: u64,
    pub value: &'a [u8],
    /// Wall-clock ms since the Unix epoch from which the object reads as absent
    /// (stored in its entry, type 0x82); `None` never expires.
    pub expires_at: Option<u64>,
}

/// An object (and the tombstone of the version it replaces) ready to be written:
/// headers and checksums computed outside any lock.
pub(super) struct EncodedObject {
    obj_header: entry::EncodedHeader,
    obj_len: usize,
    obj_crc: u32,
    tomb: Option<(entry::EncodedHeader, u32)>,
    tomb_len: usize,
    /// The segment of the replaced version (the tombstone's target).
    target: Option<u64>,
}

impl EncodedObject {
    /// Bytes of the tombstone and the object together.
    pub(super) fn total(&self) -> usize {
        self.obj_len + self.tomb_len
    }
}

/// The object a tombstone kills.
#[derive(Debug, Clone, Copy)]
pub struct DeadObject {
    pub version: u64,
    /// Where the dead object is in the log.
    pub location: LogRef,
}

impl Log {
    /// Opens a new head: header, digest naming every segment of the log, safe version
    /// and tablet statistics (R§7.4). The old head is closed. Returns false when
    /// `class` may not take the seglets (and `allow_emergency` is false or even the
    /// emergency reserve is gone).
    pub(super) fn roll_head(
        &self,
        head: &mut Head,
        class: AllocClass,
        allow_emergency: bool,
    ) -> bool {
        let mut table = self.segments.lock();
        let new_id = table.next_id;
        let Some(&slot) = table.free_slots.last() else {
            // Cannot happen: there are more slots than seglets (see `new`).
            return false;
        };
        let safe_version = self.config.metadata.safe_version();
        head.stats_buf.clear();
        self.config.metadata.tablet_stats(&mut head.stats_buf);
        // Statistics are hints for partitioning recovery; keep the entry within the
        // room every segment sets aside for it.
        head.stats_buf.truncate(MAX_TABLET_STATS_PER_HEAD);
        let mut emergency = false;
        let mut writer = SegmentWriter::new(new_id, slot, self.config.segment_bytes);
        loop {
            head.digest_ids.clear();
            head.digest_ids.extend(
                table
                    .by_id
                    .values()
                    .filter(|m| {
                        !matches!(
                            m.state,
                            SegmentState::Emergency | SegmentState::Pending | SegmentState::Side
                        )
                    })
                    .map(|m| m.id),
            );
            head.digest_ids.push(new_id);
            head.meta_buf.clear();
            entry::encode_segment_header(self.config.master_id, new_id, &mut head.meta_buf);
            entry::encode_log_digest(&head.digest_ids, &mut head.meta_buf);
            entry::encode_safe_version(safe_version, &mut head.meta_buf);
            if !emergency && !head.stats_buf.is_empty() {
                entry::encode_tablet_stats(&head.stats_buf, &mut head.meta_buf);
            }
            let need = head.meta_buf.len();
            let class_now = if emergency {
                AllocClass::Emergency
            } else {
                class
            };
            if self.adopt(&mut writer, need, class_now) {
                break;
            }
            if emergency || !allow_emergency {
                return false;
            }
            emergency = true;
        }
        table.free_slots.pop();
        table.next_id += 1;
        writer.write(&self.pool, &head.meta_buf);
        writer.note_entry(head.meta_buf.len());
        let counters = &self.slots[slot as usize];
        counters.segment_id.store(new_id, Ordering::Release);
        counters.live_bytes.store(0, Ordering::Relaxed);
        counters.tombstone_bytes.store(0, Ordering::Relaxed);
        let durable_on_close = self.config.replicas.durable_on_close();
        counters
            .read_durable
            .store(durable_on_close, Ordering::Release);
        let now = self.clock();
        table.by_id.insert(
            new_id,
            SegmentMeta {
                id: new_id,
                slot,
                seglets: Vec::new(),
                mem_length: 0,
                disk_length: 0,
                created_at: now,
                max_entry_bytes: 0,
                state: if emergency {
                    SegmentState::Emergency
                } else {
                    SegmentState::Head
                },
                replicated: false,
            },
        );
        let mut old = std::mem::replace(&mut head.writer, writer);
        let old_emergency = std::mem::replace(&mut head.emergency, emergency);
        let mut left_log = None;
        if old.slot != u32::MAX {
            let spare = old.trim_unused();
            if !spare.is_empty() {
                self.pool.release(&spare);
            }
            if old_emergency {
                // An emergency head holds no object or tombstone and is not named by
                // the new digest: it leaves the log at once (L§7).
                table.by_id.remove(&old.id);
                self.retire_locked(std::mem::take(&mut old.seglets), Some(old.slot));
                left_log = Some(old.id);
            } else if let Some(meta) = table.by_id.get_mut(&old.id) {
                meta.seglets = std::mem::take(&mut old.seglets);
                meta.mem_length = old.length;
                meta.disk_length = old.length;
                meta.state = SegmentState::Closed;
                meta.replicated = durable_on_close;
                meta.max_entry_bytes = old.max_entry_bytes;
            }
        }
        drop(table);
        if emergency {
            self.counters
                .emergency_heads
                .fetch_add(1, Ordering::Relaxed);
        }
        // R§7.4: the old head is closed and the new one opened with its digest
        // first; the replica manager orders the RPCs (open new, close old, then
        // new data).
        let sink = &self.config.replicas;
        if old.slot != u32::MAX {
            sink.close(old.id);
        }
        sink.opened(new_id, SegmentRole::Head);
        sink.replicate(new_id, 0, head.meta_buf.len());
        if let Some(id) = left_log {
            sink.cleaned(&[], &[id]);
        }
        true
    }

    /// Closes the head and opens a new one now (the replica manager moves the head
    /// off a lost backup before new writes go to it, R§8). May use the emergency
    /// reserve; false if even that is gone.
    pub fn roll_head_now(&self) -> bool {
        let mut head = self.head.lock();
        self.roll_head(&mut head, AllocClass::Write, true)
    }

    /// The id of the current head segment.
    pub fn head_segment_id(&self) -> u64 {
        self.head.lock().writer.id
    }

    /// The id the next segment of this log will get (head, side or survivor):
    /// ids only grow, so every segment opened after this call has at least
    /// this id (a tablet's ctime, design notes "Tablet ctime").
    pub fn next_segment_id(&self) -> u64 {
        self.segments.lock().next_id
    }

    /// Closes the current head and opens a new one whose digest reflects the current
    /// segment table. Used after combined cleaning so survivors join the log and
    /// cleaned segments leave it. The new head takes only memory that writers could
    /// take anyway; below that it is an emergency head, which holds the digest alone
    /// and leaves the log at the next roll (L§7). A head taken from the cleaner's
    /// reserve would hand that reserve to writes and deletes, a seglet per pass:
    /// at 95% utilisation forced combined passes drained it until no compaction
    /// could start (docs/benchmarks.md, session 10).
    pub(crate) fn roll_head_for_cleaner(&self) -> bool {
        let mut head = self.head.lock();
        self.roll_head(&mut head, AllocClass::Write, true)
    }

    /// Appends `object`, preceded by a tombstone for the version it replaces, as one
    /// unit in the head. Returns where it landed; the object's reference is
    /// `Appended::entry`.
    pub fn append_object(
        &self,
        object: &NewObject<'_>,
        replaces: Option<DeadObject>,
    ) -> Result<Appended, AppendError> {
        let encoded = self.encode_object(object, replaces)?;
        let mut head = self.head.lock();
        let start = self.make_room(&mut head, encoded.total(), AllocClass::Write)?;
        let appended = self.write_object(&mut head.writer, object, &encoded, start);
        drop(head);
        self.object_appended(&encoded);
        Ok(appended)
    }

    /// [`Self::append_object`] with a completion record (RIFL §4.1): `record`, a
    /// whole encoded entry (`entry::encode_rpc_result`), goes right after the
    /// object in the same piece of the head, so the two are replicated and made
    /// durable together and recovery finds both or neither. Returns where the
    /// append landed and the record's reference.
    pub fn append_object_with_record(
        &self,
        object: &NewObject<'_>,
        replaces: Option<DeadObject>,
        record: &[u8],
    ) -> Result<(Appended, LogRef), AppendError> {
        let encoded = self.encode_object(object, replaces)?;
        let mut head = self.head.lock();
        let start = self.make_room(&mut head, encoded.total() + record.len(), AllocClass::Write)?;
        let mut appended = self.write_object(&mut head.writer, object, &encoded, start);
        let record_at = self.write_record(&mut head.writer, record);
        appended.len += record.len();
        drop(head);
        self.object_appended(&encoded);
        self.record_appended(record.len());
        Ok((appended, record_at))
    }

    /// Appends a completion record alone (one replayed from another master's log,
    /// RIFL §4.3): `record` is a whole encoded entry. Returns where it landed and
    /// its reference.
    pub fn append_record(&self, record: &[u8]) -> Result<(Appended, LogRef), AppendError> {
        if record.len() > self.max_entry_bytes {
            return Err(AppendError::TooLarge(record.len()));
        }
        let mut head = self.head.lock();
        let start = self.make_room(&mut head, record.len(), AllocClass::Write)?;
        let at = self.write_record(&mut head.writer, record);
        let appended = Appended {
            segment_id: head.writer.id,
            offset: start,
            len: record.len(),
            entry: at,
        };
        drop(head);
        self.record_appended(record.len());
        Ok((appended, at))
    }

    /// Writes a completion record at the end of `w` (which has room for it) and
    /// counts it live in `w`'s slot, as an object is: it lives until its owner
    /// lets it go (`object_died`).
    pub(super) fn write_record(&self, w: &mut SegmentWriter, record: &[u8]) -> LogRef {
        let at = w.ref_at(w.length);
        w.write(&self.pool, record);
        w.note_entry(record.len());
        self.slots[w.slot as usize]
            .live_bytes
            .fetch_add(record.len() as u64, Ordering::Relaxed);
        at
    }

    /// Counts an appended completion record in the log's totals.
    pub(super) fn record_appended(&self, len: usize) {
        self.live_object_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        self.appended_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }

    /// The headers and checksums of `object` (and of the tombstone of the version
    /// it replaces), computed before any lock is taken.
    pub(super) fn encode_object(
        &self,
        object: &NewObject<'_>,
        replaces: Option<DeadObject>,
    ) -> Result<EncodedObject, AppendError> {
        let birth = self.clock();
        let obj_header = entry::object_header_with_expiry(
            object.table_id,
            object.version,
            birth,
            object.expires_at,
            object.key.len(),
            object.value.len(),
        );
        let obj_len = obj_header.as_bytes().len() + object.key.len() + object.value.len() + 4;
        let target = replaces.map(|dead| self.segment_id_of(dead.location));
        let tomb = replaces.zip(target).map(|(dead, seg)| {
            entry::tombstone_header(object.table_id, dead.version, seg, object.key.len())
        });
        let tomb_len = tomb.map_or(0, |h| h.as_bytes().len() + object.key.len() + 4);
        if obj_len > self.max_entry_bytes {
            return Err(AppendError::TooLarge(obj_len));
        }
        let obj_crc = entry::entry_crc(&[obj_header.as_bytes(), object.key, object.value]);
        let tomb = tomb.map(|h| (h, entry::entry_crc(&[h.as_bytes(), object.key])));
        Ok(EncodedObject {
            obj_header,
            obj_len,
            obj_crc,
            tomb,
            tomb_len,
            target,
        })
    }

    /// Writes an encoded object (its tombstone first) at `start`, the end of `w`,
    /// which has room for it; counts it in `w`'s slot. The caller holds whatever
    /// lock owns `w` (the head lock, or a side log's).
    pub(super) fn write_object(
        &self,
        w: &mut SegmentWriter,
        object: &NewObject<'_>,
        e: &EncodedObject,
        start: usize,
    ) -> Appended {
        if let Some((h, crc)) = &e.tomb {
            w.write(&self.pool, h.as_bytes());
            w.write(&self.pool, object.key);
            w.write(&self.pool, &crc.to_le_bytes());
        }
        let obj_offset = w.length;
        w.write(&self.pool, e.obj_header.as_bytes());
        w.write(&self.pool, object.key);
        w.write(&self.pool, object.value);
        w.write(&self.pool, &e.obj_crc.to_le_bytes());
        w.note_entry(e.obj_len.max(e.tomb_len));
        let appended = Appended {
            segment_id: w.id,
            offset: start,
            len: e.total(),
            entry: w.ref_at(obj_offset),
        };
        self.slots[w.slot as usize]
            .live_bytes
            .fetch_add(e.obj_len as u64, Ordering::Relaxed);
        if let Some(target) = e.target {
            self.tombstone_appended(target, w, e.tomb_len);
        }
        appended
    }

    /// Counts an appended object in the log's totals (after its lock is let go).
    pub(super) fn object_appended(&self, e: &EncodedObject) {
        self.live_object_bytes
            .fetch_add(e.obj_len as u64, Ordering::Relaxed);
        self.tombstone_bytes
            .fetch_add(e.tomb_len as u64, Ordering::Relaxed);
        self.appended_bytes
            .fetch_add(e.total() as u64, Ordering::Relaxed);
    }

    /// Appends a tombstone for the object at `dead.location` (a delete). May use the
    /// room kept for deletes.
    pub fn append_tombstone(
        &self,
        table_id: u64,
        key: &[u8],
        dead: DeadObject,
    ) -> Result<Appended, AppendError> {
        self.append_tombstones(table_id, key, dead, None, None)
            .map(|(a, _)| a)
    }

    /// [`Self::append_tombstone`] followed, in the same piece of the head, by the
    /// completion record `record` of the delete (RIFL §4.1); returns the record's
    /// reference too.
    pub fn append_tombstone_with_record(
        &self,
        table_id: u64,
        key: &[u8],
        dead: DeadObject,
        record: &[u8],
    ) -> Result<(Appended, LogRef), AppendError> {
        self.append_tombstones(table_id, key, dead, None, Some(record))
            .map(|(a, r)| (a, r.unwrap_or(a.entry)))
    }

    /// Appends the tombstone of a delete (as [`Self::append_tombstone`]) and, while
    /// `hold` is held, a second one for the same key and version naming the hold
    /// (`holds`), in one piece of the head: they are durable together, and either
    /// both are in the log or neither is. A released hold adds nothing.
    pub fn append_held_tombstone(
        &self,
        table_id: u64,
        key: &[u8],
        dead: DeadObject,
        hold: TombstoneHold,
    ) -> Result<Appended, AppendError> {
        self.append_tombstones(table_id, key, dead, Some(hold.id()), None)
            .map(|(a, _)| a)
    }

    /// [`Self::append_held_tombstone`] followed, in the same piece of the head,
    /// by the completion record `record` of the delete (RIFL §4.1): an
    /// exactly-once delete on a tablet migrating in (K§2.3.4) keeps its record
    /// like any other. Returns the record's reference too.
    pub fn append_held_tombstone_with_record(
        &self,
        (table_id, key): (u64, &[u8]),
        dead: DeadObject,
        hold: TombstoneHold,
        record: &[u8],
    ) -> Result<(Appended, LogRef), AppendError> {
        self.append_tombstones(table_id, key, dead, Some(hold.id()), Some(record))
            .map(|(a, r)| (a, r.unwrap_or(a.entry)))
    }

    fn append_tombstones(
        &self,
        table_id: u64,
        key: &[u8],
        dead: DeadObject,
        hold: Option<u64>,
        record: Option<&[u8]>,
    ) -> Result<(Appended, Option<LogRef>), AppendError> {
        let record_len = record.map_or(0, <[u8]>::len);
        let seg = self.segment_id_of(dead.location);
        let header = entry::tombstone_header(table_id, dead.version, seg, key.len());
        let len = header.as_bytes().len() + key.len() + 4;
        let held = hold.map(|h| {
            let header = entry::tombstone_header(table_id, dead.version, h, key.len());
            let crc = entry::entry_crc(&[header.as_bytes(), key]);
            (h, header, crc, header.as_bytes().len() + key.len() + 4)
        });
        let held_len = held.map_or(0, |(_, _, _, l)| l);
        if len.max(held_len) > self.max_entry_bytes {
            return Err(AppendError::TooLarge(len.max(held_len)));
        }
        let crc = entry::entry_crc(&[header.as_bytes(), key]);
        let mut head = self.head.lock();
        // A hold released meanwhile adds nothing (checked again below); the room
        // for its tombstone then stays unused.
        let start = self.make_room(&mut head, len + held_len + record_len, AllocClass::Delete)?;
        // Checked and listed under the segment table's mutex, so a release never
        // misses a tombstone naming its hold (`holds`). Lock order: head, then
        // segments (`log`).
        let table = hold.map(|_| self.segments.lock());
        let held = held.filter(|(h, ..)| table.as_ref().is_some_and(|t| t.holds.is_active(*h)));
        let w = &mut head.writer;
        w.write(&self.pool, header.as_bytes());
        w.write(&self.pool, key);
        w.write(&self.pool, &crc.to_le_bytes());
        w.note_entry(len);
        self.tombstone_appended(seg, w, len);
        let mut total = len;
        if let Some((h, header, crc, held_len)) = held {
            w.write(&self.pool, header.as_bytes());
            w.write(&self.pool, key);
            w.write(&self.pool, &crc.to_le_bytes());
            w.note_entry(held_len);
            self.tombstone_appended(h, w, held_len);
            total += held_len;
        }
        drop(table);
        let entry = w.ref_at(start);
        let record_at = record.map(|r| self.write_record(w, r));
        let appended = Appended {
            segment_id: w.id,
            offset: start,
            len: total + record_len,
            entry,
        };
        drop(head);
        self.tombstone_bytes
            .fetch_add(total as u64, Ordering::Relaxed);
        self.appended_bytes
            .fetch_add(total as u64, Ordering::Relaxed);
        if record_len > 0 {
            self.record_appended(record_len);
        }
        Ok((appended, record_at))
    }

    /// Makes sure the head can take `len` more bytes, rolling to a new head if it is
    /// full or an emergency head; returns the offset where they will go.
    fn make_room(
        &self,
        head: &mut Head,
        len: usize,
        class: AllocClass,
    ) -> Result<usize, AppendError> {
        if head.emergency || head.writer.room() < len {
            self.reclaim();
            if !self.roll_head(head, class, false) {
                return Err(AppendError::NoSpace);
            }
        }
        if !self.adopt(&mut head.writer, len, class) {
            self.reclaim();
            if !self.adopt(&mut head.writer, len, class) {
                return Err(AppendError::NoSpace);
            }
        }
        Ok(head.writer.length)
    }

    /// Reports an append to the replica sink; call after releasing bucket locks and
    /// before acknowledging the operation.
    pub fn replicate(&self, appended: &Appended) {
        self.config
            .replicas
            .replicate(appended.segment_id, appended.offset, appended.len);
    }

    /// A tombstone of `len` bytes naming segment `target` was appended to the head `w`
    /// (head lock held): listed and counted together, as `tombstones` requires.
    fn tombstone_appended(&self, target: u64, w: &SegmentWriter, len: usize) {
        self.tombstone_targets
            .lock()
            .add(target, w.id, w.slot, len as u64);
        self.slots[w.slot as usize]
            .tombstone_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
    }
}

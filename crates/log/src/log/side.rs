//! Side logs (K§2.3; RAMCloud's `SideLog`): segments a bulk writer fills apart
//! from the head, replicated lazily in whole segments, that join the log all at
//! once with one new digest.
//!
//! A migration's target replays pulled records into side logs (one per puller)
//! instead of the head: a client's write in the head then never waits for the
//! replication of pulled bytes appended before it (R§4.2 group commit makes an
//! acknowledgement wait for everything before it in its segment), and pulled
//! bytes go to backups in whole segments, once, after the pull, instead of one
//! `replicate` per record. Design notes "Migration (Rocksteady)", "Where pulled records go".
//!
//! Life of a side segment: it enters the segment table as [`SegmentState::Side`]
//! (so tombstones naming it stay live and the cleaner leaves it alone) and no
//! digest names it; once full it is closed in memory, and nothing is sent to
//! backups while the bulk writer runs (K§2.3.4: re-replication is deferred until
//! the migration has pulled everything, the source's log being the durable copy
//! meanwhile). [`Log::seal_side_logs`] hands every segment to the replica sink
//! whole, as a survivor of cleaning is (opened, replicated, closed), and
//! [`Log::commit_side_logs`] seals, waits until
//! all are closed on their replicas ([`crate::ReplicaSink::sync_closed`]), marks
//! them closed and rolls the head, whose digest names them: that digest is the
//! one metadata record that commits them (L§6.4: replicas before the digest). A
//! crash before the commit loses them from this log (recovery reads only what a
//! digest names); their caller must hold another durable copy until then (the
//! migration's source does).
//!
//! Reads of side entries never wait for replication (the slot is read-durable
//! from the start): for the same reason, the other durable copy exists.
//!
//! Lock order: a side log's mutex comes after a bucket lock and before
//! `segments` (like `head`); a side log's mutex and `head` are never held
//! together.

use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use super::{Log, SegmentMeta, SegmentState};
use crate::entry;
use crate::log::head::{AppendError, Appended, DeadObject, NewObject};
use crate::pool::AllocClass;
use crate::replica::SegmentRole;
use crate::segment::SegmentWriter;
use crate::LogRef;

/// A side log of one [`Log`]: its open segment and the full ones not yet
/// committed. Thread-safe (one mutex); meant for one bulk writer, so the mutex
/// is uncontended. Use it only with the log it was first appended to.
#[derive(Debug, Default)]
pub struct SideLog {
    state: Mutex<SideState>,
}

#[derive(Debug, Default)]
struct SideState {
    /// The segment being filled.
    writer: Option<SegmentWriter>,
    /// Full segments (id, length), not yet handed to the replica sink: that
    /// happens when the side log is sealed (K§2.3.4: re-replication is
    /// deferred until the migration has pulled everything).
    full: Vec<(u64, usize)>,
    /// Bytes appended (entries and segment headers) since the last commit.
    bytes: u64,
}

impl SideLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ids of the segments not committed yet (the open one last).
    pub fn segment_ids(&self) -> Vec<u64> {
        let st = self.state.lock();
        st.full
            .iter()
            .map(|&(id, _)| id)
            .chain(st.writer.as_ref().map(|w| w.id))
            .collect()
    }

    /// Bytes appended since the last commit.
    pub fn bytes(&self) -> u64 {
        self.state.lock().bytes
    }
}

impl Log {
    /// Appends `object` (preceded by a tombstone for the version it replaces) to
    /// side log `side`, opening a new side segment when the current one is full.
    /// Nothing is reported to the replica sink per entry; see the module doc.
    pub fn append_side(
        &self,
        side: &SideLog,
        object: &NewObject<'_>,
        replaces: Option<DeadObject>,
    ) -> Result<Appended, AppendError> {
        let encoded = self.encode_object(object, replaces)?;
        let total = encoded.total();
        let mut st = side.state.lock();
        let w = self.side_room(&mut st, total)?;
        let start = w.length;
        let appended = self.write_object(w, object, &encoded, start);
        st.bytes += total as u64;
        drop(st);
        self.object_appended(&encoded);
        Ok(appended)
    }

    /// Appends a whole completion record (`entry::encode_rpc_result`) to side
    /// log `side`, counted live as [`Self::append_record`] counts one in the
    /// head: a migration's target installs the records that move with the
    /// range's objects (RIFL §4.3, K§2.3) where it puts the objects, so they are
    /// replicated and committed with them.
    pub fn append_side_record(&self, side: &SideLog, record: &[u8]) -> Result<LogRef, AppendError> {
        if record.len() > self.max_entry_bytes {
            return Err(AppendError::TooLarge(record.len()));
        }
        let mut st = side.state.lock();
        let w = self.side_room(&mut st, record.len())?;
        let at = self.write_record(w, record);
        st.bytes += record.len() as u64;
        drop(st);
        self.record_appended(record.len());
        Ok(at)
    }

    /// The open segment of `st` with `total` bytes of room reserved, opening a
    /// new side segment when the current one is full.
    fn side_room<'s>(
        &self,
        st: &'s mut SideState,
        total: usize,
    ) -> Result<&'s mut SegmentWriter, AppendError> {
        let fits = st.writer.as_ref().is_some_and(|w| w.room() >= total);
        if !fits {
            if let Some(full) = st.writer.take() {
                let done = self.close_side_segment(full);
                st.full.push(done);
            }
            let header_len = self.open_side_segment(st, total)?;
            st.bytes += header_len as u64;
        }
        // Set just above when absent; `open_side_segment` returns only with one.
        let Some(w) = st.writer.as_mut() else {
            return Err(AppendError::NoSpace);
        };
        if !self.adopt(w, total, AllocClass::Write) {
            self.reclaim();
            if !self.adopt(w, total, AllocClass::Write) {
                return Err(AppendError::NoSpace);
            }
        }
        Ok(w)
    }

    /// Commits every segment of `sides` to the log (module doc): hands over the
    /// open ones ([`Self::seal_side_logs`]), waits until all are closed on their
    /// replicas ([`crate::ReplicaSink::sync_closed`]), then joins them
    /// ([`Self::join_side_segments`]). Blocks on replication: call it off any
    /// async runtime, after the side logs' writers have stopped. Returns the
    /// committed segment ids. The side logs can be used again.
    pub fn commit_side_logs(&self, sides: &[&SideLog]) -> Vec<u64> {
        let ids = self.seal_side_logs(sides);
        if !ids.is_empty() {
            self.config.replicas.sync_closed(&ids);
            self.join_side_segments(&ids);
        }
        ids
    }

    /// The first step of a commit that waits for replication its own way (a
    /// server polls its replica manager instead of blocking a thread): closes
    /// the open segments of `sides`, hands every segment they hold to the
    /// replica sink whole and returns their ids, which leave the side logs.
    /// Never blocks.
    pub fn seal_side_logs(&self, sides: &[&SideLog]) -> Vec<u64> {
        let mut sealed = Vec::new();
        for side in sides {
            let mut st = side.state.lock();
            if let Some(w) = st.writer.take() {
                let done = self.close_side_segment(w);
                st.full.push(done);
            }
            sealed.append(&mut st.full);
            st.bytes = 0;
        }
        // Replicated only now, all at once (module doc): while pulling, the
        // migration's CPU and the backups' disks went to the pull alone.
        let sink = &self.config.replicas;
        for &(id, length) in &sealed {
            sink.opened(id, SegmentRole::Side);
            sink.replicate(id, 0, length);
            sink.close(id);
        }
        sealed.into_iter().map(|(id, _)| id).collect()
    }

    /// The last step of a commit: side segments `ids` (from
    /// [`Self::seal_side_logs`]), which the caller has seen closed on all their
    /// replicas, join the log: closed, and named by the digest of a new head, the
    /// one record that commits them (R§7.4, L§6.4). Never blocks for long.
    pub fn join_side_segments(&self, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        {
            let mut table = self.segments.lock();
            for id in ids {
                if let Some(m) = table.by_id.get_mut(id) {
                    if m.state == SegmentState::Side {
                        m.state = SegmentState::Closed;
                    }
                }
            }
        }
        self.roll_head_now();
        self.config.replicas.cleaned(ids, &[]);
    }

    /// Opens a new segment for `st` with room for `need` bytes after its header;
    /// returns the header's length.
    fn open_side_segment(&self, st: &mut SideState, need: usize) -> Result<usize, AppendError> {
        for attempt in 0..2 {
            if attempt == 1 {
                // Seglets may be waiting for their epoch only.
                self.reclaim();
            }
            let mut table = self.segments.lock();
            let Some(&slot) = table.free_slots.last() else {
                return Err(AppendError::NoSpace);
            };
            let id = table.next_id;
            let mut header = Vec::new();
            entry::encode_segment_header(self.config.master_id, id, &mut header);
            let mut w = SegmentWriter::new(id, slot, self.config.segment_bytes);
            if header.len() + need > w.room() {
                return Err(AppendError::TooLarge(need));
            }
            // Same order as a head roll: `segments`, then the pool.
            // All or nothing: a failed reservation leaves `w` without seglets.
            if !self.adopt(&mut w, header.len() + need, AllocClass::Write) {
                continue;
            }
            table.free_slots.pop();
            table.next_id += 1;
            let c = &self.slots[slot as usize];
            c.segment_id.store(id, Ordering::Release);
            c.live_bytes.store(0, Ordering::Relaxed);
            c.tombstone_bytes.store(0, Ordering::Relaxed);
            c.read_durable.store(true, Ordering::Release);
            table.by_id.insert(
                id,
                SegmentMeta {
                    id,
                    slot,
                    seglets: Vec::new(),
                    mem_length: 0,
                    disk_length: 0,
                    created_at: self.clock(),
                    max_entry_bytes: 0,
                    state: SegmentState::Side,
                    replicated: self.config.replicas.durable_on_close(),
                },
            );
            drop(table);
            w.write(&self.pool, &header);
            w.note_entry(header.len());
            self.appended_bytes
                .fetch_add(header.len() as u64, Ordering::Relaxed);
            st.writer = Some(w);
            return Ok(header.len());
        }
        Err(AppendError::NoSpace)
    }

    /// A side segment is full (or being sealed): it takes its seglets into the
    /// segment table; returns its id and length, for the replica sink at the
    /// seal ([`Self::seal_side_logs`]).
    fn close_side_segment(&self, mut w: SegmentWriter) -> (u64, usize) {
        let spare = w.trim_unused();
        if !spare.is_empty() {
            self.pool.release(&spare);
        }
        let (id, length) = (w.id, w.length);
        {
            let mut table = self.segments.lock();
            if let Some(m) = table.by_id.get_mut(&id) {
                m.seglets = std::mem::take(&mut w.seglets);
                m.mem_length = length;
                m.disk_length = length;
                m.max_entry_bytes = w.max_entry_bytes;
            }
        }
        (id, length)
    }
}

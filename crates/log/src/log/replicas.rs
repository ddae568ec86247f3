//! What the replica manager reads from the log and tells it (R§4.2, L§6.4): where
//! an entry sits in its segment, a segment's bytes as they are in memory, and which
//! segments are durable.

use std::sync::atomic::Ordering;

use super::{Log, SegmentState};
use crate::pool::SegletPool;
use crate::{LogRef, SEGLET_BYTES};

impl Log {
    /// The segment holding the entry at `r` and the entry's offset in it. Meant for
    /// entries whose segment is not yet read-durable ([`Log::is_read_durable`]):
    /// such a segment has never been compacted, so the offset is the one its
    /// replicas use. (A compacted segment's entries move to new offsets in memory.)
    pub fn position_of(&self, r: LogRef) -> (u64, usize) {
        let seglet = SegletPool::seglet_of(r) as usize;
        let index = self.seglet_index[seglet].load(Ordering::Acquire) as usize;
        let within = (r.0 % SEGLET_BYTES as u64) as usize;
        (self.segment_id_of(r), index * SEGLET_BYTES + within)
    }

    /// Appends bytes `[from, length)` of segment `segment_id` as they are in memory
    /// to `out`, and returns the segment's length: the head's bytes so far, or a
    /// closed segment's whole (possibly compacted) contents. `None` if the segment
    /// is no longer in memory (it was cleaned, or was an emergency head).
    ///
    /// The replica manager's one read of the log (R§4.2); a compacted segment is
    /// re-replicated in its compacted form (L§6.4). Sleeps while a compaction of the
    /// segment is in progress (a few milliseconds; see `compaction`).
    pub fn copy_for_replica(
        &self,
        segment_id: u64,
        from: usize,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        self.copy_for_replica_upto(segment_id, from, usize::MAX, out)
    }

    /// [`Self::copy_for_replica`] of bytes `[from, min(upto, length))` only; still
    /// returns the segment's whole length. A round of a segment complete when
    /// opened (a survivor, a migration's side segment) sends at most 1 MiB of it:
    /// copying the whole rest of the segment for each round and truncating it
    /// copied (and faulted in) 4.5 times an 8 MiB segment (issue 20, session 34).
    pub fn copy_for_replica_upto(
        &self,
        segment_id: u64,
        from: usize,
        upto: usize,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        {
            let head = self.head.lock();
            let w = &head.writer;
            if w.id == segment_id {
                self.copy_range(&w.seglets, from, w.length.min(upto), out);
                return Some(w.length);
            }
        }
        loop {
            // Seglets of a closed segment are only reused after every operation
            // pinned before they were retired has finished (epochs), so pin before
            // looking.
            let pin = self.pin();
            let (seglets, length) = {
                let table = self.segments.lock();
                let meta = table.by_id.get(&segment_id)?;
                match meta.state {
                    // It stopped being the head's writer between the two locks but
                    // `roll_head` has not handed its seglets over yet: cannot
                    // happen, both happen under the head lock; be safe anyway.
                    SegmentState::Head => return None,
                    // Half old, half new chain: wait for the pass (a few ms), and
                    // unpinned — it waits for pins to reuse the old seglets.
                    SegmentState::Compacting => None,
                    // Its memory became its survivor's; the survivor replaces it
                    // in the log once durable, and the pass that does so waits
                    // for the replica manager, so waiting here could deadlock.
                    SegmentState::Leaving => return None,
                    _ => Some((meta.seglets.clone(), meta.mem_length)),
                }
            }
            .unzip();
            let (Some(seglets), Some(length)) = (seglets, length) else {
                drop(pin);
                self.config
                    .clock
                    .sleep_blocking(std::time::Duration::from_micros(100));
                continue;
            };
            self.copy_range(&seglets, from, length.min(upto), out);
            return Some(length);
        }
    }

    fn copy_range(&self, seglets: &[u32], from: usize, to: usize, out: &mut Vec<u8>) {
        let mut offset = from;
        out.reserve(to.saturating_sub(from));
        while offset < to {
            let index = offset / SEGLET_BYTES;
            let within = offset % SEGLET_BYTES;
            let n = (SEGLET_BYTES - within).min(to - offset);
            out.extend_from_slice(&self.pool.seglet_tail(seglets[index], within)[..n]);
            offset += n;
        }
    }

    /// Segment `segment_id` is closed on all its replicas: reads of it need not wait
    /// and the cleaner may take it (R§4.2, L§6.4). Unknown ids are ignored.
    pub fn segment_replicated(&self, segment_id: u64) {
        let mut table = self.segments.lock();
        if let Some(meta) = table.by_id.get_mut(&segment_id) {
            meta.replicated = true;
            self.slots[meta.slot as usize]
                .read_durable
                .store(true, Ordering::Release);
        }
    }

    /// Whether the entry at `r` is in a segment whose every entry is durable; when
    /// false the caller waits for the head's replication before returning it.
    pub fn is_read_durable(&self, r: LogRef) -> bool {
        self.slots[self.slot_of(r) as usize]
            .read_durable
            .load(Ordering::Acquire)
    }
}

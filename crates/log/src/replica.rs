//! The replica seam: where the log reports bytes that must become durable (R§4.2,
//! L§6.4).
//!
//! [`NoReplicas`] keeps everything in DRAM (R = 0); benchmarks plug in a sink
//! throttled to a backup bandwidth; a storage server plugs in its replica manager,
//! which sends the bytes to backups and tells the log back what became durable
//! (`Log::replica_progress`).
//!
//! The order of calls for one segment is: `opened`, then `replicate` any number of
//! times with growing ranges, then `close`. A head is opened (header and digest
//! first, R§7.4) right after the previous head was closed; survivors of combined
//! cleaning are opened, replicated whole and closed at once, and the cleaner waits
//! in `sync_closed` until they are durable before it writes the digest that names
//! them (L§6.4).

/// Why a segment was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentRole {
    /// A log head (or emergency head): starts with a digest; appended to by writers.
    Head,
    /// A survivor segment of combined cleaning: complete when opened.
    Survivor,
    /// A migration's side-log segment (Rocksteady, issue 20): complete when opened,
    /// like a survivor, but it adds to the log where a survivor replaces more than
    /// it takes — so it may not use a backup's frames reserved for cleaning
    /// (docs/design-notes.md "Full backups").
    Side,
}

impl SegmentRole {
    /// Whether the segment's bytes are all known when it is opened (a survivor or
    /// a side-log segment), so it is sent whole and closed with its last bytes.
    pub fn complete_when_opened(self) -> bool {
        matches!(self, Self::Survivor | Self::Side)
    }
}

/// Receives every byte range the log needs replicated. Implementations are called
/// from writer threads and from cleaner threads concurrently, with no log lock held
/// except where a method says so.
pub trait ReplicaSink: Send + Sync {
    /// Segment `segment_id` begins; its bytes will follow. Called with the log's head
    /// lock held for heads: must not block.
    fn opened(&self, segment_id: u64, role: SegmentRole) {
        let _ = (segment_id, role);
    }

    /// Bytes `[offset, offset + len)` of segment `segment_id` were appended (to the
    /// head, or to a survivor segment of combined cleaning) and must be replicated
    /// before the caller acknowledges anything in them. Must not block for long.
    fn replicate(&self, segment_id: u64, offset: usize, len: usize);

    /// Segment `segment_id` will receive no more bytes; its replicas can be closed.
    fn close(&self, segment_id: u64);

    /// Blocks until every segment of `segment_ids` is closed on all its replicas.
    /// Called by the cleaner (never by a writer) before the digest naming them.
    fn sync_closed(&self, segment_ids: &[u64]) {
        let _ = segment_ids;
    }

    /// A combined-cleaning pass finished (or an emergency head left the log):
    /// `survivors` are now part of the log (named in the newest digest) and the
    /// replicas of `freed` segments may be freed once that digest is durable.
    fn cleaned(&self, survivors: &[u64], freed: &[u64]);

    /// True when a segment is durable as soon as it is closed (no backups to wait
    /// for): the log then never holds back reads or cleaning for replication.
    fn durable_on_close(&self) -> bool {
        false
    }
}

/// The sink used with no replication (R = 0): replicates nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoReplicas;

impl ReplicaSink for NoReplicas {
    fn replicate(&self, _segment_id: u64, _offset: usize, _len: usize) {}
    fn close(&self, _segment_id: u64) {}
    fn cleaned(&self, _survivors: &[u64], _freed: &[u64]) {}
    fn durable_on_close(&self) -> bool {
        true
    }
}

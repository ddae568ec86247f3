//! The replica seam: where the log reports bytes that must become durable (R§4.2,
//! L§6.4).
//!
//! Until the durability layer exists this is a no-op ([`NoReplicas`]); benchmarks
//! plug in a sink throttled to a backup bandwidth so that the disk-bandwidth
//! trade-off that two-level cleaning exists for is visible.

/// Receives every byte range the log needs replicated. Implementations are called
/// from writer threads and from cleaner threads concurrently.
pub trait ReplicaSink: Send + Sync {
    /// Bytes `[offset, offset + len)` of segment `segment_id` were appended (to the
    /// head, or to a survivor segment of combined cleaning) and must be replicated
    /// before the caller acknowledges anything in them. May block (back-pressure).
    fn replicate(&self, segment_id: u64, offset: usize, len: usize);

    /// Segment `segment_id` will receive no more bytes; its replicas can be closed.
    fn close(&self, segment_id: u64);

    /// A combined-cleaning pass finished: `survivors` are now part of the log (named
    /// in the newest digest) and the replicas of `freed` segments may be freed.
    fn cleaned(&self, survivors: &[u64], freed: &[u64]);
}

/// The sink used before durability exists: replicates nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoReplicas;

impl ReplicaSink for NoReplicas {
    fn replicate(&self, _segment_id: u64, _offset: usize, _len: usize) {}
    fn close(&self, _segment_id: u64) {}
    fn cleaned(&self, _survivors: &[u64], _freed: &[u64]) {}
}

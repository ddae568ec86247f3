//! How much memory a one-segment cleaning pass takes before it starts (L§7): the
//! bound from which the log sizes the cleaner's reserve, and which compaction and
//! the one-segment combined pass (`cleaner::in_place`) keep to as they copy.
//!
//! A leaf of the crate: the log needs it to size its pool, the cleaner to size its
//! passes, and neither has to know the other for it.

use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES, SEGLET_BYTES};

/// A batch of objects waiting for their buckets is relocated once it spans this
/// many bytes of the source, even if it holds fewer than `RELOCATION_BATCH`
/// objects: it bounds how far the scan runs ahead of the seglets already retired.
pub(crate) const BATCH_SPAN_BYTES: usize = SEGLET_BYTES;

/// Seglets a compaction takes before it starts, beyond its own segment's, for a
/// segment whose longest entry is `largest_entry` bytes: enough for the copy to
/// run one batch span plus one such entry ahead of the source seglets it has
/// retired, plus one partly filled seglet at each end.
pub(crate) fn upfront_seglets_for(largest_entry: usize) -> usize {
    (BATCH_SPAN_BYTES + largest_entry).div_ceil(SEGLET_BYTES) + 2
}

/// The most [`upfront_seglets_for`] any segment of a log of `segment_bytes`
/// segments can need: its entries are at most half a segment
/// (`Log::max_entry_bytes`). The cleaner's reserve is sized from it.
pub(crate) fn upfront_seglets(segment_bytes: usize) -> usize {
    upfront_seglets_for(largest_possible_entry(segment_bytes))
}

/// The longest entry a segment of `segment_bytes` can hold: the bound a pass uses
/// for a segment that does not know its own longest entry.
pub(crate) fn largest_possible_entry(segment_bytes: usize) -> usize {
    (MAX_KEY_BYTES + MAX_VALUE_BYTES + crate::entry::MAX_HEADER_BYTES).min(segment_bytes / 2)
}

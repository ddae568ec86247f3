//! Level 1 of the two-level cleaner: segment compaction (L§4.1). It rewrites the
//! closed segment that frees the most seglets per seglet it copies (the lowest
//! live share in memory) into fewer seglets, keeping its
//! id, so its replicas on disk are untouched; the copy reuses the segment's own
//! seglets as it goes (`in_place`).

use super::in_place::Pass;
use super::{Cleaner, CpuCharge, PassOutcome, Relocator};
use crate::segment::SegmentWriter;
use crate::upfront::{largest_possible_entry, upfront_seglets_for};
use crate::SEGLET_BYTES;

impl Cleaner<'_> {
    /// Compacts one segment (module doc). Returns `None` when no segment has a
    /// seglet to gain or the pool cannot give the pass its up-front seglets.
    pub fn compact(&self, relocator: &dyn Relocator) -> Option<PassOutcome> {
        let log = self.log;
        let _cpu = CpuCharge::start(&log.counters.cpu_ns);
        let meta = self.pick_for_compaction()?;
        // Both bounds hold whatever the counters say (`in_place`). A segment that
        // does not know its longest entry gets the largest possible one.
        let largest_entry = match meta.max_entry_bytes {
            0 => largest_possible_entry(log.config.segment_bytes),
            n => n,
        };
        let upfront = meta
            .mem_length
            .min(upfront_seglets_for(largest_entry) * SEGLET_BYTES);
        let mut w = SegmentWriter::new(meta.id, meta.slot, log.config.segment_bytes);
        if !log.cleaner_reserve(&mut w, upfront) {
            self.no_memory(std::slice::from_ref(&meta));
            return None;
        }
        // From here on the pass cannot fail: it gives source seglets away as it goes.
        let mut pass = Pass::new(log, &meta, w, None);
        self.copy_in_place(&mut pass, relocator);
        Some(self.commit_compaction(&meta, pass))
    }
}

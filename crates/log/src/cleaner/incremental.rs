//! Level 2 of the two-level cleaner, one segment at a time: combined cleaning of
//! one segment in bounded memory (L§4.2, L§7), the cleaner that cannot get stuck.
//!
//! A batch combined pass (`combined`) takes every seglet its survivors may need
//! before it reads its victims, so a victim whose live data is larger than the free
//! memory cannot be cleaned at all. That is exactly the state a full log reaches:
//! compaction has squeezed every segment down to its live objects and tombstones,
//! the tombstones name segments that are still in the on-disk log, and only
//! cleaning those segments on disk — a combined pass — can kill them. With 8 MiB
//! segments and the pool down to the cleaner's reserve (23 seglets, about 1.4 MiB)
//! no victim fits, no compaction gains a seglet, and the log stopped for good at
//! 64–128 MiB of memory (issue 17: free seglets stuck at 35–45, "cleaning needed:
//! Combined", every manual pass `None`).
//!
//! This pass cleans one segment the way compaction does (`in_place`), reusing the
//! victim's own seglets for its survivor as it goes, so it needs only
//! `upfront::upfront_seglets_for` its longest entry (plus one seglet
//! for the survivor's header) beyond its victim: always within the cleaner's
//! reserve. What differs from compaction:
//! - the copy is a new segment with its own header and id (a survivor), counted in
//!   its own counters, and the tombstones moved into it are moved in the lists;
//! - tombstones naming the victim itself stay behind (they die with it);
//! - once the copy is done the victim is `Leaving` — in the log until the
//!   survivor's replicas are durable and a new digest drops it (L§6.4), but no
//!   longer in memory, so re-replication treats it as gone (`copy_for_replica`).
//!
//! On its own it runs only when no other pass could make progress (`Cleaner::clean`):
//! it cleans one segment where a batch pass cleans up to 32 sorted by age, and it
//! writes a whole segment to backups where a compaction writes nothing. A batch
//! pass also hands it a first victim with more live entries than the batch's work
//! list may hold (`combined_work_list_entries`), so that list stays within
//! its bound (docs/design-notes.md "Memory outside the log"), and the victim that
//! gains most when its live data does not fit the memory free for the batch's
//! survivors — at 128 MiB and 90% utilisation almost every victim worth cleaning
//! (docs/design-notes.md "Cleaning always makes progress").

use super::in_place::{Pass, SurvivorCopy};
use super::{Cleaner, CpuCharge, PassOutcome, Relocator};
use crate::log::{SegmentMeta, SegmentState};
use crate::pool::AllocClass;
use crate::segment::SegmentWriter;
use crate::upfront::{largest_possible_entry, upfront_seglets_for};
use crate::SEGLET_BYTES;

impl Cleaner<'_> {
    /// Combined cleaning of the one segment that gains the most, in bounded memory
    /// (module doc). With `forced` (tombstones or the disk log force combined
    /// cleaning, `balancer::needs_combined`) a segment that only shrinks the disk
    /// log qualifies too; otherwise the victim must free memory or kill tombstones.
    /// `None` if no segment qualifies, another combined pass is running, or the pool
    /// cannot give the up-front seglets.
    pub fn clean_combined_incremental(
        &self,
        relocator: &dyn Relocator,
        forced: bool,
    ) -> Option<PassOutcome> {
        let _one_pass = self.log.combined_pass.try_lock()?;
        let _cpu = CpuCharge::start(&self.log.counters.cpu_ns);
        // Released holds' tombstones die here, where segments leave the log.
        self.log.expire_released_holds();
        let victim = self.pick_one_for_combined(forced)?;
        self.clean_one_combined_locked(victim, relocator)
    }

    /// The body of a one-segment combined pass over `victim`, a closed segment
    /// taken out of the cleaners' reach (`Cleaning` or `Compacting`; it is marked
    /// `Compacting` here: its chain is rewritten seglet by seglet). The caller holds
    /// `combined_pass` and charges the CPU time. A batch pass hands over a victim
    /// too large for its work list this way (`clean_combined_locked`). `None` if
    /// the pool cannot give the up-front seglets (the victim is given back).
    pub(super) fn clean_one_combined_locked(
        &self,
        victim: SegmentMeta,
        relocator: &dyn Relocator,
    ) -> Option<PassOutcome> {
        let log = self.log;
        if let Some(m) = log.segments.lock().by_id.get_mut(&victim.id) {
            m.state = SegmentState::Compacting;
        }
        let w = self.open_incremental_survivor(&victim)?;
        // The append-then-publish window: see `clean_combined_locked`.
        log.wait_for_operations();
        // From here on the pass cannot fail: it gives the victim's seglets away as
        // it goes.
        let mut pass = Pass::new(log, &victim, w, Some(SurvivorCopy::new()));
        self.copy_in_place(&mut pass, relocator);
        Some(self.commit_incremental(&victim, pass))
    }

    /// The survivor of a one-segment pass over `victim`, holding the up-front
    /// seglets and its header. The survivor's header is at most a few bytes longer
    /// than the victim's (a larger id), hence one seglet more than a compaction
    /// takes. `None`, with the victim given back, if the pool refuses.
    fn open_incremental_survivor(&self, victim: &SegmentMeta) -> Option<SegmentWriter> {
        let log = self.log;
        let largest_entry = match victim.max_entry_bytes {
            0 => largest_possible_entry(log.config.segment_bytes),
            n => n,
        };
        let upfront = (victim.mem_length.div_ceil(SEGLET_BYTES) + 1)
            .min(upfront_seglets_for(largest_entry) + 1);
        let mut got = Vec::with_capacity(upfront);
        if !log.pool.allocate(upfront, AllocClass::Cleaner, &mut got) {
            self.no_memory(std::slice::from_ref(victim));
            return None;
        }
        let mut w = self.open_survivor();
        w.attach(&log.pool, &got);
        log.map_seglets(&w, 0);
        let mut header = Vec::new();
        crate::entry::encode_segment_header(log.config.master_id, w.id, &mut header);
        w.write(&log.pool, &header);
        w.note_entry(header.len());
        Some(w)
    }
}

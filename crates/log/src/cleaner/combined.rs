//! Level 2 of the two-level cleaner: a batch combined pass (L§4.2, §6.1, §6.4).
//! It picks segments by cost-benefit, copies their live entries sorted by age into
//! new survivor segments, makes the survivors part of the log with a new digest,
//! then frees the cleaned segments. This file holds the pass's control flow; its
//! steps are in `plan`, `copy` and `commit`.

use super::copy::Scanned;
use super::plan::Victims;
use super::{Cleaner, CpuCharge, PassOutcome, Relocator};

impl Cleaner<'_> {
    /// One batch combined pass (module doc) that frees at least a seglet.
    pub fn clean_combined(&self, relocator: &dyn Relocator) -> Option<PassOutcome> {
        self.clean_combined_with_gain(relocator, 1)
    }

    /// Combined cleaning that runs only if it frees at least `min_gain_seglets` of
    /// memory (0: passes that only shrink the disk log or collect tombstones are
    /// allowed, but never one that uses more memory than it frees).
    pub fn clean_combined_with_gain(
        &self,
        relocator: &dyn Relocator,
        min_gain_seglets: usize,
    ) -> Option<PassOutcome> {
        // One pass at a time: segments leave the log only here, which keeps the
        // live-tombstone accounting exact (see `tombstones`).
        let _one_pass = self.log.combined_pass.lock();
        self.clean_combined_locked(relocator, min_gain_seglets)
    }

    /// `clean_combined_with_gain`, or `None` at once if another combined pass is
    /// running: a second cleaner thread compacts meanwhile instead of waiting (L§6).
    pub(super) fn try_clean_combined(
        &self,
        relocator: &dyn Relocator,
        min_gain_seglets: usize,
    ) -> Option<PassOutcome> {
        let _one_pass = self.log.combined_pass.try_lock()?;
        self.clean_combined_locked(relocator, min_gain_seglets)
    }

    /// The body of a combined pass; the caller holds `combined_pass`. Plan, take
    /// the survivors' memory, scan, copy, commit; a victim that cannot be cleaned
    /// in a batch is cleaned alone (`incremental`).
    fn clean_combined_locked(
        &self,
        relocator: &dyn Relocator,
        min_gain_seglets: usize,
    ) -> Option<PassOutcome> {
        let _cpu = CpuCharge::start(&self.log.counters.cpu_ns);
        // Released holds' tombstones die here, where segments leave the log.
        self.log.expire_released_holds();
        let budget_seglets = self.combined_budget_seglets();
        let (victims, keep_estimate) =
            match self.pick_for_combined(budget_seglets, min_gain_seglets)? {
                Victims::Batch(victims, keep) => (victims, keep),
                // The victim that gains most does not fit the memory free for
                // survivors: clean it alone, reusing its own seglets (L§7).
                Victims::Alone(victim) => {
                    return self.clean_one_combined_locked(victim, relocator);
                }
            };
        // Before the scan (module doc of `cleaner`: a pass takes its memory first).
        let mut stash = self.take_stash(&victims, keep_estimate)?;
        let in_log = self.log.live_segment_ids(&[]);
        // A writer appends under the head lock but publishes the new reference in the
        // hash table afterwards. If the head rolled in between, a victim can hold an
        // object that the lock-free liveness check in the scan would call dead. Every
        // such writer is pinned, so waiting for the pinned operations closes the
        // window.
        self.log.wait_for_operations();
        let mut list = match self.scan_victims(victims, &in_log, relocator) {
            Scanned::List(list) => list,
            // A victim with more live entries than the list holds (in L Table 1's
            // W6, a segment of 131,000 live tombstones: 9.4 MiB of list and moves
            // where the bound is 2 MiB) is cleaned alone, the way the bounded
            // one-segment pass cleans (L§7, `incremental`): no list, its own
            // seglets reused as it goes. The stash goes back first; that pass needs
            // only what the cleaner's reserve holds.
            Scanned::FirstTooLarge(first) => {
                self.log.pool.release(&stash);
                return self.clean_one_combined_locked(first, relocator);
            }
        };
        list.prepare();
        if !self.fit_stash(&list, &mut stash, min_gain_seglets) {
            return None;
        }
        let survivors = self.write_survivors(&list, stash, relocator);
        Some(self.commit_combined(list, survivors))
    }
}

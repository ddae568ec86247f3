//! Planning a pass (L§4.3, L§7): which segments to clean — by cost-benefit for
//! combined cleaning, by seglets freed per seglet copied for compaction — marking them so no other
//! pass takes them, and how many seglets the survivors may occupy.

use std::sync::atomic::Ordering;

use super::{Cleaner, MAX_SEGMENTS_PER_COMBINED_PASS, MAX_UTILIZATION_TO_CLEAN};
use crate::balancer;
use crate::log::{SegmentMeta, SegmentState};
use crate::pool::AllocClass;
use crate::SEGLET_BYTES;

/// What `Cleaner::pick_for_combined` chose, each marked `Cleaning`.
pub(super) enum Victims {
    /// Victims for a batch pass, and an upper bound of their live bytes.
    Batch(Vec<SegmentMeta>, usize),
    /// The best victim, whose live data does not fit the memory free for a batch
    /// pass's survivors: cleaned alone in bounded memory (`cleaner::incremental`).
    Alone(SegmentMeta),
}

/// Whether segment `m` may be a combined pass's victim: closed, on its backups, not
/// the head, and holding bytes on disk to win back.
fn combined_candidate(m: &SegmentMeta, head_id: u64) -> bool {
    m.state == SegmentState::Closed && m.replicated && m.id != head_id && m.disk_length > 0
}

impl Cleaner<'_> {
    /// The bytes cleaning segment `m` must keep: its live objects and tombstones.
    fn kept_bytes(&self, m: &SegmentMeta) -> usize {
        let c = &self.log.slots[m.slot as usize];
        (c.live_bytes.load(Ordering::Relaxed) + c.tombstone_bytes.load(Ordering::Relaxed)) as usize
    }

    /// Seglets a batch combined pass may give its survivors (L§7): what the
    /// cleaner may take from the pool, less the reserve compaction needs when
    /// two-level cleaning is on (`balancer::combined_budget_seglets`).
    pub(super) fn combined_budget_seglets(&self) -> usize {
        let budget = balancer::combined_budget_seglets(
            self.log.pool.available(AllocClass::Cleaner),
            self.log
                .config
                .compaction
                .then(|| self.log.pool.reserves().cleaner_seglets),
        );
        // Full backups (docs/design-notes.md "Full backups"): each survivor needs
        // a replica in the frames backups keep for cleaning, a few per backup, so
        // a pass writes at most one survivor segment's worth.
        match self.log.disk_budget_bytes() {
            Some(_) => budget.min(self.log.config.segment_bytes / SEGLET_BYTES),
            None => budget,
        }
    }

    /// Chooses victims for combined cleaning by cost-benefit — counting, besides the
    /// disk space a victim frees, the live tombstones elsewhere that die with it
    /// (`balancer::combined_benefit`) — and marks them
    /// `Cleaning`; their live bytes fit in `budget_seglets` with room for survivor
    /// fragmentation.
    ///
    /// When the best victim's live data does not fit the budget, it alone is
    /// returned, for the one-segment pass that needs no budget (`Victims::Alone`),
    /// rather than a batch of worse victims that fit. The budget is free memory, and
    /// a segment's live data is a fixed size: 7 MiB of a 90%-live 8 MiB segment is
    /// 0.7% of 1 GiB but 5.5% of 128 MiB, more than a log at 90% ever has free. At
    /// 128 MiB the batch pass then only ever cleaned the few segments already nearly
    /// empty on disk; the on-disk log grew to 1.3× memory, live tombstones (which
    /// live while the segment of the object they kill is on disk, L§3) took 6% of
    /// memory, and compaction copied 70 bytes per byte written where 1 GiB copies
    /// 12 (docs/benchmarks.md, issue 17 session 28). `min_gain_seglets` > 0 (the
    /// pass must free memory) admits only a victim that frees a seglet alone.
    pub(super) fn pick_for_combined(
        &self,
        budget_seglets: usize,
        min_gain_seglets: usize,
    ) -> Option<Victims> {
        let head_id = self.log.head_id();
        let now = self.log.clock();
        let mut table = self.log.segments.lock();
        // Lock order: segments, then the tombstone lists (a leaf).
        let targets = self.log.tombstone_targets.lock();
        let mut scored: Vec<(f64, u64, usize, usize)> = table
            .by_id
            .values()
            .filter(|m| combined_candidate(m, head_id))
            .filter_map(|m| {
                let keep = self.kept_bytes(m);
                let naming = targets.bytes_naming(m.id);
                let u = keep as f64 / m.disk_length.max(1) as f64;
                (u < MAX_UTILIZATION_TO_CLEAN || naming > 0).then(|| {
                    let age = now.saturating_sub(m.created_at);
                    let score = balancer::combined_benefit(m.disk_length, keep, naming, age);
                    (score, m.id, keep, m.seglets.len())
                })
            })
            .collect();
        drop(targets);
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        if let Some(&(_, id, keep, seglets)) = scored.first() {
            // A victim with less than a seglet of live data always fits a budget
            // that can hold anything; and one alone must gain what the caller asks.
            let alone = self.survivor_seglets_estimate(keep) > budget_seglets
                && keep >= SEGLET_BYTES
                && (min_gain_seglets == 0
                    || seglets >= keep.div_ceil(SEGLET_BYTES) + 1 + min_gain_seglets);
            if alone {
                let m = table.by_id.get_mut(&id)?;
                m.state = SegmentState::Cleaning;
                return Some(Victims::Alone(m.clone()));
            }
        }
        let mut chosen = Vec::new();
        let mut keep_total = 0usize;
        for (_, id, keep, _) in scored {
            if chosen.len() == MAX_SEGMENTS_PER_COMBINED_PASS {
                break;
            }
            if self.survivor_seglets_estimate(keep_total + keep) > budget_seglets {
                continue;
            }
            keep_total += keep;
            chosen.push(id);
        }
        if chosen.is_empty() {
            return None;
        }
        let victims = chosen
            .iter()
            .filter_map(|id| {
                table.by_id.get_mut(id).map(|m| {
                    m.state = SegmentState::Cleaning;
                    m.clone()
                })
            })
            .collect();
        Some(Victims::Batch(victims, keep_total))
    }

    /// Seglets the survivors of entries of these lengths (in copy order) occupy at
    /// most: the cleaner packs them in that order and starts a new survivor when the
    /// next entry does not fit, exactly as simulated here with a header at least as
    /// long as the real one. That packing never needs more survivors than this
    /// simulation (next-fit needs no more bins as capacity grows), and each survivor
    /// adds at most one partly filled seglet.
    pub(super) fn survivor_seglets_for(&self, lens: impl Iterator<Item = usize>) -> usize {
        const HEADER_BOUND_BYTES: usize = 32;
        let limit = self.log.config.segment_bytes;
        let (mut survivors, mut bytes, mut current) = (0usize, 0usize, 0usize);
        for len in lens {
            if survivors == 0 || current + len > limit {
                survivors += 1;
                current = HEADER_BOUND_BYTES;
                bytes += HEADER_BOUND_BYTES;
            }
            current += len;
            bytes += len;
        }
        bytes.div_ceil(SEGLET_BYTES) + survivors + 1
    }

    /// Seglets the survivors of these entries are expected to occupy: their bytes
    /// and headers, rounded up to whole seglets once per survivor.
    pub(super) fn survivor_seglets_expected(&self, lens: impl Iterator<Item = usize>) -> usize {
        const HEADER_BYTES: usize = 32;
        let limit = self.log.config.segment_bytes;
        let (mut seglets, mut current) = (0usize, 0usize);
        for len in lens {
            if current == 0 || current + len > limit {
                seglets += current.div_ceil(SEGLET_BYTES);
                current = HEADER_BYTES;
            }
            current += len;
        }
        seglets + current.div_ceil(SEGLET_BYTES)
    }

    /// A quick estimate of `survivor_seglets_for` before the victims are scanned (the
    /// exact figure decides after the scan).
    pub(super) fn survivor_seglets_estimate(&self, live_bytes: usize) -> usize {
        let survivors = live_bytes.div_ceil(self.log.config.segment_bytes / 2) + 1;
        live_bytes.div_ceil(SEGLET_BYTES) + survivors + 1
    }

    pub(super) fn release_victims(&self, victims: &[SegmentMeta]) {
        let mut table = self.log.segments.lock();
        for v in victims {
            if let Some(m) = table.by_id.get_mut(&v.id) {
                m.state = SegmentState::Closed;
            }
        }
    }

    /// The closed segment whose compaction copies the fewest seglets per seglet it
    /// frees, marked `Compacting`. Compacting a segment of live share u copies
    /// u/(1−u) bytes per byte freed (L§4.1), so the segment to compact is the one
    /// of lowest u in memory — a greedy choice by ratio, as LFS's greedy policy on
    /// disk. Ranking by seglets gained alone, as before, preferred a full-size
    /// segment over an already compacted one with the same dead bytes: at 90% of a
    /// 128 MiB log that copied 12.6 bytes per byte written against 11.3 by ratio
    /// (docs/benchmarks.md, issue 17 session 31). Among equal ratios, the oldest.
    pub(super) fn pick_for_compaction(&self) -> Option<SegmentMeta> {
        let head_id = self.log.head_id();
        let mut table = self.log.segments.lock();
        let best = table
            .by_id
            .values()
            .filter(|m| m.state == SegmentState::Closed && m.replicated && m.id != head_id)
            .filter_map(|m| {
                let kept = (self.kept_bytes(m) + 64).div_ceil(SEGLET_BYTES);
                let gain = m.seglets.len().saturating_sub(kept);
                (gain >= 1).then_some(Compactable {
                    gain,
                    kept,
                    created_at: m.created_at,
                    id: m.id,
                })
            })
            .max_by(Compactable::cmp_worth)?;
        let m = table.by_id.get_mut(&best.id)?;
        m.state = SegmentState::Compacting;
        Some(m.clone())
    }

    /// The closed segment a one-segment combined pass gains most from, marked
    /// `Compacting` (its chain is rewritten seglet by seglet, as in a compaction).
    /// Qualifies: a segment that frees at least one seglet beyond the head the pass
    /// opens, or that live tombstones elsewhere name (they die with it), or — when
    /// `forced` — one whose on-disk bytes are not almost all live. Ranked as batch
    /// victims are (`balancer::combined_benefit`).
    pub(super) fn pick_one_for_combined(&self, forced: bool) -> Option<SegmentMeta> {
        let head_id = self.log.head_id();
        let now = self.log.clock();
        let mut table = self.log.segments.lock();
        // Lock order: segments, then the tombstone lists (a leaf).
        let targets = self.log.tombstone_targets.lock();
        let best = table
            .by_id
            .values()
            .filter(|m| combined_candidate(m, head_id))
            .filter_map(|m| {
                let keep = self.kept_bytes(m);
                let naming = targets.bytes_naming(m.id);
                let frees_memory = m.seglets.len() >= keep.div_ceil(SEGLET_BYTES) + 2;
                let shrinks_disk =
                    forced && (keep as f64) < MAX_UTILIZATION_TO_CLEAN * m.disk_length as f64;
                (frees_memory || naming > 0 || shrinks_disk).then(|| {
                    let age = now.saturating_sub(m.created_at);
                    let score = balancer::combined_benefit(m.disk_length, keep, naming, age);
                    (score, m.id)
                })
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))?;
        drop(targets);
        let m = table.by_id.get_mut(&best.1)?;
        m.state = SegmentState::Compacting;
        Some(m.clone())
    }
}

/// A segment compaction could shrink: `gain` seglets freed for `kept` seglets
/// copied.
#[derive(Clone, Copy, Debug)]
struct Compactable {
    gain: usize,
    kept: usize,
    created_at: u64,
    id: u64,
}

impl Compactable {
    /// Orders by seglets freed per seglet copied (gain ÷ kept, compared by cross
    /// multiplication: exact, and a segment that keeps nothing ranks highest), then
    /// by age (older first).
    fn cmp_worth(a: &Self, b: &Self) -> std::cmp::Ordering {
        // Two seglet counts (each a usize) multiplied fit in u128: no overflow.
        let lhs = a.gain as u128 * b.kept as u128;
        let rhs = b.gain as u128 * a.kept as u128;
        lhs.cmp(&rhs).then(b.created_at.cmp(&a.created_at))
    }
}

#[cfg(test)]
mod tests {
    use super::Compactable;
    use std::cmp::Ordering;

    fn c(gain: usize, kept: usize, created_at: u64) -> Compactable {
        Compactable {
            gain,
            kept,
            created_at,
            id: 0,
        }
    }

    #[test]
    fn cmp_worth_prefers_fewer_seglets_copied_per_seglet_freed() {
        // A full 128-seglet segment freeing 12 copies 116: worse than a compacted
        // one freeing 10 of 60, though it frees more.
        assert_eq!(
            Compactable::cmp_worth(&c(12, 116, 0), &c(10, 50, 0)),
            Ordering::Less
        );
        assert_eq!(
            Compactable::cmp_worth(&c(1, 0, 5), &c(100, 1, 0)),
            Ordering::Greater
        );
    }

    #[test]
    fn cmp_worth_breaks_ties_by_age() {
        assert_eq!(
            Compactable::cmp_worth(&c(2, 4, 1), &c(4, 8, 9)),
            Ordering::Greater
        );
        assert_eq!(
            Compactable::cmp_worth(&c(2, 4, 9), &c(2, 4, 1)),
            Ordering::Less
        );
    }
}

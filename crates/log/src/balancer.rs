//! The balancer: when to clean, and which cleaner to run (L§5.2). Pure functions of
//! a few fractions, so the policy is tested without a log.

/// Which cleaner a pass should run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanKind {
    /// No cleaning is needed now.
    None,
    /// Segment compaction: in memory only, no backup I/O (L§4.1).
    Compaction,
    /// Combined cleaning: memory and disk together (L§4.2).
    Combined,
}

/// The facts the balancer decides from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BalancerInput {
    /// F: fraction of memory in seglets that ordinary writes may still take.
    pub free_fraction: f64,
    /// L: fraction of memory holding live objects.
    pub live_fraction: f64,
    /// T: fraction of memory holding tombstones.
    pub tombstone_fraction: f64,
    /// Bytes of the log on backups.
    pub disk_log_bytes: u64,
    /// Most bytes the on-disk log may use (expansion factor × memory).
    pub disk_limit_bytes: u64,
    /// Whether compaction is enabled (two-level cleaning).
    pub compaction: bool,
    /// Share of freeable space (1−L) that live tombstones may take before combined
    /// cleaning is forced ([`TOMBSTONE_SHARE_FOR_COMBINED`] by default).
    pub tombstone_share_for_combined: f64,
    /// Most free memory (fraction) the cleaner works to keep ahead of writers.
    pub clean_ahead_fraction: f64,
}

/// Tombstones force combined cleaning once they are this share of freeable space
/// (L§5.2: chosen empirically there). The default of `LogConfig`.
pub const TOMBSTONE_SHARE_FOR_COMBINED: f64 = 0.4;
/// Once live objects and tombstones fill this share of the memory in use, compaction
/// copies at least 9 bytes for every byte it frees (u/(1−u) at u = 0.9, L§4.1)...
pub const COSTLY_COMPACTION_LIVE_SHARE: f64 = 0.9;
/// ...and tombstones force combined cleaning at this lower share of freeable space.
/// Every live tombstone is memory compaction cannot win back, and at high utilisation
/// that memory is what makes compaction cheap: with 100-byte objects at 90% live,
/// tombstones at the 40% rule take 4% of memory — as much as all the dead objects —
/// and double the bytes compaction copies per byte written (measured: 19.8 vs 9.7,
/// docs/benchmarks.md). Combined cleaning then costs little backup bandwidth, since
/// the on-disk log is about twice as large as memory and half dead.
pub const TOMBSTONE_SHARE_WHEN_COMPACTION_IS_COSTLY: f64 = 0.1;
/// Combined cleaning runs when the on-disk log exceeds this share of its limit.
pub const DISK_SHARE_FOR_COMBINED: f64 = 0.9;
/// Cleaning starts once free memory is at most this fraction of all memory.
pub const MAX_FREE_FRACTION_TO_CLEAN: f64 = 0.1;
/// ...or at most this many segments' worth (the default of `LogConfig`). L§5.2's
/// (1−L)/2 keeps half of the freeable memory as free seglets while the cleaner keeps
/// up, and memory held free is memory not holding dead objects: at 90% utilisation
/// that doubles the bytes compaction copies per byte freed (measured: 23.7 → 7.2,
/// docs/benchmarks.md). Two segments are what writers fill between two wake-ups of
/// the cleaner (one at every new head) with one to spare.
pub const CLEAN_AHEAD_SEGMENTS: usize = 2;
/// ...and never more than this share of memory: 2 segments are 1/64 of 1 GiB, where
/// the cap was measured, but 1/8 of 128 MiB, where (1−L)/2 then decided alone and
/// at 90% kept up to 5% of memory free rather than holding dead objects: the
/// cleaner copied 15–18 bytes per byte written there, and 11.3–11.5 with this cap
/// (docs/benchmarks.md, issue 17 session 28). A log below 1 GiB keeps less than two
/// segments free, so writers may use it up before the next head wakes the cleaner;
/// running out of memory wakes it too.
pub const CLEAN_AHEAD_MAX_MEMORY_SHARE: f64 = 1.0 / 64.0;

/// Decides whether to clean and with which cleaner (L§5.2): clean when
/// F ≤ min(0.1, (1−L)/2, clean-ahead); prefer compaction unless tombstones are ≥ 40% of freeable
/// space or the disk log is near its limit.
pub fn choose(input: &BalancerInput) -> CleanKind {
    // The disk log near its limit needs combined cleaning whatever memory is
    // free: with the configured limit that happens only under memory pressure
    // (compaction is what makes the disk log outgrow memory), but a budget learned
    // from full backups (docs/design-notes.md "Full backups") can be reached with
    // most of memory free, and then only combined cleaning frees frames.
    if disk_near_limit(input) {
        return CleanKind::Combined;
    }
    let freeable = (1.0 - input.live_fraction).max(0.0);
    let threshold = MAX_FREE_FRACTION_TO_CLEAN
        .min(freeable / 2.0)
        .min(input.clean_ahead_fraction);
    if input.free_fraction > threshold && input.free_fraction > 0.0 {
        return CleanKind::None;
    }
    if !input.compaction || needs_combined(input) {
        CleanKind::Combined
    } else {
        CleanKind::Compaction
    }
}

/// Whether combined cleaning is required regardless of free memory pressure kind:
/// tombstones are at least the configured share (40%, L§5.2) of freeable space, or at
/// least 10% of it while compaction is costly, or the disk log is near its limit.
pub fn needs_combined(input: &BalancerInput) -> bool {
    let freeable = (1.0 - input.live_fraction).max(f64::MIN_POSITIVE);
    let tombstone_share = input.tombstone_fraction / freeable;
    let in_use = (1.0 - input.free_fraction).max(f64::MIN_POSITIVE);
    let live_share_in_use = (input.live_fraction + input.tombstone_fraction) / in_use;
    let costly_compaction = live_share_in_use >= COSTLY_COMPACTION_LIVE_SHARE;
    tombstone_share >= input.tombstone_share_for_combined
        || (costly_compaction
            && tombstone_share
                >= TOMBSTONE_SHARE_WHEN_COMPACTION_IS_COSTLY
                    .min(input.tombstone_share_for_combined))
        || disk_near_limit(input)
}

/// Whether the disk log is at [`DISK_SHARE_FOR_COMBINED`] of its limit or above.
fn disk_near_limit(input: &BalancerInput) -> bool {
    input.disk_log_bytes as f64 >= DISK_SHARE_FOR_COMBINED * input.disk_limit_bytes as f64
}

/// Seglets a combined pass may plan its survivors into, of `available` that the
/// cleaner could take: all of them but room for one compaction to start
/// (`compaction_upfront`, when two-level cleaning is on) if there is more than twice
/// that. A combined pass holds its survivors' seglets and its victims' until the
/// survivors are on backups — about 12 ms per 8 MiB survivor at 700 MB/s — and a
/// second cleaner thread left without memory meanwhile can only wait, with the
/// writers, for memory that only it could have freed (measured at 90%: 290–465 k
/// writes/s with the whole budget, 473–542 k with room kept, docs/benchmarks.md,
/// session 9). With little free, the combined pass gets all of it: it may be the
/// only cleaner that can make progress (tombstones, the disk log).
pub fn combined_budget_seglets(available: usize, compaction_upfront: Option<usize>) -> usize {
    match compaction_upfront {
        Some(upfront) if available > 2 * upfront => available - upfront,
        _ => available,
    }
}

/// Whether a combined pass whose survivors take `survivor_seglets` and whose
/// victims hold `victim_seglets` may run (L§7: a pass never uses more memory than
/// it frees). A memory-driven pass must free its survivors, the seglet of the head
/// it opens and `min_gain_seglets` more. A pass forced by tombstones or the disk
/// log (`min_gain_seglets` = 0) may free no memory now — its point is the
/// tombstones it makes collectable — and is excused the head: the head after
/// cleaning comes from memory writers could take, or else is an emergency head
/// that leaves the log at the next roll (`Log::roll_head_for_cleaner`), so it never
/// spends the cleaner's reserve. (Charging forced passes for the head instead
/// stopped W4 at 90%: with the pool down to the reserves only zero-gain passes
/// could kill the tombstones, docs/benchmarks.md, session 10.)
pub fn combined_pass_pays(
    survivor_seglets: usize,
    victim_seglets: usize,
    min_gain_seglets: usize,
) -> bool {
    let head_seglets = usize::from(min_gain_seglets > 0);
    survivor_seglets + head_seglets + min_gain_seglets <= victim_seglets
}

/// The cost-benefit score of cleaning a segment on disk (L§7.3, RAMCloud's variant of
/// LFS): (1−u)·segmentAge/u, with u the live fraction of the segment's bytes on disk.
/// Higher is better. An empty segment scores infinitely high.
pub fn cost_benefit(utilization: f64, segment_age: u64) -> f64 {
    if utilization <= 0.0 {
        return f64::INFINITY;
    }
    (1.0 - utilization).max(0.0) * (segment_age as f64 + 1.0) / utilization
}

/// The cost-benefit score of combined cleaning a segment, in bytes: RAMCloud's
/// (1−u)·age/u with u = `keep_bytes / disk_bytes` (L§7.3), whose benefit — the disk
/// space freed — also counts the live tombstones elsewhere that die when the segment
/// leaves the log (`tombstones_naming_bytes`; the log knows them exactly). Those are
/// memory that compaction can then win back, and killing them is what combined
/// cleaning is for when tombstones force it. Higher is better.
pub fn combined_benefit(
    disk_bytes: usize,
    keep_bytes: usize,
    tombstones_naming_bytes: u64,
    segment_age: u64,
) -> f64 {
    let utilization = keep_bytes as f64 / disk_bytes.max(1) as f64;
    let disk = cost_benefit(utilization, segment_age);
    if keep_bytes == 0 {
        return disk;
    }
    disk + tombstones_naming_bytes as f64 * (segment_age as f64 + 1.0) / keep_bytes as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(f: f64, l: f64, t: f64) -> BalancerInput {
        BalancerInput {
            free_fraction: f,
            live_fraction: l,
            tombstone_fraction: t,
            disk_log_bytes: 0,
            disk_limit_bytes: 100,
            compaction: true,
            tombstone_share_for_combined: TOMBSTONE_SHARE_FOR_COMBINED,
            clean_ahead_fraction: 1.0,
        }
    }

    #[test]
    fn combined_pass_pays_for_its_head_and_gain_when_memory_drives_it() {
        // 10 victim seglets, 8 of survivors: the head makes 9, one to gain.
        assert!(combined_pass_pays(8, 10, 1));
        assert!(!combined_pass_pays(9, 10, 1));
        assert!(combined_pass_pays(7, 10, 2));
        assert!(!combined_pass_pays(8, 10, 2));
    }

    #[test]
    fn combined_pass_forced_is_excused_the_head_but_never_grows_memory() {
        assert!(combined_pass_pays(10, 10, 0));
        assert!(!combined_pass_pays(11, 10, 0));
    }

    #[test]
    fn choose_waits_while_memory_is_free() {
        assert_eq!(choose(&input(0.5, 0.3, 0.0)), CleanKind::None);
        // 10% free but L = 0.9: (1−L)/2 = 5%, so not yet.
        assert_eq!(choose(&input(0.1, 0.9, 0.0)), CleanKind::None);
    }

    #[test]
    fn choose_waits_until_free_memory_is_down_to_the_clean_ahead_cap() {
        // 90% live: (1−L)/2 = 5% alone would clean from 5% free on.
        let mut i = input(0.04, 0.9, 0.0);
        assert_eq!(choose(&i), CleanKind::Compaction);
        i.clean_ahead_fraction = 0.02;
        assert_eq!(choose(&i), CleanKind::None);
        i.free_fraction = 0.02;
        assert_eq!(choose(&i), CleanKind::Compaction);
        // The cap never makes the cleaner start earlier than L§5.2 says.
        let mut low = input(0.2, 0.3, 0.0);
        low.clean_ahead_fraction = 0.5;
        assert_eq!(choose(&low), CleanKind::None);
    }

    #[test]
    fn choose_compacts_when_memory_is_low() {
        assert_eq!(choose(&input(0.05, 0.5, 0.0)), CleanKind::Compaction);
        assert_eq!(choose(&input(0.0, 0.99, 0.0)), CleanKind::Compaction);
    }

    #[test]
    fn choose_combines_when_tombstones_pile_up() {
        // T/(1−L) = 0.2/0.5 = 40%.
        assert_eq!(choose(&input(0.05, 0.5, 0.2)), CleanKind::Combined);
        assert_eq!(choose(&input(0.05, 0.5, 0.19)), CleanKind::Compaction);
    }

    #[test]
    fn choose_combines_at_fewer_tombstones_when_compaction_is_costly() {
        // 90% live, 2% tombstones: T/(1−L) = 20%, under the 40% rule, but the memory in
        // use is 92/98 = 94% live, so compaction copies > 9 bytes per byte freed.
        assert_eq!(choose(&input(0.02, 0.9, 0.02)), CleanKind::Combined);
        // Below 10% of freeable space, compaction still.
        assert_eq!(choose(&input(0.02, 0.9, 0.009)), CleanKind::Compaction);
        // 50% live: compaction is cheap, so the 40% rule alone decides.
        assert_eq!(choose(&input(0.05, 0.5, 0.1)), CleanKind::Compaction);
        // A lower configured share still wins over the costly-compaction one.
        let mut i = input(0.02, 0.9, 0.005);
        i.tombstone_share_for_combined = 0.04;
        assert_eq!(choose(&i), CleanKind::Combined);
    }

    #[test]
    fn choose_combines_when_disk_log_is_near_limit() {
        let mut i = input(0.05, 0.5, 0.0);
        i.disk_log_bytes = 90;
        assert_eq!(choose(&i), CleanKind::Combined);
        i.compaction = false;
        i.disk_log_bytes = 0;
        assert_eq!(choose(&i), CleanKind::Combined);
    }

    #[test]
    fn combined_benefit_is_cost_benefit_plus_tombstones_that_die() {
        // Without tombstones it ranks like (1−u)·age/u.
        let (a, b) = (combined_benefit(100, 50, 0, 10), cost_benefit(0.5, 10));
        assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        // Tombstones naming a segment make a fuller one worth more than an emptier one.
        assert!(combined_benefit(100, 90, 200, 10) > combined_benefit(100, 50, 0, 10));
        assert_eq!(combined_benefit(100, 0, 0, 0), f64::INFINITY);
        assert_eq!(combined_benefit(100, 100, 0, 5), 0.0);
    }

    #[test]
    fn combined_budget_seglets_leaves_room_for_one_compaction() {
        assert_eq!(combined_budget_seglets(187, Some(23)), 164);
        assert_eq!(combined_budget_seglets(47, Some(23)), 24);
    }

    #[test]
    fn combined_budget_seglets_takes_all_when_little_is_free_or_no_compaction() {
        // At or below twice a compaction's room, the combined pass may be the only
        // cleaner that can make progress: it gets everything.
        assert_eq!(combined_budget_seglets(46, Some(23)), 46);
        assert_eq!(combined_budget_seglets(5, Some(23)), 5);
        assert_eq!(combined_budget_seglets(0, Some(23)), 0);
        // One-level cleaning runs no compaction to keep room for.
        assert_eq!(combined_budget_seglets(187, None), 187);
    }

    #[test]
    fn cost_benefit_prefers_emptier_and_older() {
        assert!(cost_benefit(0.5, 10) > cost_benefit(0.9, 10));
        assert!(cost_benefit(0.5, 100) > cost_benefit(0.5, 10));
        assert_eq!(cost_benefit(0.0, 0), f64::INFINITY);
        assert_eq!(cost_benefit(1.0, 1000), 0.0);
    }
}

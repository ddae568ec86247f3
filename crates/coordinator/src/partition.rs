//! Splitting a crashed master's tablets into recovery partitions (R§7.5): each
//! partition is bounded in bytes and entries, so one recovery master can replay it
//! in about the same time as every other.
//!
//! Method: a tablet larger than a bound is first cut into equal key-hash ranges
//! (the hash spreads keys evenly, so each range gets an equal share of the
//! tablet's bytes and entries). The pieces are then packed, largest first, by
//! randomization with refinement (R§7.1's placement idea applied to bins): try a
//! few partitions picked at random and keep the emptiest that has room; if none
//! has, look at every partition; open a new one only when none fits. The result
//! uses few partitions without the cost of an exact packing.
//!
//! Pure: no I/O; the randomness comes from the caller's generator.

use rand::Rng;

/// How many random partitions a piece tries before looking at all of them.
const RANDOM_CANDIDATES: usize = 3;

/// Largest number of pieces one tablet is cut into (bounds the work and the
/// RecoverPartition messages for absurd statistics).
pub const MAX_PIECES_PER_TABLET: u64 = 1024;

/// A tablet (or a piece of one) with its size as the crashed master last recorded
/// it (R§7.5: tablet statistics in the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TabletLoad {
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    pub bytes: u64,
    pub entries: u64,
}

/// The bounds of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLimits {
    pub max_bytes: u64,
    pub max_entries: u64,
}

impl Default for PartitionLimits {
    /// About what one recovery master replays in a second or two here (R§7.5
    /// sized partitions at 500–600 MB for a 1 s replay).
    fn default() -> Self {
        Self {
            max_bytes: 512 << 20,
            max_entries: 4_000_000,
        }
    }
}

/// The partitions of `tablets`: every key hash of every tablet is in exactly one
/// partition, and a partition exceeds a bound only if it is a single piece that
/// could not be cut further.
pub fn partition(
    tablets: &[TabletLoad],
    limits: PartitionLimits,
    rng: &mut impl Rng,
) -> Vec<Vec<TabletLoad>> {
    let max_bytes = limits.max_bytes.max(1);
    let max_entries = limits.max_entries.max(1);
    let mut pieces: Vec<TabletLoad> = tablets
        .iter()
        .flat_map(|t| cut(t, max_bytes, max_entries))
        .collect();
    pieces.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.entries.cmp(&a.entries)));
    let mut parts: Vec<(u64, u64, Vec<TabletLoad>)> = Vec::new();
    let fits = |p: &(u64, u64, Vec<TabletLoad>), t: &TabletLoad| {
        p.0 + t.bytes <= max_bytes && p.1 + t.entries <= max_entries
    };
    for piece in pieces {
        let mut best: Option<usize> = None;
        for _ in 0..RANDOM_CANDIDATES.min(parts.len()) {
            let i = rng.gen_range(0..parts.len());
            if fits(&parts[i], &piece) && best.is_none_or(|b| parts[i].0 < parts[b].0) {
                best = Some(i);
            }
        }
        // Refinement: the random picks were all full; look at every partition.
        let best = best.or_else(|| parts.iter().position(|p| fits(p, &piece)));
        match best {
            Some(i) => {
                parts[i].0 += piece.bytes;
                parts[i].1 += piece.entries;
                parts[i].2.push(piece);
            }
            None => parts.push((piece.bytes, piece.entries, vec![piece])),
        }
    }
    parts.into_iter().map(|(_, _, p)| p).collect()
}

/// Cuts a tablet into equal hash ranges so that each is within the bounds.
fn cut(t: &TabletLoad, max_bytes: u64, max_entries: u64) -> Vec<TabletLoad> {
    let span = t.end_hash - t.start_hash;
    let wanted = t
        .bytes
        .div_ceil(max_bytes)
        .max(t.entries.div_ceil(max_entries))
        .clamp(1, MAX_PIECES_PER_TABLET);
    // A range of n hashes cannot be cut into more than n pieces.
    let n = wanted.min(span.saturating_add(1)).max(1);
    if n == 1 {
        return vec![*t];
    }
    let width = (u128::from(span) + 1) / u128::from(n);
    (0..n)
        .map(|i| {
            // i * width < span + 1 ≤ 2^64, so the casts are exact.
            let start = t.start_hash + (u128::from(i) * width) as u64;
            let end = if i + 1 == n {
                t.end_hash
            } else {
                t.start_hash + (u128::from(i + 1) * width - 1) as u64
            };
            TabletLoad {
                table_id: t.table_id,
                start_hash: start,
                end_hash: end,
                bytes: t.bytes / n + u64::from(i < t.bytes % n),
                entries: t.entries / n + u64::from(i < t.entries % n),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn tablet(table_id: u64, start: u64, end: u64, bytes: u64, entries: u64) -> TabletLoad {
        TabletLoad {
            table_id,
            start_hash: start,
            end_hash: end,
            bytes,
            entries,
        }
    }

    #[test]
    fn partition_packs_small_tablets_together() {
        let tablets: Vec<_> = (0..10).map(|i| tablet(i, 0, u64::MAX, 10, 1)).collect();
        let limits = PartitionLimits {
            max_bytes: 100,
            max_entries: 100,
        };
        let parts = partition(&tablets, limits, &mut rand::rngs::StdRng::seed_from_u64(1));
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].len(), 10);
    }

    #[test]
    fn partition_splits_a_tablet_over_the_bound() {
        let tablets = [tablet(7, 0, u64::MAX, 1000, 10)];
        let limits = PartitionLimits {
            max_bytes: 300,
            max_entries: 100,
        };
        let parts = partition(&tablets, limits, &mut rand::rngs::StdRng::seed_from_u64(1));
        assert_eq!(parts.len(), 4);
        assert!(parts
            .iter()
            .all(|p| p.iter().map(|t| t.bytes).sum::<u64>() <= 300));
    }

    proptest! {
        /// Every hash of every tablet lands in exactly one piece, sizes are
        /// conserved, and no partition exceeds a bound unless it is one piece.
        #[test]
        fn partition_covers_every_hash_once_within_bounds(
            sizes in proptest::collection::vec((0u64..5000, 0u64..500, 0u64..64), 1..20),
            max_bytes in 1u64..2000,
            max_entries in 1u64..200,
            seed in any::<u64>(),
        ) {
            // Contiguous tablets of one table with random widths.
            let mut tablets = Vec::new();
            let mut start = 0u64;
            for (i, &(bytes, entries, width)) in sizes.iter().enumerate() {
                let end = if i + 1 == sizes.len() { u64::MAX } else { start + width };
                tablets.push(tablet(1, start, end, bytes, entries));
                start = end.wrapping_add(1);
            }
            let limits = PartitionLimits { max_bytes, max_entries };
            let parts = partition(&tablets, limits, &mut rand::rngs::StdRng::seed_from_u64(seed));
            let mut pieces: Vec<TabletLoad> = parts.iter().flatten().copied().collect();
            pieces.sort_by_key(|t| t.start_hash);
            let mut next = Some(0u64);
            for p in &pieces {
                prop_assert_eq!(Some(p.start_hash), next);
                prop_assert!(p.start_hash <= p.end_hash);
                next = p.end_hash.checked_add(1);
            }
            prop_assert_eq!(next, None, "pieces must reach u64::MAX");
            let total = |f: fn(&TabletLoad) -> u64, ts: &[TabletLoad]| ts.iter().map(f).sum::<u64>();
            prop_assert_eq!(total(|t| t.bytes, &pieces), total(|t| t.bytes, &tablets));
            prop_assert_eq!(total(|t| t.entries, &pieces), total(|t| t.entries, &tablets));
            for p in &parts {
                let over = total(|t| t.bytes, p) > max_bytes || total(|t| t.entries, p) > max_entries;
                prop_assert!(!over || p.len() == 1, "an over-full partition holds several pieces");
            }
        }
    }
}

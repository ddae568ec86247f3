//! The batch combined pass's work list (L§4.2, L§4.3): the live entries of its
//! victims, 32 bytes each, sorted by age before they are copied. Its size is
//! bounded by the log's memory (docs/design-notes.md "Memory outside the log").

use crate::entry::EntryType;
use crate::log::scan::Found;
use crate::log::SegmentMeta;
use crate::LogRef;

/// One live entry a combined pass will copy: 32 bytes, where a scanned entry with
/// its parsed layout takes 128 — at 100-byte objects the work list of a pass was
/// as large as the data it cleaned (issue 17).
#[derive(Clone, Copy)]
pub(crate) struct Candidate {
    /// The object's birth (or, for a tombstone, its segment's): the copy order.
    pub birth: u64,
    pub at: LogRef,
    /// An object's key hash, or the segment a tombstone names.
    pub hash_or_target: u64,
    /// Entry bytes (entries are at most half a segment, ≤ 128 MiB).
    pub len: u32,
    /// Index of the victim holding it.
    pub victim: u16,
    pub kind: EntryType,
}

impl Candidate {
    pub(crate) fn new(birth: u64, e: &Found, victim: u16, hash_or_target: u64) -> Self {
        Self {
            birth,
            at: e.at,
            hash_or_target,
            // `Log::new` caps entries at half a segment, and segments at 256 MiB.
            len: e.len as u32,
            victim,
            kind: e.kind,
        }
    }
}

const _: () = assert!(std::mem::size_of::<Candidate>() == 32);

/// Bytes of the combined pass's work list per byte of log memory: 1/128 (0.8%),
/// enough for about a segment of 100-byte objects per 128 MiB of memory (1/32
/// before: the list was the largest transient outside the log, ≈ 4 MiB of a
/// 160 MiB server's peak in L Table 1's W1, docs/benchmarks.md issue 17). The list
/// holds whole victims only and never passes the bound: a victim that would take it
/// past is given back, and a first victim that would is cleaned alone without a
/// list (`cleaner::incremental`).
pub const COMBINED_WORK_LIST_SHARE: usize = 128;

/// Entries a combined pass's work list takes before it stops taking victims: see
/// [`COMBINED_WORK_LIST_SHARE`]; at least 64 Ki entries (2 MiB).
pub fn combined_work_list_entries(memory_bytes: usize) -> usize {
    (memory_bytes / COMBINED_WORK_LIST_SHARE / std::mem::size_of::<Candidate>()).max(1 << 16)
}

/// What the scan of a batch pass's victims found: the victims it kept (whole ones
/// only), their live entries and the tombstones it left behind.
pub(crate) struct WorkList {
    pub victims: Vec<SegmentMeta>,
    pub entries: Vec<Candidate>,
    pub tombstones_dropped: u64,
}

impl WorkList {
    /// Drops the tombstones naming a victim of this pass (they die with it, L§3)
    /// and sorts the rest oldest first: segregating old from young data makes later
    /// cleaning cheaper (L§4.3).
    pub(crate) fn prepare(&mut self) {
        let victim_ids: Vec<u64> = self.victims.iter().map(|m| m.id).collect();
        let mut dropped = 0u64;
        self.entries.retain(|c| {
            let dies = c.kind == EntryType::Tombstone && victim_ids.contains(&c.hash_or_target);
            dropped += u64::from(dies);
            !dies
        });
        self.tombstones_dropped += dropped;
        // Unstable: entries of equal birth may go in any order, and the in-place sort
        // moves less memory than a merge sort.
        self.entries.sort_unstable_by_key(|c| c.birth);
    }

    /// The entries' lengths in copy order.
    pub(crate) fn lens(&self) -> impl Iterator<Item = usize> + '_ {
        self.entries.iter().map(|c| c.len as usize)
    }

    pub(crate) fn victim_ids(&self) -> Vec<u64> {
        self.victims.iter().map(|m| m.id).collect()
    }
}

//! The two-level cleaner (L§4–7): level 1 is segment compaction (L§4.1), which
//! rewrites one segment into fewer seglets in memory and leaves its replicas alone;
//! level 2 is combined cleaning (L§4.2), which copies the live entries of several
//! segments into new survivor segments and frees the old ones in memory and on
//! disk. The balancer (`crate::balancer`, L§5.2) decides which runs.
//!
//! [`Cleaner`] is its own type over the [`Log`]: it borrows the log and uses only
//! the log's `pub(crate)` interface (segment table, slot counters, pool, epochs,
//! retire/reclaim); the log knows nothing of it. Every pass has the same three
//! steps, one file each:
//! - `plan`: which kind of pass, which victims, and how many seglets the output
//!   may take (cost-benefit, L§4.3; the memory bounds, L§7);
//! - `copy`: moving the survivors: the batch combined pass's work list and
//!   survivor segments, and `in_place`, the copy that reuses its source's own
//!   seglets as it goes (compaction and the one-segment combined pass);
//! - `commit`: publishing the output (a compacted chain, or survivors that join
//!   the log with a new digest once durable, L§6.4) and retiring the victims'
//!   memory through epochs (L§6.3).
//!
//! The passes themselves — `compaction` (level 1), `combined` (level 2, a batch of
//! victims) and `incremental` (level 2, one victim in bounded memory) — hold only
//! their control flow, step by step.
//!
//! Both levels copy live entries out of old memory and then retire it through
//! epochs. The cleaner decides what is live only for tombstones (a tombstone lives
//! while the segment of the object it kills is still in the log, L§3); for objects
//! it asks the [`Relocator`], which owns the hash table (L§6.2).
//!
//! Invariants: every pass takes all the seglets it may need from the pool *before*
//! it copies anything, from the cleaner's reserve if need be, so a pass never stops
//! half-way and the cleaner can always run (L§7). A segment being cleaned is marked
//! `Cleaning` or `Compacting` and no other pass picks it; combined passes run one at
//! a time (`Log::combined_pass`), so segments leave the log in one place.
//!
//! Thread-safety: a [`Cleaner`] is a shared borrow of the log (`Copy`, `Send`,
//! `Sync`); passes may run on several threads at once.

mod combined;
mod commit;
mod compaction;
mod copy;
mod in_place;
mod incremental;
mod plan;
mod work_list;

use std::sync::atomic::Ordering;

pub use self::work_list::{combined_work_list_entries, COMBINED_WORK_LIST_SHARE};
use crate::balancer::{self, BalancerInput, CleanKind};
use crate::log::read::ObjectView;
use crate::log::Log;
use crate::pool::AllocClass;
use crate::{LogRef, SEGLET_BYTES};

/// The owner of the hash table, as the cleaner sees it.
pub trait Relocator: Send + Sync {
    /// The hash the table files this object under.
    fn hash(&self, object: &ObjectView<'_>) -> u64;

    /// A hint that `hash`'s bucket is needed soon (the cleaner issues it for a batch
    /// of objects before relocating them, so their cache misses overlap).
    fn prefetch(&self, _hash: u64) {}

    /// Lock-free hint: does the hash table still refer to this object entry?
    fn is_live(&self, object: &ObjectView<'_>, hash: u64) -> bool;

    /// Under the object's bucket lock: if the hash table refers to exactly this entry,
    /// call `copy` (which writes the entry to its new place and returns the new
    /// reference), point the hash table at the copy and return true; otherwise return
    /// false without calling `copy`. `hash` is `self.hash(object)`.
    fn relocate(
        &self,
        object: &ObjectView<'_>,
        hash: u64,
        copy: &mut dyn FnMut() -> LogRef,
    ) -> bool;

    /// Lock-free hint: does the owner still need the completion record of
    /// (`lease_id`, `seq`) at `at` (RIFL §4.1)? A record nobody needs any more
    /// (its client acknowledged it, or its lease expired) is left behind, as a
    /// dead object is. The default, for owners that write no records, is no.
    fn record_is_live(&self, _lease_id: u64, _seq: u64, _at: LogRef) -> bool {
        false
    }

    /// Under the owner's lock on its records: if the completion record of
    /// (`lease_id`, `seq`) is still needed and still at `at`, call `copy`, point
    /// the owner at the copy and return true; otherwise return false without
    /// calling `copy` (as [`Self::relocate`] does for objects).
    fn relocate_record(
        &self,
        _lease_id: u64,
        _seq: u64,
        _at: LogRef,
        _copy: &mut dyn FnMut() -> LogRef,
    ) -> bool {
        false
    }

    /// Lock-free hint: is the prepared op `record` at `at` still undecided
    /// (SOSP'15 §6.2)? A decided one is left behind. Only asked of prepared ops:
    /// the cleaner keeps a decided mark while its prepared op's segment is in
    /// the log. The default, for owners without transactions, is no.
    fn tx_record_is_live(&self, _record: &crate::entry::TxRecordScan, _at: LogRef) -> bool {
        false
    }

    /// Under the owner's lock on its prepared ops: if `record` is still
    /// undecided and at `at`, call `copy`, point the owner at the copy and
    /// return true; otherwise return false without calling `copy`.
    fn relocate_tx_record(
        &self,
        _record: &crate::entry::TxRecordScan,
        _at: LogRef,
        _copy: &mut dyn FnMut() -> LogRef,
    ) -> bool {
        false
    }
}

/// Objects relocated together: their buckets are prefetched as a batch. Enough to
/// cover a few memory latencies, small enough to stay in L1.
pub(crate) const RELOCATION_BATCH: usize = 16;

/// Most segments one combined pass cleans; bounds the pass's memory and latency.
pub const MAX_SEGMENTS_PER_COMBINED_PASS: usize = 32;

/// Segments live above this fraction (on disk) are not worth combined cleaning.
pub const MAX_UTILIZATION_TO_CLEAN: f64 = 0.98;

/// What one cleaning pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassOutcome {
    /// Segments compacted or cleaned.
    pub segments: usize,
    /// Bytes of live entries copied.
    pub bytes_copied: u64,
    /// Seglets handed to the epoch mechanism for reuse.
    pub seglets_retired: usize,
    /// Survivor segments written (combined cleaning only).
    pub survivors: usize,
    /// Seglets the pass's output holds: the survivors, or the compacted copy.
    pub output_seglets: usize,
    /// Whether the pass freed memory, disk space or tombstones; a cleaner whose
    /// passes make no progress should wait instead of trying again at once.
    pub made_progress: bool,
}

/// CPU time the calling thread has used, in nanoseconds (0 if the clock is
/// unavailable): costs are measured in CPU time, which other processes on a
/// shared machine do not inflate.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Adds the CPU time the calling thread spends from its creation to its drop to a
/// counter: a pass holds one, so passes that give up (no memory, too little gain)
/// are charged too — they are cleaner work the writers pay for all the same.
pub(crate) struct CpuCharge<'a> {
    counter: &'a std::sync::atomic::AtomicU64,
    start_ns: u64,
}

impl<'a> CpuCharge<'a> {
    pub(crate) fn start(counter: &'a std::sync::atomic::AtomicU64) -> Self {
        Self {
            counter,
            start_ns: thread_cpu_ns(),
        }
    }
}

impl Drop for CpuCharge<'_> {
    fn drop(&mut self) {
        self.counter.fetch_add(
            thread_cpu_ns().saturating_sub(self.start_ns),
            Ordering::Relaxed,
        );
    }
}

/// The two-level cleaner of one log (module doc). Cheap to make (one pointer):
/// callers make one where they need it.
#[derive(Clone, Copy)]
pub struct Cleaner<'a> {
    log: &'a Log,
}

const _: () = assert!(MAX_SEGMENTS_PER_COMBINED_PASS <= u16::MAX as usize);

impl<'a> Cleaner<'a> {
    /// The cleaner of `log`.
    pub fn new(log: &'a Log) -> Self {
        Self { log }
    }

    /// The log this cleaner cleans.
    pub fn log(&self) -> &'a Log {
        self.log
    }

    /// The balancer's view of the log right now.
    pub fn balancer_input(&self) -> BalancerInput {
        let memory = self.log.pool.bytes() as f64;
        let configured_disk_limit = (self.log.config.disk_expansion_factor * memory) as u64;
        let budget = self.log.disk_budget_bytes();
        // Under a budget learned from full backups the measure is frames, whole
        // segments, as the backups count them (docs/design-notes.md "Full
        // backups"); otherwise bytes on disk (L§5.2).
        let (disk_log_bytes, disk_limit_bytes) = match budget {
            Some(b) => (self.log.disk_frame_bytes(), b.min(configured_disk_limit)),
            None => (self.log.disk_log_bytes(), configured_disk_limit),
        };
        BalancerInput {
            free_fraction: (self.log.pool.available(AllocClass::Write) * SEGLET_BYTES) as f64
                / memory,
            live_fraction: self.log.live_object_bytes() as f64 / memory,
            tombstone_fraction: self.log.tombstone_bytes_total() as f64 / memory,
            disk_log_bytes,
            disk_limit_bytes,
            compaction: self.log.config.compaction,
            tombstone_share_for_combined: self.log.config.tombstone_share_for_combined,
            clean_ahead_fraction: match self.log.config.clean_ahead_segments {
                0 => 1.0,
                n => ((n * self.log.config.segment_bytes) as f64 / memory)
                    .min(balancer::CLEAN_AHEAD_MAX_MEMORY_SHARE),
            },
        }
    }

    /// Which cleaner the balancer would run now.
    pub fn cleaning_needed(&self) -> CleanKind {
        balancer::choose(&self.balancer_input())
    }

    /// Runs one pass of whichever cleaner the balancer picks (L§5.2); `None` if no
    /// cleaning was needed or nothing could be cleaned.
    pub fn clean(&self, relocator: &dyn Relocator) -> Option<(CleanKind, PassOutcome)> {
        self.log.reclaim();
        let outcome = match self.cleaning_needed() {
            CleanKind::None => return None,
            CleanKind::Compaction => self.compaction_first(relocator),
            CleanKind::Combined => self.combined_first(relocator),
        };
        // L§7: when no other pass can make progress, clean one segment in bounded
        // memory (`incremental`). Without it a log whose segments hold only live
        // data and tombstones, with less free than one victim's live data, could
        // never collect those tombstones again.
        let outcome = outcome.or_else(|| {
            let forced = balancer::needs_combined(&self.balancer_input());
            self.clean_combined_incremental(relocator, forced)
                .map(|o| (CleanKind::Combined, o))
        });
        self.log.reclaim();
        outcome
    }

    /// A compaction, or a combined pass that frees memory if no segment has a
    /// seglet to gain.
    fn compaction_first(&self, relocator: &dyn Relocator) -> Option<(CleanKind, PassOutcome)> {
        self.compact(relocator)
            .map(|o| (CleanKind::Compaction, o))
            .or_else(|| {
                self.try_clean_combined(relocator, 1)
                    .map(|o| (CleanKind::Combined, o))
            })
    }

    /// A combined pass, followed by a compaction when it could not run or freed no
    /// memory while writers wait for it.
    fn combined_first(&self, relocator: &dyn Relocator) -> Option<(CleanKind, PassOutcome)> {
        // Combined cleaning forced by tombstones or by the disk log may free no
        // memory (it frees tombstones or disk space); otherwise it must.
        let min_gain = usize::from(!balancer::needs_combined(&self.balancer_input()));
        let combined = self
            .try_clean_combined(relocator, min_gain)
            .map(|o| (CleanKind::Combined, o));
        // A forced pass that freed no memory while writers wait for it is followed
        // by a compaction. Otherwise, when the combined budget is too small for
        // victims that matter, forced passes clean one small segment after another
        // and the writers starve (measured: W7 at 95%, 217,000 passes of 40 KB
        // each with the disk log near its limit, docs/benchmarks.md, session 10).
        let freed_memory = combined
            .as_ref()
            .is_some_and(|(_, o)| o.seglets_retired > o.output_seglets + 1);
        let writers_wait = self.log.pool.available(AllocClass::Write) == 0;
        let compact_too = combined.is_none() || (!freed_memory && writers_wait);
        if !(self.log.config.compaction && compact_too) {
            return combined;
        }
        match self.compact(relocator) {
            Some(o) if o.made_progress || combined.is_none() => Some((CleanKind::Compaction, o)),
            _ => combined,
        }
    }
}

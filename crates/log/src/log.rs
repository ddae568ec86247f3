//! The log of one master (R§4.1–4.3, L§3–5): the `Log` type, its segment table
//! and its construction. What the log does is split by idea into the child modules:
//! `head` (appends and head rolls), `read` (entries in place), `memory` (accounting,
//! epochs, statistics), `replicas` (what the replica manager reads) and `scan`
//! (walking a closed segment, for the cleaner and for checks). The cleaner is not
//! here: it is its own type over this one (`crate::cleaner`), and uses only the
//! `pub(crate)` items below.
//!
//! Lock order (outermost first): a hash-table bucket lock (held by the caller) →
//! `head` → `segments` → the pool's free list. The cleaner never holds `head` or
//! `segments` while it takes a bucket lock.

pub(crate) mod config;
pub(crate) mod head;
pub(crate) mod holds;
pub(crate) mod memory;
pub(crate) mod read;
pub(crate) mod replicas;
pub(crate) mod scan;
pub(crate) mod side;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use self::config::{LogConfig, LogConfigError, MAX_DELETE_RESERVE_BYTES};
use crate::entry::{self, TabletStat};
use crate::epoch::{EpochGuard, Epochs};
use crate::pool::{AllocClass, PoolError, Reserves, SegletPool};
use crate::segment::SegmentWriter;
use crate::tombstones::TombstoneTargets;
use crate::upfront;
use crate::{LogRef, SEGLET_BYTES};

/// State of a segment in the segment table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentState {
    /// The head: being appended to.
    Head,
    /// An emergency head: holds only a digest and is never named by the next digest.
    Emergency,
    /// Immutable and in the log.
    Closed,
    /// Being cleaned by a combined pass (its memory stays as it was until the pass
    /// ends).
    Cleaning,
    /// Being compacted: its in-memory chain is being replaced seglet by seglet
    /// (`cleaner::in_place`), so its bytes must not be read until the pass ends.
    Compacting,
    /// A survivor of combined cleaning whose replicas are being written: not yet in
    /// the log (no digest names it) until they are durable (L§6.4).
    Pending,
    /// A side log's segment (`side`): not yet in the log (no digest names it)
    /// until its side log is committed; never cleaned before that.
    Side,
    /// Cleaned by a combined pass whose survivors are being replicated: still in
    /// the log (the digest names it until the survivors are durable) but no
    /// longer in memory (its seglets became the survivor's, or went back to the
    /// pool).
    Leaving,
}

/// What the log knows about a segment that is part of it.
#[derive(Debug, Clone)]
pub(crate) struct SegmentMeta {
    pub id: u64,
    pub slot: u32,
    /// Seglets in memory (empty for the head, whose seglets the head writer holds).
    pub seglets: Vec<u32>,
    /// Bytes in memory (smaller than `disk_length` after compaction).
    pub mem_length: usize,
    /// Bytes of the segment's replicas on backups.
    pub disk_length: usize,
    /// Log clock when the segment was created (for the cost-benefit age, L§4.3).
    pub created_at: u64,
    pub state: SegmentState,
    /// Closed on all its replicas (R§4.2). Until then the cleaner leaves the
    /// segment alone: its replicas are written from its in-memory bytes.
    pub replicated: bool,
    /// At least the length of the segment's longest entry (0 while it is the head):
    /// sizes the seglets a compaction of it takes up front.
    pub max_entry_bytes: usize,
}

#[derive(Debug, Default)]
pub(crate) struct SegmentTable {
    pub by_id: std::collections::BTreeMap<u64, SegmentMeta>,
    pub next_id: u64,
    pub free_slots: Vec<u32>,
    /// Pseudo segments that keep tombstones live (`holds`).
    pub holds: holds::Holds,
}

/// Per-segment counters, indexed by slot; updated by writers without a lock.
#[derive(Debug, Default)]
pub(crate) struct SlotCounters {
    pub segment_id: AtomicU64,
    pub live_bytes: AtomicU64,
    pub tombstone_bytes: AtomicU64,
    /// Every entry of the segment is durable on backups (or was when it was
    /// copied here), so a read may return it without waiting (docs/design.md §5 "Read").
    pub read_durable: AtomicBool,
}

/// (epoch, seglets, segment slot) handed back once no operation pinned before `epoch`
/// remains.
type Retired = (u64, Vec<u32>, Option<u32>);

/// The head segment's writer and the buffers a head roll reuses.
struct Head {
    writer: SegmentWriter,
    emergency: bool,
    meta_buf: Vec<u8>,
    stats_buf: Vec<TabletStat>,
    digest_ids: Vec<u64>,
}

/// Cumulative cleaner counters.
#[derive(Debug, Default)]
pub(crate) struct CleanerCounters {
    pub compactions: AtomicU64,
    pub combined_passes: AtomicU64,
    pub segments_cleaned: AtomicU64,
    pub compaction_bytes_copied: AtomicU64,
    pub combined_bytes_copied: AtomicU64,
    pub seglets_freed: AtomicU64,
    pub tombstones_dropped: AtomicU64,
    pub cpu_ns: AtomicU64,
    pub emergency_heads: AtomicU64,
    pub passes_without_memory: AtomicU64,
    pub combined_passes_refused: AtomicU64,
    pub incremental_combined_passes: AtomicU64,
    pub tombstones_moved: AtomicU64,
    pub survivor_sync_ns: AtomicU64,
    pub cleaner_idle_ns: AtomicU64,
    pub cleaner_idle_waits: AtomicU64,
}

/// Bytes every head sets aside for its tablet statistics entry.
const TABLET_STATS_ROOM_BYTES: usize = 64 * 1024;

/// Tablets described in one head: each costs at most 10+8+8+10+10 bytes.
const MAX_TABLET_STATS_PER_HEAD: usize = (TABLET_STATS_ROOM_BYTES - 32) / 46;

/// The log of one master. Thread-safe (see the crate doc).
pub struct Log {
    pub(crate) config: LogConfig,
    pub(crate) pool: SegletPool,
    pub(crate) epochs: Epochs,
    head: Mutex<Head>,
    pub(crate) segments: Mutex<SegmentTable>,
    pub(crate) slots: Box<[SlotCounters]>,
    /// Which slot (segment) each seglet currently belongs to.
    seglet_slot: Box<[AtomicU32]>,
    /// Each seglet's place in its segment's chain (0 for the first): with the
    /// offset inside the seglet it gives an entry's offset in its segment, which
    /// says how much of the segment must be durable before the entry may be read.
    seglet_index: Box<[AtomicU32]>,
    /// Seglets (and the slot, for whole segments) waiting for their epoch to pass.
    retired: Mutex<Vec<Retired>>,
    /// The log's live object and tombstone bytes (what the balancer decides from,
    /// L§5.2): the slots' counts of the segments in the log, each entry once. An
    /// entry a combined pass relocated joins them only when its victim leaves
    /// (`Log::victim_left`), so it is never counted twice meanwhile.
    live_object_bytes: AtomicU64,
    tombstone_bytes: AtomicU64,
    /// Live tombstone bytes by target segment and holder (see `tombstones`).
    pub(crate) tombstone_targets: Mutex<TombstoneTargets>,
    /// Held for the whole of a combined-cleaning pass: passes run one at a time, so
    /// segments leave the log in one place and tombstone accounting stays exact.
    pub(crate) combined_pass: Mutex<()>,
    appended_bytes: AtomicU64,
    pub(crate) counters: CleanerCounters,
    /// Largest entry an append accepts (a segment minus room for its metadata).
    max_entry_bytes: usize,
    /// The on-disk log's limit learned from full backups (`u64::MAX`: none yet):
    /// the backups refused a new replica when this master's log held this many
    /// bytes on disk, so it cleans to stay below it (docs/design-notes.md "Full
    /// backups").
    disk_budget_bytes: AtomicU64,
}

fn digest_bound_bytes(seglets: usize) -> usize {
    // Header, digest of up to one id per seglet, safe version: varints of ≤ 10 bytes.
    64 + 10 * (seglets + 16)
}

impl Log {
    /// Creates a log and its first head segment.
    pub fn new(config: LogConfig) -> Result<Self, LogConfigError> {
        let seg = config.segment_bytes;
        if !seg.is_multiple_of(SEGLET_BYTES) || !(2 * SEGLET_BYTES..=256 << 20).contains(&seg) {
            return Err(LogConfigError::BadSegmentSize(seg));
        }
        if config.disk_expansion_factor.is_nan() || config.disk_expansion_factor < 1.0 {
            return Err(LogConfigError::BadExpansionFactor(
                config.disk_expansion_factor,
            ));
        }
        if !(0.0..=0.5).contains(&config.delete_reserve_fraction) {
            return Err(LogConfigError::BadDeleteReserve(
                config.delete_reserve_fraction,
            ));
        }
        if !(0.0..=1.0).contains(&config.tombstone_share_for_combined) {
            return Err(LogConfigError::BadTombstoneShare(
                config.tombstone_share_for_combined,
            ));
        }
        let seglets = config.memory_bytes / SEGLET_BYTES;
        let segment_seglets = seg / SEGLET_BYTES;
        let digest_seglets = digest_bound_bytes(seglets).div_ceil(SEGLET_BYTES);
        let reserves = Reserves {
            emergency_seglets: 2 * digest_seglets,
            // Enough for a compaction of any one segment to start (it reuses its own
            // seglets as it goes, `compaction`), plus slack for the seglet left
            // partly empty at the end of each survivor (L§7).
            cleaner_seglets: segment_seglets.min(upfront::upfront_seglets(seg)) + 2,
            // clamp's bounds are constants in order (2 ≤ 32), so it cannot panic.
            delete_seglets: ((seglets as f64 * config.delete_reserve_fraction) as usize)
                .clamp(2, MAX_DELETE_RESERVE_BYTES / SEGLET_BYTES),
        };
        // Deadlock freedom (docs/design-notes.md "Cleaning always makes progress"):
        // with the pool at the cleaner's floor, a compaction or a one-segment
        // combined pass of any segment must be able to take its up-front seglets.
        assert!(
            reserves.cleaner_seglets >= segment_seglets.min(upfront::upfront_seglets(seg) + 1),
            "the cleaner's reserve cannot start a one-segment pass"
        );
        let pool = SegletPool::new(config.memory_bytes, reserves)?;
        // Every segment holds at least one seglet, so there are never more segments
        // (head, survivors in flight and emergency heads included) than seglets.
        let slot_count = pool.seglet_count() + 4;
        let slots: Box<[SlotCounters]> = (0..slot_count).map(|_| SlotCounters::default()).collect();
        let seglet_slot = (0..pool.seglet_count())
            .map(|_| AtomicU32::new(u32::MAX))
            .collect();
        let seglet_index = (0..pool.seglet_count())
            .map(|_| AtomicU32::new(0))
            .collect();
        let metadata_room = digest_bound_bytes(pool.seglet_count())
            + TABLET_STATS_ROOM_BYTES
            + entry::MAX_HEADER_BYTES;
        let max_entry_bytes = seg.saturating_sub(metadata_room) / 2;
        let table = SegmentTable {
            by_id: Default::default(),
            next_id: 1,
            free_slots: (0..slot_count as u32).rev().collect(),
            holds: Default::default(),
        };
        let log = Self {
            pool,
            epochs: Epochs::new(),
            head: Mutex::new(Head {
                writer: SegmentWriter::new(0, u32::MAX, seg),
                emergency: true,
                meta_buf: Vec::new(),
                stats_buf: Vec::new(),
                digest_ids: Vec::new(),
            }),
            segments: Mutex::new(table),
            slots,
            seglet_slot,
            seglet_index,
            retired: Mutex::new(Vec::new()),
            live_object_bytes: AtomicU64::new(0),
            tombstone_bytes: AtomicU64::new(0),
            tombstone_targets: Mutex::new(TombstoneTargets::with_capacity(slot_count)),
            combined_pass: Mutex::new(()),
            appended_bytes: AtomicU64::new(0),
            counters: CleanerCounters::default(),
            max_entry_bytes,
            disk_budget_bytes: AtomicU64::new(u64::MAX),
            config,
        };
        {
            let mut head = log.head.lock();
            // A fresh pool always has room for the first head; if not, the memory is
            // too small to be useful.
            if !log.roll_head(&mut head, AllocClass::Write, false) {
                return Err(PoolError::TooSmall {
                    bytes: log.config.memory_bytes,
                    min_bytes: log.config.memory_bytes + SEGLET_BYTES,
                }
                .into());
            }
        }
        Ok(log)
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// The seglet pool (for statistics and tests).
    pub fn pool(&self) -> &SegletPool {
        &self.pool
    }

    /// Pins the current epoch for an operation that reads log memory.
    pub fn pin(&self) -> EpochGuard<'_> {
        self.epochs.pin()
    }

    /// Bytes of this log on disk (each segment's length on its replicas): what the
    /// disk limit (L§5.2) and the disk budget are compared with.
    pub fn disk_log_bytes(&self) -> u64 {
        let table = self.segments.lock();
        table.by_id.values().map(|m| m.disk_length as u64).sum()
    }

    /// Frames this log's segments take on each backup holding them, in bytes: a
    /// segment takes a whole frame however short it is.
    pub fn disk_frame_bytes(&self) -> u64 {
        let segments = self.segments.lock().by_id.len() as u64;
        segments * self.config.segment_bytes as u64
    }

    /// The backups refused a new replica for lack of frames: from now on this
    /// master's on-disk log is kept two segments below its size then (in frames,
    /// [`Self::disk_frame_bytes`]) by combined cleaning, instead of below the
    /// configured multiple of memory (L§5.2). Learned once, at the first refusal,
    /// and kept until the process restarts: later refusals come while cleaning
    /// works towards it (docs/design-notes.md "Full backups").
    pub fn limit_disk_log_at_refusal(&self) {
        let segment = self.config.segment_bytes as u64;
        let budget = self
            .disk_frame_bytes()
            .saturating_sub(2 * segment)
            .max(segment);
        let _ = self.disk_budget_bytes.compare_exchange(
            u64::MAX,
            budget,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// The budget [`Self::limit_disk_log`] set, if any.
    pub fn disk_budget_bytes(&self) -> Option<u64> {
        match self.disk_budget_bytes.load(Ordering::Relaxed) {
            u64::MAX => None,
            bytes => Some(bytes),
        }
    }

    /// Largest object/tombstone entry (all bytes) an append accepts.
    pub fn max_entry_bytes(&self) -> usize {
        self.max_entry_bytes
    }

    /// The log clock: 64 KiB units of bytes appended to the head. Object entries are
    /// stamped with it so the cleaner can sort survivors by age (L§4.3).
    pub fn clock(&self) -> u64 {
        self.appended_bytes.load(Ordering::Relaxed) >> 16
    }

    fn adopt(&self, w: &mut SegmentWriter, extra: usize, class: AllocClass) -> bool {
        let before = w.seglets.len();
        if !w.reserve(&self.pool, extra, class) {
            return false;
        }
        self.map_seglets(w, before);
        true
    }

    /// Records that `w`'s seglets from index `from` on belong to its segment, and
    /// where in it; done before any entry in them is published.
    pub(crate) fn map_seglets(&self, w: &SegmentWriter, from: usize) {
        for (index, &s) in w.seglets.iter().enumerate().skip(from) {
            self.seglet_slot[s as usize].store(w.slot, Ordering::Release);
            // A segment has at most `segment_bytes / SEGLET_BYTES` (≤ 4,096) seglets.
            self.seglet_index[s as usize].store(index as u32, Ordering::Release);
        }
    }

    /// Reserves seglets for a cleaner-private writer (survivor or compaction copy).
    pub(crate) fn cleaner_reserve(&self, w: &mut SegmentWriter, extra: usize) -> bool {
        self.adopt(w, extra, AllocClass::Cleaner)
    }

    pub(crate) fn slot_of(&self, r: LogRef) -> u32 {
        self.seglet_slot[SegletPool::seglet_of(r) as usize].load(Ordering::Acquire)
    }

    /// The id of the segment holding the entry at `r`.
    pub fn segment_id_of(&self, r: LogRef) -> u64 {
        self.slots[self.slot_of(r) as usize]
            .segment_id
            .load(Ordering::Acquire)
    }

    /// Faults all log memory in now ([`SegletPool::prefault`]); call it off the
    /// hot path (a background thread at start-up).
    pub fn prefault_memory(&self) -> std::io::Result<()> {
        self.pool.prefault()
    }

    pub(crate) fn head_id(&self) -> u64 {
        self.head.lock().writer.id
    }
}

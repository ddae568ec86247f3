//! The log of one master: head, segment table, appends, reads and accounting
//! (R§4.1–4.3, L§3–5).
//!
//! Lock order (outermost first): a hash-table bucket lock (held by the caller) →
//! `head` → `segments` → the pool's free list. The cleaner never holds `head` or
//! `segments` while it takes a bucket lock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use ramstore_clock::Clock;

use crate::entry::{self, EntryError, EntryHeader, ObjectLayout, TabletStat, MAX_HEADER_BYTES};
use crate::epoch::{EpochGuard, Epochs};
use crate::pool::{AllocClass, PoolError, Reserves, SegletPool};
use crate::replica::{ReplicaSink, SegmentRole};
use crate::segment::SegmentWriter;
use crate::tombstones::TombstoneTargets;
use crate::{LogRef, SEGLET_BYTES, SEGMENT_BYTES};

/// Facts the log writes at the start of every head segment besides the digest.
pub trait HeadMetadata: Send + Sync {
    /// The master's safe version: higher than any version it ever gave out for an
    /// object that no longer exists (R§3.1). Written into every head so versions stay
    /// monotonic across crashes even after tombstones are cleaned.
    fn safe_version(&self) -> u64;
    /// Per-tablet statistics (recovery partitions by them, R§7.5).
    fn tablet_stats(&self, out: &mut Vec<TabletStat>);
}

/// Head metadata for a log without tablets (tests, benchmarks of the log alone).
#[derive(Debug, Default)]
pub struct NoMetadata;

impl HeadMetadata for NoMetadata {
    fn safe_version(&self) -> u64 {
        0
    }
    fn tablet_stats(&self, _out: &mut Vec<TabletStat>) {}
}

/// The most memory kept for deletes only. The reserve lets deletes go on while the
/// cleaner turns the objects they kill into free seglets — one compaction pass,
/// milliseconds — and 2 MiB holds over 40,000 tombstones of short keys. More is
/// memory that holds no data: at 90% utilisation 1% of memory held back raises the
/// cleaner's copying by a tenth (measured: 1% of 1 GiB against 2 MiB, 414 k against
/// 461–523 k writes/s, docs/benchmarks.md, session 9).
pub const MAX_DELETE_RESERVE_BYTES: usize = 2 << 20;

/// Share of the pool kept for deletes by default: 0.2%, which reaches the 2 MiB
/// cap ([`MAX_DELETE_RESERVE_BYTES`]) at 1 GiB, so large logs keep what they
/// kept. It was 1%, which gave a 128 MiB log 1.3 MiB (20 seglets) of reserve, 1%
/// of its memory held from the dead objects compaction lives on where 1 GiB
/// holds 0.2%: at 90% utilisation that alone raised the bytes the cleaner copies
/// per byte written by a sixth (docs/benchmarks.md, issue 17 session 28). 256 KiB
/// at 128 MiB still holds about 7,000 tombstones of short keys, many compaction
/// passes' worth.
pub const DEFAULT_DELETE_RESERVE_FRACTION: f64 = 0.002;

/// Configuration of one log.
#[derive(Clone)]
pub struct LogConfig {
    /// Bytes of log memory (the seglet pool), allocated once at start-up.
    pub memory_bytes: usize,
    /// Bytes in a full segment; a multiple of the seglet size. Entries larger than a
    /// segment minus its metadata are refused as too large.
    pub segment_bytes: usize,
    /// The master that owns this log (written in every segment header).
    pub master_id: u64,
    /// The on-disk log may grow to this multiple of the memory size before combined
    /// cleaning is forced (L§5.2).
    pub disk_expansion_factor: f64,
    /// Two-level cleaning (compaction + combined) when true; combined only when false.
    pub compaction: bool,
    /// Fraction of the pool kept for tombstones only, so deletes succeed when writes
    /// no longer do (L§7); at most [`MAX_DELETE_RESERVE_BYTES`].
    pub delete_reserve_fraction: f64,
    /// Combined cleaning is forced once live tombstones take this share of the
    /// freeable memory (L§5.2: 0.4 there, chosen empirically).
    pub tombstone_share_for_combined: f64,
    /// The cleaner keeps at most this many segments' worth of memory free ahead of
    /// writers, and at most `balancer::CLEAN_AHEAD_MAX_MEMORY_SHARE` of memory (0:
    /// no cap, L§5.2's rule alone). See `balancer::choose`.
    pub clean_ahead_segments: usize,
    /// Where bytes to replicate are reported.
    pub replicas: Arc<dyn ReplicaSink>,
    /// Where head metadata comes from.
    pub metadata: Arc<dyn HeadMetadata>,
    /// The clock the log's waits run on (the system clock by default).
    pub clock: Arc<dyn Clock>,
}

impl LogConfig {
    /// A configuration with defaults for everything but the memory size.
    pub fn new(memory_bytes: usize) -> Self {
        Self {
            memory_bytes,
            segment_bytes: SEGMENT_BYTES,
            master_id: 0,
            disk_expansion_factor: 2.0,
            compaction: true,
            delete_reserve_fraction: DEFAULT_DELETE_RESERVE_FRACTION,
            tombstone_share_for_combined: crate::balancer::TOMBSTONE_SHARE_FOR_COMBINED,
            clean_ahead_segments: crate::balancer::CLEAN_AHEAD_SEGMENTS,
            replicas: Arc::new(crate::replica::NoReplicas),
            metadata: Arc::new(NoMetadata),
            clock: ramstore_clock::system_clock(),
        }
    }
}

impl std::fmt::Debug for LogConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogConfig")
            .field("memory_bytes", &self.memory_bytes)
            .field("segment_bytes", &self.segment_bytes)
            .field("master_id", &self.master_id)
            .field("disk_expansion_factor", &self.disk_expansion_factor)
            .field("compaction", &self.compaction)
            .field("delete_reserve_fraction", &self.delete_reserve_fraction)
            .field(
                "tombstone_share_for_combined",
                &self.tombstone_share_for_combined,
            )
            .field("clean_ahead_segments", &self.clean_ahead_segments)
            .finish_non_exhaustive()
    }
}

/// Errors creating a log.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LogConfigError {
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(
        "segment size {0} must be a multiple of {SEGLET_BYTES} and between 2 seglets and 256 MiB"
    )]
    BadSegmentSize(usize),
    #[error("disk expansion factor {0} must be at least 1")]
    BadExpansionFactor(f64),
    #[error("delete reserve fraction {0} must be between 0 and 0.5")]
    BadDeleteReserve(f64),
    #[error("tombstone share for combined cleaning {0} must be between 0 and 1")]
    BadTombstoneShare(f64),
}

/// Why an append did not happen. Nothing was written in either case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The log is full for this kind of append; retry after the cleaner has run.
    #[error("log memory is full; retry later")]
    NoSpace,
    /// The entry can never fit in a segment.
    #[error("entry of {0} bytes does not fit in a segment")]
    TooLarge(usize),
}

/// Where an append landed, for replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub segment_id: u64,
    pub offset: usize,
    pub len: usize,
    /// The reference of the appended object or tombstone (the last entry appended).
    pub entry: LogRef,
}

/// An object to append.
#[derive(Debug, Clone, Copy)]
pub struct NewObject<'a> {
    pub table_id: u64,
    pub key: &'a [u8],
    pub version: u64,
    pub value: &'a [u8],
}

/// The object a tombstone kills.
#[derive(Debug, Clone, Copy)]
pub struct DeadObject {
    pub version: u64,
    /// Where the dead object is in the log.
    pub location: LogRef,
}

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
    /// (`compaction`), so its bytes must not be read until the pass ends.
    Compacting,
    /// A survivor of combined cleaning whose replicas are being written: not yet in
    /// the log (no digest names it) until they are durable (L§6.4).
    Pending,
    /// Cleaned by a one-segment combined pass (`combined_incremental`) whose
    /// survivor is being replicated: still in the log (the digest names it until
    /// the survivor is durable) but no longer in memory, where its seglets became
    /// the survivor's.
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
}

/// Per-segment counters, indexed by slot; updated by writers without a lock.
#[derive(Debug, Default)]
pub(crate) struct SlotCounters {
    pub segment_id: AtomicU64,
    pub live_bytes: AtomicU64,
    pub tombstone_bytes: AtomicU64,
    /// Live object and tombstone bytes a combined pass in progress has copied out of
    /// this (victim) segment into survivors: counted twice, here and in the
    /// survivor, until the pass forgets this segment's counts.
    pub relocated_live_bytes: AtomicU64,
    pub relocated_tombstone_bytes: AtomicU64,
    /// Every entry of the segment is durable on backups (or was when it was
    /// copied here), so a read may return it without waiting (docs/design.md §5 "Read").
    pub read_durable: AtomicBool,
}

/// (epoch, seglets, segment slot) handed back once no operation pinned before `epoch`
/// remains.
type Retired = (u64, Vec<u32>, Option<u32>);

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
}

/// A snapshot of the log's statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogStats {
    pub memory_bytes: usize,
    pub seglets_total: usize,
    pub seglets_free: usize,
    /// Bytes of live object entries.
    pub live_object_bytes: u64,
    /// Bytes of tombstone entries not yet cleaned away.
    pub tombstone_bytes: u64,
    /// Bytes of memory in seglets that hold neither live objects nor tombstones.
    pub dead_bytes: u64,
    pub segments: usize,
    /// Bytes of the log on backups (every segment at its pre-compaction length).
    pub disk_log_bytes: u64,
    /// Bytes ever appended to the head.
    pub appended_bytes: u64,
    pub compactions: u64,
    pub combined_passes: u64,
    pub segments_cleaned: u64,
    pub compaction_bytes_copied: u64,
    pub combined_bytes_copied: u64,
    pub seglets_freed: u64,
    pub tombstones_dropped: u64,
    pub cleaner_cpu_ns: u64,
    pub emergency_heads: u64,
    /// Cleaning passes that found work but could not take the seglets for their
    /// output (the cleaner then waits for memory to come back).
    pub passes_without_memory: u64,
    /// Combined passes that read their victims and gave them back: the survivors
    /// would not have freed enough memory.
    pub combined_passes_refused: u64,
    /// Combined passes that cleaned one segment in bounded memory because no other
    /// pass could make progress (`combined_incremental`; also in `combined_passes`).
    pub incremental_combined_passes: u64,
    /// Live tombstones combined cleaning copied into survivors (their targets were
    /// still in the log).
    pub tombstones_moved: u64,
}

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
    /// Sums of the slots' live object and tombstone bytes. While a combined pass
    /// runs, an entry it relocated is counted in its victim and its survivor alike;
    /// the `relocating_*` sums are those second counts, so the log's live and
    /// tombstone totals (what the balancer decides from, L§5.2) are the differences.
    /// Without that, a pass at 128 MiB overstated live data by up to 4% of memory for
    /// as long as it copied and replicated, and the balancer, seeing tombstones as a
    /// larger share of less freeable memory, forced more combined passes.
    live_object_bytes: AtomicU64,
    tombstone_bytes: AtomicU64,
    relocating_live_bytes: AtomicU64,
    relocating_tombstone_bytes: AtomicU64,
    /// Live tombstone bytes by target segment and holder (see `tombstones`).
    pub(crate) tombstone_targets: Mutex<TombstoneTargets>,
    /// Held for the whole of a combined-cleaning pass: passes run one at a time, so
    /// segments leave the log in one place and tombstone accounting stays exact.
    pub(crate) combined_pass: Mutex<()>,
    appended_bytes: AtomicU64,
    pub(crate) counters: CleanerCounters,
    /// Largest entry an append accepts (a segment minus room for its metadata).
    max_entry_bytes: usize,
}

/// Bytes every head sets aside for its tablet statistics entry.
const TABLET_STATS_ROOM_BYTES: usize = 64 * 1024;
/// Tablets described in one head: each costs at most 10+8+8+10+10 bytes.
const MAX_TABLET_STATS_PER_HEAD: usize = (TABLET_STATS_ROOM_BYTES - 32) / 46;

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
            cleaner_seglets: segment_seglets.min(crate::compaction::upfront_seglets(seg)) + 2,
            // clamp's bounds are constants in order (2 ≤ 32), so it cannot panic.
            delete_seglets: ((seglets as f64 * config.delete_reserve_fraction) as usize)
                .clamp(2, MAX_DELETE_RESERVE_BYTES / SEGLET_BYTES),
        };
        // Deadlock freedom (docs/design-notes.md "Cleaning always makes progress"):
        // with the pool at the cleaner's floor, a compaction or a one-segment
        // combined pass of any segment must be able to take its up-front seglets.
        assert!(
            reserves.cleaner_seglets
                >= segment_seglets.min(crate::compaction::upfront_seglets(seg) + 1),
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
            relocating_live_bytes: AtomicU64::new(0),
            relocating_tombstone_bytes: AtomicU64::new(0),
            tombstone_bytes: AtomicU64::new(0),
            tombstone_targets: Mutex::new(TombstoneTargets::with_capacity(slot_count)),
            combined_pass: Mutex::new(()),
            appended_bytes: AtomicU64::new(0),
            counters: CleanerCounters::default(),
            max_entry_bytes,
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

    /// The segment holding the entry at `r` and the entry's offset in it. Meant for
    /// entries whose segment is not yet read-durable ([`Log::is_read_durable`]):
    /// such a segment has never been compacted, so the offset is the one its
    /// replicas use. (A compacted segment's entries move to new offsets in memory.)
    pub fn position_of(&self, r: LogRef) -> (u64, usize) {
        let seglet = SegletPool::seglet_of(r) as usize;
        let index = self.seglet_index[seglet].load(Ordering::Acquire) as usize;
        let within = (r.0 % SEGLET_BYTES as u64) as usize;
        (self.segment_id_of(r), index * SEGLET_BYTES + within)
    }

    /// Removes a cleaned segment's remaining counts from the totals.
    pub(crate) fn forget_counted(&self, live_bytes: u64, tombstone_bytes: u64) {
        self.live_object_bytes
            .fetch_sub(live_bytes, Ordering::Relaxed);
        self.tombstone_bytes
            .fetch_sub(tombstone_bytes, Ordering::Relaxed);
    }

    /// A victim whose survivors hold `live_bytes` and `tombstone_bytes` it had
    /// counted left the log: those entries are counted once again.
    pub(crate) fn relocation_done(&self, live_bytes: u64, tombstone_bytes: u64) {
        self.relocating_live_bytes
            .fetch_sub(live_bytes, Ordering::Relaxed);
        self.relocating_tombstone_bytes
            .fetch_sub(tombstone_bytes, Ordering::Relaxed);
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

    /// Opens a new head: header, digest naming every segment of the log, safe version
    /// and tablet statistics (R§7.4). The old head is closed. Returns false when
    /// `class` may not take the seglets (and `allow_emergency` is false or even the
    /// emergency reserve is gone).
    fn roll_head(&self, head: &mut Head, class: AllocClass, allow_emergency: bool) -> bool {
        let mut table = self.segments.lock();
        let new_id = table.next_id;
        let Some(&slot) = table.free_slots.last() else {
            // Cannot happen: there are more slots than seglets (see `new`).
            return false;
        };
        let safe_version = self.config.metadata.safe_version();
        head.stats_buf.clear();
        self.config.metadata.tablet_stats(&mut head.stats_buf);
        // Statistics are hints for partitioning recovery; keep the entry within the
        // room every segment sets aside for it.
        head.stats_buf.truncate(MAX_TABLET_STATS_PER_HEAD);
        let mut emergency = false;
        let mut writer = SegmentWriter::new(new_id, slot, self.config.segment_bytes);
        loop {
            head.digest_ids.clear();
            head.digest_ids.extend(
                table
                    .by_id
                    .values()
                    .filter(|m| !matches!(m.state, SegmentState::Emergency | SegmentState::Pending))
                    .map(|m| m.id),
            );
            head.digest_ids.push(new_id);
            head.meta_buf.clear();
            entry::encode_segment_header(self.config.master_id, new_id, &mut head.meta_buf);
            entry::encode_log_digest(&head.digest_ids, &mut head.meta_buf);
            entry::encode_safe_version(safe_version, &mut head.meta_buf);
            if !emergency && !head.stats_buf.is_empty() {
                entry::encode_tablet_stats(&head.stats_buf, &mut head.meta_buf);
            }
            let need = head.meta_buf.len();
            let class_now = if emergency {
                AllocClass::Emergency
            } else {
                class
            };
            if self.adopt(&mut writer, need, class_now) {
                break;
            }
            if emergency || !allow_emergency {
                return false;
            }
            emergency = true;
        }
        table.free_slots.pop();
        table.next_id += 1;
        writer.write(&self.pool, &head.meta_buf);
        writer.note_entry(head.meta_buf.len());
        let counters = &self.slots[slot as usize];
        counters.segment_id.store(new_id, Ordering::Release);
        counters.live_bytes.store(0, Ordering::Relaxed);
        counters.tombstone_bytes.store(0, Ordering::Relaxed);
        counters.relocated_live_bytes.store(0, Ordering::Relaxed);
        counters
            .relocated_tombstone_bytes
            .store(0, Ordering::Relaxed);
        let durable_on_close = self.config.replicas.durable_on_close();
        counters
            .read_durable
            .store(durable_on_close, Ordering::Release);
        let now = self.clock();
        table.by_id.insert(
            new_id,
            SegmentMeta {
                id: new_id,
                slot,
                seglets: Vec::new(),
                mem_length: 0,
                disk_length: 0,
                created_at: now,
                max_entry_bytes: 0,
                state: if emergency {
                    SegmentState::Emergency
                } else {
                    SegmentState::Head
                },
                replicated: false,
            },
        );
        let mut old = std::mem::replace(&mut head.writer, writer);
        let old_emergency = std::mem::replace(&mut head.emergency, emergency);
        let mut left_log = None;
        if old.slot != u32::MAX {
            let spare = old.trim_unused();
            if !spare.is_empty() {
                self.pool.release(&spare);
            }
            if old_emergency {
                // An emergency head holds no object or tombstone and is not named by
                // the new digest: it leaves the log at once (L§7).
                table.by_id.remove(&old.id);
                self.retire_locked(std::mem::take(&mut old.seglets), Some(old.slot));
                left_log = Some(old.id);
            } else if let Some(meta) = table.by_id.get_mut(&old.id) {
                meta.seglets = std::mem::take(&mut old.seglets);
                meta.mem_length = old.length;
                meta.disk_length = old.length;
                meta.state = SegmentState::Closed;
                meta.replicated = durable_on_close;
                meta.max_entry_bytes = old.max_entry_bytes;
            }
        }
        drop(table);
        if emergency {
            self.counters
                .emergency_heads
                .fetch_add(1, Ordering::Relaxed);
        }
        // R§7.4: the old head is closed and the new one opened with its digest
        // first; the replica manager orders the RPCs (open new, close old, then
        // new data).
        let sink = &self.config.replicas;
        if old.slot != u32::MAX {
            sink.close(old.id);
        }
        sink.opened(new_id, SegmentRole::Head);
        sink.replicate(new_id, 0, head.meta_buf.len());
        if let Some(id) = left_log {
            sink.cleaned(&[], &[id]);
        }
        true
    }

    /// Closes the head and opens a new one now (the replica manager moves the head
    /// off a lost backup before new writes go to it, R§8). May use the emergency
    /// reserve; false if even that is gone.
    pub fn roll_head_now(&self) -> bool {
        let mut head = self.head.lock();
        self.roll_head(&mut head, AllocClass::Write, true)
    }

    /// The id of the current head segment.
    pub fn head_segment_id(&self) -> u64 {
        self.head.lock().writer.id
    }

    /// Appends bytes `[from, length)` of segment `segment_id` as they are in memory
    /// to `out`, and returns the segment's length: the head's bytes so far, or a
    /// closed segment's whole (possibly compacted) contents. `None` if the segment
    /// is no longer in memory (it was cleaned, or was an emergency head).
    ///
    /// The replica manager's one read of the log (R§4.2); a compacted segment is
    /// re-replicated in its compacted form (L§6.4). Sleeps while a compaction of the
    /// segment is in progress (a few milliseconds; see `compaction`).
    pub fn copy_for_replica(
        &self,
        segment_id: u64,
        from: usize,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        {
            let head = self.head.lock();
            let w = &head.writer;
            if w.id == segment_id {
                self.copy_range(&w.seglets, from, w.length, out);
                return Some(w.length);
            }
        }
        loop {
            // Seglets of a closed segment are only reused after every operation
            // pinned before they were retired has finished (epochs), so pin before
            // looking.
            let pin = self.pin();
            let (seglets, length) = {
                let table = self.segments.lock();
                let meta = table.by_id.get(&segment_id)?;
                match meta.state {
                    // It stopped being the head's writer between the two locks but
                    // `roll_head` has not handed its seglets over yet: cannot
                    // happen, both happen under the head lock; be safe anyway.
                    SegmentState::Head => return None,
                    // Half old, half new chain: wait for the pass (a few ms), and
                    // unpinned — it waits for pins to reuse the old seglets.
                    SegmentState::Compacting => None,
                    // Its memory became its survivor's; the survivor replaces it
                    // in the log once durable, and the pass that does so waits
                    // for the replica manager, so waiting here could deadlock.
                    SegmentState::Leaving => return None,
                    _ => Some((meta.seglets.clone(), meta.mem_length)),
                }
            }
            .unzip();
            let (Some(seglets), Some(length)) = (seglets, length) else {
                drop(pin);
                self.config
                    .clock
                    .sleep_blocking(std::time::Duration::from_micros(100));
                continue;
            };
            self.copy_range(&seglets, from, length, out);
            return Some(length);
        }
    }

    fn copy_range(&self, seglets: &[u32], from: usize, to: usize, out: &mut Vec<u8>) {
        let mut offset = from;
        out.reserve(to.saturating_sub(from));
        while offset < to {
            let index = offset / SEGLET_BYTES;
            let within = offset % SEGLET_BYTES;
            let n = (SEGLET_BYTES - within).min(to - offset);
            out.extend_from_slice(&self.pool.seglet_tail(seglets[index], within)[..n]);
            offset += n;
        }
    }

    /// Segment `segment_id` is closed on all its replicas: reads of it need not wait
    /// and the cleaner may take it (R§4.2, L§6.4). Unknown ids are ignored.
    pub fn segment_replicated(&self, segment_id: u64) {
        let mut table = self.segments.lock();
        if let Some(meta) = table.by_id.get_mut(&segment_id) {
            meta.replicated = true;
            self.slots[meta.slot as usize]
                .read_durable
                .store(true, Ordering::Release);
        }
    }

    /// Whether the entry at `r` is in a segment whose every entry is durable; when
    /// false the caller waits for the head's replication before returning it.
    pub fn is_read_durable(&self, r: LogRef) -> bool {
        self.slots[self.slot_of(r) as usize]
            .read_durable
            .load(Ordering::Acquire)
    }

    /// Closes the current head and opens a new one whose digest reflects the current
    /// segment table. Used after combined cleaning so survivors join the log and
    /// cleaned segments leave it. The new head takes only memory that writers could
    /// take anyway; below that it is an emergency head, which holds the digest alone
    /// and leaves the log at the next roll (L§7). A head taken from the cleaner's
    /// reserve would hand that reserve to writes and deletes, a seglet per pass:
    /// at 95% utilisation forced combined passes drained it until no compaction
    /// could start (docs/benchmarks.md, session 10).
    pub(crate) fn roll_head_for_cleaner(&self) -> bool {
        let mut head = self.head.lock();
        self.roll_head(&mut head, AllocClass::Write, true)
    }

    /// Appends `object`, preceded by a tombstone for the version it replaces, as one
    /// unit in the head. Returns where it landed; the object's reference is
    /// `Appended::entry`.
    pub fn append_object(
        &self,
        object: &NewObject<'_>,
        replaces: Option<DeadObject>,
    ) -> Result<Appended, AppendError> {
        let birth = self.clock();
        let obj_header = entry::object_header(
            object.table_id,
            object.version,
            birth,
            object.key.len(),
            object.value.len(),
        );
        let obj_len = obj_header.as_bytes().len() + object.key.len() + object.value.len() + 4;
        let target = replaces.map(|dead| self.segment_id_of(dead.location));
        let tomb = replaces.zip(target).map(|(dead, seg)| {
            entry::tombstone_header(object.table_id, dead.version, seg, object.key.len())
        });
        let tomb_len = tomb.map_or(0, |h| h.as_bytes().len() + object.key.len() + 4);
        let total = obj_len + tomb_len;
        if obj_len > self.max_entry_bytes {
            return Err(AppendError::TooLarge(obj_len));
        }
        let obj_crc = entry::entry_crc(&[obj_header.as_bytes(), object.key, object.value]);
        let tomb_crc = tomb.map(|h| entry::entry_crc(&[h.as_bytes(), object.key]));

        let mut head = self.head.lock();
        let start = self.make_room(&mut head, total, AllocClass::Write)?;
        let w = &mut head.writer;
        if let (Some(h), Some(crc)) = (tomb, tomb_crc) {
            w.write(&self.pool, h.as_bytes());
            w.write(&self.pool, object.key);
            w.write(&self.pool, &crc.to_le_bytes());
        }
        let obj_offset = w.length;
        w.write(&self.pool, obj_header.as_bytes());
        w.write(&self.pool, object.key);
        w.write(&self.pool, object.value);
        w.write(&self.pool, &obj_crc.to_le_bytes());
        w.note_entry(obj_len.max(tomb_len));
        let appended = Appended {
            segment_id: w.id,
            offset: start,
            len: total,
            entry: w.ref_at(obj_offset),
        };
        let counters = &self.slots[w.slot as usize];
        counters
            .live_bytes
            .fetch_add(obj_len as u64, Ordering::Relaxed);
        if let Some(target) = target {
            self.tombstone_appended(target, w, tomb_len);
        }
        drop(head);
        self.live_object_bytes
            .fetch_add(obj_len as u64, Ordering::Relaxed);
        self.tombstone_bytes
            .fetch_add(tomb_len as u64, Ordering::Relaxed);
        self.appended_bytes
            .fetch_add(total as u64, Ordering::Relaxed);
        Ok(appended)
    }

    /// Appends a tombstone for the object at `dead.location` (a delete). May use the
    /// room kept for deletes.
    pub fn append_tombstone(
        &self,
        table_id: u64,
        key: &[u8],
        dead: DeadObject,
    ) -> Result<Appended, AppendError> {
        let seg = self.segment_id_of(dead.location);
        let header = entry::tombstone_header(table_id, dead.version, seg, key.len());
        let len = header.as_bytes().len() + key.len() + 4;
        if len > self.max_entry_bytes {
            return Err(AppendError::TooLarge(len));
        }
        let crc = entry::entry_crc(&[header.as_bytes(), key]);
        let mut head = self.head.lock();
        let start = self.make_room(&mut head, len, AllocClass::Delete)?;
        let w = &mut head.writer;
        w.write(&self.pool, header.as_bytes());
        w.write(&self.pool, key);
        w.write(&self.pool, &crc.to_le_bytes());
        w.note_entry(len);
        let appended = Appended {
            segment_id: w.id,
            offset: start,
            len,
            entry: w.ref_at(start),
        };
        self.tombstone_appended(seg, w, len);
        drop(head);
        self.tombstone_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        self.appended_bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(appended)
    }

    /// Makes sure the head can take `len` more bytes, rolling to a new head if it is
    /// full or an emergency head; returns the offset where they will go.
    fn make_room(
        &self,
        head: &mut Head,
        len: usize,
        class: AllocClass,
    ) -> Result<usize, AppendError> {
        if head.emergency || head.writer.room() < len {
            self.reclaim();
            if !self.roll_head(head, class, false) {
                return Err(AppendError::NoSpace);
            }
        }
        if !self.adopt(&mut head.writer, len, class) {
            self.reclaim();
            if !self.adopt(&mut head.writer, len, class) {
                return Err(AppendError::NoSpace);
            }
        }
        Ok(head.writer.length)
    }

    /// Faults all log memory in now ([`SegletPool::prefault`]); call it off the
    /// hot path (a background thread at start-up).
    pub fn prefault_memory(&self) -> std::io::Result<()> {
        self.pool.prefault()
    }

    /// Reports an append to the replica sink; call after releasing bucket locks and
    /// before acknowledging the operation.
    pub fn replicate(&self, appended: &Appended) {
        self.config
            .replicas
            .replicate(appended.segment_id, appended.offset, appended.len);
    }

    /// Records that the object entry at `r` (of `len` bytes) is no longer live: it was
    /// overwritten, deleted or its tablet dropped.
    pub fn object_died(&self, r: LogRef, len: usize) {
        let slot = self.slot_of(r);
        let c = &self.slots[slot as usize].live_bytes;
        let before = c.fetch_sub(len as u64, Ordering::Relaxed);
        debug_assert!(
            before >= len as u64,
            "live bytes of slot {slot} went negative"
        );
        self.live_object_bytes
            .fetch_sub(len as u64, Ordering::Relaxed);
    }

    /// A tombstone of `len` bytes naming segment `target` was appended to the head `w`
    /// (head lock held): listed and counted together, as `tombstones` requires.
    fn tombstone_appended(&self, target: u64, w: &SegmentWriter, len: usize) {
        self.tombstone_targets
            .lock()
            .add(target, w.id, w.slot, len as u64);
        self.slots[w.slot as usize]
            .tombstone_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
    }

    /// Segments `gone` have left the log (combined cleaning removed them): every
    /// tombstone naming one of them is dead now, wherever it is, so its holder's count
    /// of live tombstone bytes drops at once (L§3). Holders among `gone` are skipped:
    /// their counters were already forgotten. Returns the bytes that died.
    pub(crate) fn tombstone_targets_left(&self, gone: &[u64]) -> u64 {
        let mut expired = 0u64;
        let mut targets = self.tombstone_targets.lock();
        for &target in gone {
            let holders = targets.expire(target);
            for &h in &holders {
                if gone.contains(&h.segment_id) {
                    continue;
                }
                let c = &self.slots[h.slot as usize];
                // Only a corrupt, unparsable tombstone in a cleaned segment could leave
                // its holder listed after the holder left the log; its slot may belong
                // to another segment by now, whose counts must not change.
                let holder_in_log = c.segment_id.load(Ordering::Relaxed) == h.segment_id;
                debug_assert!(holder_in_log, "tombstone holder left the log while listed");
                if !holder_in_log {
                    continue;
                }
                let before = c.tombstone_bytes.fetch_sub(h.bytes, Ordering::Relaxed);
                debug_assert!(
                    before >= h.bytes,
                    "tombstone bytes of a segment went negative"
                );
                expired += h.bytes;
            }
            targets.recycle(holders);
        }
        drop(targets);
        self.tombstone_bytes.fetch_sub(expired, Ordering::Relaxed);
        expired
    }

    /// A live entry of `len` bytes was copied from the victim in `from_slot` to the
    /// survivor in `slot`: counted in both until the victim's counts are forgotten
    /// (`forget_slot_counts`), and noted as such (see `relocating_live_bytes`).
    pub(crate) fn survivor_bytes_added(
        &self,
        slot: u32,
        len: usize,
        tombstone: bool,
        from_slot: u32,
    ) {
        let (c, from) = (&self.slots[slot as usize], &self.slots[from_slot as usize]);
        let len = len as u64;
        if tombstone {
            c.tombstone_bytes.fetch_add(len, Ordering::Relaxed);
            from.relocated_tombstone_bytes
                .fetch_add(len, Ordering::Relaxed);
            self.relocating_tombstone_bytes
                .fetch_add(len, Ordering::Relaxed);
            self.tombstone_bytes.fetch_add(len, Ordering::Relaxed);
        } else {
            c.live_bytes.fetch_add(len, Ordering::Relaxed);
            from.relocated_live_bytes.fetch_add(len, Ordering::Relaxed);
            self.relocating_live_bytes.fetch_add(len, Ordering::Relaxed);
            self.live_object_bytes.fetch_add(len, Ordering::Relaxed);
        }
    }

    /// Hands seglets (and a slot) back once no operation can still see them.
    pub(crate) fn retire(&self, seglets: Vec<u32>, slot: Option<u32>) {
        let epoch = self.epochs.advance();
        self.retired.lock().push((epoch, seglets, slot));
    }

    /// Hands seglets retired earlier, at `epoch` (a value of `Epochs::advance`),
    /// to the retired list.
    pub(crate) fn retire_at(&self, epoch: u64, seglets: Vec<u32>) {
        self.retired.lock().push((epoch, seglets, None));
    }

    fn retire_locked(&self, seglets: Vec<u32>, slot: Option<u32>) {
        // Same as `retire`; `segments` is held but `retired` is a leaf lock.
        self.retire(seglets, slot)
    }

    /// Frees retired seglets whose epoch has passed. Returns how many were freed.
    pub fn reclaim(&self) -> usize {
        let mut retired = self.retired.lock();
        if retired.is_empty() {
            return 0;
        }
        let oldest = self.epochs.oldest_pinned();
        let mut freed = 0;
        let mut slots = Vec::new();
        retired.retain_mut(|(epoch, seglets, slot)| {
            if *epoch > oldest {
                return true;
            }
            self.pool.release(seglets);
            freed += seglets.len();
            if let Some(s) = slot {
                slots.push(*s);
            }
            false
        });
        drop(retired);
        if !slots.is_empty() {
            let mut table = self.segments.lock();
            for s in slots {
                self.slots[s as usize]
                    .segment_id
                    .store(0, Ordering::Relaxed);
                table.free_slots.push(s);
            }
        }
        self.counters
            .seglets_freed
            .fetch_add(freed as u64, Ordering::Relaxed);
        freed
    }

    /// Waits until every operation that was pinned when this was called has finished.
    /// Must not be called while holding a pin.
    pub fn wait_for_operations(&self) {
        let epoch = self.epochs.advance();
        while !self.epochs.safe(epoch) {
            std::thread::yield_now();
        }
    }

    /// Seglets waiting for their epoch to pass.
    pub fn retired_seglets(&self) -> usize {
        self.retired.lock().iter().map(|(_, s, _)| s.len()).sum()
    }

    /// Reads the first bytes of the entry at `r` (enough to parse its header).
    fn prefix<'a>(&'a self, r: LogRef, buf: &'a mut [u8; MAX_HEADER_BYTES]) -> &'a [u8] {
        let seglet = SegletPool::seglet_of(r);
        let offset = (r.0 % SEGLET_BYTES as u64) as usize;
        let tail = self.pool.seglet_tail(seglet, offset);
        if tail.len() >= MAX_HEADER_BYTES {
            // Bytes past the end of the entry may belong to a later, unpublished entry;
            // the parser reads only as far as the entry's own lengths say.
            &tail[..MAX_HEADER_BYTES]
        } else {
            let n = self.pool.copy_out(r, buf);
            &buf[..n]
        }
    }

    /// Parses the entry at `r` once for a segment scan (`entry::parse_scanned`).
    pub(crate) fn scan_entry(
        &self,
        r: LogRef,
    ) -> Result<(EntryHeader, entry::ScannedLayout), EntryError> {
        let mut buf = [0u8; MAX_HEADER_BYTES];
        entry::parse_scanned(self.prefix(r, &mut buf))
    }

    /// A view of the object entry at `r`. The caller holds an epoch pin and got `r`
    /// from the hash table (or a segment scan).
    pub fn object(&self, r: LogRef) -> Result<ObjectView<'_>, EntryError> {
        let mut buf = [0u8; MAX_HEADER_BYTES];
        let layout = entry::parse_object_layout(self.prefix(r, &mut buf))?;
        Ok(self.object_with_layout(r, layout))
    }

    /// A view of the object entry at `r` whose layout a scan already parsed.
    pub(crate) fn object_with_layout(&self, r: LogRef, layout: ObjectLayout) -> ObjectView<'_> {
        let offset = (r.0 % SEGLET_BYTES as u64) as usize;
        let contiguous = if offset + layout.total_len <= SEGLET_BYTES {
            Some(&self.pool.seglet_tail(SegletPool::seglet_of(r), offset)[..layout.total_len])
        } else {
            None
        };
        ObjectView {
            log: self,
            r,
            layout,
            contiguous,
        }
    }

    /// `r` advanced by `n` bytes along its seglet chain.
    pub(crate) fn advance(&self, r: LogRef, n: usize) -> LogRef {
        let mut seglet = SegletPool::seglet_of(r);
        let mut offset = (r.0 % SEGLET_BYTES as u64) as usize + n;
        while offset >= SEGLET_BYTES {
            match self.pool.next_seglet(seglet) {
                Some(next) => {
                    seglet = next;
                    offset -= SEGLET_BYTES;
                }
                // Only reachable with a corrupt length; the piecewise readers then
                // stop early and checksums fail.
                None => return SegletPool::log_ref(seglet, SEGLET_BYTES - 1),
            }
        }
        SegletPool::log_ref(seglet, offset)
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> LogStats {
        let table = self.segments.lock();
        let disk_log_bytes = table
            .by_id
            .values()
            .map(|m| m.disk_length as u64)
            .sum::<u64>()
            + self.head.try_lock().map_or(0, |h| h.writer.length as u64);
        let segments = table.by_id.len();
        drop(table);
        let seglets_total = self.pool.seglet_count() - 1;
        let seglets_free = self.pool.free_seglets();
        let (live, tomb) = (self.live_object_bytes(), self.tombstone_bytes_total());
        let used = ((seglets_total - seglets_free) * SEGLET_BYTES) as u64;
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LogStats {
            memory_bytes: self.pool.bytes(),
            seglets_total,
            seglets_free,
            live_object_bytes: live,
            tombstone_bytes: tomb,
            dead_bytes: used.saturating_sub(live + tomb),
            segments,
            disk_log_bytes,
            appended_bytes: get(&self.appended_bytes),
            compactions: get(&c.compactions),
            combined_passes: get(&c.combined_passes),
            segments_cleaned: get(&c.segments_cleaned),
            compaction_bytes_copied: get(&c.compaction_bytes_copied),
            combined_bytes_copied: get(&c.combined_bytes_copied),
            seglets_freed: get(&c.seglets_freed),
            tombstones_dropped: get(&c.tombstones_dropped),
            passes_without_memory: get(&c.passes_without_memory),
            combined_passes_refused: get(&c.combined_passes_refused),
            incremental_combined_passes: get(&c.incremental_combined_passes),
            tombstones_moved: get(&c.tombstones_moved),
            cleaner_cpu_ns: get(&c.cpu_ns),
            emergency_heads: get(&c.emergency_heads),
        }
    }

    /// Live object bytes, each entry counted once (see `relocating_live_bytes`).
    pub(crate) fn live_object_bytes(&self) -> u64 {
        // The two sums are read apart, so a pass forgetting its victims in between
        // can put them briefly out of step: saturate rather than wrap.
        let relocating = self.relocating_live_bytes.load(Ordering::Relaxed);
        let all = self.live_object_bytes.load(Ordering::Relaxed);
        all.saturating_sub(relocating)
    }

    /// Tombstone bytes, each entry counted once.
    pub(crate) fn tombstone_bytes_total(&self) -> u64 {
        let relocating = self.relocating_tombstone_bytes.load(Ordering::Relaxed);
        let all = self.tombstone_bytes.load(Ordering::Relaxed);
        all.saturating_sub(relocating)
    }

    pub(crate) fn head_id(&self) -> u64 {
        self.head.lock().writer.id
    }
}

/// A published object entry in the log, possibly spanning seglets.
pub struct ObjectView<'a> {
    log: &'a Log,
    r: LogRef,
    layout: ObjectLayout,
    /// The whole entry when it lies in one seglet (the common case: no copies).
    contiguous: Option<&'a [u8]>,
}

impl<'a> ObjectView<'a> {
    pub fn table_id(&self) -> u64 {
        self.layout.table_id
    }
    pub fn version(&self) -> u64 {
        self.layout.version
    }
    pub fn birth(&self) -> u64 {
        self.layout.birth
    }
    pub fn key_len(&self) -> usize {
        self.layout.key_len
    }
    pub fn value_len(&self) -> usize {
        self.layout.value_len
    }
    /// All bytes of the entry, header and checksum included.
    pub fn entry_len(&self) -> usize {
        self.layout.total_len
    }
    pub fn location(&self) -> LogRef {
        self.r
    }

    fn pieces(&self, offset: usize, len: usize, mut f: impl FnMut(&[u8])) {
        match self.contiguous {
            Some(bytes) => f(&bytes[offset..offset + len]),
            None => {
                let start = self.log.advance(self.r, offset);
                self.log.pool.for_each_piece(start, len, f);
            }
        }
    }

    /// Whether the key equals `key` (compared in place).
    pub fn key_eq(&self, key: &[u8]) -> bool {
        if self.layout.key_len != key.len() {
            return false;
        }
        if let Some(bytes) = self.contiguous {
            let o = self.layout.key_offset;
            return &bytes[o..o + key.len()] == key;
        }
        let mut rest = key;
        let mut equal = true;
        self.pieces(self.layout.key_offset, key.len(), |p| {
            if equal {
                equal = rest.len() >= p.len() && &rest[..p.len()] == p;
                rest = &rest[p.len().min(rest.len())..];
            }
        });
        equal
    }

    /// The key, when it lies in one piece.
    pub fn key_slice(&self) -> Option<&'a [u8]> {
        self.contiguous
            .map(|b| &b[self.layout.key_offset..self.layout.key_offset + self.layout.key_len])
    }

    /// Appends the key to `out`.
    pub fn copy_key(&self, out: &mut Vec<u8>) {
        self.pieces(self.layout.key_offset, self.layout.key_len, |p| {
            out.extend_from_slice(p)
        });
    }

    /// Calls `f` with the consecutive pieces of the value (scatter-gather: no copy).
    pub fn value_pieces(&self, f: impl FnMut(&[u8])) {
        self.pieces(self.layout.value_offset, self.layout.value_len, f);
    }

    /// Appends the value to `out`.
    pub fn copy_value(&self, out: &mut Vec<u8>) {
        out.reserve(self.layout.value_len);
        self.value_pieces(|p| out.extend_from_slice(p));
    }

    /// Whether the stored checksum matches the entry's bytes.
    pub fn checksum_ok(&self) -> bool {
        let body = self.layout.total_len - entry::CRC_BYTES;
        let mut crc = 0u32;
        self.pieces(0, body, |p| crc = crc32c::crc32c_append(crc, p));
        let mut stored = [0u8; 4];
        let mut at = 0;
        self.pieces(body, entry::CRC_BYTES, |p| {
            stored[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        });
        crc == u32::from_le_bytes(stored)
    }
}

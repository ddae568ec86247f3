//! The hash table proper: main buckets, their locks, and chain walking.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::lock_api::RawMutex as _;

use crate::bucket::{
    entry, is_link, link, tag, tag_of, Bucket, BucketArray, EMPTY, LAST, REF_MASK,
};
use crate::overflow::{OverflowArena, MAX_CHUNKS};
use crate::{IndexFull, LOCK_STRIPES, MAX_CHAIN_BUCKETS, SLOTS_PER_BUCKET};

/// A bucket of the table: a main bucket by its index, or an overflow bucket by its arena index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BucketId {
    Main(usize),
    Overflow(u64),
}

/// The position of one entry: a bucket (main or overflow) and a slot index in it.
///
/// A `Slot` is only meaningful to the `BucketGuard` that produced it, while
/// that guard is held. An `insert` on the guard may move the entry in the
/// last slot of the chain's last bucket into a new overflow bucket, and a
/// `remove` may unlink overflow buckets that have become empty, so a `Slot`
/// obtained before an `insert` or a `remove` should be looked up again
/// afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    bucket: BucketId,
    index: u8,
}

/// The master's hash table: key hash → 48-bit log reference. See the crate documentation.
pub struct HashTable {
    /// The main buckets; see `bucket_of` for which one a hash belongs to.
    buckets: BucketArray,
    /// Writer locks, striped: main bucket `b` (and its whole overflow chain) is
    /// covered by `locks[b & lock_mask]`.
    ///
    /// Kept apart from the buckets so that a bucket stays exactly one cache line,
    /// and few (at most [`LOCK_STRIPES`]) so that they stay in the cache: with
    /// one lock per bucket, a 1 GiB store's 1.7 MB of locks missed the cache on
    /// most writes, so a write paid two misses (lock, then bucket) one after the
    /// other, and the cleaner's relocation prefetched two random lines per object
    /// (R§11.3: the work of a write or a relocation is its cache misses).
    locks: Box<[parking_lot::RawMutex]>,
    /// `locks.len() - 1`; `locks.len()` is a power of two.
    lock_mask: usize,
    /// Number of main buckets, as the multiplier of `bucket_of`.
    bucket_count_u64: u64,
    overflow: OverflowArena,
    /// The most buckets (main bucket included) a chain may have, and so the
    /// most a walk visits ([`MAX_CHAIN_BUCKETS`] outside of tests).
    max_chain_buckets: usize,
    /// Number of entries, maintained by insert and remove.
    len: AtomicUsize,
}

impl HashTable {
    /// A table with `bucket_count` main buckets (at least 1). Any count works: the
    /// table is sized to the memory it may use, not rounded to a power of two.
    pub fn new(bucket_count: usize) -> Self {
        Self::with_lock_stripes(bucket_count, LOCK_STRIPES)
    }

    /// `new`, with at most `lock_stripes` writer locks (rounded up to a power of
    /// two, and never more than the buckets need). One stripe per bucket is
    /// the old layout; `index/examples/lock_stripes.rs` compares the two.
    pub fn with_lock_stripes(bucket_count: usize, lock_stripes: usize) -> Self {
        Self::with_limits(bucket_count, MAX_CHUNKS, MAX_CHAIN_BUCKETS, lock_stripes)
    }

    /// A table sized for `expected_entries`: one bucket per four entries, so
    /// that buckets are on average half full and chains are rare.
    pub fn with_capacity(expected_entries: usize) -> Self {
        Self::new(expected_entries / 4)
    }

    /// `new`, with limits on the number of overflow chunks and on chain length
    /// (tests use small ones to reach `IndexFull` and the walks' bound).
    pub(crate) fn with_limits(
        bucket_count: usize,
        max_chunks: usize,
        max_chain_buckets: usize,
        lock_stripes: usize,
    ) -> Self {
        assert!(
            max_chain_buckets >= 1,
            "a chain has at least its main bucket"
        );
        let bucket_count = bucket_count.max(1);
        let buckets = match BucketArray::new(bucket_count, true) {
            Some(buckets) => buckets,
            None => panic!("cannot allocate a hash table of {bucket_count} buckets"),
        };
        let stripes = lock_stripes.clamp(1, bucket_count).next_power_of_two();
        let locks = (0..stripes)
            .map(|_| parking_lot::RawMutex::INIT)
            .collect::<Box<[_]>>();
        HashTable {
            buckets,
            locks,
            lock_mask: stripes - 1,
            bucket_count_u64: bucket_count as u64,
            overflow: OverflowArena::new(bucket_count, max_chunks),
            max_chain_buckets,
            len: AtomicUsize::new(0),
        }
    }

    /// The number of main buckets.
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Bytes allocated (mapped) for the main buckets, their locks, the overflow
    /// chunks and the overflow free list. Overflow chunks double in size and are
    /// zeroed lazily by the kernel, so most of a large chunk may never be resident:
    /// see [`Self::resident_bound_bytes`] for what the table can actually occupy.
    pub fn memory_bytes(&self) -> usize {
        self.main_bytes() + self.overflow.memory_bytes() + self.overflow.free_list_bytes()
    }

    /// Faults the main buckets' pages in now (`BucketArray::prefault`); safe
    /// while the table is in use.
    pub fn prefault(&self) -> std::io::Result<()> {
        self.buckets.prefault()
    }

    /// An upper bound of the bytes the table keeps resident: the main buckets (64 B
    /// each) and their locks (at most [`LOCK_STRIPES`] bytes), and 64 B plus 8 B of
    /// free list for every overflow bucket up to the arena's high-water mark — the
    /// only overflow memory ever touched. This grows with the most overflow buckets ever in use at once,
    /// not with the number of operations (emptied tails are reused).
    pub fn resident_bound_bytes(&self) -> usize {
        let per_overflow_bucket = std::mem::size_of::<Bucket>() + std::mem::size_of::<u64>();
        self.main_bytes() + self.overflow_buckets_high_water() * per_overflow_bucket
    }

    /// The bytes of this table resident in memory now, asked of the kernel page by
    /// page (`mincore`): the main buckets' pages faulted in so far (the array is
    /// zeroed on first touch, so a new table's are not), their locks, the overflow
    /// chunks' touched pages, and the free list's entries up to the high-water mark.
    /// At most [`Self::resident_bound_bytes`] but for page rounding (with huge pages the
    /// main array faults in 2 MiB at a time). About one system call per 16 MiB, no
    /// lock but the arena's (cold), no allocation. `None` where the kernel cannot be
    /// asked.
    pub fn resident_bytes(&self) -> Option<usize> {
        let free_list = self
            .overflow
            .free_list_bytes()
            .min(self.overflow_buckets_high_water() * std::mem::size_of::<u64>());
        Some(
            self.buckets.resident_bytes()?
                + std::mem::size_of_val::<[parking_lot::RawMutex]>(&self.locks)
                + self.overflow.resident_bytes()?
                + free_list,
        )
    }

    /// Bytes of the main buckets and their locks.
    fn main_bytes(&self) -> usize {
        std::mem::size_of_val::<[Bucket]>(&self.buckets)
            + std::mem::size_of_val::<[parking_lot::RawMutex]>(&self.locks)
    }

    /// Number of overflow buckets linked into chains now.
    pub fn overflow_buckets_in_use(&self) -> usize {
        self.overflow.in_use()
    }

    /// Number of overflow buckets unlinked from their chains and waiting on the
    /// arena's free list for the next chain that needs one.
    pub fn overflow_buckets_free(&self) -> usize {
        self.overflow.free()
    }

    /// The most overflow buckets ever in use at once: in use plus free, since a
    /// never-used bucket is taken only when the free list is empty. Their memory
    /// is all the arena has touched (see [`Self::resident_bound_bytes`]).
    pub fn overflow_buckets_high_water(&self) -> usize {
        self.overflow.high_water()
    }

    /// Overflow buckets ever unlinked from their chains (a bucket reused and
    /// unlinked again counts again).
    pub fn overflow_buckets_released_total(&self) -> u64 {
        self.overflow.released_total()
    }

    /// Number of entries. Under concurrent writers this is only a snapshot.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether the table holds no entries (a snapshot under concurrent writers).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The main bucket of `hash`: `⌊hash · bucket_count / 2⁶⁴⌋`.
    ///
    /// This keeps hash order — a contiguous range of hashes (a tablet) maps to a
    /// contiguous range of buckets — for any bucket count, at the cost of one
    /// multiplication (Lemire's "fast range").
    #[inline]
    pub fn bucket_of(&self, hash: u64) -> usize {
        ((u128::from(hash) * u128::from(self.bucket_count_u64)) >> 64) as usize
    }

    /// The inclusive range `[first, last]` of hashes whose main bucket is `bucket`.
    ///
    /// The ranges of buckets `0..bucket_count` are contiguous and together cover `[0, u64::MAX]`.
    pub fn bucket_hash_range(&self, bucket: usize) -> (u64, u64) {
        assert!(
            bucket < self.bucket_count(),
            "bucket {bucket} out of range (bucket count {})",
            self.bucket_count()
        );
        let first = self.first_hash_of(bucket as u64);
        let last = if bucket + 1 == self.bucket_count() {
            u64::MAX
        } else {
            self.first_hash_of(bucket as u64 + 1) - 1
        };
        (first, last)
    }

    /// The smallest hash whose bucket is `bucket` (`bucket < bucket_count`):
    /// `⌈bucket · 2⁶⁴ / bucket_count⌉`, which is below 2⁶⁴.
    fn first_hash_of(&self, bucket: u64) -> u64 {
        ((u128::from(bucket) << 64).div_ceil(u128::from(self.bucket_count_u64))) as u64
    }

    /// Lock-free lookup.
    ///
    /// Calls `is_match(reference)` for each reference whose tag matches
    /// `hash`, in chain order, and returns the first reference for which it
    /// returns true. `is_match` is where the caller reads the log to compare
    /// keys; it may be called for references that are concurrently being
    /// replaced or removed, and even for entries of other main buckets (a walk
    /// that stands in an overflow bucket while it is unlinked and reused by
    /// another chain; see the crate documentation), so it must decide by the
    /// key, never by the tag alone, and cope with reading any reference that
    /// was recently in the table.
    #[inline]
    pub fn lookup(&self, hash: u64, mut is_match: impl FnMut(u64) -> bool) -> Option<u64> {
        let want = tag_of(hash);
        self.walk(self.bucket_of(hash), |_, value| {
            let reference = value & REF_MASK;
            (tag(value) == want && is_match(reference)).then_some(reference)
        })
        .map(|(_, reference)| reference)
    }

    /// Lock-free: calls `f(reference)` for every entry of main bucket `bucket`
    /// (which must be below `bucket_count()`) and its chain.
    ///
    /// This reads slot by slot, not an atomic snapshot: an entry present for
    /// the whole call is visited exactly once (with its old or new reference
    /// if it is replaced meanwhile), while an entry inserted or removed during
    /// the call may or may not be visited.
    ///
    /// **`f` may also be called with references of entries of other main
    /// buckets**: when writers unlink an emptied overflow bucket from this chain
    /// while the walk stands in it, and another chain reuses it at once, the walk
    /// goes on through that chain's entries (see the crate documentation). They
    /// are real entries of the table, but a caller that must see each entry once
    /// (enumeration) has to drop them: an entry belongs to this bucket exactly
    /// when `bucket_of(hash)` of its key's hash is `bucket`.
    pub fn for_each_in_bucket(&self, bucket: usize, mut f: impl FnMut(u64)) {
        self.walk::<()>(bucket, |_, value| {
            f(value & REF_MASK);
            None
        });
    }

    /// A hint that `hash` will be looked up or locked soon: starts loading its main
    /// bucket and its lock into the cache. The cleaner relocates objects in batches
    /// and calls this for the whole batch first, so the two cache misses of each
    /// relocation overlap instead of following one another (R§11.3: relocation is
    /// bound by memory latency, not by copying).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        let main = self.bucket_of(hash);
        prefetch_line(&self.buckets[main] as *const Bucket as *const i8);
        prefetch_line(self.lock_of(main) as *const parking_lot::RawMutex as *const i8);
    }

    /// The writer lock covering main bucket `main`.
    #[inline]
    fn lock_of(&self, main: usize) -> &parking_lot::RawMutex {
        &self.locks[main & self.lock_mask]
    }

    /// How many writer locks the buckets share.
    pub fn lock_stripes(&self) -> usize {
        self.locks.len()
    }

    /// Locks main bucket of `hash` (and with it its whole chain) for writing.
    ///
    /// The guard's `find`, `find_ref` and `insert` use the tag of `hash`.
    /// Buckets share locks (`lock_stripes`), so holding two guards in one thread
    /// may deadlock even for different buckets: every caller holds at most one.
    pub fn lock(&self, hash: u64) -> BucketGuard<'_> {
        let main = self.bucket_of(hash);
        self.lock_of(main).lock();
        BucketGuard {
            table: self,
            main,
            hash,
            tag: tag_of(hash),
            _not_send: PhantomData,
        }
    }

    /// The bucket named by `id`.
    #[inline]
    fn bucket(&self, id: BucketId) -> &Bucket {
        match id {
            BucketId::Main(index) => &self.buckets[index],
            BucketId::Overflow(index) => self.overflow.get(index),
        }
    }

    /// Walks the chain of main bucket `main`, calling `visit(slot, value)` for
    /// every slot holding an entry, until `visit` returns `Some`.
    ///
    /// Slots are loaded with `Acquire`, which pairs with the `Release` stores
    /// of writers: a reader that loads a chain link also sees the contents of
    /// the overflow bucket written before the link was published.
    ///
    /// The walk visits at most `max_chain_buckets` buckets. Under the chain's
    /// lock that is never a limit (`insert` keeps chains that short). A
    /// lock-free walk may, after it has passed every entry present throughout,
    /// stand in a bucket that is unlinked and reused by another chain, and so
    /// follow links of other chains, in theory round a loop of buckets that
    /// writers keep relinking behind it; the bound makes it stop. Stopping there
    /// loses nothing: an entry present for the whole walk sits within the first
    /// `max_chain_buckets` buckets of the chain, and the walk reaches it through
    /// links that do not change while it walks (crate documentation, "Thread
    /// safety").
    #[inline]
    fn walk<R>(
        &self,
        main: usize,
        mut visit: impl FnMut(Slot, u64) -> Option<R>,
    ) -> Option<(Slot, R)> {
        let mut id = BucketId::Main(main);
        // Overflow buckets the walk may still enter after the main bucket.
        let mut hops_left = self.max_chain_buckets - 1;
        loop {
            let bucket = self.bucket(id);
            for index in 0..LAST {
                let value = bucket.slots[index].load(Ordering::Acquire);
                if value != EMPTY {
                    let slot = Slot {
                        bucket: id,
                        index: index as u8,
                    };
                    if let Some(found) = visit(slot, value) {
                        return Some((slot, found));
                    }
                }
            }
            // Only the last slot can hold a link, and only when more buckets follow.
            let value = bucket.slots[LAST].load(Ordering::Acquire);
            if value == EMPTY {
                return None;
            }
            if is_link(value) {
                if hops_left == 0 {
                    return None;
                }
                hops_left -= 1;
                id = BucketId::Overflow(value & REF_MASK);
                continue;
            }
            let slot = Slot {
                bucket: id,
                index: LAST as u8,
            };
            return visit(slot, value).map(|found| (slot, found));
        }
    }
}

#[cfg(test)]
impl HashTable {
    /// The buckets of main bucket `main`'s chain, main bucket included, counted
    /// by following its links (tests only: checks the arena's counters).
    pub(crate) fn chain_buckets(&self, main: usize) -> usize {
        let mut id = BucketId::Main(main);
        let mut count = 1;
        loop {
            let last = self.bucket(id).slots[LAST].load(Ordering::Acquire);
            if !is_link(last) {
                return count;
            }
            id = BucketId::Overflow(last & REF_MASK);
            count += 1;
        }
    }

    /// Overflow bucket `index` (tests only: to build states no sequence of
    /// operations produces at one instant, such as a loop of links).
    pub(crate) fn overflow_bucket(&self, index: u64) -> &Bucket {
        self.overflow.get(index)
    }
}

impl fmt::Debug for HashTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HashTable")
            .field("bucket_count", &self.bucket_count())
            .field("len", &self.len())
            .field("overflow_buckets_in_use", &self.overflow_buckets_in_use())
            .field("overflow_buckets_free", &self.overflow_buckets_free())
            .finish()
    }
}

/// Exclusive write access to one main bucket and its overflow chain; unlocks on drop.
pub struct BucketGuard<'a> {
    table: &'a HashTable,
    main: usize,
    hash: u64,
    tag: u64,
    /// parking_lot's raw mutex may only be unlocked by the thread that locked
    /// it (unless its `send_guard` feature is on), so the guard is `Send`
    /// exactly when parking_lot's own guards are.
    _not_send: PhantomData<<parking_lot::RawMutex as parking_lot::lock_api::RawMutex>::GuardMarker>,
}

impl BucketGuard<'_> {
    /// The hash this guard was locked with.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The main bucket this guard holds.
    pub fn bucket(&self) -> usize {
        self.main
    }

    /// Like `HashTable::lookup`, but under the lock, returning the slot too.
    pub fn find(&self, mut is_match: impl FnMut(u64) -> bool) -> Option<(Slot, u64)> {
        let want = self.tag;
        self.table.walk(self.main, |_, value| {
            let reference = value & REF_MASK;
            (tag(value) == want && is_match(reference)).then_some(reference)
        })
    }

    /// The slot currently holding exactly `reference` with this guard's tag, if any.
    ///
    /// The log cleaner uses this to decide whether an object it is relocating is still live.
    pub fn find_ref(&self, reference: u64) -> Option<Slot> {
        if reference == 0 || reference > REF_MASK {
            return None;
        }
        let want = entry(self.tag, reference);
        self.table
            .walk(self.main, |_, value| (value == want).then_some(()))
            .map(|(slot, ())| slot)
    }

    /// Overwrites the reference in `slot` in place, keeping its tag.
    ///
    /// The entry never moves, which lets enumeration by bucket proceed while
    /// the cleaner relocates objects. Lock-free readers see either the old or
    /// the new reference, as a single 64-bit store cannot tear.
    pub fn replace(&mut self, slot: Slot, new_reference: u64) {
        let cell = self.cell(slot);
        let old = cell.load(Ordering::Relaxed);
        assert!(
            old != EMPTY && !is_link(old),
            "replace of an empty slot {slot:?}"
        );
        debug_assert_eq!(
            tag(old),
            self.tag,
            "replace of slot {slot:?} of another hash"
        );
        cell.store(entry(self.tag, new_reference), Ordering::Release);
    }

    /// Inserts `reference` with this guard's tag into the first empty slot of
    /// the chain, extending the chain with an overflow bucket if it is full.
    ///
    /// Does not check for an existing entry for the same key: callers `find`
    /// first and `replace` if there is one.
    ///
    /// Fails only when the chain is full and cannot be extended: the overflow
    /// arena is exhausted (or cannot allocate), or the chain already has
    /// [`MAX_CHAIN_BUCKETS`] buckets.
    pub fn insert(&mut self, reference: u64) -> Result<Slot, IndexFull> {
        let value = entry(self.tag, reference);
        let table = self.table;
        let mut id = BucketId::Main(self.main);
        let mut chain_buckets = 1;
        // Relaxed loads suffice below: every store to this chain is made under
        // the lock we hold, and acquiring the lock ordered us after them.
        loop {
            let bucket = table.bucket(id);
            for index in 0..SLOTS_PER_BUCKET {
                let current = bucket.slots[index].load(Ordering::Relaxed);
                if current == EMPTY {
                    bucket.slots[index].store(value, Ordering::Release);
                    table.len.fetch_add(1, Ordering::Relaxed);
                    return Ok(Slot {
                        bucket: id,
                        index: index as u8,
                    });
                }
            }
            let last = bucket.slots[LAST].load(Ordering::Relaxed);
            if is_link(last) {
                id = BucketId::Overflow(last & REF_MASK);
                chain_buckets += 1;
                continue;
            }
            // Lock-free walks stop after `max_chain_buckets` buckets, so a longer
            // chain would hide entries from them.
            if chain_buckets >= table.max_chain_buckets {
                return Err(IndexFull);
            }

            // Every slot of the chain holds an entry: link a new overflow bucket
            // into the last slot, moving that slot's entry into the new bucket.
            //
            // A concurrent reader must never miss an entry that is present for
            // the whole of its lookup. The new bucket comes from the arena all
            // zero and linked from no chain (never used, or unlinked from an
            // empty tail; a stale reader of its old chain may still stand in it
            // and will see our stores, which is harmless: crate documentation).
            // We first fill its slot 0 with the moved entry and slot 1
            // with the new one, then publish the link with a single Release
            // store into the last slot. A reader loads that slot once: either
            // before the link store, seeing the moved entry where it was, or
            // after, seeing the link; its Acquire load then makes both filled
            // slots of the new bucket visible, where it finds the moved entry.
            // Either way it sees the entry exactly once.
            let overflow_index = table.overflow.alloc()?;
            let fresh = table.overflow.get(overflow_index);
            fresh.slots[0].store(last, Ordering::Release);
            fresh.slots[1].store(value, Ordering::Release);
            bucket.slots[LAST].store(link(overflow_index), Ordering::Release);
            table.len.fetch_add(1, Ordering::Relaxed);
            return Ok(Slot {
                bucket: BucketId::Overflow(overflow_index),
                index: 1,
            });
        }
    }

    /// Empties `slot`; if that leaves the chain ending in empty overflow
    /// buckets, unlinks them and gives them back to the arena for any chain to
    /// reuse.
    ///
    /// No entry ever moves (chains are not compacted), so readers walking the
    /// chain still find every other entry. Only a whole empty tail is
    /// unlinked, never an empty bucket that some entry follows: see
    /// `unlink_empty_tail`.
    pub fn remove(&mut self, slot: Slot) {
        let cell = self.cell(slot);
        let old = cell.load(Ordering::Relaxed);
        assert!(
            old != EMPTY && !is_link(old),
            "remove of an empty slot {slot:?}"
        );
        debug_assert_eq!(
            tag(old),
            self.tag,
            "remove of slot {slot:?} of another hash"
        );
        cell.store(EMPTY, Ordering::Release);
        self.table.len.fetch_sub(1, Ordering::Relaxed);
        // A chain never ends in an empty overflow bucket (inserts fill the first
        // empty slot and extend only full chains; removes restore it here). So
        // only emptying the tail can create an empty tail, and the tail is the
        // bucket whose last slot is empty: one check of the cache line just
        // written, no walk, for every other remove.
        if let BucketId::Overflow(_) = slot.bucket {
            let bucket = self.table.bucket(slot.bucket);
            // Relaxed: every store to this chain is ours or ordered before our lock.
            if bucket
                .slots
                .iter()
                .all(|s| s.load(Ordering::Relaxed) == EMPTY)
            {
                self.unlink_empty_tail();
            }
        }
    }

    /// Unlinks the empty overflow buckets that end the chain — all buckets after
    /// the last one that is the main bucket or holds an entry — with a single
    /// Release store of EMPTY into that bucket's last slot, and gives them back
    /// to the arena.
    ///
    /// Why only a tail: a lock-free reader may stand in a bucket we unlink, and
    /// the arena may hand it to another chain at once, whose links the reader
    /// then follows. It therefore must not need anything after that bucket. If
    /// we unlinked an empty bucket from the middle (relinking its predecessor to
    /// its successor), a reader standing in it would go on into the other chain
    /// and miss the entries after it. After a tail nothing of this chain
    /// follows, so the reader has already seen every entry present throughout.
    fn unlink_empty_tail(&mut self) {
        let table = self.table;
        // Relaxed loads: every store to this chain is ours or ordered before our lock.
        let mut keeper = BucketId::Main(self.main);
        let mut id = keeper;
        loop {
            let bucket = table.bucket(id);
            let last = bucket.slots[LAST].load(Ordering::Relaxed);
            let holds_entry = (last != EMPTY && !is_link(last))
                || bucket.slots[..LAST]
                    .iter()
                    .any(|s| s.load(Ordering::Relaxed) != EMPTY);
            if holds_entry {
                keeper = id;
            }
            if !is_link(last) {
                break;
            }
            id = BucketId::Overflow(last & REF_MASK);
        }
        let keeper_last = &table.bucket(keeper).slots[LAST];
        let first_empty = keeper_last.load(Ordering::Relaxed);
        if is_link(first_empty) {
            keeper_last.store(EMPTY, Ordering::Release);
            table.overflow.release_chain(first_empty & REF_MASK);
        }
    }

    /// The atomic cell behind `slot`.
    fn cell(&self, slot: Slot) -> &std::sync::atomic::AtomicU64 {
        debug_assert!(
            self.chain_contains(slot.bucket),
            "{slot:?} is not in the chain of main bucket {} (a stale slot?)",
            self.main
        );
        &self.table.bucket(slot.bucket).slots[usize::from(slot.index)]
    }

    /// Whether bucket `id` is in this guard's chain now (a debug check of slots).
    fn chain_contains(&self, id: BucketId) -> bool {
        let mut current = BucketId::Main(self.main);
        loop {
            if current == id {
                return true;
            }
            let last = self.table.bucket(current).slots[LAST].load(Ordering::Relaxed);
            if !is_link(last) {
                return false;
            }
            current = BucketId::Overflow(last & REF_MASK);
        }
    }
}

impl Drop for BucketGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard locked `lock_of(main)` in `HashTable::lock` and
        // unlocks it exactly once, here; the guard's marker makes it `Send` only
        // if parking_lot allows unlocking from another thread.
        unsafe { self.table.lock_of(self.main).unlock() };
    }
}

impl fmt::Debug for BucketGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketGuard")
            .field("bucket", &self.main)
            .field("hash", &format_args!("{:#018x}", self.hash))
            .finish()
    }
}

/// Starts loading the cache line holding `p`; does nothing where there is no such hint.
#[inline(always)]
fn prefetch_line(p: *const i8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults, reads nothing into the
    // program and `p` points into a live allocation anyway. SSE is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

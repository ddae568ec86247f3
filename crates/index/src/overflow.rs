//! The arena of overflow buckets.
//!
//! Overflow buckets extend a main bucket's chain once its eight slots are not
//! enough. They are named by a 48-bit index (stored in a chain link) rather
//! than a pointer, and the arena grows by chunks of doubling size that are
//! never moved or freed while the table lives: a lock-free reader that loaded
//! a link can therefore always dereference it, even a stale one.
//!
//! A bucket that a chain no longer needs (an empty tail, see
//! `BucketGuard::remove`) is unlinked and pushed on the arena's free list, all
//! eight slots zero, and [`OverflowArena::alloc`] takes from that list before
//! it touches a never-used index. The arena's resident size is therefore
//! bounded by its *high-water mark* — the most buckets ever in use at once
//! (plus the free list's 8 bytes each) — instead of growing with every chain
//! that ever overflowed. A freed bucket may be reused by another chain while a
//! lock-free reader still stands in it; why that is safe without epochs is
//! argued in the crate documentation ("Reusing overflow buckets without epochs")
//! and in `docs/design-notes.md`
//! ("Hash table: overflow buckets are reused without epochs").

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use parking_lot::Mutex;

use crate::bucket::{is_link, Bucket, BucketArray, EMPTY, LAST, REF_MASK};
use crate::IndexFull;

/// The most chunks an arena can have.
pub(crate) const MAX_CHUNKS: usize = 32;

/// Smallest chunk 0 size, in buckets (one 4 KiB page of buckets).
const MIN_BASE: usize = 64;

pub(crate) struct OverflowArena {
    /// Chunk `k` holds `base << k` buckets; null until allocated.
    ///
    /// Pointers are only stored (with `Release`) under `next`'s mutex and are
    /// loaded with `Acquire`, so a reader that sees a pointer sees the zeroed
    /// buckets behind it.
    chunks: [AtomicPtr<Bucket>; MAX_CHUNKS],
    /// log2 of the size of chunk 0, in buckets.
    base_log2: u32,
    /// How many chunks may be allocated (`MAX_CHUNKS` outside of tests).
    max_chunks: usize,
    /// Total number of overflow indices the chunks can provide, capped so that
    /// every index fits in a 48-bit link.
    capacity: u64,
    /// The allocator's state.
    ///
    /// The mutex also serialises chunk allocation between writers that hold
    /// locks on different main buckets. Overflow allocation and release happen
    /// at most once per seven inserts or removals in a chain, so this global
    /// lock is cold. It is taken under a bucket lock, never the other way.
    state: Mutex<ArenaState>,
}

struct ArenaState {
    /// The next never-used overflow index. Every index below it has been
    /// handed out at least once (its bucket's memory has been touched), so
    /// this is the arena's high-water mark.
    next: u64,
    /// Unlinked buckets, all-zero, reused last-in first-out (the most recently
    /// freed bucket is the likeliest to still be in the cache).
    ///
    /// Its capacity always covers every bucket of the allocated chunks (see
    /// `alloc`), so `release` never allocates and cannot fail.
    free: Vec<u64>,
    /// Buckets ever unlinked and put on the free list (a statistic).
    released_total: u64,
}

impl OverflowArena {
    /// An empty arena sized for a table of `bucket_count` main buckets.
    ///
    /// Chunk 0 holds one eighth of the main table (at least 64 buckets), so a
    /// table that needs overflow buckets at all gets a reasonably sized batch.
    pub(crate) fn new(bucket_count: usize, max_chunks: usize) -> Self {
        assert!((1..=MAX_CHUNKS).contains(&max_chunks));
        let base = (bucket_count / 8).max(MIN_BASE).next_power_of_two();
        let base_log2 = base.trailing_zeros();
        // base * (2^max_chunks - 1) fits in u128 because base < 2^64 and max_chunks <= 32.
        let total = (base as u128) * ((1u128 << max_chunks) - 1);
        let capacity = total.min(u128::from(REF_MASK) + 1) as u64;
        OverflowArena {
            chunks: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            base_log2,
            max_chunks,
            capacity,
            state: Mutex::new(ArenaState {
                next: 0,
                free: Vec::new(),
                released_total: 0,
            }),
        }
    }

    /// The number of buckets in chunk `chunk`.
    fn chunk_len(&self, chunk: usize) -> usize {
        1usize << (self.base_log2 as usize + chunk)
    }

    /// Maps overflow index `index` to (chunk, offset in chunk).
    ///
    /// Chunk `k` starts at index `base * (2^k - 1)`, so `k` is
    /// `floor(log2(index / base + 1))`.
    #[inline]
    fn locate(&self, index: u64) -> (usize, usize) {
        let q = (index >> self.base_log2) + 1;
        let chunk = (63 - q.leading_zeros()) as usize;
        let start = ((1u64 << chunk) - 1) << self.base_log2;
        (chunk, (index - start) as usize)
    }

    /// Reserves an all-empty overflow bucket and returns its index: the most
    /// recently released one if any, else a never-used one.
    ///
    /// A released bucket may still be looked at by lock-free readers that
    /// entered it while it belonged to another chain; the caller must fill it
    /// before publishing a link to it, as for a never-used one.
    ///
    /// Fails with `IndexFull` when all chunks are used up, or when the
    /// allocator cannot provide the next chunk (so a store under memory
    /// pressure can reject a write instead of aborting).
    pub(crate) fn alloc(&self) -> Result<u64, IndexFull> {
        let mut state = self.state.lock();
        if let Some(index) = state.free.pop() {
            return Ok(index);
        }
        let index = state.next;
        if index >= self.capacity {
            return Err(IndexFull);
        }
        let (chunk, _) = self.locate(index);
        // Relaxed suffices: chunk pointers are only stored under this mutex, which we hold.
        if self.chunks[chunk].load(Ordering::Relaxed).is_null() {
            // Room in the free list for every bucket the chunks will hold, taken
            // now (fallibly) so that `release` never has to allocate. The index
            // past the new chunk's last bucket is the chunks' total size.
            let total = (((1u64 << (chunk + 1)) - 1) << self.base_log2).min(self.capacity);
            let total = usize::try_from(total).map_err(|_| IndexFull)?;
            let additional = total.saturating_sub(state.free.len());
            state
                .free
                .try_reserve_exact(additional)
                .map_err(|_| IndexFull)?;
            // Its own mapping, zeroed by the kernel page by page as buckets are
            // handed out, so only the high-water mark's pages become resident
            // (an allocator's zeroed block would be memset whole at once).
            let buckets = BucketArray::new(self.chunk_len(chunk), false).ok_or(IndexFull)?;
            let raw = buckets.into_raw();
            self.chunks[chunk].store(raw, Ordering::Release);
        }
        state.next = index + 1;
        Ok(index)
    }

    /// Takes back the chain of overflow buckets starting at `first`, which the
    /// caller has just unlinked from its chain (under that chain's lock): every
    /// bucket of it has no entry, and its last one has an empty last slot.
    ///
    /// Each bucket's last slot (a link to the next one, or empty) is cleared, so
    /// a bucket on the free list is all zero: a reader still standing in it
    /// sees an empty tail and stops, and `alloc` can hand it out as if new.
    pub(crate) fn release_chain(&self, first: u64) {
        let mut state = self.state.lock();
        let mut index = first;
        loop {
            let bucket = self.get(index);
            debug_assert!(
                bucket.slots[..LAST]
                    .iter()
                    .all(|s| s.load(Ordering::Relaxed) == EMPTY),
                "released overflow bucket {index} holds an entry"
            );
            debug_assert!(
                index < state.next,
                "released overflow bucket {index} was never handed out"
            );
            let next = bucket.slots[LAST].load(Ordering::Relaxed);
            debug_assert!(
                next == EMPTY || is_link(next),
                "released overflow bucket {index} holds an entry in its last slot"
            );
            bucket.slots[LAST].store(EMPTY, Ordering::Release);
            // Never reallocates: the capacity covers every bucket of the allocated
            // chunks (reserved in `alloc`), and a bucket is on the list at most once
            // because only a linked bucket is released and a listed one is not linked.
            debug_assert!(state.free.len() < state.free.capacity());
            state.free.push(index);
            state.released_total += 1;
            if !is_link(next) {
                return;
            }
            index = next & REF_MASK;
        }
    }

    /// The overflow bucket with index `index`.
    ///
    /// Panics if that bucket was never allocated, which can only happen if a
    /// `Slot` from another table is used.
    #[inline]
    pub(crate) fn get(&self, index: u64) -> &Bucket {
        let (chunk, offset) = self.locate(index);
        let base = self.chunks[chunk].load(Ordering::Acquire);
        assert!(
            !base.is_null(),
            "overflow bucket {index} was never allocated"
        );
        // SAFETY: `base` is non-null, so it came from `alloc`, which stored a live
        // allocation of `chunk_len(chunk)` buckets; `offset < chunk_len(chunk)` by
        // construction of `locate`. Chunks are only freed in `Drop`, which needs
        // `&mut self`, so the returned borrow of `self` cannot outlive the chunk.
        unsafe { &*base.add(offset) }
    }

    /// Bytes held by allocated chunks.
    pub(crate) fn memory_bytes(&self) -> usize {
        (0..self.max_chunks)
            .filter(|&k| !self.chunks[k].load(Ordering::Acquire).is_null())
            .map(|k| self.chunk_len(k) * std::mem::size_of::<Bucket>())
            .sum()
    }

    /// Bytes of the allocated chunks the kernel holds in memory (see
    /// `ramstore_mmap::resident_bytes`): the pages of buckets ever handed out, up to the
    /// high-water mark. `None` where the kernel cannot be asked.
    pub(crate) fn resident_bytes(&self) -> Option<usize> {
        let mut total = 0;
        for k in 0..self.max_chunks {
            let raw = self.chunks[k].load(Ordering::Acquire);
            if !raw.is_null() {
                let bytes = self.chunk_len(k) * std::mem::size_of::<Bucket>();
                // SAFETY: a non-null chunk pointer is the start of a live,
                // page-aligned mapping of `chunk_len(k)` buckets (`alloc`), unmapped
                // only in `Drop`, which `&self` rules out.
                total += unsafe { ramstore_mmap::resident_bytes(raw.cast(), bytes) }?;
            }
        }
        Some(total)
    }

    /// Bytes the free list's buffer occupies (8 per bucket of the allocated chunks).
    pub(crate) fn free_list_bytes(&self) -> usize {
        self.state.lock().free.capacity() * std::mem::size_of::<u64>()
    }

    /// Overflow buckets linked into some chain now.
    pub(crate) fn in_use(&self) -> usize {
        let state = self.state.lock();
        state.next as usize - state.free.len()
    }

    /// Overflow buckets on the free list.
    pub(crate) fn free(&self) -> usize {
        self.state.lock().free.len()
    }

    /// Overflow buckets ever handed out: the high-water mark of `in_use`, and the
    /// number of overflow buckets whose memory has ever been touched.
    pub(crate) fn high_water(&self) -> usize {
        self.state.lock().next as usize
    }

    /// Overflow buckets ever unlinked from their chains (each time counts).
    pub(crate) fn released_total(&self) -> u64 {
        self.state.lock().released_total
    }
}

impl Drop for OverflowArena {
    fn drop(&mut self) {
        for k in 0..MAX_CHUNKS {
            let raw = *self.chunks[k].get_mut();
            if !raw.is_null() {
                // SAFETY: `raw` came from `BucketArray::into_raw` of an array of
                // `chunk_len(k)` (≥ 64) buckets in `alloc`, and is unmapped only
                // here, once.
                drop(unsafe { BucketArray::from_raw(raw, self.chunk_len(k)) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_maps_indices_to_consecutive_chunks() {
        let arena = OverflowArena::new(1, MAX_CHUNKS);
        assert_eq!(arena.locate(0), (0, 0));
        assert_eq!(arena.locate(63), (0, 63));
        assert_eq!(arena.locate(64), (1, 0));
        assert_eq!(arena.locate(191), (1, 127));
        assert_eq!(arena.locate(192), (2, 0));
        let mut expected = (0, 0);
        for index in 0..10_000u64 {
            assert_eq!(arena.locate(index), expected, "index {index}");
            expected.1 += 1;
            if expected.1 == arena.chunk_len(expected.0) {
                expected = (expected.0 + 1, 0);
            }
        }
    }

    #[test]
    fn new_sizes_chunk_zero_from_bucket_count() {
        assert_eq!(OverflowArena::new(1, MAX_CHUNKS).chunk_len(0), 64);
        assert_eq!(OverflowArena::new(1024, MAX_CHUNKS).chunk_len(0), 128);
        assert_eq!(
            OverflowArena::new(1 << 20, MAX_CHUNKS).chunk_len(0),
            1 << 17
        );
    }

    #[test]
    fn alloc_fails_when_chunks_exhausted() {
        let arena = OverflowArena::new(1, 2);
        for expected in 0..64 + 128 {
            assert_eq!(arena.alloc(), Ok(expected));
        }
        assert_eq!(arena.alloc(), Err(IndexFull));
        assert_eq!(arena.high_water(), 192);
        assert_eq!(arena.memory_bytes(), 192 * 64);
        // A released bucket can be handed out again even when the chunks are used up.
        arena.release_chain(7);
        assert_eq!(arena.alloc(), Ok(7));
        assert_eq!(arena.alloc(), Err(IndexFull));
    }

    #[test]
    fn alloc_takes_released_buckets_last_in_first_out_before_new_ones() {
        let arena = OverflowArena::new(1, MAX_CHUNKS);
        for expected in 0..4 {
            assert_eq!(arena.alloc(), Ok(expected));
        }
        arena.release_chain(1);
        arena.release_chain(3);
        assert_eq!(
            (arena.in_use(), arena.free(), arena.high_water()),
            (2, 2, 4)
        );
        assert_eq!(arena.alloc(), Ok(3));
        assert_eq!(arena.alloc(), Ok(1));
        assert_eq!(arena.alloc(), Ok(4));
        assert_eq!(
            (arena.in_use(), arena.free(), arena.high_water()),
            (5, 0, 5)
        );
    }

    #[test]
    fn release_chain_follows_links_and_zeroes_last_slots() {
        let arena = OverflowArena::new(1, MAX_CHUNKS);
        let (a, b, c) = (
            arena.alloc().unwrap(),
            arena.alloc().unwrap(),
            arena.alloc().unwrap(),
        );
        arena.get(a).slots[LAST].store(crate::bucket::link(b), Ordering::Relaxed);
        arena.get(b).slots[LAST].store(crate::bucket::link(c), Ordering::Relaxed);
        arena.release_chain(a);
        assert_eq!(
            (arena.in_use(), arena.free(), arena.high_water()),
            (0, 3, 3)
        );
        for index in [a, b, c] {
            let bucket = arena.get(index);
            assert!(bucket
                .slots
                .iter()
                .all(|s| s.load(Ordering::Relaxed) == EMPTY));
        }
    }

    #[test]
    fn alloc_reserves_free_list_room_for_every_allocated_bucket() {
        let arena = OverflowArena::new(1, MAX_CHUNKS);
        arena.alloc().unwrap();
        assert!(arena.free_list_bytes() >= 64 * 8);
        for _ in 1..65 {
            arena.alloc().unwrap();
        }
        // Chunk 1 (128 buckets) was allocated for index 64: room for 192 in all.
        assert!(arena.free_list_bytes() >= 192 * 8);
    }

    #[test]
    fn capacity_is_capped_to_48_bits() {
        let arena = OverflowArena::new(1 << 40, MAX_CHUNKS);
        assert_eq!(arena.capacity, REF_MASK + 1);
    }
}

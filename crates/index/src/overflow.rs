//! The arena of overflow buckets.
//!
//! Overflow buckets extend a main bucket's chain once its eight slots are not
//! enough. They are named by a 48-bit index (stored in a chain link) rather
//! than a pointer, and the arena grows by chunks of doubling size that are
//! never moved or freed while the table lives: a lock-free reader that loaded
//! a link can therefore always dereference it.
//!
//! Overflow buckets are never unlinked or returned to the arena in this
//! version. A bucket emptied by removals stays in its chain (costing readers
//! one more cache miss on that chain) and its slots are reused by later
//! inserts into the same chain. Unlinking would need a way to know that no
//! reader is still walking through the bucket (e.g. epochs), which the table
//! does not have.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use parking_lot::Mutex;

use crate::bucket::{alloc_zeroed_buckets, Bucket, REF_MASK};
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
    /// The next never-used overflow index.
    ///
    /// The mutex also serialises chunk allocation between writers that hold
    /// locks on different main buckets. Overflow allocation happens at most
    /// once per seven inserts into a chain, so this global lock is cold.
    next: Mutex<u64>,
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
            next: Mutex::new(0),
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

    /// Reserves a fresh (all-empty) overflow bucket and returns its index.
    ///
    /// Fails with `IndexFull` when all chunks are used up, or when the
    /// allocator cannot provide the next chunk (so a store under memory
    /// pressure can reject a write instead of aborting).
    pub(crate) fn alloc(&self) -> Result<u64, IndexFull> {
        let mut next = self.next.lock();
        let index = *next;
        if index >= self.capacity {
            return Err(IndexFull);
        }
        let (chunk, _) = self.locate(index);
        // Relaxed suffices: chunk pointers are only stored under this mutex, which we hold.
        if self.chunks[chunk].load(Ordering::Relaxed).is_null() {
            let buckets = alloc_zeroed_buckets(self.chunk_len(chunk)).ok_or(IndexFull)?;
            let raw = Box::into_raw(buckets).cast::<Bucket>();
            self.chunks[chunk].store(raw, Ordering::Release);
        }
        *next = index + 1;
        Ok(index)
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

    /// Number of overflow buckets handed out so far.
    pub(crate) fn used(&self) -> usize {
        *self.next.lock() as usize
    }
}

impl Drop for OverflowArena {
    fn drop(&mut self) {
        for k in 0..MAX_CHUNKS {
            let raw = *self.chunks[k].get_mut();
            if !raw.is_null() {
                // SAFETY: `raw` came from `Box::into_raw` of a `Box<[Bucket]>` of
                // `chunk_len(k)` buckets in `alloc`, and is freed only here, once.
                drop(unsafe {
                    Box::from_raw(ptr::slice_from_raw_parts_mut(raw, self.chunk_len(k)))
                });
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
        assert_eq!(arena.used(), 192);
        assert_eq!(arena.memory_bytes(), 192 * 64);
    }

    #[test]
    fn capacity_is_capped_to_48_bits() {
        let arena = OverflowArena::new(1 << 40, MAX_CHUNKS);
        assert_eq!(arena.capacity, REF_MASK + 1);
    }
}

//! The seglet pool: all log memory of a master, allocated once at start-up (L§5.1).
//!
//! The pool is one zeroed allocation cut into 64 KiB seglets. A segment is a chain of
//! seglets linked by `next`, so an entry may run from the end of one seglet into the
//! start of the next; readers follow the chain without a lock.
//!
//! Free seglets are handed out by *class*: each class may only take seglets while
//! more than its floor remain free. The floors nest (writes < deletes < cleaner <
//! emergency), which is what makes the log deadlock-free (L§7): ordinary writes stop
//! first (NO_SPACE) while tombstones can still be appended, and the cleaner always
//! has seglets to copy survivors into.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::{LogRef, SEGLET_BYTES};

/// Marks the end of a seglet chain.
pub const NO_SEGLET: u32 = u32::MAX;

/// Who is asking for seglets; see the module doc for the floors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocClass {
    /// Appending a new object (possibly with the tombstone of the old version).
    Write,
    /// Appending only a tombstone: may dip into the room kept for deletes.
    Delete,
    /// Survivor or compacted segments: may use the cleaner's reserve.
    Cleaner,
    /// An emergency head that holds only a log digest (L§7): may use everything.
    Emergency,
}

/// How many free seglets each class must leave behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserves {
    /// Seglets kept for two emergency heads.
    pub emergency_seglets: usize,
    /// Seglets only the cleaner may use.
    pub cleaner_seglets: usize,
    /// Seglets only tombstones (and the cleaner) may use: the write limit below 100%.
    pub delete_seglets: usize,
}

impl Reserves {
    fn floor(&self, class: AllocClass) -> usize {
        match class {
            AllocClass::Emergency => 0,
            AllocClass::Cleaner => self.emergency_seglets,
            AllocClass::Delete => self.emergency_seglets + self.cleaner_seglets,
            AllocClass::Write => {
                self.emergency_seglets + self.cleaner_seglets + self.delete_seglets
            }
        }
    }
}

/// Errors creating a pool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    #[error("log memory of {bytes} bytes is too small: at least {min_bytes} bytes are needed")]
    TooSmall { bytes: usize, min_bytes: usize },
    #[error("log memory of {0} bytes is larger than a 48-bit log reference can address")]
    TooLarge(usize),
    #[error("could not allocate {0} bytes of log memory")]
    AllocationFailed(usize),
}

/// The seglet pool. Thread-safe; see the module doc.
pub struct SegletPool {
    base: NonNull<u8>,
    bytes: usize,
    seglet_count: u32,
    /// Next seglet of the same segment, or `NO_SEGLET`. Written before any entry that
    /// spans into the next seglet is published, read by lock-free readers.
    next: Box<[AtomicU32]>,
    free: Mutex<Vec<u32>>,
    free_count: AtomicUsize,
    reserves: Reserves,
}

// SAFETY: the pool hands out disjoint seglets; bytes of a seglet are written only by
// the one owner of an unpublished range and read only after publication (Release on
// the hash table slot, Acquire by readers). All bookkeeping is atomic or locked.
unsafe impl Send for SegletPool {}
// SAFETY: as above.
unsafe impl Sync for SegletPool {}

impl SegletPool {
    /// Allocates `bytes` of log memory (rounded down to whole seglets). Seglet 0 is
    /// never handed out, so that `LogRef(0)` can mean "nothing".
    pub fn new(bytes: usize, reserves: Reserves) -> Result<Self, PoolError> {
        let seglet_count = bytes / SEGLET_BYTES;
        let min_seglets = reserves.floor(AllocClass::Write) + 2;
        if seglet_count < min_seglets {
            return Err(PoolError::TooSmall {
                bytes,
                min_bytes: min_seglets * SEGLET_BYTES,
            });
        }
        let total = seglet_count * SEGLET_BYTES;
        if total as u64 > crate::MAX_LOG_REF || seglet_count >= NO_SEGLET as usize {
            return Err(PoolError::TooLarge(bytes));
        }
        // An anonymous private mapping: page-aligned, and the kernel supplies zero
        // pages on first touch, so start-up does not write the whole pool (a zeroing
        // allocator asked for page alignment would memset every byte).
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(PoolError::AllocationFailed(total));
        }
        // 2 MiB pages for the log (a hint; ignored where transparent huge pages are
        // off): reads, appends and the cleaner touch the pool at random, and with 4 KiB
        // pages nearly every such access would also miss the TLB.
        // SAFETY: the range is exactly the mapping just created.
        unsafe {
            libc::madvise(ptr, total, libc::MADV_HUGEPAGE);
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(PoolError::AllocationFailed(total))?;
        let next = (0..seglet_count)
            .map(|_| AtomicU32::new(NO_SEGLET))
            .collect();
        // Hand out low seglets first (popped from the end), which keeps a small
        // working set of pages when the pool is far from full.
        let free: Vec<u32> = (1..seglet_count as u32).rev().collect();
        Ok(Self {
            base,
            bytes: total,
            seglet_count: seglet_count as u32,
            next,
            free_count: AtomicUsize::new(free.len()),
            free: Mutex::new(free),
            reserves,
        })
    }

    /// Total seglets, including the reserved seglet 0.
    pub fn seglet_count(&self) -> usize {
        self.seglet_count as usize
    }

    /// Bytes of log memory.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Seglets not in any segment (including reserves).
    pub fn free_seglets(&self) -> usize {
        self.free_count.load(Ordering::Relaxed)
    }

    /// The reserve floors this pool enforces.
    pub fn reserves(&self) -> Reserves {
        self.reserves
    }

    /// Seglets `class` could take right now.
    pub fn available(&self, class: AllocClass) -> usize {
        self.free_seglets()
            .saturating_sub(self.reserves.floor(class))
    }

    /// Faults the whole pool in now (MADV_POPULATE_WRITE, Linux 5.14+): the kernel
    /// zeroes each page on first touch, which otherwise lands on the writes,
    /// replays and cleaning passes that first reach a page — a fifth of a
    /// recovery master's CPU in a profile. Safe while the pool is in use (it only
    /// maps pages; contents are untouched). An error (an older kernel) leaves the
    /// pool as it was: pages are then zeroed on first touch, as before.
    pub fn prefault(&self) -> std::io::Result<()> {
        /// Bytes faulted in per call (16 huge pages; a multiple of the seglet).
        const PREFAULT_CHUNK_BYTES: usize = 32 << 20;
        const _: () = assert!(PREFAULT_CHUNK_BYTES.is_multiple_of(SEGLET_BYTES));
        #[cfg(target_os = "linux")]
        {
            // In chunks: each call holds the process's mmap lock, and one call over
            // the whole pool stalled every thread that needed the lock (any
            // allocation that maps memory) for seconds — long enough for the
            // cluster to declare the server crashed.
            let mut offset = 0;
            while offset < self.bytes {
                let len = PREFAULT_CHUNK_BYTES.min(self.bytes - offset);
                // SAFETY: [offset, offset + len) lies inside this pool's mapping,
                // alive as long as `self`; MADV_POPULATE_WRITE never changes bytes.
                let rc = unsafe {
                    libc::madvise(
                        self.base.as_ptr().add(offset).cast(),
                        len,
                        libc::MADV_POPULATE_WRITE,
                    )
                };
                if rc != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                offset += len;
            }
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "prefaulting log memory needs Linux",
            ))
        }
    }

    /// Bytes of the pool the kernel holds in memory right now (`mincore`). The pool
    /// is mapped at start-up and each page is zeroed on first touch, so this grows
    /// with the seglets ever written (the lowest are handed out first) up to the
    /// whole pool, which `prefault` reaches at once; pages of freed seglets stay
    /// resident. Costs one system call per 16 MiB of pool (with 4 KiB pages) and
    /// no allocation. `None` where the kernel cannot be asked (not Linux).
    pub fn resident_bytes(&self) -> Option<usize> {
        // SAFETY: the pool's mapping is `self.bytes` long, page-aligned, and lives
        // as long as `self`.
        unsafe { ramstore_mmap::resident_bytes(self.base.as_ptr(), self.bytes) }
    }

    /// Takes `n` seglets at once, or none if `class` may not take that many.
    pub fn allocate(&self, n: usize, class: AllocClass, out: &mut Vec<u32>) -> bool {
        let mut free = self.free.lock();
        if free.len() < n + self.reserves.floor(class) {
            return false;
        }
        for _ in 0..n {
            // Cannot fail: the length was checked above under the same lock.
            let s = free.pop().expect("free list length checked");
            self.next[s as usize].store(NO_SEGLET, Ordering::Relaxed);
            out.push(s);
        }
        self.free_count.store(free.len(), Ordering::Relaxed);
        true
    }

    /// Returns seglets to the pool. The caller guarantees no reader can still be
    /// looking at them (epochs).
    pub fn release(&self, seglets: &[u32]) {
        let mut free = self.free.lock();
        for &s in seglets {
            assert!(s != 0 && s < self.seglet_count, "seglet {s} out of range");
            free.push(s);
        }
        assert!(
            free.len() < self.seglet_count as usize,
            "seglet released twice"
        );
        self.free_count.store(free.len(), Ordering::Relaxed);
    }

    /// Ends the chain at `seglet` (it is about to be reused as the last seglet of
    /// another chain, without passing through the free list).
    pub fn unlink(&self, seglet: u32) {
        self.next[seglet as usize].store(NO_SEGLET, Ordering::Release);
    }

    /// Links `next` after `seglet` in a chain.
    pub fn link(&self, seglet: u32, next: u32) {
        self.next[seglet as usize].store(next, Ordering::Release);
    }

    /// The seglet after `seglet` in its chain.
    pub fn next_seglet(&self, seglet: u32) -> Option<u32> {
        match self.next[seglet as usize].load(Ordering::Acquire) {
            NO_SEGLET => None,
            s => Some(s),
        }
    }

    /// The pool offset of byte `offset` of `seglet`.
    pub fn log_ref(seglet: u32, offset: usize) -> LogRef {
        debug_assert!(offset < SEGLET_BYTES);
        LogRef(seglet as u64 * SEGLET_BYTES as u64 + offset as u64)
    }

    /// The seglet holding the byte at `r`.
    pub fn seglet_of(r: LogRef) -> u32 {
        (r.0 / SEGLET_BYTES as u64) as u32
    }

    /// Copies `data` into `seglet` at `offset`.
    ///
    /// # Safety
    /// The caller must own that byte range exclusively: it is in an unpublished part
    /// of a segment being written by this thread only.
    pub unsafe fn write(&self, seglet: u32, offset: usize, data: &[u8]) {
        assert!(seglet < self.seglet_count && offset + data.len() <= SEGLET_BYTES);
        let dst = self
            .base
            .as_ptr()
            .add(seglet as usize * SEGLET_BYTES + offset);
        std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
    }

    /// A hint that the cache line holding byte `offset` of `seglet` is read soon;
    /// does nothing where there is no such hint, or out of bounds.
    #[inline]
    pub fn prefetch(&self, seglet: u32, offset: usize) {
        if seglet >= self.seglet_count || offset >= SEGLET_BYTES {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is only a hint: it never faults and reads nothing into
        // the program, and the address is inside the pool's allocation (checked
        // above). SSE is part of x86_64.
        unsafe {
            let p = self
                .base
                .as_ptr()
                .add(seglet as usize * SEGLET_BYTES + offset);
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
        }
    }

    /// The bytes of `seglet` from `offset` to the end of the seglet.
    ///
    /// Reading is safe for any published entry; bytes past the end of what was
    /// published may be in the middle of being written and must not be interpreted.
    pub fn seglet_tail(&self, seglet: u32, offset: usize) -> &[u8] {
        assert!(seglet < self.seglet_count && offset <= SEGLET_BYTES);
        // SAFETY: in bounds of the allocation, which lives as long as `self`. Bytes
        // are plain u8: any value is valid, and published ranges are not written again
        // until the seglet is released after an epoch.
        unsafe {
            std::slice::from_raw_parts(
                self.base
                    .as_ptr()
                    .add(seglet as usize * SEGLET_BYTES + offset),
                SEGLET_BYTES - offset,
            )
        }
    }

    /// Calls `f` with the consecutive pieces of the `len` bytes starting at `r`,
    /// following the seglet chain. Returns false if the chain ends early (which
    /// means the caller's length is corrupt; never happens for published entries).
    pub fn for_each_piece(&self, r: LogRef, len: usize, mut f: impl FnMut(&[u8])) -> bool {
        let mut seglet = Self::seglet_of(r);
        let mut offset = (r.0 % SEGLET_BYTES as u64) as usize;
        let mut left = len;
        loop {
            let tail = self.seglet_tail(seglet, offset);
            let take = tail.len().min(left);
            f(&tail[..take]);
            left -= take;
            if left == 0 {
                return true;
            }
            match self.next_seglet(seglet) {
                Some(n) => {
                    seglet = n;
                    offset = 0;
                }
                None => return false,
            }
        }
    }

    /// Copies up to `out.len()` bytes starting at `r` into `out`; returns how many
    /// were copied (fewer only if the chain ends).
    pub fn copy_out(&self, r: LogRef, out: &mut [u8]) -> usize {
        let mut done = 0;
        let want = out.len();
        self.for_each_piece(r, want, |piece| {
            out[done..done + piece.len()].copy_from_slice(piece);
            done += piece.len();
        });
        done
    }
}

impl Drop for SegletPool {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length; nothing borrowed from the pool
        // outlives it.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserves() -> Reserves {
        Reserves {
            emergency_seglets: 1,
            cleaner_seglets: 2,
            delete_seglets: 1,
        }
    }

    #[test]
    fn allocate_respects_class_floors() {
        let pool = SegletPool::new(10 * SEGLET_BYTES, reserves()).unwrap();
        assert_eq!(pool.free_seglets(), 9);
        let mut got = Vec::new();
        assert!(pool.allocate(5, AllocClass::Write, &mut got));
        assert!(!pool.allocate(1, AllocClass::Write, &mut got));
        assert!(pool.allocate(1, AllocClass::Delete, &mut got));
        assert!(!pool.allocate(1, AllocClass::Delete, &mut got));
        assert!(pool.allocate(2, AllocClass::Cleaner, &mut got));
        assert!(!pool.allocate(1, AllocClass::Cleaner, &mut got));
        assert!(pool.allocate(1, AllocClass::Emergency, &mut got));
        assert!(!got.contains(&0), "seglet 0 is never handed out");
        pool.release(&got);
        assert_eq!(pool.free_seglets(), 9);
    }

    #[test]
    fn new_too_small_is_an_error() {
        assert!(matches!(
            SegletPool::new(3 * SEGLET_BYTES, reserves()),
            Err(PoolError::TooSmall { .. })
        ));
    }

    #[test]
    fn for_each_piece_follows_chain() {
        let pool = SegletPool::new(10 * SEGLET_BYTES, reserves()).unwrap();
        let mut s = Vec::new();
        assert!(pool.allocate(2, AllocClass::Write, &mut s));
        pool.link(s[0], s[1]);
        // SAFETY: freshly allocated, owned by this test.
        unsafe {
            pool.write(s[0], SEGLET_BYTES - 3, b"abc");
            pool.write(s[1], 0, b"defg");
        }
        let mut out = [0u8; 7];
        assert_eq!(
            pool.copy_out(SegletPool::log_ref(s[0], SEGLET_BYTES - 3), &mut out),
            7
        );
        assert_eq!(&out, b"abcdefg");
        let mut short = [0u8; 8];
        assert_eq!(
            pool.copy_out(SegletPool::log_ref(s[1], SEGLET_BYTES - 4), &mut short),
            4
        );
    }

    /// The log part of the resident split (issue 17): nothing before a seglet is
    /// written, a written page after, the whole pool once prefaulted.
    #[test]
    fn resident_bytes_counts_written_pages_then_the_prefaulted_pool() {
        let pool = SegletPool::new(64 * SEGLET_BYTES, reserves()).unwrap();
        let fresh = pool.resident_bytes();
        if !cfg!(target_os = "linux") {
            assert_eq!(fresh, None, "unknown where mincore cannot be asked");
            return;
        }
        let fresh = fresh.expect("mincore answers on Linux");
        assert_eq!(fresh, 0, "a fresh pool is not touched");
        let mut s = Vec::new();
        assert!(pool.allocate(1, AllocClass::Write, &mut s));
        assert_eq!(pool.resident_bytes(), Some(0), "allocating writes nothing");
        // SAFETY: freshly allocated, owned by this test.
        unsafe { pool.write(s[0], 0, b"x") };
        let written = pool.resident_bytes().expect("asked once already");
        assert!(
            (4096..=2 << 20).contains(&written),
            "one page (4 KiB, or 2 MiB with huge pages): {written}"
        );
        if pool.prefault().is_ok() {
            assert_eq!(pool.resident_bytes(), Some(pool.bytes()));
        }
    }

    #[test]
    fn prefault_keeps_contents_and_succeeds_on_linux() {
        let pool = SegletPool::new(10 * SEGLET_BYTES, reserves()).unwrap();
        let mut s = Vec::new();
        assert!(pool.allocate(1, AllocClass::Write, &mut s));
        // SAFETY: freshly allocated, owned by this test.
        unsafe { pool.write(s[0], 0, b"kept") };
        let faulted = pool.prefault();
        if cfg!(target_os = "linux") {
            faulted.expect("MADV_POPULATE_WRITE (Linux 5.14+)");
        }
        let mut out = [0u8; 4];
        assert_eq!(pool.copy_out(SegletPool::log_ref(s[0], 0), &mut out), 4);
        assert_eq!(&out, b"kept");
    }
}

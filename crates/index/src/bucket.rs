//! The 64-byte bucket and the encoding of its slots.
//!
//! Everything here is plain bit manipulation; the rules about who may store
//! what, and with which memory ordering, live in `table.rs`.

use std::alloc::{self, Layout};
use std::ptr;
use std::sync::atomic::AtomicU64;

use crate::{REF_BITS, SLOTS_PER_BUCKET, TAG_BITS};

/// Mask of the reference (or overflow index) part of a slot.
pub(crate) const REF_MASK: u64 = (1 << REF_BITS) - 1;

/// The value of an empty slot. A real entry is never 0 because its reference is non-zero.
pub(crate) const EMPTY: u64 = 0;

/// The tag reserved for chain links; no entry ever carries it.
pub(crate) const LINK_TAG: u64 = (1 << TAG_BITS) - 1;

/// Index of the slot that may hold a chain link.
pub(crate) const LAST: usize = SLOTS_PER_BUCKET - 1;

/// One cache line of slots.
///
/// The alignment makes a bucket start on a cache-line boundary, so scanning
/// all eight slots costs exactly one cache miss.
#[repr(C, align(64))]
pub(crate) struct Bucket {
    pub(crate) slots: [AtomicU64; SLOTS_PER_BUCKET],
}

// A bucket must be exactly one (64-byte) cache line; the whole design rests on it.
const _: () = assert!(std::mem::size_of::<Bucket>() == 64);
const _: () = assert!(std::mem::align_of::<Bucket>() == 64);

/// The tag stored for an entry whose key hashes to `hash`.
///
/// It is the low 16 bits of the hash, except that 0xFFFF (reserved for chain
/// links) becomes 0xFFFE. Tags are only a filter before the caller compares
/// keys, so making two tag values collide costs at most an extra log read.
#[inline]
pub(crate) fn tag_of(hash: u64) -> u64 {
    let tag = hash & LINK_TAG;
    if tag == LINK_TAG {
        LINK_TAG - 1
    } else {
        tag
    }
}

/// The slot value of an entry.
///
/// The reference is masked so that even a caller violating the contract in a
/// release build cannot forge a chain link (which readers would follow).
#[inline]
pub(crate) fn entry(tag: u64, reference: u64) -> u64 {
    debug_assert!(reference != 0, "reference 0 is reserved for empty slots");
    debug_assert!(
        reference <= REF_MASK,
        "reference {reference:#x} exceeds 48 bits"
    );
    debug_assert!(tag < LINK_TAG);
    (tag << REF_BITS) | (reference & REF_MASK)
}

/// The slot value of a chain link to overflow bucket `index`.
#[inline]
pub(crate) fn link(index: u64) -> u64 {
    debug_assert!(index <= REF_MASK);
    (LINK_TAG << REF_BITS) | index
}

/// Whether a (non-empty) slot value is a chain link.
#[inline]
pub(crate) fn is_link(value: u64) -> bool {
    value >> REF_BITS == LINK_TAG
}

/// The tag of a slot value.
#[inline]
pub(crate) fn tag(value: u64) -> u64 {
    value >> REF_BITS
}

/// Allocates `count` zeroed buckets, or `None` if the size overflows or the allocator fails.
///
/// Zeroed memory comes cheaply from the allocator (fresh pages are already
/// zero), which matters for large tables and overflow chunks.
pub(crate) fn alloc_zeroed_buckets(count: usize) -> Option<Box<[Bucket]>> {
    if count == 0 {
        return Some(Box::new([]));
    }
    let layout = Layout::array::<Bucket>(count).ok()?;
    // SAFETY: `count > 0` and a bucket is 64 bytes, so the layout has a non-zero size.
    let raw = unsafe { alloc::alloc_zeroed(layout) }.cast::<Bucket>();
    if raw.is_null() {
        return None;
    }
    // SAFETY: `raw` was just allocated by the global allocator with
    // `Layout::array::<Bucket>(count)`, which is the layout a `Box<[Bucket]>` of
    // length `count` uses; all-zero bytes are a valid `Bucket` (eight zero
    // `AtomicU64`s); and nothing else refers to the allocation.
    Some(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(raw, count)) })
}

/// The main bucket array: one anonymous mapping of its own.
///
/// Not `Box<[Bucket]>`: the global allocator has to `memset` a 64-byte-aligned
/// allocation, touching every page of a table that may be gigabytes at start-up, and
/// it would hand back 4 KiB pages. A private mapping is zeroed by the kernel on first
/// touch and can be backed by 2 MiB pages. That matters because every bucket access
/// is a random cache miss, and with 4 KiB pages it is usually a TLB miss too — the
/// page walk costs as much as the miss (profiling the cleaner's relocations showed
/// the bucket prefetches stalling on exactly that).
pub(crate) struct BucketArray {
    ptr: ptr::NonNull<Bucket>,
    len: usize,
    mapped_bytes: usize,
}

// SAFETY: the array owns its mapping; buckets are atomics, safe to share.
unsafe impl Send for BucketArray {}
// SAFETY: as above.
unsafe impl Sync for BucketArray {}

impl BucketArray {
    /// `count` zeroed buckets (at least one), or `None` if the size overflows or the
    /// mapping fails.
    pub(crate) fn new(count: usize) -> Option<Self> {
        const HUGE_PAGE_BYTES: usize = 2 << 20;
        let count = count.max(1);
        let bytes = count.checked_mul(std::mem::size_of::<Bucket>())?;
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let raw = unsafe {
            libc::mmap(
                ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        if bytes >= HUGE_PAGE_BYTES {
            // A hint: ignored where transparent huge pages are off.
            // SAFETY: the range is exactly the mapping just created.
            unsafe {
                libc::madvise(raw, bytes, libc::MADV_HUGEPAGE);
            }
        }
        Some(Self {
            // A successful mmap never returns null; page alignment exceeds 64.
            ptr: ptr::NonNull::new(raw.cast::<Bucket>())?,
            len: count,
            mapped_bytes: bytes,
        })
    }
}

impl BucketArray {
    /// Bytes of the mapping the kernel holds in memory right now: pages are zeroed
    /// on first touch, so an array few keys have reached is mostly not resident.
    /// `None` where the kernel cannot be asked (`mincore` is Linux-only here).
    pub(crate) fn resident_bytes(&self) -> Option<usize> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: sysconf has no preconditions.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .ok()
                .filter(|&p| p > 0)?;
            // One status byte per page, a chunk of pages at a time, so asking costs
            // no allocation however large the table is.
            let mut status = [0u8; 4096];
            let base = self.ptr.as_ptr().cast::<u8>();
            let mut resident_pages = 0usize;
            let mut offset = 0;
            while offset < self.mapped_bytes {
                let len = (self.mapped_bytes - offset).min(status.len() * page);
                // SAFETY: [offset, offset + len) lies inside the mapping made in
                // `new` (page-aligned, alive as long as `self`), `offset` is a
                // multiple of the page size, and `status` has a byte for each of
                // the ⌈len / page⌉ pages.
                let rc =
                    unsafe { libc::mincore(base.add(offset).cast(), len, status.as_mut_ptr()) };
                if rc != 0 {
                    return None;
                }
                resident_pages += status[..len.div_ceil(page)]
                    .iter()
                    .filter(|&&s| s & 1 != 0)
                    .count();
                offset += len;
            }
            Some((resident_pages * page).min(self.mapped_bytes))
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }
}

impl std::ops::Deref for BucketArray {
    type Target = [Bucket];

    fn deref(&self) -> &[Bucket] {
        // SAFETY: the mapping holds `len` buckets, zero-initialised by the kernel
        // (all-zero bytes are a valid `Bucket`), and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for BucketArray {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference into it
        // outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.mapped_bytes);
        }
    }
}

//! The 64-byte bucket and the encoding of its slots.
//!
//! Everything here is plain bit manipulation; the rules about who may store
//! what, and with which memory ordering, live in `table.rs`.

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

/// An array of buckets in one anonymous mapping of its own: the main buckets, and
/// each chunk of overflow buckets.
///
/// Not `Box<[Bucket]>`: the global allocator has to `memset` a 64-byte-aligned
/// allocation (measured: `alloc_zeroed` of 64 MiB aligned to 64 makes 64 MiB
/// resident at once), touching every page of a table that may be gigabytes at
/// start-up and every page of an overflow chunk of which only the first buckets may
/// ever be used; and it would hand back 4 KiB pages. A private mapping is zeroed by
/// the kernel on first touch and can be backed by 2 MiB pages. That matters for the
/// main buckets because every bucket access is a random cache miss, and with 4 KiB
/// pages it is usually a TLB miss too — the page walk costs as much as the miss
/// (profiling the cleaner's relocations showed the bucket prefetches stalling on
/// exactly that). Overflow chunks are handed out from their start and touched
/// rarely, so they keep 4 KiB pages: a huge page would make 2 MiB resident for the
/// first bucket.
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
    /// mapping fails. With `huge_pages`, an array of 2 MiB or more asks for 2 MiB
    /// pages (a hint).
    pub(crate) fn new(count: usize, huge_pages: bool) -> Option<Self> {
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
        if huge_pages && bytes >= HUGE_PAGE_BYTES {
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
    /// Gives up ownership of the mapping: the first bucket, for [`Self::from_raw`].
    pub(crate) fn into_raw(self) -> *mut Bucket {
        let raw = self.ptr.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// Takes back a mapping of `count` buckets given up with [`Self::into_raw`].
    ///
    /// # Safety
    /// `raw` came from `into_raw` of an array of `count` buckets (made with `count
    /// ≥ 1`), and no other owner of it exists.
    pub(crate) unsafe fn from_raw(raw: *mut Bucket, count: usize) -> Self {
        Self {
            // SAFETY: `raw` is the non-null pointer `into_raw` returned (the
            // caller's promise).
            ptr: ptr::NonNull::new_unchecked(raw),
            len: count,
            mapped_bytes: count * std::mem::size_of::<Bucket>(),
        }
    }

    /// Faults every page of the array in now (`MADV_POPULATE_WRITE`, in chunks so
    /// the process's mmap lock is never held for long), so the first insert into
    /// a page does not pay its zeroing: on a migration's target, cold buckets
    /// were a quarter of the profile (docs/benchmarks.md, "Migration throughput
    /// (issue 20, side20)"). Safe while the table is in use: it only maps pages,
    /// contents are untouched. An error (an older kernel) changes nothing.
    pub(crate) fn prefault(&self) -> std::io::Result<()> {
        const CHUNK_BYTES: usize = 32 << 20;
        #[cfg(target_os = "linux")]
        {
            let mut offset = 0;
            while offset < self.mapped_bytes {
                let len = CHUNK_BYTES.min(self.mapped_bytes - offset);
                // SAFETY: [offset, offset + len) lies inside the mapping made in
                // `new`, alive as long as `self`; MADV_POPULATE_WRITE never
                // changes bytes.
                let rc = unsafe {
                    libc::madvise(
                        self.ptr.as_ptr().cast::<u8>().add(offset).cast(),
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
                "prefaulting the hash table needs Linux",
            ))
        }
    }

    /// Bytes of the mapping the kernel holds in memory right now: pages are zeroed
    /// on first touch, so an array few keys have reached is mostly not resident.
    /// `None` where the kernel cannot be asked (see [`ramstore_mmap::resident_bytes`]).
    pub(crate) fn resident_bytes(&self) -> Option<usize> {
        // SAFETY: the mapping made in `new` is `mapped_bytes` long, page-aligned,
        // and lives as long as `self`.
        unsafe { ramstore_mmap::resident_bytes(self.ptr.as_ptr().cast(), self.mapped_bytes) }
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

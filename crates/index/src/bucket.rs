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

//! ramstore's hash table: the master's index from key hash to log reference.
//!
//! Every object a master stores lives in its log; this table is how the
//! master finds it again (RAMCloud, "The RAMCloud Storage System", R§4.1 and
//! Fig. 4). It maps a 64-bit key hash to a 48-bit *reference* (the log
//! position of the object's newest version). The table never sees keys: it
//! stores a 16-bit *tag* taken from the hash as a cheap filter, and the
//! caller decides whether a candidate reference is the key it wants by
//! reading the log entry, through a closure passed to [`HashTable::lookup`]
//! or [`BucketGuard::find`]. Two keys with equal hashes (or equal tags) are
//! therefore harmless, only slower.
//!
//! # Layout
//!
//! The table is an array of main buckets, each exactly one 64-byte cache line
//! of eight 64-bit slots. A slot is 0 when empty; otherwise:
//!
//! ```text
//!  63             48 47                                             0
//! +-----------------+------------------------------------------------+
//! |   tag (16 bits) |            reference (48 bits, != 0)           |
//! +-----------------+------------------------------------------------+
//!   byte 7   byte 6   byte 5 ... byte 0 (little-endian u64)
//!
//! tag    = low 16 bits of the key hash, with 0xFFFF remapped to 0xFFFE
//! tag == 0xFFFF: a chain link; the low 48 bits are the index of an
//!                overflow bucket (only ever in slot 7, the last one)
//! ```
//!
//! When a chain's eight slots are full, slot 7's entry moves to a new
//! overflow bucket and slot 7 becomes a link to it, so a main bucket owns a
//! chain of buckets. Overflow buckets come from an arena that grows by chunks
//! and never moves them; they are never unlinked or freed in this version (a
//! bucket emptied by removals is reused by later inserts into its chain).
//!
//! A hash's main bucket is `⌊hash · buckets / 2⁶⁴⌋` (any bucket count, so the
//! table is sized to its memory budget, not rounded to a power of two). That
//! mapping keeps hash order: a contiguous range of hashes (a tablet) maps to a
//! contiguous range of buckets
//! ([`HashTable::bucket_hash_range`]); enumerating a tablet walks just those
//! buckets, with a hash value as its cursor ([`HashTable::for_each_in_bucket`]).
//!
//! # Why cache-line buckets
//!
//! A read should cost about two cache misses (R§4.1): one for the bucket,
//! whose eight slots and tags are then all in cache, and one for the log
//! entry the matching reference points at. Tags make it rare to touch a log
//! entry of a different key. With [`HashTable::with_capacity`] buckets are on
//! average half full, so overflow chains (an extra miss each) are rare.
//!
//! # Thread safety
//!
//! [`HashTable`] is `Send + Sync`.
//!
//! - Readers ([`HashTable::lookup`], [`HashTable::for_each_in_bucket`]) take
//!   no lock. Each slot is a single `AtomicU64` loaded with `Acquire`, so a
//!   reader sees either the old or the new value of a slot, never a torn one;
//!   during a [`BucketGuard::replace`] it sees the old or the new reference.
//!   An entry present for the whole duration of a read is always seen, even
//!   if an insert concurrently moves it into a new overflow bucket (see
//!   [`BucketGuard::insert`]).
//! - Writers (the object store's writes and deletes, and the log cleaner when
//!   it relocates objects) take the per-main-bucket lock with
//!   [`HashTable::lock`], which covers the main bucket and its whole overflow
//!   chain. Writers therefore serialise per main bucket, and all their slot
//!   stores use `Release`.
//!
//! The references passed to the closures may belong to entries that are
//! being replaced or removed at that very moment; keeping the log entry they
//! point at readable is the caller's business (the log's, really).

mod bucket;
mod overflow;
mod table;

#[cfg(test)]
mod tests;

use std::fmt;

pub use table::{BucketGuard, HashTable, Slot};

/// Bits of a slot holding the tag.
pub const TAG_BITS: u32 = 16;
/// Bits of a slot holding the reference; references must be in `1..2^48`.
pub const REF_BITS: u32 = 48;
/// Slots in one 64-byte bucket.
pub const SLOTS_PER_BUCKET: usize = 8;

/// Returned by [`BucketGuard::insert`] when no overflow bucket can be added:
/// the arena's 32 chunks are all used, or the next chunk cannot be allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexFull;

impl fmt::Display for IndexFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("hash table full: no overflow bucket available")
    }
}

impl std::error::Error for IndexFull {}

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
//! (each its own mapping, zeroed by the kernel page by page as buckets are
//! handed out) and never moves them. When removals leave a chain ending in empty overflow
//! buckets, they are unlinked and go back to the arena's free list, which
//! later extensions of any chain take from first: the arena's resident size
//! is bounded by the most overflow buckets ever in use at once
//! ([`HashTable::overflow_buckets_high_water`], [`HashTable::resident_bound_bytes`]),
//! not by how many chains ever overflowed under churn (issue 17);
//! [`HashTable::resident_bytes`] asks the kernel what is resident now. A chain has
//! at most [`MAX_CHAIN_BUCKETS`] buckets.
//!
//! A hash's main bucket is `⌊hash · buckets / 2⁶⁴⌋` (any bucket count, so the
//! table is sized to its memory budget, not rounded to a power of two). That
//! mapping keeps hash order: a contiguous range of hashes (a tablet) maps to a
//! contiguous range of buckets
//! ([`HashTable::bucket_hash_range`]); enumerating a tablet walks just those
//! buckets, with a hash value as its cursor ([`HashTable::for_each_in_bucket`]),
//! keeping only entries whose hash maps to the bucket walked (see below).
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
//!   it relocates objects) take their main bucket's lock with
//!   [`HashTable::lock`], which covers the main bucket and its whole overflow
//!   chain. Main buckets share [`LOCK_STRIPES`] locks, so writers serialise per
//!   stripe (a superset of their bucket), a thread holds at most one guard, and
//!   all slot stores use `Release`. The overflow arena's mutex is taken under a bucket
//!   lock (to allocate or release overflow buckets), never the other way.
//!
//! The references passed to the closures may belong to entries that are
//! being replaced or removed at that very moment, or to entries of other
//! main buckets (below); keeping the log entry they point at readable is the
//! caller's business (the log's, really).
//!
//! ## Reusing overflow buckets without epochs
//!
//! A remove that leaves a chain ending in empty overflow buckets unlinks them
//! (one `Release` store of 0 into the last slot of the last bucket that keeps
//! an entry, or of the main bucket) and puts them, all zero, on the arena's
//! free list; another chain may take one at once while a lock-free reader
//! still stands in it. No epoch or hazard pointer protects the reader; it is
//! safe for three reasons.
//!
//! 1. *No entry is missed.* Entries move only when an insert extends a chain
//!    (slot 7's entry goes to slot 0 of the new bucket, written before the
//!    link is published); removes only empty slots and never move an entry,
//!    and a bucket is unlinked only if no entry is in it or after it. Take an
//!    entry E present for the whole walk (inserted before the walk began,
//!    removed after it ended). The buckets from the main bucket to E's
//!    bucket, and the links between them, were in place when the walk began
//!    and cannot change during it: each of them is E's bucket or precedes it,
//!    so none is ever unlinked, and a link slot is only rewritten by an
//!    unlink. The only change is that E may move from slot 7 of its bucket to
//!    a new bucket appended after it, which the walk finds as for a chain
//!    that grows (see [`BucketGuard::insert`]). A walk begins at the main
//!    bucket (never unlinked) and follows these links, so it reaches E's
//!    bucket and sees E before it can step into any bucket that gets
//!    unlinked: a walk can only stray *after* every entry present throughout.
//!    That is also why only a whole empty tail is unlinked: a reader standing
//!    in an unlinked bucket that had a successor would follow the links of
//!    the bucket's new chain and miss what came after it.
//! 2. *Foreign entries are harmless, or filtered.* A walk that stands in a
//!    bucket as it is unlinked and reused goes on through another chain's
//!    entries (real entries of the table, of keys with other hashes).
//!    [`HashTable::lookup`] is unaffected, because its closure decides by
//!    comparing the key (the log entry's), which differs.
//!    [`HashTable::for_each_in_bucket`] passes them to its callback, and a
//!    caller that needs just one bucket's entries keeps those whose key hash
//!    maps to that bucket ([`HashTable::bucket_of`]), as the object store's
//!    enumeration and tablet scans do. An entry present throughout is still
//!    visited exactly once: a bucket holding one was linked into this chain
//!    before the walk began (or, for a moved entry, by the link the walk
//!    itself follows), after every earlier link to it was overwritten, so no
//!    stale link leads back to it.
//! 3. *Every walk ends.* A straying walk might in principle go round a loop of
//!    buckets that writers keep relinking behind it. Walks visit at most
//!    [`MAX_CHAIN_BUCKETS`] buckets, and an insert that would make a chain
//!    longer fails with [`IndexFull`]. By (1), an entry present throughout
//!    lies within the first `MAX_CHAIN_BUCKETS` buckets and is reached before
//!    any straying, so a walk that hits the bound has already seen every such
//!    entry: stopping there is as good as reaching the chain's end.
//!
//! Memory ordering: a released bucket is zeroed (its last slot cleared) before
//! it goes on the free list; the arena's mutex orders its release before its
//! reuse, and the new owner fills it before publishing the link with
//! `Release`, exactly as for a never-used bucket, so a reader that follows the
//! new link sees the new contents. A reader still standing in it sees some
//! mixture of zeros and the new chain's stores, each a whole slot value; by
//! (1) and (2) it needs nothing more. Any link a stale reader loads names a
//! bucket that was allocated before the link was stored, so it can always be
//! dereferenced.

mod bucket;
mod overflow;
mod table;

#[cfg(test)]
mod overflow_reuse_tests;
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

/// The most buckets, main bucket included, that one chain may have: 65,536,
/// room for 458,753 entries under one main bucket.
///
/// Lock-free walks visit at most this many buckets, which bounds the time a
/// walk that strays into reused overflow buckets can take (see "Reusing
/// overflow buckets without epochs" above); [`BucketGuard::insert`] refuses
/// to make a chain longer, so the bound never hides an entry. A table sized
/// by [`HashTable::with_capacity`] holds 4 entries per main bucket on average,
/// so only a broken hash or a grossly undersized table comes near it.
pub const MAX_CHAIN_BUCKETS: usize = 1 << 16;

/// The most writer locks a table has (`HashTable::lock_stripes`): 4,096 one-byte
/// locks, 4 KiB that stay in a core's cache however large the table, so a write
/// or a relocation pays one cache miss (its bucket) instead of two. Main bucket
/// `b` is covered by lock `b mod 4,096`; two writers collide only when their
/// buckets share a stripe and their short critical sections overlap.
pub const LOCK_STRIPES: usize = 4096;

/// Returned by [`BucketGuard::insert`] when no overflow bucket can be added:
/// the arena's 32 chunks are all used (and none is free), the next chunk
/// cannot be allocated, or the chain already has [`MAX_CHAIN_BUCKETS`] buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexFull;

impl fmt::Display for IndexFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("hash table full: no overflow bucket available")
    }
}

impl std::error::Error for IndexFull {}

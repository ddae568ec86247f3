//! The object lock table of transactions (SOSP'15 §6.2): a prepared transaction
//! holds a lock on each object it will change or whose version it checked, until
//! its decision is applied.
//!
//! Locks are keyed by (table id, key hash): two keys with the same 64-bit hash
//! share a lock, which can only cause a spurious conflict (an abort or a RETRY),
//! never a missed one.
//!
//! Locks never block reads (a read of a locked object returns its committed
//! value). Writers that are not part of a transaction check their key's shard
//! under that shard's shared guard, held across their write
//! ([`LockTable::writer_guard`]); a prepare takes the shards of all its keys
//! exclusively while it checks versions and takes locks, so no plain write can
//! slip between a prepare's version check and its lock.
//!
//! # Why shards (issue 21; design notes "Transactions", "Locks")
//!
//! Every plain write, remove and increment takes a shared guard, which is an
//! atomic read-modify-write of the guard's word. With one table-wide guard that
//! word was one cache line written by every write on every core, even when no
//! transaction existed. The table is split into [`LOCK_SHARDS`] shards by key
//! hash, each on its own cache line, so writers of different keys touch
//! different lines (63 times in 64). The argument that no plain write falls
//! between a prepare's check and its lock is per key, and a key's check and its
//! lock both happen under its shard's guard, so it holds per shard unchanged.
//! A plain write holds one shard's guard at a time; a prepare or a release takes
//! the exclusive guards of its shards in ascending shard order, so two of them
//! never wait on each other in a cycle and no deadlock is possible.

use std::collections::HashMap;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use ramstore_wire::key_hash;

use crate::hashed_key::HashedKey;

/// Shards of the lock table (a power of two: the shard is the hash's top bits).
pub const LOCK_SHARDS: usize = 64;
const SHARD_SHIFT: u32 = 64 - LOCK_SHARDS.trailing_zeros();

/// A transaction's identity: the client lease it runs under and the RIFL
/// sequence number its client reserved for it (SOSP'15 §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxId {
    pub lease_id: u64,
    pub tx_seq: u64,
}

/// A plain write met an object a transaction holds locked: retry later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("object is locked by transaction {holder:?}; retry")]
pub struct ObjectLocked {
    pub holder: TxId,
}

/// (table id, key hash) → holding transaction.
pub(crate) type LockMap = HashMap<(u64, u64), TxId>;

/// One shard, alone on its cache line(s) so that shards do not share one.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(RwLock<LockMap>);

/// Every lock held on this master.
#[derive(Debug)]
pub struct LockTable {
    shards: Box<[Shard]>,
}

impl Default for LockTable {
    fn default() -> Self {
        Self {
            shards: (0..LOCK_SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

impl LockTable {
    /// Whether a transaction holds some object of `table_id` whose key hash is
    /// in `[start_hash, end_hash]` (a migration's source asks before it lets a
    /// range go). Takes each shard covering the range in turn, shared, so a
    /// prepare holding one exclusively is waited for.
    pub fn any_in_range(&self, table_id: u64, start_hash: u64, end_hash: u64) -> bool {
        (shard_of(start_hash)..=shard_of(end_hash)).any(|i| {
            self.shards[i]
                .0
                .read()
                .keys()
                .any(|&(t, h)| t == table_id && (start_hash..=end_hash).contains(&h))
        })
    }
}

/// The shard of a key hash.
fn shard_of(hash: u64) -> usize {
    (hash >> SHARD_SHIFT) as usize
}

/// A plain writer's permission to write the object it checked: while it is
/// held no prepare can lock it.
pub struct WriterGuard<'a> {
    _shard: RwLockReadGuard<'a, LockMap>,
}

/// The exclusive guards of a prepare's or a release's shards, taken in
/// ascending order.
pub(crate) struct ShardsGuard<'a> {
    /// (shard index, its guard), sorted by shard index.
    guards: Vec<(usize, RwLockWriteGuard<'a, LockMap>)>,
}

impl ShardsGuard<'_> {
    fn map(&mut self, hash: u64) -> &mut LockMap {
        let shard = shard_of(hash);
        // Callers pass the hashes they touch to `exclusive` first: a missing
        // shard is a bug of this module, not bad input.
        let i = self
            .guards
            .binary_search_by_key(&shard, |(s, _)| *s)
            .unwrap_or_else(|_| panic!("shard {shard} of a key was not taken"));
        &mut self.guards[i].1
    }

    /// Which transaction holds (table id, key hash), if any.
    pub(crate) fn get(&mut self, table_id: u64, hash: u64) -> Option<TxId> {
        self.map(hash).get(&(table_id, hash)).copied()
    }

    pub(crate) fn insert(&mut self, table_id: u64, hash: u64, id: TxId) {
        self.map(hash).insert((table_id, hash), id);
    }

    pub(crate) fn remove(&mut self, table_id: u64, hash: u64) -> Option<TxId> {
        self.map(hash).remove(&(table_id, hash))
    }
}

impl LockTable {
    /// The shared guard a plain write holds from its lock check to its write,
    /// once `key` of `table_id` is known not to be locked by a transaction.
    pub fn writer_guard(&self, table_id: u64, key: &[u8]) -> Result<WriterGuard<'_>, ObjectLocked> {
        self.writer_guard_hashed(table_id, &HashedKey::new(key))
    }

    /// [`Self::writer_guard`] for a key already hashed: the write that follows
    /// uses the same hash for its bucket (issue 21, "hash once").
    pub fn writer_guard_hashed(
        &self,
        table_id: u64,
        key: &HashedKey<'_>,
    ) -> Result<WriterGuard<'_>, ObjectLocked> {
        let hash = key.hash();
        let map = self.shards[shard_of(hash)].0.read();
        if !map.is_empty() {
            if let Some(&holder) = map.get(&(table_id, hash)) {
                return Err(ObjectLocked { holder });
            }
        }
        Ok(WriterGuard { _shard: map })
    }

    /// Exclusive access to the shards of `hashes` (any order, repeats allowed),
    /// for a prepare or a release. The guards are taken in ascending shard order
    /// (module doc: no deadlock).
    pub(crate) fn exclusive(&self, hashes: impl IntoIterator<Item = u64>) -> ShardsGuard<'_> {
        let mut shards: Vec<usize> = hashes.into_iter().map(shard_of).collect();
        shards.sort_unstable();
        shards.dedup();
        ShardsGuard {
            guards: shards
                .into_iter()
                .map(|s| (s, self.shards[s].0.write()))
                .collect(),
        }
    }

    /// Which transaction holds `key` of `table_id`, if any.
    pub fn holder(&self, table_id: u64, key: &[u8]) -> Option<TxId> {
        let hash = key_hash(key);
        self.shards[shard_of(hash)]
            .0
            .read()
            .get(&(table_id, hash))
            .copied()
    }

    /// Number of locks held (for stats and tests).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seq: u64) -> TxId {
        TxId {
            lease_id: 1,
            tx_seq: seq,
        }
    }

    #[test]
    fn shard_of_covers_every_shard_and_no_more() {
        assert_eq!(shard_of(0), 0);
        assert_eq!(shard_of(u64::MAX), LOCK_SHARDS - 1);
    }

    #[test]
    fn any_in_range_sees_only_locks_of_the_table_and_range() {
        let t = LockTable::default();
        let mut g = t.exclusive([1u64 << 40, u64::MAX - 5]);
        g.insert(1, 1 << 40, id(1));
        g.insert(2, u64::MAX - 5, id(1));
        drop(g);
        assert!(t.any_in_range(1, 0, 1 << 40));
        assert!(t.any_in_range(1, 1 << 40, 1 << 40));
        assert!(
            !t.any_in_range(1, (1 << 40) + 1, u64::MAX),
            "table 2's lock"
        );
        assert!(t.any_in_range(2, 1 << 63, u64::MAX));
        assert!(!t.any_in_range(3, 0, u64::MAX));
    }

    #[test]
    fn exclusive_takes_each_shard_once_whatever_the_order() {
        let t = LockTable::default();
        // Two keys in one shard, listed around a key of another shard.
        let a = 0u64;
        let b = 1u64;
        let c = u64::MAX;
        let mut g = t.exclusive([c, a, b, a]);
        assert_eq!(g.guards.len(), 2);
        assert!(g.guards.windows(2).all(|w| w[0].0 < w[1].0));
        g.insert(1, a, id(1));
        g.insert(1, c, id(1));
        assert_eq!(g.get(1, a), Some(id(1)));
        assert_eq!(g.get(1, b), None);
        drop(g);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn writer_guard_blocks_a_prepare_of_its_shard_only() {
        let t = LockTable::default();
        let guard = t.writer_guard(1, b"k").expect("nothing is locked");
        let own = shard_of(key_hash(b"k"));
        let other = (0..u64::MAX)
            .step_by(1 << 40)
            .find(|h| shard_of(*h) != own)
            .expect("another shard exists");
        // A prepare of another shard does not wait for the plain writer.
        let mut g = t.exclusive([other]);
        g.insert(1, other, id(2));
        drop(g);
        // Its own shard's exclusive guard is not available while it writes.
        assert!(t.shards[own].0.try_write().is_none());
        drop(guard);
        assert!(t.shards[own].0.try_write().is_some());
    }
}

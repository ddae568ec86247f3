//! The object lock table of transactions (SOSP'15 §6.2): a prepared transaction
//! holds a lock on each object it will change or whose version it checked, until
//! its decision is applied.
//!
//! Locks are keyed by (table id, key hash): two keys with the same 64-bit hash
//! share a lock, which can only cause a spurious conflict (an abort or a RETRY),
//! never a missed one.
//!
//! Locks never block reads (a read of a locked object returns its committed
//! value). Writers that are not part of a transaction check the table under a
//! shared guard held across their write ([`LockTable::writer_guard`]); a prepare
//! takes the guard exclusively while it checks versions and takes locks, so no
//! plain write can slip between a prepare's version check and its lock.

use std::collections::HashMap;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use ramstore_wire::key_hash;

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

/// Every lock held on this master.
#[derive(Debug, Default)]
pub struct LockTable {
    map: RwLock<LockMap>,
}

/// A plain writer's permission to write the objects it checked: while it is
/// held no prepare can lock them.
pub struct WriterGuard<'a>(RwLockReadGuard<'a, LockMap>);

impl WriterGuard<'_> {
    /// Fails if `key` of `table_id` is locked by a transaction.
    pub fn check(&self, table_id: u64, key: &[u8]) -> Result<(), ObjectLocked> {
        if self.0.is_empty() {
            return Ok(());
        }
        match self.0.get(&(table_id, key_hash(key))) {
            Some(&holder) => Err(ObjectLocked { holder }),
            None => Ok(()),
        }
    }
}

impl LockTable {
    /// The shared guard a plain write holds from its lock check to its write.
    pub fn writer_guard(&self) -> WriterGuard<'_> {
        WriterGuard(self.map.read())
    }

    /// Exclusive access for a prepare or a release.
    pub(crate) fn exclusive(&self) -> RwLockWriteGuard<'_, LockMap> {
        self.map.write()
    }

    /// Which transaction holds `key` of `table_id`, if any.
    pub fn holder(&self, table_id: u64, key: &[u8]) -> Option<TxId> {
        self.map.read().get(&(table_id, key_hash(key))).copied()
    }

    /// Number of locks held (for stats and tests).
    pub fn len(&self) -> usize {
        self.map.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

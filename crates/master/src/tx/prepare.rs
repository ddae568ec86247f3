//! Prepare and decide on one participant (SOSP'15 §6.2): a prepare checks each
//! op's version and locks its object, all or nothing, and votes; a decision
//! applies the prepared ops (commit) or drops them (abort) and releases the
//! locks. Both are idempotent, so a client may resend either.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use ramstore_wire::{key_hash, TxOp, TxOpKind, TxVote};

use super::locks::{LockTable, TxId};
use crate::error::{ReadError, WriteError};
use crate::object_store::ObjectStore;
use crate::RejectRules;

/// How many decided transactions a master remembers, so a resent prepare of a
/// decided transaction gets its outcome instead of being prepared again.
pub const REMEMBERED_DECISIONS: usize = 65_536;

/// A prepared op, owned: it outlives the request that carried it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxOpOwned {
    pub kind: TxOpKind,
    pub table_id: u64,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// The transactions of one master: its locks, its prepared ops, and the
/// outcomes of recently decided transactions.
#[derive(Debug, Default)]
pub struct Transactions {
    locks: LockTable,
    prepared: Mutex<HashMap<TxId, Vec<TxOpOwned>>>,
    decided: Mutex<Decided>,
}

#[derive(Debug, Default)]
struct Decided {
    outcome: HashMap<TxId, bool>,
    order: VecDeque<TxId>,
}

impl Decided {
    fn remember(&mut self, id: TxId, commit: bool) {
        if self.outcome.insert(id, commit).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > REMEMBERED_DECISIONS {
            if let Some(old) = self.order.pop_front() {
                self.outcome.remove(&old);
            }
        }
    }
}

impl Transactions {
    pub fn new() -> Self {
        Self::default()
    }

    /// The lock table (plain writers check it).
    pub fn locks(&self) -> &LockTable {
        &self.locks
    }

    /// Number of transactions prepared here and not yet decided.
    pub fn prepared_count(&self) -> usize {
        self.prepared.lock().len()
    }

    /// Phase one: checks every op's expected version and locks every object, or
    /// votes ABORT holding nothing. With `decide_now` (this master is the only
    /// participant) it also applies the ops and answers COMMITTED: the
    /// single-server fast path, one round trip.
    ///
    /// An error (unknown tablet, a full log) changes nothing that a resend of the
    /// same prepare does not finish: ops applied before a full log stay prepared
    /// under their locks, and the resend applies the rest.
    pub fn prepare(
        &self,
        store: &ObjectStore,
        id: TxId,
        ops: &[TxOp<'_>],
        decide_now: bool,
    ) -> Result<TxVote, WriteError> {
        if let Some(&commit) = self.decided.lock().outcome.get(&id) {
            return Ok(if commit {
                TxVote::Committed
            } else {
                TxVote::Abort
            });
        }
        let already = self.prepared.lock().contains_key(&id);
        if !already {
            if !self.lock_all(store, id, ops)? {
                self.decided.lock().remember(id, false);
                return Ok(TxVote::Abort);
            }
            let owned = ops
                .iter()
                .map(|op| TxOpOwned {
                    kind: op.kind,
                    table_id: op.table_id,
                    key: op.key.to_vec(),
                    value: op.value.to_vec(),
                })
                .collect();
            self.prepared.lock().insert(id, owned);
        }
        if decide_now {
            self.decide(store, id, true)?;
            return Ok(TxVote::Committed);
        }
        Ok(TxVote::Prepared)
    }

    /// Checks versions and takes the locks under the exclusive guard; false (and
    /// nothing held) on a conflict.
    fn lock_all(
        &self,
        store: &ObjectStore,
        id: TxId,
        ops: &[TxOp<'_>],
    ) -> Result<bool, WriteError> {
        let mut map = self.locks.exclusive();
        for op in ops {
            let slot = (op.table_id, key_hash(op.key));
            if map.get(&slot).is_some_and(|holder| *holder != id) {
                return Ok(false);
            }
            let current = current_version(store, op.table_id, op.key)?;
            if op.expected_version.is_some_and(|v| v != current) {
                return Ok(false);
            }
        }
        for op in ops {
            map.insert((op.table_id, key_hash(op.key)), id);
        }
        Ok(true)
    }

    /// Phase two: applies (`commit`) or drops the prepared ops of `id` and
    /// releases their locks. Deciding a transaction not prepared here is a no-op
    /// (a resent decision, or an abort of one that voted ABORT here) that is
    /// remembered, so a late prepare of it votes as decided.
    pub fn decide(&self, store: &ObjectStore, id: TxId, commit: bool) -> Result<(), WriteError> {
        let Some(mut ops) = self.prepared.lock().remove(&id) else {
            self.decided.lock().remember(id, commit);
            return Ok(());
        };
        if commit {
            // Apply in order, dropping each applied op; on an error the rest stay
            // prepared (and locked) for the resent decision.
            let mut applied = 0;
            let result = ops.iter().try_for_each(|op| {
                apply(store, op)?;
                applied += 1;
                Ok(())
            });
            if let Err(e) = result {
                let rest = ops.split_off(applied);
                self.release(&ops);
                self.prepared.lock().insert(id, rest);
                return Err(e);
            }
        }
        self.release(&ops);
        self.decided.lock().remember(id, commit);
        Ok(())
    }

    fn release(&self, ops: &[TxOpOwned]) {
        let mut map = self.locks.exclusive();
        for op in ops {
            map.remove(&(op.table_id, key_hash(&op.key)));
        }
    }
}

/// The object's version, 0 if it does not exist (SOSP'15 §6.1: a read of a
/// missing object records version 0).
fn current_version(store: &ObjectStore, table_id: u64, key: &[u8]) -> Result<u64, WriteError> {
    match store.read_with(table_id, key, |view| view.version()) {
        Ok(version) => Ok(version),
        Err(ReadError::ObjectDoesntExist) => Ok(0),
        Err(ReadError::KeyTooLarge(n)) => Err(WriteError::KeyTooLarge(n)),
        Err(ReadError::Migrating) => Err(WriteError::Migrating),
        Err(_) => Err(WriteError::UnknownTablet),
    }
}

fn apply(store: &ObjectStore, op: &TxOpOwned) -> Result<(), WriteError> {
    let rules = RejectRules::default();
    match op.kind {
        TxOpKind::Read => Ok(()),
        TxOpKind::Write => store
            .write(op.table_id, &op.key, &op.value, &rules)
            .map(|_| ()),
        TxOpKind::Remove => store.remove(op.table_id, &op.key, &rules).map(|_| ()),
    }
}

#[cfg(test)]
mod tests;

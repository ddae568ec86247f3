//! Prepare and decide on one participant (SOSP'15 §6.2): a prepare checks each
//! op's version and locks its object, all or nothing, and votes; a decision
//! applies the prepared ops (commit) or drops them (abort) and releases the
//! locks. Both are idempotent, so a client may resend either.
//!
//! Durability (design notes "Transactions"): a prepare that votes PREPARED first
//! appends one prepared record per op (log entry type 8) and its caller answers
//! once the log's end is replicated, so the vote never outlives the ops it
//! promises. A decision appends a decided mark per record; a replay re-takes the
//! locks of records no mark names (`replay.rs`).

use std::collections::{BTreeMap, HashMap, VecDeque};

use parking_lot::Mutex;
use ramstore_log::entry::{encode_tx_prepared, PreparedKind, TxRecordId};
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
    /// Its number among the ops prepared here (its record's `op_index`).
    pub op_index: u64,
    pub kind: TxOpKind,
    pub expected_version: Option<u64>,
    pub table_id: u64,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

impl TxOpOwned {
    /// The identity its prepared record carries.
    pub(crate) fn record_id(&self, tx: TxId) -> TxRecordId {
        TxRecordId {
            lease_id: tx.lease_id,
            tx_seq: tx.tx_seq,
            op_index: self.op_index,
            table_id: self.table_id,
            key_hash: key_hash(&self.key),
        }
    }
}

/// A transaction prepared here and not yet decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PreparedTx {
    pub ops: Vec<TxOpOwned>,
    /// `ops[..recorded]` have their prepared records in the log.
    pub recorded: usize,
    /// `ops[..applied]` were applied by a commit that then failed (a resent
    /// decision applies the rest).
    pub applied: usize,
    /// Every object of the transaction (table id, key hash), in op-index order:
    /// what a recovery manager asks about (`recovery.rs`). Empty if neither the
    /// prepare nor a replayed record carried it.
    pub participants: Vec<(u64, u64)>,
}

impl PreparedTx {
    /// Whether it has an op here on every object of `objects` (table id, key
    /// hash); each op's key is hashed once.
    pub(crate) fn has_ops_on(&self, objects: &[(u64, u64)]) -> bool {
        let mine: Vec<(u64, u64)> = self
            .ops
            .iter()
            .map(|op| (op.table_id, key_hash(&op.key)))
            .collect();
        objects.iter().all(|object| mine.contains(object))
    }
}

/// The transactions of one master: its locks, its prepared ops, and the
/// outcomes of recently decided transactions.
#[derive(Debug, Default)]
pub struct Transactions {
    pub(crate) locks: LockTable,
    pub(crate) prepared: Mutex<HashMap<TxId, PreparedTx>>,
    pub(crate) decided: Mutex<Decided>,
    /// Commits held until every other owner applied them (`held.rs`), in id
    /// order (the simulator's runs must not depend on a hash order).
    pub(crate) held: Mutex<BTreeMap<TxId, Held>>,
}

/// A committed outcome held here (`held.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// The held record's identity: its object is one of this master's ops, so
    /// a recovery replays it where that object goes.
    pub record: TxRecordId,
    /// Every object of the transaction (table id, key hash).
    pub participants: Vec<(u64, u64)>,
}

#[derive(Debug, Default)]
pub(crate) struct Decided {
    pub(crate) outcome: HashMap<TxId, bool>,
    order: VecDeque<TxId>,
}

impl Decided {
    /// Remembers `id`'s outcome. The first outcome stays: a participant never
    /// changes its decision (SOSP'15 §6.4), so a stray decision that disagrees
    /// (a resent abort after a recovery manager committed, say) cannot make it
    /// answer a later vote request differently.
    pub(crate) fn remember(&mut self, id: TxId, commit: bool) {
        if self.outcome.contains_key(&id) {
            return;
        }
        self.outcome.insert(id, commit);
        self.order.push_back(id);
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
    /// votes ABORT holding nothing. A PREPARED vote first appends the ops'
    /// prepared records (the first carries `participants`, the transaction's
    /// whole object list); the caller answers once they are durable. With
    /// `decide_now` (this master is the only participant) it applies the ops
    /// and answers COMMITTED instead: the single-server fast path, one round
    /// trip ([`Self::commit_now`] says how it stays atomic across a crash).
    ///
    /// An error (unknown tablet, a full log) changes nothing that a resend of the
    /// same prepare does not finish: ops stay prepared under their locks, and the
    /// resend appends the records still missing (or applies the rest).
    pub fn prepare(
        &self,
        store: &ObjectStore,
        id: TxId,
        ops: &[TxOp<'_>],
        participants: &[(u64, u64)],
        decide_now: bool,
    ) -> Result<TxVote, WriteError> {
        if let Some(commit) = self.outcome(id) {
            // Held prepared with its outcome known (a replay found its decided
            // marks beside undecided records, `replay.rs`): finished now.
            if self.prepared.lock().contains_key(&id) {
                self.decide(store, id, commit)?;
            }
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
                .zip(0u64..)
                .map(|(op, local)| TxOpOwned {
                    op_index: op_index(participants, op, local),
                    kind: op.kind,
                    expected_version: op.expected_version,
                    table_id: op.table_id,
                    key: op.key.to_vec(),
                    value: op.value.to_vec(),
                })
                .collect();
            let tx = PreparedTx {
                ops: owned,
                recorded: 0,
                applied: 0,
                participants: participants.to_vec(),
            };
            let mut prepared = self.prepared.lock();
            // A recovery manager may have decided ABORT here meanwhile
            // (`recovery.rs`): under the prepared map's lock, which it holds
            // too, the late prepare holds nothing and votes ABORT.
            if self.decided.lock().outcome.contains_key(&id) {
                drop(prepared);
                self.release(&tx.ops);
                return Ok(TxVote::Abort);
            }
            prepared.insert(id, tx);
        }
        if decide_now {
            return self.commit_now(store, id, ops, participants, already);
        }
        // A resend to a master that holds the transaction with ops missing (a
        // recovery replayed a log cut among its records, or gathered another
        // participant's ops here): those were never voted PREPARED, so they are
        // checked and locked now, or the transaction aborts.
        if already && !self.adopt_missing(store, id, ops, participants)? {
            self.decide(store, id, false)?;
            return Ok(TxVote::Abort);
        }
        self.record(store, id, participants)?;
        Ok(TxVote::Prepared)
    }

    /// The single-server fast path's commit of `id`, prepared here (all its
    /// objects locked, versions checked).
    ///
    /// Atomic across a crash (issue 21; design notes "Transactions",
    /// *Single-server fast path*): a transaction that changes two or more
    /// objects first appends a prepared record per op, as a PREPARED vote
    /// does, and only then its writes, in the same log and so in the same
    /// replication round trip (one wait for the log's end, before the answer).
    /// The log is replicated in order, so a crash mid-apply leaves every
    /// record durable wherever any write is: a recovery master holds the
    /// transaction prepared with all its ops (its objects locked) and the
    /// client's resent prepare, or a recovery manager's decision, applies them
    /// all (`decide`: idempotent in value). A crash before the last record is
    /// durable leaves no write applied: the resend prepares the ops the
    /// recovery did not find ([`Self::adopt_missing`]) or aborts. A
    /// transaction that changes at most one object needs no records: its one
    /// write (with its tombstone) is a single piece of the log, durable whole
    /// or not at all (R§4.2). Why not one append of every object instead:
    /// a transaction's objects may belong to several recovery partitions
    /// (R§7.4), which replay apart and so cannot tell a whole group from a
    /// cut one; the records cost bytes, not a round trip.
    fn commit_now(
        &self,
        store: &ObjectStore,
        id: TxId,
        ops: &[TxOp<'_>],
        participants: &[(u64, u64)],
        already: bool,
    ) -> Result<TxVote, WriteError> {
        if already && !self.adopt_missing(store, id, ops, participants)? {
            self.decide(store, id, false)?;
            return Ok(TxVote::Abort);
        }
        let changes = ops.iter().filter(|op| op.kind != TxOpKind::Read).count();
        if changes > 1 {
            self.record(store, id, participants)?;
        }
        self.decide(store, id, true)?;
        Ok(TxVote::Committed)
    }

    /// A resent prepare of `id`, held prepared here: locks the ops of `ops`
    /// that the prepared transaction lacks and adds them; false (the caller
    /// aborts) if one conflicts. Ops are missing only when a recovery replayed
    /// a log cut among the transaction's records (before any of its writes, on
    /// the fast path: `commit_now`), or gathered here only some participants'
    /// ops: the ops it found kept their locks since, so their checked versions
    /// still hold, and the missing ones are checked now. None of the missing
    /// ones was voted PREPARED (a vote follows all its prepare's records).
    fn adopt_missing(
        &self,
        store: &ObjectStore,
        id: TxId,
        ops: &[TxOp<'_>],
        participants: &[(u64, u64)],
    ) -> Result<bool, WriteError> {
        let missing: Vec<(u64, TxOp<'_>)> = {
            let map = self.prepared.lock();
            let Some(tx) = map.get(&id) else {
                return Ok(true);
            };
            ops.iter()
                .zip(0u64..)
                .map(|(op, local)| (op_index(participants, op, local), *op))
                .filter(|(index, _)| !tx.ops.iter().any(|o| o.op_index == *index))
                .collect()
        };
        if missing.is_empty() {
            return Ok(true);
        }
        let to_lock: Vec<TxOp<'_>> = missing.iter().map(|(_, op)| *op).collect();
        if !self.lock_all(store, id, &to_lock)? {
            return Ok(false);
        }
        let mut map = self.prepared.lock();
        let Some(tx) = map.get_mut(&id) else {
            // Decided meanwhile (a recovery manager): let the locks go again.
            drop(map);
            self.release(&owned_ops(&missing));
            return Ok(false);
        };
        tx.ops.extend(owned_ops(&missing));
        Ok(true)
    }

    /// Appends the prepared records of `id`'s ops that have none yet (SOSP'15
    /// §6.2: a participant's vote is durable). Encoded under the map's lock,
    /// appended outside it; a concurrent resend may append one twice, and the
    /// store counts the older copy dead.
    fn record(
        &self,
        store: &ObjectStore,
        id: TxId,
        participants: &[(u64, u64)],
    ) -> Result<(), WriteError> {
        let pending: Vec<(usize, TxRecordId, Vec<u8>)> = {
            let map = self.prepared.lock();
            let Some(tx) = map.get(&id) else {
                return Ok(());
            };
            (tx.recorded..tx.ops.len())
                .map(|i| {
                    let op = &tx.ops[i];
                    // One list per transaction per master: on its first op.
                    let list = if i == 0 { participants } else { &[] };
                    let mut entry = Vec::new();
                    encode_tx_prepared(
                        &op.record_id(id),
                        prepared_kind(op.kind),
                        op.expected_version,
                        &op.key,
                        &op.value,
                        list,
                        &mut entry,
                    );
                    (i, op.record_id(id), entry)
                })
                .collect()
        };
        for (i, rid, entry) in pending {
            store.append_tx_prepared((rid.lease_id, rid.tx_seq, rid.op_index), &entry)?;
            if let Some(tx) = self.prepared.lock().get_mut(&id) {
                tx.recorded = tx.recorded.max(i + 1);
            }
        }
        Ok(())
    }

    /// Checks versions and takes the locks under the exclusive guard; false (and
    /// nothing held) on a conflict.
    fn lock_all(
        &self,
        store: &ObjectStore,
        id: TxId,
        ops: &[TxOp<'_>],
    ) -> Result<bool, WriteError> {
        let hashes: Vec<u64> = ops.iter().map(|op| key_hash(op.key)).collect();
        let mut map = self.locks.exclusive(hashes.iter().copied());
        for (op, &hash) in ops.iter().zip(&hashes) {
            if map
                .get(op.table_id, hash)
                .is_some_and(|holder| holder != id)
            {
                return Ok(false);
            }
            let current = current_version(store, op.table_id, op.key)?;
            if op.expected_version.is_some_and(|v| v != current) {
                return Ok(false);
            }
        }
        for (op, &hash) in ops.iter().zip(&hashes) {
            map.insert(op.table_id, hash, id);
        }
        Ok(true)
    }

    /// Phase two: applies (`commit`) or drops the prepared ops of `id`, marks
    /// their prepared records decided and releases their locks. Deciding a
    /// transaction not prepared here is a no-op (a resent decision, or an abort
    /// of one that voted ABORT here) that is remembered, so a late prepare of it
    /// votes as decided.
    pub fn decide(&self, store: &ObjectStore, id: TxId, commit: bool) -> Result<(), WriteError> {
        let Some(mut tx) = self.prepared.lock().remove(&id) else {
            self.decided.lock().remember(id, commit);
            return Ok(());
        };
        // A participant never changes its decision (SOSP'15 §6.4): one that
        // answered a recovery manager ABORT while it held the transaction
        // prepared with ops missing (`request_vote`) keeps to it.
        let commit = self.outcome(id).unwrap_or(commit);
        // Apply in order; on an error the transaction stays prepared (and all
        // its objects locked) and a resent decision applies the rest.
        let result = (|| {
            if commit {
                while tx.applied < tx.ops.len() {
                    apply(store, &tx.ops[tx.applied])?;
                    tx.applied += 1;
                }
                // Before the decided marks: a replay that finds a mark of this
                // commit finds the held outcome too (the log is replicated in
                // order).
                self.hold_commit(store, id, &tx)?;
            }
            for op in &tx.ops {
                store.tx_record_decided(&op.record_id(id), commit)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            self.prepared.lock().insert(id, tx);
            return Err(e);
        }
        self.release(&tx.ops);
        self.decided.lock().remember(id, commit);
        Ok(())
    }

    pub(crate) fn release(&self, ops: &[TxOpOwned]) {
        let hashes: Vec<u64> = ops.iter().map(|op| key_hash(&op.key)).collect();
        let mut map = self.locks.exclusive(hashes.iter().copied());
        for (op, &hash) in ops.iter().zip(&hashes) {
            map.remove(op.table_id, hash);
        }
    }
}

/// The op's number in its records: its object's position in the transaction's
/// participant list, unique in the whole transaction, so ops of one transaction
/// that a recovery gathers on one master from several participants stay apart
/// (regression: `transactions_crash.rs` lost one when two participants both
/// numbered theirs from 0). Without the object in the list (a malformed or
/// empty list), the op's place in this prepare, above every list position.
fn op_index(participants: &[(u64, u64)], op: &TxOp<'_>, local: u64) -> u64 {
    let hash = key_hash(op.key);
    match participants
        .iter()
        .position(|&(t, h)| t == op.table_id && h == hash)
    {
        Some(p) => p as u64,
        None if participants.is_empty() => local,
        None => (1 << 32) + local,
    }
}

/// `ops` (each with its op index), owned.
fn owned_ops(ops: &[(u64, TxOp<'_>)]) -> Vec<TxOpOwned> {
    ops.iter()
        .map(|(op_index, op)| TxOpOwned {
            op_index: *op_index,
            kind: op.kind,
            expected_version: op.expected_version,
            table_id: op.table_id,
            key: op.key.to_vec(),
            value: op.value.to_vec(),
        })
        .collect()
}

/// The record's kind of a wire op kind.
fn prepared_kind(kind: TxOpKind) -> PreparedKind {
    match kind {
        TxOpKind::Read => PreparedKind::Read,
        TxOpKind::Write => PreparedKind::Write,
        TxOpKind::Remove => PreparedKind::Remove,
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

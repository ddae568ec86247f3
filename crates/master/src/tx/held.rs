//! Held commit outcomes (issue 21; design notes "Transaction recovery", *Held
//! outcomes*): a participant that applies COMMIT for a transaction that other
//! masters take part in keeps that outcome, durably, until every other owner
//! has applied the decision too.
//!
//! Why: a recovery manager decides COMMIT only if no participant answers
//! ABORT, and a participant that does not know a transaction answers ABORT
//! (it cannot tell "never prepared" from "committed and forgot"). A
//! participant forgets a decision when its memory of decisions is full
//! ([`super::prepare::REMEMBERED_DECISIONS`]) or when the cleaner has dropped
//! its decided marks and it crashes. If another participant still holds the
//! transaction prepared then (its client crashed between the decisions), the
//! manager would abort there what was committed here. A held outcome answers
//! COMMITTED instead, and a COMMITTED vote decides COMMIT ([`super::decision_of`]).
//!
//! The outcome is a log record (entry type 8, kind 6, with the participant
//! list), live for the cleaner until released, replayed by a recovery master
//! like a prepared op. A release loop (`ramstore_server::tx_recovery`) sends
//! the decision to every owner (a no-op where it was applied), then releases:
//! a decided mark names the record, as it does a prepared op's.
//!
//! Thread-safety: the held map has its own mutex, taken after `prepared`'s
//! and never the other way round.

use ramstore_log::entry::{encode_tx_held_commit, TxRecordId, HELD_OP_INDEX};
use ramstore_wire::key_hash;

use super::locks::TxId;
use super::prepare::{Held, PreparedTx, Transactions};
use crate::error::WriteError;
use crate::object_store::ObjectStore;

impl Transactions {
    /// Holds the commit of `tx` (prepared here as `prepared`) if some object of
    /// its participant list is not among its ops here: appends the held record
    /// once (a resent decision finds it held). The caller answers the decision
    /// once the log's end is durable, so the outcome is durable before any
    /// owner can forget it.
    pub(crate) fn hold_commit(
        &self,
        store: &ObjectStore,
        tx: TxId,
        prepared: &PreparedTx,
    ) -> Result<(), WriteError> {
        // Every object here (or no list to ask): no other owner to tell.
        if prepared.has_ops_on(&prepared.participants) || self.held.lock().contains_key(&tx) {
            return Ok(());
        }
        let Some(first) = prepared.ops.first() else {
            return Ok(());
        };
        let record = TxRecordId {
            lease_id: tx.lease_id,
            tx_seq: tx.tx_seq,
            op_index: HELD_OP_INDEX,
            table_id: first.table_id,
            key_hash: key_hash(&first.key),
        };
        let mut entry = Vec::new();
        encode_tx_held_commit(&record, &prepared.participants, &mut entry);
        store.append_tx_prepared((tx.lease_id, tx.tx_seq, HELD_OP_INDEX), &entry)?;
        self.held.lock().insert(
            tx,
            Held {
                record,
                participants: prepared.participants.clone(),
            },
        );
        Ok(())
    }

    /// Holds a replayed held record (`entry`, of `record`) that no decided mark
    /// released: appends it to this log again.
    pub(crate) fn rehold(
        &self,
        store: &ObjectStore,
        record: TxRecordId,
        participants: Vec<(u64, u64)>,
        entry: &[u8],
    ) -> Result<(), WriteError> {
        let tx = TxId {
            lease_id: record.lease_id,
            tx_seq: record.tx_seq,
        };
        if self.held.lock().contains_key(&tx) {
            return Ok(());
        }
        store.append_tx_prepared((tx.lease_id, tx.tx_seq, HELD_OP_INDEX), entry)?;
        self.held.lock().insert(
            tx,
            Held {
                record,
                participants,
            },
        );
        Ok(())
    }

    /// The held commits naming an object of `table_id` whose key hash lies in
    /// `[lo, hi]`, in id order, with their participant lists: what a
    /// migration's Pull answer covering those hashes carries, so the new owner
    /// of the objects answers a recovery manager COMMITTED as this master does
    /// (design notes "Held outcomes", *Migration*). A walk of the held map, on
    /// the migration's slow path only.
    pub fn held_in_range(
        &self,
        table_id: u64,
        (lo, hi): (u64, u64),
    ) -> Vec<(TxId, Vec<(u64, u64)>)> {
        self.held
            .lock()
            .iter()
            .filter(|(_, h)| {
                h.participants
                    .iter()
                    .any(|&(t, hash)| t == table_id && (lo..=hi).contains(&hash))
            })
            .map(|(&tx, h)| (tx, h.participants.clone()))
            .collect()
    }

    /// Holds the commit of `tx` that a migration's source held for objects of
    /// `table_id` in `[lo, hi]`, which move here (a Pull answer's held
    /// trailer): appends a held record whose object is the first of them, so
    /// the cleaner keeps it and a recovery of that object's tablet holds it
    /// again; released like any held commit. One held here already, or a list
    /// naming no object of the range, is a no-op.
    pub fn adopt_held(
        &self,
        store: &ObjectStore,
        tx: TxId,
        participants: Vec<(u64, u64)>,
        table_id: u64,
        (lo, hi): (u64, u64),
    ) -> Result<(), WriteError> {
        let Some(&(_, key_hash)) = participants
            .iter()
            .find(|&&(t, hash)| t == table_id && (lo..=hi).contains(&hash))
        else {
            return Ok(());
        };
        let record = TxRecordId {
            lease_id: tx.lease_id,
            tx_seq: tx.tx_seq,
            op_index: HELD_OP_INDEX,
            table_id,
            key_hash,
        };
        let mut entry = Vec::new();
        encode_tx_held_commit(&record, &participants, &mut entry);
        self.rehold(store, record, participants, &entry)
    }

    /// Whether `tx`'s commit is held here.
    pub fn is_held(&self, tx: TxId) -> bool {
        self.held.lock().contains_key(&tx)
    }

    /// Number of commit outcomes held here.
    pub fn held_count(&self) -> usize {
        self.held.lock().len()
    }

    /// Up to `limit` held outcomes, in id order, with their participant lists:
    /// what the release loop sends the decision for.
    pub fn held_commits(&self, limit: usize) -> Vec<(TxId, Vec<(u64, u64)>)> {
        self.held
            .lock()
            .iter()
            .take(limit)
            .map(|(&tx, h)| (tx, h.participants.clone()))
            .collect()
    }

    /// Every owner applied `tx`'s commit: the held record dies (a decided mark
    /// names it, so a replay of a log that still holds it knows) and `tx` is
    /// remembered as committed like any decided transaction. A transaction not
    /// held here is a no-op.
    pub fn release_held(&self, store: &ObjectStore, tx: TxId) -> Result<(), WriteError> {
        let Some(held) = self.held.lock().get(&tx).cloned() else {
            return Ok(());
        };
        store.tx_record_decided(&held.record, true)?;
        self.held.lock().remove(&tx);
        self.decided.lock().remember(tx, true);
        Ok(())
    }
}

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

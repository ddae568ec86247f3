//! Re-taking the locks of prepared transactions from a replayed log (SOSP'15
//! §6.2; RAMCloud's PreparedOps recovery): a recovery master (cold start goes
//! through the same recovery) collects every transaction record it replays
//! and, once the replay is done, hands them to
//! [`Transactions::replay_tx_records`]. A
//! prepared op that no decided mark names is appended to this master's log
//! again and its object locked for its transaction, which then waits for its
//! decision (from the client, or a recovery manager) as on the master that
//! voted.
//!
//! Records and marks reach a replay in any order (segments are replayed as they
//! arrive), so nothing is re-taken before the whole log has been seen. A held
//! commit (kind 6) that no mark released is held again (`held.rs`).

use std::collections::{BTreeMap, HashMap};

use ramstore_wire::TxOpKind;

use super::locks::TxId;
use super::prepare::{PreparedTx, Transactions, TxOpOwned};
use crate::error::WriteError;
use crate::object_store::key_hash;
use crate::object_store::{replayed_tx_record, ReplayedPrepared, ReplayedTxRecord};
use crate::ObjectStore;

impl Transactions {
    /// Re-prepares the transactions of `records`, every transaction record
    /// (log entry type 8) of one replayed log or partition, in any order: each
    /// prepared op that no decided mark names is appended to this log again and
    /// its lock taken for its transaction, without a version check (its vote was
    /// given). Records that do not parse are skipped. Returns how many ops it
    /// re-prepared.
    pub fn replay_tx_records<'a>(
        &self,
        store: &ObjectStore,
        records: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<usize, WriteError> {
        let mut prepared = HashMap::new();
        let mut decided = HashMap::new();
        let mut held = Vec::new();
        for entry in records {
            match replayed_tx_record(entry) {
                Some(ReplayedTxRecord::HeldCommit {
                    id,
                    participants,
                    entry,
                }) => held.push((id, participants, entry)),
                Some(ReplayedTxRecord::Prepared(p)) => {
                    prepared.insert((p.id.lease_id, p.id.tx_seq, p.id.op_index), p);
                }
                Some(ReplayedTxRecord::Decided { key, commit }) => {
                    // The outcome is remembered too: a recovery manager that
                    // asks this master later (the one that decided may have
                    // been the crashed master) must hear it, not "never saw it,
                    // ABORT" (design notes "Transaction recovery").
                    self.decided.lock().remember(
                        TxId {
                            lease_id: key.0,
                            tx_seq: key.1,
                        },
                        commit,
                    );
                    decided.insert(key, commit);
                }
                None => {}
            }
        }
        // A decided mark tells its whole transaction's outcome (one decision per
        // transaction): remembered, so a resent prepare of a transaction
        // committed before the crash answers COMMITTED instead of failing its
        // version checks (regression: `tx_decide_now.rs`, a log cut among the
        // marks). Its undecided records are still prepared again below: they
        // may be another participant's ops, never applied (both participants'
        // partitions recovered here, or a cold start), which the recovery loop
        // now applies from the known outcome (`Undecided::known_outcome`;
        // regression test
        // `replay_keeps_another_participants_undecided_ops_of_a_committed_transaction`).
        // Re-applying a write that was applied (a cut among one participant's
        // own marks) writes the same value again.
        for (key, &commit) in &decided {
            let tx = TxId {
                lease_id: key.0,
                tx_seq: key.1,
            };
            self.decided.lock().remember(tx, commit);
        }
        // A held commit that no decided mark released is held here again: some
        // other owner may not have applied it yet (`held.rs`).
        for (id, participants, entry) in held {
            let tx = TxId {
                lease_id: id.lease_id,
                tx_seq: id.tx_seq,
            };
            if !decided.contains_key(&(id.lease_id, id.tx_seq, id.op_index)) {
                self.rehold(store, id, participants, &entry)?;
            }
            self.decided.lock().remember(tx, true);
        }
        let mut by_tx: BTreeMap<TxId, Vec<ReplayedPrepared>> = BTreeMap::new();
        for (key, p) in prepared {
            if decided.contains_key(&key) {
                continue;
            }
            let tx = TxId {
                lease_id: key.0,
                tx_seq: key.1,
            };
            by_tx.entry(tx).or_default().push(p);
        }
        let mut count = 0;
        for (tx, mut ops) in by_tx {
            ops.sort_by_key(|p| p.id.op_index);
            let participants = ops
                .iter()
                .find(|p| !p.participants.is_empty())
                .map(|p| p.participants.clone());
            for p in &ops {
                store.append_tx_prepared((tx.lease_id, tx.tx_seq, p.id.op_index), &p.entry)?;
            }
            let owned: Vec<TxOpOwned> = ops.into_iter().map(owned).collect();
            self.relock(tx, &owned);
            count += owned.len();
            let mut prepared = self.prepared.lock();
            let entry = prepared.entry(tx).or_insert_with(|| PreparedTx {
                ops: Vec::new(),
                recorded: 0,
                applied: 0,
                participants: Vec::new(),
            });
            if entry.participants.is_empty() {
                entry.participants = participants.unwrap_or_default();
            }
            for op in owned {
                if !entry.ops.iter().any(|o| o.op_index == op.op_index) {
                    entry.ops.push(op);
                }
            }
            entry.recorded = entry.ops.len();
        }
        Ok(count)
    }

    /// A partition recovery that re-took transaction state here failed, and
    /// its `tablets` (table id, start hash, end hash) were dropped: another
    /// master will recover them and re-take that state from the same records.
    /// Forgets the prepared ops on their objects — releasing their locks — and
    /// the held commits recorded under them, so this master neither keeps
    /// locks on objects it does not own nor retries, round after round, a
    /// decision it cannot apply. Ops on other objects stay, and so does a
    /// transaction whose commit is being applied (its decision finishes it).
    /// Returns how many ops it forgot.
    pub fn forget_tablets(&self, tablets: &[(u64, u64, u64)]) -> usize {
        let inside = |table_id: u64, hash: u64| {
            tablets
                .iter()
                .any(|&(t, start, end)| t == table_id && (start..=end).contains(&hash))
        };
        let mut forgotten = Vec::new();
        self.prepared.lock().retain(|_, tx| {
            if tx.applied > 0 {
                return true;
            }
            let recorded = tx.recorded;
            let mut kept = Vec::with_capacity(tx.ops.len());
            let mut kept_recorded = 0;
            for (i, op) in std::mem::take(&mut tx.ops).into_iter().enumerate() {
                if inside(op.table_id, key_hash(&op.key)) {
                    forgotten.push(op);
                } else {
                    // The kept ops keep their order, so the recorded ones
                    // still come first.
                    kept_recorded += usize::from(i < recorded);
                    kept.push(op);
                }
            }
            tx.ops = kept;
            tx.recorded = kept_recorded;
            !tx.ops.is_empty()
        });
        self.release(&forgotten);
        self.held
            .lock()
            .retain(|_, h| !inside(h.record.table_id, h.record.key_hash));
        forgotten.len()
    }

    /// Takes the locks of `tx`'s replayed ops.
    fn relock(&self, tx: TxId, ops: &[TxOpOwned]) {
        let hashes: Vec<u64> = ops.iter().map(|op| op.record_id(tx).key_hash).collect();
        let mut locks = self.locks.exclusive(hashes.iter().copied());
        for (op, &hash) in ops.iter().zip(&hashes) {
            let holder = locks.get(op.table_id, hash);
            // The crashed master held each lock for one transaction; two replayed
            // holders would mean two logs claimed one object.
            debug_assert!(
                holder.is_none_or(|h| h == tx),
                "two replayed transactions hold one lock"
            );
            locks.insert(op.table_id, hash, tx);
        }
    }
}

fn owned(p: ReplayedPrepared) -> TxOpOwned {
    use ramstore_log::entry::PreparedKind;
    TxOpOwned {
        op_index: p.id.op_index,
        kind: match p.kind {
            PreparedKind::Read => TxOpKind::Read,
            PreparedKind::Write => TxOpKind::Write,
            PreparedKind::Remove => TxOpKind::Remove,
        },
        expected_version: p.expected_version,
        table_id: p.id.table_id,
        key: p.key,
        value: p.value,
    }
}

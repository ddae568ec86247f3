//! A participant's side of a transaction's commit (Lee et al., SOSP'15 §6.2) on
//! the native front end: TxPrepare checks versions and takes locks
//! (`ramstore_master::tx`), TxDecision applies or drops. Plain writes check the
//! same locks ([`StorageService::unlocked`]) and are answered RETRY on a locked
//! object; reads never look at locks.

use ramstore_master::migration::ClientOp;
use ramstore_master::tx::locks::WriterGuard;
use ramstore_master::{HashedKey, TxId, WriteError};
use ramstore_wire::{
    encode_response, Opcode, Response, TxDecisions, TxPrepare, TxRequestVote, TxVote, WireError,
    MAX_TX_BYTES, TX_DECIDE_NOW,
};

use super::migration::Gated;
use super::request_path::Durability;
use super::StorageService;

impl StorageService {
    /// The plain writers' guard of `key`'s lock shard, once `key` of `table_id`
    /// is known not to be locked by a transaction; hold it until the write is in
    /// the store (`ramstore_master::tx::locks`: one shard of 64, so writers of
    /// different keys do not share a cache line). The key comes hashed: the
    /// write under the guard uses the same hash (issue 21, "hash once").
    pub(crate) fn unlocked(
        &self,
        table_id: u64,
        key: &HashedKey<'_>,
    ) -> Result<WriterGuard<'_>, WriteError> {
        self.tx
            .locks()
            .writer_guard_hashed(table_id, key)
            .map_err(|_| WriteError::ObjectLocked)
    }

    /// Phase one on this participant: the vote, or (with [`TX_DECIDE_NOW`]) the
    /// commit of a single-server transaction. A vote of PREPARED is answered
    /// once its prepared records (log entry type 8) are replicated, a commit
    /// once its writes are (SOSP'15 §6.2).
    pub(crate) fn tx_prepare(
        &self,
        id: u64,
        prepare: &TxPrepare<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        // A commit whose client lease expired is refused before anything is
        // locked (issue 21): a client that lost its lease learns it clearly,
        // and a transaction it prepared elsewhere is finished by a recovery
        // manager (decisions and vote requests are not refused: a manager
        // sends them under a crashed client's expired lease).
        if self.store.client_lease_expired(prepare.lease_id) {
            return self.tx_refused(id, Opcode::TxPrepare, WriteError::StaleRpc, out);
        }
        let ops: Vec<_> = prepare.ops.iter().collect();
        let bytes: usize = ops.iter().map(|op| op.key.len() + op.value.len()).sum();
        if bytes > MAX_TX_BYTES {
            return self.tx_refused(id, Opcode::TxPrepare, WriteError::ValueTooLarge(bytes), out);
        }
        // A key whose tablet is migrating in is not decided here yet (K§2.3).
        for op in &ops {
            if !matches!(
                self.migration_gate(op.table_id, op.key, ClientOp::ReadsRecord),
                Gated::Plain
            ) {
                return self.tx_refused(id, Opcode::TxPrepare, WriteError::Migrating, out);
            }
        }
        let tx = TxId {
            lease_id: prepare.lease_id,
            tx_seq: prepare.tx_seq,
        };
        let decide_now = prepare.flags & TX_DECIDE_NOW != 0;
        let participants: Vec<(u64, u64)> = prepare
            .participants
            .iter()
            .map(|p| (p.table_id, p.key_hash))
            .collect();
        match self
            .tx
            .prepare(&self.store, tx, &ops, &participants, decide_now)
        {
            Ok(vote) => {
                encode_response(id, Opcode::TxPrepare, &Response::TxPrepare { vote }, out)?;
                // PREPARED follows its prepared records, COMMITTED its writes:
                // either is answered once the log's end is replicated.
                Ok(Durability::LogEnd)
            }
            Err(e) => self.tx_refused(id, Opcode::TxPrepare, e, out),
        }
    }

    /// Phase two: applies or drops the prepared ops; the answer waits until the
    /// applied writes are durable.
    pub(crate) fn tx_decision(
        &self,
        id: u64,
        lease_id: u64,
        tx_seq: u64,
        commit: bool,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let tx = TxId { lease_id, tx_seq };
        match self.tx.decide(&self.store, tx, commit) {
            Ok(()) => {
                encode_response(id, Opcode::TxDecision, &Response::TxDecision, out)?;
                Ok(Durability::LogEnd)
            }
            Err(e) => self.tx_refused(id, Opcode::TxDecision, e, out),
        }
    }

    /// One decision for many transactions: another master's release of its
    /// held commits (`crate::tx_recovery`). Each is decided as by
    /// `TxDecision`; on an error the ones before it stay decided (decisions
    /// are idempotent) and the sender resends the whole batch.
    pub(crate) fn tx_decisions(
        &self,
        id: u64,
        decisions: &TxDecisions<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        for key in decisions.txs.iter() {
            let tx = TxId {
                lease_id: key.lease_id,
                tx_seq: key.tx_seq,
            };
            if let Err(e) = self.tx.decide(&self.store, tx, decisions.commit) {
                return self.tx_refused(id, Opcode::TxDecisions, e, out);
            }
        }
        encode_response(id, Opcode::TxDecisions, &Response::TxDecisions, out)?;
        Ok(Durability::LogEnd)
    }

    /// A recovery manager's vote request (SOSP'15 §6.4; `crate::tx_recovery`):
    /// this master's vote on the transaction, once it serves every object asked
    /// about. A master recovering or not owning one answers UNKNOWN_TABLET (the
    /// manager asks again with a fresh map): a recovery master re-takes the
    /// replayed locks before it serves, so a served object's vote is complete.
    /// PREPARED is answered only once the transaction's prepared records are
    /// all in the log (else RETRY: a prepare is still appending them) and, like
    /// the client's vote, once the log's end is replicated: a manager that
    /// commits on this vote must find the ops again after a crash here.
    pub(crate) fn tx_request_vote(
        &self,
        id: u64,
        request: &TxRequestVote<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let tablets = self.store.tablets();
        if request
            .objects
            .iter()
            .any(|o| tablets.find_serving(o.table_id, o.key_hash).is_none())
        {
            return self.tx_refused(id, Opcode::TxRequestVote, WriteError::UnknownTablet, out);
        }
        let tx = TxId {
            lease_id: request.lease_id,
            tx_seq: request.tx_seq,
        };
        let objects: Vec<(u64, u64)> = request
            .objects
            .iter()
            .map(|o| (o.table_id, o.key_hash))
            .collect();
        let vote = self.tx.request_vote(tx, &objects);
        if vote == TxVote::Prepared && !self.tx.is_recorded(tx) {
            return self.tx_refused(id, Opcode::TxRequestVote, WriteError::ObjectLocked, out);
        }
        encode_response(
            id,
            Opcode::TxRequestVote,
            &Response::TxRequestVote { vote },
            out,
        )?;
        Ok(Durability::LogEnd)
    }

    fn tx_refused(
        &self,
        id: u64,
        op: Opcode,
        e: WriteError,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        encode_response(id, op, &Response::Error(self.refused(e)), out)?;
        Ok(Durability::Now)
    }
}

impl crate::recovery_master::ReplaysTransactions for StorageService {
    fn replay_tx_records(&self, records: &[Vec<u8>]) -> Result<usize, WriteError> {
        self.tx
            .replay_tx_records(&self.store, records.iter().map(Vec::as_slice))
    }

    fn forget_tablets(&self, tablets: &[(u64, u64, u64)]) -> usize {
        self.tx.forget_tablets(tablets)
    }
}

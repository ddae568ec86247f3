//! Durable prepared ops of transactions (Lee et al. SOSP'15 §6.2; RAMCloud's
//! PreparedOp): the log records a participant writes before it votes PREPARED,
//! where they are, and the decided marks that end them.
//!
//! A prepared record is live (the cleaner moves it, `relocation.rs`) until its
//! transaction is decided here; then it is counted dead and a decided mark (log
//! entry type 8, kinds 4–5) naming its segment is appended, so a replay of a log
//! that still holds the dead record knows it was decided. The mark lives as long
//! as that segment is in the log, as an object tombstone does (L§3).

use std::collections::HashMap;

use parking_lot::Mutex;
use ramstore_log::entry::{encode_tx_decided, parse_tx_record, TxRecordBody, TxRecordId};
use ramstore_log::LogRef;

use super::ObjectStore;
use crate::error::WriteError;

/// (lease id, tx seq, op index): one prepared op of one transaction.
pub type TxRecordKey = (u64, u64, u64);

/// Where each undecided prepared record of this master is.
#[derive(Debug, Default)]
pub(crate) struct TxRecordRefs {
    map: Mutex<HashMap<TxRecordKey, (LogRef, usize)>>,
}

impl TxRecordRefs {
    /// Lock-free enough for the cleaner's hint: is `key` undecided and at `at`?
    pub fn is_live(&self, key: TxRecordKey, at: LogRef) -> bool {
        self.map.lock().get(&key).is_some_and(|&(r, _)| r == at)
    }

    /// Under the map's lock: if `key` is undecided at `at`, copy it and point at
    /// the copy.
    pub fn relocate(&self, key: TxRecordKey, at: LogRef, copy: &mut dyn FnMut() -> LogRef) -> bool {
        let mut map = self.map.lock();
        match map.get_mut(&key) {
            Some(entry) if entry.0 == at => {
                entry.0 = copy();
                true
            }
            _ => false,
        }
    }
}

/// What a replayed prepared record asks of the transactions layer: re-take the
/// lock of this op (design notes "Transactions", "Durability").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayedPrepared {
    pub id: TxRecordId,
    pub kind: ramstore_log::entry::PreparedKind,
    pub expected_version: Option<u64>,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub participants: Vec<(u64, u64)>,
    /// The whole record, to append to the replaying master's log.
    pub entry: Vec<u8>,
}

/// A transaction record found while replaying a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayedTxRecord {
    /// An op prepared and, as far as this record knows, undecided.
    Prepared(ReplayedPrepared),
    /// The op `key` was decided (or, for a held commit's key, released).
    Decided { key: TxRecordKey, commit: bool },
    /// The transaction committed on the master that wrote this and some other
    /// owner may not have applied it (kind 6; `id.op_index` is
    /// `HELD_OP_INDEX`).
    HeldCommit {
        id: TxRecordId,
        participants: Vec<(u64, u64)>,
        /// The whole record, to append to the replaying master's log.
        entry: Vec<u8>,
    },
}

impl ObjectStore {
    /// Appends the encoded prepared record `entry` of op `key` to the log and
    /// keeps it live until [`Self::tx_record_decided`]. The caller answers the
    /// vote only once the log's end is durable (the server's
    /// `Durability::LogEnd`), so the record is replicated before the vote.
    pub fn append_tx_prepared(&self, key: TxRecordKey, entry: &[u8]) -> Result<(), WriteError> {
        let log = &self.inner.log;
        let _pin = log.pin();
        let (appended, at) = log.append_record(entry).map_err(WriteError::from)?;
        let old = self
            .inner
            .tx_records
            .map
            .lock()
            .insert(key, (at, entry.len()));
        if let Some((old_at, old_len)) = old {
            // A resent prepare appended it twice: the older copy is dead.
            log.object_died(old_at, old_len);
        }
        log.replicate(&appended);
        self.note_head(appended.segment_id);
        Ok(())
    }

    /// Op `id` was decided here: its prepared record dies, and a decided mark
    /// naming the record's segment is appended (replicated with the next
    /// durable answer). A key with no record here is a no-op.
    pub fn tx_record_decided(&self, id: &TxRecordId, commit: bool) -> Result<(), WriteError> {
        let key = (id.lease_id, id.tx_seq, id.op_index);
        let log = &self.inner.log;
        let _pin = log.pin();
        let Some((at, len)) = self.inner.tx_records.map.lock().remove(&key) else {
            return Ok(());
        };
        let mut mark = Vec::with_capacity(64);
        encode_tx_decided(id, commit, log.segment_id_of(at), &mut mark);
        let appended = match log.append_record(&mark) {
            Ok((appended, _)) => appended,
            Err(e) => {
                // Still undecided in the log: keep the record live for a retry.
                self.inner.tx_records.map.lock().insert(key, (at, len));
                return Err(WriteError::from(e));
            }
        };
        log.object_died(at, len);
        log.replicate(&appended);
        self.note_head(appended.segment_id);
        Ok(())
    }

    /// The bytes of the prepared record of op `key` where the log holds it now,
    /// if it is undecided (tests check that the cleaner moves it intact).
    pub fn tx_prepared_record(&self, key: TxRecordKey) -> Option<Vec<u8>> {
        let log = &self.inner.log;
        let _pin = log.pin();
        let (at, len) = *self.inner.tx_records.map.lock().get(&key)?;
        let mut out = vec![0; len];
        let n = log.pool().copy_out(at, &mut out);
        out.truncate(n);
        Some(out)
    }

    /// The segment holding the prepared record of op `key`, if undecided.
    pub fn tx_prepared_segment(&self, key: TxRecordKey) -> Option<u64> {
        let log = &self.inner.log;
        let (at, _) = *self.inner.tx_records.map.lock().get(&key)?;
        Some(log.segment_id_of(at))
    }

    /// Undecided prepared records kept live here (for tests and stats).
    pub fn tx_prepared_records(&self) -> usize {
        self.inner.tx_records.map.lock().len()
    }
}

/// Parses a transaction record of a log being reloaded (crash recovery, cold
/// start): a prepared op to re-take (the caller appends it again with
/// [`ObjectStore::append_tx_prepared`] once it knows no decided mark names it),
/// or a decided mark. Marks and records may arrive in any order. `None` for an
/// entry that does not parse.
pub fn replayed_tx_record(entry: &[u8]) -> Option<ReplayedTxRecord> {
    let r = parse_tx_record(entry).ok()?;
    let key = (r.lease_id, r.tx_seq, r.op_index);
    let id = r.id();
    Some(match r.body {
        TxRecordBody::Decided { commit, .. } => ReplayedTxRecord::Decided { key, commit },
        TxRecordBody::HeldCommit { .. } => ReplayedTxRecord::HeldCommit {
            id,
            participants: r.participants().collect(),
            entry: entry.to_vec(),
        },
        TxRecordBody::Prepared {
            kind,
            expected_version,
            key: object_key,
            value,
            ..
        } => ReplayedTxRecord::Prepared(ReplayedPrepared {
            id,
            kind,
            expected_version,
            key: object_key.to_vec(),
            value: value.to_vec(),
            participants: r.participants().collect(),
            entry: entry.to_vec(),
        }),
    })
}

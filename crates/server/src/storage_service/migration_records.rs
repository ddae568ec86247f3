//! Completion records on their way through a migration (RIFL §4.3, K§2.3): the
//! source lists the records of the hashes a Pull or PriorityPull answer covers
//! and encodes them as the answer's trailer; the target decodes them for the
//! store to install. The master keeps them as [`MovedRecord`]s; the wire carries
//! the outcome as the master's own encoding, opaque to it.

use std::collections::HashSet;

use ramstore_master::rifl::MAX_OUTCOME_BYTES;
use ramstore_master::{MovedRecord, ObjectStore, RpcOutcome};
use ramstore_wire::{MovedRpcResult, MovedRpcResults};

/// Records ready to encode: each with its outcome's bytes.
pub(crate) struct OutgoingRecords(Vec<(MovedRecord, [u8; MAX_OUTCOME_BYTES], usize)>);

impl OutgoingRecords {
    fn of(records: Vec<MovedRecord>) -> Self {
        Self(
            records
                .into_iter()
                .map(|r| {
                    let mut buf = [0; MAX_OUTCOME_BYTES];
                    let n = r.outcome.encode(&mut buf);
                    (r, buf, n)
                })
                .collect(),
        )
    }

    /// No records.
    pub(crate) fn none() -> Self {
        Self(Vec::new())
    }

    /// The records of `table_id` whose key hash lies in `[lo, hi]` (a Pull
    /// answer's covered hashes).
    pub(crate) fn in_range(store: &ObjectStore, table_id: u64, lo: u64, hi: u64) -> Self {
        let mut out = Vec::new();
        store.pull_rpc_results(table_id, lo, hi, &mut out);
        Self::of(out)
    }

    /// The records of `table_id` whose key hash is one of `hashes` (a
    /// PriorityPull answer's keys): one walk of the records.
    pub(crate) fn of_hashes(store: &ObjectStore, table_id: u64, hashes: &HashSet<u64>) -> Self {
        if hashes.is_empty() {
            return Self::none();
        }
        let mut out = Vec::new();
        store.pull_rpc_results(table_id, 0, u64::MAX, &mut out);
        out.retain(|r| hashes.contains(&r.key_hash));
        Self::of(out)
    }

    /// The records as the wire encodes them.
    pub(crate) fn wire(&self) -> impl Iterator<Item = MovedRpcResult<'_>> {
        self.0.iter().map(|(r, buf, n)| MovedRpcResult {
            table_id: r.table_id,
            key_hash: r.key_hash,
            lease_id: r.lease_id,
            seq: r.seq,
            result: &buf[..*n],
        })
    }
}

/// The records of a decoded answer, for the store; one whose outcome does not
/// decode (a source that saves something else) is left out, so its RPC is not
/// answered from it.
pub(crate) fn incoming_records(records: &MovedRpcResults<'_>) -> Vec<MovedRecord> {
    records
        .iter()
        .filter_map(|r| {
            Some(MovedRecord {
                lease_id: r.lease_id,
                seq: r.seq,
                table_id: r.table_id,
                key_hash: r.key_hash,
                outcome: RpcOutcome::decode(r.result)?,
            })
        })
        .collect()
}

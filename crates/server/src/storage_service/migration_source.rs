//! The source's side of a migration (K§2.3; `migration.rs` has the target's):
//! fence the tablet, then answer the target's pulls. Slow path only. Each answer
//! carries the completion records of the hashes it covers (RIFL §4.3:
//! `migration_records.rs`), so exactly-once RPCs stay exactly once on the target.

use std::collections::HashSet;

use ramstore_master::TxId;
use ramstore_wire::{
    encode_response, EnumerateResponseEncoder, ErrorBody, HeldCommitOut, MultiReadItems, Opcode,
    PriorityPullResponseEncoder, Response, Status, TxParticipant, WireError,
};

use super::migration_records::OutgoingRecords;
use super::object_ops::{read_status, status_body};
use super::wire_reply::answer_message;
use super::{StorageService, MAX_ENUMERATE_BATCH_BYTES};

/// What a source asks the coordinator to wait before resending a
/// PrepareMigration refused for a prepared transaction: a decision takes a
/// round trip or two.
const TRANSACTIONS_IN_FLIGHT_RETRY_MS: u32 = 10;

impl StorageService {
    /// PrepareMigration (as source): fence and answer the safe version.
    pub(super) fn prepare_migration(
        &self,
        id: u64,
        (table_id, start_hash, end_hash): (u64, u64, u64),
        migration_id: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let op = Opcode::PrepareMigration;
        // Prepared ops and their locks stay on this master: a range holding
        // one is not let go until its decision (issue 21; the coordinator
        // retries a RETRY answer).
        let busy = || self.tx.locks().any_in_range(table_id, start_hash, end_hash);
        match self
            .store
            .prepare_migration_unless(table_id, start_hash, end_hash, &busy)
        {
            Ok(safe_version) => {
                tracing::info!(
                    migration_id,
                    table_id,
                    start_hash,
                    end_hash,
                    safe_version,
                    "migration: tablet fenced for migrating out"
                );
                encode_response(id, op, &Response::PrepareMigration { safe_version }, out)
            }
            Err(ramstore_master::ConfigError::TransactionsInFlight) => {
                tracing::info!(
                    migration_id,
                    table_id,
                    start_hash,
                    end_hash,
                    "migration: a transaction holds an object of the range prepared; retry"
                );
                let retry = Response::Error(ErrorBody::Retry {
                    delay_ms: TRANSACTIONS_IN_FLIGHT_RETRY_MS,
                });
                encode_response(id, op, &retry, out)
            }
            Err(e) => answer_message(id, op, Status::InvalidRequest, &e.to_string(), out),
        }
    }

    /// Pull (as source): the next batch of a partition of a fenced tablet,
    /// encoded straight from the log (no owned copies of the records).
    pub(super) fn answer_pull(
        &self,
        id: u64,
        (table_id, cursor, end_hash): (u64, u64, u64),
        max_bytes: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let max = (max_bytes as usize).clamp(1, MAX_ENUMERATE_BATCH_BYTES);
        let start = out.len();
        let mut enc = EnumerateResponseEncoder::for_pull(id, out);
        let mut failed = None;
        let pulled =
            self.store
                .pull_with(table_id, cursor, end_hash, max, |version, key, value| {
                    if failed.is_none() {
                        failed = enc.push(version, key, value).err();
                    }
                });
        match (pulled, failed) {
            (Ok(next), None) => {
                // The batch covers every hash from the cursor up to the next
                // one (whole buckets), or to the end when it is the last.
                let hi = match next {
                    Some(n) => n.saturating_sub(1),
                    None => end_hash,
                };
                let covers_hashes = next.is_none_or(|n| n > cursor);
                let records = if covers_hashes {
                    OutgoingRecords::in_range(&self.store, table_id, cursor, hi)
                } else {
                    OutgoingRecords::none()
                };
                // Held commits move with their objects (issue 21; design
                // notes "Held outcomes"): the new owner must answer a recovery
                // manager COMMITTED as this master does.
                let held = if covers_hashes {
                    self.tx.held_in_range(table_id, (cursor, hi))
                } else {
                    Vec::new()
                };
                let held: Vec<(TxId, Vec<TxParticipant>)> = held
                    .into_iter()
                    .map(|(tx, objects)| {
                        let objects = objects
                            .into_iter()
                            .map(|(table_id, key_hash)| TxParticipant { table_id, key_hash })
                            .collect();
                        (tx, objects)
                    })
                    .collect();
                let held = held.iter().map(|(tx, participants)| HeldCommitOut {
                    lease_id: tx.lease_id,
                    tx_seq: tx.tx_seq,
                    participants,
                });
                enc.finish_with_trailers(next.is_some(), next.unwrap_or(0), records.wire(), held)
            }
            (Ok(_), Some(e)) => Err(e),
            (Err(e), _) => {
                // No record was visited; drop the frame begun for them.
                drop(enc);
                out.truncate(start);
                encode_response(
                    id,
                    Opcode::Pull,
                    &Response::Error(status_body(read_status(e))),
                    out,
                )
            }
        }
    }

    /// PriorityPull (as source): the records of the keys asked for.
    pub(super) fn answer_priority_pull(
        &self,
        id: u64,
        items: MultiReadItems<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let mut found = Vec::new();
        let mut hashes = HashSet::new();
        let mut table_id = None;
        for item in items.iter() {
            // A PriorityPull names keys of its migration's one table.
            table_id.get_or_insert(item.table_id);
            if table_id == Some(item.table_id) {
                hashes.insert(ramstore_master::key_hash(item.key));
            }
            match self.store.pull_key(item.table_id, item.key) {
                Ok(Some(o)) => found.push(o),
                Ok(None) => {}
                Err(e) => {
                    let body = status_body(read_status(e));
                    return encode_response(id, Opcode::PriorityPull, &Response::Error(body), out);
                }
            }
        }
        let records = match table_id {
            Some(t) => OutgoingRecords::of_hashes(&self.store, t, &hashes),
            None => OutgoingRecords::none(),
        };
        let mut enc = PriorityPullResponseEncoder::new(id, out);
        for o in &found {
            enc.push_parts(o.version, &o.key, &[&o.value])?;
        }
        enc.finish_with_records(records.wire())
    }
}

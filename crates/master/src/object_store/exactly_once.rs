//! Exactly-once object operations (RIFL, Lee et al. SOSP'15 §4; R§10.3): each
//! checks the RPC's completion record first, executes only a new RPC, and writes
//! the record in the same log append as the object, so a retry gets the first
//! answer and recovery finds both or neither.

use ramstore_log::entry::parse_rpc_result;
use ramstore_log::MAX_VALUE_BYTES;
use ramstore_wire::{RejectRules, RpcId};

use super::write::{incremented_f64, incremented_i64, AppendedRecord, NewValue};
use super::ObjectStore;
use crate::error::WriteError;
use crate::rifl::{Check, RpcOutcome};
use crate::tablets::Access;

impl ObjectStore {
    /// Runs `exec` once per RPC `id`: a completed RPC answers its saved outcome,
    /// a stale one `StaleRpc`, one running now `RpcInProgress` (retryable).
    fn once(
        &self,
        id: RpcId,
        exec: impl FnOnce((u64, u64)) -> Result<(RpcOutcome, Option<AppendedRecord>), WriteError>,
    ) -> Result<RpcOutcome, WriteError> {
        let log = &self.inner.log;
        let table = &self.inner.rpc_results;
        match table.check(id, log) {
            Check::Completed(outcome) => return Ok(outcome),
            Check::Stale => return Err(WriteError::StaleRpc),
            Check::InProgress => return Err(WriteError::RpcInProgress),
            Check::Unverified => return Err(WriteError::LeaseUnverified),
            Check::New => {}
        }
        match exec((id.lease_id, id.seq)) {
            Ok((outcome, Some((at, len, _)))) => {
                table.complete(id, outcome, at, len, log);
                Ok(outcome)
            }
            // Took no effect (a delete of nothing): nothing to remember.
            Ok((outcome, None)) => {
                table.abandon(id);
                Ok(outcome)
            }
            Err(e) => {
                table.abandon(id);
                Err(e)
            }
        }
    }

    /// [`Self::write`] as exactly-once RPC `id`.
    pub fn write_once(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
        id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(WriteError::ValueTooLarge(value.len()));
        }
        self.once(id, |rpc| {
            let (version, record) =
                self.update_recorded(table_id, key, rules, rpc, |_| Ok(NewValue::Borrowed(value)))?;
            Ok((RpcOutcome::Write { version }, record))
        })
    }

    /// [`Self::remove`] as exactly-once RPC `id`.
    pub fn remove_once(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
        id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        self.once(id, |rpc| {
            let (removed, record) =
                self.remove_full(table_id, key, rules, Access::Client, Some(rpc))?;
            let outcome = RpcOutcome::Remove {
                existed: removed.is_some(),
                version: removed.unwrap_or(0),
            };
            Ok((outcome, record))
        })
    }

    /// [`Self::increment_i64`] as exactly-once RPC `id`.
    pub fn increment_i64_once(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
        rules: &RejectRules,
        id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        self.once(id, |rpc| {
            let (_, record) = self.update_recorded(table_id, key, rules, rpc, |current| {
                incremented_i64(current, delta)
            })?;
            recorded(record)
        })
    }

    /// [`Self::increment_f64`] as exactly-once RPC `id`.
    pub fn increment_f64_once(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
        rules: &RejectRules,
        id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        self.once(id, |rpc| {
            let (_, record) = self.update_recorded(table_id, key, rules, rpc, |current| {
                incremented_f64(current, delta)
            })?;
            recorded(record)
        })
    }

    /// Replays a completion record of a log being reloaded (crash recovery, cold
    /// start; RIFL §4.3): appends it to this master's log and keeps it, unless
    /// it is known already. `entry` is the whole entry as it was in the old log.
    /// Returns whether it was kept.
    pub fn replay_rpc_result(&self, entry: &[u8]) -> Result<bool, WriteError> {
        let Ok(r) = parse_rpc_result(entry) else {
            return Ok(false);
        };
        let Some(outcome) = RpcOutcome::decode(r.result) else {
            return Ok(false);
        };
        let log = &self.inner.log;
        let table = &self.inner.rpc_results;
        if table.is_known(r.lease_id, r.seq) {
            return Ok(false);
        }
        let _pin = log.pin();
        let (appended, at) = log.append_record(entry).map_err(WriteError::from)?;
        let kept = table.restore(r.lease_id, r.seq, outcome, at, entry.len());
        if !kept {
            log.object_died(at, entry.len());
        }
        log.replicate(&appended);
        self.note_head(appended.segment_id);
        Ok(kept)
    }

    /// Forgets every completion record of client lease `lease_id`, which the
    /// coordinator says has expired (RIFL §4.2); its later RPCs are stale.
    pub fn expire_client_lease(&self, lease_id: u64) {
        self.inner
            .rpc_results
            .expire_lease(lease_id, &self.inner.log);
    }

    /// One round of the lease-expiry loop: the client leases to ask the
    /// coordinator about (idle since the last round, or unverified).
    pub fn client_leases_to_check(&self) -> Vec<u64> {
        self.inner.rpc_results.leases_to_check()
    }

    /// The coordinator says client lease `lease_id` is live.
    pub fn client_lease_is_live(&self, lease_id: u64) {
        self.inner.rpc_results.lease_is_live(lease_id)
    }

    /// Expired (and unverified) lease ids remembered now; bounded by
    /// 16 × ([`crate::rifl::DEFAULT_EXPIRED_PER_SHARD`] + [`crate::rifl::MAX_UNVERIFIED`]).
    pub fn remembered_expired_leases(&self) -> usize {
        self.inner.rpc_results.remembered_expired()
    }

    /// The client leases with completion records here.
    pub fn client_leases(&self) -> Vec<u64> {
        self.inner.rpc_results.leases()
    }

    /// Completion records kept now (in progress or completed).
    pub fn rpc_records(&self) -> usize {
        self.inner.rpc_results.records()
    }
}

/// The outcome saved in the record an increment appended.
fn recorded(
    record: Option<AppendedRecord>,
) -> Result<(RpcOutcome, Option<AppendedRecord>), WriteError> {
    match record {
        Some(r) => Ok((r.2, Some(r))),
        // `update_recorded` appends a record with every object it writes.
        None => Err(WriteError::TooLargeRecord),
    }
}

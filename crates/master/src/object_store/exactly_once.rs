//! Exactly-once object operations (RIFL, Lee et al. SOSP'15 §4; R§10.3): each
//! checks the RPC's completion record first, executes only a new RPC, and writes
//! the record in the same log append as the object, so a retry gets the first
//! answer and recovery finds both or neither. Records move with their objects in
//! a migration (RIFL §4.3, K§2.3): the source lists a range's records
//! ([`ObjectStore::pull_rpc_results`]) and the target installs them
//! ([`ObjectStore::install_moved_record`]).

use ramstore_log::entry::{encode_rpc_result, parse_rpc_result};
use ramstore_log::{SideLog, MAX_VALUE_BYTES};
use ramstore_wire::{RejectRules, RpcId};

use super::write::{incremented_f64, incremented_i64, AppendedRecord, NewValue};
use super::ObjectStore;
use crate::error::WriteError;
use crate::expiry::Expiry;
use crate::hashed_key::HashedKey;
use crate::rifl::{Check, MovedRecord, RpcOutcome, MAX_OUTCOME_BYTES};
use crate::tablets::Access;

/// One exactly-once update, as [`ObjectStore::update_once`] carries it out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OnceUpdate<'a> {
    Write(&'a [u8]),
    Remove,
    IncrementI64(i64),
    IncrementF64(f64),
}

impl ObjectStore {
    /// Runs `exec` once per RPC `id` on the object at `place` (table id, key
    /// hash): a completed RPC answers its saved outcome, a stale one `StaleRpc`,
    /// one running now `RpcInProgress` (retryable).
    fn once(
        &self,
        id: RpcId,
        place: (u64, u64),
        exec: impl FnOnce((u64, u64)) -> Result<(RpcOutcome, Option<AppendedRecord>), WriteError>,
    ) -> Result<RpcOutcome, WriteError> {
        let log = &self.inner.log;
        let table = &self.inner.rpc_results;
        // Held from the check to the completion: a migration's fence
        // (`prepare_migration` waits for every pinned operation) then leaves no
        // record of the range in progress, so the source's pulls see them all.
        let _pin = log.pin();
        match table.check(id, log) {
            Check::Completed(outcome) => return Ok(outcome),
            Check::Stale => return Err(WriteError::StaleRpc),
            Check::InProgress => return Err(WriteError::RpcInProgress),
            Check::Unverified => return Err(WriteError::LeaseUnverified),
            Check::New => {}
        }
        match exec((id.lease_id, id.seq)) {
            Ok((outcome, Some((at, len, _)))) => {
                table.complete(id, (outcome, place), at, len, log);
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

    /// Carries out `op` on `key` of `table_id` as exactly-once RPC `id`.
    pub fn update_once(
        &self,
        (table_id, key): (u64, &[u8]),
        rules: &RejectRules,
        op: OnceUpdate<'_>,
        id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        self.update_once_as((table_id, key), rules, op, id, Access::Client)
    }

    /// [`Self::update_once`] on a migrating-in tablet, for a key whose object and
    /// completion records the migration's gate says have arrived.
    pub fn update_once_arrived(
        &self,
        (table_id, key): (u64, &[u8]),
        rules: &RejectRules,
        op: OnceUpdate<'_>,
        id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        self.update_once_as((table_id, key), rules, op, id, Access::Arrived)
    }

    /// [`Self::update_once`] of a key its caller hashed already (for its
    /// lock-table check): the key is not hashed again (issue 21, "hash once").
    pub fn update_once_hashed(
        &self,
        (table_id, key): (u64, HashedKey<'_>),
        rules: &RejectRules,
        op: OnceUpdate<'_>,
        id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        self.update_once_hashed_as((table_id, key), rules, op, id, Access::Client)
    }

    /// [`Self::update_once_arrived`] of a hashed key.
    pub fn update_once_arrived_hashed(
        &self,
        (table_id, key): (u64, HashedKey<'_>),
        rules: &RejectRules,
        op: OnceUpdate<'_>,
        id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        self.update_once_hashed_as((table_id, key), rules, op, id, Access::Arrived)
    }

    fn update_once_as(
        &self,
        (table_id, key): (u64, &[u8]),
        rules: &RejectRules,
        op: OnceUpdate<'_>,
        id: RpcId,
        access: Access,
    ) -> Result<RpcOutcome, WriteError> {
        self.update_once_hashed_as((table_id, HashedKey::new(key)), rules, op, id, access)
    }

    fn update_once_hashed_as(
        &self,
        (table_id, hashed): (u64, HashedKey<'_>),
        rules: &RejectRules,
        op: OnceUpdate<'_>,
        id: RpcId,
        access: Access,
    ) -> Result<RpcOutcome, WriteError> {
        let place = (table_id, hashed.hash());
        let object = (table_id, hashed);
        match op {
            OnceUpdate::Write(value) => {
                if value.len() > MAX_VALUE_BYTES {
                    return Err(WriteError::ValueTooLarge(value.len()));
                }
                self.once(id, place, |rpc| {
                    let (version, record) = self.update_recorded(
                        object,
                        rules,
                        (access, Expiry::Set(None)),
                        rpc,
                        |_| Ok(NewValue::Borrowed(value)),
                    )?;
                    Ok((RpcOutcome::Write { version }, record))
                })
            }
            OnceUpdate::Remove => self.once(id, place, |rpc| {
                let (removed, record) =
                    self.remove_full(table_id, hashed, rules, access, Some(rpc), false)?;
                let outcome = RpcOutcome::Remove {
                    existed: removed.is_some(),
                    version: removed.unwrap_or(0),
                };
                Ok((outcome, record))
            }),
            OnceUpdate::IncrementI64(delta) => self.once(id, place, |rpc| {
                let (_, record) =
                    self.update_recorded(object, rules, (access, Expiry::Keep), rpc, |current| {
                        incremented_i64(current, delta)
                    })?;
                recorded(record)
            }),
            OnceUpdate::IncrementF64(delta) => self.once(id, place, |rpc| {
                let (_, record) =
                    self.update_recorded(object, rules, (access, Expiry::Keep), rpc, |current| {
                        incremented_f64(current, delta)
                    })?;
                recorded(record)
            }),
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
        self.update_once((table_id, key), rules, OnceUpdate::Write(value), id)
    }

    /// [`Self::remove`] as exactly-once RPC `id`.
    pub fn remove_once(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
        id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        self.update_once((table_id, key), rules, OnceUpdate::Remove, id)
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
        self.update_once((table_id, key), rules, OnceUpdate::IncrementI64(delta), id)
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
        self.update_once((table_id, key), rules, OnceUpdate::IncrementF64(delta), id)
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
        let moved = MovedRecord {
            lease_id: r.lease_id,
            seq: r.seq,
            table_id: r.table_id,
            key_hash: r.key_hash,
            outcome,
        };
        let log = &self.inner.log;
        let table = &self.inner.rpc_results;
        if table.is_known(r.lease_id, r.seq) {
            return Ok(false);
        }
        let _pin = log.pin();
        let (appended, at) = log.append_record(entry).map_err(WriteError::from)?;
        let kept = table.restore(&moved, at, entry.len());
        if !kept {
            log.object_died(at, entry.len());
        }
        log.replicate(&appended);
        self.note_head(appended.segment_id);
        Ok(kept)
    }

    /// The completed records of objects of `table_id` with key hash in `[lo,
    /// hi]`, appended to `out`: what a migration's source sends with the range's
    /// objects (RIFL §4.3, K§2.3), so a retry that reaches the target gets the
    /// first answer.
    pub fn pull_rpc_results(&self, table_id: u64, lo: u64, hi: u64, out: &mut Vec<MovedRecord>) {
        self.inner.rpc_results.records_in(table_id, (lo, hi), out);
    }

    /// Installs a completion record a migration's source sent (RIFL §4.3): it
    /// is appended to side log `side`, where the target puts the range's pulled
    /// objects (replicated and committed with them, K§2.3), and kept unless it
    /// is known here already, was acknowledged, or its lease expired. Returns
    /// whether it was kept.
    pub fn install_moved_record(
        &self,
        side: &SideLog,
        r: &MovedRecord,
    ) -> Result<bool, WriteError> {
        let table = &self.inner.rpc_results;
        if table.is_known(r.lease_id, r.seq) {
            return Ok(false);
        }
        let mut buf = [0; MAX_OUTCOME_BYTES];
        let n = r.outcome.encode(&mut buf);
        let entry = encode_rpc_result(r.lease_id, r.seq, r.table_id, r.key_hash, &buf[..n])
            .ok_or(WriteError::TooLargeRecord)?;
        let log = &self.inner.log;
        let _pin = log.pin();
        let at = log
            .append_side_record(side, entry.as_bytes())
            .map_err(WriteError::from)?;
        let kept = table.restore(r, at, entry.as_bytes().len());
        if !kept {
            log.object_died(at, entry.as_bytes().len());
        }
        Ok(kept)
    }

    /// Forgets every completion record of client lease `lease_id`, which the
    /// coordinator says has expired (RIFL §4.2); its later RPCs are stale.
    pub fn expire_client_lease(&self, lease_id: u64) {
        self.inner
            .rpc_results
            .expire_lease(lease_id, &self.inner.log);
    }

    /// Whether the coordinator said client lease `lease_id` expired (and this
    /// master still remembers it: `rifl::expired`). A transaction's prepare
    /// under it is refused STALE_RPC (issue 21: a commit after the lease
    /// expired gets a clear error).
    pub fn client_lease_expired(&self, lease_id: u64) -> bool {
        self.inner.rpc_results.is_expired_lease(lease_id)
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

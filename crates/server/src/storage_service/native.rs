//! The native front end ([`Service`]): each frame is decoded once, then served
//! through the request path ([`StorageService::serve`]) with [`Wire`] answers.
//! `dispatch` is the store call of step 2: it carries the request out and appends
//! its response, or hands long work to the slow path (`super::slow_path`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, Service};
use ramstore_wire::{
    decode_raw_header, decode_request, encode_error_response, encode_read_response_header,
    encode_response, ErrorBody, MultiReadItems, MultiReadResponseEncoder, MultiRemoveItems,
    MultiRemoveResponseEncoder, MultiWriteItems, MultiWriteResponseEncoder, NumberKind, Opcode,
    RejectRules, Request, Response, ServerListEntries, Status, WireError,
};

use super::exactly_once::OnceOp;
use super::migration_park::gated_op;
use super::object_ops::{error_body, read_status, status_body, write_status};
use super::request_path::{Durability, Step};
use super::wire_reply::{
    answer_bad_request, answer_message, answer_wire_error, no_backup, Wire,
    RETRY_AFTER_REFUSED_CONNECTION_MS,
};
use super::{KnownServer, StorageService, MAX_MULTI_READ_RESPONSE_BYTES};
use crate::backup_service::ServerState;
use crate::metrics::Op;
use crate::replica_manager::BackupInfo;

/// The answer to a tablet notification meant for another server id (a process
/// that took over a dead server's address, or one not enlisted yet): the
/// coordinator retries it while that server is up, and drops it once it is not.
pub(super) const NOT_THE_SERVER_MEANT: &str =
    "this server is not the server id the tablet notification is meant for";

impl Service for StorageService {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        self.handle_frame(frame, out, true)
    }

    /// A connection over the limit: RETRY, so the client backs off and reconnects
    /// (the connection is closed after this answer).
    fn refuse(&self, frame: &[u8], out: &mut Vec<u8>) {
        let refused = self.connections_refused.fetch_add(1, Ordering::Relaxed);
        if refused.is_power_of_two() {
            tracing::warn!(
                refused = refused + 1,
                "too many connections: refusing new ones with RETRY (--max-connections)"
            );
        }
        if let Ok(raw) = decode_raw_header(frame) {
            let _ = encode_error_response(
                raw.request_id,
                raw.opcode,
                &ErrorBody::Retry {
                    delay_ms: RETRY_AFTER_REFUSED_CONNECTION_MS,
                },
                out,
            );
        }
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        self.slow_path(frame)
    }
}

impl StorageService {
    /// [`Service::handle`] for a request that was parked once already
    /// (`migration_park.rs`): if its key still has not arrived, it is answered
    /// RETRY instead of being parked again.
    pub(crate) fn handle_unparked(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        self.handle_frame(frame, out, false)
    }

    fn handle_frame(&self, frame: &[u8], out: &mut Vec<u8>, park: bool) -> Handled {
        // A frame whose work always runs on the slow path is decoded there, once:
        // only its header is read here, for the guards (step 1).
        if let Some((id, op)) = slow_only(frame) {
            let wire = Wire {
                id,
                op,
                mark: out.len(),
                out,
                park,
            };
            return self.serve(op, wire, |_| Step::HandOff);
        }
        let (header, req) = match decode_request(frame) {
            Ok(decoded) => decoded,
            Err(e) => {
                let started = self.clock.now();
                answer_bad_request(frame, &e, out);
                self.metrics.record(Op::Invalid, started.elapsed());
                return Handled::Done;
            }
        };
        let op = req.opcode();
        let wire = Wire {
            id: header.request_id,
            op,
            mark: out.len(),
            out,
            park,
        };
        self.serve(op, wire, |w| self.dispatch(&req, w))
    }
}

/// The request id and opcode of a frame whose work always runs on the slow path
/// (`slow_path.rs`), read from its header alone; `None` for every other frame,
/// which `handle` decodes. A backup write is not among them: a buffered one is
/// answered at once, and which it is shows only in its body.
fn slow_only(frame: &[u8]) -> Option<(u64, Opcode)> {
    let raw = decode_raw_header(frame).ok()?;
    let op = Opcode::try_from(raw.opcode).ok()?;
    matches!(
        op,
        Opcode::Enumerate
            | Opcode::DropTabletOwnership
            | Opcode::RecoverPartition
            | Opcode::PingServer
            | Opcode::BackupFree
            | Opcode::BackupGetReplicas
            | Opcode::BackupReadReplica
            | Opcode::BackupStartPartitioning
            | Opcode::BackupGetRecoveryData
            | Opcode::PrepareMigration
            | Opcode::TakeMigratingTablet
            | Opcode::Pull
            | Opcode::PriorityPull
    )
    .then_some((raw.request_id, op))
}

impl StorageService {
    /// Step 2 for a native request: carries `req` out and appends its response to
    /// the wire answer, or hands it to the slow path.
    fn dispatch(&self, req: &Request<'_>, w: &mut Wire<'_>) -> Step<()> {
        match self.carry_out(req, w) {
            Ok(step) => step,
            Err(e) => {
                // The response could not be encoded: say why instead.
                w.out.truncate(w.mark);
                answer_wire_error(w.id, w.op.code(), &e, w.out);
                Step::Answered((), Durability::Now)
            }
        }
    }

    fn carry_out(&self, req: &Request<'_>, w: &mut Wire<'_>) -> Result<Step<()>, WireError> {
        let (id, op, out) = (w.id, w.op, &mut *w.out);
        // A key still being pulled by a migration: wait for it on the slow path
        // rather than answer RETRY (K§2.3; `migration_park.rs`).
        if w.park {
            let parks = match gated_op(req) {
                Some((table_id, key, op)) => self.parks(table_id, key, op),
                None => false,
            };
            if parks {
                return Ok(Step::HandOff);
            }
        }
        let durability = match *req {
            Request::Ping { nonce, caller_id } => {
                self.answer_ping(id, nonce, caller_id, out)?;
                Durability::Now
            }
            Request::Read {
                table_id,
                rules: r,
                key,
            } => self.read(id, table_id, &r, key, out)?,
            Request::Write {
                table_id,
                rules: r,
                key,
                value,
                rpc_id: None,
            } => self.write(id, table_id, &r, key, value, out)?,
            Request::Remove {
                table_id,
                rules: r,
                key,
                rpc_id: None,
            } => self.remove(id, table_id, &r, key, out)?,
            Request::Increment {
                table_id,
                rules: r,
                kind,
                delta,
                key,
                rpc_id: None,
            } => self.increment(id, (table_id, key), &r, kind, delta, out)?,
            // Exactly-once (RIFL): checked against the completion records first.
            Request::Write {
                table_id,
                rules: r,
                key,
                value,
                rpc_id: Some(rpc),
            } => self.update_once(id, (table_id, key), &r, OnceOp::Write { value }, rpc, out)?,
            Request::Remove {
                table_id,
                rules: r,
                key,
                rpc_id: Some(rpc),
            } => self.update_once(id, (table_id, key), &r, OnceOp::Remove, rpc, out)?,
            Request::Increment {
                table_id,
                rules: r,
                kind,
                delta,
                key,
                rpc_id: Some(rpc),
            } => self.update_once(
                id,
                (table_id, key),
                &r,
                OnceOp::Increment { kind, delta },
                rpc,
                out,
            )?,
            Request::SetExpiry {
                table_id,
                condition,
                expires_at,
                key,
            } => self.set_expiry(id, (table_id, key), expires_at, condition, out)?,
            Request::GetExpiry { table_id, key } => self.get_expiry(id, (table_id, key), out)?,
            Request::WriteExpiring {
                table_id,
                rules: r,
                expiry,
                key,
                value,
            } => self.write_expiring(id, (table_id, key, value), &r, expiry, out)?,
            Request::MultiRead(items) => self.multi_read(id, items, out)?,
            Request::MultiWrite(items, None) => self.multi_write(id, items, out)?,
            Request::MultiRemove(items, None) => self.multi_remove(id, items, out)?,
            // Exactly-once, op by op (RIFL §4; `multi_once.rs`).
            Request::MultiWrite(items, Some(ids)) => self.multi_write_once(id, items, ids, out)?,
            Request::MultiRemove(items, Some(ids)) => {
                self.multi_remove_once(id, items, ids, out)?
            }
            Request::TxPrepare(prepare) => self.tx_prepare(id, &prepare, out)?,
            Request::TxRequestVote(request) => self.tx_request_vote(id, &request, out)?,
            Request::TxDecisions(decisions) => self.tx_decisions(id, &decisions, out)?,
            Request::TxDecision {
                lease_id,
                tx_seq,
                commit,
            } => self.tx_decision(id, lease_id, tx_seq, commit, out)?,
            Request::TakeTabletOwnership { server_id, .. } if server_id != self.server_id() => {
                answer_message(id, op, Status::ServerNotUp, NOT_THE_SERVER_MEANT, out)?;
                Durability::Now
            }
            Request::TakeTabletOwnership {
                table_id,
                start_hash,
                end_hash,
                ..
            } => {
                self.take_tablet(id, (table_id, start_hash, end_hash), out)?;
                Durability::Now
            }
            Request::ServerListUpdate {
                list_version,
                servers,
            } => {
                self.apply_server_list(list_version, &servers);
                encode_response(id, op, &Response::ServerListUpdate, out)?;
                Durability::Now
            }
            Request::GetServerStats => {
                let text = self.stats_text();
                encode_response(id, op, &Response::GetServerStats { text: &text }, out)?;
                Durability::Now
            }
            // `handle` hands these off before decoding them (`slow_only`).
            Request::Enumerate { .. }
            | Request::DropTabletOwnership { .. }
            | Request::RecoverPartition { .. }
            | Request::PingServer { .. }
            | Request::BackupFree { .. }
            | Request::BackupGetReplicas { .. }
            | Request::BackupReadReplica { .. }
            | Request::BackupStartPartitioning { .. }
            | Request::BackupGetRecoveryData { .. }
            | Request::PrepareMigration { .. }
            | Request::TakeMigratingTablet { .. }
            | Request::Pull { .. }
            | Request::PriorityPull(_) => return Ok(Step::HandOff),
            // A buffered backup write is answered here; one that syncs or closes a
            // replica waits for the disk on the slow path, which decodes it again
            // (a few field reads beside a disk write).
            Request::BackupWrite { .. } => {
                match &self.backup {
                    Some(backup) if backup.is_fast(req) => backup.answer(id, req, out)?,
                    Some(_) => return Ok(Step::HandOff),
                    None => no_backup(id, op, out)?,
                }
                Durability::Now
            }
            // Coordinator operations sent to a storage server by mistake.
            Request::CreateTable { .. }
            | Request::GetTableId { .. }
            | Request::DropTable { .. }
            | Request::SplitTablet { .. }
            | Request::Enlist { .. }
            | Request::CrashServer { .. }
            | Request::SuspectServer { .. }
            | Request::RenewLease { .. }
            | Request::ClientLease { .. }
            | Request::CheckClientLease { .. }
            | Request::Leave { .. }
            | Request::MigrateTablet { .. }
            | Request::ListMigrations
            | Request::MigrationDone { .. }
            | Request::CancelMigration { .. }
            | Request::GetTabletMap => {
                answer_message(
                    id,
                    op,
                    Status::InvalidRequest,
                    "this is a storage server; send table operations to the coordinator",
                    out,
                )?;
                Durability::Now
            }
        };
        Ok(Step::Answered((), durability))
    }

    fn read(
        &self,
        id: u64,
        table_id: u64,
        rules_w: &RejectRules,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let rules = *rules_w;
        let (result, durability) = self.read_object(table_id, key, |view| {
            rules.check(Some(view.version()))?;
            // The value goes from the log straight into the output buffer.
            let written = encode_read_response_header(id, view.version(), view.value_len(), out);
            if written.is_ok() {
                view.value_pieces(|piece| out.extend_from_slice(piece));
            }
            Ok(written)
        });
        let op = Opcode::Read;
        match result {
            Ok(Ok(written)) => written?,
            Ok(Err(e)) => encode_response(id, op, &Response::Error(error_body(e)), out)?,
            Err(e) => encode_response(id, op, &Response::Error(status_body(read_status(e))), out)?,
        }
        Ok(durability)
    }

    pub(super) fn write(
        &self,
        id: u64,
        table_id: u64,
        r: &RejectRules,
        key: &[u8],
        value: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let response = match self.write_object(table_id, key, value, r) {
            Ok(version) => Response::Write { version },
            Err(e) => Response::Error(self.refused(e)),
        };
        encode_response(id, Opcode::Write, &response, out)?;
        Ok(Durability::LogEnd)
    }

    pub(super) fn remove(
        &self,
        id: u64,
        table_id: u64,
        r: &RejectRules,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let response = match self.remove_object(table_id, key, r) {
            Ok(removed) => Response::Remove {
                existed: removed.is_some(),
                version: removed.unwrap_or(0),
            },
            Err(e) => Response::Error(self.refused(e)),
        };
        encode_response(id, Opcode::Remove, &response, out)?;
        Ok(Durability::LogEnd)
    }

    pub(super) fn increment(
        &self,
        id: u64,
        (table_id, key): (u64, &[u8]),
        r: &RejectRules,
        kind: NumberKind,
        delta: [u8; 8],
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let result = match kind {
            NumberKind::I64 => self.increment_i64(table_id, key, i64::from_le_bytes(delta), r),
            NumberKind::F64 => self.increment_f64(table_id, key, f64::from_le_bytes(delta), r),
        };
        let response = match result {
            Ok((value, version)) => Response::Increment { version, value },
            Err(e) => Response::Error(self.refused(e)),
        };
        encode_response(id, Opcode::Increment, &response, out)?;
        Ok(Durability::LogEnd)
    }

    fn multi_read(
        &self,
        id: u64,
        items: MultiReadItems<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let mut enc = MultiReadResponseEncoder::new(id, out);
        let mut bytes = 0usize;
        let mut durability = Durability::Now;
        for item in items.iter() {
            if bytes > MAX_MULTI_READ_RESPONSE_BYTES {
                enc.push_error(Status::Retry)?;
                continue;
            }
            let (pushed, needs) = self.read_object(item.table_id, item.key, |view| {
                bytes += view.value_len();
                push_value(&mut enc, view)
            });
            durability = durability.max(needs);
            match pushed {
                Ok(r) => r?,
                Err(e) => enc.push_error(read_status(e))?,
            }
        }
        enc.finish()?;
        Ok(durability)
    }

    fn multi_write(
        &self,
        id: u64,
        items: MultiWriteItems<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let mut enc = MultiWriteResponseEncoder::new(id, out);
        for item in items.iter() {
            let r = item.rules;
            match self.write_object(item.table_id, item.key, item.value, &r) {
                Ok(version) => enc.push(Status::Ok, version)?,
                Err(ramstore_master::WriteError::WrongVersion { current }) => {
                    enc.push(Status::WrongVersion, current)?
                }
                Err(e) => enc.push(write_status(self.count_refusal(e)), 0)?,
            }
        }
        enc.finish()?;
        Ok(Durability::LogEnd)
    }

    fn multi_remove(
        &self,
        id: u64,
        items: MultiRemoveItems<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let mut enc = MultiRemoveResponseEncoder::new(id, out);
        for item in items.iter() {
            match self.remove_object(item.table_id, item.key, &item.rules) {
                Ok(Some(v)) => enc.push(Status::Ok, true, v)?,
                Ok(None) => enc.push(Status::Ok, false, 0)?,
                Err(ramstore_master::WriteError::WrongVersion { current }) => {
                    enc.push(Status::WrongVersion, false, current)?
                }
                Err(e) => enc.push(write_status(self.count_refusal(e)), false, 0)?,
            }
        }
        enc.finish()?;
        Ok(Durability::LogEnd)
    }

    fn take_tablet(
        &self,
        id: u64,
        (table_id, start_hash, end_hash): (u64, u64, u64),
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let op = Opcode::TakeTabletOwnership;
        match self.store.take_tablet(table_id, start_hash, end_hash) {
            Ok(()) => {
                tracing::info!(table_id, start_hash, end_hash, "took tablet ownership");
                encode_response(id, op, &Response::TakeTabletOwnership, out)
            }
            Err(e) => answer_message(id, op, Status::InvalidRequest, &e.to_string(), out),
        }
    }

    /// Applies a server list the coordinator pushed, unless a newer one is here.
    fn apply_server_list(&self, list_version: u64, servers: &ServerListEntries<'_>) {
        let mut list = self.server_list.lock();
        if list_version >= list.0 {
            let known = servers
                .iter()
                .map(|s| KnownServer {
                    server_id: s.server_id,
                    up: s.status == ramstore_wire::ServerStatus::Up,
                    address: s.address.to_string(),
                    backup: s.services.backup,
                    failure_domain: s.failure_domain.to_string(),
                    backup_read_mbps: s.backup_read_mbps,
                })
                .collect();
            *list = (list_version, known);
            // The backups replicas may go to; replicas on any other are
            // re-created elsewhere (R§8).
            if let Some(m) = &self.replicas {
                m.set_backups(backups_of(&list.1, self.server_id()));
            }
        }
        drop(list);
        // A list naming this server crashed makes it a zombie (R§7.11).
        self.note_server_list(servers);
        // Zombie fence and restart retention (R§7.11, R§8); states only move
        // forward, so an older list is harmless here.
        if let Some(backup) = &self.backup {
            let states: Vec<(u64, ServerState)> = servers
                .iter()
                .map(|s| (s.server_id, s.status.into()))
                .collect();
            backup.apply_server_list(&states);
        }
    }
}

fn push_value(
    enc: &mut MultiReadResponseEncoder<'_>,
    view: &ramstore_log::ObjectView<'_>,
) -> Result<(), WireError> {
    let version = view.version();
    if view.key_slice().is_some() {
        // A contiguous entry: its value is one slice of the log, pushed in place.
        let mut result = Ok(());
        view.value_pieces(|piece| result = enc.push_ok(version, piece));
        return result;
    }
    let mut value = Vec::with_capacity(view.value_len());
    view.copy_value(&mut value);
    enc.push_ok(version, &value)
}

/// The UP backups of a server list other than this server, as placement sees them.
fn backups_of(servers: &[KnownServer], me: u64) -> Vec<BackupInfo> {
    servers
        .iter()
        .filter(|s| s.up && s.backup && s.server_id != me)
        .map(|s| BackupInfo {
            server_id: s.server_id,
            address: s.address.clone(),
            failure_domain: s.failure_domain.clone(),
            backup_read_mbps: s.backup_read_mbps,
        })
        .collect()
}

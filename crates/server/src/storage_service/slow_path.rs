//! The native front end's slow path: requests `dispatch` handed off
//! ([`super::request_path::Step::HandOff`]) after they passed the guards. Pinging a
//! suspect and recovering a partition are async; enumeration, dropping a tablet and
//! backup requests that may wait for the disk run on the blocking pool. Each frame
//! is decoded once, here: `handle` read only its header (`native::slow_only`; a
//! backup write that must sync is the exception, decoded there and again here), its
//! opcode says where it runs, and it is decoded there.

use std::sync::Arc;

use ramstore_rpc::server::SlowFuture;
use ramstore_wire::{
    decode_raw_header, decode_request, encode_response, EnumerateResponseEncoder, MigrationMode,
    Opcode, Request, Response, Status, WireError,
};

use super::native::NOT_THE_SERVER_MEANT;
use super::object_ops::{read_status, status_body};
use super::wire_reply::{answer_bad_request, answer_message, no_backup};
use super::{StorageService, MAX_ENUMERATE_BATCH_BYTES};
use crate::metrics::Op;
use crate::recovery_master::{self, PartitionJob};
use ramstore_master::ReadError;

impl StorageService {
    /// The answer to a handed-off request `frame`, once its work is done.
    pub(crate) fn slow_path(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        let op = decode_raw_header(&frame)
            .ok()
            .and_then(|h| Opcode::try_from(h.opcode).ok());
        // A single-key object request is here only because it waits for its key
        // to arrive by migration (`migration_park.rs`).
        if matches!(
            op,
            Some(Opcode::Read | Opcode::Write | Opcode::Remove | Opcode::Increment)
        ) {
            return Box::pin(self.park_then_serve(frame));
        }
        if matches!(
            op,
            Some(Opcode::PingServer | Opcode::RecoverPartition | Opcode::TakeMigratingTablet)
        ) {
            if let Some(answer) = self.slow_async(&frame) {
                return answer;
            }
        }
        Box::pin(async move {
            let started = self.clock.now();
            let service = self.clone();
            // A migration's bulk pull is background work (K§2.3: the source's
            // foreground work is never blocked by migration); a PriorityPull,
            // which a client is waiting for, is not.
            let job = move || service.slow_blocking(&frame);
            let response = if op == Some(Opcode::Pull) {
                self.blocking.run_background(job).await
            } else {
                self.blocking.run(job).await
            }
            .unwrap_or_default();
            self.metrics
                .record(op.map_or(Op::Invalid, Op::from), started.elapsed());
            response
        })
    }

    /// The async work: pinging a suspect for the coordinator, recovering a
    /// partition (R§7.6). `None` if `frame` is neither.
    fn slow_async(self: &Arc<Self>, frame: &[u8]) -> Option<SlowFuture> {
        let (header, req) = decode_request(frame).ok()?;
        let id = header.request_id;
        if let Request::PingServer { server_id, address } = req {
            return Some(self.ping_server_answer(id, server_id, address));
        }
        if let Request::TakeMigratingTablet {
            server_id,
            table_id,
            start_hash,
            end_hash,
            migration_id,
            source_server_id,
            safe_version,
            source_address,
            mode,
        } = req
        {
            let mut out = Vec::new();
            let op = Opcode::TakeMigratingTablet;
            let answered = if server_id != self.server_id() {
                answer_message(id, op, Status::ServerNotUp, NOT_THE_SERVER_MEANT, &mut out)
            } else {
                let migration = ramstore_master::migration::IncomingMigration::new(
                    migration_id,
                    (table_id, start_hash, end_hash),
                    source_server_id,
                    source_address.to_owned(),
                    safe_version,
                );
                // The benchmark baseline without PriorityPulls (design notes
                // "Migration (Rocksteady)"); stop-and-copy pulls as Rocksteady
                // does, only no client is routed here before it is done.
                let migration = match mode {
                    MigrationMode::NoPriorityPulls => migration.without_priority_pulls(),
                    MigrationMode::Rocksteady | MigrationMode::StopAndCopy => migration,
                };
                self.take_migrating_tablet(id, migration, &mut out)
            };
            if answered.is_err() {
                out.clear();
            }
            return Some(Box::pin(async move { out }));
        }
        let job = PartitionJob::from_request(&req)?;
        Some(Box::pin(self.clone().recover_partition(id, job)))
    }

    /// The blocking work, on the blocking pool: its response frame. A frame that
    /// does not decode is answered here: `handle` read only its header.
    fn slow_blocking(&self, frame: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let (header, req) = match decode_request(frame) {
            Ok(decoded) => decoded,
            Err(e) => {
                answer_bad_request(frame, &e, &mut out);
                return out;
            }
        };
        let id = header.request_id;
        let op = req.opcode();
        let result = match req {
            Request::Enumerate {
                table_id,
                cursor,
                max_bytes,
            } => self.enumerate(id, table_id, cursor, max_bytes as usize, &mut out),
            Request::DropTabletOwnership { server_id, .. } if server_id != self.server_id() => {
                answer_message(id, op, Status::ServerNotUp, NOT_THE_SERVER_MEANT, &mut out)
            }
            Request::DropTabletOwnership {
                table_id,
                start_hash,
                end_hash,
                ..
            } => {
                self.store.drop_tablet(table_id, start_hash, end_hash);
                tracing::info!(table_id, start_hash, end_hash, "dropped tablet");
                encode_response(id, op, &Response::DropTabletOwnership, &mut out)
            }
            Request::PrepareMigration { server_id, .. } if server_id != self.server_id() => {
                answer_message(id, op, Status::ServerNotUp, NOT_THE_SERVER_MEANT, &mut out)
            }
            Request::PrepareMigration {
                table_id,
                start_hash,
                end_hash,
                migration_id,
                ..
            } => {
                self.prepare_migration(id, (table_id, start_hash, end_hash), migration_id, &mut out)
            }
            Request::Pull {
                table_id,
                cursor,
                end_hash,
                max_bytes,
            } => self.answer_pull(id, (table_id, cursor, end_hash), max_bytes, &mut out),
            Request::PriorityPull(items) => self.answer_priority_pull(id, items, &mut out),
            Request::BackupWrite { .. }
            | Request::BackupFree { .. }
            | Request::BackupGetReplicas { .. }
            | Request::BackupReadReplica { .. }
            | Request::BackupStartPartitioning { .. }
            | Request::BackupGetRecoveryData { .. } => match &self.backup {
                Some(backup) => backup.answer(id, &req, &mut out),
                None => no_backup(id, op, &mut out),
            },
            _ => encode_response(
                id,
                op,
                &Response::Error(status_body(Status::Internal)),
                &mut out,
            ),
        };
        if result.is_err() {
            out.clear();
            let _ = encode_response(
                id,
                op,
                &Response::Error(status_body(Status::Internal)),
                &mut out,
            );
        }
        out
    }

    /// One batch of `table_id`'s objects from `cursor` on. Checks the membership
    /// lease again after reading, as the request path does for every read.
    fn enumerate(
        &self,
        id: u64,
        table_id: u64,
        cursor: u64,
        max_bytes: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let mut objects = Vec::new();
        let max = max_bytes.clamp(1, MAX_ENUMERATE_BATCH_BYTES);
        let op = Opcode::Enumerate;
        let result = match self.store.enumerate(table_id, cursor, max, &mut objects) {
            Ok(next) => {
                let mut enc = EnumerateResponseEncoder::new(id, out);
                for o in &objects {
                    enc.push(o.version, &o.key, &o.value)?;
                }
                enc.finish(next.is_some(), next.unwrap_or(0))
            }
            // A tablet migrating in is enumerated once all of it has arrived
            // (design notes "Migration (Rocksteady)"): exactly once, R§3.
            Err(ReadError::UnknownTablet) if self.store.is_migrating_in(table_id, cursor) => {
                let body = status_body(read_status(ReadError::Migrating));
                encode_response(id, op, &Response::Error(body), out)
            }
            Err(e) => encode_response(id, op, &Response::Error(status_body(read_status(e))), out),
        };
        if let Some(refusal) = self.lease_lost_while_reading(op, self.clock.now()) {
            out.clear();
            let _ = encode_response(id, op, &Response::Error(refusal), out);
        }
        result
    }

    /// Recovers one partition of a crashed master (R§7.6) and answers what it
    /// replayed, or INTERNAL with the reason (the coordinator retries elsewhere).
    async fn recover_partition(self: Arc<Self>, id: u64, job: PartitionJob) -> Vec<u8> {
        let started = self.clock.now();
        let backups = self.recovery_client.clone();
        let replicas = self.replicas.clone();
        let result =
            recovery_master::recover_with(self.clone(), replicas, backups, job, self.blocking)
                .await;
        let mut out = Vec::new();
        let op = Opcode::RecoverPartition;
        let _ = match result {
            Ok(counts) => encode_response(
                id,
                op,
                &Response::RecoverPartition {
                    entries: counts.entries,
                    bytes: counts.bytes,
                    ctime: counts.ctime,
                },
                &mut out,
            ),
            Err(e) => answer_message(id, op, Status::Internal, &e.to_string(), &mut out),
        };
        self.metrics.record(Op::from(op), started.elapsed());
        out
    }
}

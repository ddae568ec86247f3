//! The storage server's RPC service: wire requests in, object store calls, wire
//! responses out (R§3, R Fig. 2).
//!
//! The fast path (read, write, remove, increment, multi-ops, ping) runs on the task
//! that read the request and does not allocate: requests are decoded in place,
//! values are copied once from the log straight into the connection's output buffer,
//! and responses are encoded into that buffer. Enumeration and dropping a tablet are
//! long work and run off the fast path (on the blocking pool), and so does every
//! backup request that may wait for the disk ([`crate::backup_service`]).
//!
//! A server started without a backup directory answers the backup opcodes with
//! INVALID_REQUEST ("no backup service"); it also enlists without the backup
//! service, so masters never pick it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use ramstore_clock::{Clock, Rng};
use ramstore_master::{ObjectStore, ReadError, RejectRules, WriteError};
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, Service};
use ramstore_wire::{
    decode_raw_header, decode_request, encode_error_response, encode_read_response_header,
    encode_response, EnumerateResponseEncoder, ErrorBody, MultiReadResponseEncoder,
    MultiRemoveResponseEncoder, MultiWriteResponseEncoder, NumberKind, Opcode, Request, Response,
    Status, WireError, WireRejectRules,
};

use crate::backup_service::{BackupService, ServerState};
use crate::metrics::{Metrics, Op};
use crate::recovery_master::{self, PartitionJob};
use crate::replica_manager::{BackupInfo, ReplicaManager, ReplicationError};
use ramstore_client::BackupClient;

/// The Redis front end's direct path onto this master (no native wire format).
mod direct;
/// Whether this master is refusing writes for lack of memory, and since when.
mod full_log;

pub use full_log::{FullLog, DEFAULT_NO_SPACE_WAIT_MS, MAX_NO_SPACE_WAIT_MS};

const _: () = assert!(ramstore_wire::MAX_KEY_BYTES == ramstore_log::MAX_KEY_BYTES);
const _: () = assert!(ramstore_wire::MAX_VALUE_BYTES == ramstore_log::MAX_VALUE_BYTES);
// A whole segment travels in one backup frame, and both ends cut frames alike.
const _: () = assert!(ramstore_wire::MAX_REPLICA_BYTES == ramstore_log::SEGMENT_BYTES);
const _: () =
    assert!(ramstore_wire::MAX_REPLICA_BYTES == ramstore_backup::FRAME_SEGMENT_BYTES as usize);
const _: () = assert!(ramstore_wire::MAX_FRAME_BYTES == ramstore_rpc::MAX_FRAME_BYTES);

/// The answer to a tablet notification meant for another server id (a process
/// that took over a dead server's address, or one not enlisted yet): the
/// coordinator retries it while that server is up, and drops it once it is not.
const NOT_THE_SERVER_MEANT: &str =
    "this server is not the server id the tablet notification is meant for";

/// The answer to a backup request sent to a server that runs no backup.
const NO_BACKUP_MESSAGE: &str =
    "this server runs no backup service (start it with --backup-dir DIR)";

/// Deadline of one bucket fetch during recovery (a whole segment's bucket).
const RECOVERY_FETCH_DEADLINE_MS: u64 = 10_000;

/// Largest batch an enumeration response carries; with whole hash buckets on top it
/// stays far below the frame limit.
pub const MAX_ENUMERATE_BATCH_BYTES: usize = 2 << 20;
/// A multi-read stops adding values past this many bytes and answers the rest RETRY,
/// so the response fits in one frame; the client asks again for those.
pub const MAX_MULTI_READ_RESPONSE_BYTES: usize = 6 << 20;

/// One entry of the server list the coordinator pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownServer {
    pub server_id: u64,
    pub up: bool,
    pub address: String,
    /// The server runs a backup service (may be chosen for replicas).
    pub backup: bool,
    /// Its failure domain (empty: the server is its own domain); see
    /// [`crate::placement`].
    pub failure_domain: String,
    /// Its backup's disk read speed in MB/s as measured at its start-up (0: no
    /// backup).
    pub backup_read_mbps: u32,
}

/// The storage server's service. Thread-safe; shared by every connection.
pub struct StorageService {
    store: ObjectStore,
    /// The master's replica manager; `None`: R = 0, writes live in DRAM only.
    replicas: Option<Arc<ReplicaManager>>,
    backup: Option<BackupService>,
    server_id: AtomicU64,
    pub(crate) server_list: Mutex<(u64, Vec<KnownServer>)>,
    /// Failure detection and zombie state (R§7.2, R§7.11; [`crate::failure_monitor`]).
    pub(crate) failure: crate::failure_monitor::FailureState,
    metrics: Metrics,
    /// Updates answered NO_SPACE, and whether the log is refusing writes now.
    full_log: FullLog,
    /// Connections over the server's limit, answered RETRY and closed.
    connections_refused: AtomicU64,
    /// The native port's connections, for their counters (set by the server).
    conns: Option<Arc<ramstore_rpc::ConnTable>>,
    /// Fetches crashed masters' entries from backups when this master recovers a
    /// partition (R§7.6).
    recovery_client: BackupClient,
    /// The store's clock: request timing, leases, the full-log record and every
    /// wait of this server (read once per request: one dynamic call, no lock).
    pub(crate) clock: Arc<dyn Clock>,
    /// Where this server's random choices (ping peers, nonces) come from.
    pub(crate) rng: Arc<dyn Rng>,
}

fn rules(w: &WireRejectRules) -> RejectRules {
    RejectRules {
        given_version: w.given_version,
        doesnt_exist: w.doesnt_exist,
        exists: w.exists,
        version_le_given: w.version_le_given,
        version_ne_given: w.version_ne_given,
        version_gt_given: w.version_gt_given,
    }
}

fn read_status(e: ReadError) -> Status {
    match e {
        ReadError::UnknownTablet => Status::UnknownTablet,
        ReadError::ObjectDoesntExist => Status::ObjectDoesntExist,
        ReadError::KeyTooLarge(_) => Status::TooLarge,
        _ => Status::Internal,
    }
}

fn write_status(e: WriteError) -> Status {
    match e {
        WriteError::UnknownTablet => Status::UnknownTablet,
        WriteError::ObjectDoesntExist => Status::ObjectDoesntExist,
        WriteError::ObjectExists => Status::ObjectExists,
        WriteError::WrongVersion { .. } => Status::WrongVersion,
        WriteError::KeyTooLarge(_) | WriteError::ValueTooLarge(_) => Status::TooLarge,
        WriteError::NotNumeric(_) => Status::NotNumeric,
        WriteError::Overflow => Status::Overflow,
        WriteError::NoSpace => Status::NoSpace,
        _ => Status::Internal,
    }
}

fn error_body(e: WriteError) -> ErrorBody<'static> {
    match e {
        WriteError::WrongVersion { current } => ErrorBody::WrongVersion {
            current_version: current,
        },
        other => ErrorBody::Message {
            status: write_status(other),
            message: "",
        },
    }
}

fn status_body(status: Status) -> ErrorBody<'static> {
    ErrorBody::Message {
        status,
        message: "",
    }
}

impl StorageService {
    /// A master only: backup requests are refused.
    pub fn new(store: ObjectStore) -> Self {
        Self::with_backup(store, None)
    }

    /// A master, and a backup if `backup` is given. It runs on its store's clock
    /// (`StoreConfig::clock`) and draws on the system's random source until
    /// [`StorageService::with_rng`].
    pub fn with_backup(store: ObjectStore, backup: Option<BackupService>) -> Self {
        let clock = store.clock().clone();
        let transport = ramstore_rpc::TcpTransport::with_clock(clock.clone());
        Self {
            store,
            replicas: None,
            backup,
            server_id: AtomicU64::new(0),
            server_list: Mutex::new((0, Vec::new())),
            failure: crate::failure_monitor::FailureState::new(clock.now()),
            metrics: Metrics::default(),
            full_log: FullLog::new(
                std::time::Duration::from_millis(DEFAULT_NO_SPACE_WAIT_MS),
                clock.now(),
            ),
            connections_refused: AtomicU64::new(0),
            conns: None,
            recovery_client: BackupClient::new(Arc::new(transport))
                .with_rpc_deadline(std::time::Duration::from_millis(RECOVERY_FETCH_DEADLINE_MS)),
            clock,
            rng: ramstore_clock::system_rng(),
        }
    }

    /// The same service drawing its random choices from `rng`.
    pub fn with_rng(mut self, rng: Arc<dyn Rng>) -> Self {
        self.rng = rng;
        self
    }

    /// The clock this server runs on (its store's).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The same service with `replicas` replicating its store's log (the store
    /// must have been created with it as its replica sink).
    pub fn with_replicas(mut self, replicas: Arc<ReplicaManager>) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// The same service, with `patience` for a full log: how long a run of
    /// NO_SPACE answers may last before the Redis front end answers refused writes
    /// `-OOM` at once ([`FullLog`], `ramstore server --no-space-wait-ms`).
    pub fn with_no_space_wait(mut self, patience: std::time::Duration) -> Self {
        self.full_log = FullLog::new(patience, self.clock.now());
        self
    }

    /// The master's record of refused writes: whether it is refusing writes for
    /// lack of memory now, and since when.
    pub fn full_log(&self) -> &FullLog {
        &self.full_log
    }

    /// The same service reporting the counters of the connection table `conns`
    /// (evictions and timeouts) in its statistics.
    pub fn with_conns(mut self, conns: Arc<ramstore_rpc::ConnTable>) -> Self {
        self.conns = Some(conns);
        self
    }

    /// The replica manager, if the master replicates.
    pub fn replicas(&self) -> Option<&Arc<ReplicaManager>> {
        self.replicas.as_ref()
    }

    pub fn store(&self) -> &ObjectStore {
        &self.store
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The backup service, if this server runs one.
    pub fn backup(&self) -> Option<&BackupService> {
        self.backup.as_ref()
    }

    /// The id the coordinator gave this server (0 before enlistment).
    pub fn server_id(&self) -> u64 {
        self.server_id.load(Ordering::SeqCst)
    }

    pub fn set_server_id(&self, id: u64) {
        self.server_id.store(id, Ordering::SeqCst);
    }

    /// The newest server list pushed by the coordinator.
    pub fn server_list(&self) -> (u64, Vec<KnownServer>) {
        self.server_list.lock().clone()
    }

    /// Answers one decoded request on the fast path; `Ok(false)` means "slow".
    fn dispatch(&self, id: u64, req: &Request<'_>, out: &mut Vec<u8>) -> Result<bool, WireError> {
        let op = req.opcode();
        match *req {
            Request::Ping { nonce, caller_id } => self.answer_ping(id, nonce, caller_id, out)?,
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
            } => match self.store.write(table_id, key, value, &rules(&r)) {
                Ok(version) => {
                    self.full_log.accepted();
                    encode_response(id, op, &Response::Write { version }, out)?
                }
                Err(e) => encode_response(id, op, &Response::Error(self.refused(e)), out)?,
            },
            Request::Remove {
                table_id,
                rules: r,
                key,
            } => match self.store.remove(table_id, key, &rules(&r)) {
                Ok(removed) => encode_response(
                    id,
                    op,
                    &Response::Remove {
                        existed: removed.is_some(),
                        version: removed.unwrap_or(0),
                    },
                    out,
                )?,
                Err(e) => encode_response(id, op, &Response::Error(self.refused(e)), out)?,
            },
            Request::Increment {
                table_id,
                rules: r,
                kind,
                delta,
                key,
            } => {
                let result = match kind {
                    NumberKind::I64 => self
                        .store
                        .increment_i64(table_id, key, i64::from_le_bytes(delta), &rules(&r))
                        .map(|(v, version)| (version, v.to_le_bytes())),
                    NumberKind::F64 => self
                        .store
                        .increment_f64(table_id, key, f64::from_le_bytes(delta), &rules(&r))
                        .map(|(v, version)| (version, v.to_le_bytes())),
                };
                match result {
                    Ok((version, value)) => {
                        self.full_log.accepted();
                        encode_response(id, op, &Response::Increment { version, value }, out)?
                    }
                    Err(e) => encode_response(id, op, &Response::Error(self.refused(e)), out)?,
                }
            }
            Request::MultiRead(items) => {
                let mut enc = MultiReadResponseEncoder::new(id, out);
                let mut bytes = 0usize;
                for item in items.iter() {
                    if bytes > MAX_MULTI_READ_RESPONSE_BYTES {
                        enc.push_error(Status::Retry)?;
                        continue;
                    }
                    let pushed = self.store.read_with(item.table_id, item.key, |view| {
                        self.note_read_durability(view);
                        bytes += view.value_len();
                        push_value(&mut enc, view)
                    });
                    match pushed {
                        Ok(r) => r?,
                        Err(e) => {
                            self.note_miss_durability(e);
                            enc.push_error(read_status(e))?
                        }
                    }
                }
                enc.finish()?;
            }
            Request::MultiWrite(items) => {
                let mut enc = MultiWriteResponseEncoder::new(id, out);
                for item in items.iter() {
                    match self
                        .store
                        .write(item.table_id, item.key, item.value, &rules(&item.rules))
                    {
                        Ok(version) => {
                            self.full_log.accepted();
                            enc.push(Status::Ok, version)?
                        }
                        Err(WriteError::WrongVersion { current }) => {
                            enc.push(Status::WrongVersion, current)?
                        }
                        Err(e) => enc.push(write_status(self.count_refusal(e)), 0)?,
                    }
                }
                enc.finish()?;
            }
            Request::MultiRemove(items) => {
                let mut enc = MultiRemoveResponseEncoder::new(id, out);
                for item in items.iter() {
                    match self
                        .store
                        .remove(item.table_id, item.key, &rules(&item.rules))
                    {
                        Ok(Some(v)) => enc.push(Status::Ok, true, v)?,
                        Ok(None) => enc.push(Status::Ok, false, 0)?,
                        Err(WriteError::WrongVersion { current }) => {
                            enc.push(Status::WrongVersion, false, current)?
                        }
                        Err(e) => enc.push(write_status(self.count_refusal(e)), false, 0)?,
                    }
                }
                enc.finish()?;
            }
            Request::TakeTabletOwnership { server_id, .. }
            | Request::DropTabletOwnership { server_id, .. }
                if server_id != self.server_id() =>
            {
                answer_message(id, op, Status::ServerNotUp, NOT_THE_SERVER_MEANT, out)?
            }
            Request::TakeTabletOwnership {
                table_id,
                start_hash,
                end_hash,
                ..
            } => match self.store.take_tablet(table_id, start_hash, end_hash) {
                Ok(()) => {
                    tracing::info!(table_id, start_hash, end_hash, "took tablet ownership");
                    encode_response(id, op, &Response::TakeTabletOwnership, out)?
                }
                Err(e) => answer_message(id, op, Status::InvalidRequest, &e.to_string(), out)?,
            },
            Request::ServerListUpdate {
                list_version,
                servers,
            } => {
                let mut list = self.server_list.lock();
                if list_version >= list.0 {
                    let servers = servers
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
                    *list = (list_version, servers);
                    // The backups replicas may go to; replicas on any other are
                    // re-created elsewhere (R§8).
                    if let Some(m) = &self.replicas {
                        m.set_backups(backups_of(&list.1, self.server_id()));
                    }
                }
                drop(list);
                // A list naming this server crashed makes it a zombie (R§7.11).
                self.note_server_list(&servers);
                // Zombie fence and restart retention (R§7.11, R§8); states only move
                // forward, so an older list is harmless here.
                if let Some(backup) = &self.backup {
                    let states: Vec<(u64, ServerState)> = servers
                        .iter()
                        .map(|s| (s.server_id, s.status.into()))
                        .collect();
                    backup.apply_server_list(&states);
                }
                encode_response(id, op, &Response::ServerListUpdate, out)?
            }
            Request::GetServerStats => {
                let text = self.stats_text();
                encode_response(id, op, &Response::GetServerStats { text: &text }, out)?
            }
            Request::Enumerate { .. }
            | Request::DropTabletOwnership { .. }
            | Request::RecoverPartition { .. }
            // Pings a suspect for the coordinator: async, see `handle_slow`.
            | Request::PingServer { .. } => return Ok(false),
            Request::BackupWrite { .. }
            | Request::BackupFree { .. }
            | Request::BackupGetReplicas { .. }
            | Request::BackupReadReplica { .. }
            | Request::BackupStartPartitioning { .. }
            | Request::BackupGetRecoveryData { .. } => match &self.backup {
                Some(backup) if backup.is_fast(req) => backup.answer(id, req, out)?,
                Some(_) => return Ok(false),
                None => no_backup(id, op, out)?,
            },
            // Coordinator operations sent to a storage server by mistake.
            Request::CreateTable { .. }
            | Request::GetTableId { .. }
            | Request::DropTable { .. }
            | Request::SplitTablet { .. }
            | Request::Enlist { .. }
            | Request::CrashServer { .. }
            | Request::SuspectServer { .. }
            | Request::RenewLease { .. }
            | Request::Leave { .. }
            | Request::GetTabletMap => answer_message(
                id,
                op,
                Status::InvalidRequest,
                "this is a storage server; send table operations to the coordinator",
                out,
            )?,
        }
        Ok(true)
    }

    fn read(
        &self,
        id: u64,
        table_id: u64,
        rules_w: &WireRejectRules,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let rules = rules(rules_w);
        let result = self.store.read_with(table_id, key, |view| {
            self.note_read_durability(view);
            rules.check(Some(view.version()))?;
            // The value goes from the log straight into the output buffer.
            let written = encode_read_response_header(id, view.version(), view.value_len(), out);
            if written.is_ok() {
                view.value_pieces(|piece| out.extend_from_slice(piece));
            }
            Ok(written)
        });
        match result {
            Ok(Ok(written)) => written,
            Ok(Err(e)) => encode_response(id, Opcode::Read, &Response::Error(error_body(e)), out),
            Err(e) => {
                self.note_miss_durability(e);
                encode_response(
                    id,
                    Opcode::Read,
                    &Response::Error(status_body(read_status(e))),
                    out,
                )
            }
        }
    }

    /// The error body of a refused update, counted when it is NO_SPACE.
    fn refused(&self, e: WriteError) -> ErrorBody<'static> {
        match self.count_refusal(e) {
            WriteError::NoSpace => ErrorBody::Message {
                status: Status::NoSpace,
                message: LOG_FULL_MESSAGE,
            },
            e => error_body(e),
        }
    }

    /// Counts NO_SPACE answers (the log is full until the cleaner frees space;
    /// clients retry them, so only this counter and the refusing-writes state show
    /// them to an operator) and notes them in [`FullLog`].
    fn count_refusal(&self, e: WriteError) -> WriteError {
        if matches!(e, WriteError::NoSpace) {
            self.full_log.refused(self.clock.now());
        }
        e
    }

    /// A master its backups fenced off (R§7.11: the coordinator declared it
    /// crashed) serves no object operation any more — not even a read, whose value
    /// may since have been overwritten on the master that recovered it.
    fn is_fenced_off(&self, op: Opcode) -> bool {
        let data_op = is_object_op(op);
        // A zombie (R§7.11, `crate::failure_monitor`) refuses them too.
        data_op && (self.is_zombie() || self.replicas.as_ref().is_some_and(|m| m.is_fenced()))
    }

    /// The refusal of an operation this master must not carry out now, checked
    /// before it runs: fenced off or a zombie (SERVER_NOT_UP), or not confirmed to
    /// be a live member (RETRY, [`Self::unconfirmed_refusal`]). Both
    /// `Service::handle` and the direct path (`direct`) call this one function, so
    /// their guards cannot drift apart.
    pub(crate) fn refusal(&self, op: Opcode, now: Instant) -> Option<ErrorBody<'static>> {
        if self.is_fenced_off(op) {
            return Some(ErrorBody::Message {
                status: Status::ServerNotUp,
                message: FENCED_MESSAGE,
            });
        }
        self.unconfirmed_refusal(op, now)
    }

    /// Marks the request as needing the replication wait if `view` lies in a
    /// segment not yet durable: a read never returns an object beyond the durable
    /// point (DESIGN §1).
    fn note_read_durability(&self, view: &ramstore_log::ObjectView<'_>) {
        let log = self.store.log();
        if self.replicas.is_some() && !log.is_read_durable(view.location()) {
            let (segment, offset) = log.position_of(view.location());
            let end = (segment, offset + view.entry_len());
            READ_SYNC_POINT.set(Some(READ_SYNC_POINT.get().map_or(end, |p| p.max(end))));
        }
    }

    /// Marks a read that found no object as needing the replication wait up to the
    /// log's newest point: the object may be absent because of a delete whose
    /// tombstone is not durable yet, and a master that crashes (or a zombie cut off
    /// from its backups) loses that delete, so answering "doesn't exist" at once
    /// would show a state that never became durable (DESIGN §1). The hash table
    /// keeps no trace of a deleted key, so the wait is for the whole log, not the
    /// tombstone's own place. Regression: the partition test's zombie probe saw a
    /// key read as absent from a cut-off master, then with its old value after
    /// recovery.
    fn note_miss_durability(&self, e: ReadError) {
        let Some(manager) = &self.replicas else {
            return;
        };
        if !matches!(e, ReadError::ObjectDoesntExist) {
            return;
        }
        if let Some(point) = manager.pending_sync_point() {
            READ_SYNC_POINT.set(Some(READ_SYNC_POINT.get().map_or(point, |p| p.max(point))));
        }
    }

    /// The server's statistics as `key=value` lines (GetServerStats).
    pub fn stats_text(&self) -> String {
        let s = self.store.stats();
        let mut text = String::new();
        let mut line = |k: &str, v: String| {
            text.push_str(k);
            text.push('=');
            text.push_str(&v);
            text.push('\n');
        };
        line("server_id", self.server_id().to_string());
        match &self.replicas {
            Some(m) => {
                let r = m.stats();
                line("durability", format!("R={}", r.replicas_per_segment));
                line("replication_rounds", r.rounds.to_string());
                line("replication_bytes", r.bytes_sent.to_string());
                line("replication_failures", r.rpc_failures.to_string());
                line("rereplications", r.rereplications.to_string());
                line("replicas_found_lost", r.replicas_found_lost.to_string());
                line("replica_checks", r.replica_checks.to_string());
                line("replicated_segments", r.segments.to_string());
            }
            None => line("durability", "dram-only".into()),
        }
        line("memory_bytes", s.log.memory_bytes.to_string());
        line("live_object_bytes", s.log.live_object_bytes.to_string());
        line("tombstone_bytes", s.log.tombstone_bytes.to_string());
        line("free_seglets", s.log.seglets_free.to_string());
        line("total_seglets", s.log.seglets_total.to_string());
        line("objects", s.objects.to_string());
        // Where the process's resident memory is (issue 17): the log, the hash
        // table, and the rest, which docs/design-notes.md bounds.
        crate::resident::ResidentSplit::measure(&self.store).stats_lines(&mut line);
        line("tablets", s.tablets.len().to_string());
        line("compactions", s.log.compactions.to_string());
        line("combined_passes", s.log.combined_passes.to_string());
        line("no_space_answers", self.full_log.answers().to_string());
        // Refusing writes for lack of memory: 1 while the writes since the last
        // accepted one were all answered NO_SPACE (L§7); for how long, in ms.
        let refusing = self.full_log.refusing_for(self.clock.now());
        line("refusing_writes", u8::from(refusing.is_some()).to_string());
        line(
            "refusing_writes_ms",
            refusing.map_or(0, |d| d.as_millis()).to_string(),
        );
        line(
            "connections_refused",
            self.connections_refused.load(Ordering::Relaxed).to_string(),
        );
        if let Some(conns) = &self.conns {
            let c = &conns.counters;
            line("connections_open", conns.len().to_string());
            line(
                "connections_evicted",
                c.evicted.load(Ordering::Relaxed).to_string(),
            );
            line(
                "connection_request_timeouts",
                c.request_timeouts.load(Ordering::Relaxed).to_string(),
            );
            line(
                "connection_idle_timeouts",
                c.idle_timeouts.load(Ordering::Relaxed).to_string(),
            );
        }
        match &self.backup {
            Some(backup) => backup.stats_lines(&mut line),
            None => line("backup", "off".into()),
        }
        for t in &s.tablets {
            line(
                &format!("tablet.{}.{:#018x}", t.table_id, t.start_hash),
                format!(
                    "{:#018x} entries={} bytes={}",
                    t.end_hash, t.entry_count, t.bytes
                ),
            );
        }
        text
    }

    fn slow(&self, frame: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let Ok((header, req)) = decode_request(frame) else {
            return out;
        };
        let id = header.request_id;
        let op = req.opcode();
        let result = match req {
            Request::Enumerate {
                table_id,
                cursor,
                max_bytes,
            } => {
                let result = self.enumerate(id, table_id, cursor, max_bytes as usize, &mut out);
                self.recheck_lease_after_read(id, op, 0, &mut out);
                result
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
            Request::BackupWrite { .. }
            | Request::BackupFree { .. }
            | Request::BackupGetReplicas { .. }
            | Request::BackupReadReplica { .. }
            | Request::BackupStartPartitioning { .. }
            | Request::BackupGetRecoveryData { .. } => match &self.backup {
                Some(backup) => backup.answer(id, &req, &mut out),
                // `dispatch` answers these itself when there is no backup.
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
        match self.store.enumerate(table_id, cursor, max, &mut objects) {
            Ok(next) => {
                let mut enc = EnumerateResponseEncoder::new(id, out);
                for o in &objects {
                    enc.push(o.version, &o.key, &o.value)?;
                }
                enc.finish(next.is_some(), next.unwrap_or(0))
            }
            Err(e) => encode_response(
                id,
                Opcode::Enumerate,
                &Response::Error(status_body(read_status(e))),
                out,
            ),
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

thread_local! {
    /// Set by a read that found an object whose segment is not yet durable: the
    /// furthest point (segment id, end offset) of the log that must be durable
    /// before the answer goes out — the end of the furthest object read, not the
    /// log's newest point, so a read never waits for writes made after its objects
    /// (which may not be able to replicate at all while backups are full).
    static READ_SYNC_POINT: std::cell::Cell<Option<(u64, usize)>> =
        const { std::cell::Cell::new(None) };
}

/// Opcodes whose answer waits until the log is durable up to where it stood when
/// they finished (R§4.2; a rejected conditional write too: its answer reflects
/// writes that may not be durable yet).
fn waits_for_replication(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Write
            | Opcode::Remove
            | Opcode::Increment
            | Opcode::MultiWrite
            | Opcode::MultiRemove
    ) || (is_read(op) && READ_SYNC_POINT.get().is_some())
}

fn is_read(op: Opcode) -> bool {
    matches!(op, Opcode::Read | Opcode::MultiRead)
}

impl StorageService {
    /// Answers at once, or defers the response appended at `out[mark..]` until
    /// the log is durable up to the current sync point for an update, or up to the
    /// end of the furthest object read for a read (DESIGN §5 "Write" and "Read"). A wait that times out answers RETRY: the write is in the log and
    /// may become durable later; the client's retry writes it again.
    fn after_replication(&self, id: u64, op: Opcode, mark: usize, out: &mut Vec<u8>) -> Handled {
        let Some((manager, point)) = self.durability_wait(op) else {
            return Handled::Done;
        };
        let response = out[mark..].to_vec();
        out.truncate(mark);
        Handled::Deferred(Box::pin(async move {
            let mut answer = Vec::new();
            match manager.wait_durable(point).await {
                Ok(()) => return response,
                Err(ReplicationError::Fenced) => answer_fenced(id, op, &mut answer),
                Err(_) => {
                    let _ = encode_response(
                        id,
                        op,
                        &Response::Error(ErrorBody::Retry {
                            delay_ms: RETRY_AFTER_REPLICATION_TIMEOUT_MS,
                        }),
                        &mut answer,
                    );
                }
            }
            answer
        }))
    }
}

impl StorageService {
    /// What the answer to `op`, just carried out on this thread, must wait for: the
    /// replica manager and the log point that must be durable first, or `None` to
    /// answer at once. Shared by `after_replication` and the direct path.
    fn durability_wait(&self, op: Opcode) -> Option<(Arc<ReplicaManager>, (u64, usize))> {
        let manager = self.replicas.as_ref()?;
        if !waits_for_replication(op) {
            return None;
        }
        let point = if is_read(op) {
            // `waits_for_replication` saw a point.
            READ_SYNC_POINT
                .get()
                .filter(|&point| !manager.is_durable(point))?
        } else {
            manager.pending_sync_point()?
        };
        Some((manager.clone(), point))
    }
}

impl AsRef<ObjectStore> for StorageService {
    fn as_ref(&self) -> &ObjectStore {
        &self.store
    }
}

impl StorageService {
    /// Recovers one partition of a crashed master (R§7.6) and answers what it
    /// replayed, or INTERNAL with the reason (the coordinator retries elsewhere).
    async fn recover_partition(self: Arc<Self>, id: u64, job: PartitionJob) -> Vec<u8> {
        let started = self.clock.now();
        let backups = self.recovery_client.clone();
        let replicas = self.replicas.clone();
        let result = recovery_master::recover(self.clone(), replicas, backups, job).await;
        let mut out = Vec::new();
        let op = Opcode::RecoverPartition;
        let _ = match result {
            Ok(counts) => encode_response(
                id,
                op,
                &Response::RecoverPartition {
                    entries: counts.entries,
                    bytes: counts.bytes,
                },
                &mut out,
            ),
            Err(e) => answer_message(id, op, Status::Internal, &e.to_string(), &mut out),
        };
        self.metrics
            .record(Op::from(op), self.clock.elapsed(started));
        out
    }
}

/// The delay a RETRY to a connection over the limit asks for.
const RETRY_AFTER_REFUSED_CONNECTION_MS: u32 = 100;

/// The delay a RETRY after a replication timeout asks for.
const RETRY_AFTER_REPLICATION_TIMEOUT_MS: u32 = 50;

impl Service for StorageService {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        // The request path reads the clock here and once at the end: a dynamic
        // call each, no lock, no allocation.
        let started = self.clock.now();
        let mark = out.len();
        let (op, outcome) = match decode_request(frame) {
            Ok((header, req)) => {
                let op = req.opcode();
                READ_SYNC_POINT.set(None);
                if let Some(body) = self.refusal(op, started) {
                    let _ = encode_response(header.request_id, op, &Response::Error(body), out);
                    self.metrics
                        .record(Op::from(op), self.clock.elapsed(started));
                    return Handled::Done;
                }
                match self.dispatch(header.request_id, &req, out) {
                    Ok(true) => {
                        self.recheck_lease_after_read(header.request_id, op, mark, out);
                        (
                            Some(op),
                            self.after_replication(header.request_id, op, mark, out),
                        )
                    }
                    Ok(false) => return Handled::Slow,
                    Err(e) => {
                        out.truncate(mark);
                        answer_bad_request(frame, &e, out);
                        (Some(op), Handled::Done)
                    }
                }
            }
            Err(e) => {
                answer_bad_request(frame, &e, out);
                (None, Handled::Done)
            }
        };
        self.metrics.record(
            op.map_or(Op::Invalid, Op::from),
            self.clock.elapsed(started),
        );
        outcome
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
        if let Some(answer) = self.ping_server_answer(&frame) {
            return answer;
        }
        if let Ok((header, req)) = decode_request(&frame) {
            if let Some(job) = PartitionJob::from_request(&req) {
                return Box::pin(self.recover_partition(header.request_id, job));
            }
        }
        Box::pin(async move {
            let started = self.clock.now();
            // `handle` decoded this frame before calling it slow.
            let op = decode_raw_header(&frame)
                .ok()
                .and_then(|h| Opcode::try_from(h.opcode).ok())
                .map_or(Op::Invalid, Op::from);
            let service = self.clone();
            let response = tokio::task::spawn_blocking(move || service.slow(&frame))
                .await
                .unwrap_or_default();
            self.metrics.record(op, self.clock.elapsed(started));
            response
        })
    }
}

/// Whether `op` reads or changes objects (what a fenced, zombie or frozen master
/// refuses, R§7.11).
pub(crate) fn is_object_op(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Read
            | Opcode::Write
            | Opcode::Remove
            | Opcode::Increment
            | Opcode::MultiRead
            | Opcode::MultiWrite
            | Opcode::MultiRemove
            | Opcode::Enumerate
    )
}

/// Appends an error response with `status` and a message for humans.
fn answer_message(
    id: u64,
    op: Opcode,
    status: Status,
    message: &str,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    encode_response(
        id,
        op,
        &Response::Error(ErrorBody::Message { status, message }),
        out,
    )
}

/// Answers an object operation sent to a fenced-off master: SERVER_NOT_UP, so the
/// client asks the coordinator where the tablet is now.
fn answer_fenced(id: u64, op: Opcode, out: &mut Vec<u8>) {
    let _ = answer_message(id, op, Status::ServerNotUp, FENCED_MESSAGE, out);
}

/// Why a fenced-off master refuses object operations.
const FENCED_MESSAGE: &str = "this master was declared crashed (its backups fence it off)";

/// The message of a NO_SPACE answer (L§7: the log is full until its cleaner frees
/// space, or for good if the live data leaves no room).
const LOG_FULL_MESSAGE: &str = "the log is full (refusing writes until the cleaner frees space)";

/// Answers a backup request sent to a server that runs no backup.
fn no_backup(id: u64, op: Opcode, out: &mut Vec<u8>) -> Result<(), WireError> {
    answer_message(id, op, Status::InvalidRequest, NO_BACKUP_MESSAGE, out)
}

/// Answers a request that did not decode: its status says why, with the request id
/// and opcode from the raw header when those could be read; otherwise nothing can be
/// answered and the frame is dropped.
fn answer_bad_request(frame: &[u8], err: &WireError, out: &mut Vec<u8>) {
    if let Ok(raw) = decode_raw_header(frame) {
        let message = err.to_string();
        let _ = encode_error_response(
            raw.request_id,
            raw.opcode,
            &ErrorBody::for_wire_error(err, &message),
            out,
        );
    }
}

//! The coordinator's RPC service: a dispatcher that decodes each request, hands
//! it to the part that owns what it asks about, and encodes the answer (R§3, R§9).
//!
//! The parts, each owning its state, each in a file named for it (dependencies
//! point from the dispatcher to the parts, never back; `scripts/check-module-cycles`):
//! - [`Cluster`] (`cluster.rs`): the core behind its lock, transport, clock, rng.
//! - [`Notifier`] (`notifier.rs`): carries out the core's actions and retries
//!   failed notifications ([`Self::retry_loop`]).
//! - [`Changes`] (`changes.rs`): tables, tablet splits, enlistment, crash drills,
//!   clean leaves.
//! - [`MembershipGuard`] (`membership.rs`): zombie answers and membership leases.
//! - [`SuspicionDriver`] (`suspicion_driver.rs`): pings every UP server, confirms
//!   suspected failures from several paths and declares crashed the servers none
//!   reaches ([`Self::failure_detector_loop`]; R§7.2, R§7.3, R§7.11).
//! - [`RecoveryDriver`] (`recovery.rs`): recovers crashed masters
//!   ([`Self::recovery_loop`]; R§7.4–7.10).
//! - `stats.rs`: the `key=value` statistics.

use std::sync::Arc;

use ramstore_clock::{Clock, Rng};
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, Service, Transport};
use ramstore_wire::{
    decode_request, encode_response, ErrorBody, Opcode, Request, Response, Status,
    TabletMapEncoder, WireError,
};

use crate::changes::{Changes, Enlistment};
use crate::client_leases::{ClientLeases, CLIENT_LEASE_TERM_MS};
use crate::cluster::Cluster;
use crate::coordinator::CoordinatorCore;
use crate::error::CoordinatorError;
use crate::failure_detector::FailureDetectorConfig;
use crate::membership::MembershipGuard;
use crate::migration::Migrator;
use crate::notifier::Notifier;
use crate::recovery::{Recoveries, RecoveryDriver};
use crate::server_list::{ServerId, MAX_FAILURE_DOMAIN_BYTES};
use crate::suspicion_driver::SuspicionDriver;

pub use crate::notifier::{NOTIFY_DEADLINE_MS, RETRY_INTERVAL_MS};

// Every failure domain the coordinator accepts fits the server list it pushes.
const _: () = assert!(MAX_FAILURE_DOMAIN_BYTES == ramstore_wire::MAX_FAILURE_DOMAIN_BYTES);

/// The coordinator service: the dispatcher and the parts it holds. Thread-safe.
pub struct CoordinatorService {
    cluster: Arc<Cluster>,
    notifier: Arc<Notifier>,
    changes: Changes,
    membership: Arc<MembershipGuard>,
    suspicion: Arc<SuspicionDriver>,
    recovery: Arc<RecoveryDriver>,
    migrator: Arc<Migrator>,
    client_leases: ClientLeases,
}

fn error_status(e: &CoordinatorError) -> Status {
    match e {
        CoordinatorError::TableDoesntExist(_) => Status::TableDoesntExist,
        CoordinatorError::BadName(_)
        | CoordinatorError::BadAddress { .. }
        | CoordinatorError::BadFailureDomain { .. }
        | CoordinatorError::BadServerSpan(_) => Status::InvalidRequest,
        CoordinatorError::NoMasters => Status::Retry,
        CoordinatorError::NotOneTablet { .. }
        | CoordinatorError::BadMigrationTarget { .. }
        | CoordinatorError::MigrationInProgress(_)
        | CoordinatorError::MigrationRefused(_)
        | CoordinatorError::TargetLacksMemory { .. }
        | CoordinatorError::NoSuchMigration(_)
        | CoordinatorError::CannotCancel { .. } => Status::InvalidRequest,
        CoordinatorError::ServerDidNotAnswer(_) => Status::Retry,
        CoordinatorError::UnknownLease(_) => Status::UnknownLease,
        _ => Status::Internal,
    }
}

fn encode_error(
    id: u64,
    op: Opcode,
    e: &CoordinatorError,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let status = error_status(e);
    let message = e.to_string();
    let body = match status {
        Status::Retry => ErrorBody::Retry { delay_ms: 200 },
        status => ErrorBody::Message {
            status,
            message: &message,
        },
    };
    encode_response(id, op, &Response::Error(body), out)
}

impl CoordinatorService {
    /// A service over `core`, whose timers run on `clock` and whose random
    /// choices come from `rng`; queues every notification a restarted coordinator
    /// must resend.
    pub fn new(
        core: CoordinatorCore,
        transport: Arc<dyn Transport>,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
    ) -> Arc<Self> {
        let reissue = core.reissue_actions();
        let client_leases = ClientLeases::new(core.storage(), clock.clone(), CLIENT_LEASE_TERM_MS);
        let cluster = Arc::new(Cluster::new(core, transport, clock, rng));
        let notifier = Arc::new(Notifier::new(cluster.clone(), reissue));
        let membership = Arc::new(MembershipGuard::new(cluster.clone()));
        Arc::new(Self {
            changes: Changes::new(cluster.clone(), notifier.clone()),
            suspicion: Arc::new(SuspicionDriver::new(
                cluster.clone(),
                notifier.clone(),
                membership.clone(),
            )),
            recovery: Arc::new(RecoveryDriver::new(cluster.clone(), notifier.clone())),
            migrator: Arc::new(Migrator::new(cluster.clone(), notifier.clone())),
            membership,
            notifier,
            cluster,
            client_leases,
        })
    }

    /// Grants and renews client leases for `term_ms` from now on
    /// (`ramstore coordinator --client-lease-term-ms`; see
    /// [`ClientLeases::set_term_ms`]).
    pub fn set_client_lease_term_ms(&self, term_ms: u64) {
        self.client_leases.set_term_ms(term_ms);
    }

    /// Read access to the core (tests, status).
    pub fn with_core<R>(&self, f: impl FnOnce(&CoordinatorCore) -> R) -> R {
        f(&self.cluster.core())
    }

    /// Retries failed notifications forever; spawn it once.
    pub async fn retry_loop(self: Arc<Self>) {
        // Migrations a previous coordinator left half-started (R§9).
        tokio::spawn(self.migrator.clone().resume());
        self.notifier.retry_loop().await
    }

    /// Runs failure detection forever (R§7.2, R§7.3); spawn it once. See
    /// [`SuspicionDriver::run`].
    pub async fn failure_detector_loop(self: Arc<Self>, config: FailureDetectorConfig) {
        self.suspicion.clone().run(config).await
    }

    /// Recovers every crashed master that owns tablets, forever (spawn once). See
    /// [`crate::recovery`].
    pub async fn recovery_loop(self: Arc<Self>) {
        self.recovery.clone().run().await
    }

    /// `key=value` lines describing the cluster: servers, tables and recoveries.
    pub fn stats_text(&self) -> String {
        crate::stats::stats_text(&self.cluster, self.recovery.recoveries())
    }

    /// Crash recoveries in progress and completed.
    pub fn recoveries(&self) -> &Recoveries {
        self.recovery.recoveries()
    }

    /// Answers one request (all coordinator requests but ping run here, off the fast
    /// path: they write to external storage and may wait on other servers).
    async fn answer(&self, frame: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let Ok((header, req)) = decode_request(frame) else {
            return out;
        };
        let id = header.request_id;
        let op = req.opcode();
        let result = self.answer_request(id, op, &req, &mut out).await;
        if result.is_err() {
            out.clear();
            let _ = encode_response(
                id,
                op,
                &Response::Error(ErrorBody::Message {
                    status: Status::Internal,
                    message: "response encoding failed",
                }),
                &mut out,
            );
        }
        out
    }

    /// Hands `req` to the part that owns it and encodes its answer: each request
    /// family has a function of its own, tried in turn; a request none of them
    /// takes was sent to the wrong kind of server.
    async fn answer_request(
        &self,
        id: u64,
        op: Opcode,
        req: &Request<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        if let Some(answer) = self.answer_table_request(req).await {
            return encode_answer(id, op, answer, out);
        }
        if let Some(answer) = self.answer_membership_change(req) {
            return encode_answer(id, op, answer, out);
        }
        if let Some(answer) = self.answer_migration_request(req).await {
            return encode_answer(id, op, answer, out);
        }
        if let Some(answer) = self.answer_client_lease(req) {
            return encode_answer(id, op, answer, out);
        }
        if let Request::ListMigrations = req {
            // Asks the targets how far they are, so it is answered here.
            let text = self.migrator.list_text().await;
            return encode_response(id, op, &Response::ListMigrations { text: &text }, out);
        }
        if let Some(encoded) = self.answer_self_encoding(id, op, req, out) {
            return encoded;
        }
        misdirected(id, op, req, out)
    }

    /// Tables and tablet splits (R§4.2), owned by [`Changes`] and the core; `None`
    /// for a request of another family.
    async fn answer_table_request(
        &self,
        req: &Request<'_>,
    ) -> Option<Result<Response<'static>, CoordinatorError>> {
        Some(match *req {
            Request::CreateTable { server_span, name } => {
                let created = self.changes.create_table(name, server_span).await;
                created.map(|table_id| Response::CreateTable { table_id })
            }
            Request::GetTableId { name } => {
                let found = self.cluster.core().get_table_id(name);
                found.map(|table_id| Response::GetTableId { table_id })
            }
            Request::DropTable { name } => {
                let dropped = self.changes.drop_table(name).await;
                dropped.map(|()| Response::DropTable)
            }
            Request::SplitTablet { name, split_hash } => {
                let split = self.changes.split_tablet(name, split_hash).await;
                split.map(|()| Response::SplitTablet)
            }
            _ => return None,
        })
    }

    /// Servers joining, crashing on an operator's word, and leaving (R§3, R§7);
    /// `None` for a request of another family.
    fn answer_membership_change(
        &self,
        req: &Request<'_>,
    ) -> Option<Result<Response<'static>, CoordinatorError>> {
        Some(match *req {
            Request::Enlist {
                replaces_server_id,
                services,
                memory_bytes,
                backup_read_mbps,
                address,
                failure_domain,
            } => self
                .changes
                .enlist(Enlistment {
                    replaces: (replaces_server_id != 0).then_some(ServerId(replaces_server_id)),
                    services: services.bits(),
                    memory_bytes,
                    backup_read_mbps,
                    address,
                    failure_domain,
                })
                .map(|server_id| Response::Enlist {
                    server_id: server_id.0,
                }),
            Request::CrashServer { server_id } => self
                .changes
                .crash_server(server_id)
                .map(|()| Response::CrashServer),
            Request::Leave { server_id } => self.changes.leave(server_id).map(|()| Response::Leave),
            _ => return None,
        })
    }

    /// Live migration (K§2.3), owned by the [`Migrator`]; `None` for a request of
    /// another family.
    async fn answer_migration_request(
        &self,
        req: &Request<'_>,
    ) -> Option<Result<Response<'static>, CoordinatorError>> {
        Some(match *req {
            Request::MigrateTablet {
                name,
                start_hash,
                end_hash,
                target_server_id,
                mode,
            } => self
                .migrator
                .migrate(
                    name,
                    (start_hash, end_hash),
                    ServerId(target_server_id),
                    mode,
                )
                .await
                .map(|migration_id| Response::MigrateTablet { migration_id }),
            Request::MigrationDone {
                migration_id,
                bytes,
                objects,
            } => self
                .migrator
                .done(migration_id, bytes, objects)
                .await
                .map(|()| Response::MigrationDone),
            Request::CancelMigration { migration_id } => self
                .migrator
                .cancel(migration_id)
                .await
                .map(|()| Response::CancelMigration),
            _ => return None,
        })
    }

    /// Client leases (RIFL §4.2): open, renew, check; `None` for a request of
    /// another family.
    fn answer_client_lease(
        &self,
        req: &Request<'_>,
    ) -> Option<Result<Response<'static>, CoordinatorError>> {
        let leases = &self.client_leases;
        Some(match *req {
            Request::ClientLease { lease_id: 0 } => {
                leases.open().map(|(lease_id, term)| Response::ClientLease {
                    lease_id,
                    lease_ms: u32::try_from(term).unwrap_or(u32::MAX),
                })
            }
            Request::ClientLease { lease_id } => {
                leases.renew(lease_id).map(|term| Response::ClientLease {
                    lease_id,
                    lease_ms: u32::try_from(term).unwrap_or(u32::MAX),
                })
            }
            Request::CheckClientLease { lease_id } => leases
                .is_live(lease_id)
                .map(|live| Response::CheckClientLease { live }),
            _ => return None,
        })
    }

    /// Answers that encode themselves: a tablet map streams its entries, the
    /// statistics borrow a string built here, and failure detection and zombie
    /// checks are answered by their parts (R§7.2, R§7.11). `None` for a request of
    /// another family.
    fn answer_self_encoding(
        &self,
        id: u64,
        op: Opcode,
        req: &Request<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Result<(), WireError>> {
        Some(match *req {
            Request::GetTabletMap => self.encode_tablet_map(id, out),
            Request::GetServerStats => {
                let text = self.stats_text();
                encode_response(id, op, &Response::GetServerStats { text: &text }, out)
            }
            Request::Ping { nonce, caller_id } => {
                self.membership.answer_ping(id, nonce, caller_id, out)
            }
            Request::SuspectServer {
                caller_id,
                server_id,
            } => self.suspicion.answer_suspect(id, caller_id, server_id, out),
            Request::RenewLease { caller_id } => {
                self.membership.answer_renew_lease(id, caller_id, out)
            }
            _ => return None,
        })
    }

    /// The tablet map, streamed into `out`.
    fn encode_tablet_map(&self, id: u64, out: &mut Vec<u8>) -> Result<(), WireError> {
        let (version, tablets) = self.cluster.core().tablet_map();
        let mut enc = TabletMapEncoder::new(id, version, out);
        for (t, address) in &tablets {
            enc.push(t.table_id, t.start_hash, t.end_hash, t.server_id.0, address)?;
        }
        enc.finish()
    }
}

/// Encodes the answer of a request family that answers with a response or an error.
fn encode_answer(
    id: u64,
    op: Opcode,
    answer: Result<Response<'_>, CoordinatorError>,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    match answer {
        Ok(response) => encode_response(id, op, &response, out),
        Err(e) => encode_error(id, op, &e, out),
    }
}

/// A request for a storage server, sent to the coordinator: refused as invalid.
fn misdirected(id: u64, op: Opcode, req: &Request<'_>, out: &mut Vec<u8>) -> Result<(), WireError> {
    let message = match req {
        Request::PingServer { .. } => {
            "this is the coordinator; PingServer is a storage-server operation"
        }
        _ => "this is the coordinator; send object operations to a master",
    };
    invalid(id, op, message, out)
}

/// INVALID_REQUEST with `message`.
fn invalid(id: u64, op: Opcode, message: &str, out: &mut Vec<u8>) -> Result<(), WireError> {
    let body = ErrorBody::Message {
        status: Status::InvalidRequest,
        message,
    };
    encode_response(id, op, &Response::Error(body), out)
}

impl Service for CoordinatorService {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        match decode_request(frame) {
            // A ping from a server (caller_id ≠ 0) checks its status: slow path.
            Ok((
                header,
                Request::Ping {
                    nonce,
                    caller_id: 0,
                },
            )) => {
                let _ = encode_response(
                    header.request_id,
                    Opcode::Ping,
                    &Response::Ping {
                        nonce,
                        server_id: 0,
                    },
                    out,
                );
                Handled::Done
            }
            Ok(_) => Handled::Slow,
            Err(e) => {
                if let Ok(raw) = ramstore_wire::decode_raw_header(frame) {
                    let message = e.to_string();
                    let _ = ramstore_wire::encode_error_response(
                        raw.request_id,
                        raw.opcode,
                        &ErrorBody::for_wire_error(&e, &message),
                        out,
                    );
                }
                Handled::Done
            }
        }
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move { self.answer(&frame).await })
    }
}

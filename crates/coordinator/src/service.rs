//! The coordinator's RPC service: tables, tablet map, enlistment, and carrying out
//! the actions the core decides (R§3, R§9).
//!
//! Every state change is persisted by [`CoordinatorCore`] before it is acted on.
//! Notifications to servers (take/drop/split tablet, server list) are then sent;
//! those that fail are kept and retried in the background until they succeed or the
//! server leaves the list. Every notification is idempotent, so resending is safe —
//! which is also how a restarted coordinator finishes what its predecessor started
//! ([`CoordinatorCore::reissue_actions`]).
//!
//! [`CoordinatorService::failure_detector_loop`] (in [`crate::suspicion`]) pings every
//! UP server, confirms suspected failures from several paths and declares crashed
//! the servers none reaches (R§7.2, R§7.3, R§7.11).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_clock::{Clock, Rng};
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, Service, Transport};
use ramstore_wire::{
    decode_request, decode_response, encode_request, encode_response, ErrorBody, Opcode, Request,
    Response, ServerListEntry, ServerListUpdateEncoder, ServerStatus as WireStatus, Services,
    Status, TabletMapEncoder, WireError,
};

use crate::coordinator::{Action, CoordinatorCore};
use crate::error::CoordinatorError;
use crate::server_list::{ServerId, ServerStatus, MAX_FAILURE_DOMAIN_BYTES};

// Every failure domain the coordinator accepts fits the server list it pushes.
const _: () = assert!(MAX_FAILURE_DOMAIN_BYTES == ramstore_wire::MAX_FAILURE_DOMAIN_BYTES);

/// Deadline of one notification to a server.
pub const NOTIFY_DEADLINE_MS: u64 = 2_000;
/// How often failed notifications are retried.
pub const RETRY_INTERVAL_MS: u64 = 500;

/// The coordinator service. Thread-safe.
pub struct CoordinatorService {
    pub(crate) core: Mutex<CoordinatorCore>,
    pub(crate) transport: Arc<dyn Transport>,
    /// Suspected failures waiting for confirmation ([`crate::suspicion`]).
    pub(crate) suspicions: crate::suspicion::Suspicions,
    /// Notifications that failed and must be sent again.
    unfinished: Mutex<Vec<Action>>,
    /// Crash recoveries in progress ([`crate::recovery`]).
    pub(crate) recoveries: crate::recovery::Recoveries,
    /// The failure detector's bookkeeping, shared with lease grants
    /// ([`crate::lease`]).
    pub(crate) liveness: crate::lease::Liveness,
    /// The time every timer, deadline and lease here runs on.
    pub(crate) clock: Arc<dyn Clock>,
    /// Where nonces, helper choices and recovery ids come from.
    pub(crate) rng: Arc<dyn Rng>,
}

fn error_status(e: &CoordinatorError) -> Status {
    match e {
        CoordinatorError::TableDoesntExist(_) => Status::TableDoesntExist,
        CoordinatorError::BadName(_)
        | CoordinatorError::BadAddress { .. }
        | CoordinatorError::BadFailureDomain { .. }
        | CoordinatorError::BadServerSpan(_) => Status::InvalidRequest,
        CoordinatorError::NoMasters => Status::Retry,
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
        Arc::new(Self {
            core: Mutex::new(core),
            transport,
            suspicions: Default::default(),
            unfinished: Mutex::new(reissue),
            recoveries: Default::default(),
            liveness: crate::lease::Liveness::new(clock.clone()),
            clock,
            rng,
        })
    }

    /// Read access to the core (tests, status).
    pub fn with_core<R>(&self, f: impl FnOnce(&CoordinatorCore) -> R) -> R {
        f(&self.core.lock())
    }

    /// Retries failed notifications forever; spawn it once.
    pub async fn retry_loop(self: Arc<Self>) {
        loop {
            let pending = std::mem::take(&mut *self.unfinished.lock());
            if !pending.is_empty() {
                self.carry_out(pending).await;
            }
            self.clock
                .sleep(Duration::from_millis(RETRY_INTERVAL_MS))
                .await;
        }
    }

    /// Sends the notifications for `actions`; failures are queued for retry.
    pub(crate) async fn carry_out(&self, actions: Vec<Action>) {
        for action in actions {
            if !self.still_relevant(&action) {
                continue;
            }
            if !self.send(&action).await {
                tracing::warn!(?action, "notification failed; will retry");
                self.unfinished.lock().push(action);
            }
        }
    }

    /// An action for a server that has left the list is moot.
    fn still_relevant(&self, action: &Action) -> bool {
        let target = match action {
            Action::TakeTablet { server_id, .. }
            | Action::DropTablet { server_id, .. }
            | Action::SplitTablet { server_id, .. } => *server_id,
            _ => return true,
        };
        self.core
            .lock()
            .server(target)
            .is_some_and(|s| s.status == ServerStatus::Up)
    }

    async fn send(&self, action: &Action) -> bool {
        match action {
            Action::TakeTablet {
                server_id,
                address,
                table_id,
                start_hash,
                end_hash,
            } => {
                let req = Request::TakeTabletOwnership {
                    server_id: server_id.0,
                    table_id: *table_id,
                    start_hash: *start_hash,
                    end_hash: *end_hash,
                };
                self.notify(address, &req).await
            }
            Action::DropTablet {
                server_id,
                address,
                table_id,
                start_hash,
                end_hash,
            } => {
                let req = Request::DropTabletOwnership {
                    server_id: server_id.0,
                    table_id: *table_id,
                    start_hash: *start_hash,
                    end_hash: *end_hash,
                };
                self.notify(address, &req).await
            }
            Action::SplitTablet {
                server_id,
                address,
                table_id,
                split_hash,
            } => {
                // A master learns of a split as ownership of the upper half, which
                // lies inside a tablet it owns; it splits its tablet to match.
                let end = self.core.lock().tablet_map().1.iter().find_map(|(t, _)| {
                    (t.table_id == *table_id && t.start_hash == *split_hash).then_some(t.end_hash)
                });
                let Some(end_hash) = end else { return true };
                let req = Request::TakeTabletOwnership {
                    server_id: server_id.0,
                    table_id: *table_id,
                    start_hash: *split_hash,
                    end_hash,
                };
                self.notify(address, &req).await
            }
            Action::PushServerList => {
                self.push_server_list().await;
                true
            }
        }
    }

    async fn notify(&self, address: &str, req: &Request<'_>) -> bool {
        let mut frame = Vec::new();
        if encode_request(0, req, &mut frame).is_err() {
            return true;
        }
        let deadline = Duration::from_millis(NOTIFY_DEADLINE_MS);
        match self.transport.call(address, frame, deadline).await {
            Ok(bytes) => matches!(decode_response(&bytes), Ok((h, _)) if h.status == Status::Ok),
            Err(_) => false,
        }
    }

    /// Sends the server list to every UP server; a server that misses it gets the
    /// next one (lists are versioned and complete).
    async fn push_server_list(&self) {
        let (version, servers) = self.core.lock().server_list();
        let mut frame = Vec::new();
        let mut enc = ServerListUpdateEncoder::new(0, version, &mut frame);
        for s in &servers {
            let status = match s.status {
                ServerStatus::Up => WireStatus::Up,
                ServerStatus::Crashed => WireStatus::Crashed,
                _ => WireStatus::Removed,
            };
            let services = Services {
                master: s.is_master(),
                backup: s.is_backup(),
                replicated_log: s.has_replicated_log(),
            };
            let entry = ServerListEntry {
                server_id: s.id.0,
                status,
                services,
                backup_read_mbps: s.backup_read_mbps,
                address: &s.address,
                failure_domain: &s.failure_domain,
            };
            if enc.push(&entry).is_err() {
                return;
            }
        }
        if enc.finish().is_err() {
            return;
        }
        let deadline = Duration::from_millis(NOTIFY_DEADLINE_MS);
        for s in servers.iter().filter(|s| s.status == ServerStatus::Up) {
            let _ = self
                .transport
                .call(&s.address, frame.clone(), deadline)
                .await;
        }
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

    async fn answer_request(
        &self,
        id: u64,
        op: Opcode,
        req: &Request<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        match *req {
            Request::CreateTable { server_span, name } => {
                let result = self.core.lock().create_table(name, server_span);
                match result {
                    Ok((table_id, actions)) => {
                        tracing::info!(name, table_id, server_span, "table created");
                        self.carry_out(actions).await;
                        encode_response(id, op, &Response::CreateTable { table_id }, out)
                    }
                    Err(e) => encode_error(id, op, &e, out),
                }
            }
            Request::GetTableId { name } => match self.core.lock().get_table_id(name) {
                Ok(table_id) => encode_response(id, op, &Response::GetTableId { table_id }, out),
                Err(e) => encode_error(id, op, &e, out),
            },
            Request::DropTable { name } => {
                let result = self.core.lock().drop_table(name);
                match result {
                    Ok(actions) => {
                        tracing::info!(name, "table dropped");
                        self.carry_out(actions).await;
                        encode_response(id, op, &Response::DropTable, out)
                    }
                    Err(e) => encode_error(id, op, &e, out),
                }
            }
            Request::SplitTablet { name, split_hash } => {
                let result = self.core.lock().split_tablet(name, split_hash);
                match result {
                    Ok(actions) => {
                        self.carry_out(actions).await;
                        encode_response(id, op, &Response::SplitTablet, out)
                    }
                    Err(e) => encode_error(id, op, &e, out),
                }
            }
            Request::Enlist {
                replaces_server_id,
                services,
                memory_bytes,
                backup_read_mbps,
                address,
                failure_domain,
            } => {
                let replaces = (replaces_server_id != 0).then_some(ServerId(replaces_server_id));
                let bits = services.bits();
                let result = self.core.lock().enlist(
                    address,
                    bits,
                    memory_bytes,
                    failure_domain,
                    backup_read_mbps,
                    replaces,
                );
                match result {
                    Ok((server_id, actions)) => {
                        tracing::info!(
                            server_id = server_id.0,
                            server = %ramstore_wire::server_id::Show(server_id.0),
                            address,
                            failure_domain,
                            backup_read_mbps,
                            "server enlisted"
                        );
                        // Answer first: the new server learns its id, then its tablets
                        // arrive (TakeTabletOwnership is idempotent and retried).
                        let queued = actions;
                        self.unfinished.lock().extend(queued);
                        encode_response(
                            id,
                            op,
                            &Response::Enlist {
                                server_id: server_id.0,
                            },
                            out,
                        )
                    }
                    Err(e) => encode_error(id, op, &e, out),
                }
            }
            Request::GetTabletMap => {
                let (version, tablets) = self.core.lock().tablet_map();
                let mut enc = TabletMapEncoder::new(id, version, out);
                for (t, address) in &tablets {
                    enc.push(t.table_id, t.start_hash, t.end_hash, t.server_id.0, address)?;
                }
                enc.finish()
            }
            Request::GetServerStats => {
                let text = self.stats_text();
                encode_response(id, op, &Response::GetServerStats { text: &text }, out)
            }
            // An operator's drill (`ramstore crash-server`): recovered like any
            // crash (R§7).
            Request::CrashServer { server_id } => {
                let result = self.core.lock().server_crashed(ServerId(server_id));
                match result {
                    Ok(actions) => {
                        tracing::warn!(server_id, "server declared crashed by an operator");
                        self.unfinished.lock().extend(actions);
                        encode_response(id, op, &Response::CrashServer, out)
                    }
                    Err(e) => encode_error(id, op, &e, out),
                }
            }
            // A server stopping cleanly (SIGINT/SIGTERM): its data is recovered now,
            // as a restart's (design notes "Server identity across restarts").
            Request::Leave { server_id } => {
                let result = self.core.lock().server_left(ServerId(server_id));
                match result {
                    Ok(actions) => {
                        if !actions.is_empty() {
                            tracing::info!(
                                server = %ramstore_wire::server_id::Show(server_id),
                                "server stopped cleanly; its data is recovered from its backups (a restart, R§7)"
                            );
                        }
                        self.unfinished.lock().extend(actions);
                        encode_response(id, op, &Response::Leave, out)
                    }
                    Err(e) => encode_error(id, op, &e, out),
                }
            }
            // Failure detection and zombies (R§7.2, R§7.11; `crate::suspicion`).
            Request::Ping { nonce, caller_id } => {
                self.answer_server_ping(id, nonce, caller_id, out)
            }
            Request::SuspectServer {
                caller_id,
                server_id,
            } => self.answer_suspect(id, caller_id, server_id, out),
            Request::RenewLease { caller_id } => self.answer_renew_lease(id, caller_id, out),
            Request::PingServer { .. } => encode_response(
                id,
                op,
                &Response::Error(ErrorBody::Message {
                    status: Status::InvalidRequest,
                    message: "this is the coordinator; PingServer is a storage-server operation",
                }),
                out,
            ),
            _ => encode_response(
                id,
                op,
                &Response::Error(ErrorBody::Message {
                    status: Status::InvalidRequest,
                    message: "this is the coordinator; send object operations to a master",
                }),
                out,
            ),
        }
    }

    /// `key=value` lines describing the cluster: servers and tables.
    pub fn stats_text(&self) -> String {
        let core = self.core.lock();
        let mut text = String::from("role=coordinator\n");
        let (list_version, servers) = core.server_list();
        text.push_str(&format!("server_list_version={list_version}\n"));
        for s in &servers {
            let status = match s.status {
                ServerStatus::Up => "up",
                ServerStatus::Crashed => "crashed",
                _ => "removed",
            };
            text.push_str(&format!(
                "server.{}={} {} memory_bytes={} services={} failure_domain={} backup_read_mbps={}{}\n",
                s.id.0,
                s.address,
                status,
                s.memory_bytes,
                s.services,
                s.failure_domain,
                s.backup_read_mbps,
                if s.stopped_cleanly { " stopped_cleanly=1" } else { "" }
            ));
        }
        // The name goes last in the value: it may contain '=' or spaces (never a
        // line break: names with control characters are refused).
        for t in core.tables() {
            text.push_str(&format!("table.{}={} {}\n", t.id, t.tablets.len(), t.name));
        }
        drop(core);
        text.push_str(&format!(
            "recoveries_completed={}\n",
            self.recoveries.completed()
        ));
        for (id, p) in self.recoveries.in_progress() {
            text.push_str(&format!(
                "recovery.{id}=attempt={} partitions_done={} partitions_total={} entries_replayed={} bytes_replayed={} state={}\n",
                p.attempt, p.partitions_done, p.partitions_total, p.entries_replayed, p.bytes_replayed, p.state
            ));
        }
        text
    }

    /// Crash recoveries in progress and completed.
    pub fn recoveries(&self) -> &crate::recovery::Recoveries {
        &self.recoveries
    }
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

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
//! [`CoordinatorService::failure_detector_loop`] pings every UP server and declares
//! crashed those that stop answering (R§7.2, R§7.3; the decisions are in
//! [`crate::failure_detector`]).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, Service, Transport};
use ramstore_wire::{
    decode_request, decode_response, encode_request, encode_response, ErrorBody, Opcode, Request,
    Response, ServerListEntry, ServerListUpdateEncoder, ServerStatus as WireStatus, Services,
    Status, TabletMapEncoder, WireError,
};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::coordinator::{Action, CoordinatorCore};
use crate::error::CoordinatorError;
use crate::failure_detector::{FailureDetector, FailureDetectorConfig};
use crate::server_list::{ServerId, ServerStatus, MAX_FAILURE_DOMAIN_BYTES};

// Every failure domain the coordinator accepts fits the server list it pushes.
const _: () = assert!(MAX_FAILURE_DOMAIN_BYTES == ramstore_wire::MAX_FAILURE_DOMAIN_BYTES);

/// Deadline of one notification to a server.
pub const NOTIFY_DEADLINE_MS: u64 = 2_000;
/// How often failed notifications are retried.
pub const RETRY_INTERVAL_MS: u64 = 500;

/// The coordinator service. Thread-safe.
pub struct CoordinatorService {
    core: Mutex<CoordinatorCore>,
    transport: Arc<dyn Transport>,
    /// Notifications that failed and must be sent again.
    unfinished: Mutex<Vec<Action>>,
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
    /// A service over `core`; queues every notification a restarted coordinator must
    /// resend.
    pub fn new(core: CoordinatorCore, transport: Arc<dyn Transport>) -> Arc<Self> {
        let reissue = core.reissue_actions();
        Arc::new(Self {
            core: Mutex::new(core),
            transport,
            unfinished: Mutex::new(reissue),
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
            tokio::time::sleep(Duration::from_millis(RETRY_INTERVAL_MS)).await;
        }
    }

    /// Runs the failure detector forever (R§7.2, R§7.3; [`crate::failure_detector`]);
    /// spawn it once. Every `ping_interval_ms` it pings each UP server that has no
    /// ping in flight, all concurrently, each with
    /// [`FailureDetectorConfig::ping_deadline_ms`]. A server none of whose pings
    /// succeeded for `failure_timeout_ms` is declared crashed
    /// ([`CoordinatorCore::server_crashed`]) and the actions that returns (the new
    /// server list) are carried out like every other notification. If recording the
    /// crash fails (external storage), it is tried again on the next tick.
    ///
    /// A ping counts as answered only by an OK Ping response echoing its nonce, from
    /// that server id (or 0: a server that has not learned its id yet), so a new
    /// process on a dead server's address does not keep the dead one alive.
    pub async fn failure_detector_loop(self: Arc<Self>, config: FailureDetectorConfig) {
        let origin = tokio::time::Instant::now();
        let now_ms = move || u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        let deadline = Duration::from_millis(config.ping_deadline_ms());
        let mut detector = FailureDetector::new(config);
        // Owned by this task: when it is aborted, so are its pings and pushes.
        let mut pings: JoinSet<(ServerId, bool)> = JoinSet::new();
        let mut notifications: JoinSet<()> = JoinSet::new();
        let mut tick = tokio::time::interval(Duration::from_millis(config.ping_interval_ms));
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut nonce = 0u64;
        loop {
            tokio::select! {
                Some(done) = pings.join_next() => {
                    // A ping task cannot panic; an aborted one only happens at stop.
                    if let Ok((id, answered)) = done {
                        if answered {
                            detector.ping_succeeded(id, now_ms());
                        } else {
                            detector.ping_failed(id);
                        }
                    }
                }
                Some(_) = notifications.join_next() => {}
                _ = tick.tick() => {
                    let up: Vec<(ServerId, String)> = self
                        .core
                        .lock()
                        .state()
                        .servers()
                        .entries()
                        .iter()
                        .filter(|e| e.is_up())
                        .map(|e| (e.id, e.address.clone()))
                        .collect();
                    let now = now_ms();
                    detector.set_up_servers(up, now);
                    for id in detector.overdue(now) {
                        let result = self.core.lock().server_crashed(id);
                        match result {
                            Ok(actions) => {
                                tracing::warn!(
                                    server_id = id.0,
                                    failure_timeout_ms = config.failure_timeout_ms,
                                    "server answered no ping within the failure timeout: declared crashed"
                                );
                                detector.forget(id);
                                let this = self.clone();
                                notifications.spawn(async move { this.carry_out(actions).await });
                            }
                            Err(e) => tracing::error!(
                                server_id = id.0,
                                error = %e,
                                "cannot record a crashed server; will try again"
                            ),
                        }
                    }
                    for (id, address) in detector.pings_due() {
                        nonce = nonce.wrapping_add(1);
                        let this = self.clone();
                        let n = nonce;
                        pings.spawn(async move {
                            let answered = this.ping(&address, id, n, deadline).await;
                            (id, answered)
                        });
                    }
                }
            }
        }
    }

    /// Pings server `id` at `address`; whether it answered as itself (see
    /// [`Self::failure_detector_loop`]).
    async fn ping(&self, address: &str, id: ServerId, nonce: u64, deadline: Duration) -> bool {
        let mut frame = Vec::new();
        if encode_request(0, &Request::Ping { nonce }, &mut frame).is_err() {
            return false;
        }
        match self.transport.call(address, frame, deadline).await {
            Ok(bytes) => matches!(
                decode_response(&bytes),
                Ok((h, Response::Ping { nonce: echoed, server_id }))
                    if h.status == Status::Ok
                        && echoed == nonce
                        && (server_id == 0 || server_id == id.0)
            ),
            Err(_) => false,
        }
    }

    /// Sends the notifications for `actions`; failures are queued for retry.
    async fn carry_out(&self, actions: Vec<Action>) {
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
                address,
                table_id,
                start_hash,
                end_hash,
                ..
            } => {
                let req = Request::TakeTabletOwnership {
                    table_id: *table_id,
                    start_hash: *start_hash,
                    end_hash: *end_hash,
                };
                self.notify(address, &req).await
            }
            Action::DropTablet {
                address,
                table_id,
                start_hash,
                end_hash,
                ..
            } => {
                let req = Request::DropTabletOwnership {
                    table_id: *table_id,
                    start_hash: *start_hash,
                    end_hash: *end_hash,
                };
                self.notify(address, &req).await
            }
            Action::SplitTablet {
                address,
                table_id,
                split_hash,
                ..
            } => {
                // A master learns of a split as ownership of the upper half, which
                // lies inside a tablet it owns; it splits its tablet to match.
                let end = self.core.lock().tablet_map().1.iter().find_map(|(t, _)| {
                    (t.table_id == *table_id && t.start_hash == *split_hash).then_some(t.end_hash)
                });
                let Some(end_hash) = end else { return true };
                let req = Request::TakeTabletOwnership {
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
                "server.{}={} {} memory_bytes={} services={} failure_domain={} backup_read_mbps={}\n",
                s.id.0,
                s.address,
                status,
                s.memory_bytes,
                s.services,
                s.failure_domain,
                s.backup_read_mbps
            ));
        }
        // The name goes last in the value: it may contain '=' or spaces (never a
        // line break: names with control characters are refused).
        for t in core.tables() {
            text.push_str(&format!("table.{}={} {}\n", t.id, t.tablets.len(), t.name));
        }
        text
    }
}

impl Service for CoordinatorService {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        match decode_request(frame) {
            Ok((header, Request::Ping { nonce })) => {
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

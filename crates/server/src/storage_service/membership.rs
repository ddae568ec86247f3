//! The service's side of membership (R§7.2, R§7.11): the zombie state and lease
//! it keeps in its [`MembershipGuard`](crate::membership_guard::MembershipGuard),
//! answering `Ping` and `PingServer`, and reading server lists for its own fate.
//! The failure monitor's rounds ([`crate::failure_monitor`]) call into this; this
//! never calls the monitor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_rpc::server::SlowFuture;
use ramstore_wire::{
    encode_response, ErrorBody, Opcode, Response, ServerListEntries, ServerStatus, WireError,
};

use super::StorageService;
use crate::membership_guard::{Monitor, ZombieHook};
use crate::ping::{not_up, ping, Pinged};

impl StorageService {
    /// Whether this server learned it is a zombie: it serves no object operation.
    pub fn is_zombie(&self) -> bool {
        self.failure.is_zombie()
    }

    /// Sets what happens when this server learns it is a zombie (once; later calls
    /// are ignored).
    pub fn set_zombie_hook(&self, hook: ZombieHook) {
        self.failure.set_hook(hook);
    }

    /// This server learned it was declared crashed (R§7.11): from now on it refuses
    /// object operations, and it calls its zombie hook (once).
    pub fn declare_zombie(&self, reason: &str) {
        self.failure.declare_zombie(self.server_id(), reason);
    }

    /// This server begins a clean stop (it is about to send `Leave`): a "not UP"
    /// answer from now on is the Leave's echo, not a zombie verdict
    /// ([`MembershipGuard::begin_leave`]).
    pub fn begin_leave(&self) {
        self.failure.begin_leave();
    }

    /// Starts the lease check and `PingServer` answers with the failure monitor's
    /// transport and timing (once; later calls are ignored).
    pub(crate) fn start_monitoring(&self, monitor: Monitor) {
        let _ = self.failure.start_monitoring(monitor);
    }

    /// A membership lease of `lease_ms` granted for a renewal sent at `sent`.
    pub(crate) fn extend_lease(&self, sent: Instant, lease_ms: u64) {
        self.failure.extend_lease(sent, lease_ms);
    }

    /// Whether `caller_id` (0: not a server) is listed CRASHED or removed here.
    /// Callers this server does not know yet (just enlisted) are not refused.
    pub(crate) fn caller_not_up(&self, caller_id: u64) -> bool {
        caller_id != 0
            && self
                .server_list
                .lock()
                .1
                .iter()
                .any(|s| s.server_id == caller_id && !s.up)
    }

    /// Answers a `Ping`: the echo, or SERVER_NOT_UP "you are not UP in the cluster"
    /// to a caller listed CRASHED or removed (R§7.11: that is how a zombie learns).
    pub(crate) fn answer_ping(
        &self,
        id: u64,
        nonce: u64,
        caller_id: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let response = if self.caller_not_up(caller_id) {
            not_up()
        } else {
            Response::Ping {
                nonce,
                server_id: self.server_id(),
            }
        };
        encode_response(id, Opcode::Ping, &response, out)
    }

    /// Notes a server list: one naming this server CRASHED or removed makes it a
    /// zombie (R§7.11; statuses only move forward, so even an old list is right).
    pub(crate) fn note_server_list(&self, servers: &ServerListEntries<'_>) {
        let me = self.server_id();
        if me != 0
            && servers
                .iter()
                .any(|s| s.server_id == me && s.status != ServerStatus::Up)
        {
            self.declare_zombie("the server list names this server crashed or removed");
        }
    }

    /// The RETRY body for an object operation while this server holds no
    /// membership lease at `now` (see [`crate::failure_monitor`]), else `None`. The
    /// request path ([`super::request_path`]) asks before an object operation
    /// runs, and again after a read.
    pub(crate) fn unconfirmed_refusal(&self, now: Instant) -> Option<ErrorBody<'static>> {
        self.failure.refusal(now)
    }

    /// The answer to `PingServer` request `id` (the coordinator asks this server to
    /// ping `server_id` at `address`, a suspect, C§4.1).
    pub(crate) fn ping_server_answer(
        self: &Arc<Self>,
        id: u64,
        server_id: u64,
        address: &str,
    ) -> SlowFuture {
        let address = address.to_owned();
        let this = self.clone();
        Box::pin(async move {
            let answered = this.ping_for_coordinator(server_id, &address).await;
            let mut out = Vec::new();
            let _ = encode_response(
                id,
                Opcode::PingServer,
                &Response::PingServer { answered },
                &mut out,
            );
            out
        })
    }

    /// Pings `server_id` at `address` as the coordinator asked: whether it answered
    /// as itself. A server that is not monitoring (an in-process test server)
    /// cannot ping.
    async fn ping_for_coordinator(&self, server_id: u64, address: &str) -> bool {
        let Some(m) = self.failure.monitor() else {
            return false;
        };
        let nonce = self.rng.next_u64();
        let timeout = Duration::from_millis(m.config.ping_timeout_ms);
        let got = ping(
            &*m.transport,
            address,
            server_id,
            self.server_id(),
            nonce,
            timeout,
        )
        .await;
        if got == Pinged::NotUp {
            self.declare_zombie("a ping it sent was answered 'you are not UP'");
        }
        got == Pinged::Answered
    }
}

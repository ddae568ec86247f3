//! Carrying out the core's actions: tablet notifications and server-list pushes
//! (R§3, R§9). Every state change is persisted by the core before it is acted
//! on; the notifications are then sent, and those that fail are kept and retried
//! in the background until they succeed or their server leaves the list. Every
//! notification is idempotent, so resending is safe — which is also how a
//! restarted coordinator finishes what its predecessor started
//! ([`crate::CoordinatorCore::reissue_actions`]).
//!
//! Thread-safety: [`Notifier`] owns the queue of unfinished notifications behind
//! a short lock; any task may call it.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_wire::{
    decode_response, encode_request, Request, ServerListEntry, ServerListUpdateEncoder,
    ServerStatus as WireStatus, Services, Status,
};
use tokio::task::JoinSet;

use crate::cluster::Cluster;
use crate::coordinator::Action;
use crate::server_list::{ServerEntry, ServerStatus};

/// Deadline of one notification to a server.
pub const NOTIFY_DEADLINE_MS: u64 = 2_000;
/// How often failed notifications are retried.
pub const RETRY_INTERVAL_MS: u64 = 500;
/// Server-list pushes in flight at once. One at a time, a push took N round
/// trips, and every membership change (a crash, the end of a recovery) waits
/// for its push: at 200 simulated servers the push after a recovery took 1.2 s,
/// growing linearly with N (issue 22, docs/bench-notes/scale22-session39.md).
/// Bounded, not all N at once, so a 1,000-server cluster's push does not hold
/// a thousand calls (and copies of the list) at once.
pub const PUSH_IN_FLIGHT: usize = 64;

/// Sends the core's actions and retries those that failed. Thread-safe.
pub struct Notifier {
    cluster: Arc<Cluster>,
    /// Notifications that failed and must be sent again.
    unfinished: Mutex<Vec<Action>>,
}

impl Notifier {
    /// A notifier whose first retry round sends `pending` (a restarted
    /// coordinator's reissued actions).
    pub fn new(cluster: Arc<Cluster>, pending: Vec<Action>) -> Self {
        Self {
            cluster,
            unfinished: Mutex::new(pending),
        }
    }

    /// Queues `actions` for the next retry round instead of sending them now (an
    /// answer that must go out first, e.g. a new server's id before its tablets).
    pub fn queue(&self, actions: Vec<Action>) {
        self.unfinished.lock().extend(actions);
    }

    /// Retries failed notifications forever; spawn it once.
    pub async fn retry_loop(&self) {
        loop {
            let pending = std::mem::take(&mut *self.unfinished.lock());
            if !pending.is_empty() {
                self.carry_out(pending).await;
            }
            self.cluster
                .clock
                .sleep(Duration::from_millis(RETRY_INTERVAL_MS))
                .await;
        }
    }

    /// Sends the notifications for `actions`; failures are queued for retry.
    pub async fn carry_out(&self, actions: Vec<Action>) {
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
        match action {
            Action::TakeTablet { server_id, .. }
            | Action::DropTablet { server_id, .. }
            | Action::SplitTablet { server_id, .. }
            | Action::TakeMigratingTablet { server_id, .. } => self.cluster.is_up(*server_id),
            _ => true,
        }
    }

    pub(crate) async fn send(&self, action: &Action) -> bool {
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
                self.notify_split(server_id.0, address, *table_id, *split_hash)
                    .await
            }
            Action::PushServerList => {
                self.push_server_list().await;
                true
            }
            Action::TakeMigratingTablet {
                server_id,
                address,
                record,
                source_address,
            } => {
                let req = Request::TakeMigratingTablet {
                    server_id: server_id.0,
                    table_id: record.table_id,
                    start_hash: record.start_hash,
                    end_hash: record.end_hash,
                    migration_id: record.id,
                    source_server_id: record.source.0,
                    safe_version: record.safe_version,
                    source_address,
                    mode: record.mode,
                };
                self.notify(address, &req).await
            }
        }
    }

    /// A master learns of a split as ownership of the upper half, which lies
    /// inside a tablet it owns; it splits its tablet to match. A split whose upper
    /// half is gone (the table was dropped since) is moot.
    async fn notify_split(
        &self,
        server_id: u64,
        address: &str,
        table_id: u64,
        split_hash: u64,
    ) -> bool {
        let end = self
            .cluster
            .core()
            .tablet_map()
            .1
            .iter()
            .find_map(|(t, _)| {
                (t.table_id == table_id && t.start_hash == split_hash).then_some(t.end_hash)
            });
        let Some(end_hash) = end else { return true };
        let req = Request::TakeTabletOwnership {
            server_id,
            table_id,
            start_hash: split_hash,
            end_hash,
        };
        self.notify(address, &req).await
    }

    async fn notify(&self, address: &str, req: &Request<'_>) -> bool {
        let mut frame = Vec::new();
        if encode_request(0, req, &mut frame).is_err() {
            return true;
        }
        let deadline = Duration::from_millis(NOTIFY_DEADLINE_MS);
        match self.cluster.transport.call(address, frame, deadline).await {
            Ok(bytes) => matches!(decode_response(&bytes), Ok((h, _)) if h.status == Status::Ok),
            Err(_) => false,
        }
    }

    /// Sends the server list to every UP server, [`PUSH_IN_FLIGHT`] at a time; a
    /// server that misses it gets the next one (lists are versioned and
    /// complete, and a server applies only a newer one, so pushes that overlap
    /// or arrive out of order change nothing).
    async fn push_server_list(&self) {
        let (version, servers) = self.cluster.core().server_list();
        let Some(frame) = server_list_frame(version, &servers) else {
            return;
        };
        let deadline = Duration::from_millis(NOTIFY_DEADLINE_MS);
        let mut up = servers
            .iter()
            .filter(|s| s.status == ServerStatus::Up)
            .map(|s| s.address.clone());
        let mut sending = JoinSet::new();
        loop {
            while sending.len() < PUSH_IN_FLIGHT {
                let Some(address) = up.next() else { break };
                let (transport, frame) = (self.cluster.transport.clone(), frame.clone());
                sending.spawn(async move {
                    let _ = transport.call(&address, frame, deadline).await;
                });
            }
            if sending.join_next().await.is_none() {
                break;
            }
        }
    }
}

/// The `ServerListUpdate` frame for list `version` of `servers`; `None` if it
/// cannot be encoded (every entry the core accepts fits, so never in practice).
fn server_list_frame(version: u64, servers: &[ServerEntry]) -> Option<Vec<u8>> {
    let mut frame = Vec::new();
    let mut enc = ServerListUpdateEncoder::new(0, version, &mut frame);
    for s in servers {
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
        enc.push(&entry).ok()?;
    }
    enc.finish().ok()?;
    Some(frame)
}

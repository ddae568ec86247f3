//! The master's lease-expiry loop (RIFL §4.2): completion records of a client
//! whose lease expired are garbage, and only the coordinator knows when a lease
//! expires (`ramstore_coordinator::client_leases`).
//!
//! Every `interval_ms` of the server's clock the loop takes the client leases
//! not used since its previous round (and the unverified ones:
//! `ramstore_master::rifl::expired`) and asks the coordinator `CheckClientLease`
//! about each. An expired lease is dropped whole
//! (`ObjectStore::expire_client_lease`): its records become dead bytes the
//! cleaner reclaims, and a late retry is answered `STALE_RPC`. A live one is
//! kept (and an unverified one admitted). No answer leaves the lease as it is:
//! forgetting records on a guess could run a retry twice.
//!
//! It runs on the Clock and Transport seams, so the simulator runs it too.

use std::sync::Arc;
use std::time::Duration;

use ramstore_rpc::Transport;
use ramstore_wire::{decode_response, Request, Response, Status};
use tracing::Instrument;

use crate::failure_monitor::coordinator_answer;
use crate::storage_service::StorageService;

/// Default pause between rounds, in ms: a sixth of the coordinator's client
/// lease term (`CLIENT_LEASE_TERM_MS`, 30 s), so an expired lease's records go
/// within about 35 s of its last renewal.
pub const DEFAULT_CLIENT_LEASE_CHECK_MS: u64 = 5_000;

/// What one round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Leases the coordinator said are live.
    pub live: usize,
    /// Leases the coordinator said expired (their records were dropped).
    pub expired: usize,
    /// Leases the coordinator did not answer about (kept).
    pub unanswered: usize,
}

/// Starts the loop for `service`, asking `coordinator` (addresses separated by
/// commas) every `interval_ms`; 0 starts nothing. Abort the task to stop.
pub fn start(
    service: Arc<StorageService>,
    transport: Arc<dyn Transport>,
    coordinator: String,
    interval_ms: u64,
) -> Option<tokio::task::JoinHandle<()>> {
    if interval_ms == 0 {
        return None;
    }
    let task = async move {
        let clock = service.clock.clone();
        let mut tick = ramstore_clock::interval(&clock, Duration::from_millis(interval_ms));
        loop {
            tick.tick().await;
            if service.is_zombie() {
                return;
            }
            let round = check_once(&service, &*transport, &coordinator).await;
            if round.expired > 0 {
                tracing::debug!(?round, "client leases checked");
            }
        }
    };
    Some(tokio::spawn(task.in_current_span()))
}

/// One round: asks the coordinator about every lease the store wants checked
/// and acts on the answers.
pub async fn check_once(
    service: &StorageService,
    transport: &dyn Transport,
    coordinator: &str,
) -> Round {
    let store = service.store();
    let mut round = Round::default();
    for lease_id in store.client_leases_to_check() {
        let request = Request::CheckClientLease { lease_id };
        let answer = coordinator_answer(&service.clock, transport, coordinator, &request).await;
        match answer.as_deref().map(decode_response) {
            Some(Ok((h, Response::CheckClientLease { live }))) if h.status == Status::Ok => {
                if live {
                    store.client_lease_is_live(lease_id);
                    round.live += 1;
                } else {
                    store.expire_client_lease(lease_id);
                    round.expired += 1;
                }
            }
            _ => round.unanswered += 1,
        }
    }
    round
}

//! Randomized failure detection and zombie self-detection on a storage server
//! (R§7.2, R§7.11).
//!
//! **Pinging (R§7.2).** Every [`MonitorConfig::ping_interval_ms`] the server pings
//! one other UP server of its server list, chosen at random, with
//! [`MonitorConfig::ping_timeout_ms`]. A failed ping (no answer in time, a refused or
//! reset connection, a wrong answer) is reported to the coordinator with
//! `SuspectServer`; the coordinator confirms from other paths before declaring
//! anything (`ramstore_coordinator::suspicion`). With no other UP server, the server
//! pings the coordinator instead, to check its own status. The coordinator also asks
//! servers to ping a suspect for it (`PingServer`, answered by
//! `StorageService::ping_server_answer`).
//!
//! **Zombies (R§7.11).** A server the coordinator declared crashed may still run
//! (it was hung, or cut off). It learns its fate when
//! (a) a ping it sends is answered SERVER_NOT_UP (the receiver lists it CRASHED or
//! removed: `StorageService::answer_ping`),
//! (b) its replica manager is fenced (its backups refuse it),
//! (c) the coordinator answers its `SuspectServer` or `Ping` with SERVER_NOT_UP, or
//! (d) a server list names its own id CRASHED or removed.
//! Then it stops serving object operations at once ([`StorageService::is_zombie`])
//! and calls its zombie hook ([`ZombieHook`]; the `ramstore` binary exits).
//!
//! **Membership lease (design notes "Membership leases").** A zombie must not serve
//! a read that a recovery master may since have overwritten (R§7.11) — whether it
//! was frozen (SIGSTOP, a VM pause, with requests queued on its sockets), cut off
//! from the cluster but not from its clients, or cut off with a group of peers that
//! still list it UP. So a monitored server answers object operations RETRY unless
//! it holds a lease from the coordinator: every ping interval it sends
//! `RenewLease`; a grant of `lease_ms` counts from when the request was *sent*, and
//! the coordinator grants one only while the server answers its pings, so the lease
//! ends before the coordinator can declare the server crashed for silence
//! (`ramstore_coordinator::lease`). Only the coordinator grants: a peer's view may
//! lag (a group cut off together would vouch for each other). Reads check the
//! lease again after reading, so a freeze between the check and the read cannot
//! slip a stale value out. The price: while no coordinator answers (a failover), a
//! server serves until its lease ends, then answers RETRY until one does.

use std::sync::Arc;
use std::time::Duration;

use ramstore_clock::{Clock, Interval};
use ramstore_rpc::Transport;
use ramstore_wire::{decode_response, encode_request, Request, Response, Status};
use rand::seq::SliceRandom;
use rand::Rng;
use tracing::Instrument;

// The timing and hook are the membership guard's; named here too, where the
// binary and the tests have always found them.
pub use crate::membership_guard::{
    MembershipGuard as FailureState, MonitorConfig, ZombieHook, DEFAULT_PING_INTERVAL_MS,
    DEFAULT_PING_TIMEOUT_MS, MAX_MONITOR_MS,
};
pub use crate::ping::NOT_UP_MESSAGE;

use crate::membership_guard::Monitor;
use crate::ping::{ping, Pinged};
use crate::storage_service::StorageService;

/// Deadline of a `SuspectServer` report or a status ping to the coordinator.
pub const COORDINATOR_CALL_DEADLINE_MS: u64 = 1_000;

/// Starts monitoring for `service` (enlisted as its server id): pings a random UP
/// server every interval and reports failures to `coordinator` (addresses separated
/// by commas: tried in order); `hook` runs if the server learns it is a zombie.
/// Returns the task; abort it to stop.
pub fn start(
    service: Arc<StorageService>,
    transport: Arc<dyn Transport>,
    coordinator: String,
    config: MonitorConfig,
    hook: Option<ZombieHook>,
) -> tokio::task::JoinHandle<()> {
    if let Some(hook) = hook {
        service.set_zombie_hook(hook);
    }
    service.start_monitoring(Monitor {
        transport: transport.clone(),
        config,
    });
    let lease = tokio::spawn(
        keep_lease(
            service.clone(),
            transport.clone(),
            coordinator.clone(),
            config,
        )
        .in_current_span(),
    );
    tokio::spawn(
        async move {
            // Aborting the returned task drops this future, and with it the guard that
            // aborts the lease task: both stop together.
            let _lease = AbortOnDrop(lease);
            run(service, transport, coordinator, config).await;
        }
        .in_current_span(),
    )
}

/// A ticker every `ms` of `clock`; a late tick delays the next ones (no bursts
/// to catch up).
fn every(clock: &Arc<dyn Clock>, ms: u64) -> Interval {
    ramstore_clock::interval(clock, Duration::from_millis(ms))
}

/// Waits for the next tick at which the server is enlisted: its id, or `None` once
/// it is a zombie (the caller stops).
async fn next_round(tick: &mut Interval, service: &StorageService) -> Option<u64> {
    loop {
        tick.tick().await;
        if service.is_zombie() {
            return None;
        }
        let me = service.server_id();
        if me != 0 {
            return Some(me);
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keeps this server's membership lease (see the module doc): every ping interval,
/// `RenewLease` to the coordinator. Separate from the ping rounds, so a slow peer
/// ping or suspicion report never delays a renewal.
async fn keep_lease(
    service: Arc<StorageService>,
    transport: Arc<dyn Transport>,
    coordinator: String,
    config: MonitorConfig,
) {
    let clock = service.clock.clone();
    let mut tick = every(&clock, config.ping_interval_ms);
    while let Some(me) = next_round(&mut tick, &service).await {
        // The lease counts from here: the grant is given after this instant.
        let sent = clock.now();
        let renew = Request::RenewLease { caller_id: me };
        let answer = coordinator_answer(&clock, &*transport, &coordinator, &renew).await;
        match answer.as_deref().map(decode_response) {
            Some(Ok((h, Response::RenewLease { lease_ms }))) if h.status == Status::Ok => {
                if lease_ms > 0 {
                    service.extend_lease(sent, u64::from(lease_ms));
                }
            }
            Some(Ok((_, Response::Error(e)))) if e.status() == Status::ServerNotUp => {
                service.declare_zombie("the coordinator refused its lease: 'you are not UP'");
                return;
            }
            // No coordinator answered, or an old one that knows no leases: no lease.
            _ => tracing::debug!("membership lease not renewed"),
        }
    }
}

async fn run(
    service: Arc<StorageService>,
    transport: Arc<dyn Transport>,
    coordinator: String,
    config: MonitorConfig,
) {
    // This task's own generator, seeded from the server's source.
    let mut rng = service.rng.seed_std();
    let clock = service.clock.clone();
    let timeout = Duration::from_millis(config.ping_timeout_ms);
    let mut tick = every(&clock, config.ping_interval_ms);
    while let Some(me) = next_round(&mut tick, &service).await {
        // (b) The backups refuse this master: the coordinator declared it crashed.
        if service.replicas().is_some_and(|m| m.is_fenced()) {
            service.declare_zombie("its backups refuse its replication (zombie fence)");
            return;
        }
        let peers: Vec<(u64, String)> = service
            .server_list
            .lock()
            .1
            .iter()
            .filter(|s| s.up && s.server_id != me)
            .map(|s| (s.server_id, s.address.clone()))
            .collect();
        let nonce: u64 = rng.gen();
        let outcome = match peers.choose(&mut rng) {
            Some((peer, address)) => {
                match ping(&*transport, address, *peer, me, nonce, timeout).await {
                    Pinged::Failed => {
                        tracing::debug!(peer, %address, "ping failed; reporting to the coordinator");
                        let report = Request::SuspectServer {
                            caller_id: me,
                            server_id: *peer,
                        };
                        call_coordinator(&clock, &*transport, &coordinator, &report).await
                    }
                    other => other,
                }
            }
            // Nobody else to ask: check this server's status with the coordinator.
            None => {
                let status = Request::Ping {
                    nonce,
                    caller_id: me,
                };
                call_coordinator(&clock, &*transport, &coordinator, &status).await
            }
        };
        if outcome == Pinged::NotUp {
            service.declare_zombie("the cluster answered 'you are not UP'");
            return;
        }
    }
}

/// Sends `request` to the first coordinator address that answers, all within
/// [`COORDINATOR_CALL_DEADLINE_MS`] (so a round stays short however many standbys
/// are listed); `NotUp` if it says this server is not UP, `Answered` for any other
/// answer, `Failed` if none answered in time.
async fn call_coordinator(
    clock: &Arc<dyn Clock>,
    transport: &dyn Transport,
    coordinator: &str,
    request: &Request<'_>,
) -> Pinged {
    let Some(bytes) = coordinator_answer(clock, transport, coordinator, request).await else {
        return Pinged::Failed;
    };
    match decode_response(&bytes) {
        Ok((_, Response::Error(e))) if e.status() == Status::ServerNotUp => Pinged::NotUp,
        _ => Pinged::Answered,
    }
}

/// The response frame to `request` of the first address in `coordinator`
/// (separated by commas, tried in order) that answers at all, all within
/// [`COORDINATOR_CALL_DEADLINE_MS`] of `clock`; `None` if none does in time.
pub(crate) async fn coordinator_answer(
    clock: &Arc<dyn Clock>,
    transport: &dyn Transport,
    coordinator: &str,
    request: &Request<'_>,
) -> Option<bytes::Bytes> {
    let mut frame = Vec::new();
    encode_request(0, request, &mut frame).ok()?;
    let deadline = Duration::from_millis(COORDINATOR_CALL_DEADLINE_MS);
    let first = async {
        for address in coordinator
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            if let Ok(bytes) = transport.call(address, frame.clone(), deadline).await {
                return Some(bytes);
            }
        }
        None
    };
    clock.timeout(deadline, first).await.ok().flatten()
}

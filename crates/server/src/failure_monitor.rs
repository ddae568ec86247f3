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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ramstore_clock::{Clock, Interval};
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::Transport;
use ramstore_wire::{
    decode_response, encode_request, encode_response, ErrorBody, Opcode, Request, Response,
    ServerListEntries, ServerStatus, Status, WireError,
};
use rand::seq::SliceRandom;
use rand::Rng;

use crate::storage_service::StorageService;

/// How often a server pings a random other server, by default (R§7.2: 100 ms).
pub const DEFAULT_PING_INTERVAL_MS: u64 = 100;
/// How long a server waits for a ping's answer, by default. R§7.2 uses "a few tens
/// of milliseconds"; over TCP on a small, shared machine stalls that long are common,
/// and a crashed process's port refuses connections at once anyway, so this only
/// bounds the detection of a hung server.
pub const DEFAULT_PING_TIMEOUT_MS: u64 = 300;
/// Deadline of a `SuspectServer` report or a status ping to the coordinator.
pub const COORDINATOR_CALL_DEADLINE_MS: u64 = 1_000;
/// The longest accepted ping interval or timeout (one hour).
pub const MAX_MONITOR_MS: u64 = 3_600_000;
/// What a server answers a caller it lists CRASHED or removed (R§7.11); the
/// coordinator answers the same.
pub const NOT_UP_MESSAGE: &str = "you are not UP in the cluster";

const _: () = assert!(DEFAULT_PING_INTERVAL_MS <= MAX_MONITOR_MS);
const _: () = assert!(DEFAULT_PING_TIMEOUT_MS <= MAX_MONITOR_MS);

/// The failure monitor's timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorConfig {
    /// How often this server pings a random other server, in milliseconds.
    pub ping_interval_ms: u64,
    /// How long it waits for each answer, in milliseconds.
    pub ping_timeout_ms: u64,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        Self {
            ping_interval_ms: DEFAULT_PING_INTERVAL_MS,
            ping_timeout_ms: DEFAULT_PING_TIMEOUT_MS,
        }
    }
}

impl MonitorConfig {
    /// Checks both values are in `1..=MAX_MONITOR_MS`.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("ping interval", self.ping_interval_ms),
            ("ping timeout", self.ping_timeout_ms),
        ] {
            if !(1..=MAX_MONITOR_MS).contains(&v) {
                return Err(format!(
                    "{name} of {v} ms is out of range (1 to {MAX_MONITOR_MS} ms)"
                ));
            }
        }
        Ok(())
    }
}

/// What a zombie does once it knows (R§7.11): the `ramstore` binary exits; in-process
/// tests leave it unset (the server only stops serving).
#[derive(Clone)]
pub struct ZombieHook(pub Arc<dyn Fn() + Send + Sync>);

impl ZombieHook {
    pub fn new(f: impl Fn() + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

impl std::fmt::Debug for ZombieHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZombieHook(..)")
    }
}

/// A server's failure-detection state, kept in its [`StorageService`].
pub struct FailureState {
    zombie: AtomicBool,
    hook: OnceLock<ZombieHook>,
    monitor: OnceLock<Monitor>,
    origin: Instant,
    /// When the membership lease ends, in ms since `origin` (0: never granted).
    lease_until_ms: AtomicU64,
}

/// What answering `PingServer` and the lease check need.
struct Monitor {
    transport: Arc<dyn Transport>,
    config: MonitorConfig,
}

impl FailureState {
    /// A server's state: not a zombie, not monitored, no lease; `origin` is now
    /// on the clock of the instants it will be given.
    pub fn new(origin: Instant) -> Self {
        Self {
            zombie: AtomicBool::new(false),
            hook: OnceLock::new(),
            monitor: OnceLock::new(),
            origin,
            lease_until_ms: AtomicU64::new(0),
        }
    }

    fn ms_since_origin(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether object operations must wait (answered RETRY) at `now`: the monitor
    /// runs and this server holds no membership lease at `now` (see the module doc).
    /// Unmonitored servers (in-process tests) never wait.
    pub fn unconfirmed(&self, now: Instant) -> bool {
        if self.monitor.get().is_none() {
            return false;
        }
        self.ms_since_origin(now) >= self.lease_until_ms.load(Ordering::Acquire)
    }

    /// A lease of `lease_ms` was granted for a request sent at `sent`: it holds
    /// until `sent + lease_ms` (never shortened by an older grant answered late).
    pub fn extend_lease(&self, sent: Instant, lease_ms: u64) {
        let until = self.ms_since_origin(sent).saturating_add(lease_ms);
        self.lease_until_ms.fetch_max(until, Ordering::AcqRel);
    }
}

/// How a ping went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pinged {
    /// Answered as the expected server.
    Answered,
    /// Answered SERVER_NOT_UP: the receiver lists the caller crashed or removed.
    NotUp,
    /// No answer, a refused or reset connection, or a wrong answer.
    Failed,
}

/// Pings `address`, expecting server `expect` (0: any, the coordinator), as
/// `caller_id`.
async fn ping(
    transport: &dyn Transport,
    address: &str,
    expect: u64,
    caller_id: u64,
    nonce: u64,
    timeout: Duration,
) -> Pinged {
    let mut frame = Vec::new();
    if encode_request(0, &Request::Ping { nonce, caller_id }, &mut frame).is_err() {
        return Pinged::Failed;
    }
    let Ok(bytes) = transport.call(address, frame, timeout).await else {
        return Pinged::Failed;
    };
    match decode_response(&bytes) {
        Ok((
            h,
            Response::Ping {
                nonce: echoed,
                server_id,
            },
        )) if h.status == Status::Ok && echoed == nonce && server_id == expect => Pinged::Answered,
        Ok((_, Response::Error(e))) if e.status() == Status::ServerNotUp => Pinged::NotUp,
        _ => Pinged::Failed,
    }
}

fn not_up() -> Response<'static> {
    Response::Error(ErrorBody::Message {
        status: Status::ServerNotUp,
        message: NOT_UP_MESSAGE,
    })
}

impl StorageService {
    /// Whether this server learned it is a zombie: it serves no object operation.
    pub fn is_zombie(&self) -> bool {
        self.failure.zombie.load(Ordering::Acquire)
    }

    /// Sets what happens when this server learns it is a zombie (once; later calls
    /// are ignored).
    pub fn set_zombie_hook(&self, hook: ZombieHook) {
        let _ = self.failure.hook.set(hook);
    }

    /// This server learned it was declared crashed (R§7.11): from now on it refuses
    /// object operations, and it calls its zombie hook (once).
    pub fn declare_zombie(&self, reason: &str) {
        if self.failure.zombie.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::error!(
            server_id = self.server_id(),
            reason,
            "this server was declared crashed by the cluster (a zombie): it stops serving"
        );
        if let Some(hook) = self.failure.hook.get() {
            (hook.0)();
        }
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
    /// membership lease at `now` (see the module doc), else `None`. The request
    /// path ([`crate::storage_service::request_path`]) asks before an object
    /// operation runs, and again after a read.
    pub(crate) fn unconfirmed_refusal(&self, now: Instant) -> Option<ErrorBody<'static>> {
        if !self.failure.unconfirmed(now) {
            return None;
        }
        let delay_ms = self
            .failure
            .monitor
            .get()
            .map_or(DEFAULT_PING_INTERVAL_MS, |m| m.config.ping_interval_ms);
        Some(ErrorBody::Retry {
            delay_ms: u32::try_from(delay_ms).unwrap_or(u32::MAX),
        })
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
            let answered = match this.failure.monitor.get() {
                Some(m) => {
                    let nonce = this.rng.next_u64();
                    let timeout = Duration::from_millis(m.config.ping_timeout_ms);
                    let me = this.server_id();
                    let got = ping(&*m.transport, &address, server_id, me, nonce, timeout).await;
                    if got == Pinged::NotUp {
                        this.declare_zombie("a ping it sent was answered 'you are not UP'");
                    }
                    got == Pinged::Answered
                }
                // Not monitoring (an in-process test server): it cannot ping.
                None => false,
            };
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
}

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
    let _ = service.failure.monitor.set(Monitor {
        transport: transport.clone(),
        config,
    });
    let lease = tokio::spawn(keep_lease(
        service.clone(),
        transport.clone(),
        coordinator.clone(),
        config,
    ));
    tokio::spawn(async move {
        // Aborting the returned task drops this future, and with it the guard that
        // aborts the lease task: both stop together.
        let _lease = AbortOnDrop(lease);
        run(service, transport, coordinator, config).await;
    })
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
                    service.failure.extend_lease(sent, u64::from(lease_ms));
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
async fn coordinator_answer(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_default_is_valid() {
        let c = MonitorConfig::default();
        assert_eq!(c.validate(), Ok(()));
        let bad = MonitorConfig {
            ping_interval_ms: 0,
            ..c
        };
        assert!(bad.validate().unwrap_err().contains("ping interval"));
        let bad = MonitorConfig {
            ping_timeout_ms: MAX_MONITOR_MS + 1,
            ..c
        };
        assert!(bad.validate().unwrap_err().contains("ping timeout"));
    }

    #[test]
    fn zombie_hook_debug_hides_the_closure() {
        assert_eq!(format!("{:?}", ZombieHook::new(|| {})), "ZombieHook(..)");
    }

    #[test]
    fn unconfirmed_only_when_monitoring_and_outside_the_lease() {
        let clock = ramstore_clock::ManualClock::new();
        let state = FailureState::new(clock.now());
        clock.advance(Duration::from_secs(1));
        let later = clock.now() + Duration::from_secs(3_600);
        assert!(!state.unconfirmed(later), "not monitoring: never");
        let _ = state.monitor.set(Monitor {
            transport: Arc::new(ramstore_rpc::LocalTransport::new()),
            config: MonitorConfig::default(),
        });
        let now = clock.now();
        assert!(state.unconfirmed(now), "monitoring, never granted: wait");
        state.extend_lease(now, 500);
        assert!(!state.unconfirmed(now + Duration::from_millis(499)));
        assert!(state.unconfirmed(now + Duration::from_millis(500)));
        // An older grant answered late never shortens the lease.
        state.extend_lease(now - Duration::from_millis(400), 500);
        assert!(!state.unconfirmed(now + Duration::from_millis(499)));
        state.extend_lease(now + Duration::from_millis(400), 500);
        assert!(!state.unconfirmed(now + Duration::from_millis(899)));
        assert!(state.unconfirmed(now + Duration::from_millis(900)));
    }
}

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
//! **Frozen servers.** A process that was stopped (SIGSTOP, a VM pause) may have been
//! declared crashed meanwhile, and requests queued on its sockets would be served
//! before it can ask anyone. So object operations are answered RETRY while no
//! monitoring round has *started* within [`MonitorConfig::unconfirmed_after_ms`]: a
//! resumed process first runs a round (and learns it is a zombie) before it serves
//! again. A round's start, not its end, counts: a round interrupted by the stop
//! proves nothing about the time after it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::Transport;
use ramstore_wire::{
    decode_request, decode_response, encode_request, encode_response, ErrorBody, Opcode, Request,
    Response, ServerListEntries, ServerStatus, Status, WireError,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::time::MissedTickBehavior;

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

    /// Object operations are answered RETRY when no monitoring round has started
    /// for this long: two whole rounds (each at most an interval, a ping timeout and
    /// a report to the coordinator), so a loaded but running server never trips it.
    pub fn unconfirmed_after_ms(&self) -> u64 {
        2 * (self.ping_interval_ms + self.ping_timeout_ms + COORDINATOR_CALL_DEADLINE_MS)
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
    /// When the newest monitoring round started, in ms since `origin`.
    round_started_ms: AtomicU64,
}

/// What answering `PingServer` and the frozen-server check need.
struct Monitor {
    transport: Arc<dyn Transport>,
    config: MonitorConfig,
}

impl Default for FailureState {
    fn default() -> Self {
        Self {
            zombie: AtomicBool::new(false),
            hook: OnceLock::new(),
            monitor: OnceLock::new(),
            origin: Instant::now(),
            round_started_ms: AtomicU64::new(0),
        }
    }
}

impl FailureState {
    fn ms_since_origin(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether object operations must wait (answered RETRY) at `now`: the monitor
    /// runs and no round started for [`MonitorConfig::unconfirmed_after_ms`].
    pub fn unconfirmed(&self, now: Instant) -> bool {
        let Some(m) = self.monitor.get() else {
            return false;
        };
        let started = self.round_started_ms.load(Ordering::Acquire);
        self.ms_since_origin(now).saturating_sub(started) > m.config.unconfirmed_after_ms()
    }

    fn round_started(&self, at: Instant) {
        self.round_started_ms
            .store(self.ms_since_origin(at), Ordering::Release);
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

    /// The RETRY body for an object operation while the monitor has not run a round
    /// for too long (see the module doc), else `None`.
    pub(crate) fn unconfirmed_refusal(
        &self,
        op: Opcode,
        now: Instant,
    ) -> Option<ErrorBody<'static>> {
        if !crate::storage_service::is_object_op(op) || !self.failure.unconfirmed(now) {
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

    /// The answer to a `PingServer` request in `frame` (the coordinator asks this
    /// server to ping a suspect, C§4.1), or `None` for any other request.
    pub(crate) fn ping_server_answer(self: &Arc<Self>, frame: &[u8]) -> Option<SlowFuture> {
        let Ok((header, Request::PingServer { server_id, address })) = decode_request(frame) else {
            return None;
        };
        let id = header.request_id;
        let address = address.to_owned();
        let this = self.clone();
        Some(Box::pin(async move {
            let answered = match this.failure.monitor.get() {
                Some(m) => {
                    let nonce = rand::random();
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
        }))
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
    service.failure.round_started(Instant::now());
    let _ = service.failure.monitor.set(Monitor {
        transport: transport.clone(),
        config,
    });
    tokio::spawn(run(service, transport, coordinator, config))
}

async fn run(
    service: Arc<StorageService>,
    transport: Arc<dyn Transport>,
    coordinator: String,
    config: MonitorConfig,
) {
    let mut rng = StdRng::from_entropy();
    let timeout = Duration::from_millis(config.ping_timeout_ms);
    let mut tick = tokio::time::interval(Duration::from_millis(config.ping_interval_ms));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if service.is_zombie() {
            return;
        }
        let me = service.server_id();
        if me == 0 {
            continue;
        }
        let started = Instant::now();
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
                        call_coordinator(&*transport, &coordinator, &report).await
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
                call_coordinator(&*transport, &coordinator, &status).await
            }
        };
        if outcome == Pinged::NotUp {
            service.declare_zombie("the cluster answered 'you are not UP'");
            return;
        }
        service.failure.round_started(started);
    }
}

/// Sends `request` to the first coordinator address that answers, all within
/// [`COORDINATOR_CALL_DEADLINE_MS`] (so a round stays short however many standbys
/// are listed); `NotUp` if it says this server is not UP, `Answered` for any other
/// answer, `Failed` if none answered in time.
async fn call_coordinator(
    transport: &dyn Transport,
    coordinator: &str,
    request: &Request<'_>,
) -> Pinged {
    let mut frame = Vec::new();
    if encode_request(0, request, &mut frame).is_err() {
        return Pinged::Failed;
    }
    let deadline = Duration::from_millis(COORDINATOR_CALL_DEADLINE_MS);
    tokio::time::timeout(
        deadline,
        first_answer(transport, coordinator, frame, deadline),
    )
    .await
    .unwrap_or(Pinged::Failed)
}

/// The answer of the first address in `coordinator` that answers at all.
async fn first_answer(
    transport: &dyn Transport,
    coordinator: &str,
    frame: Vec<u8>,
    deadline: Duration,
) -> Pinged {
    for address in coordinator
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        let Ok(bytes) = transport.call(address, frame.clone(), deadline).await else {
            continue;
        };
        return match decode_response(&bytes) {
            Ok((_, Response::Error(e))) if e.status() == Status::ServerNotUp => Pinged::NotUp,
            _ => Pinged::Answered,
        };
    }
    Pinged::Failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_default_is_valid_and_unconfirmed_after_spans_two_rounds() {
        let c = MonitorConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.unconfirmed_after_ms(), 2 * (100 + 300 + 1_000));
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
    fn unconfirmed_only_when_monitoring_and_no_round_started_lately() {
        let state = FailureState::default();
        let later = Instant::now() + Duration::from_secs(3_600);
        assert!(!state.unconfirmed(later), "not monitoring: never");
        let _ = state.monitor.set(Monitor {
            transport: Arc::new(ramstore_rpc::LocalTransport::new()),
            config: MonitorConfig::default(),
        });
        let now = Instant::now();
        state.round_started(now);
        let limit = Duration::from_millis(MonitorConfig::default().unconfirmed_after_ms());
        assert!(!state.unconfirmed(now + limit));
        assert!(state.unconfirmed(now + limit + Duration::from_millis(2)));
        state.round_started(now + limit);
        assert!(!state.unconfirmed(now + limit + Duration::from_millis(2)));
    }
}

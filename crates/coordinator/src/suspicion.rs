//! Confirming a suspected failure before declaring it (R§7.2, R§7.11, C§4.1).
//!
//! Storage servers ping each other at random (`ramstore_server::failure_monitor`);
//! one whose ping fails reports the target with `SuspectServer`, and a failed
//! backstop ping of the coordinator's own ([`crate::failure_detector`]) is a
//! suspicion too. A suspicion alone declares nothing: "a glitch on one path must not
//! trigger a recovery". The coordinator pings the suspect itself (R§7.2's "second
//! chance") and asks [`CONFIRMING_HELPERS`] other UP servers, chosen at random, to
//! ping it too (`PingServer`; C§4.1 tests every path to the suspect the same way).
//! The suspect is declared CRASHED only if **no** path reached it and it has answered
//! none of the coordinator's pings for `failure_timeout_ms`
//! ([`crate::FailureDetectorConfig`]); until that much silence has passed, a suspect
//! no path reaches is confirmed again. A helper that cannot run its ping (down
//! itself, an old version answering INVALID_REQUEST) is no evidence of life: it
//! counts as a failed path, so two dead servers cannot shield each other.
//!
//! Zombies (R§7.11): a `SuspectServer` or a `Ping` from a caller the coordinator
//! lists CRASHED or removed is answered SERVER_NOT_UP "you are not UP in the
//! cluster"; the caller then stops serving and exits.
//!
//! [`verdict`] and [`choose_helpers`] are the pure decisions, tested without the
//! network; [`CoordinatorService::failure_detector_loop`] carries them out.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_wire::{
    decode_response, encode_request, encode_response, ErrorBody, Opcode, Request, Response, Status,
    WireError,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::failure_detector::{FailureDetector, FailureDetectorConfig};
use crate::lease::Grant;
use crate::server_list::{ServerId, ServerStatus};
use crate::service::CoordinatorService;

/// Other servers asked to ping a suspect (besides the coordinator's own ping): with
/// the reporter's failed ping that makes four paths, three of them checked at
/// confirmation time.
pub const CONFIRMING_HELPERS: usize = 2;
/// Suspicions queued for confirmation at most; more are dropped (the reporters
/// report again on their next failed ping).
pub const MAX_PENDING_SUSPICIONS: usize = 1024;
/// A helper's `PingServer` may take this much longer than the coordinator's own
/// ping timeout: the helper pings with its own timeout, then answers.
pub const PING_SERVER_SLACK_MS: u64 = 200;
/// The answer to a caller that is not UP (R§7.11).
pub const NOT_UP_MESSAGE: &str = "you are not UP in the cluster";

/// How one path to the suspect fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathOutcome {
    /// The suspect answered as itself.
    Answered,
    /// No answer, a wrong answer, or the path could not be tried.
    Failed,
    /// The coordinator's own ping found the process gone: its port refused the
    /// connection, or the connection was closed (a live process does neither).
    Gone,
}

/// What a finished confirmation decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The suspect is no longer UP (already crashed, removed, unknown): nothing to do.
    Ignore,
    /// Some path reached it: the suspicion was a glitch of the reporter's path.
    Alive,
    /// No path reached it, but it answered the coordinator less than the failure
    /// timeout ago: confirm again in `after_ms`.
    Recheck { after_ms: u64 },
    /// No path reached it for a whole failure timeout: declare it crashed.
    Crashed,
}

/// The verdict on a suspect: `up` is whether it is still UP, `paths` the outcome of
/// every path tried (the coordinator's own ping included), `silent_ms` how long it
/// has answered none of the coordinator's pings.
pub fn verdict(
    up: bool,
    paths: &[PathOutcome],
    silent_ms: u64,
    config: &FailureDetectorConfig,
) -> Verdict {
    if !up {
        return Verdict::Ignore;
    }
    if paths.is_empty() || paths.contains(&PathOutcome::Answered) {
        // No path tried is no evidence either way; keep the server.
        return Verdict::Alive;
    }
    // A refused or closed connection proves the process gone; timeouts alone may
    // be a live but slow server (a busy machine, a bulk load), which must not
    // start a recovery: it gets the longer timeout.
    // The membership lease (`crate::lease`) relies on the second rule.
    let timeout_ms = if paths.contains(&PathOutcome::Gone) {
        config.failure_timeout_ms
    } else {
        config.declare_silent_ms()
    };
    if silent_ms < timeout_ms {
        return Verdict::Recheck {
            after_ms: timeout_ms - silent_ms,
        };
    }
    Verdict::Crashed
}

/// Up to [`CONFIRMING_HELPERS`] servers, at random, from the UP servers `up`, to
/// ping `suspect`: never the suspect, and the reporter only when too few others are
/// UP (its own path already failed once).
pub fn choose_helpers<R: Rng + ?Sized>(
    up: &[(ServerId, String)],
    suspect: ServerId,
    reporter: Option<ServerId>,
    rng: &mut R,
) -> Vec<(ServerId, String)> {
    let others: Vec<&(ServerId, String)> = up
        .iter()
        .filter(|(id, _)| *id != suspect && Some(*id) != reporter)
        .collect();
    let mut chosen: Vec<(ServerId, String)> = others
        .choose_multiple(rng, CONFIRMING_HELPERS)
        .map(|&s| s.clone())
        .collect();
    if chosen.len() < CONFIRMING_HELPERS {
        if let Some(r) = up
            .iter()
            .find(|(id, _)| Some(*id) == reporter && *id != suspect)
        {
            chosen.push(r.clone());
        }
    }
    chosen
}

/// One report: `reporter` (`None`: the coordinator's own ping) could not reach
/// `suspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suspicion {
    pub suspect: ServerId,
    pub reporter: Option<ServerId>,
}

/// The queue from the RPC handlers to the failure detector loop.
pub struct Suspicions {
    tx: mpsc::Sender<Suspicion>,
    rx: Mutex<Option<mpsc::Receiver<Suspicion>>>,
}

impl Default for Suspicions {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel(MAX_PENDING_SUSPICIONS);
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl Suspicions {
    /// Queues a suspicion; false if the queue is full (it is dropped).
    pub fn report(&self, s: Suspicion) -> bool {
        self.tx.try_send(s).is_ok()
    }

    /// The receiving end, once (the failure detector loop takes it).
    fn take_receiver(&self) -> Option<mpsc::Receiver<Suspicion>> {
        self.rx.lock().take()
    }
}

/// A confirmation's result: the suspect and how each path fared.
type Confirmed = (ServerId, Vec<PathOutcome>);

impl CoordinatorService {
    /// Whether `caller_id` (0: not a server) is a server this coordinator lists as
    /// CRASHED or removed (a zombie, R§7.11). Unknown ids are not refused.
    pub(crate) fn caller_not_up(&self, caller_id: u64) -> bool {
        caller_id != 0
            && self
                .core
                .lock()
                .server(ServerId(caller_id))
                .is_some_and(|s| s.status != ServerStatus::Up)
    }

    /// Answers a `Ping` from a server: the echo, or SERVER_NOT_UP if the caller is
    /// not UP (R§7.11).
    pub(crate) fn answer_server_ping(
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
                server_id: 0,
            }
        };
        encode_response(id, Opcode::Ping, &response, out)
    }

    /// Answers `RenewLease` (`crate::lease`): a lease, none for now (0), or
    /// SERVER_NOT_UP to a zombie (R§7.11).
    pub(crate) fn answer_renew_lease(
        &self,
        id: u64,
        caller_id: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let caller = ServerId(caller_id);
        let status = self.core.lock().server(caller).map(|s| s.status);
        let response = match self.liveness.grant(caller, status) {
            Grant::Lease { lease_ms } => Response::RenewLease {
                lease_ms: u32::try_from(lease_ms).unwrap_or(u32::MAX),
            },
            Grant::NotNow => Response::RenewLease { lease_ms: 0 },
            Grant::NotUp => not_up(),
        };
        encode_response(id, Opcode::RenewLease, &response, out)
    }

    /// Answers `SuspectServer`: queues the suspicion (confirmed in the background by
    /// [`Self::failure_detector_loop`]) unless the reporter itself is not UP.
    pub(crate) fn answer_suspect(
        &self,
        id: u64,
        caller_id: u64,
        server_id: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        if self.caller_not_up(caller_id) {
            return encode_response(id, Opcode::SuspectServer, &not_up(), out);
        }
        let reporter = (caller_id != 0).then_some(ServerId(caller_id));
        let queued = self.suspicions.report(Suspicion {
            suspect: ServerId(server_id),
            reporter,
        });
        if !queued {
            tracing::warn!(server_id, caller_id, "suspicion queue full; report dropped");
        }
        encode_response(id, Opcode::SuspectServer, &Response::SuspectServer, out)
    }

    /// Runs failure detection forever (R§7.2, R§7.3); spawn it once. Every
    /// `ping_interval_ms` it pings each UP server that has no ping in flight, all
    /// concurrently, each with `ping_timeout_ms` (the backstop: servers also ping
    /// each other). A failed ping, like a server's `SuspectServer` report, starts a
    /// confirmation (one at a time per suspect): the coordinator's own ping and
    /// [`CONFIRMING_HELPERS`] helpers' `PingServer`, concurrently; the [`verdict`]
    /// then clears the suspect, confirms it again later, or declares it crashed
    /// ([`crate::CoordinatorCore::server_crashed`], whose actions — the new server
    /// list — are carried out like every other notification). If recording the
    /// crash fails (external storage), it is confirmed and tried again.
    ///
    /// A ping counts as answered only by an OK Ping response echoing its nonce, from
    /// that server id (or 0: a server that has not learned its id yet), so a new
    /// process on a dead server's address does not keep the dead one alive.
    pub async fn failure_detector_loop(self: Arc<Self>, config: FailureDetectorConfig) {
        let Some(mut reports) = self.suspicions.take_receiver() else {
            tracing::error!("failure detector already running; not starting another");
            return;
        };
        if !self.liveness.install(FailureDetector::new(config)) {
            tracing::error!("failure detector already installed; not starting another");
            return;
        }
        let now_ms = || self.liveness.now_ms();
        // The detector is shared with the lease grants (`crate::lease`): each use
        // below holds its lock only for the call.
        let liveness = &self.liveness;
        let timeout = Duration::from_millis(config.ping_timeout_ms);
        // This task's own generator, seeded from the service's source.
        let mut rng = self.rng.seed_std();
        // Owned by this task: when it is aborted, so are its pings, confirmations
        // and pushes.
        let mut pings: JoinSet<(ServerId, bool)> = JoinSet::new();
        let mut confirmations: JoinSet<Confirmed> = JoinSet::new();
        let mut confirming: BTreeSet<ServerId> = BTreeSet::new();
        let mut notifications: JoinSet<()> = JoinSet::new();
        let mut tick =
            ramstore_clock::interval(&self.clock, Duration::from_millis(config.ping_interval_ms));
        let mut nonce = 0u64;
        loop {
            let mut suspect = None;
            tokio::select! {
                Some(done) = pings.join_next() => {
                    // A ping task cannot panic; an aborted one only happens at stop.
                    if let Ok((id, answered)) = done {
                        if answered {
                            let now = now_ms();
                            liveness.with(|d| d.ping_succeeded(id, now));
                        } else {
                            liveness.with(|d| d.ping_failed(id));
                            suspect = Some(Suspicion { suspect: id, reporter: None });
                        }
                    }
                }
                Some(report) = reports.recv() => suspect = Some(report),
                Some(done) = confirmations.join_next() => {
                    let Ok((id, paths)) = done else { continue };
                    let now = now_ms();
                    let up = self.core.lock().server(id).is_some_and(|s| s.status == ServerStatus::Up);
                    // A server UP in the core but not watched yet (enlisted since the
                    // last tick) counts as having just answered.
                    let silent = liveness.with(|d| d.silent_ms(id, now)).flatten().unwrap_or(0);
                    match verdict(up, &paths, silent, &config) {
                        Verdict::Ignore => {
                            confirming.remove(&id);
                        }
                        Verdict::Alive => {
                            tracing::info!(server_id = id.0, ?paths, "suspected server answered on another path: not crashed");
                            liveness.with(|d| d.ping_succeeded(id, now));
                            confirming.remove(&id);
                        }
                        Verdict::Recheck { after_ms } => {
                            // Confirm again once the failure timeout has passed (or
                            // sooner, so a server that came back is seen).
                            let delay = after_ms.min(config.ping_timeout_ms);
                            self.spawn_confirmation(&mut confirmations, id, None, delay, timeout, &mut rng);
                        }
                        Verdict::Crashed => {
                            let result = self.core.lock().server_crashed(id);
                            match result {
                                Ok(actions) => {
                                    tracing::warn!(
                                        server_id = id.0,
                                        silent_ms = silent,
                                        ?paths,
                                        "server unreachable from every path: declared crashed"
                                    );
                                    liveness.with(|d| d.forget(id));
                                    confirming.remove(&id);
                                    let this = self.clone();
                                    notifications.spawn(async move { this.carry_out(actions).await });
                                }
                                Err(e) => {
                                    tracing::error!(
                                        server_id = id.0,
                                        error = %e,
                                        "cannot record a crashed server; will try again"
                                    );
                                    self.spawn_confirmation(&mut confirmations, id, None, config.ping_interval_ms, timeout, &mut rng);
                                }
                            }
                        }
                    }
                }
                Some(_) = notifications.join_next() => {}
                _ = tick.tick() => {
                    let up: Vec<(ServerId, String)> = self.up_servers();
                    let now = now_ms();
                    let due = liveness
                        .with(|d| {
                            d.set_up_servers(up, now);
                            d.pings_due()
                        })
                        .unwrap_or_default();
                    for (id, address) in due {
                        nonce = nonce.wrapping_add(1);
                        let this = self.clone();
                        let n = nonce;
                        pings.spawn(async move {
                            let answered = this.ping(&address, id, n, timeout).await;
                            (id, answered)
                        });
                    }
                }
            }
            if let Some(s) = suspect {
                // One confirmation per suspect at a time; reports about a server not
                // UP (already crashed, or unknown) are moot.
                let up = self
                    .core
                    .lock()
                    .server(s.suspect)
                    .is_some_and(|e| e.status == ServerStatus::Up);
                if up && confirming.insert(s.suspect) {
                    tracing::debug!(suspect = s.suspect.0, reporter = ?s.reporter, "confirming a suspected failure");
                    self.spawn_confirmation(
                        &mut confirmations,
                        s.suspect,
                        s.reporter,
                        0,
                        timeout,
                        &mut rng,
                    );
                }
            }
        }
    }

    /// The UP servers and their addresses.
    fn up_servers(&self) -> Vec<(ServerId, String)> {
        self.core
            .lock()
            .state()
            .servers()
            .entries()
            .iter()
            .filter(|e| e.is_up())
            .map(|e| (e.id, e.address.clone()))
            .collect()
    }

    /// Starts confirming `suspect` after `delay_ms`: helpers are chosen now.
    fn spawn_confirmation(
        self: &Arc<Self>,
        set: &mut JoinSet<Confirmed>,
        suspect: ServerId,
        reporter: Option<ServerId>,
        delay_ms: u64,
        timeout: Duration,
        rng: &mut StdRng,
    ) {
        let up = self.up_servers();
        let Some(address) = up
            .iter()
            .find(|(id, _)| *id == suspect)
            .map(|(_, a)| a.clone())
        else {
            // Not UP any more: the verdict will be Ignore.
            set.spawn(async move { (suspect, Vec::new()) });
            return;
        };
        let helpers = choose_helpers(&up, suspect, reporter, rng);
        let nonce = rng.gen();
        let this = self.clone();
        set.spawn(async move {
            if delay_ms > 0 {
                this.clock.sleep(Duration::from_millis(delay_ms)).await;
            }
            let paths = this
                .confirm(suspect, &address, &helpers, nonce, timeout)
                .await;
            (suspect, paths)
        });
    }

    /// Tries every path to `suspect` at once: the coordinator's own ping and each
    /// helper's `PingServer`.
    async fn confirm(
        &self,
        suspect: ServerId,
        address: &str,
        helpers: &[(ServerId, String)],
        nonce: u64,
        timeout: Duration,
    ) -> Vec<PathOutcome> {
        let own = self.ping_outcome(address, suspect, nonce, timeout);
        let first = self.ask_helper(helpers.first(), suspect, address, timeout);
        let second = self.ask_helper(helpers.get(1), suspect, address, timeout);
        const _: () = assert!(CONFIRMING_HELPERS == 2, "confirm asks exactly two helpers");
        let (own, first, second) = tokio::join!(own, first, second);
        let mut paths = vec![own];
        paths.extend(first);
        paths.extend(second);
        paths
    }

    /// Asks `helper` (if any) to ping `suspect` at `address`.
    async fn ask_helper(
        &self,
        helper: Option<&(ServerId, String)>,
        suspect: ServerId,
        address: &str,
        timeout: Duration,
    ) -> Option<PathOutcome> {
        let (_, helper_address) = helper?;
        let mut frame = Vec::new();
        let request = Request::PingServer {
            server_id: suspect.0,
            address,
        };
        if encode_request(0, &request, &mut frame).is_err() {
            return Some(PathOutcome::Failed);
        }
        let deadline = timeout + Duration::from_millis(PING_SERVER_SLACK_MS);
        let answered = match self.transport.call(helper_address, frame, deadline).await {
            Ok(bytes) => matches!(
                decode_response(&bytes),
                Ok((h, Response::PingServer { answered: true })) if h.status == Status::Ok
            ),
            Err(_) => false,
        };
        Some(if answered {
            PathOutcome::Answered
        } else {
            PathOutcome::Failed
        })
    }

    /// Pings server `id` at `address`; whether it answered as itself (see
    /// [`Self::failure_detector_loop`]).
    pub(crate) async fn ping(
        &self,
        address: &str,
        id: ServerId,
        nonce: u64,
        deadline: Duration,
    ) -> bool {
        self.ping_outcome(address, id, nonce, deadline).await == PathOutcome::Answered
    }

    /// Pings server `id` at `address`: answered as itself, gone (refused or
    /// closed connection), or failed otherwise (timeout, wrong answer).
    async fn ping_outcome(
        &self,
        address: &str,
        id: ServerId,
        nonce: u64,
        deadline: Duration,
    ) -> PathOutcome {
        let mut frame = Vec::new();
        let request = Request::Ping {
            nonce,
            caller_id: 0,
        };
        if encode_request(0, &request, &mut frame).is_err() {
            return PathOutcome::Failed;
        }
        match self.transport.call(address, frame, deadline).await {
            Ok(bytes) => match decode_response(&bytes) {
                Ok((
                    h,
                    Response::Ping {
                        nonce: echoed,
                        server_id,
                    },
                )) if h.status == Status::Ok
                    && echoed == nonce
                    && (server_id == 0 || server_id == id.0) =>
                {
                    PathOutcome::Answered
                }
                _ => PathOutcome::Failed,
            },
            Err(e) if e.peer_gone() => PathOutcome::Gone,
            Err(_) => PathOutcome::Failed,
        }
    }
}

/// SERVER_NOT_UP for a caller that is not UP.
fn not_up() -> Response<'static> {
    Response::Error(ErrorBody::Message {
        status: Status::ServerNotUp,
        message: NOT_UP_MESSAGE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use PathOutcome::{Answered, Failed, Gone};

    fn up(ids: &[u64]) -> Vec<(ServerId, String)> {
        ids.iter()
            .map(|&i| (ServerId(i), format!("host{i}:1")))
            .collect()
    }

    /// Gone after 250 ms of silence, unresponsive after 2000 ms.
    fn config() -> FailureDetectorConfig {
        FailureDetectorConfig {
            ping_interval_ms: 100,
            ping_timeout_ms: 300,
            failure_timeout_ms: 250,
            unresponsive_timeout_ms: 2_000,
        }
    }

    #[test]
    fn verdict_one_failed_path_of_three_is_not_a_crash() {
        for paths in [
            [Failed, Answered, Answered],
            [Answered, Failed, Failed],
            [Gone, Failed, Answered],
        ] {
            assert_eq!(
                verdict(true, &paths, 10_000, &config()),
                Verdict::Alive,
                "{paths:?}"
            );
        }
    }

    #[test]
    fn verdict_all_paths_failed_is_a_crash() {
        assert_eq!(
            verdict(true, &[Gone, Failed, Failed], 250, &config()),
            Verdict::Crashed
        );
        assert_eq!(
            verdict(true, &[Failed, Failed, Failed], 2_000, &config()),
            Verdict::Crashed
        );
        // Fewer helpers (a small cluster): the paths tried all failed.
        assert_eq!(verdict(true, &[Gone], 1_000, &config()), Verdict::Crashed);
    }

    #[test]
    fn verdict_all_failed_but_recently_heard_is_rechecked() {
        assert_eq!(
            verdict(true, &[Gone, Failed, Failed], 100, &config()),
            Verdict::Recheck { after_ms: 150 }
        );
    }

    /// Regression: a master swamped by a bulk load on a busy 2-core machine
    /// answered no ping within 300 ms on any path and was declared crashed (and,
    /// as a zombie, exited). Timeouts alone now need the unresponsive timeout.
    #[test]
    fn verdict_timeouts_alone_wait_for_the_unresponsive_timeout() {
        assert_eq!(
            verdict(true, &[Failed, Failed, Failed], 700, &config()),
            Verdict::Recheck { after_ms: 1_300 }
        );
        let disabled = FailureDetectorConfig {
            failure_timeout_ms: 3_600_000,
            ..config()
        };
        assert_eq!(
            verdict(true, &[Failed, Failed, Failed], 10_000, &disabled),
            Verdict::Recheck {
                after_ms: 3_590_000
            },
            "the longer of the two timeouts counts"
        );
    }

    #[test]
    fn verdict_suspect_already_crashed_is_ignored() {
        assert_eq!(
            verdict(false, &[Failed, Failed, Failed], 10_000, &config()),
            Verdict::Ignore
        );
        assert_eq!(verdict(false, &[Answered], 0, &config()), Verdict::Ignore);
        // Not even tried (it left the list before the confirmation started).
        assert_eq!(verdict(false, &[], 0, &config()), Verdict::Ignore);
    }

    #[test]
    fn choose_helpers_avoids_suspect_and_reporter() {
        let mut rng = StdRng::seed_from_u64(1);
        let servers = up(&[1, 2, 3, 4, 5]);
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            let h = choose_helpers(&servers, ServerId(1), Some(ServerId(2)), &mut rng);
            assert_eq!(h.len(), CONFIRMING_HELPERS);
            assert_ne!(h[0].0, h[1].0);
            for (id, address) in &h {
                assert!(![1, 2].contains(&id.0), "{h:?}");
                assert_eq!(address, &format!("host{}:1", id.0));
                seen.insert(id.0);
            }
        }
        assert_eq!(seen, BTreeSet::from([3, 4, 5]), "random over the others");
    }

    #[test]
    fn choose_helpers_falls_back_to_the_reporter_in_small_clusters() {
        let mut rng = StdRng::seed_from_u64(2);
        let h = choose_helpers(&up(&[1, 2, 3]), ServerId(1), Some(ServerId(2)), &mut rng);
        assert_eq!(h, up(&[3, 2]));
        let h = choose_helpers(&up(&[1, 2]), ServerId(1), Some(ServerId(2)), &mut rng);
        assert_eq!(h, up(&[2]));
        // The coordinator's own report: no reporter to avoid.
        let h = choose_helpers(&up(&[1, 2]), ServerId(1), None, &mut rng);
        assert_eq!(h, up(&[2]));
        assert!(choose_helpers(&up(&[1]), ServerId(1), None, &mut rng).is_empty());
        // A reporter that is not UP is never asked.
        let h = choose_helpers(&up(&[1, 3]), ServerId(1), Some(ServerId(2)), &mut rng);
        assert_eq!(h, up(&[3]));
    }
}

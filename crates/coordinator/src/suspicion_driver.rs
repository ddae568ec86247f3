//! The suspicion driver: the coordinator's failure detection, carried out (R§7.2,
//! R§7.3, R§7.11). It owns the queue of suspicions reported by servers
//! ([`Suspicions`]) and, while it runs, the pings, confirmations and crash
//! declarations in flight; the decisions themselves are the pure functions of
//! [`crate::suspicion`]. Ping results go to the membership guard's bookkeeping
//! ([`crate::membership`]), which grants leases from them; declared crashes go to
//! the core and their actions to the notifier.
//!
//! Thread-safety: `Send + Sync`; the loop's own state lives in its task
//! ([`Detection`]), so aborting the task aborts everything it started.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ramstore_wire::{
    decode_response, encode_request, encode_response, Opcode, Request, Response, Status, WireError,
};
use rand::rngs::StdRng;
use rand::Rng;
use tokio::task::{JoinError, JoinSet};

use crate::cluster::Cluster;
use crate::failure_detector::{FailureDetector, FailureDetectorConfig};
use crate::membership::{not_up, MembershipGuard};
use crate::notifier::Notifier;
use crate::server_list::ServerId;
use crate::suspicion::{
    choose_helpers, verdict, PathOutcome, Suspicion, Suspicions, Verdict, CONFIRMING_HELPERS,
    PING_SERVER_SLACK_MS,
};

/// A confirmation's result: the suspect and how each path fared.
type Confirmed = (ServerId, Vec<PathOutcome>);

/// Confirms suspicions and declares crashes. Thread-safe.
pub struct SuspicionDriver {
    cluster: Arc<Cluster>,
    notifier: Arc<Notifier>,
    membership: Arc<MembershipGuard>,
    /// Suspected failures waiting for confirmation.
    suspicions: Suspicions,
}

impl SuspicionDriver {
    /// A driver with an empty suspicion queue.
    pub fn new(
        cluster: Arc<Cluster>,
        notifier: Arc<Notifier>,
        membership: Arc<MembershipGuard>,
    ) -> Self {
        Self {
            cluster,
            notifier,
            membership,
            suspicions: Suspicions::default(),
        }
    }

    /// Answers `SuspectServer`: queues the suspicion (confirmed in the background by
    /// [`Self::run`]) unless the reporter itself is not UP.
    pub fn answer_suspect(
        &self,
        id: u64,
        caller_id: u64,
        server_id: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        if self.membership.caller_not_up(caller_id) {
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
    pub async fn run(self: Arc<Self>, config: FailureDetectorConfig) {
        let Some(mut reports) = self.suspicions.take_receiver() else {
            tracing::error!("failure detector already running; not starting another");
            return;
        };
        let liveness = self.membership.liveness();
        if !liveness.install(FailureDetector::new(config)) {
            tracing::error!("failure detector already installed; not starting another");
            return;
        }
        let interval = Duration::from_millis(config.ping_interval_ms);
        let mut tick = ramstore_clock::interval(&self.cluster.clock, interval);
        let mut d = Detection::new(self.clone(), config);
        loop {
            let suspect = tokio::select! {
                Some(done) = d.pings.join_next() => d.ping_done(done),
                Some(report) = reports.recv() => Some(report),
                Some(done) = d.confirmations.join_next() => {
                    d.confirmed(done);
                    None
                }
                Some(_) = d.notifications.join_next() => None,
                _ = tick.tick() => {
                    d.ping_due_servers();
                    None
                }
            };
            if let Some(s) = suspect {
                d.suspect(s);
            }
        }
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
        let call = self.cluster.transport.call(helper_address, frame, deadline);
        let answered = match call.await {
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
        match self.cluster.transport.call(address, frame, deadline).await {
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

/// The failure detector loop's state, owned by its task: when the task is
/// aborted, so are its pings, confirmations and pushes.
struct Detection {
    driver: Arc<SuspicionDriver>,
    config: FailureDetectorConfig,
    /// Each ping's deadline.
    timeout: Duration,
    /// This task's own generator, seeded from the service's source.
    rng: StdRng,
    pings: JoinSet<(ServerId, bool)>,
    confirmations: JoinSet<Confirmed>,
    /// Suspects with a confirmation in flight (one at a time each).
    confirming: BTreeSet<ServerId>,
    notifications: JoinSet<()>,
    nonce: u64,
}

impl Detection {
    fn new(driver: Arc<SuspicionDriver>, config: FailureDetectorConfig) -> Self {
        Self {
            rng: driver.cluster.rng.seed_std(),
            driver,
            config,
            timeout: Duration::from_millis(config.ping_timeout_ms),
            pings: JoinSet::new(),
            confirmations: JoinSet::new(),
            confirming: BTreeSet::new(),
            notifications: JoinSet::new(),
            nonce: 0,
        }
    }

    /// Records a finished ping; a failed one makes its server a suspect. (A ping
    /// task cannot panic; an aborted one only happens at stop.)
    fn ping_done(&mut self, done: Result<(ServerId, bool), JoinError>) -> Option<Suspicion> {
        let (id, answered) = done.ok()?;
        let liveness = self.driver.membership.liveness();
        if answered {
            let now = liveness.now_ms();
            liveness.with(|d| d.ping_succeeded(id, now));
            return None;
        }
        liveness.with(|d| d.ping_failed(id));
        Some(Suspicion {
            suspect: id,
            reporter: None,
        })
    }

    /// Pings every UP server that is due (no ping in flight), concurrently.
    fn ping_due_servers(&mut self) {
        let up = self.driver.cluster.up_servers();
        let liveness = self.driver.membership.liveness();
        let now = liveness.now_ms();
        let due = liveness
            .with(|d| {
                d.set_up_servers(up, now);
                d.pings_due()
            })
            .unwrap_or_default();
        for (id, address) in due {
            self.nonce = self.nonce.wrapping_add(1);
            let driver = self.driver.clone();
            let (nonce, timeout) = (self.nonce, self.timeout);
            self.pings.spawn(async move {
                let outcome = driver.ping_outcome(&address, id, nonce, timeout).await;
                (id, outcome == PathOutcome::Answered)
            });
        }
    }

    /// Starts confirming `s` unless its suspect is confirmed already or not UP
    /// (reports about a crashed or unknown server are moot).
    fn suspect(&mut self, s: Suspicion) {
        if self.driver.cluster.is_up(s.suspect) && self.confirming.insert(s.suspect) {
            tracing::debug!(suspect = s.suspect.0, reporter = ?s.reporter, "confirming a suspected failure");
            self.spawn_confirmation(s.suspect, s.reporter, 0);
        }
    }

    /// Acts on a finished confirmation's [`verdict`].
    fn confirmed(&mut self, done: Result<Confirmed, JoinError>) {
        let Ok((id, paths)) = done else { return };
        let liveness = self.driver.membership.liveness();
        let now = liveness.now_ms();
        let up = self.driver.cluster.is_up(id);
        // A server UP in the core but not watched yet (enlisted since the last
        // tick) counts as having just answered.
        let silent = liveness
            .with(|d| d.silent_ms(id, now))
            .flatten()
            .unwrap_or(0);
        match verdict(up, &paths, silent, &self.config) {
            Verdict::Ignore => {
                self.confirming.remove(&id);
            }
            Verdict::Alive => {
                tracing::info!(
                    server_id = id.0,
                    ?paths,
                    "suspected server answered on another path: not crashed"
                );
                liveness.with(|d| d.ping_succeeded(id, now));
                self.confirming.remove(&id);
            }
            Verdict::Recheck { after_ms } => {
                // Confirm again once the failure timeout has passed (or sooner, so
                // a server that came back is seen).
                let delay = after_ms.min(self.config.ping_timeout_ms);
                self.spawn_confirmation(id, None, delay);
            }
            Verdict::Crashed => self.declare_crashed(id, silent, &paths),
        }
    }

    /// Records `id` crashed and sends the actions; if the record fails (external
    /// storage), confirms it again after a ping interval.
    fn declare_crashed(&mut self, id: ServerId, silent_ms: u64, paths: &[PathOutcome]) {
        let result = self.driver.cluster.core().server_crashed(id);
        match result {
            Ok(actions) => {
                tracing::warn!(
                    server_id = id.0,
                    silent_ms,
                    ?paths,
                    "server unreachable from every path: declared crashed"
                );
                self.driver.membership.liveness().with(|d| d.forget(id));
                self.confirming.remove(&id);
                let notifier = self.driver.notifier.clone();
                self.notifications
                    .spawn(async move { notifier.carry_out(actions).await });
            }
            Err(e) => {
                tracing::error!(
                    server_id = id.0,
                    error = %e,
                    "cannot record a crashed server; will try again"
                );
                self.spawn_confirmation(id, None, self.config.ping_interval_ms);
            }
        }
    }

    /// Starts confirming `suspect` after `delay_ms`: helpers are chosen now.
    fn spawn_confirmation(&mut self, suspect: ServerId, reporter: Option<ServerId>, delay_ms: u64) {
        let up = self.driver.cluster.up_servers();
        let Some(address) = up
            .iter()
            .find(|(id, _)| *id == suspect)
            .map(|(_, a)| a.clone())
        else {
            // Not UP any more: the verdict will be Ignore.
            self.confirmations
                .spawn(async move { (suspect, Vec::new()) });
            return;
        };
        let helpers = choose_helpers(&up, suspect, reporter, &mut self.rng);
        let nonce = self.rng.gen();
        let (driver, timeout) = (self.driver.clone(), self.timeout);
        self.confirmations.spawn(async move {
            if delay_ms > 0 {
                driver
                    .cluster
                    .clock
                    .sleep(Duration::from_millis(delay_ms))
                    .await;
            }
            let paths = driver
                .confirm(suspect, &address, &helpers, nonce, timeout)
                .await;
            (suspect, paths)
        });
    }
}

//! The coordinator's backstop pings (R§7.2, R§7.3): which UP servers to ping, and
//! how long each has gone without answering.
//!
//! This module is the pure bookkeeping, driven by explicit timestamps (milliseconds
//! since any fixed origin), so it is tested without sleeping. The coordinator's
//! service runs it ([`crate::CoordinatorService::failure_detector_loop`], in
//! [`crate::suspicion`]): every [`FailureDetectorConfig::ping_interval_ms`] it pings
//! every UP server that has no ping in flight (concurrently, each with
//! [`FailureDetectorConfig::ping_timeout_ms`]).
//!
//! A failed ping declares nothing by itself: it is a *suspicion*, confirmed like a
//! storage server's (R§7.2: the servers ping each other at random,
//! `ramstore_server::failure_monitor`) by pinging the suspect from three paths
//! ([`crate::suspicion`]). A confirmed suspicion crashes the server only once it has
//! answered none of the coordinator's pings for
//! [`FailureDetectorConfig::failure_timeout_ms`] ([`FailureDetector::silent_ms`]), so
//! a blip shorter than that never starts a recovery.
//!
//! Rules:
//! - A server starts being watched when it is first seen UP, and counts as having
//!   answered at that moment: every server gets a whole timeout before it can be
//!   declared crashed (also after a coordinator restart, which forgets ping history).
//! - Only successes move the clock; a failed ping (error, deadline, wrong answer)
//!   changes nothing but lets the next ping be sent.
//! - A server that leaves the UP state is forgotten. Declaring a server crashed is
//!   final: it never comes back UP (a restarted server enlists under a new id, R§7.3).

use std::collections::BTreeMap;

use crate::server_list::ServerId;

/// How often the coordinator pings each UP server, by default (R§7.2: 100 ms).
pub const DEFAULT_PING_INTERVAL_MS: u64 = 100;
/// How long the coordinator waits for one ping's answer (backstop and confirmation)
/// by default. R§7.2 uses "a few tens of milliseconds"; over TCP on small, shared
/// machines a stall of that length is common, so a timeout that short would make
/// detection flap under load. A crashed process's port refuses connections at once,
/// so this only delays the detection of a hung (not a dead) server.
pub const DEFAULT_PING_TIMEOUT_MS: u64 = 300;
/// How long a server must have answered none of the coordinator's pings before a
/// confirmed suspicion declares it crashed, by default: a blip shorter than this never
/// starts a recovery, and a SIGKILLed server is still declared within ~300 ms.
pub const DEFAULT_FAILURE_TIMEOUT_MS: u64 = 250;
/// How long a server must have answered none of the coordinator's pings before a
/// confirmed suspicion declares it crashed when the pings only *timed out* (the
/// server may be alive but slow, e.g. swamped by a bulk load on a busy machine),
/// by default. A dead process's refused connection needs only
/// [`DEFAULT_FAILURE_TIMEOUT_MS`].
pub const DEFAULT_UNRESPONSIVE_TIMEOUT_MS: u64 = 2_000;
/// The longest accepted ping interval or failure timeout (one hour): longer values are
/// surely typos.
pub const MAX_DETECTOR_MS: u64 = 3_600_000;

const _: () = assert!(DEFAULT_PING_INTERVAL_MS <= DEFAULT_FAILURE_TIMEOUT_MS);
const _: () = assert!(DEFAULT_FAILURE_TIMEOUT_MS <= MAX_DETECTOR_MS);
const _: () = assert!(DEFAULT_PING_TIMEOUT_MS <= MAX_DETECTOR_MS);

/// The failure detector's timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureDetectorConfig {
    /// How often each UP server is pinged, in milliseconds.
    pub ping_interval_ms: u64,
    /// How long the coordinator waits for one ping's answer (its backstop pings and
    /// its confirmation pings), in milliseconds.
    pub ping_timeout_ms: u64,
    /// A confirmed suspicion declares a server crashed only once it has answered
    /// none of the coordinator's pings for this long, in milliseconds, when its
    /// process is certainly gone (connection refused or closed).
    pub failure_timeout_ms: u64,
    /// The same when the pings only timed out (the process may be slow): at least
    /// this long, and at least `failure_timeout_ms`.
    pub unresponsive_timeout_ms: u64,
}

impl Default for FailureDetectorConfig {
    fn default() -> Self {
        Self {
            ping_interval_ms: DEFAULT_PING_INTERVAL_MS,
            ping_timeout_ms: DEFAULT_PING_TIMEOUT_MS,
            failure_timeout_ms: DEFAULT_FAILURE_TIMEOUT_MS,
            unresponsive_timeout_ms: DEFAULT_UNRESPONSIVE_TIMEOUT_MS,
        }
    }
}

impl FailureDetectorConfig {
    /// How long a server must have answered none of the coordinator's pings before
    /// it can be declared crashed when nothing shows its process is gone (its pings
    /// only time out): the longer of the two timeouts.
    pub fn declare_silent_ms(&self) -> u64 {
        self.unresponsive_timeout_ms.max(self.failure_timeout_ms)
    }

    /// The membership lease granted to a server that answers (`crate::lease`): half
    /// of [`Self::declare_silent_ms`], so a lease always ends before a silent
    /// server can be declared crashed, and a server renewing a few times per lease
    /// rides out short stalls.
    pub fn lease_ms(&self) -> u64 {
        self.declare_silent_ms() / 2
    }

    /// Checks that the values make sense: both at least 1 ms and at most
    /// [`MAX_DETECTOR_MS`], and the timeout no shorter than the interval (else a
    /// server could be declared crashed before it was ever pinged).
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("ping interval", self.ping_interval_ms),
            ("ping timeout", self.ping_timeout_ms),
            ("failure timeout", self.failure_timeout_ms),
            ("unresponsive timeout", self.unresponsive_timeout_ms),
        ] {
            if !(1..=MAX_DETECTOR_MS).contains(&v) {
                return Err(format!(
                    "{name} of {v} ms is out of range (1 to {MAX_DETECTOR_MS} ms)"
                ));
            }
        }
        if self.failure_timeout_ms < self.ping_interval_ms {
            return Err(format!(
                "failure timeout ({} ms) is shorter than the ping interval ({} ms)",
                self.failure_timeout_ms, self.ping_interval_ms
            ));
        }
        Ok(())
    }
}

/// One watched server.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Watched {
    address: String,
    /// When it last answered a ping (or was first seen UP).
    last_success_ms: u64,
    /// A ping to it has been handed out and its outcome not reported yet.
    in_flight: bool,
}

/// Which servers to ping and which are overdue; see the module doc. Not
/// synchronised: the caller keeps it behind a lock or on one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureDetector {
    config: FailureDetectorConfig,
    servers: BTreeMap<ServerId, Watched>,
}

impl FailureDetector {
    pub fn new(config: FailureDetectorConfig) -> Self {
        Self {
            config,
            servers: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &FailureDetectorConfig {
        &self.config
    }

    /// Makes the watched set exactly `up` (the UP servers, with their addresses):
    /// servers seen for the first time count as having answered at `now_ms`; servers
    /// no longer UP are forgotten.
    pub fn set_up_servers(
        &mut self,
        up: impl IntoIterator<Item = (ServerId, String)>,
        now_ms: u64,
    ) {
        let mut next = BTreeMap::new();
        for (id, address) in up {
            let w = match self.servers.remove(&id) {
                Some(w) if w.address == address => w,
                // Ids are never reused, so a new address means a new server entry;
                // give it a whole timeout.
                _ => Watched {
                    address,
                    last_success_ms: now_ms,
                    in_flight: false,
                },
            };
            next.insert(id, w);
        }
        self.servers = next;
    }

    /// The servers to ping now (every watched server with no ping in flight), with
    /// their addresses; each is marked in flight until [`Self::ping_succeeded`] or
    /// [`Self::ping_failed`] reports its outcome.
    pub fn pings_due(&mut self) -> Vec<(ServerId, String)> {
        self.servers
            .iter_mut()
            .filter(|(_, w)| !w.in_flight)
            .map(|(id, w)| {
                w.in_flight = true;
                (*id, w.address.clone())
            })
            .collect()
    }

    /// Server `id` answered a ping at `now_ms`. Unknown ids are ignored (the server
    /// left the UP state meanwhile). Time never moves backwards here: an older
    /// timestamp than the last success changes nothing.
    pub fn ping_succeeded(&mut self, id: ServerId, now_ms: u64) {
        if let Some(w) = self.servers.get_mut(&id) {
            w.in_flight = false;
            w.last_success_ms = w.last_success_ms.max(now_ms);
        }
    }

    /// A ping to server `id` failed (no answer within its deadline, a transport
    /// error, or a wrong answer); another may be sent.
    pub fn ping_failed(&mut self, id: ServerId) {
        if let Some(w) = self.servers.get_mut(&id) {
            w.in_flight = false;
        }
    }

    /// The watched servers that have not answered a ping for at least the failure
    /// timeout at `now_ms`, by id.
    pub fn overdue(&self, now_ms: u64) -> Vec<ServerId> {
        self.servers
            .iter()
            .filter(|(_, w)| {
                now_ms.saturating_sub(w.last_success_ms) >= self.config.failure_timeout_ms
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// How long server `id` has gone without answering at `now_ms` (0 if it answered
    /// later than `now_ms`); `None` if it is not watched (not UP).
    pub fn silent_ms(&self, id: ServerId, now_ms: u64) -> Option<u64> {
        self.servers
            .get(&id)
            .map(|w| now_ms.saturating_sub(w.last_success_ms))
    }

    /// Whether server `id` is watched (UP when last told).
    pub fn is_watched(&self, id: ServerId) -> bool {
        self.servers.contains_key(&id)
    }

    /// Stops watching `id` (it was declared crashed).
    pub fn forget(&mut self, id: ServerId) {
        self.servers.remove(&id);
    }

    /// The watched servers, by id.
    pub fn watched(&self) -> Vec<ServerId> {
        self.servers.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(interval: u64, timeout: u64) -> FailureDetectorConfig {
        FailureDetectorConfig {
            ping_interval_ms: interval,
            ping_timeout_ms: 300,
            failure_timeout_ms: timeout,
            unresponsive_timeout_ms: timeout,
        }
    }

    fn up(ids: &[u64]) -> Vec<(ServerId, String)> {
        ids.iter()
            .map(|&i| (ServerId(i), format!("host{i}:1")))
            .collect()
    }

    fn ids(v: &[u64]) -> Vec<ServerId> {
        v.iter().map(|&i| ServerId(i)).collect()
    }

    #[test]
    fn default_config_is_valid_and_matches_the_paper() {
        let c = FailureDetectorConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.ping_interval_ms, 100);
        assert_eq!(c.ping_timeout_ms, 300);
        assert_eq!(c.failure_timeout_ms, 250);
    }

    #[test]
    fn config_validation_refuses_nonsense() {
        assert!(config(0, 100).validate().is_err());
        assert!(config(100, 0).validate().is_err());
        assert!(config(200, 100).validate().unwrap_err().contains("shorter"));
        assert!(config(1, MAX_DETECTOR_MS + 1).validate().is_err());
        assert_eq!(config(100, 100).validate(), Ok(()));
        let mut c = config(100, 100);
        c.ping_timeout_ms = 0;
        assert!(c.validate().unwrap_err().contains("ping timeout"));
    }

    #[test]
    fn new_servers_get_a_whole_timeout() {
        let mut d = FailureDetector::new(config(100, 1_000));
        d.set_up_servers(up(&[1, 2]), 5_000);
        assert_eq!(d.watched(), ids(&[1, 2]));
        assert!(d.overdue(5_999).is_empty());
        assert_eq!(d.overdue(6_000), ids(&[1, 2]));
        // Seen later, a server's clock starts later.
        d.set_up_servers(up(&[1, 2, 3]), 5_500);
        assert_eq!(d.overdue(6_000), ids(&[1, 2]));
        assert_eq!(d.overdue(6_500), ids(&[1, 2, 3]));
        assert_eq!(d.silent_ms(ServerId(3), 6_000), Some(500));
        assert_eq!(d.silent_ms(ServerId(3), 5_000), Some(0));
        assert_eq!(d.silent_ms(ServerId(4), 6_000), None);
        assert!(d.is_watched(ServerId(3)) && !d.is_watched(ServerId(4)));
    }

    #[test]
    fn a_success_resets_the_clock_and_failures_do_not() {
        let mut d = FailureDetector::new(config(100, 1_000));
        d.set_up_servers(up(&[1, 2]), 0);
        assert_eq!(d.pings_due(), up(&[1, 2]));
        d.ping_succeeded(ServerId(1), 900);
        d.ping_failed(ServerId(2));
        assert_eq!(d.overdue(1_000), ids(&[2]));
        assert_eq!(d.overdue(1_899), ids(&[2]));
        assert_eq!(d.overdue(1_900), ids(&[1, 2]));
        // A late report of an older success does not move the clock back.
        d.ping_succeeded(ServerId(1), 100);
        assert_eq!(d.overdue(1_900), ids(&[1, 2]));
    }

    #[test]
    fn a_server_with_a_ping_in_flight_is_not_pinged_again() {
        let mut d = FailureDetector::new(config(100, 1_000));
        d.set_up_servers(up(&[1, 2]), 0);
        assert_eq!(d.pings_due(), up(&[1, 2]));
        assert!(d.pings_due().is_empty(), "both in flight");
        d.ping_failed(ServerId(2));
        assert_eq!(d.pings_due(), up(&[2]));
        d.ping_succeeded(ServerId(1), 50);
        d.ping_succeeded(ServerId(2), 60);
        assert_eq!(d.pings_due(), up(&[1, 2]));
        // Still in flight however long it takes: a slow ping still overdue.
        assert_eq!(d.overdue(1_050), ids(&[1]));
    }

    #[test]
    fn servers_no_longer_up_are_forgotten_and_unknown_reports_ignored() {
        let mut d = FailureDetector::new(config(100, 1_000));
        d.set_up_servers(up(&[1, 2, 3]), 0);
        d.set_up_servers(up(&[1, 3]), 10);
        assert_eq!(d.watched(), ids(&[1, 3]));
        assert_eq!(
            d.overdue(1_000),
            ids(&[1, 3]),
            "clocks kept from the first sight"
        );
        d.ping_succeeded(ServerId(2), 500);
        d.ping_failed(ServerId(2));
        assert_eq!(d.watched(), ids(&[1, 3]));
        d.forget(ServerId(3));
        assert_eq!(d.overdue(5_000), ids(&[1]));
        // Seen UP again (only after a coordinator bug: ids are never revived) it
        // starts afresh.
        d.set_up_servers(up(&[1, 3]), 5_000);
        assert_eq!(d.overdue(5_000), ids(&[1]));
    }

    #[test]
    fn a_silent_server_is_overdue_exactly_at_the_timeout_while_others_answer() {
        let mut d = FailureDetector::new(config(100, 1_000));
        d.set_up_servers(up(&[1, 2]), 0);
        let mut now = 0;
        let mut crashed = Vec::new();
        while crashed.is_empty() {
            now += 100;
            for (id, _) in d.pings_due() {
                if id == ServerId(1) {
                    d.ping_succeeded(id, now);
                } else if now > 300 {
                    d.ping_failed(id);
                } else {
                    d.ping_succeeded(id, now);
                }
            }
            crashed = d.overdue(now);
        }
        assert_eq!(crashed, ids(&[2]));
        assert_eq!(now, 1_300, "last answer at 300, timeout 1000");
    }
}

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
//! network; the suspicion driver ([`crate::suspicion_driver`], run by
//! [`crate::CoordinatorService::failure_detector_loop`]) carries them out, and the
//! zombie answers are the membership guard's ([`crate::membership`]).

use parking_lot::Mutex;
use rand::seq::SliceRandom;
use rand::Rng;
use tokio::sync::mpsc;

use crate::failure_detector::FailureDetectorConfig;
use crate::server_list::ServerId;

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
pub use crate::membership::NOT_UP_MESSAGE;

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
    pub(crate) fn take_receiver(&self) -> Option<mpsc::Receiver<Suspicion>> {
        self.rx.lock().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use std::collections::BTreeSet;
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

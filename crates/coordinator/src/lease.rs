//! Membership leases: how the coordinator keeps a zombie from serving stale reads
//! (R§7.11; design notes "Membership leases").
//!
//! A storage server serves object operations only while it holds a lease, which it
//! renews with `RenewLease`. A lease of `lease_ms` counts from when the *server sent*
//! its request (its own clock), so it ends no later than `lease_ms` after the
//! coordinator granted it. The coordinator grants one only while it has heard the
//! server answer its own pings within `declare_ms - lease_ms`
//! ([`FailureDetectorConfig::lease_ms`], half the shortest timeout after which a
//! merely *silent* server is declared crashed). So a server declared crashed because
//! it went silent — frozen, cut off, isolated from the cluster but not from its
//! clients — was silent for at least `declare_ms` by then, its last grant came at
//! least `declare_ms - lease_ms` before that, and its lease ran out first: it answers
//! RETRY before any recovery master can serve its tablets.
//!
//! The one declaration that does not wait for silence is a *gone* server's (its port
//! refused the connection, or closed it: `failure_timeout_ms`), which a live
//! process never causes; and an operator's `CrashServer` drill, whose server list
//! reaches a live server (and makes it a zombie) long before a recovery finishes.
//!
//! Thread-safety: [`Liveness`] is shared between the RPC handlers (grants) and the
//! failure detector loop (pings), behind one short lock.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use ramstore_clock::Clock;

use crate::failure_detector::{FailureDetector, FailureDetectorConfig};
use crate::server_list::{ServerId, ServerStatus};

/// What the coordinator answers a `RenewLease`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The caller may serve for this many milliseconds from when it sent its request.
    Lease { lease_ms: u64 },
    /// No lease now (the coordinator has not heard the caller answer its pings
    /// lately, or does not know it yet): the caller keeps asking, and meanwhile
    /// answers RETRY.
    NotNow,
    /// The caller is CRASHED or removed: a zombie (R§7.11), answered SERVER_NOT_UP.
    NotUp,
}

/// The grant for a caller whose status here is `status` (`None`: unknown id) and who
/// has answered none of the coordinator's pings for `silent_ms` (`None`: not watched
/// yet, i.e. just enlisted — it counts as having just answered).
pub fn grant(
    status: Option<ServerStatus>,
    silent_ms: Option<u64>,
    config: &FailureDetectorConfig,
) -> Grant {
    match status {
        None => Grant::NotNow,
        Some(ServerStatus::Up) => {
            let lease_ms = config.lease_ms();
            // Paired with the declaration rule (`suspicion::verdict`): a silent
            // server is declared only after `declare_ms` of silence, so a grant given
            // before `declare_ms - lease_ms` of it ends before the declaration.
            if silent_ms.unwrap_or(0) < config.declare_silent_ms() - lease_ms {
                Grant::Lease { lease_ms }
            } else {
                Grant::NotNow
            }
        }
        Some(_) => Grant::NotUp,
    }
}

/// The failure detector's bookkeeping, shared with the lease grants.
pub struct Liveness {
    clock: Arc<dyn Clock>,
    origin: Instant,
    detector: Mutex<Option<FailureDetector>>,
}

impl Liveness {
    /// Bookkeeping whose milliseconds count on `clock` from now.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            origin: clock.now(),
            clock,
            detector: Mutex::new(None),
        }
    }

    /// Milliseconds since this coordinator started (the detector's clock).
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.elapsed(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    /// Installs the detector (once, when failure detection starts); false if one
    /// runs already.
    pub(crate) fn install(&self, detector: FailureDetector) -> bool {
        let mut slot = self.detector.lock();
        if slot.is_some() {
            return false;
        }
        *slot = Some(detector);
        true
    }

    /// Runs `f` on the detector. It is installed before the loop that calls this
    /// runs, so `None` never reaches `f`'s callers; they get `None` back if it does.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut FailureDetector) -> R) -> Option<R> {
        self.detector.lock().as_mut().map(f)
    }

    /// The grant for server `id` whose status here is `status`. Without failure
    /// detection running, nothing declares a silent server crashed, so any UP
    /// server gets the default configuration's lease.
    pub fn grant(&self, id: ServerId, status: Option<ServerStatus>) -> Grant {
        let now = self.now_ms();
        let guard = self.detector.lock();
        match guard.as_ref() {
            Some(d) => grant(status, d.silent_ms(id, now), d.config()),
            None => grant(status, None, &FailureDetectorConfig::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn config(failure_timeout_ms: u64, unresponsive_timeout_ms: u64) -> FailureDetectorConfig {
        FailureDetectorConfig {
            failure_timeout_ms,
            unresponsive_timeout_ms,
            ..FailureDetectorConfig::default()
        }
    }

    #[test]
    fn grant_refuses_zombies_and_unknown_callers() {
        let c = config(250, 1_000);
        assert_eq!(
            grant(Some(ServerStatus::Crashed), Some(0), &c),
            Grant::NotUp
        );
        assert_eq!(grant(Some(ServerStatus::Removed), None, &c), Grant::NotUp);
        assert_eq!(grant(None, Some(0), &c), Grant::NotNow);
    }

    #[test]
    fn grant_gives_half_the_declare_time_while_the_server_answers() {
        let c = config(250, 1_000);
        assert_eq!(c.lease_ms(), 500);
        let lease = Grant::Lease { lease_ms: 500 };
        assert_eq!(grant(Some(ServerStatus::Up), None, &c), lease);
        assert_eq!(grant(Some(ServerStatus::Up), Some(0), &c), lease);
        assert_eq!(grant(Some(ServerStatus::Up), Some(499), &c), lease);
        assert_eq!(grant(Some(ServerStatus::Up), Some(500), &c), Grant::NotNow);
    }

    /// The invariant the design rests on: whenever a grant is given at silence `s`,
    /// the earliest declaration of a silent server (at silence `declare_silent_ms`)
    /// comes after the lease ends.
    #[test]
    fn grant_always_ends_before_a_silent_server_can_be_declared() {
        for (failure, unresponsive) in [(250, 2_000), (250, 1_000), (100, 100), (3_000, 500)] {
            let c = config(failure, unresponsive);
            for silent in 0..c.declare_silent_ms() + 10 {
                if let Grant::Lease { lease_ms } = grant(Some(ServerStatus::Up), Some(silent), &c) {
                    assert!(
                        silent + lease_ms < c.declare_silent_ms(),
                        "{c:?} at {silent}"
                    );
                }
            }
        }
    }

    #[test]
    fn liveness_grant_stops_at_exactly_the_silence_its_clock_measures() {
        let clock = ramstore_clock::ManualClock::new();
        let liveness = Liveness::new(clock.handle());
        let id = ServerId(1);
        let up = Some(ServerStatus::Up);
        let lease = Grant::Lease { lease_ms: 500 };
        assert_eq!(
            liveness.grant(id, up),
            Grant::Lease { lease_ms: 1_000 },
            "no detector: the default configuration"
        );
        assert!(liveness.install(FailureDetector::new(config(250, 1_000))));
        liveness.with(|d| d.set_up_servers([(id, "s1:1".to_string())], liveness.now_ms()));
        clock.advance(Duration::from_millis(300));
        assert_eq!(liveness.now_ms(), 300);
        liveness.with(|d| d.ping_succeeded(id, liveness.now_ms()));
        clock.advance(Duration::from_millis(499));
        assert_eq!(liveness.grant(id, up), lease, "silent 499 ms");
        clock.advance(Duration::from_millis(1));
        assert_eq!(liveness.grant(id, up), Grant::NotNow, "silent 500 ms");
    }
}

//! Whether this storage server may serve object operations: not a zombie, and
//! holding a membership lease while monitored (R§7.11; design notes "Membership
//! leases"). The request path asks it before every object operation and again
//! after a read (`storage_service::request_path`); the failure monitor
//! ([`crate::failure_monitor`]) feeds it (lease grants, zombie verdicts). It is its
//! own module, below both, so neither the service nor the monitor imports the
//! other to reach it (issue 19: no import circles).
//!
//! Thread-safety: [`MembershipGuard`] is atomics and write-once cells; every call
//! is lock-free and allocation-free, so it sits on the read path.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use ramstore_rpc::Transport;
use ramstore_wire::ErrorBody;

/// How often a server pings a random other server, by default (R§7.2: 100 ms).
pub const DEFAULT_PING_INTERVAL_MS: u64 = 100;
/// How long a server waits for a ping's answer, by default. R§7.2 uses "a few tens
/// of milliseconds"; over TCP on a small, shared machine stalls that long are common,
/// and a crashed process's port refuses connections at once anyway, so this only
/// bounds the detection of a hung server.
pub const DEFAULT_PING_TIMEOUT_MS: u64 = 300;
/// The longest accepted ping interval or timeout (one hour).
pub const MAX_MONITOR_MS: u64 = 3_600_000;

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

/// What answering `PingServer` and the lease check need, set once when the
/// failure monitor starts.
pub struct Monitor {
    pub transport: Arc<dyn Transport>,
    pub config: MonitorConfig,
}

/// A server's membership state: zombie or not, and its lease.
pub struct MembershipGuard {
    zombie: AtomicBool,
    /// Set once this server has begun a clean stop (it sends `Leave`): the
    /// coordinator then lists it as gone, and a lease renewal or ping answered
    /// "not UP" after that is the expected echo of the Leave, not a zombie verdict.
    leaving: AtomicBool,
    hook: OnceLock<ZombieHook>,
    monitor: OnceLock<Monitor>,
    origin: Instant,
    /// When the membership lease ends, in ms since `origin` (0: never granted).
    lease_until_ms: AtomicU64,
}

impl MembershipGuard {
    /// A server's state: not a zombie, not monitored, no lease; `origin` is now
    /// on the clock of the instants it will be given.
    pub fn new(origin: Instant) -> Self {
        Self {
            zombie: AtomicBool::new(false),
            leaving: AtomicBool::new(false),
            hook: OnceLock::new(),
            monitor: OnceLock::new(),
            origin,
            lease_until_ms: AtomicU64::new(0),
        }
    }

    fn ms_since_origin(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether this server learned it is a zombie.
    pub fn is_zombie(&self) -> bool {
        self.zombie.load(Ordering::Acquire)
    }

    /// Sets what happens when this server learns it is a zombie (once; later calls
    /// are ignored).
    pub fn set_hook(&self, hook: ZombieHook) {
        let _ = self.hook.set(hook);
    }

    /// This server (`server_id`) learned it was declared crashed (R§7.11), for
    /// `reason`: from now on it is a zombie, and the first time it logs why and
    /// then calls the hook (which may exit the process, so the log comes first).
    ///
    /// After [`Self::begin_leave`] it still stops serving, but it neither logs an
    /// error nor calls the hook: the coordinator answers "not UP" because this
    /// server told it that it is leaving, and the clean stop under way must end
    /// with the clean stop's exit status, not a zombie's.
    pub fn declare_zombie(&self, server_id: u64, reason: &str) {
        if self.zombie.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.leaving.load(Ordering::Acquire) {
            tracing::debug!(
                server_id,
                reason,
                "listed as gone after its Leave: stopping as planned"
            );
            return;
        }
        tracing::error!(
            server_id,
            reason,
            "this server was declared crashed by the cluster (a zombie): it stops serving"
        );
        if let Some(hook) = self.hook.get() {
            (hook.0)();
        }
    }

    /// This server begins a clean stop: it is about to send `Leave`. Called before
    /// the Leave goes out, so no answer that the Leave caused can be taken for a
    /// zombie verdict (a renewal in flight may be answered after the Leave).
    pub fn begin_leave(&self) {
        self.leaving.store(true, Ordering::Release);
    }

    /// Starts lease checking with the monitor's transport and timing (once; false
    /// if a monitor was set already).
    pub fn start_monitoring(&self, monitor: Monitor) -> bool {
        self.monitor.set(monitor).is_ok()
    }

    /// The monitor, once monitoring started.
    pub fn monitor(&self) -> Option<&Monitor> {
        self.monitor.get()
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

    /// The RETRY body for an object operation while this server holds no
    /// membership lease at `now`, else `None`: retry after one ping interval, when
    /// the next renewal may have landed.
    pub fn refusal(&self, now: Instant) -> Option<ErrorBody<'static>> {
        if !self.unconfirmed(now) {
            return None;
        }
        let delay_ms = self
            .monitor
            .get()
            .map_or(DEFAULT_PING_INTERVAL_MS, |m| m.config.ping_interval_ms);
        Some(ErrorBody::Retry {
            delay_ms: u32::try_from(delay_ms).unwrap_or(u32::MAX),
        })
    }

    /// A lease of `lease_ms` was granted for a request sent at `sent`: it holds
    /// until `sent + lease_ms` (never shortened by an older grant answered late).
    pub fn extend_lease(&self, sent: Instant, lease_ms: u64) {
        let until = self.ms_since_origin(sent).saturating_add(lease_ms);
        self.lease_until_ms.fetch_max(until, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_clock::Clock;
    use std::time::Duration;

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
        let state = MembershipGuard::new(clock.now());
        clock.advance(Duration::from_secs(1));
        let later = clock.now() + Duration::from_secs(3_600);
        assert!(!state.unconfirmed(later), "not monitoring: never");
        assert!(state.start_monitoring(Monitor {
            transport: Arc::new(ramstore_rpc::LocalTransport::new()),
            config: MonitorConfig::default(),
        }));
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

    #[test]
    fn declare_zombie_runs_the_hook_once() {
        let guard = MembershipGuard::new(ramstore_clock::ManualClock::new().now());
        let calls = Arc::new(AtomicU64::new(0));
        let counted = calls.clone();
        guard.set_hook(ZombieHook::new(move || {
            counted.fetch_add(1, Ordering::Relaxed);
        }));
        assert!(!guard.is_zombie());
        guard.declare_zombie(7, "test");
        guard.declare_zombie(7, "again: only the first time counts");
        assert!(guard.is_zombie());
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    /// Regression (CI, stop 34): SIGTERM right after the ready line sent `Leave`
    /// while the first lease renewal was in flight; the renewal was answered "not
    /// UP" after the Leave and the process exited as a zombie (status 4), not
    /// cleanly (0).
    #[test]
    fn declare_zombie_after_begin_leave_stops_serving_without_the_hook() {
        let guard = MembershipGuard::new(ramstore_clock::ManualClock::new().now());
        let calls = Arc::new(AtomicU64::new(0));
        let counted = calls.clone();
        guard.set_hook(ZombieHook::new(move || {
            counted.fetch_add(1, Ordering::Relaxed);
        }));
        guard.begin_leave();
        guard.declare_zombie(7, "the coordinator refused its lease: 'you are not UP'");
        assert!(guard.is_zombie(), "a leaving server still stops serving");
        assert_eq!(
            calls.load(Ordering::Relaxed),
            0,
            "but it is not a zombie exit"
        );
    }
}

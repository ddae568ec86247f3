//! How a client finds the cluster and how long it keeps trying.

use std::sync::Arc;
use std::time::Duration;

use ramstore_clock::{system_clock, system_rng, Clock, Rng};

/// Default per-attempt deadline ([`ClientOptions::rpc_deadline`]).
pub const DEFAULT_RPC_DEADLINE_MS: u64 = 2_000;
/// Default overall deadline ([`ClientOptions::operation_deadline`]).
pub const DEFAULT_OPERATION_DEADLINE_MS: u64 = 30_000;

/// Default time a write keeps retrying a full log ([`ClientOptions::no_space_patience`]).
pub const DEFAULT_NO_SPACE_PATIENCE_MS: u64 = 3_000;

/// Whether mutations are exactly-once RPCs by default ([`ClientOptions::exactly_once`]).
pub const DEFAULT_EXACTLY_ONCE: bool = true;

/// Default reply-polling window ([`ClientOptions::reply_poll_us`]): none, so an
/// idle client costs no CPU; latency-sensitive callers turn it on.
pub const DEFAULT_REPLY_POLL_US: u64 = 0;

const _: () = assert!(DEFAULT_RPC_DEADLINE_MS <= DEFAULT_OPERATION_DEADLINE_MS);
const _: () = assert!(DEFAULT_NO_SPACE_PATIENCE_MS <= DEFAULT_OPERATION_DEADLINE_MS);

/// Where the coordinator is and how long operations may take.
///
/// ```
/// use std::time::Duration;
/// use ramstore_client::ClientOptions;
///
/// let options = ClientOptions {
///     operation_deadline: Duration::from_secs(5),
///     ..ClientOptions::new("10.0.0.1:11100")
/// };
/// assert_eq!(options.rpc_deadline, Duration::from_secs(2));
/// ```
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The coordinator's address (`host:port`), or several separated by commas
    /// (`host:port,host:port`): the active coordinator and its standbys (R§9). On a
    /// transport failure the client moves on to the next address, round-robin.
    pub coordinator: String,
    /// How long one attempt (one RPC) may take before it counts as failed and is
    /// retried (default 2 s).
    pub rpc_deadline: Duration,
    /// How long a whole operation may take, retries included, before it fails with
    /// [`crate::ClientError::DeadlineExceeded`] (default 30 s).
    pub operation_deadline: Duration,
    /// How long an operation keeps retrying NO_SPACE answers (a master's log is
    /// full, L§7) from the first one before it fails with
    /// [`crate::ClientError::NoSpace`] (default 3 s). Long enough for a cleaner
    /// that is catching up; a log whose live data does not fit stays full, and a
    /// caller should hear so rather than wait out the whole operation deadline.
    /// Values above [`Self::operation_deadline`] act as the operation deadline.
    pub no_space_patience: Duration,
    /// The clock every deadline, backoff and round-trip time is measured on
    /// (default: the system clock; a simulation gives its own).
    pub clock: Arc<dyn Clock>,
    /// Where backoff jitter and ping nonces come from (default: the system's).
    pub rng: Arc<dyn Rng>,
    /// Send writes, deletes and increments as exactly-once RPCs (RIFL, Lee et al.
    /// SOSP'15; default on): a retry after a lost reply gets the first answer
    /// instead of executing again. Opens a client lease at the coordinator at the
    /// first such operation and renews it while the client is busy; a retry that
    /// outlives the lease fails with [`crate::ClientError::StaleRpc`] rather than
    /// run twice. Off: no RPC ids, at-least-once (a retried increment may apply
    /// twice). Multi-ops (multi-write, multi-remove) are still at-least-once.
    pub exactly_once: bool,
    /// How long each RPC polls for its reply before the calling thread may sleep,
    /// in µs (default 0: never; capped at 10,000). A reply that takes longer
    /// than a few µs otherwise costs a wake-up of the caller's core — tens of µs
    /// on a VM whose idle vCPUs halt — which a durable write (three round trips
    /// behind it) pays where a read does not (R§5.1; `ramstore_rpc::reply_wait`).
    /// Polling spends up to this much CPU per call; worth it on a client thread
    /// that waits on one operation at a time, and only with a core to spare.
    pub reply_poll_us: u64,
}

impl ClientOptions {
    /// Options with the default deadlines for the coordinator at `coordinator`.
    ///
    /// ```
    /// # use ramstore_client::ClientOptions;
    /// let options = ClientOptions::new("127.0.0.1:11100");
    /// assert_eq!(options.coordinator, "127.0.0.1:11100");
    /// ```
    ///
    /// Several coordinators (an active one and standbys) are given as one
    /// comma-separated string:
    ///
    /// ```
    /// # use ramstore_client::ClientOptions;
    /// let options = ClientOptions::new("10.0.0.1:11100,10.0.0.2:11100");
    /// assert_eq!(options.coordinator_addrs(), vec!["10.0.0.1:11100", "10.0.0.2:11100"]);
    /// ```
    pub fn new(coordinator: impl Into<String>) -> Self {
        Self {
            coordinator: coordinator.into(),
            rpc_deadline: Duration::from_millis(DEFAULT_RPC_DEADLINE_MS),
            operation_deadline: Duration::from_millis(DEFAULT_OPERATION_DEADLINE_MS),
            no_space_patience: Duration::from_millis(DEFAULT_NO_SPACE_PATIENCE_MS),
            clock: system_clock(),
            rng: system_rng(),
            exactly_once: DEFAULT_EXACTLY_ONCE,
            reply_poll_us: DEFAULT_REPLY_POLL_US,
        }
    }

    /// The coordinator addresses of [`Self::coordinator`], in order: split at commas,
    /// blanks trimmed, empty items skipped. Never empty: a string without any address
    /// gives itself, so that errors name what was configured.
    pub fn coordinator_addrs(&self) -> Vec<String> {
        let addrs: Vec<String> = self
            .coordinator
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        if addrs.is_empty() {
            vec![self.coordinator.clone()]
        } else {
            addrs
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 21: mutations are exactly-once unless a caller turns it off.
    #[test]
    fn new_defaults_to_exactly_once() {
        assert!(ClientOptions::new("127.0.0.1:11100").exactly_once);
        let off = ClientOptions {
            exactly_once: false,
            ..ClientOptions::new("127.0.0.1:11100")
        };
        assert!(!off.exactly_once);
    }
}

//! What every part of the coordinator service shares: the core behind its one
//! lock, the transport that reaches servers, and the clock and randomness every
//! timer and choice runs on (R§3, R§9). The parts ([`crate::notifier`],
//! [`crate::membership`], [`crate::suspicion_driver`], [`crate::recovery`],
//! [`crate::changes`]) each hold an `Arc<Cluster>` and own their own state beside
//! it; none of them holds another part's lock across a call into it.
//!
//! Thread-safety: `Send + Sync`; the core's lock is held only for one core call
//! (never across an await), so storage writes happen in the order changes apply.

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use ramstore_clock::{Clock, Rng};
use ramstore_rpc::Transport;

use crate::coordinator::CoordinatorCore;
use crate::server_list::{ServerId, ServerStatus};

/// The core and the means to reach servers. Thread-safe.
pub struct Cluster {
    core: Mutex<CoordinatorCore>,
    /// How the coordinator reaches servers.
    pub transport: Arc<dyn Transport>,
    /// The time every timer, deadline and lease here runs on.
    pub clock: Arc<dyn Clock>,
    /// Where nonces, helper choices and recovery ids come from.
    pub rng: Arc<dyn Rng>,
}

impl Cluster {
    /// The shared state over `core`.
    pub fn new(
        core: CoordinatorCore,
        transport: Arc<dyn Transport>,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
    ) -> Self {
        Self {
            core: Mutex::new(core),
            transport,
            clock,
            rng,
        }
    }

    /// The core, locked; hold the guard for one operation only.
    pub fn core(&self) -> MutexGuard<'_, CoordinatorCore> {
        self.core.lock()
    }

    /// Whether server `id` is listed UP.
    pub fn is_up(&self, id: ServerId) -> bool {
        self.core()
            .server(id)
            .is_some_and(|s| s.status == ServerStatus::Up)
    }

    /// The UP servers and their addresses.
    pub fn up_servers(&self) -> Vec<(ServerId, String)> {
        self.core()
            .state()
            .servers()
            .entries()
            .iter()
            .filter(|e| e.is_up())
            .map(|e| (e.id, e.address.clone()))
            .collect()
    }
}

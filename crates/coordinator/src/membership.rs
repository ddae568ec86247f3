//! The membership guard: who is a live member, as the coordinator answers it to
//! servers (R§7.2, R§7.11; design notes "Membership leases"). It owns the failure
//! detector's bookkeeping ([`Liveness`]), which the suspicion driver
//! ([`crate::suspicion_driver`]) feeds with ping results and this part reads to
//! grant leases, and it answers a zombie — a caller listed CRASHED or removed —
//! SERVER_NOT_UP "you are not UP in the cluster", after which the caller stops
//! serving and exits.
//!
//! Thread-safety: `Send + Sync`; [`Liveness`] has its own short lock.

use std::sync::Arc;

use ramstore_wire::{encode_response, Opcode, Response, WireError};

use crate::cluster::Cluster;
use crate::lease::{Grant, Liveness};
use crate::server_list::{ServerId, ServerStatus};

pub use ramstore_wire::{not_up, NOT_UP_MESSAGE};

/// Zombie checks and lease grants. Thread-safe.
pub struct MembershipGuard {
    cluster: Arc<Cluster>,
    /// The failure detector's bookkeeping, shared with the suspicion driver.
    liveness: Liveness,
}

impl MembershipGuard {
    /// A guard whose lease bookkeeping counts on the cluster's clock from now.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Self {
            liveness: Liveness::new(cluster.clock.clone()),
            cluster,
        }
    }

    /// The failure detector's bookkeeping (the suspicion driver records pings in it).
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// Whether `caller_id` (0: not a server) is a server this coordinator lists as
    /// CRASHED or removed (a zombie, R§7.11). Unknown ids are not refused.
    pub fn caller_not_up(&self, caller_id: u64) -> bool {
        caller_id != 0
            && self
                .cluster
                .core()
                .server(ServerId(caller_id))
                .is_some_and(|s| s.status != ServerStatus::Up)
    }

    /// Answers a `Ping` from a server: the echo, or SERVER_NOT_UP if the caller is
    /// not UP (R§7.11).
    pub fn answer_ping(
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

    /// Answers `RenewLease` ([`crate::lease`]): a lease, none for now (0), or
    /// SERVER_NOT_UP to a zombie (R§7.11).
    pub fn answer_renew_lease(
        &self,
        id: u64,
        caller_id: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let caller = ServerId(caller_id);
        let status = self.cluster.core().server(caller).map(|s| s.status);
        let response = match self.liveness.grant(caller, status) {
            Grant::Lease { lease_ms } => Response::RenewLease {
                lease_ms: u32::try_from(lease_ms).unwrap_or(u32::MAX),
            },
            Grant::NotNow => Response::RenewLease { lease_ms: 0 },
            Grant::NotUp => not_up(),
        };
        encode_response(id, Opcode::RenewLease, &response, out)
    }
}

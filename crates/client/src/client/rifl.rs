//! The client side of exactly-once RPCs (RIFL, Lee et al. SOSP'15 §4.2): a client
//! lease opened lazily at the first mutating operation and renewed before it
//! runs out, a sequence number per mutating RPC (kept across its retries), and
//! the first sequence number still without an answer, which lets masters forget
//! the records of everything below it.
//!
//! Renewal happens on the operation path, once the lease is past half its term:
//! one coordinator RPC per half term while the client is busy, none while idle,
//! and no background task (a client may live in any runtime). A lease left to
//! expire while idle is replaced by a new one at the next operation; an RPC
//! retried under an expired lease fails with `StaleRpc` rather than running twice.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ramstore_wire::{Request, Response, RpcId};

use super::Inner;
use crate::error::ClientError;

/// The client's lease and sequence numbers.
#[derive(Debug, Default)]
pub(crate) struct Session {
    state: Mutex<SessionState>,
    /// Serialises opening and renewing, so concurrent operations share one.
    renewing: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct SessionState {
    /// (lease id, when to renew, when it expires), once opened.
    lease: Option<(u64, Instant, Instant)>,
    next_seq: u64,
    /// Sequence numbers sent and not yet answered.
    incomplete: BTreeSet<u64>,
}

/// One exactly-once RPC in flight: its id is kept across retries; dropping the
/// ticket (answer, error or cancellation) marks it complete.
pub(crate) struct Ticket {
    session: Arc<Inner>,
    pub(crate) id: RpcId,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.session.rifl.state.lock();
        // Only the lease it was sent under tracks it.
        if s.lease.map(|l| l.0) == Some(self.id.lease_id) {
            s.incomplete.remove(&self.id.seq);
        }
    }
}

/// The RPC ids of a multi-op's ops, kept across its retries; dropping them
/// (every op answered, failed, or the call cancelled) marks them all complete.
pub(crate) struct Tickets {
    session: Arc<Inner>,
    pub(crate) lease_id: u64,
    pub(crate) first_incomplete: u64,
    /// Op `i`'s sequence number.
    pub(crate) seqs: Vec<u64>,
}

impl Tickets {
    /// The sequence numbers of ops `members` (caller indices), in that order.
    pub(crate) fn seqs_of(&self, members: &[usize]) -> Vec<u64> {
        members
            .iter()
            .filter_map(|&m| self.seqs.get(m).copied())
            .collect()
    }
}

impl Drop for Tickets {
    fn drop(&mut self) {
        let mut s = self.session.rifl.state.lock();
        if s.lease.map(|l| l.0) == Some(self.lease_id) {
            for seq in &self.seqs {
                s.incomplete.remove(seq);
            }
        }
    }
}

impl Inner {
    /// A new RPC id under a live lease (opening or renewing it first if needed).
    pub(crate) async fn rpc_ticket(self: &Arc<Self>) -> Result<Ticket, ClientError> {
        self.ensure_lease().await?;
        let mut s = self.rifl.state.lock();
        let Some((lease_id, ..)) = s.lease else {
            // `ensure_lease` succeeded, and only it clears the lease.
            return Err(ClientError::UnknownLease);
        };
        s.next_seq += 1;
        let seq = s.next_seq;
        s.incomplete.insert(seq);
        let first_incomplete = s.incomplete.first().copied().unwrap_or(seq);
        drop(s);
        Ok(Ticket {
            session: self.clone(),
            id: RpcId {
                lease_id,
                seq,
                first_incomplete,
            },
        })
    }

    /// `n` new RPC ids under one live lease, one per op of a multi-op (RIFL
    /// §4: each object's op is its own RPC), numbered consecutively so each
    /// request's numbers rise with its items' order; `first_incomplete` is
    /// taken once all are counted incomplete, so it is at most each of them.
    pub(crate) async fn rpc_tickets(self: &Arc<Self>, n: usize) -> Result<Tickets, ClientError> {
        self.ensure_lease().await?;
        let mut s = self.rifl.state.lock();
        let Some((lease_id, ..)) = s.lease else {
            // `ensure_lease` succeeded, and only it clears the lease.
            return Err(ClientError::UnknownLease);
        };
        let first = s.next_seq + 1;
        s.next_seq += n as u64;
        let seqs: Vec<u64> = (first..first + n as u64).collect();
        s.incomplete.extend(seqs.iter().copied());
        let first_incomplete = s.incomplete.first().copied().unwrap_or(first);
        drop(s);
        Ok(Tickets {
            session: self.clone(),
            lease_id,
            first_incomplete,
            seqs,
        })
    }

    /// Opens the lease if there is none (or it expired), renews it past half its
    /// term.
    async fn ensure_lease(&self) -> Result<(), ClientError> {
        let now = self.options.clock.now();
        let current = self.rifl.state.lock().lease;
        if matches!(current, Some((_, renew_at, _)) if now < renew_at) {
            return Ok(());
        }
        let _one = self.rifl.renewing.lock().await;
        let current = self.rifl.state.lock().lease;
        let now = self.options.clock.now();
        let ask = match current {
            Some((_, renew_at, _)) if now < renew_at => return Ok(()),
            Some((id, _, expires)) if now < expires => id,
            // None, or expired: a new lease and a new sequence space.
            _ => 0,
        };
        let sent = self.options.clock.now();
        let answer = self
            .coordinator(Request::ClientLease { lease_id: ask }, |r| match r {
                Response::ClientLease { lease_id, lease_ms } => Some((lease_id, lease_ms)),
                _ => None,
            })
            .await;
        let (lease_id, lease_ms) = match answer {
            Ok(granted) => granted,
            // Expired at the coordinator before we renewed: start afresh.
            Err(ClientError::UnknownLease) if ask != 0 => {
                self.coordinator(Request::ClientLease { lease_id: 0 }, |r| match r {
                    Response::ClientLease { lease_id, lease_ms } => Some((lease_id, lease_ms)),
                    _ => None,
                })
                .await?
            }
            Err(e) => return Err(e),
        };
        // Counted from when the request was sent: it cannot have started later.
        let term = Duration::from_millis(u64::from(lease_ms));
        let mut s = self.rifl.state.lock();
        if s.lease.map(|l| l.0) != Some(lease_id) {
            s.next_seq = 0;
            s.incomplete.clear();
        }
        s.lease = Some((lease_id, sent + term / 2, sent + term));
        Ok(())
    }

    /// The current lease id, if one is open (tests).
    pub(crate) fn lease_id(&self) -> Option<u64> {
        self.rifl.state.lock().lease.map(|l| l.0)
    }
}

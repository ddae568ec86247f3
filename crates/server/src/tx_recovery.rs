//! The transaction recovery manager (Lee et al. SOSP'15 §6.4; RAMCloud's
//! TxRecoveryManager): a client that crashes mid-commit leaves its prepared
//! ops locked on every participant; this loop finishes such a transaction so
//! no lock is held forever and the transaction is decided the same everywhere.
//!
//! Every `check_ms` of the server's clock the loop lists the transactions
//! prepared here and undecided (`Transactions::undecided`) and notes when it
//! first saw each. One held longer than `timeout_ms` — and, if this master
//! does not hold the transaction's first op (op index 0), longer than
//! [`OTHER_PARTICIPANT_FACTOR`] timeouts — is recovered:
//! 1. the coordinator's tablet map gives each listed object's owner now;
//! 2. each owner is asked `TxRequestVote` about its objects: PREPARED if it
//!    holds them prepared, its outcome if it decided, else it decides ABORT at
//!    once and remembers it (a late prepare is then refused);
//! 3. COMMIT only if no vote is ABORT ([`ramstore_master::decision_of`]);
//! 4. the decision goes first to the owner of op 0 and is durable once that
//!    owner answers (its decided marks are replicated, and a replay of them
//!    remembers the outcome), then to every other owner.
//!
//! Why op 0's holder drives: exactly one master holds op 0, so one manager
//! per transaction in the common case, not one per participant each asking
//! everyone. The others still act, later, because op 0's holder may never
//! have prepared (its prepare was lost with the client): then no one holds op
//! 0 and only another participant can finish the transaction. Two managers at
//! once are safe (votes are sticky, so both reach the same decision); they
//! only cost RPCs.
//!
//! Nothing is lost if a round fails (no answer, a stale map): the transaction
//! stays prepared here and the next round tries again; a decision not yet
//! acknowledged by every owner is resent each round until it is.
//!
//! The same loop releases held commits (`ramstore_master::tx::held`): a
//! commit this master applied for a transaction other masters take part in is
//! held until every owner has acknowledged the decision. A held commit seen in
//! an earlier round (the client's own decisions have had a round to arrive) is
//! sent to every owner of its objects (a no-op where it was applied) and, once
//! all acknowledged, released; at most [`RELEASE_BATCH`] per round, in one
//! `TxDecisions` RPC per owner, all owners at once.
//!
//! It runs on the Clock and Transport seams, so the simulator runs it too.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_master::{decision_of, TxId, Undecided};
use ramstore_rpc::Transport;
use ramstore_wire::{
    decode_response, encode_request, encode_tx_decisions, encode_tx_request_vote, Request,
    Response, Status, TxKey, TxParticipant, MAX_TX_DECISIONS,
};
use tracing::Instrument;

use crate::failure_monitor::coordinator_answer;
use crate::storage_service::StorageService;

/// Default time a transaction may stay prepared on the master holding its
/// first op before that master recovers it, in ms. A commit holds its locks
/// for a round trip or two (well under a millisecond to a few); 5 s is far
/// beyond a live client's commit, yet a crashed client's locks go within
/// seconds, not at its 30 s lease's end. Recovering a live but slow client's
/// transaction is safe (it is decided the same way the client would have
/// been told); it only aborts it.
pub const DEFAULT_TX_RECOVERY_TIMEOUT_MS: u64 = 5_000;

/// How many timeouts a participant that does not hold op 0 waits before it
/// recovers the transaction itself (see the module comment).
pub const OTHER_PARTICIPANT_FACTOR: u32 = 4;

/// How long one vote or decision RPC may take, in ms.
const CALL_DEADLINE_MS: u64 = 2_000;

/// Most held commits one round releases (one `TxDecisions` RPC per owner
/// carries them all).
pub const RELEASE_BATCH: usize = 16_384;

/// What one round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Transactions committed by this manager.
    pub committed: usize,
    /// Transactions aborted by this manager.
    pub aborted: usize,
    /// Transactions whose recovery must be tried again (no answer, stale map).
    pub retry: usize,
    /// Held commits released (every owner acknowledged the decision).
    pub released: usize,
}

/// The loop's memory between rounds.
#[derive(Debug, Default)]
pub struct State {
    /// When the loop first saw each undecided transaction.
    first_seen: HashMap<TxId, Instant>,
    /// Decisions taken here that some owner has not acknowledged yet, with the
    /// transaction's objects, resent each round (ordered: the simulator's
    /// runs must not depend on a hash order).
    unsent: BTreeMap<TxId, (bool, Vec<(u64, u64)>)>,
    /// The held commits seen in the last round: released from the next on.
    held_seen: HashSet<TxId>,
}

/// Starts the loop for `service` every `check_ms`, recovering transactions
/// held past `timeout_ms`; `check_ms` or `timeout_ms` 0 starts nothing. Abort
/// the task to stop.
pub fn start(
    service: Arc<StorageService>,
    transport: Arc<dyn Transport>,
    coordinator: String,
    check_ms: u64,
    timeout_ms: u64,
) -> Option<tokio::task::JoinHandle<()>> {
    if check_ms == 0 || timeout_ms == 0 {
        return None;
    }
    let task = async move {
        let clock = service.clock.clone();
        let mut tick = ramstore_clock::interval(&clock, Duration::from_millis(check_ms));
        let mut state = State::default();
        let timeout = Duration::from_millis(timeout_ms);
        loop {
            tick.tick().await;
            if service.is_zombie() {
                return;
            }
            let round =
                recover_once(&service, &*transport, &coordinator, &mut state, timeout).await;
            if round != Round::default() {
                tracing::info!(?round, "transaction recovery round");
            }
        }
    };
    Some(tokio::spawn(task.in_current_span()))
}

/// The check pause for a timeout: a quarter of it (at least 10 ms), so a
/// transaction is recovered within 1.25 timeouts of its prepare.
pub fn check_ms_for(timeout_ms: u64) -> u64 {
    (timeout_ms / 4).max(10)
}

/// One round: notes the undecided transactions, recovers those held too long
/// and resends decisions not yet acknowledged.
pub async fn recover_once(
    service: &StorageService,
    transport: &dyn Transport,
    coordinator: &str,
    state: &mut State,
    timeout: Duration,
) -> Round {
    let now = service.clock.now();
    let undecided = service.tx.undecided();
    state
        .first_seen
        .retain(|id, _| undecided.iter().any(|u| u.id == *id));
    let mut due: Vec<Undecided> = Vec::new();
    let mut round = Round::default();
    for u in undecided {
        // Decided already (a replay brought another participant's outcome
        // here): applied now, no votes needed; a failure is tried next round.
        if let Some(commit) = u.known_outcome {
            if service.tx.decide(service.store(), u.id, commit).is_ok() {
                state.first_seen.remove(&u.id);
                if commit {
                    round.committed += 1;
                } else {
                    round.aborted += 1;
                }
            }
            continue;
        }
        let since = *state.first_seen.entry(u.id).or_insert(now);
        let patience = if u.holds_first_op {
            timeout
        } else {
            timeout * OTHER_PARTICIPANT_FACTOR
        };
        // Without the list nothing can be asked; another participant (op 0's
        // holder always has it, on its first record) must recover it.
        if now.saturating_duration_since(since) >= patience && !u.participants.is_empty() {
            due.push(u);
        }
    }
    let held = service.tx.held_commits(RELEASE_BATCH);
    let releasable: Vec<(TxId, Vec<(u64, u64)>)> = held
        .iter()
        .filter(|(id, _)| state.held_seen.contains(id))
        .cloned()
        .collect();
    state.held_seen = held.into_iter().map(|(id, _)| id).collect();
    if due.is_empty() && state.unsent.is_empty() && releasable.is_empty() {
        return round;
    }
    let Some(map) = tablet_map(service, transport, coordinator).await else {
        round.retry = due.len() + state.unsent.len() + releasable.len();
        return round;
    };
    round.released = release(service, transport, &map, &releasable).await;
    for u in due {
        match votes(transport, &map, u.id, &u.participants).await {
            Some(commit) => {
                state.unsent.insert(u.id, (commit, u.participants));
                if commit {
                    round.committed += 1;
                } else {
                    round.aborted += 1;
                }
            }
            None => round.retry += 1,
        }
    }
    let pending: Vec<TxId> = state.unsent.keys().copied().collect();
    for id in pending {
        let Some((commit, objects)) = state.unsent.get(&id).cloned() else {
            continue;
        };
        if send_decision(transport, &map, id, commit, &objects).await {
            state.unsent.remove(&id);
            state.first_seen.remove(&id);
        } else {
            round.retry += 1;
        }
    }
    round
}

/// Sends the held commits of `held` to every owner of their objects — one
/// `TxDecisions` per owner, all owners at once — and releases those whose
/// every owner acknowledged; returns how many.
async fn release(
    service: &StorageService,
    transport: &dyn Transport,
    map: &[Tablet],
    held: &[(TxId, Vec<(u64, u64)>)],
) -> usize {
    // Each owner's transactions, and each transaction's owners.
    let mut by_owner: BTreeMap<String, Vec<TxKey>> = BTreeMap::new();
    let mut owners_of: Vec<Option<Vec<String>>> = Vec::with_capacity(held.len());
    for (id, objects) in held {
        let owners = group_by_owner(map, objects)
            .map(|groups| groups.into_iter().map(|(addr, _)| addr).collect::<Vec<_>>());
        for addr in owners.iter().flatten() {
            by_owner.entry(addr.clone()).or_default().push(TxKey {
                lease_id: id.lease_id,
                tx_seq: id.tx_seq,
            });
        }
        owners_of.push(owners);
    }
    let sent = futures_util::future::join_all(
        by_owner
            .iter()
            .map(|(addr, txs)| send_decisions(transport, addr, txs)),
    )
    .await;
    let acknowledged: HashSet<&str> = by_owner
        .keys()
        .zip(sent)
        .filter(|(_, ok)| *ok)
        .map(|(addr, _)| addr.as_str())
        .collect();
    let mut released = 0;
    for ((id, _), owners) in held.iter().zip(owners_of) {
        let Some(owners) = owners else {
            continue; // An object with no owner in the map: next round.
        };
        // A failed release (a full log) is retried next round: the commit
        // stays held, which is always safe.
        if owners.iter().all(|a| acknowledged.contains(a.as_str()))
            && service.tx.release_held(service.store(), *id).is_ok()
        {
            released += 1;
        }
    }
    released
}

/// Sends COMMIT for `txs` to `addr`, [`MAX_TX_DECISIONS`] per frame; true once
/// every frame was acknowledged.
async fn send_decisions(transport: &dyn Transport, addr: &str, txs: &[TxKey]) -> bool {
    for chunk in txs.chunks(MAX_TX_DECISIONS) {
        let mut frame = Vec::new();
        if encode_tx_decisions(0, true, chunk, &mut frame).is_err() {
            return false;
        }
        let answer = transport
            .call(addr, frame, Duration::from_millis(CALL_DEADLINE_MS))
            .await;
        match answer.as_deref().map(decode_response) {
            Ok(Ok((h, Response::TxDecisions))) if h.status == Status::Ok => {}
            _ => return false,
        }
    }
    true
}

/// One tablet of the coordinator's map: (table id, first hash, last hash,
/// owner's address).
type Tablet = (u64, u64, u64, String);

async fn tablet_map(
    service: &StorageService,
    transport: &dyn Transport,
    coordinator: &str,
) -> Option<Vec<Tablet>> {
    let answer = coordinator_answer(
        &service.clock,
        transport,
        coordinator,
        &Request::GetTabletMap,
    )
    .await?;
    match decode_response(&answer) {
        Ok((h, Response::GetTabletMap { tablets, .. })) if h.status == Status::Ok => Some(
            tablets
                .iter()
                .map(|t| (t.table_id, t.start_hash, t.end_hash, t.address.to_string()))
                .collect(),
        ),
        _ => None,
    }
}

/// The objects grouped by their owner's address, in the objects' order (the
/// owner of op 0 first); `None` if some object has no owner in the map.
fn group_by_owner(
    map: &[Tablet],
    objects: &[(u64, u64)],
) -> Option<Vec<(String, Vec<TxParticipant>)>> {
    let mut groups: Vec<(String, Vec<TxParticipant>)> = Vec::new();
    for &(table_id, key_hash) in objects {
        let (.., addr) = map
            .iter()
            .find(|(t, start, end, _)| *t == table_id && (*start..=*end).contains(&key_hash))?;
        let object = TxParticipant { table_id, key_hash };
        match groups.iter_mut().find(|(a, _)| a == addr) {
            Some((_, members)) => members.push(object),
            None => groups.push((addr.clone(), vec![object])),
        }
    }
    Some(groups)
}

/// Asks every owner for its vote and returns the decision, or `None` if some
/// owner could not be asked or did not answer (the round is retried).
async fn votes(
    transport: &dyn Transport,
    map: &[Tablet],
    id: TxId,
    objects: &[(u64, u64)],
) -> Option<bool> {
    let groups = group_by_owner(map, objects)?;
    let mut votes = Vec::with_capacity(groups.len());
    for (addr, members) in &groups {
        let mut frame = Vec::new();
        encode_tx_request_vote(0, id.lease_id, id.tx_seq, members, &mut frame).ok()?;
        let answer = transport
            .call(addr, frame, Duration::from_millis(CALL_DEADLINE_MS))
            .await
            .ok()?;
        match decode_response(&answer) {
            Ok((h, Response::TxRequestVote { vote })) if h.status == Status::Ok => votes.push(vote),
            _ => return None,
        }
    }
    decision_of(&votes)
}

/// Sends the decision to every owner, op 0's first (its answer makes the
/// decision durable: the applied decision's marks are replicated); true once
/// every owner acknowledged it.
async fn send_decision(
    transport: &dyn Transport,
    map: &[Tablet],
    id: TxId,
    commit: bool,
    objects: &[(u64, u64)],
) -> bool {
    let Some(groups) = group_by_owner(map, objects) else {
        return false;
    };
    let mut frame = Vec::new();
    let request = Request::TxDecision {
        lease_id: id.lease_id,
        tx_seq: id.tx_seq,
        commit,
    };
    if encode_request(0, &request, &mut frame).is_err() {
        return false;
    }
    for (addr, _) in &groups {
        let answer = transport
            .call(addr, frame.clone(), Duration::from_millis(CALL_DEADLINE_MS))
            .await;
        match answer.as_deref().map(decode_response) {
            Ok(Ok((h, Response::TxDecision))) if h.status == Status::Ok => {}
            // Op 0's owner first: a later owner hears nothing until the
            // decision is durable there.
            _ => return false,
        }
    }
    true
}

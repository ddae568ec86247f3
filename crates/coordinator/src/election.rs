//! Choosing the one active coordinator: a leader key in etcd bound to a lease (R§9).
//!
//! RAMCloud keeps a *leader object* in external storage that acts as a lease for the
//! active coordinator: the active coordinator renews it, and if it stops doing so a
//! standby takes it over, reads the state and becomes active (R§9). Here:
//!
//! - [`campaign`] waits until the leader key (`/ramstore/<cluster>/leader`) is
//!   absent, then creates it in one transaction (`create_revision == 0`), bound to a
//!   fresh lease of [`DEFAULT_LEASE_TTL_MS`] (configurable), its value the
//!   coordinator's address. A standby polls the key at most every
//!   [`STANDBY_POLL_MAX_MS`], so it wins shortly after the old leader's lease
//!   expires: within the TTL plus etcd's expiry check (500 ms) and one poll.
//! - The winner renews the lease every TTL / [`KEEPALIVES_PER_TTL`] from the etcd
//!   client's own thread. It counts itself the leader only until TTL after it *sent*
//!   the last keepalive that was answered with a live lease: etcd's expiry is at
//!   least that late, so the old leader gives up no later than etcd lets a successor
//!   in (clock-rate drift aside).
//! - Every write to the state is fenced (see [`crate::EtcdStorage`]): it applies only
//!   while the leader key still has the create revision this coordinator created it
//!   with, so a deposed leader can never overwrite its successor's state, whatever
//!   its clocks say.
//! - Leadership is lost when a keepalive finds the lease gone, no keepalive succeeds
//!   for a whole TTL, the leader key is found replaced, or a fenced write is refused.
//!   Then [`LostCallback`] runs once; the `ramstore coordinator` process logs an
//!   error and exits, because a coordinator that is not the leader must not act.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_clock::Clock;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use parking_lot::Mutex;

use crate::etcd_storage::{backend, EtcdStorage, EtcdThread, WriteFence};
use crate::storage::StorageError;

/// Default lifetime of the leader's lease (`--lease-ttl-ms`).
pub const DEFAULT_LEASE_TTL_MS: u64 = 2_000;
/// Shortest lease: etcd grants at least 2 s with its default election timeout
/// (1.5 × its election timeout, rounded up to whole seconds).
pub const MIN_LEASE_TTL_MS: u64 = 2_000;
/// Longest lease accepted: a longer one only makes failover slower.
pub const MAX_LEASE_TTL_MS: u64 = 60_000;
/// etcd lease TTLs are whole seconds.
pub const LEASE_TTL_UNIT_MS: u64 = 1_000;
/// Keepalives sent per lease TTL: two may be lost before the lease is.
pub const KEEPALIVES_PER_TTL: u64 = 3;
/// Longest pause between a standby's looks at the leader key.
pub const STANDBY_POLL_MAX_MS: u64 = 100;
/// Pause before retrying a failed keepalive.
const KEEPALIVE_RETRY_MS: u64 = 100;

const _: () = assert!(DEFAULT_LEASE_TTL_MS >= MIN_LEASE_TTL_MS);
const _: () = assert!(DEFAULT_LEASE_TTL_MS.is_multiple_of(LEASE_TTL_UNIT_MS));
const _: () = assert!(MIN_LEASE_TTL_MS.is_multiple_of(LEASE_TTL_UNIT_MS));
const _: () = assert!(MAX_LEASE_TTL_MS.is_multiple_of(LEASE_TTL_UNIT_MS));

/// Checks a lease TTL: whole seconds from [`MIN_LEASE_TTL_MS`] to
/// [`MAX_LEASE_TTL_MS`].
pub fn validate_lease_ttl_ms(ms: u64) -> Result<(), String> {
    if !(MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(&ms) {
        return Err(format!(
            "lease TTL {ms} ms is outside {MIN_LEASE_TTL_MS}..={MAX_LEASE_TTL_MS} ms \
             (etcd grants at least 2 s)"
        ));
    }
    if !ms.is_multiple_of(LEASE_TTL_UNIT_MS) {
        return Err(format!(
            "lease TTL {ms} ms is not a whole number of seconds (etcd leases have \
             whole-second TTLs)"
        ));
    }
    Ok(())
}

/// Called once when this coordinator stops being the leader, with the reason, just
/// after [`Leadership::lost_signal`] has fired (so serving stops first). It
/// may run on the etcd client's thread or on a thread that was writing to the
/// store, so it must not call the store itself; it should return quickly (or exit
/// the process).
pub type LostCallback = Arc<dyn Fn(&str) + Send + Sync>;

/// Why campaigning could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionError {
    /// The lease TTL is invalid ([`validate_lease_ttl_ms`]).
    #[error("bad lease TTL: {0}")]
    BadTtl(String),
}

/// The leader's state, shared by the keepalive task, the fenced storage and the
/// [`Leadership`] handle.
pub(crate) struct LeaderState {
    leader_key: String,
    create_revision: i64,
    lease_id: i64,
    /// Why leadership was lost (`None`: still the leader).
    lost: Mutex<Option<String>>,
    /// Given up on purpose ([`Leadership::resign`]): not a loss to report.
    resigned: AtomicBool,
    lost_tx: tokio::sync::watch::Sender<bool>,
    on_lost: LostCallback,
}

impl LeaderState {
    /// The leader key and its create revision, to fence a write with; `None` once
    /// leadership is lost or given up.
    pub(crate) fn fence(&self) -> Option<(String, i64)> {
        let held = self.lost.lock().is_none() && !self.resigned.load(Ordering::Acquire);
        held.then(|| (self.leader_key.clone(), self.create_revision))
    }

    /// Why leadership was lost, for errors.
    pub(crate) fn lost_reason(&self) -> String {
        self.lost
            .lock()
            .clone()
            .unwrap_or_else(|| "leadership was given up".into())
    }

    /// Records the loss of leadership (the first reason wins) and runs the callback
    /// once. After a resignation nothing is reported.
    pub(crate) fn lose(&self, reason: &str) {
        {
            let mut lost = self.lost.lock();
            if lost.is_some() {
                return;
            }
            *lost = Some(reason.to_owned());
        }
        let _ = self.lost_tx.send(true);
        if self.resigned.load(Ordering::Acquire) {
            return;
        }
        tracing::error!(
            leader_key = %self.leader_key,
            reason,
            "lost coordinator leadership: this coordinator must stop acting at once (R§9)"
        );
        (self.on_lost)(reason);
    }

    fn is_held(&self) -> bool {
        self.fence().is_some()
    }
}

// The fenced store sees the leader only through this trait (`etcd_storage`).
impl WriteFence for LeaderState {
    fn fence(&self) -> Option<(String, i64)> {
        LeaderState::fence(self)
    }

    fn lost_reason(&self) -> String {
        LeaderState::lost_reason(self)
    }

    fn lose(&self, reason: &str) {
        LeaderState::lose(self, reason)
    }
}

/// This coordinator's leadership: alive while the lease is renewed.
pub struct Leadership {
    state: Arc<LeaderState>,
    thread: EtcdThread,
    lease_ttl: Duration,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("leader_key", &self.state.leader_key)
            .field("create_revision", &self.state.create_revision)
            .field("lease_id", &self.state.lease_id)
            .field("lease_ttl", &self.lease_ttl)
            .finish()
    }
}

impl Leadership {
    /// Whether this coordinator still holds leadership.
    pub fn is_leader(&self) -> bool {
        self.state.is_held()
    }

    /// Becomes `true` when leadership is lost (or given up).
    pub fn lost_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.state.lost_tx.subscribe()
    }

    /// The leader key's create revision, which fences this leader's writes.
    pub fn create_revision(&self) -> i64 {
        self.state.create_revision
    }

    /// The etcd lease the leader key is bound to.
    pub fn lease_id(&self) -> i64 {
        self.state.lease_id
    }

    /// The lease's TTL as etcd granted it.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// Gives leadership up: stops the keepalive and revokes the lease, which deletes
    /// the leader key, so a standby takes over at once instead of after the TTL.
    /// No [`LostCallback`] runs. Best effort: if etcd does not answer, the lease
    /// simply expires.
    pub async fn resign(&self) {
        self.state.resigned.store(true, Ordering::Release);
        self.state.lose("resigned");
        let id = self.state.lease_id;
        let result = self
            .thread
            .call("revoke", move |mut client: Client| async move {
                client
                    .lease_revoke(id)
                    .await
                    .map(|_| ())
                    .map_err(|e| backend("revoke", "", e.to_string()))
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not revoke the leader lease; it will expire");
        }
    }
}

/// Waits until this coordinator is the leader of `storage`'s cluster, then keeps the
/// lease alive and fences `storage`'s writes (see the module documentation).
/// `value` (the coordinator's address) is stored in the leader key. Retries on etcd
/// errors for as long as it takes; fails only on a bad TTL.
pub async fn campaign(
    storage: &EtcdStorage,
    lease_ttl_ms: u64,
    value: &str,
    on_lost: LostCallback,
) -> Result<Leadership, ElectionError> {
    validate_lease_ttl_ms(lease_ttl_ms).map_err(ElectionError::BadTtl)?;
    let leader_key = storage.spec().leader_key();
    let thread = storage.thread().clone();
    let poll = Duration::from_millis((lease_ttl_ms / 8).min(STANDBY_POLL_MAX_MS));
    let mut last_holder: Option<String> = None;
    let mut last_error: Option<String> = None;
    loop {
        match try_once(&thread, &leader_key, lease_ttl_ms, value).await {
            Ok(Attempt::Won {
                create_revision,
                lease_id,
                granted_ttl,
                sent,
            }) => {
                let (lost_tx, _) = tokio::sync::watch::channel(false);
                let state = Arc::new(LeaderState {
                    leader_key: leader_key.clone(),
                    create_revision,
                    lease_id,
                    lost: Mutex::new(None),
                    resigned: AtomicBool::new(false),
                    lost_tx,
                    on_lost: on_lost.clone(),
                });
                storage.set_leader(state.clone());
                let keeper = state.clone();
                let interval = Duration::from_millis(lease_ttl_ms / KEEPALIVES_PER_TTL);
                let clock = thread.clock.clone();
                let submitted = thread.submit(Box::new(move |client| {
                    Box::pin(keep_alive(
                        client,
                        keeper,
                        Lease {
                            ttl: granted_ttl,
                            interval,
                            granted_at: sent,
                        },
                        clock,
                    ))
                }));
                if !submitted {
                    state.lose("the etcd client thread has stopped");
                }
                tracing::info!(
                    %leader_key,
                    create_revision,
                    lease_id,
                    lease_ttl_ms = granted_ttl.as_millis() as u64,
                    "became the leader coordinator"
                );
                return Ok(Leadership {
                    state,
                    thread,
                    lease_ttl: granted_ttl,
                });
            }
            Ok(Attempt::Held(holder)) => {
                if last_holder.as_deref() != Some(holder.as_str()) {
                    tracing::info!(
                        active = %holder,
                        "another coordinator is active; standing by until its lease expires"
                    );
                    last_holder = Some(holder);
                }
                last_error = None;
            }
            Err(e) => {
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    tracing::warn!(error = %text, "campaigning for leadership failed; retrying");
                    last_error = Some(text);
                }
            }
        }
        thread.clock.sleep(poll).await;
    }
}

/// A won leader lease, as the keepalive loop keeps it.
struct Lease {
    ttl: Duration,
    /// Between keepalives.
    interval: Duration,
    /// When the grant was sent (the lease runs from there).
    granted_at: Instant,
}

enum Attempt {
    Won {
        create_revision: i64,
        lease_id: i64,
        granted_ttl: Duration,
        /// When the lease grant was sent: etcd's expiry is at least TTL after this.
        sent: Instant,
    },
    /// The key exists; its value (the active coordinator's address).
    Held(String),
}

/// One look at the leader key and, if it is absent, one try to create it.
async fn try_once(
    thread: &EtcdThread,
    leader_key: &str,
    lease_ttl_ms: u64,
    value: &str,
) -> Result<Attempt, StorageError> {
    let key = leader_key.to_owned();
    let holder = thread
        .call("get leader", move |mut client: Client| async move {
            let resp = client
                .get(key.as_bytes(), None)
                .await
                .map_err(|e| backend("get", &key, e.to_string()))?;
            Ok(resp
                .kvs()
                .first()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
        })
        .await?;
    if let Some(holder) = holder {
        return Ok(Attempt::Held(holder));
    }
    let key = leader_key.to_owned();
    let value = value.to_owned();
    let ttl_s = i64::try_from(lease_ttl_ms / LEASE_TTL_UNIT_MS).unwrap_or(i64::MAX);
    let clock = thread.clock.clone();
    thread
        .call("campaign", move |mut client: Client| async move {
            let sent = clock.now();
            let lease = client
                .lease_grant(ttl_s, None)
                .await
                .map_err(|e| backend("grant lease", "", e.to_string()))?;
            let lease_id = lease.id();
            let granted_ttl = Duration::from_secs(u64::try_from(lease.ttl()).unwrap_or(0).max(1));
            if lease.ttl() != ttl_s {
                tracing::warn!(
                    asked_s = ttl_s,
                    granted_s = lease.ttl(),
                    "etcd granted a different lease TTL than asked for"
                );
            }
            // R§9: creating the leader object must succeed for exactly one
            // coordinator, so it is a compare-and-create.
            let txn = Txn::new()
                .when(vec![Compare::create_revision(
                    key.as_bytes(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then(vec![TxnOp::put(
                    key.as_bytes(),
                    value.as_bytes(),
                    Some(PutOptions::new().with_lease(lease_id)),
                )]);
            let resp = match client.txn(txn).await {
                Ok(r) => r,
                Err(e) => {
                    let _ = client.lease_revoke(lease_id).await;
                    return Err(backend("create leader key", &key, e.to_string()));
                }
            };
            if !resp.succeeded() {
                // Someone else was quicker; this lease is of no use.
                let _ = client.lease_revoke(lease_id).await;
                return Ok(Attempt::Held("(another coordinator)".into()));
            }
            // The key was created by this transaction, so its create revision is the
            // transaction's revision.
            let create_revision = resp.header().map(|h| h.revision()).ok_or_else(|| {
                backend("create leader key", &key, "answer without a header".into())
            })?;
            Ok(Attempt::Won {
                create_revision,
                lease_id,
                granted_ttl,
                sent,
            })
        })
        .await
}

/// Renews the lease every `interval` until leadership is lost or given up; runs on
/// the etcd thread. Leadership is lost when no keepalive is answered with a live
/// lease within `ttl` of sending it, when etcd says the lease is gone, or when the
/// leader key is found with another create revision.
async fn keep_alive(
    mut client: Client,
    state: Arc<LeaderState>,
    lease: Lease,
    clock: Arc<dyn Clock>,
) {
    let Lease {
        ttl,
        interval,
        granted_at,
    } = lease;
    let mut last_ok_sent = granted_at;
    let mut stream = None;
    // Failed keepalives in a row: only the first of a run is logged as a warning.
    let mut failures = 0u32;
    loop {
        if !state.is_held() {
            return;
        }
        let now = clock.now();
        let valid_until = last_ok_sent + ttl;
        let Some(left) = valid_until
            .checked_duration_since(now)
            .filter(|d| !d.is_zero())
        else {
            state.lose(&format!(
                "no lease keepalive succeeded for the whole lease TTL ({} ms)",
                ttl.as_millis()
            ));
            return;
        };
        let sent = clock.now();
        let attempt = clock
            .timeout(left.min(interval), async {
                if stream.is_none() {
                    stream = Some(client.lease_keep_alive(state.lease_id).await?);
                }
                // Cannot fail: set just above.
                let Some((keeper, responses)) = stream.as_mut() else {
                    return Ok(None);
                };
                keeper.keep_alive().await?;
                responses.message().await
            })
            .await;
        match attempt {
            Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                last_ok_sent = sent;
                failures = 0;
                let checked = clock.timeout(interval, check_leader_key(&mut client, &state));
                if let Ok(Some(reason)) = checked.await {
                    state.lose(&reason);
                    return;
                }
                let next = sent + interval;
                clock.sleep_until(next).await;
            }
            Ok(Ok(Some(_))) => {
                state.lose("etcd says the leader lease has expired");
                return;
            }
            failed => {
                let why = match failed {
                    Ok(Ok(_)) => "the keepalive stream ended".to_owned(),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "no keepalive answer in time".to_owned(),
                };
                failures += 1;
                if failures == 1 {
                    tracing::warn!(reason = %why, "lease keepalive failed; retrying");
                } else {
                    tracing::debug!(reason = %why, failures, "lease keepalive failed again");
                }
                stream = None;
                clock.sleep(Duration::from_millis(KEEPALIVE_RETRY_MS)).await;
            }
        }
    }
}

/// `Some(reason)` if the leader key is not this leader's any more (deleted by hand,
/// or re-created by a successor). A failed read proves nothing and is ignored.
async fn check_leader_key(client: &mut Client, state: &LeaderState) -> Option<String> {
    let resp = client.get(state.leader_key.as_bytes(), None).await.ok()?;
    match resp.kvs().first() {
        None => Some("the leader key was deleted".into()),
        Some(kv) if kv.create_revision() != state.create_revision => Some(format!(
            "the leader key now belongs to another coordinator ({})",
            String::from_utf8_lossy(kv.value())
        )),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_lease_ttl_ms_bounds_and_units() {
        assert!(validate_lease_ttl_ms(DEFAULT_LEASE_TTL_MS).is_ok());
        assert!(validate_lease_ttl_ms(MAX_LEASE_TTL_MS).is_ok());
        assert!(validate_lease_ttl_ms(1_000)
            .unwrap_err()
            .contains("outside"));
        assert!(validate_lease_ttl_ms(MAX_LEASE_TTL_MS + 1_000).is_err());
        assert!(validate_lease_ttl_ms(2_500)
            .unwrap_err()
            .contains("whole number of seconds"));
    }
}

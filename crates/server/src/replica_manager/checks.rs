//! Replica checks (R§8; docs/design-notes.md "Replica health"): one
//! BackupGetReplicas per interval, backups in turn, and the replicas a backup no
//! longer holds dropped and re-created. Methods of [`ReplicaManager`] over its
//! state; the parent calls them but imports nothing from here.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{believed_on, drop_replica, Check, ReplicaManager, REPLICA_CHECK_DEADLINE_MS};

impl ReplicaManager {
    /// The next replica check if one is due (and none in flight), and when to look
    /// again otherwise. Backups are checked in turn, skipping those holding none
    /// of this master's replicas.
    pub(super) fn plan_check(&self) -> (Option<Check>, Option<Instant>) {
        let interval_ms = self.check_interval_ms.load(Ordering::Relaxed);
        let mut st = self.state.lock();
        if interval_ms == 0 || st.master_id == 0 || st.stopping || st.fenced || st.checking {
            // A check in flight wakes the replicator when it ends.
            return (None, None);
        }
        let now = self.clock.now();
        let interval = Duration::from_millis(interval_ms);
        let due = *st.next_check_at.get_or_insert(now + interval);
        if due > now {
            return (None, Some(due));
        }
        let pending: BTreeSet<u64> = st
            .pending_frees
            .iter()
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        let count = st.backups.len();
        for step in 0..count {
            let index = (st.check_cursor + step) % count;
            let backup = &st.backups[index];
            let believed = believed_on(&st, backup.server_id, &pending);
            if believed.is_empty() {
                continue;
            }
            let check = Check {
                master_id: st.master_id,
                backup: backup.server_id,
                address: backup.address.clone(),
                believed,
            };
            st.check_cursor = index + 1;
            st.checking = true;
            return (Some(check), None);
        }
        let next = now + interval;
        st.next_check_at = Some(next);
        (None, Some(next))
    }

    /// Asks one backup which of this master's replicas it holds and drops every
    /// replica it was believed to hold but does not (or holds fewer bytes of, or
    /// holds open although it was closed): each is re-created like one on a
    /// crashed backup (R§8). A backup that does not answer is left to the
    /// failure detector.
    pub(super) async fn run_check(self: Arc<Self>, check: Check) {
        let list = self.client.get_replicas(&check.address, check.master_id);
        let deadline = Duration::from_millis(REPLICA_CHECK_DEADLINE_MS);
        let answer = self.clock.timeout(deadline, list).await;
        let interval = Duration::from_millis(self.check_interval_ms.load(Ordering::Relaxed));
        let mut st = self.state.lock();
        st.checking = false;
        st.next_check_at = Some(self.clock.now() + interval);
        let held = match answer {
            Ok(Ok(held)) => held,
            Ok(Err(e)) => {
                tracing::debug!(backup = check.backup, error = %e, "replica check failed");
                drop(st);
                self.wake.notify_one();
                return;
            }
            Err(_) => {
                tracing::debug!(backup = check.backup, "replica check timed out");
                drop(st);
                self.wake.notify_one();
                return;
            }
        };
        st.stats.replica_checks += 1;
        let held: HashMap<u64, (usize, bool)> = held
            .iter()
            .map(|r| (r.segment_id, (r.length as usize, r.closed)))
            .collect();
        let mut lost = 0u64;
        for (segment_id, replica_id, acked, closed) in check.believed {
            // Dropped, re-placed or freed since the check was planned.
            let current = st
                .segments
                .get(&segment_id)
                .is_some_and(|s| s.replicas.iter().any(|r| r.id == replica_id));
            if !current {
                continue;
            }
            let intact = held
                .get(&segment_id)
                .is_some_and(|&(length, held_closed)| length >= acked && (held_closed || !closed));
            if intact {
                continue;
            }
            tracing::warn!(
                segment = segment_id,
                backup = check.backup,
                "a backup no longer holds a replica of this segment; re-creating it"
            );
            // A round in flight is not cancelled (that would fail every replica
            // in it): its answers no longer match the replica list and are
            // ignored (`finish_round`), and the next round resends them.
            drop_replica(&mut st, segment_id, check.backup, false);
            lost += 1;
        }
        st.stats.replicas_found_lost += lost;
        drop(st);
        if lost > 0 {
            self.closed.notify_all();
            self.durable_changed.notify_waiters();
        }
        self.wake.notify_one();
    }
}

//! The replicator (R§4.2, R§8): the task that plans rounds over the segments
//! that have work, places new replicas, sends each round to its backups, applies
//! the answers and frees what is no longer needed. Methods of [`ReplicaManager`]
//! over its state; the parent never names this module.

use crate::placement::{choose_backup_with, Candidate};
use futures_util::future::join_all;
use ramstore_backup::BackupClientError;
use ramstore_log::{SegmentRole, SEGMENT_BYTES};
use ramstore_wire::BackupWriteFlags;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::Instrument;

use super::{
    drop_replica, stale_frees, take_frees, update_durability, Planned, Replica, ReplicaManager,
    Round, Send, State, FREE_DEADLINE_MS, MAX_STALE_REPLICAS, MAX_SURVIVOR_ROUNDS_IN_FLIGHT,
    RETRY_BACKOFF_MS, ROUND_CHECK_MS, ROUND_DEADLINE_MS, SURVIVOR_ROUND_BYTES, SWEEP_MS,
};

impl ReplicaManager {
    pub(super) async fn run(self: Arc<Self>) {
        loop {
            let notified = self.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (rounds, frees, roll, retry_at) = self.plan();
            if roll {
                self.with_log(|log| {
                    if !log.roll_head_now() {
                        tracing::error!("cannot move the head off a lost backup: no memory");
                    }
                });
            }
            for (backup, address, segment_id) in frees {
                let me = self.clone();
                tokio::spawn(
                    async move { me.free(backup, address, segment_id).await }.in_current_span(),
                );
            }
            for round in rounds {
                let me = self.clone();
                tokio::spawn(async move { me.run_round(round).await }.in_current_span());
            }
            let (check, check_at) = self.plan_check();
            if let Some(check) = check {
                let me = self.clone();
                tokio::spawn(async move { me.run_check(check).await }.in_current_span());
            }
            if roll {
                continue;
            }
            // Heads are driven by their waiting writers; bytes nobody waits for
            // (a writer that timed out) are swept up here soon after.
            let sweep = (!self.state.lock().dirty.is_empty())
                .then(|| self.clock.now() + Duration::from_millis(SWEEP_MS));
            match retry_at.into_iter().chain(sweep).chain(check_at).min() {
                Some(at) => {
                    let _ = self.clock.timeout_at(at, notified).await;
                }
                None => notified.await,
            }
        }
    }

    /// A round for head `segment_id` if it has work and none is in flight.
    pub(super) fn plan_inline(&self, segment_id: u64) -> Option<Round> {
        let mut st = self.state.lock();
        let waiting = st
            .segments
            .get(&segment_id)?
            .retry_at
            .is_some_and(|at| at > self.clock.now());
        if st.master_id == 0 || waiting {
            return None;
        }
        match self.plan_segment(&mut st, segment_id) {
            Planned::Round(r) => Some(r),
            Planned::Nothing => None,
            Planned::Retry => {
                let at = self.clock.now() + Duration::from_millis(RETRY_BACKOFF_MS);
                if let Some(s) = st.segments.get_mut(&segment_id) {
                    s.retry_at = Some(at);
                }
                st.dirty.insert(segment_id);
                drop(st);
                self.wake.notify_one();
                None
            }
        }
    }

    /// Chooses the next rounds, frees and head move; marks rounds in flight.
    #[allow(clippy::type_complexity)]
    pub(super) fn plan(&self) -> (Vec<Round>, Vec<(u64, String, u64)>, bool, Option<Instant>) {
        let mut st = self.state.lock();
        if st.master_id == 0 {
            return (Vec::new(), Vec::new(), false, None);
        }
        let now = self.clock.now();
        let mut rounds = Vec::new();
        let mut retry_at: Option<Instant> = None;
        let deadline = Duration::from_millis(ROUND_DEADLINE_MS);
        let mut survivor_rounds = 0;
        for seg in st.segments.values() {
            if seg.in_flight && seg.role.complete_when_opened() {
                survivor_rounds += 1;
            }
            if let Some((started, cancel)) = &seg.round {
                if now.duration_since(*started) >= deadline {
                    cancel.notify_one();
                }
                // Look again soon while any round is in flight.
                let at = now + Duration::from_millis(ROUND_CHECK_MS);
                retry_at = Some(retry_at.map_or(at, |r| r.min(at)));
            }
        }
        let dirty = std::mem::take(&mut st.dirty);
        for id in dirty {
            let survivor = st
                .segments
                .get(&id)
                .is_some_and(|s| s.role.complete_when_opened() && !s.in_flight);
            if survivor && survivor_rounds >= MAX_SURVIVOR_ROUNDS_IN_FLIGHT {
                // Its turn comes when a round in flight finishes (which wakes
                // the replicator); head rounds never wait for these.
                st.dirty.insert(id);
                continue;
            }
            if let Some(seg) = st.segments.get_mut(&id) {
                match seg.retry_at {
                    Some(at) if at > now => {
                        retry_at = Some(retry_at.map_or(at, |r| r.min(at)));
                        st.dirty.insert(id);
                        continue;
                    }
                    Some(_) => seg.retry_at = None,
                    None => {}
                }
            }
            match self.plan_segment(&mut st, id) {
                Planned::Round(r) => {
                    survivor_rounds += usize::from(survivor);
                    rounds.push(r);
                }
                Planned::Nothing => {}
                Planned::Retry => {
                    let at = now + Duration::from_millis(RETRY_BACKOFF_MS);
                    if let Some(s) = st.segments.get_mut(&id) {
                        s.retry_at = Some(at);
                    }
                    st.dirty.insert(id);
                    retry_at = Some(retry_at.map_or(at, |r| r.min(at)));
                }
            }
        }
        let mut frees = take_frees(&mut st);
        frees.extend(stale_frees(&mut st));
        let roll = std::mem::take(&mut st.roll_head);
        (rounds, frees, roll, retry_at)
    }

    pub(super) fn plan_segment(&self, st: &mut State, id: u64) -> Planned {
        let newest_open_head = st.newest_open_head;
        // Full backups (docs/design-notes.md "Full backups"): a survivor replaces
        // more than it takes, and while cleaned segments wait to be freed so does
        // any head (their replicas go once a new head is open durably), so these
        // opens may take the frames backups keep for cleaning. One pass at a
        // time: a survivor does not while frees wait, or survivors of passes in a
        // row take the reserve and leave none for the head that frees them.
        let frees_wait = !st.pending_frees.is_empty();
        let replicas = self.replicas;
        // Fill empty replica places first (R§7.1).
        let missing = st
            .segments
            .get(&id)
            .map_or(0, |s| replicas.saturating_sub(s.replicas.len()));
        if st.segments.get(&id).is_none_or(|s| s.in_flight) {
            return Planned::Nothing;
        }
        for _ in 0..missing {
            if !self.place(st, id) {
                return Planned::Retry;
            }
        }
        let Some(seg) = st.segments.get_mut(&id) else {
            return Planned::Nothing;
        };
        let close_allowed = seg.close_requested
            && match seg.role {
                SegmentRole::Survivor | SegmentRole::Side => true,
                SegmentRole::Head => newest_open_head.is_some_and(|h| h > id),
            };
        let mut sends = Vec::new();
        for r in &seg.replicas {
            if r.closed {
                continue;
            }
            if r.atomic && !close_allowed {
                // A re-replica is sent whole, once the segment stops growing.
                continue;
            }
            let more = r.acked < seg.appended || !r.opened;
            if !more && !close_allowed {
                continue;
            }
            sends.push(Send {
                replica: r.id,
                backup: r.backup,
                address: r.address.clone(),
                from: r.acked,
                flags: BackupWriteFlags {
                    open: !r.opened,
                    close: close_allowed,
                    atomic: r.atomic && !r.opened,
                    reserve: !r.opened
                        && match seg.role {
                            SegmentRole::Survivor => !frees_wait,
                            SegmentRole::Head => frees_wait,
                            SegmentRole::Side => false,
                        },
                },
                clear_first: r.clear_first && !r.opened,
            });
        }
        if sends.is_empty() {
            return Planned::Nothing;
        }
        let from = sends.iter().map(|s| s.from).min().unwrap_or(0);
        // A segment complete when opened goes in rounds of at most
        // SURVIVOR_ROUND_BYTES, its close with the last (an atomic re-replica
        // is still sent whole, as the backup expects).
        let until = (seg.role.complete_when_opened()
            && sends.iter().all(|s| s.from == from && !s.flags.atomic)
            && seg.appended > from + SURVIVOR_ROUND_BYTES)
            .then_some(from + SURVIVOR_ROUND_BYTES);
        if until.is_some() {
            for s in &mut sends {
                s.flags.close = false;
            }
        }
        seg.in_flight = true;
        let cancel = Arc::new(Notify::new());
        seg.round = Some((self.clock.now(), cancel.clone()));
        Planned::Round(Round {
            master_id: st.master_id,
            cancel,
            segment_id: id,
            from,
            until,
            sends,
        })
    }

    /// Adds one replica place to segment `id`; false if no backup is eligible.
    pub(super) fn place(&self, st: &mut State, id: u64) -> bool {
        let Some(seg) = st.segments.get(&id) else {
            return false;
        };
        let taken: Vec<u64> = seg.replicas.iter().map(|r| r.backup).collect();
        let candidates: Vec<Candidate<'_>> = st
            .backups
            .iter()
            .map(|b| Candidate {
                server_id: b.server_id,
                failure_domain: &b.failure_domain,
                backup_read_mbps: b.backup_read_mbps,
                replica_bytes: st.bytes_on.get(&b.server_id).copied().unwrap_or(0),
            })
            .collect();
        let mut chosen = choose_backup_with(
            st.placement,
            &candidates,
            (st.master_id, &st.master_domain),
            &taken,
            &seg.excluded,
            SEGMENT_BYTES as u64,
            &mut *self.rng.lock(),
        );
        // Every backup left is one this segment excluded after it failed or
        // refused — with exactly R backups, one timeout under load would keep
        // the segment below R replicas for good (regression:
        // `cli/tests/recovery.rs` recovery_master_killed…, a recovery master's
        // partitions never became durable). A live backup may hold a new
        // replica after all: its stale copy is freed before the open
        // (`clear_first`, set when the replica was dropped), as for a
        // restarted backup (R§8). The exclusions are lifted oldest first: the
        // backup that failed longest ago is tried again first, and each new
        // failure moves a backup to the back (`drop_replica`), so the segment
        // goes round every excluded backup. Lifting them all at once let
        // placement's refinement pick the same one each time, the backup
        // holding the fewest of this master's replicas — a full one, refusing
        // for good, while a backup whose disk had been full for a while and
        // had healed was never asked again (regression:
        // `replication_returns_to_a_backup_whose_disk_healed_while_another_stays_full`;
        // the simulator's migrations stuck `Pulling`, issue 20).
        for lifted in 1..=seg.excluded.len() {
            if chosen.is_some() {
                break;
            }
            chosen = choose_backup_with(
                st.placement,
                &candidates,
                (st.master_id, &st.master_domain),
                &taken,
                &seg.excluded[lifted..],
                SEGMENT_BYTES as u64,
                &mut *self.rng.lock(),
            );
        }
        let Some(backup) = chosen else {
            return false;
        };
        let Some(address) = st
            .backups
            .iter()
            .find(|b| b.server_id == backup)
            .map(|b| b.address.clone())
        else {
            return false;
        };
        *st.bytes_on.entry(backup).or_default() += SEGMENT_BYTES as u64;
        let Some(seg) = st.segments.get_mut(&id) else {
            return false;
        };
        // Once some bytes of the segment were acknowledged (on all R replicas),
        // a new replica is atomic (R§8): a half-written copy offered in recovery
        // could lack acknowledged bytes. It is sent whole once the segment stops
        // growing; a head in that state is moved first (`drop_replica`). Before
        // any acknowledgement a plain replica is safe: it gets every byte, and
        // durability counts only what all R hold.
        let atomic = seg.acknowledged;
        let replacement = seg.started;
        let clear_first = seg.clear_first;
        let replica_id = st.next_replica_id;
        st.next_replica_id += 1;
        let Some(seg) = st.segments.get_mut(&id) else {
            return false;
        };
        seg.replicas.push(Replica {
            id: replica_id,
            backup,
            address,
            acked: 0,
            opened: false,
            closed: false,
            atomic,
            clear_first,
        });
        if replacement {
            st.stats.rereplications += 1;
        }
        true
    }

    pub(super) async fn run_round(&self, round: Round) {
        let mut bytes = Vec::new();
        // Only the round's bytes: a survivor round sends at most
        // SURVIVOR_ROUND_BYTES of a segment that may hold 8 MiB.
        let upto = round.until.unwrap_or(usize::MAX);
        let length = self.with_log(|log| {
            log.copy_for_replica_upto(round.segment_id, round.from, upto, &mut bytes)
        });
        let Some(Some(mut length)) = length else {
            // The segment left memory (cleaned, or an emergency head): nothing to
            // replicate any more.
            self.forget(round.segment_id);
            return;
        };
        if let Some(until) = round.until.filter(|u| *u < length) {
            bytes.truncate(until - round.from);
            length = until;
        }
        let master_id = round.master_id;
        let replies = join_all(round.sends.iter().map(|s| {
            let slice = &bytes[s.from - round.from..];
            async move {
                if s.clear_first {
                    // A stale copy (kept by a restarted backup, R§8) would make
                    // the open fail; nothing of ours is on this backup otherwise.
                    let _ = self
                        .client
                        .free(&s.address, master_id, round.segment_id)
                        .await;
                }
                self.client
                    .write(
                        &s.address,
                        master_id,
                        round.segment_id,
                        s.from as u32,
                        slice,
                        s.flags,
                    )
                    .await
            }
        }));
        // No timer per RPC (see `NO_DEADLINE`): the replicator cancels a round
        // that outlives ROUND_DEADLINE_MS, or whose backup left the cluster.
        let results = tokio::select! {
            results = replies => results,
            () = round.cancel.notified() => round
                .sends
                .iter()
                .map(|s| {
                    Err(BackupClientError::Unreachable {
                        addr: s.address.clone(),
                        source: ramstore_rpc::RpcError::DeadlineExceeded,
                    })
                })
                .collect(),
        };
        self.finish_round(&round, length, results);
    }

    pub(super) fn finish_round(
        &self,
        round: &Round,
        length: usize,
        results: Vec<Result<(), BackupClientError>>,
    ) {
        let mut replicated = None;
        let replicator_needed;
        let mut refused_full = false;
        {
            let mut st = self.state.lock();
            st.stats.rounds += 1;
            let mut lost = Vec::new();
            let mut full = Vec::new();
            let mut out_of_frames = false;
            let mut unknown = Vec::new();
            let mut retry = false;
            let mut fenced = st.fenced;
            let Some(seg) = st.segments.get_mut(&round.segment_id) else {
                return;
            };
            seg.in_flight = false;
            seg.round = None;
            let mut sent = 0u64;
            for (send, result) in round.sends.iter().zip(results) {
                let Some(r) = seg.replicas.iter_mut().find(|r| r.id == send.replica) else {
                    continue;
                };
                match result {
                    Ok(()) => {
                        sent += (length - send.from) as u64;
                        r.acked = length;
                        r.opened = true;
                        r.closed |= send.flags.close;
                        seg.started = true;
                    }
                    Err(BackupClientError::Retry { .. }) => retry = true,
                    Err(BackupClientError::Failed {
                        status: ramstore_wire::Status::ServerNotUp,
                        ..
                    }) => {
                        if !fenced {
                            tracing::error!(backup = send.backup, "a backup says this master was declared crashed (zombie fence); refusing all further operations");
                        }
                        fenced = true;
                    }
                    // R§7.1: a full backup refuses the open; the place is filled
                    // again after a pause, elsewhere if another backup is eligible.
                    Err(e @ BackupClientError::Full { .. }) if send.flags.open => {
                        out_of_frames |= e.is_out_of_frames();
                        full.push(send.backup);
                        retry = true;
                    }
                    // R§8: the backup is up but no longer holds the replica (freed
                    // behind our back, a disk problem): re-create it from memory.
                    // The backup stays eligible (it answered, so it works), which
                    // matters where no other backup is (R = backups).
                    Err(BackupClientError::UnknownReplica { .. }) => {
                        tracing::warn!(
                            segment = round.segment_id,
                            backup = send.backup,
                            "a backup no longer holds a replica of this segment; re-creating it"
                        );
                        unknown.push(send.backup);
                    }
                    Err(e) => {
                        tracing::warn!(segment = round.segment_id, backup = send.backup, error = %e, "replication to a backup failed");
                        lost.push((send.backup, send.address.clone()));
                    }
                }
            }
            seg.appended = seg.appended.max(length);
            // An open head's next bytes are sent by the writers waiting for them;
            // anything else (closes, failures, the opening digest that lets older
            // heads close, frees) is the replicator's.
            replicator_needed = !lost.is_empty()
                || !unknown.is_empty()
                || retry
                || seg.close_requested
                || seg.role != SegmentRole::Head
                || round.sends.iter().any(|s| s.flags.open);
            if retry {
                seg.retry_at = Some(self.clock.now() + Duration::from_millis(RETRY_BACKOFF_MS));
            }
            st.fenced = fenced;
            if fenced {
                self.fenced.store(true, Ordering::Release);
            }
            st.stats.bytes_sent += sent;
            st.stats.rpc_failures += lost.len() as u64;
            for (backup, address) in lost {
                drop_replica(&mut st, round.segment_id, backup, true);
                // The backup may be alive (a timeout under load) and keep what it
                // got: a stale prefix once the replica is re-created elsewhere.
                // Free it once the segment is safe without it (`stale_frees`), so
                // recovery is not offered it (it would also pass it over for a
                // longer or closed replica: `ramstore_coordinator::recovery`).
                if st.stale.len() < MAX_STALE_REPLICAS
                    && !st.stale.contains(&(address.clone(), round.segment_id))
                {
                    st.stale.push((address, round.segment_id));
                }
            }
            if !full.is_empty() {
                st.refused_full_at = Some(self.clock.now());
            }
            // Only a disk out of frames says the log is too large for the
            // backups; open buffers come back as replicas close.
            if out_of_frames {
                refused_full = true;
            }
            // Excluded for this segment, so the next place goes to a backup
            // with room: placement prefers the backup holding the fewest of
            // this master's replicas, which a full one often is, and would pick
            // it again and again (regression: a migration's side segments never
            // became durable in the simulator). When every backup left is
            // excluded, `place` tries them all again.
            for backup in full {
                drop_replica(&mut st, round.segment_id, backup, true);
            }
            st.stats.replicas_found_lost += unknown.len() as u64;
            for backup in unknown {
                drop_replica(&mut st, round.segment_id, backup, false);
            }
            if let Some(id) = update_durability(&mut st, round.segment_id, self.replicas) {
                replicated = Some(id);
            }
            st.dirty.insert(round.segment_id);
        }
        if let Some(id) = replicated {
            self.with_log(|log| log.segment_replicated(id));
            self.closed.notify_all();
        }
        if refused_full {
            // The backups have no room for this master's log at its present
            // size: combined cleaning keeps it below that from now on and frees
            // replicas for the refused one (docs/design-notes.md "Full backups").
            self.with_log(|log| log.limit_disk_log_at_refusal());
        }
        self.durable_changed.notify_waiters();
        if replicator_needed {
            self.wake.notify_one();
        }
    }

    pub(super) fn forget(&self, segment_id: u64) {
        {
            let mut st = self.state.lock();
            if let Some(seg) = st.segments.remove(&segment_id) {
                for r in &seg.replicas {
                    if let Some(b) = st.bytes_on.get_mut(&r.backup) {
                        *b = b.saturating_sub(SEGMENT_BYTES as u64);
                    }
                }
            }
            st.open_heads.remove(&segment_id);
        }
        self.closed.notify_all();
        self.durable_changed.notify_waiters();
        self.wake.notify_one();
    }

    pub(super) async fn free(&self, backup: u64, address: String, segment_id: u64) {
        let master_id = self.state.lock().master_id;
        let free = self.client.free(&address, master_id, segment_id);
        let result = self
            .clock
            .timeout(Duration::from_millis(FREE_DEADLINE_MS), free)
            .await
            .unwrap_or(Err(BackupClientError::Unreachable {
                addr: address.clone(),
                source: ramstore_rpc::RpcError::DeadlineExceeded,
            }));
        match result {
            Ok(()) => self.state.lock().stats.replicas_freed += 1,
            Err(e) => {
                tracing::debug!(backup, segment_id, error = %e, "freeing a replica failed")
            }
        }
    }
}

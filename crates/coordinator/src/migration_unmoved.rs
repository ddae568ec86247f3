//! A migration whose target is gone before ownership moved (issue 20, found by
//! the simulator: seed 285; design notes "Migration: lineage recovery").
//!
//! The source has fenced the range (PrepareMigration answered) but the target
//! was declared crashed before the coordinator recorded the move. Moving the
//! range to it then would give it to a master whose recovery may be over
//! already: nobody would ever hold the range. So the move is refused under the
//! core's lock ([`CoordinatorCore::migration_ownership_moved`]) and the
//! migration is rolled back the way lineage recovery rolls back a crashed
//! target's (K§2.3.4), with an empty replay: the target never took the range,
//! so its log holds nothing of it. The source reclaims its fenced copy as
//! recovering (RecoverPartition naming the target, with no replica to fetch),
//! then one document write finishes the record `rolled_back` and
//! TakeTabletOwnership makes the copy serve again.
//!
//! Every step is idempotent and the record stays `Preparing` until the write,
//! so a coordinator that takes over re-drives it (`Migrator::resume`: the
//! PrepareMigration is answered again, the move refused again, and this runs).
//!
//! Thread-safety: a core call under its lock, and plain requests.

use std::time::Duration;

use ramstore_wire::{decode_response, RecoverPartitionEncoder, RecoveryItem, Response, Status};

use crate::cluster::Cluster;
use crate::coordinator::{address_of, Action, CoordinatorCore};
use crate::error::CoordinatorError;
use crate::migrations::{MigrationOutcome, MigrationRecord, MigrationState};
use crate::notifier::{Notifier, NOTIFY_DEADLINE_MS};

/// How long the coordinator waits between attempts to unfence the source.
const UNFENCE_RETRY_MS: u64 = 100;

impl CoordinatorCore {
    /// The source of `Preparing` migration `id` has reclaimed its fenced copy
    /// (the target went before ownership moved): in one write the record is
    /// finished `rolled_back`; the tablet map is unchanged (the source still
    /// owns the range, at its own ctime). Returns the TakeTabletOwnership that
    /// makes the source serve it again. `LineageChanged` (nothing applied)
    /// unless the record is still `Preparing` and its target is not up.
    pub fn migration_unmoved_rolled_back(
        &mut self,
        id: u64,
    ) -> Result<Vec<Action>, CoordinatorError> {
        let m = self
            .state()
            .migrations()
            .get(id)
            .copied()
            .filter(|m| m.state == MigrationState::Preparing)
            .ok_or(CoordinatorError::LineageChanged(id))?;
        if self
            .state()
            .servers()
            .get(m.target)
            .is_some_and(|e| e.is_up())
        {
            return Err(CoordinatorError::LineageChanged(id));
        }
        let mut next = self.state().clone();
        next.migrations_mut()
            .finish(id, MigrationOutcome::RolledBack, None, None);
        let action = Action::TakeTablet {
            server_id: m.source,
            address: address_of(&next, m.source),
            table_id: m.table_id,
            start_hash: m.start_hash,
            end_hash: m.end_hash,
        };
        self.commit(next)?;
        Ok(vec![action])
    }
}

/// Rolls back `record`, whose source fenced the range and whose target went
/// before ownership moved (module doc). Returns once the record is finished
/// (or aborted: the source went too, and its crash recovery recovers the range
/// as any tablet of its own); the error says what happened, for the caller.
pub(crate) async fn roll_back_unmoved(
    cluster: &Cluster,
    notifier: &Notifier,
    record: &MigrationRecord,
) -> CoordinatorError {
    loop {
        if !cluster.is_up(record.source) {
            if let Err(e) = cluster.core().abort_migration(record.id) {
                return e;
            }
            return CoordinatorError::MigrationRefused(
                "the target and then the source went before ownership moved".into(),
            );
        }
        match reclaim_on_source(cluster, record).await {
            Ok(()) => {
                let rolled_back = cluster.core().migration_unmoved_rolled_back(record.id);
                match rolled_back {
                    Ok(actions) => {
                        tracing::info!(
                            id = record.id,
                            source = record.source.0,
                            target = record.target.0,
                            "migration: the target went before ownership moved; rolled back"
                        );
                        notifier.carry_out(actions).await;
                        return CoordinatorError::MigrationRefused(format!(
                            "migration {} was rolled back: its target went before ownership \
                             moved; the range stays on its source",
                            record.id
                        ));
                    }
                    // Finished or changed meanwhile (another coordinator): nothing to do.
                    Err(CoordinatorError::LineageChanged(_)) => {
                        return CoordinatorError::MigrationRefused(
                            "the migration changed while it was rolled back".into(),
                        );
                    }
                    Err(e) => {
                        tracing::warn!(id = record.id, error = %e, "migration: cannot record the roll-back; retried")
                    }
                }
            }
            Err(why) => {
                tracing::warn!(id = record.id, source = record.source.0, %why, "migration: the source did not reclaim its fenced copy; retried");
            }
        }
        cluster
            .clock
            .sleep(Duration::from_millis(UNFENCE_RETRY_MS))
            .await;
    }
}

/// Has the source reclaim its fenced copy of `record`'s range (an empty
/// lineage replay: RecoverPartition naming the target, the range at the
/// source's ctime, and no replica to fetch); whether it answered OK.
async fn reclaim_on_source(cluster: &Cluster, record: &MigrationRecord) -> Result<(), String> {
    let recovery_id = cluster.rng.next_u64();
    let mut frame = Vec::new();
    let mut enc = RecoverPartitionEncoder::new(0, record.target.0, recovery_id, 0, &mut frame);
    enc.push(&RecoveryItem::Tablet {
        table_id: record.table_id,
        start_hash: record.start_hash,
        end_hash: record.end_hash,
        ctime: record.source_ctime,
    })
    .map_err(|e| e.to_string())?;
    enc.finish().map_err(|e| e.to_string())?;
    let address = address_of(cluster.core().state(), record.source);
    // Replay of nothing still waits for the head to be durable: allow it the
    // time a durability wait takes, not just a notification's.
    let deadline = Duration::from_millis(NOTIFY_DEADLINE_MS * 10);
    let bytes = cluster
        .transport
        .call(&address, frame, deadline)
        .await
        .map_err(|e| e.to_string())?;
    match decode_response(&bytes) {
        Ok((h, Response::RecoverPartition { .. })) if h.status == Status::Ok => Ok(()),
        Ok((_, other)) => Err(format!("unexpected answer {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

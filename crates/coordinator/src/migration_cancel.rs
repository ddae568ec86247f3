//! Cancelling a migration (issue 20; design notes "Cancelling a migration").
//!
//! Once ownership has moved, the target accepts client writes that exist only
//! on the target; the source's fenced copy is stale. So a cancel never just
//! hands the range back: it is recorded on the migration (persisted before it
//! is acted on, R§9), the migration finishes as usual, and in the same write
//! that forgets it the coordinator records a *return* migration, target →
//! source, which the ordinary protocol (K§2.3) carries out. No acknowledged
//! write can be lost: every write is on the range's owner of the moment, and
//! each move carries the owner's every record with it. The range ends on its
//! source, at the cost of moving it twice.
//!
//! Before the return pulls, the source's stale fenced copy is dropped (it would
//! otherwise refuse to take the range as a target); the drop is sent and
//! awaited before the return's first step, and re-sent by a restarted
//! coordinator that re-drives the return (`Migrator::resume`), so no stale
//! drop can arrive after the source has taken the range back.
//!
//! Thread-safety: core calls run under the core's lock like every other.

use crate::coordinator::{Action, CoordinatorCore};
use crate::error::CoordinatorError;
use crate::migrations::{MigrationOutcome, MigrationRecord, MigrationState};
use ramstore_wire::MigrationMode;

impl CoordinatorCore {
    /// Records that migration `id` is cancelled. Idempotent. Refused for an
    /// unknown or finished id, and for a return migration (cancelling it would
    /// only move the range away again).
    pub fn cancel_migration(&mut self, id: u64) -> Result<MigrationRecord, CoordinatorError> {
        let m = self
            .state()
            .migrations()
            .get(id)
            .copied()
            .ok_or(CoordinatorError::NoSuchMigration(id))?;
        if m.returns != 0 {
            return Err(CoordinatorError::CannotCancel {
                id,
                reason: "it brings a cancelled migration's range back to its source",
            });
        }
        if m.cancelled {
            return Ok(m);
        }
        let mut next = self.state().clone();
        let cancelled = MigrationRecord {
            cancelled: true,
            ..m
        };
        next.migrations_mut().replace(cancelled);
        self.commit(next)?;
        Ok(cancelled)
    }

    /// The target of cancelled migration `m` has every record: in one write,
    /// forget `m` and record its return (`Preparing`, target → source). No
    /// action yet: the migrator drops the source's stale copy, then drives the
    /// return (module doc).
    pub(crate) fn cancelled_migration_done(
        &mut self,
        m: &MigrationRecord,
        moved: Option<(u64, u64)>,
    ) -> Result<Vec<Action>, CoordinatorError> {
        let mut next = self.state().clone();
        // The source's stale copy is dropped before the return's first step,
        // not as a finished migration's (module doc).
        next.migrations_mut()
            .finish(m.id, MigrationOutcome::Cancelled, moved, None);
        next.migrations_mut().add(MigrationRecord {
            id: 0,
            source: m.target,
            target: m.source,
            state: MigrationState::Preparing,
            safe_version: 0,
            cancelled: false,
            returns: m.id,
            // The cancelled migration's target owns the range from its own
            // tenure on; the return's target tenure is taken afresh.
            source_ctime: m.target_ctime,
            target_ctime: 0,
            // A return is an ordinary migration whatever mode the cancelled one
            // was measured in (the baselines exist for the benchmark only).
            mode: MigrationMode::Rocksteady,
            // Counted when the cancelled one started, not now.
            total: None,
            ..*m
        });
        self.commit(next)?;
        Ok(Vec::new())
    }

    /// The return migration of cancelled migration `id`, if it is in progress.
    pub fn return_of(&self, id: u64) -> Option<MigrationRecord> {
        self.state()
            .migrations()
            .iter()
            .find(|r| r.returns == id)
            .copied()
    }
}

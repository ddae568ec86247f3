//! Orphan copies on a migration's target (issue 20, found by the simulator:
//! seeds 112 and 166; design notes "Migration: lineage recovery").
//!
//! A master can hold a copy of a range that the tablet map does not give it
//! and that no record names: a lineage recovery fenced a new source there and
//! then chose another (its answer was lost), or a coordinator failed over
//! while the master replayed a partition and the next one recovered it
//! elsewhere — the master finished the first replay afterwards and keeps its
//! `Recovering` tablet. Such a copy is never served (fenced or recovering),
//! but a migration that later chooses that master as the range's target is
//! refused there for ever ("overlaps another tablet"), and the range, recorded
//! as moved, stays unreadable.
//!
//! So before a migration gives its target the range, the coordinator has the
//! target drop whatever it holds of exactly that range (DropTabletOwnership,
//! resent until answered; a no-op where there is nothing) — before the
//! target's tenure floor is read, so that the tenure the migration records
//! starts above the orphan's entries (design notes "Tablet ctime"). Safe: the
//! map gives the range to the source, which is up, so no recovery of it can be
//! running, and crash recovery of the source waits while a migration from it
//! is `Preparing` ([`CoordinatorCore::migrations_preparing_from`]), so this
//! drop can never meet a copy a recovery placed on the target meanwhile.
//!
//! Thread-safety: a core call under its lock, and plain requests.

use std::time::Duration;

use crate::cluster::Cluster;
use crate::coordinator::{address_of, Action, CoordinatorCore};
use crate::migrations::{MigrationRecord, MigrationState};
use crate::notifier::Notifier;
use crate::server_list::ServerId;

/// How long the coordinator waits between attempts to reach the target.
const DROP_RETRY_MS: u64 = 100;

/// What became of the drop of an orphan copy on a migration's target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OrphanDrop {
    /// The target answered: it holds nothing of the range now.
    Dropped,
    /// The target is no longer up (nothing of the range will be given to it).
    TargetGone,
    /// The source is no longer up: nothing was sent (its crash recovery may be
    /// placing the range on the target); PrepareMigration will find it gone.
    SourceGone,
}

impl CoordinatorCore {
    /// How many migrations from `crashed` are still `Preparing`. Its crash
    /// recovery waits until none is: the migrator resolves each one (aborted
    /// when PrepareMigration cannot reach the source, or moved on to
    /// `Pulling`, which lineage recovery handles), and until then it may still
    /// drop an orphan copy on the target (module doc).
    pub fn migrations_preparing_from(&self, crashed: ServerId) -> usize {
        self.state()
            .migrations()
            .iter()
            .filter(|m| m.state == MigrationState::Preparing && m.source == crashed)
            .count()
    }
}

/// Has `record`'s target drop any copy it holds of exactly the range, resending
/// until it answers (module doc).
pub(crate) async fn drop_orphan_copy(
    cluster: &Cluster,
    notifier: &Notifier,
    record: &MigrationRecord,
) -> OrphanDrop {
    loop {
        if !cluster.is_up(record.target) {
            return OrphanDrop::TargetGone;
        }
        if !cluster.is_up(record.source) {
            return OrphanDrop::SourceGone;
        }
        let drop = Action::DropTablet {
            server_id: record.target,
            address: address_of(cluster.core().state(), record.target),
            table_id: record.table_id,
            start_hash: record.start_hash,
            end_hash: record.end_hash,
        };
        if notifier.send(&drop).await {
            return OrphanDrop::Dropped;
        }
        cluster
            .clock
            .sleep(Duration::from_millis(DROP_RETRY_MS))
            .await;
    }
}

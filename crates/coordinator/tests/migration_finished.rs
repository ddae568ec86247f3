//! Finished migrations in CoordinatorCore (issue 20; design notes "Migration"
//! and "Migration: lineage recovery"): every migration that ends — done,
//! cancelled, rolled back — stays listed with its outcome and figures, in the
//! same document write that forgets its record (R§9), so they survive a
//! coordinator restart; the drop of a stale copy is persisted as due until it
//! is answered, so a coordinator that takes over resends it; a stop-and-copy
//! whose target or source crashes mid-copy rolls back instead of staying
//! `Copying` for ever.

use std::sync::Arc;

use ramstore_coordinator::migration::{MigrationOutcome, MigrationState};
use ramstore_coordinator::migration_recovery::Lineage;
use ramstore_coordinator::migrations::FINISHED_KEPT;
use ramstore_coordinator::{
    Action, CoordinatorCore, CoordinatorError, ExternalStorage, MemoryStorage, ServerId,
    SERVICE_BACKUP, SERVICE_MASTER, STATE_KEY,
};
use ramstore_wire::MigrationMode;

const GIB: u64 = 1 << 30;
const ALL: (u64, u64) = (0, u64::MAX);

/// A core with masters 1, 2 and 3 and table "t" in one tablet: the storage,
/// the core, the tablet's owner and the two other masters.
fn setup() -> (
    Arc<MemoryStorage>,
    CoordinatorCore,
    ServerId,
    ServerId,
    ServerId,
) {
    let storage = Arc::new(MemoryStorage::new());
    let mut core = CoordinatorCore::open(storage.clone()).unwrap();
    let both = SERVICE_MASTER | SERVICE_BACKUP;
    let ids: Vec<ServerId> = (1..=3)
        .map(|i| {
            core.enlist(&format!("host{i}:1"), both, GIB, "", 0, None)
                .unwrap()
                .0
        })
        .collect();
    core.create_table("t", 1).unwrap();
    let source = owner(&core);
    let others: Vec<ServerId> = ids.into_iter().filter(|i| *i != source).collect();
    (storage, core, source, others[0], others[1])
}

fn owner(core: &CoordinatorCore) -> ServerId {
    core.tables().next().unwrap().tablets[0].server_id
}

fn begin(core: &mut CoordinatorCore, target: ServerId, mode: MigrationMode) -> u64 {
    core.begin_migration_with_total("t", ALL, target, mode, Some((1000, 10)))
        .unwrap()
        .id
}

#[test]
fn migration_done_moved_keeps_the_migration_finished_with_its_figures_across_a_restart() {
    let (storage, mut core, source, target, _) = setup();
    let id = begin(&mut core, target, MigrationMode::Rocksteady);
    assert_eq!(core.migrations()[0].total, Some((1000, 10)));
    core.migration_ownership_moved(id, 5).unwrap();
    // Totals are persisted with the record: a coordinator that takes over
    // mid-migration still knows them.
    let restarted = CoordinatorCore::open(storage.clone()).unwrap();
    assert_eq!(restarted.migrations()[0].total, Some((1000, 10)));

    let actions = core.migration_done_moved(id, Some((900, 9))).unwrap();
    assert!(matches!(actions.as_slice(),
        [Action::DropTablet { server_id, .. }] if *server_id == source));
    let reopened = CoordinatorCore::open(storage).unwrap();
    assert!(reopened.migrations().is_empty());
    let f = reopened
        .state()
        .migrations()
        .finished_get(id)
        .copied()
        .unwrap();
    assert_eq!(f.outcome, MigrationOutcome::Done);
    assert_eq!(f.outcome.name(), "done");
    assert_eq!(f.moved, Some((900, 9)));
    assert_eq!(f.record.total, Some((1000, 10)));
    assert_eq!((f.record.source, f.record.target), (source, target));
}

/// Regression: a coordinator restart between MigrationDone and the source's
/// DropTabletOwnership left the source's fenced stale copy there for ever.
#[test]
fn stale_copy_drop_is_resent_by_a_coordinator_that_takes_over_until_dropped() {
    let (storage, mut core, source, target, _) = setup();
    let id = begin(&mut core, target, MigrationMode::Rocksteady);
    core.migration_ownership_moved(id, 5).unwrap();
    core.migration_done_moved(id, Some((900, 9))).unwrap();

    let mut restarted = CoordinatorCore::open(storage.clone()).unwrap();
    assert!(matches!(
        restarted.stale_copy_drop(id),
        Some(Action::DropTablet { server_id, table_id, start_hash: 0, end_hash: u64::MAX, .. })
            if server_id == source && table_id == 1
    ));
    restarted.stale_copy_dropped(id).unwrap();
    assert_eq!(restarted.stale_copy_drop(id), None);
    let reopened = CoordinatorCore::open(storage).unwrap();
    assert_eq!(reopened.stale_copy_drop(id), None, "persisted");
    assert_eq!(reopened.state().migrations().stale_copies().count(), 0);
    assert!(
        reopened.state().migrations().finished_get(id).is_some(),
        "still listed once dropped"
    );
}

/// Regression (known limit 3): a rolled-back migration was simply no longer
/// listed.
#[test]
fn migration_rolled_back_keeps_the_migration_finished_as_rolled_back() {
    let (storage, mut core, source, target, _) = setup();
    let id = begin(&mut core, target, MigrationMode::Rocksteady);
    core.migration_ownership_moved(id, 5).unwrap();
    core.server_crashed(target).unwrap();
    core.migration_rolled_back(id, target).unwrap();
    assert_eq!(owner(&core), source);
    let reopened = CoordinatorCore::open(storage).unwrap();
    let f = reopened
        .state()
        .migrations()
        .finished_get(id)
        .copied()
        .unwrap();
    assert_eq!(f.outcome, MigrationOutcome::RolledBack);
    assert_eq!(f.outcome.name(), "rolled_back");
    assert_eq!(f.moved, None);
    assert_eq!(
        f.stale_copy_on, None,
        "the source keeps the range; nothing to drop"
    );
}

#[test]
fn cancelled_migration_done_keeps_it_finished_as_cancelled() {
    let (storage, mut core, source, target, _) = setup();
    let id = begin(&mut core, target, MigrationMode::Rocksteady);
    core.migration_ownership_moved(id, 5).unwrap();
    core.cancel_migration(id).unwrap();
    assert!(core
        .migration_done_moved(id, Some((1, 1)))
        .unwrap()
        .is_empty());
    let reopened = CoordinatorCore::open(storage).unwrap();
    let f = reopened
        .state()
        .migrations()
        .finished_get(id)
        .copied()
        .unwrap();
    assert_eq!(f.outcome, MigrationOutcome::Cancelled);
    assert_eq!(
        f.stale_copy_on, None,
        "the return drops it before its first step"
    );
    let ret = reopened.return_of(id).unwrap();
    assert_eq!((ret.source, ret.target), (target, source));
}

#[test]
fn finished_list_keeps_the_newest_and_never_forgets_a_due_drop() {
    let (_, mut core, first_owner, a, b) = setup();
    // Migration 1's source copy is never dropped; the range then moves back and
    // forth between a and b, each drop answered.
    let mut to = a;
    let first = begin(&mut core, to, MigrationMode::Rocksteady);
    core.migration_ownership_moved(first, 5).unwrap();
    core.migration_done_moved(first, None).unwrap();
    for _ in 0..FINISHED_KEPT + 5 {
        to = if to == a { b } else { a };
        let id = begin(&mut core, to, MigrationMode::Rocksteady);
        core.migration_ownership_moved(id, 5).unwrap();
        core.migration_done_moved(id, None).unwrap();
        core.stale_copy_dropped(id).unwrap();
    }
    let finished = core.state().migrations().finished();
    assert_eq!(finished.len(), FINISHED_KEPT);
    assert_eq!(finished[0].record.id, first, "a due drop is kept");
    assert_eq!(finished[0].stale_copy_on, Some(first_owner));
    assert!(finished.windows(2).all(|w| w[0].record.id < w[1].record.id));
}

/// Regression (known limit 5): a stop-and-copy whose target crashed mid-copy
/// stayed `Copying` for ever.
#[test]
fn lineage_of_rolls_back_a_stop_and_copy_whose_target_crashed() {
    let (storage, mut core, source, target, _) = setup();
    let id = begin(&mut core, target, MigrationMode::StopAndCopy);
    core.migration_copying(id, 5).unwrap();
    let m = core.migrations()[0];
    assert_eq!(m.state, MigrationState::Copying);
    assert_eq!(core.lineage_of(target), vec![Lineage::RollBack(m)]);
    assert!(
        core.lineage_of(source).is_empty(),
        "the source's is not lineage work"
    );
    core.server_crashed(target).unwrap();
    let actions = core.migration_rolled_back(id, target).unwrap();
    assert!(matches!(actions.as_slice(),
        [Action::TakeTablet { server_id, .. }] if *server_id == source));
    assert_eq!(owner(&core), source);
    let reopened = CoordinatorCore::open(storage).unwrap();
    assert!(reopened.migrations().is_empty());
    assert_eq!(
        reopened
            .state()
            .migrations()
            .finished_get(id)
            .map(|f| f.outcome),
        Some(MigrationOutcome::RolledBack)
    );
}

/// Regression (known limit 5): a stop-and-copy whose source crashed mid-copy
/// stayed `Copying` for ever.
#[test]
fn migration_copy_abandoned_rolls_back_and_marks_the_targets_copy_stale() {
    let (storage, mut core, source, target, _) = setup();
    let id = begin(&mut core, target, MigrationMode::StopAndCopy);
    core.migration_copying(id, 5).unwrap();
    assert_eq!(core.copies_from(source).len(), 1);
    assert!(core.copies_from(target).is_empty());
    core.server_crashed(source).unwrap();
    let before = storage.get(STATE_KEY).unwrap();
    assert!(matches!(
        core.migration_copy_abandoned(id, target),
        Err(CoordinatorError::LineageChanged(i)) if i == id
    ));
    assert_eq!(storage.get(STATE_KEY).unwrap(), before, "nothing written");
    core.migration_copy_abandoned(id, source).unwrap();
    assert!(core.migrations().is_empty());
    assert_eq!(
        owner(&core),
        source,
        "the range never moved: recovered as the source's"
    );
    let reopened = CoordinatorCore::open(storage).unwrap();
    assert!(matches!(
        reopened.stale_copy_drop(id),
        Some(Action::DropTablet { server_id, .. }) if server_id == target
    ));
    assert_eq!(
        reopened
            .state()
            .migrations()
            .finished_get(id)
            .map(|f| f.outcome),
        Some(MigrationOutcome::RolledBack)
    );
}

//! CoordinatorCore's migration records (K§2.3, R§9): every bad request is refused
//! with its error and changes nothing; each step is persisted and survives a
//! restart; ownership moves in the same write that records `Pulling`.

use std::sync::Arc;

use ramstore_coordinator::migration::MigrationState;
use ramstore_coordinator::ExternalStorage;
use ramstore_coordinator::{
    Action, CoordinatorCore, CoordinatorError, MemoryStorage, ServerId, SERVICE_BACKUP,
    SERVICE_MASTER, STATE_KEY,
};
use ramstore_wire::MigrationMode;

const GIB: u64 = 1 << 30;

/// A core with masters 1 and 2, a backup-only server, and table "t" split at 2^63
/// (both halves on the first master).
fn setup() -> (Arc<MemoryStorage>, CoordinatorCore, Vec<ServerId>) {
    let storage = Arc::new(MemoryStorage::new());
    let mut core = CoordinatorCore::open(storage.clone()).unwrap();
    let both = SERVICE_MASTER | SERVICE_BACKUP;
    let mut ids: Vec<ServerId> = (1..=2)
        .map(|i| {
            core.enlist(&format!("host{i}:1"), both, GIB, "", 0, None)
                .unwrap()
                .0
        })
        .collect();
    ids.push(
        core.enlist("backup:1", SERVICE_BACKUP, GIB, "", 0, None)
            .unwrap()
            .0,
    );
    core.create_table("t", 1).unwrap();
    core.split_tablet("t", 1 << 63).unwrap();
    (storage, core, ids)
}

fn owner(core: &CoordinatorCore, start: u64) -> ServerId {
    core.tables()
        .find(|t| t.name == "t")
        .and_then(|t| t.tablets.iter().find(|x| x.start_hash == start))
        .map(|x| x.server_id)
        .unwrap()
}

const UPPER: (u64, u64) = (1 << 63, u64::MAX);
const ROCKSTEADY: MigrationMode = MigrationMode::Rocksteady;

#[test]
fn begin_migration_refuses_bad_requests_and_changes_nothing() {
    let (storage, mut core, ids) = setup();
    let source = owner(&core, 1 << 63);
    let target = *ids.iter().find(|i| **i != source && **i != ids[2]).unwrap();
    let before = storage.get(STATE_KEY).unwrap();
    let version = core.tablet_map().0;
    let cases: Vec<(&str, (u64, u64), ServerId)> = vec![
        ("nope", UPPER, target),
        ("t", (0, u64::MAX), target),
        ("t", (1 << 63, u64::MAX - 1), target),
        ("t", UPPER, ServerId(999)),
        ("t", UPPER, source),
        ("t", UPPER, ids[2]),
    ];
    for (name, range, to) in cases {
        let e = core
            .begin_migration(name, range, to, ROCKSTEADY)
            .unwrap_err();
        match (name, to) {
            ("nope", _) => assert!(matches!(e, CoordinatorError::TableDoesntExist(_)), "{e}"),
            _ if range != UPPER => {
                assert!(matches!(e, CoordinatorError::NotOneTablet { .. }), "{e}")
            }
            _ => assert!(
                matches!(e, CoordinatorError::BadMigrationTarget { .. }),
                "{e}"
            ),
        }
    }
    assert_eq!(
        storage.get(STATE_KEY).unwrap(),
        before,
        "nothing was written"
    );
    core.server_crashed(target).unwrap();
    let before_crash_doc = storage.get(STATE_KEY).unwrap();
    assert!(matches!(
        core.begin_migration("t", UPPER, target, ROCKSTEADY),
        Err(CoordinatorError::BadMigrationTarget { .. })
    ));
    assert_eq!(storage.get(STATE_KEY).unwrap(), before_crash_doc);
    assert!(core.migrations().is_empty());
    assert_eq!(core.tablet_map().0, version, "a refusal moved no tablet");
}

#[test]
fn begin_migration_refuses_an_overlapping_migration() {
    let (_, mut core, ids) = setup();
    let source = owner(&core, 1 << 63);
    let target = *ids.iter().find(|i| **i != source && **i != ids[2]).unwrap();
    let m = core
        .begin_migration("t", UPPER, target, ROCKSTEADY)
        .unwrap();
    assert_eq!(m.state, MigrationState::Preparing);
    assert!(matches!(
        core.begin_migration("t", UPPER, target, ROCKSTEADY),
        Err(CoordinatorError::MigrationInProgress(id)) if id == m.id
    ));
    assert!(matches!(
        core.split_tablet("t", (1 << 63) + 5),
        Err(CoordinatorError::MigrationInProgress(_))
    ));
    assert_eq!(core.migrations().len(), 1);
}

#[test]
fn migration_steps_persist_and_survive_a_restart() {
    let (storage, mut core, ids) = setup();
    let source = owner(&core, 1 << 63);
    let target = *ids.iter().find(|i| **i != source && **i != ids[2]).unwrap();
    let m = core
        .begin_migration("t", UPPER, target, ROCKSTEADY)
        .unwrap();
    let v0 = core.tablet_map().0;
    assert_eq!(owner(&core, 1 << 63), source, "preparing moves nothing");

    let restarted = CoordinatorCore::open(storage.clone()).unwrap();
    assert_eq!(restarted.migrations(), core.migrations());

    let actions = core.migration_ownership_moved(m.id, 77).unwrap();
    assert!(matches!(
        actions.as_slice(),
        [Action::TakeMigratingTablet { server_id, record, .. }]
            if *server_id == target && record.safe_version == 77
    ));
    assert_eq!(owner(&core, 1 << 63), target);
    assert_eq!(core.tablet_map().0, v0 + 1);

    let mut restarted = CoordinatorCore::open(storage.clone()).unwrap();
    let reissued = restarted.reissue_actions();
    assert!(reissued
        .iter()
        .any(|a| matches!(a, Action::TakeMigratingTablet { record, .. } if record.id == m.id)));
    assert!(
        !reissued.iter().any(|a| matches!(a,
            Action::TakeTablet { server_id, start_hash, .. }
                if *server_id == target && *start_hash == 1 << 63)),
        "a tablet migrating in is never sent as a plain tablet"
    );

    let done = restarted.migration_done(m.id).unwrap();
    assert!(matches!(
        done.as_slice(),
        [Action::DropTablet { server_id, .. }] if *server_id == source
    ));
    assert!(restarted.migrations().is_empty());
    assert!(
        restarted.migration_done(m.id).unwrap().is_empty(),
        "idempotent"
    );
    let reopened = CoordinatorCore::open(storage).unwrap();
    assert!(reopened.migrations().is_empty());
}

#[test]
fn migration_copying_keeps_the_owner_until_done_moves_it_in_one_write() {
    let (storage, mut core, ids) = setup();
    let source = owner(&core, 1 << 63);
    let target = *ids.iter().find(|i| **i != source && **i != ids[2]).unwrap();
    let m = core
        .begin_migration("t", UPPER, target, MigrationMode::StopAndCopy)
        .unwrap();
    let actions = core.migration_copying(m.id, 77).unwrap();
    assert!(matches!(
        actions.as_slice(),
        [Action::TakeMigratingTablet { server_id, record, .. }]
            if *server_id == target && record.safe_version == 77
                && record.mode == MigrationMode::StopAndCopy
    ));
    assert_eq!(owner(&core, 1 << 63), source, "copying moves nothing");
    assert_eq!(core.migrations()[0].state, MigrationState::Copying);

    let mut restarted = CoordinatorCore::open(storage.clone()).unwrap();
    assert_eq!(restarted.migrations(), core.migrations());
    assert!(
        restarted
            .reissue_actions()
            .iter()
            .any(|a| matches!(a, Action::TakeMigratingTablet { record, .. } if record.id == m.id)),
        "a restarted coordinator has the target copy again"
    );
    let done = restarted.migration_done(m.id).unwrap();
    assert!(matches!(
        done.as_slice(),
        [Action::DropTablet { server_id, .. }] if *server_id == source
    ));
    assert_eq!(owner(&restarted, 1 << 63), target, "done moves ownership");
    let reopened = CoordinatorCore::open(storage).unwrap();
    assert_eq!(owner(&reopened, 1 << 63), target);
    assert!(reopened.migrations().is_empty());
}

#[test]
fn abort_migration_forgets_only_a_preparing_record() {
    let (_, mut core, ids) = setup();
    let source = owner(&core, 1 << 63);
    let target = *ids.iter().find(|i| **i != source && **i != ids[2]).unwrap();
    let m = core
        .begin_migration("t", UPPER, target, ROCKSTEADY)
        .unwrap();
    core.abort_migration(m.id).unwrap();
    assert!(core.migrations().is_empty());
    let m = core
        .begin_migration("t", UPPER, target, ROCKSTEADY)
        .unwrap();
    assert!(m.id > 1, "ids are never reused");
    core.migration_ownership_moved(m.id, 5).unwrap();
    core.abort_migration(m.id).unwrap();
    assert_eq!(
        core.migrations().len(),
        1,
        "ownership has moved: no rollback"
    );
}

#[test]
fn finish_recovery_keeps_a_crashed_migration_source() {
    let (_, mut core, ids) = setup();
    let source = owner(&core, 1 << 63);
    let target = *ids.iter().find(|i| **i != source && **i != ids[2]).unwrap();
    let m = core
        .begin_migration("t", UPPER, target, ROCKSTEADY)
        .unwrap();
    core.migration_ownership_moved(m.id, 5).unwrap();
    core.server_crashed(source).unwrap();
    // Its other tablet is recovered onto the target.
    core.recovered_partition(source, &[(1, 0, (1 << 63) - 1)], target)
        .unwrap();
    assert!(core.finish_recovery(source).unwrap().is_empty());
    assert_eq!(
        core.server(source).map(|s| s.status),
        Some(ramstore_coordinator::ServerStatus::Crashed),
        "its replicas hold records not pulled yet"
    );
}

#[test]
fn drop_table_forgets_its_migrations() {
    let (storage, mut core, ids) = setup();
    let source = owner(&core, 1 << 63);
    let target = *ids.iter().find(|i| **i != source && **i != ids[2]).unwrap();
    core.begin_migration("t", UPPER, target, ROCKSTEADY)
        .unwrap();
    core.drop_table("t").unwrap();
    assert!(core.migrations().is_empty());
    CoordinatorCore::open(storage).expect("the stored state stays valid");
}

// Lineage recovery (K§2.3.4, `migration_recovery`).

use ramstore_coordinator::migration_recovery::Lineage;
use ramstore_coordinator::ServerStatus;

/// [`setup`] with the upper half migrating (`Pulling`) from its owner to the
/// other master, and a third master: (storage, core, source, target, third,
/// migration id).
fn pulling() -> (
    Arc<MemoryStorage>,
    CoordinatorCore,
    ServerId,
    ServerId,
    ServerId,
    u64,
) {
    let (storage, mut core, ids) = setup();
    let source = owner(&core, 1 << 63);
    let target = *ids.iter().find(|i| **i != source && **i != ids[2]).unwrap();
    let both = SERVICE_MASTER | SERVICE_BACKUP;
    let third = core.enlist("host3:1", both, GIB, "", 0, None).unwrap().0;
    let m = core
        .begin_migration("t", UPPER, target, ROCKSTEADY)
        .unwrap();
    core.migration_ownership_moved(m.id, 5).unwrap();
    (storage, core, source, target, third, m.id)
}

#[test]
fn lineage_of_rolls_back_for_a_crashed_target_and_moves_a_crashed_source() {
    let (_, core, source, target, third, id) = pulling();
    let m = core.migrations()[0];
    assert_eq!(core.lineage_of(target), vec![Lineage::RollBack(m)]);
    assert_eq!(core.lineage_of(source), vec![Lineage::NewSource(m)]);
    assert!(core.lineage_of(third).is_empty());
    assert_eq!(m.id, id);
}

#[test]
fn migration_rolled_back_returns_the_range_to_the_source_and_deletes_the_record() {
    let (storage, mut core, source, target, _, id) = pulling();
    core.server_crashed(target).unwrap();
    let v0 = core.tablet_map().0;
    let actions = core.migration_rolled_back(id, target).unwrap();
    assert!(matches!(
        actions.as_slice(),
        [Action::TakeTablet { server_id, start_hash, .. }]
            if *server_id == source && *start_hash == 1 << 63
    ));
    assert_eq!(owner(&core, 1 << 63), source);
    assert_eq!(core.tablet_map().0, v0 + 1);
    assert!(core.migrations().is_empty(), "rolled back: no record");
    let reopened = CoordinatorCore::open(storage).unwrap();
    assert!(reopened.migrations().is_empty(), "persisted (R§9)");
    assert_eq!(owner(&reopened, 1 << 63), source);
    assert!(
        matches!(core.migration_rolled_back(id, target), Err(CoordinatorError::LineageChanged(i)) if i == id),
        "a second hand-out finds nothing to do"
    );
}

#[test]
fn migration_rolled_back_refuses_a_changed_record_and_changes_nothing() {
    let (storage, mut core, source, target, _, id) = pulling();
    let before = storage.get(STATE_KEY).unwrap();
    assert!(
        matches!(core.migration_rolled_back(id, source), Err(CoordinatorError::LineageChanged(i)) if i == id),
        "the crashed server is not the target"
    );
    core.server_crashed(target).unwrap();
    core.server_crashed(source).unwrap();
    let crashed_doc = storage.get(STATE_KEY).unwrap();
    assert_ne!(before, crashed_doc);
    assert!(
        matches!(core.migration_rolled_back(id, target), Err(CoordinatorError::LineageChanged(i)) if i == id),
        "the source is not up to take the range back"
    );
    assert_eq!(storage.get(STATE_KEY).unwrap(), crashed_doc);
    assert_eq!(owner(&core, 1 << 63), target);
}

#[test]
fn migration_source_recovered_moves_the_source_and_lets_the_old_one_be_removed() {
    let (storage, mut core, source, target, third, id) = pulling();
    core.server_crashed(source).unwrap();
    // The crashed source's other tablet is recovered as usual.
    core.recovered_partition(source, &[(1, 0, (1 << 63) - 1)], third)
        .unwrap();
    assert!(
        core.finish_recovery(source).unwrap().is_empty(),
        "kept while the migration names it"
    );
    let actions = core.migration_source_recovered(id, source, third).unwrap();
    assert!(matches!(
        actions.as_slice(),
        [Action::TakeMigratingTablet { server_id, record, source_address, .. }]
            if *server_id == target && record.source == third && source_address == "host3:1"
    ));
    assert_eq!(owner(&core, 1 << 63), target, "the target keeps the range");
    assert!(!core.finish_recovery(source).unwrap().is_empty());
    assert_eq!(
        core.server(source).map(|s| s.status),
        Some(ServerStatus::Removed)
    );
    let mut restarted = CoordinatorCore::open(storage).unwrap();
    assert!(
        restarted.reissue_actions().iter().any(|a| matches!(a,
            Action::TakeMigratingTablet { record, source_address, .. }
                if record.id == id && source_address == "host3:1")),
        "a new coordinator points the target at the new source"
    );
    let done = restarted.migration_done(id).unwrap();
    assert!(
        matches!(done.as_slice(), [Action::DropTablet { server_id, .. }] if *server_id == third),
        "the new source drops its copy when the migration is done"
    );
}

#[test]
fn migration_source_recovered_refuses_the_target_or_a_changed_record() {
    let (storage, mut core, source, target, third, id) = pulling();
    core.server_crashed(source).unwrap();
    let before = storage.get(STATE_KEY).unwrap();
    for (crashed, new_source) in [(source, target), (target, third), (source, ServerId(999))] {
        assert!(
            matches!(core.migration_source_recovered(id, crashed, new_source), Err(CoordinatorError::LineageChanged(i)) if i == id),
            "crashed {crashed:?} new source {new_source:?}"
        );
    }
    assert_eq!(storage.get(STATE_KEY).unwrap(), before, "nothing written");
}

/// Regression: a MigrationDone that reaches the coordinator after the target
/// was declared crashed must not have the source drop the copy that lineage
/// recovery rolls back onto.
#[test]
fn migration_done_from_a_crashed_target_is_ignored() {
    let (_, mut core, _, target, _, id) = pulling();
    core.server_crashed(target).unwrap();
    // An error, not OK: the target keeps the tombstones a roll-back needs
    // until its MigrationDone is acknowledged (design notes, lineage).
    assert!(matches!(
        core.migration_done(id),
        Err(CoordinatorError::MigrationTargetCrashed(i)) if i == id
    ));
    assert_eq!(core.migrations().len(), 1);
    assert!(core.state().migrations().finished().is_empty());
}

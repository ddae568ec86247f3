//! A migration whose target goes before ownership moves (issue 20, simulator
//! seed 285), and the wait crash recovery makes for migrations still being
//! prepared from the crashed master (issue 20, seeds 112 and 166: the orphan
//! drop on the target must not meet a range recovery places there).

use std::sync::Arc;

use ramstore_coordinator::migration::{MigrationOutcome, MigrationState};
use ramstore_coordinator::{
    Action, CoordinatorCore, CoordinatorError, MemoryStorage, ServerId, SERVICE_BACKUP,
    SERVICE_MASTER,
};
use ramstore_wire::MigrationMode;

const GIB: u64 = 1 << 30;
const UPPER: (u64, u64) = (1 << 63, u64::MAX);

/// A core with masters 1–3 and table "t" split at 2^63; returns the upper
/// half's owner and another master.
fn setup() -> (CoordinatorCore, ServerId, ServerId) {
    let storage = Arc::new(MemoryStorage::new());
    let mut core = CoordinatorCore::open(storage).expect("a fresh storage opens");
    let both = SERVICE_MASTER | SERVICE_BACKUP;
    let ids: Vec<ServerId> = (1..=3)
        .map(|i| {
            core.enlist(&format!("host{i}:1"), both, GIB, "", 0, None)
                .expect("enlist")
                .0
        })
        .collect();
    core.create_table("t", 1).expect("create");
    core.split_tablet("t", 1 << 63).expect("split");
    let source = owner(&core);
    let target = *ids.iter().find(|i| **i != source).expect("three masters");
    (core, source, target)
}

fn owner(core: &CoordinatorCore) -> ServerId {
    core.tables()
        .find(|t| t.name == "t")
        .and_then(|t| t.tablets.iter().find(|x| x.start_hash == UPPER.0))
        .map(|x| x.server_id)
        .expect("the upper half exists")
}

#[test]
fn migration_ownership_moved_refuses_a_target_crashed_before_the_move() {
    let (mut core, source, target) = setup();
    let m = core
        .begin_migration("t", UPPER, target, MigrationMode::Rocksteady)
        .expect("begin");
    core.server_crashed(target).expect("crash");
    let e = core.migration_ownership_moved(m.id, 10).unwrap_err();
    assert!(
        matches!(e, CoordinatorError::MigrationTargetCrashed(id) if id == m.id),
        "{e}"
    );
    assert_eq!(owner(&core), source, "the range stays on its source");
    assert_eq!(core.migrations()[0].state, MigrationState::Preparing);
    // Its recovery finishing changes nothing: the move is still refused.
    core.finish_recovery(target).expect("finish");
    assert!(core.migration_ownership_moved(m.id, 10).is_err());
    assert_eq!(owner(&core), source);
}

#[test]
fn migration_copying_refuses_a_target_crashed_before_the_copy() {
    let (mut core, source, target) = setup();
    let m = core
        .begin_migration("t", UPPER, target, MigrationMode::StopAndCopy)
        .expect("begin");
    core.server_crashed(target).expect("crash");
    assert!(matches!(
        core.migration_copying(m.id, 10),
        Err(CoordinatorError::MigrationTargetCrashed(_))
    ));
    assert_eq!(core.migrations()[0].state, MigrationState::Preparing);
    assert_eq!(owner(&core), source);
}

#[test]
fn migration_unmoved_rolled_back_finishes_the_record_and_has_the_source_serve() {
    let (mut core, source, target) = setup();
    let m = core
        .begin_migration("t", UPPER, target, MigrationMode::Rocksteady)
        .expect("begin");
    core.server_crashed(target).expect("crash");
    let actions = core
        .migration_unmoved_rolled_back(m.id)
        .expect("rolled back");
    assert!(
        matches!(actions.as_slice(), [Action::TakeTablet { server_id, start_hash, .. }]
            if *server_id == source && *start_hash == UPPER.0),
        "{actions:?}"
    );
    assert!(core.migrations().is_empty());
    let f = core
        .state()
        .migrations()
        .finished_get(m.id)
        .expect("kept as finished");
    assert_eq!(f.outcome, MigrationOutcome::RolledBack);
    assert_eq!(f.stale_copy_on, None, "the source's copy is the range");
    assert_eq!(owner(&core), source);
}

#[test]
fn migration_unmoved_rolled_back_refuses_an_up_target_or_a_moved_record() {
    let (mut core, _, target) = setup();
    let m = core
        .begin_migration("t", UPPER, target, MigrationMode::Rocksteady)
        .expect("begin");
    assert!(matches!(
        core.migration_unmoved_rolled_back(m.id),
        Err(CoordinatorError::LineageChanged(_))
    ));
    core.migration_ownership_moved(m.id, 10).expect("moved");
    core.server_crashed(target).expect("crash");
    assert!(matches!(
        core.migration_unmoved_rolled_back(m.id),
        Err(CoordinatorError::LineageChanged(_))
    ));
    assert_eq!(core.migrations()[0].state, MigrationState::Pulling);
    assert_eq!(owner(&core), target, "lineage recovery rolls this one back");
}

#[test]
fn migrations_preparing_from_counts_only_preparing_records_of_that_source() {
    let (mut core, source, target) = setup();
    assert_eq!(core.migrations_preparing_from(source), 0);
    let m = core
        .begin_migration("t", UPPER, target, MigrationMode::Rocksteady)
        .expect("begin");
    assert_eq!(core.migrations_preparing_from(source), 1);
    assert_eq!(core.migrations_preparing_from(target), 0);
    core.migration_ownership_moved(m.id, 10).expect("moved");
    assert_eq!(
        core.migrations_preparing_from(source),
        0,
        "a Pulling one is lineage recovery's"
    );
}

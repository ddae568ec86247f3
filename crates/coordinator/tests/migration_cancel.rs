//! Cancelling a migration in CoordinatorCore (issue 20; design notes
//! "Cancelling a migration"): the cancel is persisted first (R§9), the
//! migration's end becomes its return in one write, and bad ids are refused
//! with their error and change nothing.

use std::sync::Arc;

use ramstore_coordinator::migration::MigrationState;
use ramstore_coordinator::ExternalStorage;
use ramstore_coordinator::{
    CoordinatorCore, CoordinatorError, MemoryStorage, ServerId, SERVICE_BACKUP, SERVICE_MASTER,
    STATE_KEY,
};
use ramstore_wire::MigrationMode;

const GIB: u64 = 1 << 30;

/// A core with masters 1 and 2 and table "t" in one tablet, migrating from its
/// owner to the other master (ownership moved): the storage, the core, the
/// migration's id, its source and its target.
fn migrating() -> (Arc<MemoryStorage>, CoordinatorCore, u64, ServerId, ServerId) {
    let storage = Arc::new(MemoryStorage::new());
    let mut core = CoordinatorCore::open(storage.clone()).unwrap();
    let both = SERVICE_MASTER | SERVICE_BACKUP;
    let ids: Vec<ServerId> = (1..=2)
        .map(|i| {
            core.enlist(&format!("host{i}:1"), both, GIB, "", 0, None)
                .unwrap()
                .0
        })
        .collect();
    core.create_table("t", 1).unwrap();
    let source = core.tables().next().unwrap().tablets[0].server_id;
    let target = *ids.iter().find(|i| **i != source).unwrap();
    let m = core
        .begin_migration("t", (0, u64::MAX), target, MigrationMode::Rocksteady)
        .unwrap();
    core.migration_ownership_moved(m.id, 100).unwrap();
    (storage, core, m.id, source, target)
}

fn owner(core: &CoordinatorCore) -> ServerId {
    core.tables().next().unwrap().tablets[0].server_id
}

#[test]
fn cancel_migration_unknown_id_is_refused_and_writes_nothing() {
    let (storage, mut core, id, _, _) = migrating();
    let before = storage.get(STATE_KEY).unwrap();
    let e = core.cancel_migration(id + 10).unwrap_err();
    assert!(
        matches!(e, CoordinatorError::NoSuchMigration(n) if n == id + 10),
        "{e}"
    );
    assert_eq!(storage.get(STATE_KEY).unwrap(), before);
}

#[test]
fn cancel_migration_is_persisted_and_idempotent() {
    let (storage, mut core, id, _, _) = migrating();
    let m = core.cancel_migration(id).unwrap();
    assert!(m.cancelled);
    let after_first = storage.get(STATE_KEY).unwrap();
    core.cancel_migration(id).unwrap();
    assert_eq!(
        storage.get(STATE_KEY).unwrap(),
        after_first,
        "a second cancel writes nothing"
    );
    let reopened = CoordinatorCore::open(storage.clone()).unwrap();
    let m = reopened.state().migrations().get(id).copied().unwrap();
    assert!(m.cancelled, "the cancel survives a restart");
    assert_eq!(m.state, MigrationState::Pulling);
}

#[test]
fn migration_done_of_a_cancelled_migration_records_its_return_and_drops_nothing() {
    let (storage, mut core, id, source, target) = migrating();
    core.cancel_migration(id).unwrap();
    let actions = core.migration_done(id).unwrap();
    assert!(actions.is_empty(), "no drop at the source yet: {actions:?}");
    assert!(
        core.state().migrations().get(id).is_none(),
        "the cancelled one is gone"
    );
    let ret = core.return_of(id).expect("a return migration");
    assert_eq!((ret.source, ret.target), (target, source));
    assert_eq!(ret.state, MigrationState::Preparing);
    assert_eq!(
        owner(&core),
        target,
        "the target owns the range until the return moves it"
    );
    let reopened = CoordinatorCore::open(storage).unwrap();
    assert_eq!(
        reopened.return_of(id),
        Some(ret),
        "in the same persisted write"
    );
    // The return itself cannot be cancelled; the finished one is unknown.
    let e = core.cancel_migration(ret.id).unwrap_err();
    assert!(matches!(e, CoordinatorError::CannotCancel { .. }), "{e}");
    let e = core.cancel_migration(id).unwrap_err();
    assert!(matches!(e, CoordinatorError::NoSuchMigration(_)), "{e}");
    // The return runs as any migration: ownership comes back to the source.
    core.migration_ownership_moved(ret.id, 200).unwrap();
    assert_eq!(owner(&core), source);
    let actions = core.migration_done(ret.id).unwrap();
    assert_eq!(actions.len(), 1, "the target drops its copy: {actions:?}");
    assert!(core.migrations().is_empty());
}

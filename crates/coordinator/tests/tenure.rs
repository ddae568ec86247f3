//! Tablet ctimes in the coordinator's records (design notes "Tablet ctime",
//! issue 20): each tablet's owner has a ctime, persisted before it is acted on
//! (R§9); a migration keeps the source's and records the target's before
//! ownership moves; lineage recovery replays each log from its own ctime; and
//! documents written before ctimes existed read as "no cutoff".

use std::sync::Arc;

use ramstore_coordinator::migration_recovery::Lineage;
use ramstore_coordinator::migrations::MigrationRecord;
use ramstore_coordinator::tables::TabletEntry;
use ramstore_coordinator::{
    CoordinatorCore, MemoryStorage, ServerId, SERVICE_BACKUP, SERVICE_MASTER,
};
use ramstore_wire::MigrationMode;

const GIB: u64 = 1 << 30;
const UPPER: (u64, u64) = (1 << 63, u64::MAX);

/// A core with masters 1–3 and table "t" split at 2^63.
fn setup() -> (Arc<MemoryStorage>, CoordinatorCore, Vec<ServerId>) {
    let storage = Arc::new(MemoryStorage::new());
    let mut core = CoordinatorCore::open(storage.clone()).unwrap();
    let both = SERVICE_MASTER | SERVICE_BACKUP;
    let ids = (1..=3)
        .map(|i| {
            core.enlist(&format!("host{i}:1"), both, GIB, "", 0, None)
                .unwrap()
                .0
        })
        .collect();
    core.create_table("t", 1).unwrap();
    core.split_tablet("t", 1 << 63).unwrap();
    (storage, core, ids)
}

fn tablet(core: &CoordinatorCore, start: u64) -> TabletEntry {
    core.tables()
        .find(|t| t.name == "t")
        .and_then(|t| t.tablets.iter().find(|x| x.start_hash == start))
        .copied()
        .unwrap()
}

/// Crashes the table's first owner and recovers both tablets onto another
/// master with ctime `ctime`, so that they have a ctime other than 0. Returns
/// (the new owner, the master left up besides it).
fn recovered_with(
    core: &mut CoordinatorCore,
    ids: &[ServerId],
    ctime: u64,
) -> (ServerId, ServerId) {
    let first = tablet(core, 1 << 63).server_id;
    let others: Vec<ServerId> = ids.iter().copied().filter(|&i| i != first).collect();
    core.server_crashed(first).unwrap();
    core.recovered_partition_since(first, &[(1, 0, u64::MAX)], others[0], ctime)
        .unwrap();
    (others[0], others[1])
}

#[test]
fn create_table_and_split_tablet_keep_ctime_zero_or_inherited() {
    let (_, mut core, ids) = setup();
    assert_eq!(
        tablet(&core, 0).ctime,
        0,
        "a new table id has no earlier entries"
    );
    recovered_with(&mut core, &ids, 17);
    core.split_tablet("t", (1 << 63) + 1000).unwrap();
    assert_eq!(tablet(&core, 1 << 63).ctime, 17);
    assert_eq!(tablet(&core, (1 << 63) + 1000).ctime, 17);
}

#[test]
fn migration_ownership_moved_gives_the_tablet_the_persisted_target_ctime() {
    let (storage, mut core, ids) = setup();
    let (_, target) = recovered_with(&mut core, &ids, 17);
    let m = core
        .begin_migration("t", UPPER, target, MigrationMode::Rocksteady)
        .unwrap();
    assert_eq!(
        m.source_ctime, 17,
        "the source's ctime is kept for a roll-back"
    );
    core.migration_target_tenure(m.id, 42).unwrap();
    // Persisted before ownership moves: a coordinator that takes over has it.
    let reopened = CoordinatorCore::open(storage.clone()).unwrap();
    assert_eq!(reopened.migrations()[0].target_ctime, 42);
    core.migration_ownership_moved(m.id, 5).unwrap();
    let t = tablet(&core, 1 << 63);
    assert_eq!((t.server_id, t.ctime), (target, 42));
    // Once ownership moved, the target's tenure is fixed.
    core.migration_target_tenure(m.id, 99).unwrap();
    assert_eq!(core.migrations()[0].target_ctime, 42);
}

/// Migrates the upper half to `target`, whose tenure begins at `target_ctime`,
/// up to ownership moved (pulling).
fn moved_to(core: &mut CoordinatorCore, target: ServerId, target_ctime: u64) -> MigrationRecord {
    let m = core
        .begin_migration("t", UPPER, target, MigrationMode::Rocksteady)
        .unwrap();
    core.migration_target_tenure(m.id, target_ctime).unwrap();
    core.migration_ownership_moved(m.id, 5).unwrap();
    m
}

#[test]
fn lineage_replays_each_log_from_its_own_ctime_and_roll_back_restores_the_source() {
    let (_, mut core, ids) = setup();
    let (source, target) = recovered_with(&mut core, &ids, 17);
    let m = moved_to(&mut core, target, 42);
    core.server_crashed(target).unwrap();
    let lineage = core.lineage_of(target);
    assert!(matches!(lineage[..], [Lineage::RollBack(_)]));
    assert_eq!(
        lineage[0].replay_ctime(),
        42,
        "the target's log from its tenure"
    );
    core.migration_rolled_back(m.id, target).unwrap();
    let t = tablet(&core, 1 << 63);
    assert_eq!(
        (t.server_id, t.ctime),
        (source, 17),
        "the source's tenure goes on"
    );
}

#[test]
fn migration_source_recovered_since_records_the_new_sources_ctime() {
    let (_, mut core, ids) = setup();
    let (source, target) = recovered_with(&mut core, &ids, 17);
    let m = moved_to(&mut core, target, 42);
    core.server_crashed(source).unwrap();
    let lineage = core.lineage_of(source);
    assert!(matches!(lineage[..], [Lineage::NewSource(_)]));
    assert_eq!(
        lineage[0].replay_ctime(),
        17,
        "the source's log from its tenure"
    );
    // A fourth master enlists to become the new source.
    let (third, _) = core
        .enlist("host4:1", SERVICE_MASTER | SERVICE_BACKUP, GIB, "", 0, None)
        .unwrap();
    core.migration_source_recovered_since(m.id, source, third, 63)
        .unwrap();
    let r = core.migrations()[0];
    assert_eq!((r.source, r.source_ctime, r.target_ctime), (third, 63, 42));
}

#[test]
fn records_written_before_ctimes_existed_read_as_no_cutoff() {
    let tablet: TabletEntry =
        serde_json::from_str(r#"{"table_id":1,"start_hash":0,"end_hash":9,"server_id":3}"#)
            .unwrap();
    assert_eq!(tablet.ctime, 0);
    let record: MigrationRecord = serde_json::from_str(
        r#"{"id":1,"table_id":1,"start_hash":0,"end_hash":9,"source":3,"target":4,
            "state":"pulling","safe_version":5}"#,
    )
    .unwrap();
    assert_eq!((record.source_ctime, record.target_ctime), (0, 0));
}

//! CoordinatorCore: table placement, server lifecycle, versions, persistence.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use ramstore_coordinator::{
    Action, CoordinatorCore, CoordinatorError, ExternalStorage, FileStorage, MemoryStorage,
    ServerId, ServerStatus, StorageError, TabletEntry, MAX_FAILURE_DOMAIN_BYTES, MAX_SERVER_SPAN,
    SERVICE_BACKUP, SERVICE_MASTER, STATE_KEY,
};

const BOTH: u32 = SERVICE_MASTER | SERVICE_BACKUP;
const GIB: u64 = 1 << 30;

fn memory_core() -> (Arc<MemoryStorage>, CoordinatorCore) {
    let storage = Arc::new(MemoryStorage::new());
    let core = CoordinatorCore::open(storage.clone()).unwrap();
    (storage, core)
}

/// Enlists `n` masters at host1:1, host2:1, …
fn with_masters(core: &mut CoordinatorCore, n: usize) -> Vec<ServerId> {
    (1..=n)
        .map(|i| {
            core.enlist(&format!("host{i}:1"), BOTH, GIB, "", 0, None)
                .unwrap()
                .0
        })
        .collect()
}

fn tablets_of(core: &CoordinatorCore, name: &str) -> Vec<TabletEntry> {
    core.tables()
        .find(|t| t.name == name)
        .map(|t| t.tablets.clone())
        .unwrap_or_default()
}

fn assert_covers_hash_space(tablets: &[TabletEntry]) {
    assert!(!tablets.is_empty());
    assert_eq!(tablets[0].start_hash, 0);
    assert_eq!(tablets[tablets.len() - 1].end_hash, u64::MAX);
    for t in tablets {
        assert!(t.start_hash <= t.end_hash, "{t:?}");
    }
    for w in tablets.windows(2) {
        assert_eq!(w[0].end_hash.checked_add(1), Some(w[1].start_hash), "{w:?}");
    }
}

/// A storage whose puts fail while `fail` is set, to check write-before-apply.
struct FailingStorage {
    inner: MemoryStorage,
    fail: AtomicBool,
}

impl ExternalStorage for FailingStorage {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.get(key)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(StorageError::Io {
                op: "write",
                path: "failing-storage".into(),
                source: std::io::Error::other("injected failure"),
            });
        }
        self.inner.put(key, value)
    }
    fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key)
    }
    fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        self.inner.list(prefix)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn create_table_covers_hash_space_balanced(span in 1u32..64, masters in 1usize..10, backups in 0usize..3) {
        let (_s, mut core) = memory_core();
        let ids = with_masters(&mut core, masters);
        for i in 0..backups {
            core.enlist(&format!("backup{i}:1"), SERVICE_BACKUP, 0, "", 0, None).unwrap();
        }
        let (table_id, actions) = core.create_table("t", span).unwrap();
        let tablets = tablets_of(&core, "t");
        prop_assert_eq!(tablets.len(), span as usize);
        assert_covers_hash_space(&tablets);
        let mut counts: BTreeMap<ServerId, usize> = ids.iter().map(|&id| (id, 0)).collect();
        for t in &tablets {
            prop_assert_eq!(t.table_id, table_id);
            // Only masters get tablets.
            *counts.get_mut(&t.server_id).expect("owner is a master") += 1;
        }
        let max = counts.values().max().copied().unwrap_or(0);
        let min = counts.values().min().copied().unwrap_or(0);
        prop_assert!(max - min <= 1, "unbalanced: {:?}", counts);
        // One TakeTablet per tablet, addressed to its owner.
        prop_assert_eq!(actions.len(), tablets.len());
        for (a, t) in actions.iter().zip(&tablets) {
            let expected = Action::TakeTablet {
                server_id: t.server_id,
                address: core.server(t.server_id).unwrap().address.clone(),
                table_id,
                start_hash: t.start_hash,
                end_hash: t.end_hash,
            };
            prop_assert_eq!(a, &expected);
        }
    }
}

/// One step of the server-identity model test.
#[derive(Debug, Clone)]
enum Life {
    /// A new server enlists (no directory to name).
    Join,
    /// A server restarts on its directory, naming the id of the run it pick()s
    /// among every id ever given (possibly a stale one).
    Restart(usize),
    /// The server running under that id stops cleanly (`Leave`).
    Leave(usize),
    /// The detector declares it crashed.
    Crash(usize),
    /// Recovery finished: removed.
    Remove(usize),
}

fn life() -> impl Strategy<Value = Life> {
    prop_oneof![
        2 => Just(Life::Join),
        3 => any::<usize>().prop_map(Life::Restart),
        1 => any::<usize>().prop_map(Life::Leave),
        1 => any::<usize>().prop_map(Life::Crash),
        1 => any::<usize>().prop_map(Life::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Server identities against a model (index → newest incarnation): a restart
    /// naming an index's newest incarnation gets the next incarnation of that
    /// index, any other enlistment a new index; no id is ever given twice; the list
    /// stays sorted and survives a coordinator restart; `Leave` marks exactly the
    /// UP servers it stops.
    #[test]
    fn server_identities_match_model(steps in proptest::collection::vec(life(), 1..40)) {
        let storage = Arc::new(MemoryStorage::new());
        let mut core = CoordinatorCore::open(storage.clone()).unwrap();
        let mut newest: BTreeMap<u64, u64> = BTreeMap::new();
        let mut given: Vec<ServerId> = Vec::new();
        let pick = |given: &[ServerId], i: usize| given.get(i % given.len().max(1)).copied();
        for step in steps {
            match step {
                Life::Join => {
                    let (id, _) = core.enlist(&format!("new{}:1", given.len()), BOTH, GIB, "", 0, None).unwrap();
                    prop_assert_eq!(id.incarnation(), 0);
                    prop_assert_eq!(id.index(), newest.len() as u64 + 1);
                    newest.insert(id.index(), 0);
                    given.push(id);
                }
                Life::Restart(i) => {
                    let Some(old) = pick(&given, i) else { continue };
                    let (id, _) = core.enlist(&format!("r{}:1", given.len()), BOTH, GIB, "", 0, Some(old)).unwrap();
                    if newest[&old.index()] == old.incarnation() {
                        prop_assert_eq!((id.index(), id.incarnation()), (old.index(), old.incarnation() + 1));
                    } else {
                        prop_assert_eq!((id.index(), id.incarnation()), (newest.len() as u64 + 1, 0));
                    }
                    prop_assert_ne!(core.server(old).unwrap().status, ServerStatus::Up);
                    newest.insert(id.index(), id.incarnation());
                    given.push(id);
                }
                Life::Leave(i) => {
                    let Some(id) = pick(&given, i) else { continue };
                    let was_up = core.server(id).unwrap().status == ServerStatus::Up;
                    let was_clean = core.server(id).unwrap().stopped_cleanly;
                    core.server_left(id).unwrap();
                    let e = core.server(id).unwrap();
                    prop_assert_ne!(e.status, ServerStatus::Up);
                    prop_assert_eq!(e.stopped_cleanly, was_clean || was_up);
                }
                Life::Crash(i) => {
                    let Some(id) = pick(&given, i) else { continue };
                    core.server_crashed(id).unwrap();
                }
                Life::Remove(i) => {
                    let Some(id) = pick(&given, i) else { continue };
                    core.remove_server(id).unwrap();
                }
            }
            let mut sorted = given.clone();
            sorted.sort();
            sorted.dedup();
            prop_assert_eq!(sorted.len(), given.len(), "an id was given twice: {:?}", given);
            let (_, list) = core.server_list();
            let listed: Vec<ServerId> = list.iter().map(|e| e.id).collect();
            prop_assert_eq!(&listed, &sorted);
        }
        // The state reloads (its invariants hold) with the same list.
        let list = core.server_list();
        drop(core);
        let core = CoordinatorCore::open(storage).unwrap();
        prop_assert_eq!(core.server_list(), list);
    }
}

#[test]
fn create_table_starts_round_robin_at_least_loaded_master() {
    let (_s, mut core) = memory_core();
    let ids = with_masters(&mut core, 3);
    core.create_table("a", 2).unwrap(); // servers 1 and 2 get one tablet each
    core.create_table("b", 4).unwrap();
    let owners: Vec<_> = tablets_of(&core, "b").iter().map(|t| t.server_id).collect();
    // Server 3 owns nothing, so it goes first; then 1 and 2 (tied, by id); then 3.
    assert_eq!(owners, vec![ids[2], ids[0], ids[1], ids[2]]);
}

#[test]
fn create_table_is_idempotent() {
    let (_s, mut core) = memory_core();
    with_masters(&mut core, 2);
    let (id, actions) = core.create_table("users", 4).unwrap();
    assert_eq!(id, 1);
    assert_eq!(actions.len(), 4);
    let seq = core.sequence();
    let version = core.tablet_map().0;
    let (again, actions) = core.create_table("users", 9).unwrap();
    assert_eq!(again, id);
    assert!(actions.is_empty());
    assert_eq!(core.sequence(), seq, "nothing written");
    assert_eq!(core.tablet_map().0, version);
    assert_eq!(tablets_of(&core, "users").len(), 4);
    let (other, _) = core.create_table("orders", 0).unwrap();
    assert_eq!(other, 2);
    assert_eq!(tablets_of(&core, "orders").len(), 1, "span 0 counts as 1");
}

#[test]
fn create_table_rejects_bad_arguments() {
    let (_s, mut core) = memory_core();
    with_masters(&mut core, 1);
    assert!(matches!(
        core.create_table("", 1),
        Err(CoordinatorError::BadName(_))
    ));
    assert!(matches!(
        core.create_table(&"n".repeat(256), 1),
        Err(CoordinatorError::BadName(_))
    ));
    core.create_table(&"é".repeat(127), 1).unwrap(); // 254 bytes
    assert!(matches!(
        core.create_table("t", MAX_SERVER_SPAN + 1),
        Err(CoordinatorError::BadServerSpan(_))
    ));
    let (_, actions) = core.create_table("t", MAX_SERVER_SPAN).unwrap();
    assert_eq!(actions.len(), MAX_SERVER_SPAN as usize);
    assert_covers_hash_space(&tablets_of(&core, "t"));
}

#[test]
fn create_table_without_masters_is_retryable() {
    let (_s, mut core) = memory_core();
    let err = core.create_table("t", 1).unwrap_err();
    assert!(matches!(err, CoordinatorError::NoMasters) && err.is_retryable());
    // Backups and crashed masters do not count.
    core.enlist("backup:1", SERVICE_BACKUP, 0, "", 0, None)
        .unwrap();
    let (m, _) = core.enlist("master:1", BOTH, GIB, "", 0, None).unwrap();
    core.server_crashed(m).unwrap();
    assert!(matches!(
        core.create_table("t", 1),
        Err(CoordinatorError::NoMasters)
    ));
    assert!(core.tables().next().is_none());
}

#[test]
fn drop_table_returns_drop_for_every_tablet() {
    let (_s, mut core) = memory_core();
    with_masters(&mut core, 3);
    core.create_table("t", 5).unwrap();
    let tablets = tablets_of(&core, "t");
    let actions = core.drop_table("t").unwrap();
    assert_eq!(actions.len(), tablets.len());
    for (a, t) in actions.iter().zip(&tablets) {
        assert_eq!(
            a,
            &Action::DropTablet {
                server_id: t.server_id,
                address: core.server(t.server_id).unwrap().address.clone(),
                table_id: t.table_id,
                start_hash: t.start_hash,
                end_hash: t.end_hash,
            }
        );
    }
    assert!(matches!(
        core.get_table_id("t"),
        Err(CoordinatorError::TableDoesntExist(_))
    ));
    assert!(matches!(
        core.drop_table("t"),
        Err(CoordinatorError::TableDoesntExist(_))
    ));
    assert!(core.tablet_map().1.is_empty());
    // The dropped table's id is never given out again.
    let (id, _) = core.create_table("t", 1).unwrap();
    assert_eq!(id, 2);
}

#[test]
fn get_table_id_finds_tables() {
    let (_s, mut core) = memory_core();
    with_masters(&mut core, 1);
    let (a, _) = core.create_table("a", 1).unwrap();
    let (b, _) = core.create_table("b", 1).unwrap();
    assert_eq!(core.get_table_id("a").unwrap(), a);
    assert_eq!(core.get_table_id("b").unwrap(), b);
    assert!(matches!(
        core.get_table_id("c"),
        Err(CoordinatorError::TableDoesntExist(name)) if name == "c"
    ));
}

#[test]
fn enlist_assigns_increasing_ids_and_pushes_list() {
    let (_s, mut core) = memory_core();
    let (a, actions) = core.enlist("a:1", BOTH, GIB, "", 0, None).unwrap();
    assert_eq!(a, ServerId(1));
    assert_eq!(actions, vec![Action::PushServerList]);
    let (b, _) = core.enlist("b:1", SERVICE_BACKUP, 0, "", 0, None).unwrap();
    assert_eq!(b, ServerId(2));
    let entry = core.server(b).unwrap();
    assert!(entry.is_backup() && !entry.is_master() && entry.is_up());
    assert!(matches!(
        core.enlist("", BOTH, 0, "", 0, None),
        Err(CoordinatorError::BadAddress { .. })
    ));
}

#[test]
fn enlist_keeps_failure_domain_and_read_speed_across_restarts() {
    let storage = Arc::new(MemoryStorage::new());
    let mut core = CoordinatorCore::open(storage.clone()).unwrap();
    let (a, _) = core.enlist("a:1", BOTH, GIB, "rack-1", 180, None).unwrap();
    let (b, _) = core
        .enlist("b:1", SERVICE_MASTER, GIB, "", 0, None)
        .unwrap();
    let longest = "r".repeat(MAX_FAILURE_DOMAIN_BYTES);
    let (c, _) = core.enlist("c:1", BOTH, GIB, &longest, 1, None).unwrap();
    for bad in [
        "r".repeat(MAX_FAILURE_DOMAIN_BYTES + 1),
        "rack 1".into(),
        "r\n".into(),
    ] {
        assert!(matches!(
            core.enlist("d:1", BOTH, GIB, &bad, 1, None),
            Err(CoordinatorError::BadFailureDomain { .. })
        ));
    }
    drop(core);
    let core = CoordinatorCore::open(storage).unwrap();
    let (_, list) = core.server_list();
    let got: Vec<_> = list
        .iter()
        .map(|e| (e.id, e.failure_domain.as_str(), e.backup_read_mbps))
        .collect();
    assert_eq!(
        got,
        vec![(a, "rack-1", 180), (b, "", 0), (c, longest.as_str(), 1)]
    );
}

#[test]
fn state_without_failure_domains_still_loads() {
    let storage = Arc::new(MemoryStorage::new());
    let mut core = CoordinatorCore::open(storage.clone()).unwrap();
    core.enlist("a:1", BOTH, GIB, "rack-1", 180, None).unwrap();
    drop(core);
    // A document written before the fields existed: strip them.
    let mut doc: serde_json::Value =
        serde_json::from_slice(&storage.get(STATE_KEY).unwrap().unwrap()).unwrap();
    let servers = doc["state"]["servers"]["servers"].as_array_mut().unwrap();
    for server in servers.iter_mut() {
        let server = server.as_object_mut().unwrap();
        assert!(server.remove("failure_domain").is_some());
        assert!(server.remove("backup_read_mbps").is_some());
    }
    storage
        .put(STATE_KEY, &serde_json::to_vec(&doc).unwrap())
        .unwrap();
    let core = CoordinatorCore::open(storage).unwrap();
    let entry = core.server(ServerId(1)).unwrap();
    assert_eq!(entry.address, "a:1");
    assert_eq!(
        (entry.failure_domain.as_str(), entry.backup_read_mbps),
        ("", 0)
    );
}

#[test]
fn enlist_replacement_crashes_the_old_id_for_recovery() {
    let (_s, mut core) = memory_core();
    let ids = with_masters(&mut core, 2);
    core.create_table("t", 4).unwrap();
    let before = tablets_of(&core, "t");
    let old = ids[0];

    // The restarted process names its old identity and has a new address: the
    // old id is crashed and keeps its tablets until crash recovery moves them. The
    // new process is the next incarnation of the same index.
    let (new, actions) = core.enlist("host1:2", BOTH, GIB, "", 0, Some(old)).unwrap();
    assert_eq!(new, ServerId(1 << 32 | 1));
    assert_eq!((new.index(), new.incarnation()), (old.index(), 1));
    assert_eq!(new.to_string(), "server 1.1");
    assert_eq!(core.server(old).unwrap().status, ServerStatus::Crashed);
    assert_eq!(tablets_of(&core, "t"), before);
    assert_eq!(actions, vec![Action::PushServerList]);
}

/// A restart on a directory keeps the server's index: each restart is the next
/// incarnation, also once the old run was recovered and removed; a stale
/// incarnation (an old copy of a directory) gets a new index instead, so one index
/// is never claimed twice.
#[test]
fn enlist_restart_keeps_the_index_with_a_new_incarnation() {
    let (_s, mut core) = memory_core();
    let ids = with_masters(&mut core, 2);
    let first = ids[0];
    let (second, _) = core
        .enlist("host1:1", BOTH, GIB, "", 0, Some(first))
        .unwrap();
    assert_eq!((second.index(), second.incarnation()), (1, 1));
    assert_eq!(core.server(first).unwrap().status, ServerStatus::Removed);
    // The previous run is already removed (recovered while the server was down).
    core.remove_server(second).unwrap();
    let (third, _) = core
        .enlist("host1:1", BOTH, GIB, "", 0, Some(second))
        .unwrap();
    assert_eq!((third.index(), third.incarnation()), (1, 2));
    // A stale incarnation names `first`: not the newest of index 1.
    let (stale, _) = core
        .enlist("host7:1", BOTH, GIB, "", 0, Some(first))
        .unwrap();
    assert_eq!((stale.index(), stale.incarnation()), (3, 0));
    assert_eq!(core.server(third).unwrap().status, ServerStatus::Up);
    // The list stays sorted by id, and the next new index is 4.
    let (_, list) = core.server_list();
    assert!(list.windows(2).all(|w| w[0].id < w[1].id), "{list:?}");
    let (fresh, _) = core.enlist("host8:1", BOTH, GIB, "", 0, None).unwrap();
    assert_eq!(fresh, ServerId(4));
}

/// `Leave` (a clean stop) ends the server's UP state at once — crashed if it owns
/// tablets, so recovery starts now, removed if not — and remembers the stop was
/// clean; it is idempotent and leaves servers that are no longer UP alone.
#[test]
fn server_left_crashes_an_owner_cleanly_and_is_idempotent() {
    let (_s, mut core) = memory_core();
    let ids = with_masters(&mut core, 2);
    core.create_table("t", 1).unwrap();
    let owner = tablets_of(&core, "t")[0].server_id;
    let other = *ids.iter().find(|&&i| i != owner).unwrap();
    assert_eq!(
        core.server_left(owner).unwrap(),
        vec![Action::PushServerList]
    );
    let entry = core.server(owner).unwrap();
    assert_eq!(entry.status, ServerStatus::Crashed);
    assert!(entry.stopped_cleanly);
    assert_eq!(
        tablets_of(&core, "t")[0].server_id,
        owner,
        "recovery moves it"
    );
    assert!(core.server_left(owner).unwrap().is_empty(), "idempotent");

    assert_eq!(
        core.server_left(other).unwrap(),
        vec![Action::PushServerList]
    );
    assert_eq!(core.server(other).unwrap().status, ServerStatus::Removed);

    // A server the detector declared crashed first stays a crash.
    let (third, _) = core.enlist("host3:1", BOTH, GIB, "", 0, None).unwrap();
    core.server_crashed(third).unwrap();
    assert!(core.server_left(third).unwrap().is_empty());
    assert!(!core.server(third).unwrap().stopped_cleanly);
    assert!(matches!(
        core.server_left(ServerId(99)),
        Err(CoordinatorError::UnknownServer(_))
    ));
}

#[test]
fn enlist_same_address_replaces_up_server() {
    let (_s, mut core) = memory_core();
    let ids = with_masters(&mut core, 2);
    core.create_table("t", 2).unwrap();
    let (_new, actions) = core.enlist("host2:1", BOTH, GIB, "", 0, None).unwrap();
    // The old process at that address is gone: crashed, its tablet awaits recovery.
    assert_eq!(core.server(ids[1]).unwrap().status, ServerStatus::Crashed);
    assert_eq!(core.server(ids[0]).unwrap().status, ServerStatus::Up);
    let owners: Vec<_> = tablets_of(&core, "t").iter().map(|t| t.server_id).collect();
    assert_eq!(owners, vec![ids[0], ids[1]]);
    assert_eq!(actions, vec![Action::PushServerList]);
    // An unknown `replaces` is ignored.
    let (_, actions) = core
        .enlist("host9:1", BOTH, GIB, "", 0, Some(ServerId(99)))
        .unwrap();
    assert_eq!(actions, vec![Action::PushServerList]);
}

#[test]
fn enlist_replacing_a_server_without_tablets_removes_it() {
    let (_s, mut core) = memory_core();
    let ids = with_masters(&mut core, 2);
    let (_new, actions) = core
        .enlist("host1:1", SERVICE_BACKUP, 0, "", 0, None)
        .unwrap();
    assert_eq!(core.server(ids[0]).unwrap().status, ServerStatus::Removed);
    assert_eq!(actions, vec![Action::PushServerList]);
}

#[test]
fn recovered_partition_moves_ranges_splitting_tablets_and_finishes() {
    let (_s, mut core) = memory_core();
    let ids = with_masters(&mut core, 3);
    core.create_table("t", 3).unwrap();
    let crashed = ids[0];
    let mine = tablets_of(&core, "t")
        .into_iter()
        .find(|t| t.server_id == crashed)
        .unwrap();
    core.server_crashed(crashed).unwrap();
    // Two partitions, each half of the crashed tablet.
    let mid = mine.start_hash + (mine.end_hash - mine.start_hash) / 2;
    let lower = [(mine.table_id, mine.start_hash, mid)];
    let upper = [(mine.table_id, mid + 1, mine.end_hash)];
    let actions = core.recovered_partition(crashed, &lower, ids[1]).unwrap();
    assert_eq!(
        actions,
        vec![Action::TakeTablet {
            server_id: ids[1],
            address: core.server(ids[1]).unwrap().address.clone(),
            table_id: mine.table_id,
            start_hash: mine.start_hash,
            end_hash: mid,
        }]
    );
    assert!(
        core.finish_recovery(crashed).unwrap().is_empty(),
        "still owns the upper half"
    );
    // Idempotent.
    core.recovered_partition(crashed, &lower, ids[1]).unwrap();
    // A range someone else holds is a conflict, and changes nothing.
    assert!(core.recovered_partition(crashed, &lower, ids[2]).is_err());
    core.recovered_partition(crashed, &upper, ids[2]).unwrap();
    let after = tablets_of(&core, "t");
    assert_covers_hash_space(&after);
    assert_eq!(after.len(), 4, "the crashed tablet was split in two");
    assert!(after.iter().all(|t| t.server_id != crashed));
    assert_eq!(
        core.finish_recovery(crashed).unwrap(),
        vec![Action::PushServerList]
    );
    assert_eq!(core.server(crashed).unwrap().status, ServerStatus::Removed);
}

#[test]
fn remove_server_moves_tablets_or_waits_for_a_master() {
    let (_s, mut core) = memory_core();
    let ids = with_masters(&mut core, 2);
    core.create_table("t", 4).unwrap();
    let actions = core.remove_server(ids[0]).unwrap();
    assert_eq!(actions.len(), 3, "two TakeTablets and the push");
    assert!(tablets_of(&core, "t").iter().all(|t| t.server_id == ids[1]));
    assert!(core.remove_server(ids[0]).unwrap().is_empty(), "idempotent");

    // With no master left, the tablets wait for the next master to enlist.
    core.remove_server(ids[1]).unwrap();
    assert!(tablets_of(&core, "t").iter().all(|t| t.server_id == ids[1]));
    let (new, actions) = core.enlist("fresh:1", BOTH, GIB, "", 0, None).unwrap();
    assert!(tablets_of(&core, "t").iter().all(|t| t.server_id == new));
    assert_eq!(actions.len(), 5);
    assert!(matches!(
        core.remove_server(ServerId(42)),
        Err(CoordinatorError::UnknownServer(ServerId(42)))
    ));
}

#[test]
fn split_tablet_splits_on_same_server() {
    let (_s, mut core) = memory_core();
    with_masters(&mut core, 2);
    let (table_id, _) = core.create_table("t", 2).unwrap();
    let before = tablets_of(&core, "t");
    let split = 1000;
    let actions = core.split_tablet("t", split).unwrap();
    assert_eq!(
        actions,
        vec![Action::SplitTablet {
            server_id: before[0].server_id,
            address: core.server(before[0].server_id).unwrap().address.clone(),
            table_id,
            split_hash: split,
        }]
    );
    let after = tablets_of(&core, "t");
    assert_eq!(after.len(), 3);
    assert_covers_hash_space(&after);
    assert_eq!((after[0].start_hash, after[0].end_hash), (0, split - 1));
    assert_eq!(
        (after[1].start_hash, after[1].end_hash),
        (split, before[0].end_hash)
    );
    assert_eq!(after[0].server_id, after[1].server_id);
    assert_eq!(after[2], before[1]);

    // Splitting at an existing boundary (including 0) changes nothing.
    let seq = core.sequence();
    assert!(core.split_tablet("t", split).unwrap().is_empty());
    assert!(core.split_tablet("t", 0).unwrap().is_empty());
    assert!(core
        .split_tablet("t", before[1].start_hash)
        .unwrap()
        .is_empty());
    assert_eq!(core.sequence(), seq);
    // The last hash is a valid split point.
    core.split_tablet("t", u64::MAX).unwrap();
    let last = *tablets_of(&core, "t").last().unwrap();
    assert_eq!((last.start_hash, last.end_hash), (u64::MAX, u64::MAX));
    assert!(matches!(
        core.split_tablet("nope", 5),
        Err(CoordinatorError::TableDoesntExist(_))
    ));
}

#[test]
fn server_crashed_marks_crashed_and_keeps_tablets() {
    let (_s, mut core) = memory_core();
    let ids = with_masters(&mut core, 2);
    core.create_table("t", 2).unwrap();
    let tablets = tablets_of(&core, "t");
    assert_eq!(
        core.server_crashed(ids[0]).unwrap(),
        vec![Action::PushServerList]
    );
    assert_eq!(core.server(ids[0]).unwrap().status, ServerStatus::Crashed);
    assert_eq!(tablets_of(&core, "t"), tablets);
    assert!(
        core.server_crashed(ids[0]).unwrap().is_empty(),
        "idempotent"
    );
    assert!(matches!(
        core.server_crashed(ServerId(7)),
        Err(CoordinatorError::UnknownServer(_))
    ));
    // A crashed master gets no new tablets.
    core.create_table("u", 3).unwrap();
    assert!(tablets_of(&core, "u").iter().all(|t| t.server_id == ids[1]));
}

#[test]
fn versions_increase_on_each_change() {
    let (_s, mut core) = memory_core();
    let versions = |c: &CoordinatorCore| (c.server_list().0, c.tablet_map().0, c.sequence());
    assert_eq!(versions(&core), (0, 0, 0));
    let ids = with_masters(&mut core, 2);
    assert_eq!(versions(&core), (2, 0, 2));
    core.create_table("t", 2).unwrap();
    assert_eq!(versions(&core), (2, 1, 3));
    core.create_table("t", 2).unwrap();
    assert_eq!(versions(&core), (2, 1, 3), "no change, no bump");
    core.split_tablet("t", 77).unwrap();
    assert_eq!(versions(&core), (2, 2, 4));
    core.server_crashed(ids[0]).unwrap();
    assert_eq!(versions(&core), (3, 2, 5));
    core.server_crashed(ids[0]).unwrap();
    assert_eq!(versions(&core), (3, 2, 5));
    // Removal moves the crashed server's tablets: both lists change.
    core.remove_server(ids[0]).unwrap();
    assert_eq!(versions(&core), (4, 3, 6));
    core.drop_table("t").unwrap();
    assert_eq!(versions(&core), (4, 4, 7));
    core.enlist("new:1", BOTH, GIB, "", 0, None).unwrap();
    assert_eq!(versions(&core), (5, 4, 8), "no tablets moved");
}

#[test]
fn open_restores_identical_state_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (state, sequence, server_list, tablet_map) = {
        let storage = Arc::new(FileStorage::open(dir.path()).unwrap());
        let mut core = CoordinatorCore::open(storage).unwrap();
        let ids = with_masters(&mut core, 3);
        core.create_table("users", 6).unwrap();
        core.create_table("orders", 2).unwrap();
        core.create_table("gone", 1).unwrap();
        core.split_tablet("users", 12345).unwrap();
        core.drop_table("gone").unwrap();
        core.server_crashed(ids[2]).unwrap();
        core.enlist("host1:1", BOTH, GIB, "", 0, None).unwrap(); // replaces server 1
        core.remove_server(ids[1]).unwrap();
        // A restart of server 3 on its directory: incarnation 1 of index 3, which
        // sorts after index 4.
        let (restarted, _) = core
            .enlist("host3:1", BOTH, GIB, "", 0, Some(ids[2]))
            .unwrap();
        assert_eq!(restarted, ServerId(1 << 32 | 3));
        core.server_left(restarted).unwrap();
        (
            core.state().clone(),
            core.sequence(),
            core.server_list(),
            core.tablet_map(),
        )
        // core and storage drop here, releasing the directory lock.
    };
    let storage = Arc::new(FileStorage::open(dir.path()).unwrap());
    let mut core = CoordinatorCore::open(storage).unwrap();
    assert_eq!(core.state(), &state);
    assert_eq!(core.sequence(), sequence);
    assert_eq!(core.server_list(), server_list);
    assert_eq!(core.tablet_map(), tablet_map);
    assert_eq!(core.get_table_id("users").unwrap(), 1);
    assert_eq!(core.get_table_id("orders").unwrap(), 2);

    // Ids are never reused after a restart; incarnations go on.
    let (server, _) = core.enlist("host9:1", BOTH, GIB, "", 0, None).unwrap();
    assert_eq!(server, ServerId(5));
    let restarted = ServerId(1 << 32 | 3);
    assert!(core.server(restarted).unwrap().stopped_cleanly);
    let (again, _) = core
        .enlist("host3:1", BOTH, GIB, "", 0, Some(restarted))
        .unwrap();
    assert_eq!(again, ServerId(2 << 32 | 3));
    let (table, _) = core.create_table("gone", 1).unwrap();
    assert_eq!(table, 4);
    assert_eq!(core.sequence(), sequence + 3);
}

#[test]
fn reissue_actions_cover_every_tablet_of_up_servers() {
    let storage = Arc::new(MemoryStorage::new());
    let mut core = CoordinatorCore::open(storage.clone()).unwrap();
    let ids = with_masters(&mut core, 2);
    let (_, created) = core.create_table("t", 4).unwrap();
    drop(core);
    let core = CoordinatorCore::open(storage).unwrap();
    let reissued = core.reissue_actions();
    assert_eq!(reissued[..4], created[..]);
    assert_eq!(reissued[4], Action::PushServerList);

    let mut core = core;
    core.server_crashed(ids[0]).unwrap();
    let takes = core
        .reissue_actions()
        .iter()
        .filter(|a| matches!(a, Action::TakeTablet { .. }))
        .count();
    assert_eq!(takes, 2, "a crashed server's tablets await recovery");
}

#[test]
fn failing_put_leaves_state_unchanged() {
    let storage = Arc::new(FailingStorage {
        inner: MemoryStorage::new(),
        fail: AtomicBool::new(false),
    });
    let mut core = CoordinatorCore::open(storage.clone()).unwrap();
    let ids = with_masters(&mut core, 2);
    core.create_table("t", 2).unwrap();
    let before = core.state().clone();
    let seq = core.sequence();

    storage.fail.store(true, Ordering::SeqCst);
    let is_storage = |e: CoordinatorError| matches!(e, CoordinatorError::Storage(_));
    assert!(is_storage(core.create_table("u", 3).unwrap_err()));
    assert!(is_storage(
        core.enlist("x:1", BOTH, GIB, "", 0, Some(ids[0]))
            .unwrap_err()
    ));
    assert!(is_storage(core.drop_table("t").unwrap_err()));
    assert!(is_storage(core.split_tablet("t", 9).unwrap_err()));
    assert!(is_storage(core.server_crashed(ids[1]).unwrap_err()));
    assert!(is_storage(core.remove_server(ids[1]).unwrap_err()));
    assert_eq!(core.state(), &before);
    assert_eq!(core.sequence(), seq);
    // No-ops need no write, so they still succeed.
    assert_eq!(core.create_table("t", 2).unwrap().0, 1);

    storage.fail.store(false, Ordering::SeqCst);
    let (u, _) = core.create_table("u", 3).unwrap();
    assert_eq!(u, 2, "the failed attempt consumed no id");
    let reopened = CoordinatorCore::open(storage).unwrap();
    assert_eq!(reopened.state(), core.state());
}

#[test]
fn open_corrupt_state_is_an_error() {
    let storage = Arc::new(MemoryStorage::new());
    let mut core = CoordinatorCore::open(storage.clone()).unwrap();
    with_masters(&mut core, 1);
    core.create_table("t", 1).unwrap();
    let good = String::from_utf8(storage.get(STATE_KEY).unwrap().unwrap()).unwrap();
    let refused = |text: &str| {
        storage.put(STATE_KEY, text.as_bytes()).unwrap();
        matches!(
            CoordinatorCore::open(storage.clone()),
            Err(CoordinatorError::Storage(StorageError::Corrupt { .. }))
        )
    };

    // Not JSON (a torn write through a storage without atomic replace).
    assert!(refused(&good[..good.len() / 2]));
    // Parses, but a tablet names a server that never existed.
    let bad_owner = good.replace("\"server_id\":1", "\"server_id\":9");
    assert_ne!(bad_owner, good);
    assert!(refused(&bad_owner));
    // An unknown format version.
    let future = good.replace("\"format\":1", "\"format\":2");
    assert_ne!(future, good);
    assert!(refused(&future));

    storage.put(STATE_KEY, good.as_bytes()).unwrap();
    assert_eq!(
        CoordinatorCore::open(storage).unwrap().state(),
        core.state()
    );
}

//! Completion records move with their objects in a migration (RIFL §4.3, K§2.3):
//! the source lists the records of the hashes a pull covers, the target installs
//! them with the pulled objects, and a retry of an RPC the source carried out
//! gets its first answer on the target instead of running again. The target's
//! gate holds an exactly-once RPC until its key's records are there.

use ramstore_log::CleanKind;
use ramstore_master::migration::{ClientOp, Gate, IncomingMigration, PulledObject};
use ramstore_master::{
    key_hash, CleanerMode, MovedRecord, ObjectStore, OnceUpdate, RejectRules, RpcOutcome,
    StoreConfig, WriteError,
};
use ramstore_wire::RpcId;

const TABLE: u64 = 1;

fn empty_store() -> ObjectStore {
    let mut cfg = StoreConfig::new(32 << 20);
    cfg.segment_bytes = 128 * 1024;
    cfg.cleaner = CleanerMode::Manual;
    ObjectStore::new(cfg).expect("store")
}

/// A source owning the whole table.
fn source() -> ObjectStore {
    let s = empty_store();
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    s
}

fn id(lease_id: u64, seq: u64, first_incomplete: u64) -> RpcId {
    RpcId {
        lease_id,
        seq,
        first_incomplete,
    }
}

/// Fences the source and moves the whole table to a new target, carrying the
/// objects and the completion records of every partition as the target's
/// pullers would; returns the target and its migration (still migrating in).
fn migrate(source: &ObjectStore, safe_version: u64) -> (ObjectStore, IncomingMigration) {
    source
        .prepare_migration(TABLE, 0, u64::MAX)
        .expect("fenced");
    let target = empty_store();
    target
        .add_migrating_tablet(TABLE, 0, u64::MAX, safe_version)
        .expect("target owns it");
    let m = IncomingMigration::new(7, (TABLE, 0, u64::MAX), 2, "source".into(), safe_version);
    for (index, p) in m.partitions().into_iter().enumerate() {
        let mut objects = Vec::new();
        let next = source
            .pull(TABLE, p.lo, p.hi, usize::MAX, &mut objects)
            .expect("pulled");
        assert_eq!(next, None, "one batch holds the partition");
        let mut records = Vec::new();
        source.pull_rpc_results(TABLE, p.lo, p.hi, &mut records);
        let pulled = objects.iter().map(|o| PulledObject {
            key: &o.key,
            value: &o.value,
            version: o.version,
        });
        m.apply_pull(&target, index, pulled, &records, None)
            .expect("applied");
    }
    (target, m)
}

fn read(s: &ObjectStore, key: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    s.read(TABLE, key, &mut v).expect("readable");
    v
}

#[test]
fn pull_rpc_results_lists_the_records_of_the_range_only() {
    let s = source();
    let rules = RejectRules::default();
    s.write_once(TABLE, b"a", b"1", &rules, id(1, 1, 1))
        .expect("written");
    s.increment_i64_once(TABLE, b"b", 2, &rules, id(2, 5, 5))
        .expect("incremented");
    let (ha, hb) = (key_hash(b"a"), key_hash(b"b"));
    let mut all = Vec::new();
    s.pull_rpc_results(TABLE, 0, u64::MAX, &mut all);
    all.sort_by_key(|r| r.lease_id);
    assert_eq!(
        all,
        vec![
            MovedRecord {
                lease_id: 1,
                seq: 1,
                table_id: TABLE,
                key_hash: ha,
                outcome: RpcOutcome::Write { version: 1 },
            },
            MovedRecord {
                lease_id: 2,
                seq: 5,
                table_id: TABLE,
                key_hash: hb,
                outcome: RpcOutcome::IncrementI64 {
                    value: 2,
                    version: 1
                },
            },
        ]
    );
    let mut only_a = Vec::new();
    s.pull_rpc_results(TABLE, ha, ha, &mut only_a);
    assert_eq!(only_a.len(), 1);
    assert_eq!(only_a[0].key_hash, ha);
    let mut other_table = Vec::new();
    s.pull_rpc_results(TABLE + 1, 0, u64::MAX, &mut other_table);
    assert!(other_table.is_empty());
}

#[test]
fn pull_rpc_results_leaves_out_acknowledged_records() {
    let s = source();
    let rules = RejectRules::default();
    s.write_once(TABLE, b"a", b"1", &rules, id(1, 1, 1))
        .expect("written");
    // The client's next RPC acknowledges the first: its record is gone.
    s.write_once(TABLE, b"z", b"2", &rules, id(1, 2, 2))
        .expect("written");
    let mut all = Vec::new();
    s.pull_rpc_results(TABLE, 0, u64::MAX, &mut all);
    assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![2]);
}

#[test]
fn update_once_arrived_retried_after_migration_answers_the_first_result() {
    let s = source();
    let rules = RejectRules::default();
    let first = s
        .increment_i64_once(TABLE, b"counter", 5, &rules, id(3, 1, 1))
        .expect("incremented on the source");
    let (t, m) = migrate(&s, 100);
    assert_eq!(m.gate(b"counter", ClientOp::ExactlyOnce), Gate::Go);
    // The client's answer was lost; it retries on the new owner.
    let retried = t
        .update_once_arrived(
            (TABLE, b"counter"),
            &rules,
            OnceUpdate::IncrementI64(5),
            id(3, 1, 1),
        )
        .expect("answered");
    assert_eq!(retried, first, "the first answer, not a second increment");
    // A new RPC of the same client runs.
    let second = t
        .update_once_arrived(
            (TABLE, b"counter"),
            &rules,
            OnceUpdate::IncrementI64(5),
            id(3, 2, 1),
        )
        .expect("incremented on the target");
    assert!(matches!(second, RpcOutcome::IncrementI64 { value: 10, .. }));
    t.finish_migrating_tablet(TABLE, 0, u64::MAX)
        .expect("finished");
    assert_eq!(
        read(&t, b"counter"),
        b"10",
        "incremented twice, not three times"
    );
    assert_eq!(
        t.increment_i64_once(TABLE, b"counter", 5, &rules, id(3, 1, 1)),
        Ok(first),
        "still answered once the tablet is normal"
    );
}

#[test]
fn install_moved_record_of_a_remove_answers_the_first_result() {
    let s = source();
    let rules = RejectRules::default();
    s.write(TABLE, b"k", b"v", &rules).expect("written");
    let first = s
        .remove_once(TABLE, b"k", &rules, id(4, 1, 1))
        .expect("removed");
    assert!(matches!(first, RpcOutcome::Remove { existed: true, .. }));
    let (t, _m) = migrate(&s, 100);
    t.finish_migrating_tablet(TABLE, 0, u64::MAX)
        .expect("finished");
    assert_eq!(
        t.remove_once(TABLE, b"k", &rules, id(4, 1, 1)),
        Ok(first),
        "a retry still says the object existed"
    );
}

#[test]
fn install_moved_record_is_dropped_when_the_client_acknowledged_it() {
    let s = source();
    let rules = RejectRules::default();
    s.write_once(TABLE, b"a", b"1", &rules, id(5, 1, 1))
        .expect("written");
    s.prepare_migration(TABLE, 0, u64::MAX).expect("fenced");
    let mut records = Vec::new();
    s.pull_rpc_results(TABLE, 0, u64::MAX, &mut records);
    assert_eq!(records.len(), 1);
    let t = empty_store();
    t.add_tablet(TABLE + 1, 0, u64::MAX).expect("other table");
    // The client's later RPC, on another tablet of the target, acknowledged it.
    t.write_once(TABLE + 1, b"x", b"1", &rules, id(5, 2, 2))
        .expect("written");
    t.add_migrating_tablet(TABLE, 0, u64::MAX, 100)
        .expect("owned");
    let m = IncomingMigration::new(8, (TABLE, 0, u64::MAX), 2, "source".into(), 100);
    let before = t.rpc_records();
    for (index, p) in m.partitions().into_iter().enumerate() {
        let mine: Vec<_> = records
            .iter()
            .filter(|r| (p.lo..=p.hi).contains(&r.key_hash))
            .copied()
            .collect();
        m.apply_pull(&t, index, [], &mine, None).expect("applied");
    }
    assert_eq!(
        t.rpc_records(),
        before,
        "an acknowledged record is not kept"
    );
    assert_eq!(
        t.update_once_arrived((TABLE, b"a"), &rules, OnceUpdate::Write(b"1"), id(5, 1, 2)),
        Err(WriteError::StaleRpc)
    );
}

#[test]
fn gate_exactly_once_waits_for_the_records_of_a_key_a_client_wrote() {
    let s = source();
    let rules = RejectRules::default();
    let first = s
        .write_once(TABLE, b"k", b"v1", &rules, id(6, 1, 1))
        .expect("written");
    s.prepare_migration(TABLE, 0, u64::MAX).expect("fenced");
    let t = empty_store();
    t.add_migrating_tablet(TABLE, 0, u64::MAX, 100)
        .expect("owned");
    let m = IncomingMigration::new(9, (TABLE, 0, u64::MAX), 2, "source".into(), 100);
    // An at-least-once blind write of another client settles the key...
    assert_eq!(m.gate(b"k", ClientOp::BlindWrite), Gate::Go);
    t.write_arrived(TABLE, b"k", b"other", &rules)
        .expect("written");
    m.settle(b"k");
    assert_eq!(m.gate(b"k", ClientOp::ReadsRecord), Gate::Go);
    // ...but brings no completion record: the retry waits for a PriorityPull.
    assert_eq!(m.gate(b"k", ClientOp::ExactlyOnce), Gate::Wait(true));
    assert_eq!(m.gate(b"k", ClientOp::ExactlyOnce), Gate::Wait(false));
    let keys = m.take_pending(10);
    assert_eq!(keys, vec![b"k".to_vec()]);
    let mut records = Vec::new();
    s.pull_rpc_results(TABLE, key_hash(b"k"), key_hash(b"k"), &mut records);
    let pulled = s.pull_key(TABLE, b"k").expect("pulled").expect("exists");
    let objects = [PulledObject {
        key: &pulled.key,
        value: &pulled.value,
        version: pulled.version,
    }];
    m.apply_priority(&t, &keys, objects, &records)
        .expect("applied");
    assert_eq!(m.gate(b"k", ClientOp::ExactlyOnce), Gate::Go);
    assert_eq!(
        t.update_once_arrived((TABLE, b"k"), &rules, OnceUpdate::Write(b"v1"), id(6, 1, 1)),
        Ok(first),
        "the retry is answered, not applied over the newer write"
    );
    let mut v = Vec::new();
    t.read_with_arrived(TABLE, b"k", |o| o.copy_value(&mut v))
        .expect("readable");
    assert_eq!(v, b"other");
}

#[test]
fn gate_exactly_once_waits_until_the_cursor_passes_without_priority_pulls() {
    let s = source();
    s.prepare_migration(TABLE, 0, u64::MAX).expect("fenced");
    let t = empty_store();
    t.add_migrating_tablet(TABLE, 0, u64::MAX, 100)
        .expect("owned");
    let m = IncomingMigration::new(10, (TABLE, 0, u64::MAX), 2, "source".into(), 100)
        .without_priority_pulls();
    assert_eq!(m.gate(b"k", ClientOp::ExactlyOnce), Gate::Wait(false));
    for index in 0..m.partitions().len() {
        m.apply_pull(&t, index, [], &[], None).expect("applied");
    }
    assert_eq!(m.gate(b"k", ClientOp::ExactlyOnce), Gate::Go);
}

#[test]
fn install_moved_record_survives_the_side_log_commit_and_cleaning() {
    let s = source();
    let rules = RejectRules::default();
    let first = s
        .increment_i64_once(TABLE, b"c", 1, &rules, id(11, 1, 1))
        .expect("incremented");
    let (t, m) = migrate(&s, 100);
    m.commit_side_logs(&t);
    t.finish_migrating_tablet(TABLE, 0, u64::MAX)
        .expect("finished");
    // The pulled object dies, so its side segment holds little but the record;
    // then fill and clean: the record must be moved, not dropped.
    t.write(TABLE, b"c", b"100", &rules).expect("overwritten");
    let value = vec![7u8; 1000];
    for round in 0..6u64 {
        for i in 0..2000u64 {
            t.write(TABLE, &i.to_le_bytes(), &value, &rules)
                .unwrap_or_else(|e| panic!("round {round} write {i}: {e}"));
        }
    }
    t.clean_now(Some(CleanKind::Compaction));
    for _ in 0..50 {
        match t.clean_now(Some(CleanKind::Combined)) {
            Some((_, pass)) if pass.made_progress => {}
            _ => break,
        }
    }
    let log = t.stats().log;
    assert!(log.segments_cleaned > 0, "{log:?}");
    assert_eq!(
        t.increment_i64_once(TABLE, b"c", 1, &rules, id(11, 1, 1)),
        Ok(first)
    );
    assert_eq!(read(&t, b"c"), b"100", "the retry did not increment");
}

/// Regression (sim seeds 71 and 74 with `--migrations`): a delete on a tablet
/// migrating in writes a held tombstone (K§2.3.4), and wrote no completion
/// record with it, so a retry of an exactly-once delete ran again and answered
/// that the object did not exist.
#[test]
fn update_once_arrived_remove_keeps_its_record_on_a_migrating_in_tablet() {
    let s = source();
    let rules = RejectRules::default();
    s.write(TABLE, b"k", b"v", &rules).expect("written");
    let (t, m) = migrate(&s, 100);
    assert_eq!(m.gate(b"k", ClientOp::ExactlyOnce), Gate::Go);
    let first = t
        .update_once_arrived((TABLE, b"k"), &rules, OnceUpdate::Remove, id(12, 1, 1))
        .expect("removed");
    assert!(matches!(first, RpcOutcome::Remove { existed: true, .. }));
    assert_eq!(
        t.update_once_arrived((TABLE, b"k"), &rules, OnceUpdate::Remove, id(12, 1, 1)),
        Ok(first),
        "the retry is answered from the record, not run again"
    );
}

//! Exactly-once object operations (RIFL §4; R§10.3): a retried RPC gets its first
//! answer without executing again, acknowledged and expired records are
//! forgotten, records survive the cleaner and are rebuilt by replay.

use ramstore_log::entry::encode_rpc_result;
use ramstore_log::CleanKind;
use ramstore_master::rifl::MAX_OUTCOME_BYTES;
use ramstore_master::{
    key_hash, CleanerMode, ObjectStore, RejectRules, RpcOutcome, StoreConfig, WriteError,
};
use ramstore_wire::RpcId;

const TABLE: u64 = 1;

fn store(segment_bytes: usize) -> ObjectStore {
    let mut cfg = StoreConfig::new(64 << 20);
    cfg.segment_bytes = segment_bytes;
    cfg.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(cfg).expect("store");
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

fn counter(s: &ObjectStore, key: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    s.read(TABLE, key, &mut v).expect("readable");
    v
}

#[test]
fn increment_i64_once_retried_answers_first_result_and_increments_once() {
    let s = store(8 << 20);
    let rules = RejectRules::default();
    let first = s
        .increment_i64_once(TABLE, b"c", 5, &rules, id(1, 1, 1))
        .expect("first");
    assert_eq!(
        first,
        RpcOutcome::IncrementI64 {
            value: 5,
            version: 1
        }
    );
    for _ in 0..3 {
        let again = s
            .increment_i64_once(TABLE, b"c", 5, &rules, id(1, 1, 1))
            .expect("retry");
        assert_eq!(again, first, "a retry answers the first result");
    }
    assert_eq!(counter(&s, b"c"), b"5", "executed once");
    // The next sequence number is a new RPC.
    let second = s
        .increment_i64_once(TABLE, b"c", 5, &rules, id(1, 2, 1))
        .expect("second");
    assert!(matches!(second, RpcOutcome::IncrementI64 { value: 10, .. }));
    assert_eq!(s.rpc_records(), 2);
}

#[test]
fn write_once_below_acknowledged_window_is_stale() {
    let s = store(8 << 20);
    let rules = RejectRules::default();
    s.write_once(TABLE, b"k", b"a", &rules, id(3, 1, 1))
        .expect("first");
    s.write_once(TABLE, b"k", b"b", &rules, id(3, 2, 2))
        .expect("second acknowledges the first");
    assert_eq!(s.rpc_records(), 1, "the acknowledged record is forgotten");
    assert!(matches!(
        s.write_once(TABLE, b"k", b"a", &rules, id(3, 1, 1)),
        Err(WriteError::StaleRpc)
    ));
    assert_eq!(counter(&s, b"k"), b"b", "the stale retry did not execute");
}

#[test]
fn write_once_refused_by_rules_leaves_no_record_and_runs_again() {
    let s = store(8 << 20);
    let must_exist = RejectRules {
        doesnt_exist: true,
        ..RejectRules::default()
    };
    assert!(matches!(
        s.write_once(TABLE, b"k", b"v", &must_exist, id(4, 1, 1)),
        Err(WriteError::ObjectDoesntExist)
    ));
    assert_eq!(s.rpc_records(), 0);
    s.write(TABLE, b"k", b"old", &RejectRules::default())
        .expect("plain write");
    // Took no effect the first time, so a retry runs now (still exactly once).
    assert!(matches!(
        s.write_once(TABLE, b"k", b"v", &must_exist, id(4, 1, 1)),
        Ok(RpcOutcome::Write { .. })
    ));
    assert_eq!(counter(&s, b"k"), b"v");
}

#[test]
fn remove_once_retried_answers_that_the_object_existed() {
    let s = store(8 << 20);
    let rules = RejectRules::default();
    let v = s.write(TABLE, b"k", b"v", &rules).expect("write");
    let first = s
        .remove_once(TABLE, b"k", &rules, id(5, 1, 1))
        .expect("remove");
    assert_eq!(
        first,
        RpcOutcome::Remove {
            existed: true,
            version: v
        }
    );
    assert_eq!(
        s.remove_once(TABLE, b"k", &rules, id(5, 1, 1)),
        Ok(first),
        "the retry says it existed, as the first answer did"
    );
}

#[test]
fn expire_client_lease_forgets_records_and_makes_retries_stale() {
    let s = store(8 << 20);
    let rules = RejectRules::default();
    for seq in 1..=10 {
        s.increment_i64_once(TABLE, b"c", 1, &rules, id(9, seq, 1))
            .expect("increment");
    }
    assert_eq!(s.rpc_records(), 10);
    assert_eq!(s.client_leases(), vec![9]);
    s.expire_client_lease(9);
    assert_eq!(s.rpc_records(), 0);
    assert!(matches!(
        s.increment_i64_once(TABLE, b"c", 1, &rules, id(9, 10, 1)),
        Err(WriteError::StaleRpc)
    ));
    assert!(matches!(
        s.increment_i64_once(TABLE, b"c", 1, &rules, id(9, 11, 1)),
        Err(WriteError::StaleRpc)
    ));
    assert_eq!(counter(&s, b"c"), b"10");
}

/// GC bounds memory: a client that acknowledges as it goes (one RPC in flight)
/// leaves at most one record per lease, however many RPCs it sends.
#[test]
fn rpc_records_stay_bounded_when_clients_acknowledge() {
    const BOUND: usize = 4; // leases × records in flight each
    let s = store(1 << 20);
    let rules = RejectRules::default();
    let live_before = s.stats().log.live_object_bytes;
    for seq in 1..=20_000u64 {
        let lease = 1 + seq % 4;
        // Each lease acknowledges everything before its current RPC.
        let own = seq.div_ceil(4);
        let rpc = id(lease, own, own);
        s.increment_i64_once(TABLE, &lease.to_le_bytes(), 1, &rules, rpc)
            .expect("increment");
        assert!(s.rpc_records() <= BOUND, "{} records", s.rpc_records());
    }
    // Live log bytes: four counters and at most four records, not 20,000 records.
    let live = s.stats().log.live_object_bytes - live_before;
    assert!(live < 4 * 200, "{live} live bytes");
}

/// The cleaner keeps a record its table still needs: a retry after cleaning
/// still gets the first answer.
#[test]
fn records_survive_compaction_and_combined_cleaning() {
    let s = store(1 << 20);
    let rules = RejectRules::default();
    let first = s
        .increment_i64_once(TABLE, b"c", 7, &rules, id(2, 1, 1))
        .expect("increment");
    // Fill and overwrite enough to close many segments, mostly dead.
    let value = vec![7u8; 1000];
    for round in 0..6u64 {
        for i in 0..2000u64 {
            s.write(TABLE, &i.to_le_bytes(), &value, &rules)
                .unwrap_or_else(|e| panic!("round {round} write {i}: {e}"));
        }
    }
    s.clean_now(Some(CleanKind::Compaction));
    for _ in 0..50 {
        match s.clean_now(Some(CleanKind::Combined)) {
            Some((_, pass)) if pass.made_progress => {}
            _ => break,
        }
    }
    let log = s.stats().log;
    assert!(log.compactions > 0 && log.segments_cleaned > 0, "{log:?}");
    assert_eq!(
        s.increment_i64_once(TABLE, b"c", 7, &rules, id(2, 1, 1)),
        Ok(first)
    );
    assert_eq!(counter(&s, b"c"), b"7");
}

#[test]
fn replay_rpc_result_rebuilds_the_record_on_another_master() {
    let s = store(8 << 20);
    let rules = RejectRules::default();
    s.restore(TABLE, b"c", b"42", 3).expect("object replayed");
    let outcome = RpcOutcome::IncrementI64 {
        value: 42,
        version: 3,
    };
    let mut buf = [0; MAX_OUTCOME_BYTES];
    let n = outcome.encode(&mut buf);
    let entry = encode_rpc_result(8, 5, TABLE, key_hash(b"c"), &buf[..n]).expect("fits");
    assert_eq!(s.replay_rpc_result(entry.as_bytes()), Ok(true));
    assert_eq!(
        s.replay_rpc_result(entry.as_bytes()),
        Ok(false),
        "a second copy is not kept"
    );
    assert_eq!(
        s.increment_i64_once(TABLE, b"c", 1, &rules, id(8, 5, 1)),
        Ok(outcome)
    );
    assert_eq!(counter(&s, b"c"), b"42", "the retry did not execute");
}

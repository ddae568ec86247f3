//! Specifications of prepare and decide on one participant (SOSP'15 §6.2).

use ramstore_wire::{TxOp, TxOpKind, TxVote};

use super::Transactions;
use crate::tx::TxId;
use crate::{CleanerMode, ObjectStore, RejectRules, StoreConfig, WriteError};

fn store() -> ObjectStore {
    let mut config = StoreConfig::new(16 << 20);
    config.segment_bytes = 128 * 1024;
    config.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(config).expect("store");
    s.add_tablet(1, 0, u64::MAX).expect("tablet");
    s
}

fn tx(seq: u64) -> TxId {
    TxId {
        lease_id: 7,
        tx_seq: seq,
    }
}

fn write<'a>(key: &'a [u8], value: &'a [u8], expected: Option<u64>) -> TxOp<'a> {
    TxOp {
        kind: TxOpKind::Write,
        expected_version: expected,
        table_id: 1,
        key,
        value,
    }
}

fn read(key: &[u8], version: u64) -> TxOp<'_> {
    TxOp {
        kind: TxOpKind::Read,
        expected_version: Some(version),
        table_id: 1,
        key,
        value: b"",
    }
}

fn value(s: &ObjectStore, key: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    s.read(1, key, &mut v).ok().map(|_| v)
}

#[test]
fn prepare_then_commit_applies_every_op_and_releases_locks() {
    let s = store();
    let t = Transactions::new();
    let v = s.write(1, b"a", b"1", &RejectRules::default()).unwrap();
    let ops = [write(b"a", b"2", Some(v)), write(b"b", b"3", Some(0))];
    let vote = t.prepare(&s, tx(1), &ops, &[], false).unwrap();
    assert_eq!(vote, TxVote::Prepared);
    assert_eq!(t.locks().len(), 2);
    // Prepared is not applied: readers still see the committed value.
    assert_eq!(value(&s, b"a").as_deref(), Some(&b"1"[..]));
    t.decide(&s, tx(1), true).unwrap();
    assert_eq!(value(&s, b"a").as_deref(), Some(&b"2"[..]));
    assert_eq!(value(&s, b"b").as_deref(), Some(&b"3"[..]));
    assert!(t.locks().is_empty());
    assert_eq!(t.prepared_count(), 0);
}

#[test]
fn decide_abort_changes_nothing_and_releases_locks() {
    let s = store();
    let t = Transactions::new();
    let ops = [write(b"a", b"2", None)];
    t.prepare(&s, tx(1), &ops, &[], false).unwrap();
    t.decide(&s, tx(1), false).unwrap();
    assert_eq!(value(&s, b"a"), None);
    assert!(t.locks().is_empty());
}

#[test]
fn prepare_votes_abort_on_a_version_conflict_holding_nothing() {
    let s = store();
    let t = Transactions::new();
    let v = s.write(1, b"a", b"1", &RejectRules::default()).unwrap();
    let ops = [write(b"b", b"x", None), read(b"a", v + 1)];
    let vote = t.prepare(&s, tx(1), &ops, &[], false).unwrap();
    assert_eq!(vote, TxVote::Abort);
    assert!(t.locks().is_empty());
    assert_eq!(t.prepared_count(), 0);
}

#[test]
fn prepare_votes_abort_when_another_transaction_holds_a_lock() {
    let s = store();
    let t = Transactions::new();
    let first = [write(b"a", b"1", None)];
    assert_eq!(
        t.prepare(&s, tx(1), &first, &[], false).unwrap(),
        TxVote::Prepared
    );
    let second = [read(b"a", 0)];
    assert_eq!(
        t.prepare(&s, tx(2), &second, &[], false).unwrap(),
        TxVote::Abort
    );
    // The first transaction's lock is untouched by the second's abort.
    assert_eq!(t.locks().holder(1, b"a"), Some(tx(1)));
}

#[test]
fn writer_guard_refuses_a_locked_object_but_reads_see_committed_data() {
    let s = store();
    let t = Transactions::new();
    s.write(1, b"a", b"old", &RejectRules::default()).unwrap();
    let ops = [write(b"a", b"new", None)];
    t.prepare(&s, tx(1), &ops, &[], false).unwrap();
    let refused = t.locks().writer_guard(1, b"a").err();
    assert_eq!(refused.map(|e| e.holder), Some(tx(1)));
    assert!(t.locks().writer_guard(1, b"other").is_ok());
    assert_eq!(value(&s, b"a").as_deref(), Some(&b"old"[..]));
    t.decide(&s, tx(1), true).unwrap();
    assert!(t.locks().writer_guard(1, b"a").is_ok());
}

#[test]
fn prepare_decide_now_commits_in_one_step() {
    let s = store();
    let t = Transactions::new();
    let ops = [write(b"a", b"1", Some(0)), write(b"b", b"2", None)];
    let vote = t.prepare(&s, tx(1), &ops, &[], true).unwrap();
    assert_eq!(vote, TxVote::Committed);
    assert_eq!(value(&s, b"b").as_deref(), Some(&b"2"[..]));
    assert!(t.locks().is_empty());
}

#[test]
fn prepare_resent_after_commit_answers_committed_without_reapplying() {
    let s = store();
    let t = Transactions::new();
    let ops = [write(b"a", b"1", Some(0))];
    t.prepare(&s, tx(1), &ops, &[], true).unwrap();
    let v = s.read(1, b"a", &mut Vec::new()).unwrap();
    // The version check would now fail; the remembered outcome answers instead.
    let again = t.prepare(&s, tx(1), &ops, &[], true).unwrap();
    assert_eq!(again, TxVote::Committed);
    assert_eq!(s.read(1, b"a", &mut Vec::new()).unwrap(), v);
}

#[test]
fn prepare_after_abort_decision_votes_abort_and_locks_nothing() {
    let s = store();
    let t = Transactions::new();
    // The decision overtook the prepare (SOSP'15 §6.3: a participant that never
    // saw the prepare remembers the abort).
    t.decide(&s, tx(1), false).unwrap();
    let ops = [write(b"a", b"1", None)];
    assert_eq!(
        t.prepare(&s, tx(1), &ops, &[], false).unwrap(),
        TxVote::Abort
    );
    assert!(t.locks().is_empty());
}

#[test]
fn prepare_of_an_unowned_tablet_is_refused_holding_nothing() {
    let s = store();
    let t = Transactions::new();
    let ops = [TxOp {
        table_id: 99,
        ..write(b"a", b"1", None)
    }];
    assert_eq!(
        t.prepare(&s, tx(1), &ops, &[], false),
        Err(WriteError::UnknownTablet)
    );
    assert!(t.locks().is_empty());
}

/// Regression for the sharded lock table (issue 21): a plain writer that
/// checks its key's shard and writes under that shard's guard can never change
/// an object between a prepare's version check and the decision, whichever
/// shards the prepare's keys fall in.
#[test]
fn prepare_racing_plain_writers_keeps_prepared_versions_until_decided() {
    let s = store();
    let t = Transactions::new();
    let keys: Vec<Vec<u8>> = (0..6u8).map(|i| vec![b'k', i]).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut prepared = 0;
    std::thread::scope(|scope| {
        for w in 0..2usize {
            let (s, t, keys, stop) = (&s, &t, &keys, &stop);
            scope.spawn(move || {
                let mut i = w;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let key = &keys[i % keys.len()];
                    i += 1;
                    if let Ok(_guard) = t.locks().writer_guard(1, key) {
                        s.write(1, key, b"plain", &RejectRules::default())
                            .expect("plain write");
                    }
                }
            });
        }
        for seq in 1..=400u64 {
            let versions: Vec<u64> = keys
                .iter()
                .map(|k| s.read(1, k, &mut Vec::new()).unwrap_or(0))
                .collect();
            let ops: Vec<TxOp<'_>> = keys
                .iter()
                .zip(&versions)
                .map(|(k, &v)| read(k, v))
                .collect();
            if t.prepare(&s, tx(seq), &ops, &[], false).unwrap() == TxVote::Prepared {
                prepared += 1;
                std::thread::yield_now();
                for (k, &v) in keys.iter().zip(&versions) {
                    let now = s.read(1, k, &mut Vec::new()).unwrap_or(0);
                    assert_eq!(now, v, "a plain write changed a prepared object");
                }
            }
            t.decide(&s, tx(seq), false).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(prepared > 0, "no prepare won against the writers");
    assert!(t.locks().is_empty());
}

//! Durable prepared ops of transactions (SOSP'15 §6.2; issue 21): a PREPARED
//! vote follows the ops' log records, the cleaner keeps a record while its
//! transaction is undecided and drops it once decided, and a replay re-takes the
//! locks of the ops no decided mark names.

use ramstore_log::entry::{encode_tx_decided, encode_tx_prepared, PreparedKind, TxRecordId};
use ramstore_log::CleanKind;
use ramstore_master::{
    key_hash, CleanerMode, ObjectStore, RejectRules, StoreConfig, Transactions, TxId,
};
use ramstore_wire::{TxOp, TxOpKind, TxVote};

const TABLE: u64 = 1;

fn store(segment_bytes: usize) -> ObjectStore {
    let mut cfg = StoreConfig::new(64 << 20);
    cfg.segment_bytes = segment_bytes;
    cfg.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    s
}

fn tx(seq: u64) -> TxId {
    TxId {
        lease_id: 9,
        tx_seq: seq,
    }
}

fn write<'a>(key: &'a [u8], value: &'a [u8]) -> TxOp<'a> {
    TxOp {
        kind: TxOpKind::Write,
        expected_version: None,
        table_id: TABLE,
        key,
        value,
    }
}

fn value(s: &ObjectStore, key: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    s.read(TABLE, key, &mut v).ok().map(|_| v)
}

/// Closes many mostly dead segments and cleans them: compaction, then combined
/// passes until they stop making progress.
fn churn_and_clean(s: &ObjectStore) {
    let rules = RejectRules::default();
    let filler = vec![7u8; 1000];
    for _ in 0..6 {
        for i in 0..2000u64 {
            s.write(TABLE, &i.to_le_bytes(), &filler, &rules)
                .expect("filler write");
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
}

#[test]
fn prepare_appends_a_record_per_op_before_voting_prepared() {
    let s = store(8 << 20);
    let t = Transactions::new();
    let participants = [(TABLE, key_hash(b"a")), (TABLE, key_hash(b"b")), (2, 5)];
    let ops = [write(b"a", b"1"), write(b"b", b"2")];
    let before = s.stats().log.live_object_bytes;
    let vote = t.prepare(&s, tx(1), &ops, &participants, false).unwrap();
    assert_eq!(vote, TxVote::Prepared);
    assert_eq!(s.tx_prepared_records(), 2);
    assert!(
        s.stats().log.live_object_bytes > before,
        "the records are live bytes"
    );
    // The first op's record carries the whole participant list.
    let first = s.tx_prepared_record((9, 1, 0)).expect("record of op 0");
    let parsed = ramstore_log::entry::parse_tx_record(&first).expect("parses");
    assert_eq!(parsed.participants().collect::<Vec<_>>(), participants);
    // A resent prepare appends nothing new.
    assert_eq!(
        t.prepare(&s, tx(1), &ops, &participants, false).unwrap(),
        TxVote::Prepared
    );
    assert_eq!(s.tx_prepared_records(), 2);
}

#[test]
fn prepare_decide_now_writes_no_prepared_record() {
    let s = store(8 << 20);
    let t = Transactions::new();
    let ops = [write(b"a", b"1")];
    assert_eq!(
        t.prepare(&s, tx(1), &ops, &[], true).unwrap(),
        TxVote::Committed
    );
    assert_eq!(s.tx_prepared_records(), 0);
}

#[test]
fn decide_makes_prepared_records_dead() {
    for commit in [true, false] {
        let s = store(8 << 20);
        let t = Transactions::new();
        let ops = [write(b"a", b"1"), write(b"b", b"2")];
        t.prepare(&s, tx(1), &ops, &[], false).unwrap();
        t.decide(&s, tx(1), commit).unwrap();
        assert_eq!(s.tx_prepared_records(), 0, "commit {commit}");
        assert_eq!(value(&s, b"a").is_some(), commit);
        assert!(t.locks().is_empty());
    }
}

/// The cleaner moves an undecided prepared record intact (its owner follows
/// it), and once decided the record is left behind.
#[test]
fn cleaner_keeps_an_undecided_prepared_record_and_drops_a_decided_one() {
    let s = store(1 << 20);
    let t = Transactions::new();
    t.prepare(&s, tx(1), &[write(b"undecided", b"u")], &[], false)
        .unwrap();
    t.prepare(&s, tx(2), &[write(b"decided", b"d")], &[], false)
        .unwrap();
    let original = s.tx_prepared_record((9, 1, 0)).expect("record");
    let segment = s.tx_prepared_segment((9, 1, 0));
    t.decide(&s, tx(2), true).unwrap();
    churn_and_clean(&s);
    assert_ne!(
        s.tx_prepared_segment((9, 1, 0)),
        segment,
        "the record moved"
    );
    assert_eq!(s.tx_prepared_record((9, 1, 0)), Some(original));
    assert_eq!(s.tx_prepared_record((9, 2, 0)), None);
    // The moved record still decides: the lock goes and the write applies.
    t.decide(&s, tx(1), true).unwrap();
    assert_eq!(value(&s, b"undecided").as_deref(), Some(&b"u"[..]));
    assert_eq!(s.tx_prepared_records(), 0);
}

fn record(seq: u64, op_index: u64, key: &[u8]) -> (TxRecordId, Vec<u8>) {
    let id = TxRecordId {
        lease_id: 9,
        tx_seq: seq,
        op_index,
        table_id: TABLE,
        key_hash: key_hash(key),
    };
    let mut out = Vec::new();
    encode_tx_prepared(&id, PreparedKind::Write, Some(0), key, b"v", &[], &mut out);
    (id, out)
}

/// A recovery master re-takes the lock of each prepared op no decided mark
/// names, whichever order records and marks arrive in; the decision then
/// applies it.
#[test]
fn replay_tx_records_retakes_locks_of_undecided_ops_only() {
    let s = store(8 << 20);
    let t = Transactions::new();
    let (_, open) = record(1, 0, b"open");
    let (decided_id, decided) = record(2, 0, b"done");
    let mut mark = Vec::new();
    encode_tx_decided(&decided_id, true, 3, &mut mark);
    // The mark arrives before the op it names.
    let records = [mark.as_slice(), open.as_slice(), decided.as_slice()];
    assert_eq!(t.replay_tx_records(&s, records), Ok(1));
    assert_eq!(t.locks().holder(TABLE, b"open"), Some(tx(1)));
    assert_eq!(t.locks().holder(TABLE, b"done"), None);
    assert_eq!(t.prepared_count(), 1);
    assert_eq!(s.tx_prepared_records(), 1, "the record is in this log now");
    // A plain write waits for the decision; the decision applies the op.
    assert!(t.locks().writer_guard(TABLE, b"open").is_err());
    t.decide(&s, tx(1), true).unwrap();
    assert_eq!(value(&s, b"open").as_deref(), Some(&b"v"[..]));
    assert!(t.locks().is_empty());
}

/// A whole participant replayed onto another master: the records its prepare
/// appended re-take their locks there.
#[test]
fn replay_tx_records_of_a_prepared_participant_rebuilds_it_elsewhere() {
    let s = store(8 << 20);
    let t = Transactions::new();
    let ops = [write(b"a", b"1"), write(b"b", b"2")];
    t.prepare(&s, tx(4), &ops, &[], false).unwrap();
    let records: Vec<Vec<u8>> = (0..2)
        .map(|i| s.tx_prepared_record((9, 4, i)).expect("record"))
        .collect();
    let other = store(8 << 20);
    let t2 = Transactions::new();
    let n = t2
        .replay_tx_records(&other, records.iter().map(Vec::as_slice))
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(t2.locks().len(), 2);
    t2.decide(&other, tx(4), true).unwrap();
    assert_eq!(value(&other, b"b").as_deref(), Some(&b"2"[..]));
}

/// SOSP'15 §6.4: a participant asked for its vote on a transaction it never
/// saw decides ABORT and refuses the prepare when it arrives late.
#[test]
fn request_vote_of_an_unseen_transaction_aborts_and_refuses_a_late_prepare() {
    let s = store(8 << 20);
    let t = Transactions::new();
    assert_eq!(t.request_vote(tx(1), &[]), TxVote::Abort);
    let ops = [write(b"a", b"1")];
    assert_eq!(
        t.prepare(&s, tx(1), &ops, &[], false).unwrap(),
        TxVote::Abort
    );
    assert!(t.locks().is_empty());
    assert_eq!(s.tx_prepared_records(), 0);
}

#[test]
fn request_vote_reports_prepared_and_decided_transactions() {
    let s = store(8 << 20);
    let t = Transactions::new();
    t.prepare(&s, tx(1), &[write(b"a", b"1")], &[], false)
        .unwrap();
    assert_eq!(t.request_vote(tx(1), &[]), TxVote::Prepared);
    t.decide(&s, tx(1), true).unwrap();
    assert_eq!(t.request_vote(tx(1), &[]), TxVote::Committed);
}

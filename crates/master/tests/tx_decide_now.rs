//! The single-server fast path (`TX_DECIDE_NOW`) is atomic across a crash
//! (issue 21; design notes "Transactions", *Single-server fast path*): its log,
//! cut at any entry boundary and replayed on a recovery master, never leaves a
//! part of the transaction applied and unlocked, and the client's resent
//! prepare then finishes it whole.
//!
//! The replay here is the recovery master's (`server/src/recovery_master.rs`
//! `Replay::apply`) reduced to what this log holds: objects, tombstones, and
//! transaction records handed to `Transactions::replay_tx_records` at the end.

use ramstore_log::entry::{parse_entry, Entry};
use ramstore_master::{
    key_hash, CleanerMode, ObjectStore, RejectRules, StoreConfig, Transactions, TxId,
};
use ramstore_wire::{TxOp, TxOpKind, TxVote};

const TABLE: u64 = 1;
const TX: TxId = TxId {
    lease_id: 9,
    tx_seq: 1,
};

fn store() -> ObjectStore {
    let mut cfg = StoreConfig::new(64 << 20);
    cfg.segment_bytes = 8 << 20;
    cfg.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    s
}

fn value(s: &ObjectStore, key: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    s.read(TABLE, key, &mut v).ok().map(|_| v)
}

/// Every entry of the head segment, as (entry bytes), in log order.
fn head_entries(s: &ObjectStore) -> Vec<Vec<u8>> {
    let mut bytes = Vec::new();
    let segment = s.log().head_segment_id();
    let length = s
        .log()
        .copy_for_replica(segment, 0, &mut bytes)
        .expect("the head is in memory");
    let mut entries = Vec::new();
    let mut at = 0;
    while at < length {
        let (_, len) = parse_entry(&bytes[at..]).expect("entry parses");
        entries.push(bytes[at..at + len].to_vec());
        at += len;
    }
    entries
}

/// Replays `entries` onto a fresh master, as a recovery master does.
fn replay(entries: &[Vec<u8>]) -> (ObjectStore, Transactions) {
    let s = store();
    let t = Transactions::new();
    let mut tx_records = Vec::new();
    let mut max_version = 0;
    for raw in entries {
        let (entry, _) = parse_entry(raw).expect("entry parses");
        match entry {
            Entry::Object(o) => {
                max_version = max_version.max(o.version);
                s.replay_object(o.table_id, o.key, o.value, o.version)
                    .expect("object replays");
            }
            Entry::Tombstone(d) => {
                max_version = max_version.max(d.version);
                s.replay_tombstone(d.table_id, d.key, d.version)
                    .expect("tombstone replays");
            }
            Entry::TxRecord(_) => tx_records.push(raw.clone()),
            _ => {}
        }
    }
    s.raise_safe_version(max_version + 1);
    t.replay_tx_records(&s, tx_records.iter().map(Vec::as_slice))
        .expect("records replay");
    (s, t)
}

/// The transaction: read-modify-writes of `a` and `b` and a checked remove of
/// `c`, each expecting the version it read, so that an op applied twice (or
/// once, then checked again) would not pass.
fn ops(versions: [u64; 3]) -> [TxOp<'static>; 3] {
    [
        TxOp {
            kind: TxOpKind::Write,
            expected_version: Some(versions[0]),
            table_id: TABLE,
            key: b"a",
            value: b"a-new",
        },
        TxOp {
            kind: TxOpKind::Write,
            expected_version: Some(versions[1]),
            table_id: TABLE,
            key: b"b",
            value: b"b-new",
        },
        TxOp {
            kind: TxOpKind::Remove,
            expected_version: Some(versions[2]),
            table_id: TABLE,
            key: b"c",
            value: b"",
        },
    ]
}

fn participants() -> Vec<(u64, u64)> {
    [&b"a"[..], b"b", b"c"]
        .iter()
        .map(|k| (TABLE, key_hash(k)))
        .collect()
}

/// How many of the transaction's three changes a store shows.
fn applied(s: &ObjectStore) -> usize {
    usize::from(value(s, b"a").as_deref() == Some(b"a-new"))
        + usize::from(value(s, b"b").as_deref() == Some(b"b-new"))
        + usize::from(value(s, b"c").is_none())
}

#[test]
fn prepare_decide_now_log_cut_anywhere_replays_all_or_none() {
    let s = store();
    let t = Transactions::new();
    let rules = RejectRules::default();
    let versions = [
        s.write(TABLE, b"a", b"a-old", &rules).expect("write"),
        s.write(TABLE, b"b", b"b-old", &rules).expect("write"),
        s.write(TABLE, b"c", b"c-old", &rules).expect("write"),
    ];
    let before = head_entries(&s).len();
    let participants = participants();
    assert_eq!(
        t.prepare(&s, TX, &ops(versions), &participants, true),
        Ok(TxVote::Committed)
    );
    assert_eq!(applied(&s), 3);
    let entries = head_entries(&s);
    assert!(entries.len() > before + 3, "records, writes and marks");
    for cut in before..=entries.len() {
        let (r, rt) = replay(&entries[..cut]);
        let shown = applied(&r);
        // A part applied is never left unlocked: every object stays held for
        // the transaction until it is finished.
        if shown > 0 && shown < 3 {
            for key in [&b"a"[..], b"b", b"c"] {
                assert_eq!(
                    rt.locks().holder(TABLE, key),
                    Some(TX),
                    "cut {cut}: {shown} of 3 applied, {key:?} unlocked"
                );
            }
        }
        // The client's resent prepare finishes it whole.
        assert_eq!(
            rt.prepare(&r, TX, &ops(versions), &participants, true),
            Ok(TxVote::Committed),
            "cut {cut} ({shown} of 3 applied after the replay)"
        );
        assert_eq!(applied(&r), 3, "cut {cut}");
        assert!(rt.locks().is_empty(), "cut {cut}");
        assert_eq!(r.tx_prepared_records(), 0, "cut {cut}: records decided");
    }
}

#[test]
fn prepare_decide_now_of_one_change_writes_no_prepared_record() {
    let s = store();
    let t = Transactions::new();
    let rules = RejectRules::default();
    let va = s.write(TABLE, b"a", b"a-old", &rules).expect("write");
    let vb = s.write(TABLE, b"b", b"b-old", &rules).expect("write");
    let before = head_entries(&s).len();
    // One write and one version check: the write alone is one piece of the
    // log, durable whole or not at all.
    let ops = [
        TxOp {
            kind: TxOpKind::Write,
            expected_version: Some(va),
            table_id: TABLE,
            key: b"a",
            value: b"a-new",
        },
        TxOp {
            kind: TxOpKind::Read,
            expected_version: Some(vb),
            table_id: TABLE,
            key: b"b",
            value: b"",
        },
    ];
    assert_eq!(t.prepare(&s, TX, &ops, &[], true), Ok(TxVote::Committed));
    let added = &head_entries(&s)[before..];
    assert!(
        added
            .iter()
            .all(|raw| !matches!(parse_entry(raw), Ok((Entry::TxRecord(_), _)))),
        "no transaction record"
    );
}

/// A resent fast-path prepare whose transaction a recovery found only in part
/// (the log cut among its records): an op the recovery did not find that a
/// plain writer changed meanwhile aborts the whole transaction, and nothing is
/// applied.
#[test]
fn prepare_decide_now_resent_after_a_partial_recovery_aborts_on_a_conflict() {
    let s = store();
    let t = Transactions::new();
    let rules = RejectRules::default();
    let versions = [
        s.write(TABLE, b"a", b"a-old", &rules).expect("write"),
        s.write(TABLE, b"b", b"b-old", &rules).expect("write"),
        s.write(TABLE, b"c", b"c-old", &rules).expect("write"),
    ];
    let before = head_entries(&s).len();
    let participants = participants();
    t.prepare(&s, TX, &ops(versions), &participants, true)
        .expect("commits");
    let entries = head_entries(&s);
    // The first record only.
    let first_record = (before..entries.len())
        .find(|&i| matches!(parse_entry(&entries[i]), Ok((Entry::TxRecord(_), _))))
        .expect("a record");
    let (r, rt) = replay(&entries[..=first_record]);
    assert_eq!(applied(&r), 0);
    assert_eq!(rt.prepared_count(), 1, "held prepared in part");
    // `c`, not found by the recovery, is changed by a plain write.
    r.write(TABLE, b"c", b"c-other", &rules).expect("unlocked");
    assert_eq!(
        rt.prepare(&r, TX, &ops(versions), &participants, true),
        Ok(TxVote::Abort)
    );
    assert_eq!(value(&r, b"a").as_deref(), Some(&b"a-old"[..]));
    assert_eq!(value(&r, b"c").as_deref(), Some(&b"c-other"[..]));
    assert!(rt.locks().is_empty());
    assert_eq!(r.tx_prepared_records(), 0, "the found record is decided");
}

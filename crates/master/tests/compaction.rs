//! Segment compaction reuses its segment's own seglets as it goes (log/src/compaction.rs):
//! with a full log it needs only a few seglets beyond its segment, never a
//! segment's worth, and everything it moves reads back intact.

use ramstore_log::{CleanKind, SEGLET_BYTES};
use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig, WriteError};

const TABLE: u64 = 1;
const SEGMENT_BYTES: usize = 8 << 20;

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

fn value(i: u64, round: u64) -> Vec<u8> {
    let mut x = (i * 1_000 + round).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..100)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A store of 64 MiB in 8 MiB segments whose log is full (writes answer `NoSpace`):
/// 100-byte objects, then overwrites spread over all of them, so that the older
/// segments hold some dead objects each. Returns the store, the object count and each object's round.
fn full_store() -> (ObjectStore, u64, Vec<u64>) {
    let mut cfg = StoreConfig::new(64 << 20);
    cfg.segment_bytes = SEGMENT_BYTES;
    cfg.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    let rules = RejectRules::default();
    let mut rounds = Vec::new();
    let mut n = 0u64;
    // Most of the memory in distinct objects...
    while s.stats().log.live_object_bytes < 54 << 20 {
        s.write(TABLE, &key(n), &value(n, 0), &rules).expect("room");
        rounds.push(0);
        n += 1;
    }
    // ...then one overwrite each of every tenth object, the next tenth, and so on,
    // until the log is full: every early segment holds some dead objects, and none
    // is mostly dead.
    'fill: for offset in 0..10 {
        for i in (offset..n).step_by(10) {
            match s.write(TABLE, &key(i), &value(i, 1), &rules) {
                Ok(_) => rounds[i as usize] = 1,
                Err(WriteError::NoSpace) => break 'fill,
                Err(e) => panic!("write {i}: {e}"),
            }
        }
    }
    (s, n, rounds)
}

#[test]
fn compact_full_log_with_less_than_a_segment_free() {
    let (s, n, rounds) = full_store();
    let before = s.stats().log;
    let free_bytes = before.seglets_free * SEGLET_BYTES;
    assert!(
        free_bytes < SEGMENT_BYTES / 2,
        "the log must be full for this test: {free_bytes} bytes free"
    );
    let mut gained = 0i64;
    for _ in 0..4 {
        let free = s.stats().log.seglets_free as i64;
        let (kind, pass) = s
            .clean_now(Some(CleanKind::Compaction))
            .expect("a segment with dead objects compacts with a full log");
        assert_eq!(kind, CleanKind::Compaction);
        assert!(pass.made_progress, "{pass:?}");
        assert!(
            pass.bytes_copied as usize > free_bytes,
            "the pass copied more than the memory that was free ({} ≤ {free_bytes})",
            pass.bytes_copied
        );
        gained += s.stats().log.seglets_free as i64 - free;
    }
    assert!(gained > 0, "compaction freed no seglets");
    let mut v = Vec::new();
    for i in 0..n {
        s.read(TABLE, &key(i), &mut v)
            .expect("readable after compaction");
        assert_eq!(v, value(i, rounds[i as usize]), "object {i}");
    }
    s.log()
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
    // The memory won back takes writes again.
    s.write(TABLE, b"after", b"compaction", &RejectRules::default())
        .expect("room after compaction");
}

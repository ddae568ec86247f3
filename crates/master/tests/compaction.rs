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

/// An empty 64 MiB store in 8 MiB segments whose cleaner runs only when asked.
fn manual_store() -> ObjectStore {
    let mut cfg = StoreConfig::new(64 << 20);
    cfg.segment_bytes = SEGMENT_BYTES;
    cfg.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    s
}

/// A store of 64 MiB in 8 MiB segments whose log is full (writes answer `NoSpace`):
/// 100-byte objects, then overwrites spread over all of them, so that the older
/// segments hold some dead objects each. Returns the store, the object count and each object's round.
fn full_store() -> (ObjectStore, u64, Vec<u64>) {
    let s = manual_store();
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

/// Regression (docs/benchmarks.md, session 10): compaction relocates objects in
/// batches but copies tombstones at once, so an object followed by megabytes of
/// tombstones in its segment kept its batch waiting while the copy ran ahead of the
/// source seglets it had retired. With the pool nearly empty the pass ran out of
/// seglets half-way and the cleaner thread panicked ("the up-front bound is
/// wrong"), at 95% utilisation after W7's 90%-delete phase.
#[test]
fn compact_object_followed_by_tombstones_stays_within_upfront_seglets() {
    let s = manual_store();
    let rules = RejectRules::default();
    // Long keys make long tombstones: 4,000 of them hold 4 MB, 64 seglets, while
    // the segment's longest entry stays about 1 KB (a 4-seglet up-front bound).
    let victim = |i: u64| format!("victim-{i:08}-{}", "k".repeat(1_000)).into_bytes();
    const VICTIMS: u64 = 4_000;
    for i in 0..VICTIMS {
        s.write(TABLE, &victim(i), b"", &rules).expect("room");
    }
    // A segment holding one live object, then the victims' tombstones (live: their
    // targets' segment stays in the log), then objects overwritten later (dead),
    // so compaction has seglets to gain from it.
    assert!(s.log().roll_head_now());
    s.write(TABLE, b"survivor", &value(0, 0), &rules)
        .expect("room");
    for i in 0..VICTIMS {
        assert!(s
            .remove(TABLE, &victim(i), &rules)
            .expect("remove")
            .is_some());
    }
    const OVERWRITTEN: u64 = 20_000;
    for i in 0..OVERWRITTEN {
        s.write(TABLE, &key(i), &value(i, 0), &rules).expect("room");
    }
    assert!(s.log().roll_head_now());
    for i in 0..OVERWRITTEN {
        s.write(TABLE, &key(i), &value(i, 1), &rules).expect("room");
    }
    // Fill memory to the write limit, compact, and fill again, until compaction
    // has rewritten the tombstone segment with little free memory.
    let mut filler = OVERWRITTEN;
    for _ in 0..4 {
        loop {
            match s.write(TABLE, &key(filler), &value(filler, 0), &rules) {
                Ok(_) => filler += 1,
                Err(WriteError::NoSpace) => break,
                Err(e) => panic!("write {filler}: {e}"),
            }
        }
        if let Some((kind, pass)) = s.clean_now(Some(CleanKind::Compaction)) {
            assert_eq!(kind, CleanKind::Compaction);
            assert!(pass.made_progress, "{pass:?}");
        }
    }
    let mut v = Vec::new();
    s.read(TABLE, b"survivor", &mut v).expect("survivor");
    assert_eq!(v, value(0, 0));
    for i in 0..VICTIMS {
        assert!(s.read(TABLE, &victim(i), &mut v).is_err(), "victim {i}");
    }
    for i in 0..filler {
        s.read(TABLE, &key(i), &mut v).expect("readable");
        let round = u64::from(i < OVERWRITTEN);
        assert_eq!(v, value(i, round), "object {i}");
    }
    s.log()
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
}

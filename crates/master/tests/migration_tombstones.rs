//! Deletes on a migrating-in tablet survive cleaning until the migration is
//! recorded done (K§2.3.4; design notes "Migration: lineage recovery").
//!
//! Regression (known limit 1 of lineage recovery): a key first written on the
//! target during a migration and then deleted there, with both the object's and
//! the tombstone's segments cleaned before the target crashed, came back when
//! the range rolled back onto the source: the replay of the target's log no
//! longer held the delete, and the source's older copy of the key survived. The
//! check here is the replay's: the tombstones of the key in the segments a
//! recovery would read (those the head's digest names).

use ramstore_log::entry::{parse_entry, Entry};
use ramstore_log::CleanKind;
use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig};

const MIGRATING: u64 = 1;
const OTHER: u64 = 2;
const SAFE_VERSION: u64 = 100;

fn store() -> ObjectStore {
    let mut config = StoreConfig::new(16 << 20);
    config.segment_bytes = 128 * 1024;
    config.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(config).expect("store");
    s.add_tablet(OTHER, 0, u64::MAX).expect("tablet");
    assert!(s
        .add_migrating_tablet(MIGRATING, 0, u64::MAX, SAFE_VERSION)
        .expect("migrating tablet"));
    s
}

/// Overwrites 100 keys of the other table (about one segment), killing the
/// previous round.
fn churn(s: &ObjectStore) {
    let value = vec![3u8; 1000];
    for i in 0..100u32 {
        s.write(
            OTHER,
            format!("filler-{i}").as_bytes(),
            &value,
            &RejectRules::default(),
        )
        .expect("write");
    }
}

/// The segments a crash recovery would read: those the head's digest names.
fn recoverable_segments(s: &ObjectStore) -> Vec<u64> {
    let head = s.log().head_segment_id();
    let mut ids = Vec::new();
    for_each_entry(s, head, |entry| {
        if let Entry::LogDigest(d) = entry {
            ids.extend(d.segment_ids());
        }
    });
    ids
}

fn for_each_entry(s: &ObjectStore, segment: u64, mut f: impl FnMut(Entry<'_>)) {
    let mut bytes = Vec::new();
    let Some(length) = s.log().copy_for_replica(segment, 0, &mut bytes) else {
        return;
    };
    let mut at = 0;
    while at < length {
        let (entry, len) = parse_entry(&bytes[at..]).expect("entry parses");
        f(entry);
        at += len;
    }
}

/// Versions of the tombstones of `key` of the migrating table that a
/// recovery would replay.
fn replayed_tombstones(s: &ObjectStore, key: &[u8]) -> Vec<u64> {
    let mut versions = Vec::new();
    for id in recoverable_segments(s) {
        for_each_entry(s, id, |entry| {
            if let Entry::Tombstone(t) = entry {
                if t.table_id == MIGRATING && t.key == key {
                    versions.push(t.version);
                }
            }
        });
    }
    versions
}

/// Writes `key` on the migrating-in tablet (a blind write, as the gate lets
/// through), deletes it, then churns and runs combined cleaning until the
/// object's and the tombstone's segments have both left the log. Returns the
/// deleted version.
fn write_delete_and_clean_both_segments(s: &ObjectStore, key: &[u8]) -> u64 {
    churn(s);
    let rules = RejectRules::default();
    let version = s
        .write_arrived(MIGRATING, key, b"written on the target", &rules)
        .expect("write");
    assert!(version >= SAFE_VERSION);
    let object_segment = s.log().head_segment_id();
    assert!(s.log().roll_head_now());
    assert_eq!(s.remove_arrived(MIGRATING, key, &rules), Ok(Some(version)));
    churn(s);
    let tombstone_segment = s.log().head_segment_id();
    assert!(s.log().roll_head_now());
    for _ in 0..40 {
        let live = recoverable_segments(s);
        if !live.contains(&object_segment) && !live.contains(&tombstone_segment) {
            break;
        }
        churn(s);
        assert!(s.log().roll_head_now());
        s.clean_now(Some(CleanKind::Combined));
        s.log()
            .verify_tombstone_accounting()
            .expect("tombstone accounting");
    }
    let live = recoverable_segments(s);
    assert!(
        !live.contains(&object_segment) && !live.contains(&tombstone_segment),
        "cleaning never took segments {object_segment} and {tombstone_segment}"
    );
    version
}

#[test]
fn remove_arrived_tombstone_survives_cleaning_of_both_segments_while_migrating_in() {
    let s = store();
    let version = write_delete_and_clean_both_segments(&s, b"k");
    assert!(
        replayed_tombstones(&s, b"k").contains(&version),
        "a roll-back onto the source would not see the delete"
    );
}

#[test]
fn remove_tombstone_survives_cleaning_after_the_tablet_is_normal_until_released() {
    // Between the target making the tablet normal and the coordinator recording
    // MigrationDone, a crash of the target still rolls the range back.
    let s = store();
    s.finish_migrating_tablet(MIGRATING, 0, u64::MAX)
        .expect("finish");
    churn(&s);
    let rules = RejectRules::default();
    let version = s.write(MIGRATING, b"late", b"v", &rules).expect("write");
    assert_eq!(s.remove(MIGRATING, b"late", &rules), Ok(Some(version)));
    for _ in 0..10 {
        churn(&s);
        assert!(s.log().roll_head_now());
        s.clean_now(Some(CleanKind::Combined));
    }
    assert!(replayed_tombstones(&s, b"late").contains(&version));
    s.log()
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
}

#[test]
fn release_migration_hold_lets_the_ranges_tombstones_die() {
    let s = store();
    let version = write_delete_and_clean_both_segments(&s, b"k");
    let live_before = s.log().stats().tombstone_bytes;
    s.release_migration_hold(MIGRATING, 0, u64::MAX);
    s.release_migration_hold(MIGRATING, 0, u64::MAX);
    assert!(s.log().stats().tombstone_bytes < live_before);
    s.log()
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
    // A later delete leaves only its ordinary tombstone, which dies with the
    // object's segment as on any tablet.
    let rules = RejectRules::default();
    let v2 = s
        .write_arrived(MIGRATING, b"k2", b"v", &rules)
        .expect("write");
    assert_eq!(s.remove_arrived(MIGRATING, b"k2", &rules), Ok(Some(v2)));
    assert_eq!(replayed_tombstones(&s, b"k2"), vec![v2]);
    // Cleaning collects the released tombstone of k.
    for _ in 0..40 {
        if !replayed_tombstones(&s, b"k").contains(&version) {
            break;
        }
        churn(&s);
        assert!(s.log().roll_head_now());
        s.clean_now(Some(CleanKind::Combined));
    }
    assert!(!replayed_tombstones(&s, b"k").contains(&version));
    s.log()
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
}

#[test]
fn drop_tablet_releases_the_migrating_in_hold() {
    let s = store();
    let rules = RejectRules::default();
    let version = s
        .write_arrived(MIGRATING, b"k", b"v", &rules)
        .expect("write");
    assert_eq!(s.remove_arrived(MIGRATING, b"k", &rules), Ok(Some(version)));
    let live_before = s.log().stats().tombstone_bytes;
    s.drop_tablet(MIGRATING, 0, u64::MAX);
    assert!(s.log().stats().tombstone_bytes < live_before);
    s.log()
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
}

//! Tombstone holds (`ramstore_log::TombstoneHold`, K§2.3.4): a delete appended
//! with a hold leaves a tombstone that outlives cleaning of both the object's and
//! the tombstone's segments until the hold is released; what a crash recovery
//! would replay (the segments the newest digest names, and the head) still says
//! the key was deleted.

use std::collections::HashMap;

use parking_lot::Mutex;
use ramstore_log::entry::{parse_entry, Entry};
use ramstore_log::{Cleaner, DeadObject, Log, LogConfig, LogRef, NewObject, ObjectView, Relocator};

/// A hash table of one map under one lock.
#[derive(Default)]
struct MapRelocator {
    table: Mutex<HashMap<Vec<u8>, (LogRef, usize, u64)>>,
}

fn key_of(object: &ObjectView<'_>) -> Vec<u8> {
    let mut key = Vec::new();
    object.copy_key(&mut key);
    key
}

impl Relocator for MapRelocator {
    fn hash(&self, object: &ObjectView<'_>) -> u64 {
        key_of(object)
            .iter()
            .fold(0u64, |h, &b| h.wrapping_mul(31) + u64::from(b))
    }

    fn is_live(&self, object: &ObjectView<'_>, _hash: u64) -> bool {
        self.table.lock().get(&key_of(object)).map(|e| e.0) == Some(object.location())
    }

    fn relocate(
        &self,
        object: &ObjectView<'_>,
        _hash: u64,
        copy: &mut dyn FnMut() -> LogRef,
    ) -> bool {
        let mut table = self.table.lock();
        match table.get_mut(&key_of(object)) {
            Some(entry) if entry.0 == object.location() => {
                entry.0 = copy();
                true
            }
            _ => false,
        }
    }
}

/// A store over a log: writes and deletes as a master does them.
struct Store {
    log: Log,
    map: MapRelocator,
}

impl Store {
    fn new() -> Self {
        let mut config = LogConfig::new(16 << 20);
        config.segment_bytes = 128 * 1024;
        Self {
            log: Log::new(config).expect("log"),
            map: MapRelocator::default(),
        }
    }

    fn write(&self, key: &[u8], version: u64) {
        let value = vec![7u8; 1000];
        let old = self.map.table.lock().get(key).copied();
        let object = NewObject {
            table_id: 1,
            key,
            version,
            value: &value,
            expires_at: None,
        };
        let replaces = old.map(|(location, _, version)| DeadObject { version, location });
        let appended = self.log.append_object(&object, replaces).expect("append");
        let len = self.log.object(appended.entry).expect("object").entry_len();
        if let Some((r, old_len, _)) = old {
            self.log.object_died(r, old_len);
        }
        self.map
            .table
            .lock()
            .insert(key.to_vec(), (appended.entry, len, version));
    }

    fn delete(&self, key: &[u8], hold: Option<ramstore_log::TombstoneHold>) {
        let (location, len, version) = self.map.table.lock().remove(key).expect("live key");
        let dead = DeadObject { version, location };
        match hold {
            Some(h) => self.log.append_held_tombstone(1, key, dead, h),
            None => self.log.append_tombstone(1, key, dead),
        }
        .expect("tombstone");
        self.log.object_died(location, len);
    }

    /// Overwrites 100 filler keys (about one segment), killing the previous round.
    fn churn(&self, round: u64) {
        for i in 0..100u32 {
            self.write(format!("filler-{i}").as_bytes(), round);
        }
    }

    /// The segments a crash recovery would read: those the head's digest names
    /// (the head among them).
    fn recoverable_segments(&self) -> Vec<u64> {
        let head = self.log.head_segment_id();
        let mut ids = Vec::new();
        for Digest(named) in entries_of(&self.log, head).into_iter().flatten() {
            ids.extend(named);
        }
        assert!(ids.contains(&head), "the head's digest names the head");
        ids
    }

    /// The versions of the tombstones of `key` that recovery would replay.
    fn replayed_tombstones(&self, key: &[u8]) -> Vec<u64> {
        let mut versions = Vec::new();
        for id in self.recoverable_segments() {
            let mut bytes = Vec::new();
            let Some(length) = self.log.copy_for_replica(id, 0, &mut bytes) else {
                continue;
            };
            let mut at = 0;
            while at < length {
                let (entry, len) = parse_entry(&bytes[at..]).expect("entry parses");
                if let Entry::Tombstone(t) = entry {
                    if t.key == key {
                        versions.push(t.version);
                    }
                }
                at += len;
            }
        }
        versions
    }

    fn in_log(&self, segment: u64) -> bool {
        self.recoverable_segments().contains(&segment)
    }
}

struct Digest(Vec<u64>);

fn entries_of(log: &Log, id: u64) -> Vec<Option<Digest>> {
    let mut bytes = Vec::new();
    let Some(length) = log.copy_for_replica(id, 0, &mut bytes) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at < length {
        let (entry, len) = parse_entry(&bytes[at..]).expect("entry parses");
        out.push(match entry {
            Entry::LogDigest(d) => Some(Digest(d.segment_ids().collect())),
            _ => None,
        });
        at += len;
    }
    out
}

/// Writes `held` and `plain` into one segment, deletes `held` with `hold` and
/// `plain` without into the next, then churns and cleans until both segments have
/// left the log. Returns (object segment, tombstone segment).
fn delete_then_clean_both_segments(s: &Store, hold: ramstore_log::TombstoneHold) -> (u64, u64) {
    s.churn(1);
    s.write(b"held", 100);
    s.write(b"plain", 100);
    let object_segment = s.log.head_segment_id();
    assert!(s.log.roll_head_now());
    s.delete(b"held", Some(hold));
    s.delete(b"plain", None);
    s.churn(2);
    let tombstone_segment = s.log.head_segment_id();
    assert!(s.log.roll_head_now());
    for round in 3..40 {
        if !s.in_log(object_segment) && !s.in_log(tombstone_segment) {
            break;
        }
        s.churn(round);
        assert!(s.log.roll_head_now());
        Cleaner::new(&s.log).clean_combined_with_gain(&s.map, 0);
        s.log
            .verify_tombstone_accounting()
            .expect("tombstone accounting");
    }
    assert!(
        !s.in_log(object_segment) && !s.in_log(tombstone_segment),
        "cleaning never took segments {object_segment} and {tombstone_segment}"
    );
    (object_segment, tombstone_segment)
}

#[test]
fn append_held_tombstone_outlives_cleaning_of_both_segments() {
    let s = Store::new();
    let hold = s.log.hold_tombstones();
    delete_then_clean_both_segments(&s, hold);
    // The ordinary tombstone died with its object's segment (what made a
    // rolled-back migration resurrect a deleted key); the held one is live.
    assert_eq!(s.replayed_tombstones(b"plain"), Vec::<u64>::new());
    assert_eq!(s.replayed_tombstones(b"held"), vec![100]);
    assert!(s.log.held_tombstone_bytes(hold) > 0);
    assert!(s.log.is_held(hold));
    s.log
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
}

#[test]
fn release_tombstones_lets_held_tombstones_die_like_ordinary_ones() {
    let s = Store::new();
    let hold = s.log.hold_tombstones();
    delete_then_clean_both_segments(&s, hold);
    let live_before = s.log.stats().tombstone_bytes;
    s.log.release_tombstones(hold);
    assert!(!s.log.is_held(hold));
    assert_eq!(s.log.held_tombstone_bytes(hold), 0);
    assert!(
        s.log.stats().tombstone_bytes < live_before,
        "the held tombstone stopped counting live at once"
    );
    s.log
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
    // Released twice: nothing changes.
    s.log.release_tombstones(hold);
    s.log
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
    // A delete with a released hold writes only the ordinary tombstone.
    s.write(b"late", 200);
    s.delete(b"late", Some(hold));
    assert_eq!(s.replayed_tombstones(b"late"), vec![200]);
    assert_eq!(s.log.held_tombstone_bytes(hold), 0);
    s.log
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
}

#[test]
fn append_held_tombstone_writes_both_tombstones_durable_together() {
    let s = Store::new();
    let hold = s.log.hold_tombstones();
    s.write(b"k", 5);
    let before = s.log.stats().tombstone_bytes;
    let (location, len, version) = s.map.table.lock().remove(&b"k"[..]).expect("live");
    let appended = s
        .log
        .append_held_tombstone(1, b"k", DeadObject { version, location }, hold)
        .expect("tombstones");
    s.log.object_died(location, len);
    let mut bytes = Vec::new();
    s.log
        .copy_for_replica(appended.segment_id, 0, &mut bytes)
        .expect("head");
    let piece = &bytes[appended.offset..appended.offset + appended.len];
    let (first, first_len) = parse_entry(piece).expect("first");
    let (second, second_len) = parse_entry(&piece[first_len..]).expect("second");
    assert_eq!(first_len + second_len, appended.len, "one piece holds both");
    let (Entry::Tombstone(a), Entry::Tombstone(b)) = (first, second) else {
        panic!("two tombstones expected");
    };
    assert_eq!((a.key, a.version), (&b"k"[..], 5));
    assert_eq!((b.key, b.version, b.segment_id), (&b"k"[..], 5, hold.id()));
    assert_eq!(s.log.stats().tombstone_bytes, before + appended.len as u64);
    s.log
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
}

mod model {
    //! Model-based property test of tombstone holds: after any sequence of
    //! writes, deletes with or without a hold, new holds, releases, cleaning
    //! passes and head rolls, the accounting is exact and every delete made
    //! with a hold still held is still in what a recovery would replay.

    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use ramstore_log::{CleanKind, Cleaner, TombstoneHold};

    use super::Store;

    const KEYS: u8 = 6;

    #[derive(Debug, Clone)]
    enum Step {
        Write(u8),
        /// Delete key `k`, with hold `h` (modulo the holds taken) if `Some`.
        Delete(u8, Option<u8>),
        Hold,
        Release(u8),
        Churn,
        Clean(bool),
        Roll,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0..KEYS).prop_map(Step::Write),
            3 => ((0..KEYS), proptest::option::of(0u8..4)).prop_map(|(k, h)| Step::Delete(k, h)),
            1 => Just(Step::Hold),
            1 => (0u8..4).prop_map(Step::Release),
            2 => Just(Step::Churn),
            2 => any::<bool>().prop_map(Step::Clean),
            1 => Just(Step::Roll),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn holds_keep_their_deletes_replayable_and_accounting_exact(
            steps in proptest::collection::vec(step(), 1..60)
        ) {
            let s = Store::new();
            let mut holds: Vec<(TombstoneHold, bool)> = Vec::new();
            // Per key: the newest version, and whether it is live.
            let mut keys: BTreeMap<u8, (u64, bool)> = BTreeMap::new();
            // The model: deletes made with a hold, (key, version, hold index).
            let mut held: Vec<(u8, u64, usize)> = Vec::new();
            let mut version = 1u64;
            let mut round = 1u64;
            for step in steps {
                match step {
                    Step::Write(k) => {
                        version += 1;
                        s.write(&[b'k', k], version);
                        keys.insert(k, (version, true));
                    }
                    Step::Delete(k, h) => {
                        let Some(&(v, true)) = keys.get(&k) else { continue };
                        let hold = h.filter(|_| !holds.is_empty()).map(|h| h as usize % holds.len());
                        s.delete(&[b'k', k], hold.map(|i| holds[i].0));
                        keys.insert(k, (v, false));
                        if let Some(i) = hold {
                            held.push((k, v, i));
                        }
                    }
                    Step::Hold => holds.push((s.log.hold_tombstones(), true)),
                    Step::Release(h) => {
                        if !holds.is_empty() {
                            let i = h as usize % holds.len();
                            s.log.release_tombstones(holds[i].0);
                            holds[i].1 = false;
                            prop_assert_eq!(s.log.held_tombstone_bytes(holds[i].0), 0);
                        }
                    }
                    Step::Churn => {
                        s.churn(round);
                        round += 1;
                    }
                    Step::Clean(combined) => {
                        let kind = if combined { CleanKind::Combined } else { CleanKind::Compaction };
                        let cleaner = Cleaner::new(&s.log);
                        match kind {
                            CleanKind::Combined => cleaner.clean_combined_with_gain(&s.map, 0),
                            _ => cleaner.compact(&s.map),
                        };
                    }
                    Step::Roll => {
                        prop_assert!(s.log.roll_head_now());
                    }
                }
                s.log.verify_tombstone_accounting().map_err(TestCaseError::fail)?;
                for &(k, v, i) in &held {
                    prop_assert_eq!(s.log.is_held(holds[i].0), holds[i].1);
                    if holds[i].1 {
                        prop_assert!(
                            s.replayed_tombstones(&[b'k', k]).contains(&v),
                            "the held delete of key {} version {} is gone", k, v
                        );
                    }
                }
            }
        }
    }
}

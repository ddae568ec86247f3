//! Key expiry on one master: lazy expiry on reads and writes, expiry changes
//! (EXPIRE's conditions), the active expirer's bounded ticks, and expiry times
//! carried by cleaning and by a reload of the log (cold start and recovery
//! replay read the same entries). The clock is a manual one, so "expired" is
//! exactly what the test says.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use ramstore_clock::ManualClock;
use ramstore_log::entry::{parse_entry, Entry};
use ramstore_log::CleanKind;
use ramstore_master::{
    CleanerMode, ExpireCondition, Expiry, ObjectStore, ReadError, RejectRules, StoreConfig,
    EXPIRE_SAMPLE_PER_TICK,
};

const TABLE: u64 = 1;

fn store(clock: &ManualClock, memory: usize) -> ObjectStore {
    let mut cfg = StoreConfig::new(memory);
    cfg.segment_bytes = 512 << 10;
    cfg.cleaner = CleanerMode::Manual;
    cfg.clock = clock.handle();
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    s
}

fn read(s: &ObjectStore, key: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    match s.read(TABLE, key, &mut v) {
        Ok(_) => Some(v),
        Err(ReadError::ObjectDoesntExist) => None,
        Err(e) => panic!("read failed: {e}"),
    }
}

fn put_ttl(s: &ObjectStore, key: &[u8], value: &[u8], ttl_ms: u64) -> u64 {
    let at = s.now_ms() + ttl_ms;
    s.write_expiring(
        TABLE,
        key,
        value,
        &RejectRules::default(),
        Expiry::Set(Some(at)),
    )
    .expect("write");
    at
}

/// A logged object: key, value, version and expiry.
type Logged = (Vec<u8>, Vec<u8>, u64, Option<u64>);

/// Every object entry of the head segment, with its expiry, by a walk of the
/// bytes a backup holds, as recovery and cold start walk them.
fn logged_objects(s: &ObjectStore) -> Vec<Logged> {
    let mut bytes = Vec::new();
    let segment = s.log().head_segment_id();
    let length = s
        .log()
        .copy_for_replica(segment, 0, &mut bytes)
        .expect("the head is in memory");
    let mut out = Vec::new();
    let mut at = 0;
    while at < length {
        let (entry, len) = parse_entry(&bytes[at..]).expect("entry parses");
        if let Entry::Object(o) = entry {
            out.push((o.key.to_vec(), o.value.to_vec(), o.version, o.expires_at));
        }
        at += len;
    }
    out
}

#[test]
fn read_expiring_object_is_absent_from_its_deadline() {
    let clock = ManualClock::new();
    let s = store(&clock, 16 << 20);
    put_ttl(&s, b"k", b"v", 1_000);
    assert_eq!(read(&s, b"k"), Some(b"v".to_vec()));
    clock.advance(Duration::from_millis(999));
    assert_eq!(read(&s, b"k"), Some(b"v".to_vec()));
    clock.advance(Duration::from_millis(1));
    assert_eq!(read(&s, b"k"), None);
    assert_eq!(s.expiry_of(TABLE, b"k"), Err(ReadError::ObjectDoesntExist));
}

#[test]
fn write_over_expired_object_sees_no_object() {
    let clock = ManualClock::new();
    let s = store(&clock, 16 << 20);
    put_ttl(&s, b"k", b"old", 10);
    clock.advance(Duration::from_millis(10));
    // "must not exist" passes: the expired object is absent.
    let must_not_exist = RejectRules {
        exists: true,
        ..RejectRules::default()
    };
    s.write(TABLE, b"k", b"new", &must_not_exist)
        .expect("write over an expired object");
    assert_eq!(read(&s, b"k"), Some(b"new".to_vec()));
    assert_eq!(s.expiry_of(TABLE, b"k"), Ok(None));
}

#[test]
fn write_plain_clears_expiry_and_keep_keeps_it() {
    let clock = ManualClock::new();
    let s = store(&clock, 16 << 20);
    let at = put_ttl(&s, b"k", b"1", 5_000);
    s.write_expiring(TABLE, b"k", b"2", &RejectRules::default(), Expiry::Keep)
        .expect("keep");
    assert_eq!(s.expiry_of(TABLE, b"k"), Ok(Some(at)));
    s.increment_i64(TABLE, b"k", 1, &RejectRules::default())
        .expect("incr");
    assert_eq!(s.expiry_of(TABLE, b"k"), Ok(Some(at)), "INCR keeps the TTL");
    s.write(TABLE, b"k", b"3", &RejectRules::default())
        .expect("write");
    assert_eq!(s.expiry_of(TABLE, b"k"), Ok(None), "SET clears the TTL");
}

#[test]
fn remove_expired_object_answers_none_and_logs_a_tombstone() {
    let clock = ManualClock::new();
    let s = store(&clock, 16 << 20);
    put_ttl(&s, b"k", b"v", 10);
    clock.advance(Duration::from_millis(10));
    let before = s.stats().objects;
    assert_eq!(s.remove(TABLE, b"k", &RejectRules::default()), Ok(None));
    assert_eq!(s.stats().objects, before - 1);
}

#[test]
fn set_expiry_conditions_follow_redis() {
    let clock = ManualClock::new();
    let s = store(&clock, 16 << 20);
    let now = s.now_ms();
    assert_eq!(
        s.set_expiry(TABLE, b"none", Some(now + 5), ExpireCondition::Always),
        Ok(false),
        "a missing key is not changed"
    );
    s.write(TABLE, b"k", b"v", &RejectRules::default())
        .expect("write");
    assert_eq!(
        s.set_expiry(TABLE, b"k", Some(now + 100), ExpireCondition::Xx),
        Ok(false)
    );
    assert_eq!(
        s.set_expiry(TABLE, b"k", Some(now + 100), ExpireCondition::Gt),
        Ok(false)
    );
    assert_eq!(
        s.set_expiry(TABLE, b"k", Some(now + 100), ExpireCondition::Nx),
        Ok(true)
    );
    assert_eq!(
        s.set_expiry(TABLE, b"k", Some(now + 200), ExpireCondition::Lt),
        Ok(false)
    );
    assert_eq!(
        s.set_expiry(TABLE, b"k", Some(now + 50), ExpireCondition::Lt),
        Ok(true)
    );
    assert_eq!(s.expiry_of(TABLE, b"k"), Ok(Some(now + 50)));
    assert_eq!(
        s.set_expiry(TABLE, b"k", None, ExpireCondition::Xx),
        Ok(true)
    );
    assert_eq!(s.expiry_of(TABLE, b"k"), Ok(None));
    assert_eq!(read(&s, b"k"), Some(b"v".to_vec()), "value kept");
}

#[test]
fn expire_tick_deletes_only_expired_objects() {
    let clock = ManualClock::new();
    let s = store(&clock, 16 << 20);
    for i in 0..100u32 {
        let key = format!("short{i}");
        put_ttl(&s, key.as_bytes(), b"v", 100);
        let key = format!("long{i}");
        put_ttl(&s, key.as_bytes(), b"v", 100_000);
        let key = format!("never{i}");
        s.write(TABLE, key.as_bytes(), b"v", &RejectRules::default())
            .expect("write");
    }
    clock.advance(Duration::from_millis(100));
    let tick = s.expire_tick(usize::MAX, usize::MAX);
    assert_eq!(tick.deleted, 100);
    assert_eq!(s.stats().objects, 200);
    for i in 0..100u32 {
        assert_eq!(read(&s, format!("long{i}").as_bytes()), Some(b"v".to_vec()));
        assert_eq!(
            read(&s, format!("never{i}").as_bytes()),
            Some(b"v".to_vec())
        );
    }
    assert_eq!(s.expire_tick(usize::MAX, usize::MAX).deleted, 0);
}

#[test]
fn expire_tick_examines_at_most_its_bound() {
    let clock = ManualClock::new();
    let s = store(&clock, 64 << 20);
    let n = 3 * EXPIRE_SAMPLE_PER_TICK;
    for i in 0..n {
        put_ttl(&s, format!("k{i}").as_bytes(), b"v", 1);
    }
    clock.advance(Duration::from_millis(1));
    let mut ticks = 0;
    let mut deleted = 0;
    while s.stats().objects > 0 {
        let tick = s.expire_tick(EXPIRE_SAMPLE_PER_TICK, usize::MAX);
        // A tick stops after the bucket that reaches the bound: at most a
        // bucket's chain more (8 entries a bucket; chains are short).
        assert!(
            tick.examined < EXPIRE_SAMPLE_PER_TICK + 64,
            "examined {}",
            tick.examined
        );
        deleted += tick.deleted;
        ticks += 1;
        assert!(ticks <= 10, "the expirer never finished");
    }
    assert_eq!(deleted, n);
    assert!(ticks >= 3, "{n} objects in {ticks} bounded ticks");
}

#[test]
fn clean_now_carries_expiry_into_survivors() {
    let clock = ManualClock::new();
    let s = store(&clock, 16 << 20);
    let mut deadlines = BTreeMap::new();
    for round in 0..4u32 {
        for i in 0..2_000u32 {
            let key = format!("k{i}");
            let value = vec![round as u8; 200];
            if i % 2 == 0 {
                let at = put_ttl(&s, key.as_bytes(), &value, 60_000 + u64::from(i));
                deadlines.insert(key, Some(at));
            } else {
                s.write(TABLE, key.as_bytes(), &value, &RejectRules::default())
                    .expect("write");
                deadlines.insert(key, None);
            }
        }
    }
    let cleaned = s.log().stats().segments_cleaned;
    // Both cleaners: compaction copies entries within a segment, combined
    // cleaning into survivor segments (L§4).
    for kind in [CleanKind::Compaction, CleanKind::Combined].repeat(4) {
        s.clean_now(Some(kind));
    }
    assert!(
        s.log().stats().segments_cleaned > cleaned,
        "nothing was cleaned"
    );
    for (key, at) in &deadlines {
        assert_eq!(s.expiry_of(TABLE, key.as_bytes()), Ok(*at), "{key}");
    }
}

#[test]
fn restore_expiring_reloads_expired_objects_as_absent() {
    // A cold start or recovery replay puts every logged object back with its
    // logged expiry: an expired one never comes back, an unexpired one keeps
    // its deadline.
    let clock = ManualClock::new();
    let s = store(&clock, 16 << 20);
    put_ttl(&s, b"gone", b"v", 10);
    let at = put_ttl(&s, b"kept", b"v", 10_000);
    s.write(TABLE, b"plain", b"v", &RejectRules::default())
        .expect("write");
    clock.advance(Duration::from_millis(10));
    let logged = logged_objects(&s);
    assert_eq!(logged.len(), 3);

    let t = store(&clock, 16 << 20);
    for (key, value, version, expires_at) in &logged {
        t.restore_expiring(TABLE, key, value, *version, *expires_at)
            .expect("restore");
    }
    assert_eq!(read(&t, b"gone"), None);
    assert_eq!(t.expiry_of(TABLE, b"kept"), Ok(Some(at)));
    assert_eq!(t.expiry_of(TABLE, b"plain"), Ok(None));
    // Replay of a crashed master's objects keeps expiry the same way.
    let u = store(&clock, 16 << 20);
    for (key, value, version, expires_at) in &logged {
        assert_eq!(
            u.replay_object_expiring(TABLE, key, value, *version, *expires_at),
            Ok(true)
        );
    }
    assert_eq!(read(&u, b"gone"), None);
    assert_eq!(u.expiry_of(TABLE, b"kept"), Ok(Some(at)));
}

/// One step of the model-based test.
#[derive(Clone, Debug)]
enum Op {
    Put(u8, u8),
    PutTtl(u8, u8, u16),
    SetExpiry(u8, Option<u16>),
    Remove(u8),
    Advance(u16),
    Tick,
    Clean,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..6u8, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        (0..6u8, any::<u8>(), 0..500u16).prop_map(|(k, v, t)| Op::PutTtl(k, v, t)),
        (0..6u8, proptest::option::of(0..500u16)).prop_map(|(k, t)| Op::SetExpiry(k, t)),
        (0..6u8).prop_map(Op::Remove),
        (0..300u16).prop_map(Op::Advance),
        Just(Op::Tick),
        Just(Op::Clean),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random writes, expiry changes, deletes, clock steps, expirer ticks and
    /// cleaning passes against a map of (value, deadline): every read agrees
    /// with the model, so an expired key never comes back and an unexpired one
    /// is never lost.
    #[test]
    fn model_expiry_matches_a_map(ops in proptest::collection::vec(op(), 1..80)) {
        let clock = ManualClock::new();
        let s = store(&clock, 16 << 20);
        let mut model: BTreeMap<u8, (u8, Option<u64>)> = BTreeMap::new();
        for op in ops {
            let now = s.now_ms();
            model.retain(|_, (_, at)| at.is_none_or(|at| at > now));
            match op {
                Op::Put(k, v) => {
                    s.write(TABLE, &[k], &[v], &RejectRules::default()).expect("put");
                    model.insert(k, (v, None));
                }
                Op::PutTtl(k, v, t) => {
                    let at = now + u64::from(t);
                    s.write_expiring(TABLE, &[k], &[v], &RejectRules::default(), Expiry::Set(Some(at)))
                        .expect("put");
                    model.insert(k, (v, Some(at)));
                }
                Op::SetExpiry(k, t) => {
                    let at = t.map(|t| now + u64::from(t));
                    let changed = s.set_expiry(TABLE, &[k], at, ExpireCondition::Always).expect("expire");
                    prop_assert_eq!(changed, model.contains_key(&k));
                    if let Some(entry) = model.get_mut(&k) {
                        entry.1 = at;
                    }
                }
                Op::Remove(k) => {
                    let removed = s.remove(TABLE, &[k], &RejectRules::default()).expect("remove");
                    prop_assert_eq!(removed.is_some(), model.remove(&k).is_some());
                }
                Op::Advance(ms) => clock.advance(Duration::from_millis(u64::from(ms))),
                Op::Tick => {
                    s.expire_tick(EXPIRE_SAMPLE_PER_TICK, usize::MAX);
                }
                Op::Clean => {
                    s.clean_now(None);
                }
            }
            let now = s.now_ms();
            for k in 0..6u8 {
                let expected = model
                    .get(&k)
                    .filter(|(_, at)| at.is_none_or(|at| at > now))
                    .map(|(v, at)| (vec![*v], *at));
                let got = read(&s, &[k]).map(|v| (v, s.expiry_of(TABLE, &[k]).expect("expiry")));
                prop_assert_eq!(got, expected, "key {}", k);
            }
        }
    }
}

/// A tick visits at most its bucket bound even when it has examined far
/// fewer entries than its sample (a large table holding few objects).
#[test]
fn expire_tick_visits_at_most_its_bucket_bound() {
    let clock = ManualClock::new();
    let s = store(&clock, 64 << 20);
    put_ttl(&s, b"k", b"v", 1);
    assert!(s.hash_table_buckets() > 100);
    let tick = s.expire_tick(EXPIRE_SAMPLE_PER_TICK, 100);
    assert_eq!(tick.buckets, 100);
    assert!(tick.examined <= 1);
}

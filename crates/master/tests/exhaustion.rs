//! Running out of memory and refusing what cannot be stored.
//!
//! - Filling the log: writes end with `NoSpace` (never an abort), everything written
//!   still reads back, deletes keep working on the delete reserve, and after deletes
//!   and cleaning writes succeed again — with the cleaner run by hand and on its own
//!   thread.
//! - Every refused operation (`KeyTooLarge`, `ValueTooLarge`, `UnknownTablet`,
//!   `NotNumeric`, `Overflow`, reject rules, `NoSpace`) changes nothing: not the
//!   object, not the object count, not the safe version (probed by the version a new
//!   object gets).
//! - Versions stay monotonic across delete and re-create, also after cleaning has
//!   dropped the tombstone.

use std::time::{Duration, Instant};

use ramstore_log::CleanKind;
use ramstore_master::{
    key_hash, CleanerMode, ObjectStore, ReadError, RejectRules, StoreConfig, WriteError,
};

const NONE: RejectRules = RejectRules {
    given_version: 0,
    doesnt_exist: false,
    exists: false,
    version_le_given: false,
    version_ne_given: false,
    version_gt_given: false,
};

fn store(memory: usize, segment: usize, cleaner: CleanerMode, compaction: bool) -> ObjectStore {
    let mut cfg = StoreConfig::new(memory);
    cfg.segment_bytes = segment;
    cfg.cleaner = cleaner;
    cfg.compaction = compaction;
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(1, 0, u64::MAX).unwrap();
    s
}

fn manual(memory: usize) -> ObjectStore {
    store(memory, 512 << 10, CleanerMode::Manual, true)
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn fill_key(i: usize) -> Vec<u8> {
    format!("fill-{i:06}").into_bytes()
}

fn fill_value(i: usize, round: u64) -> Vec<u8> {
    pattern(900 + (i % 7) * 100, i as u64 * 1000 + round)
}

/// Runs every kind of cleaning pass once.
fn clean_all(s: &ObjectStore) {
    s.clean_now(None);
    s.clean_now(Some(CleanKind::Compaction));
    s.clean_now(Some(CleanKind::Combined));
}

/// Writes `value` under `key`, cleaning (manual) or waiting (background) on `NoSpace`;
/// gives up after `tries` and returns `NoSpace`.
fn write_retrying(
    s: &ObjectStore,
    background: bool,
    table: u64,
    key: &[u8],
    value: &[u8],
    tries: u32,
) -> Result<u64, WriteError> {
    for _ in 0..tries {
        match s.write(table, key, value, &NONE) {
            Err(WriteError::NoSpace) if background => std::thread::sleep(Duration::from_millis(1)),
            Err(WriteError::NoSpace) => clean_all(s),
            other => return other,
        }
    }
    s.write(table, key, value, &NONE)
}

/// The version a brand-new object gets now: the master's safe version. Creates a
/// never-used key in a probe table of its own (creating does not move the safe
/// version).
fn probe_safe_version(s: &ObjectStore, n: &mut u32) -> u64 {
    s.add_tablet(77, 0, u64::MAX).unwrap();
    *n += 1;
    let key = format!("probe-{n}");
    let mut v = None;
    for _ in 0..100 {
        match s.write(77, key.as_bytes(), b"p", &NONE) {
            Ok(ver) => {
                v = Some(ver);
                break;
            }
            Err(WriteError::NoSpace) => clean_all(s),
            Err(e) => panic!("probe write: {e}"),
        }
    }
    v.expect("probe write kept getting NoSpace")
}

/// Writes new keys (and overwrites some) until `NoSpace` persists after cleaning;
/// returns the current value of every key written.
fn fill(s: &ObjectStore, background: bool) -> Vec<(Vec<u8>, Vec<u8>, u64)> {
    let mut objects: Vec<(Vec<u8>, Vec<u8>, u64)> = Vec::new();
    let tries = if background { 300 } else { 5 };
    for n in 0..200_000usize {
        // Every fourth write overwrites an earlier key: dead data for the cleaner.
        let (i, round) = if n % 4 == 3 && !objects.is_empty() {
            let i = (n * 7919) % objects.len();
            (i, n as u64)
        } else {
            (objects.len(), 0)
        };
        let key = fill_key(i);
        let value = fill_value(i, round);
        match write_retrying(s, background, 1, &key, &value, tries) {
            Ok(v) => {
                if i == objects.len() {
                    objects.push((key, value, v));
                } else {
                    objects[i] = (key, value, v);
                }
            }
            Err(WriteError::NoSpace) => return objects,
            Err(e) => panic!("write {n}: {e}"),
        }
    }
    panic!("200000 writes never filled the log: {:#?}", s.stats().log);
}

fn assert_all_readable(s: &ObjectStore, objects: &[(Vec<u8>, Vec<u8>, u64)]) {
    let mut buf = Vec::new();
    for (key, value, version) in objects {
        assert_eq!(
            s.read(1, key, &mut buf),
            Ok(*version),
            "{}",
            String::from_utf8_lossy(key)
        );
        assert!(
            buf == *value,
            "{} has a wrong value",
            String::from_utf8_lossy(key)
        );
    }
}

fn fill_then_recover(background: bool) {
    const MEMORY: usize = 8 << 20;
    let cleaner = if background {
        CleanerMode::Background { threads: 1 }
    } else {
        CleanerMode::Manual
    };
    let s = store(MEMORY, 512 << 10, cleaner, true);
    let mut objects = fill(&s, background);
    let stats = s.stats();
    // The log really is full: most of memory holds live objects.
    assert!(
        stats.log.live_object_bytes as usize > MEMORY * 3 / 4,
        "NoSpace with only {} live bytes of {MEMORY}: {:#?}",
        stats.log.live_object_bytes,
        stats.log
    );
    assert_eq!(stats.objects, objects.len());
    assert_all_readable(&s, &objects);
    let one_more = s.write(1, b"one more", &[0; 1000], &NONE);
    if background {
        // The background cleaner may have freed room since `fill` saw NoSpace
        // (regression: asserting NoSpace here was a race with the cleaner).
        match one_more {
            Ok(v) => objects.push((b"one more".to_vec(), vec![0; 1000], v)),
            Err(e) => assert_eq!(e, WriteError::NoSpace),
        }
    } else {
        assert_eq!(one_more, Err(WriteError::NoSpace));
    }

    // Deletes work although writes do not. (Right after cleaning at full memory
    // they may need another cleaning pass first: see
    // `delete_reserve_survives_cleaning_at_full_memory`.)
    let mut buf = Vec::new();
    let max_tries = if background { 2000 } else { 20 };
    for (j, (key, _, version)) in objects.drain(..300).enumerate() {
        let mut tries = 0;
        let got = loop {
            match s.remove(1, &key, &NONE) {
                Err(WriteError::NoSpace) if tries < max_tries => {
                    tries += 1;
                    if background {
                        std::thread::sleep(Duration::from_millis(1));
                    } else {
                        clean_all(&s);
                    }
                }
                other => break other,
            }
        };
        assert_eq!(
            got,
            Ok(Some(version)),
            "delete #{j} still refused after {tries} cleaning rounds / waits: the log is \
             wedged (writes and deletes refused, no cleaning pass possible): {:#?}",
            s.stats().log
        );
        assert_eq!(s.read(1, &key, &mut buf), Err(ReadError::ObjectDoesntExist));
    }
    assert_eq!(s.stats().objects, objects.len());

    // Free a third of memory, cleaning whenever deletes run out of room.
    let third = objects.len() / 3;
    for (key, _, version) in objects.drain(..third) {
        let mut tries = 0;
        loop {
            match s.remove(1, &key, &NONE) {
                Ok(got) => {
                    assert_eq!(got, Some(version));
                    break;
                }
                Err(WriteError::NoSpace) if tries < 200 => {
                    tries += 1;
                    if background {
                        std::thread::sleep(Duration::from_millis(1));
                    } else {
                        clean_all(&s);
                    }
                }
                Err(e) => panic!("remove: {e}: {:#?}", s.stats().log),
            }
        }
    }
    // Writes succeed again once the cleaner has run.
    for i in 0..200 {
        let key = format!("again-{i}").into_bytes();
        let value = pattern(1000, i);
        let v = write_retrying(
            &s,
            background,
            1,
            &key,
            &value,
            if background { 5000 } else { 20 },
        )
        .unwrap_or_else(|e| panic!("write after freeing a third: {e}: {:#?}", s.stats().log));
        objects.push((key, value, v));
    }
    assert_all_readable(&s, &objects);
    assert_eq!(s.stats().objects, objects.len());
    let log = s.stats().log;
    assert!(log.compactions + log.combined_passes > 0, "{log:#?}");
}

/// With the cleaner run by hand: writes end with `NoSpace` once live data fills
/// memory, nothing aborts, every object reads back, deletes work on the delete
/// reserve, and after deleting and cleaning writes succeed again.
#[test]
fn fill_to_the_limit_manual_cleaner_recovers() {
    fill_then_recover(false);
}

/// As `fill_to_the_limit_manual_cleaner_recovers`, with the background cleaner.
#[test]
fn fill_to_the_limit_background_cleaner_recovers() {
    fill_then_recover(true);
}

/// A delete refused with `NoSpace` (delete reserve used up) changes nothing, the
/// master's safe version included: the next new object gets the version it would
/// have got had the delete never been tried (R§3.1 rule, "nothing was changed").
#[test]
fn remove_nospace_leaves_safe_version_unchanged() {
    let s = manual(8 << 20);
    // A key with a high version, longer than every fill key so its tombstone is
    // larger than theirs.
    let hot = b"hot-key-longer-than-the-fill-keys".to_vec();
    let mut hot_version = 0;
    for i in 0..50 {
        hot_version = s.write(1, &hot, &pattern(100, i), &NONE).unwrap();
    }
    assert_eq!(hot_version, 50);
    // Fill with many small new objects (all at version 1: nothing was deleted
    // yet), so there are enough keys for their tombstones to use up the delete
    // reserve.
    let mut keys = Vec::new();
    for i in 0..600_000usize {
        let key = fill_key(i);
        match write_retrying(&s, false, 1, &key, &pattern(16, i as u64), 5) {
            Ok(v) => {
                assert_eq!(v, 1);
                keys.push(key);
            }
            Err(WriteError::NoSpace) => break,
            Err(e) => panic!("{e}"),
        }
    }
    // Delete without cleaning until even deletes get NoSpace.
    let mut deleted = 0;
    let refused = keys.iter().any(|key| match s.remove(1, key, &NONE) {
        Ok(Some(1)) => {
            deleted += 1;
            false
        }
        Err(WriteError::NoSpace) => true,
        other => panic!("remove: {other:?}"),
    });
    assert!(
        refused,
        "{deleted} deletes never exhausted the delete reserve"
    );
    assert!(deleted >= 300, "only {deleted} deletes before NoSpace");
    // Deleting the hot key is refused too...
    assert_eq!(s.remove(1, &hot, &NONE), Err(WriteError::NoSpace));
    let mut buf = Vec::new();
    assert_eq!(s.read(1, &hot, &mut buf), Ok(hot_version));
    // ...so the safe version is still the one the version-1 deletes left: 2.
    let mut n = 0;
    assert_eq!(
        probe_safe_version(&s, &mut n),
        2,
        "a remove that returned NoSpace raised the safe version to {} (hot version + 1)",
        hot_version + 1
    );
}

/// Once writes get `NoSpace`, deletes keep working on the delete reserve (L§7,
/// `lib.rs`: "deletes keep working after writes are refused"), also when the cleaner
/// ran (as the balancer decided) while the log filled up: several hundred deletes
/// in a row succeed without any cleaning in between.
#[test]
fn delete_reserve_survives_cleaning_at_full_memory() {
    let s = manual(8 << 20);
    let mut keys = Vec::new();
    for n in 0..200_000usize {
        // New keys, and every fourth write an overwrite: dead data for the cleaner.
        let i = if n % 4 == 3 {
            (n * 7919) % keys.len()
        } else {
            keys.len()
        };
        let key = fill_key(i);
        let mut result = s.write(1, &key, &[7u8; 1000], &NONE);
        for _ in 0..5 {
            if result != Err(WriteError::NoSpace) {
                break;
            }
            s.clean_now(None);
            result = s.write(1, &key, &[7u8; 1000], &NONE);
        }
        match result {
            Ok(_) if i == keys.len() => keys.push(key),
            Ok(_) => {}
            Err(WriteError::NoSpace) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let log = s.stats().log;
    assert!(log.compactions + log.combined_passes > 0);
    for (j, key) in keys.iter().take(300).enumerate() {
        let got = s.remove(1, key, &NONE);
        assert!(
            matches!(got, Ok(Some(_))),
            "delete #{j} of 300 after writes got NoSpace: {got:?}; the log had {} free \
             seglets when writes stopped: {log:#?}",
            log.seglets_free
        );
    }
}

/// Keys and values over the limits are refused (`KeyTooLarge`, `ValueTooLarge`) by
/// every operation; keys and values exactly at the limits are stored. Nothing
/// changes on a refusal.
#[test]
fn oversize_key_and_value_refused_without_change() {
    // Default 8 MiB segments, so a 1 MiB value fits in one.
    let mut cfg = StoreConfig::new(32 << 20);
    cfg.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(cfg).unwrap();
    s.add_tablet(1, 0, u64::MAX).unwrap();
    let max_key = vec![b'k'; ramstore_log::MAX_KEY_BYTES];
    let long_key = vec![b'k'; ramstore_log::MAX_KEY_BYTES + 1];
    let max_value = pattern(ramstore_log::MAX_VALUE_BYTES, 1);
    let long_value = vec![0u8; ramstore_log::MAX_VALUE_BYTES + 1];
    assert_eq!(ramstore_log::MAX_KEY_BYTES, 65535);
    assert_eq!(ramstore_log::MAX_VALUE_BYTES, 1 << 20);

    let v1 = s.write(1, b"k", b"old", &NONE).unwrap();
    let mut n = 0;
    let safe = probe_safe_version(&s, &mut n);
    let objects = s.stats().objects;

    assert_eq!(
        s.write(1, &long_key, b"v", &NONE),
        Err(WriteError::KeyTooLarge(65536))
    );
    let mut buf = Vec::new();
    assert_eq!(
        s.read(1, &long_key, &mut buf),
        Err(ReadError::KeyTooLarge(65536))
    );
    assert_eq!(
        s.remove(1, &long_key, &NONE),
        Err(WriteError::KeyTooLarge(65536))
    );
    assert_eq!(
        s.increment_i64(1, &long_key, 1, &NONE),
        Err(WriteError::KeyTooLarge(65536))
    );
    assert_eq!(
        s.increment_f64(1, &long_key, 1.0, &NONE),
        Err(WriteError::KeyTooLarge(65536))
    );
    assert_eq!(
        s.write(1, b"k", &long_value, &NONE),
        Err(WriteError::ValueTooLarge(long_value.len()))
    );
    assert_eq!(
        s.multi_write(&[ramstore_master::MultiWrite {
            table_id: 1,
            key: b"k",
            value: &long_value,
            rules: NONE,
        }]),
        vec![Err(WriteError::ValueTooLarge(long_value.len()))]
    );
    assert_eq!(s.read(1, b"k", &mut buf), Ok(v1));
    assert_eq!(buf, b"old");
    assert_eq!(s.stats().objects, objects);
    assert_eq!(probe_safe_version(&s, &mut n), safe);

    // At the limits: stored and read back.
    let v = s.write(1, &max_key, &max_value, &NONE).unwrap();
    assert_eq!(s.read(1, &max_key, &mut buf), Ok(v));
    assert!(buf == max_value);
    assert_eq!(s.remove(1, &max_key, &NONE), Ok(Some(v)));
}

/// With tiny segments, an entry larger than about half a segment is refused as
/// `ValueTooLarge` (value or key), while one that fits is stored; nothing changes on
/// a refusal.
#[test]
fn entry_too_large_for_segment_refused_without_change() {
    let s = store(4 << 20, 128 << 10, CleanerMode::Manual, true);
    let max = s.log().max_entry_bytes();
    assert!(max < 64 << 10, "max entry {max}");
    let v1 = s.write(1, b"k", b"old", &NONE).unwrap();
    let mut n = 0;
    let safe = probe_safe_version(&s, &mut n);
    let objects = s.stats().objects;
    for len in [max, max + 1, 64 << 10, 200 << 10] {
        match s.write(1, b"k", &vec![1u8; len], &NONE) {
            Err(WriteError::ValueTooLarge(got)) => assert!(got >= len, "{got} < {len}"),
            other => panic!("value of {len} bytes (max entry {max}): {other:?}"),
        }
    }
    // A key too large for the segment (but below the key limit).
    let big_key = vec![b'x'; 60 << 10];
    assert!(matches!(
        s.write(1, &big_key, b"v", &NONE),
        Err(WriteError::ValueTooLarge(_))
    ));
    let mut buf = Vec::new();
    assert_eq!(
        s.read(1, &big_key, &mut buf),
        Err(ReadError::ObjectDoesntExist)
    );
    assert_eq!(s.read(1, b"k", &mut buf), Ok(v1));
    assert_eq!(buf, b"old");
    assert_eq!(s.stats().objects, objects);
    assert_eq!(probe_safe_version(&s, &mut n), safe);
    // The largest value that fits is stored and survives cleaning.
    let fits = pattern(max - 64, 3);
    let v = s.write(1, b"k", &fits, &NONE).unwrap();
    assert_eq!(v, v1 + 1);
    for i in 0..300 {
        write_retrying(
            &s,
            false,
            1,
            format!("f{}", i % 20).as_bytes(),
            &pattern(20_000, i),
            20,
        )
        .unwrap();
    }
    assert_eq!(s.read(1, b"k", &mut buf), Ok(v));
    assert!(buf == fits);
}

/// Operations on a table this master does not own, or on a key outside the owned
/// range of a table, return `UnknownTablet` and change nothing.
#[test]
fn unknown_tablet_refused_without_change() {
    let s = manual(8 << 20);
    // Table 2 owns only the lower half of the hash space.
    s.add_tablet(2, 0, u64::MAX / 2).unwrap();
    let outside = (0..)
        .map(|i: u32| format!("key{i}").into_bytes())
        .find(|k| key_hash(k) > u64::MAX / 2)
        .unwrap();
    let mut n = 0;
    let safe = probe_safe_version(&s, &mut n);
    let objects = s.stats().objects;
    let mut buf = Vec::new();
    for (table, key) in [(5u64, b"k".to_vec()), (2, outside.clone())] {
        assert_eq!(
            s.write(table, &key, b"v", &NONE),
            Err(WriteError::UnknownTablet)
        );
        assert_eq!(s.read(table, &key, &mut buf), Err(ReadError::UnknownTablet));
        assert_eq!(s.remove(table, &key, &NONE), Err(WriteError::UnknownTablet));
        assert_eq!(
            s.increment_i64(table, &key, 1, &NONE),
            Err(WriteError::UnknownTablet)
        );
        assert_eq!(
            s.increment_f64(table, &key, 1.0, &NONE),
            Err(WriteError::UnknownTablet)
        );
        assert_eq!(
            s.multi_read(&[(table, key.as_slice())]),
            vec![Err(ReadError::UnknownTablet)]
        );
        assert_eq!(
            s.multi_remove(&[(table, key.as_slice(), NONE)]),
            vec![Err(WriteError::UnknownTablet)]
        );
    }
    let mut out = Vec::new();
    assert_eq!(
        s.enumerate(5, 0, 1000, &mut out),
        Err(ReadError::UnknownTablet)
    );
    assert_eq!(
        s.enumerate(2, u64::MAX / 2 + 1, 1000, &mut out),
        Err(ReadError::UnknownTablet)
    );
    assert!(out.is_empty());
    assert_eq!(s.stats().objects, objects);
    assert_eq!(probe_safe_version(&s, &mut n), safe);
}

/// Counters are decimal text, as in Redis: increments read and write it. A value
/// that is not such a number (including the old 8-byte binary form) is
/// `NotNumeric(len)`; i64 overflow and a non-finite f64 result are `Overflow`; a
/// refused increment changes nothing (and creates nothing for a missing key).
/// Successful increments follow the version rule and create missing objects from 0.
#[test]
fn increment_errors_change_nothing() {
    let s = manual(8 << 20);
    let mut buf = Vec::new();
    let mut n = 0;
    let safe = probe_safe_version(&s, &mut n);

    // A missing object counts as 0 and is created at the safe version.
    assert_eq!(s.increment_i64(1, b"i", 5, &NONE), Ok((5, safe)));
    assert_eq!(s.increment_f64(1, b"f", 0.5, &NONE), Ok((0.5, safe)));
    assert_eq!(s.increment_i64(1, b"i", -7, &NONE), Ok((-2, safe + 1)));
    assert_eq!(s.read(1, b"i", &mut buf), Ok(safe + 1));
    assert_eq!(buf, b"-2");
    assert_eq!(s.read(1, b"f", &mut buf), Ok(safe));
    assert_eq!(buf, b"0.5");
    // Text written by anyone is a counter; an integer is a float too.
    let v41 = s.write(1, b"t", b"41", &NONE).unwrap();
    assert_eq!(s.increment_i64(1, b"t", 1, &NONE), Ok((42, v41 + 1)));
    assert_eq!(s.increment_f64(1, b"t", 0.5, &NONE), Ok((42.5, v41 + 2)));
    assert_eq!(s.read(1, b"t", &mut buf), Ok(v41 + 2));
    assert_eq!(buf, b"42.5");

    // Not numeric: empty, binary (the old 8-byte counter form), non-canonical or
    // spaced integers, and text too long to be a counter.
    let long = vec![b'1'; 401];
    for value in [
        &b""[..],
        &[3u8; 7][..],
        &1i64.to_le_bytes()[..],
        b"+1",
        b" 1",
        b"01",
        b"abc",
        &long,
    ] {
        let key = format!("text{}", value.len());
        let v = s.write(1, key.as_bytes(), value, &NONE).unwrap();
        assert_eq!(
            s.increment_i64(1, key.as_bytes(), 1, &NONE),
            Err(WriteError::NotNumeric(value.len()))
        );
        assert_eq!(s.read(1, key.as_bytes(), &mut buf), Ok(v));
        assert_eq!(buf, value);
    }
    // INCRBYFLOAT reads what INCR does not ("+1", "1.5") but not the rest.
    for value in [&b""[..], &1i64.to_le_bytes()[..], b" 1", b"abc", b"inf"] {
        let key = format!("float{}", String::from_utf8_lossy(value));
        let v = s.write(1, key.as_bytes(), value, &NONE).unwrap();
        assert_eq!(
            s.increment_f64(1, key.as_bytes(), 1.0, &NONE),
            Err(WriteError::NotNumeric(value.len()))
        );
        assert_eq!(s.read(1, key.as_bytes(), &mut buf), Ok(v));
    }
    let v = s.write(1, b"half", b"1.5", &NONE).unwrap();
    assert_eq!(
        s.increment_i64(1, b"half", 1, &NONE),
        Err(WriteError::NotNumeric(3))
    );
    assert_eq!(s.increment_f64(1, b"half", 1.0, &NONE), Ok((2.5, v + 1)));

    // i64 overflow, both ways.
    let max = i64::MAX.to_string();
    let vmax = s.write(1, b"max", max.as_bytes(), &NONE).unwrap();
    assert_eq!(
        s.increment_i64(1, b"max", 1, &NONE),
        Err(WriteError::Overflow)
    );
    assert_eq!(
        s.increment_i64(1, b"max", i64::MAX, &NONE),
        Err(WriteError::Overflow)
    );
    assert_eq!(s.read(1, b"max", &mut buf), Ok(vmax));
    assert_eq!(buf, max.as_bytes());
    let min = i64::MIN.to_string();
    let vmin = s.write(1, b"min", min.as_bytes(), &NONE).unwrap();
    assert_eq!(
        s.increment_i64(1, b"min", -1, &NONE),
        Err(WriteError::Overflow)
    );
    assert_eq!(s.read(1, b"min", &mut buf), Ok(vmin));
    assert_eq!(buf, min.as_bytes());
    assert_eq!(
        s.increment_i64(1, b"max", -1, &NONE),
        Ok((i64::MAX - 1, vmax + 1))
    );

    // f64 to infinity or NaN.
    let big = format!("{}", f64::MAX);
    let vbig = s.write(1, b"big", big.as_bytes(), &NONE).unwrap();
    for delta in [f64::MAX, f64::INFINITY, f64::NAN] {
        assert_eq!(
            s.increment_f64(1, b"big", delta, &NONE),
            Err(WriteError::Overflow)
        );
    }
    assert_eq!(
        s.increment_f64(1, b"big", -f64::INFINITY, &NONE),
        Err(WriteError::Overflow)
    );
    assert_eq!(s.read(1, b"big", &mut buf), Ok(vbig));
    assert_eq!(buf, big.as_bytes());

    // Refused increments of missing keys create nothing.
    let objects = s.stats().objects;
    assert_eq!(
        s.increment_f64(1, b"absent", f64::INFINITY, &NONE),
        Err(WriteError::Overflow)
    );
    assert_eq!(
        s.increment_i64(1, b"absent", 1, &RejectRules::must_exist()),
        Err(WriteError::ObjectDoesntExist)
    );
    assert_eq!(
        s.read(1, b"absent", &mut buf),
        Err(ReadError::ObjectDoesntExist)
    );
    assert_eq!(s.stats().objects, objects);
    // Reject rules are checked before the value is looked at.
    assert_eq!(
        s.increment_i64(1, b"text7", 1, &RejectRules::must_not_exist()),
        Err(WriteError::ObjectExists)
    );
    assert_eq!(probe_safe_version(&s, &mut n), safe);
}

/// Conditional operations refused by their reject rules change nothing.
#[test]
fn reject_rules_refusals_change_nothing() {
    let s = manual(8 << 20);
    let mut buf = Vec::new();
    let v = s.write(1, b"k", b"v1", &NONE).unwrap();
    let v2 = s
        .write(1, b"k", b"v2", &RejectRules::version_must_equal(v))
        .unwrap();
    assert_eq!(v2, v + 1);
    let mut n = 0;
    let safe = probe_safe_version(&s, &mut n);
    assert_eq!(
        s.write(1, b"k", b"x", &RejectRules::version_must_equal(v)),
        Err(WriteError::WrongVersion { current: v2 })
    );
    assert_eq!(
        s.write(1, b"k", b"x", &RejectRules::must_not_exist()),
        Err(WriteError::ObjectExists)
    );
    assert_eq!(
        s.write(1, b"k", b"x", &RejectRules::version_must_be_at_most(v)),
        Err(WriteError::WrongVersion { current: v2 })
    );
    assert_eq!(
        s.remove(1, b"k", &RejectRules::version_must_equal(v)),
        Err(WriteError::WrongVersion { current: v2 })
    );
    assert_eq!(
        s.write(1, b"new", b"x", &RejectRules::must_exist()),
        Err(WriteError::ObjectDoesntExist)
    );
    assert_eq!(
        s.remove(1, b"new", &RejectRules::must_exist()),
        Err(WriteError::ObjectDoesntExist)
    );
    assert_eq!(s.remove(1, b"new", &NONE), Ok(None));
    assert_eq!(s.read(1, b"k", &mut buf), Ok(v2));
    assert_eq!(buf, b"v2");
    assert_eq!(
        s.read(1, b"new", &mut buf),
        Err(ReadError::ObjectDoesntExist)
    );
    // Refused deletes did not raise the safe version.
    assert_eq!(probe_safe_version(&s, &mut n), safe);
    assert_eq!(
        s.remove(1, b"k", &RejectRules::version_must_equal(v2)),
        Ok(Some(v2))
    );
    assert_eq!(probe_safe_version(&s, &mut n), v2 + 1);
}

fn recreate_after_delete(compaction: bool) {
    let s = store(8 << 20, 512 << 10, CleanerMode::Manual, compaction);
    s.add_tablet(2, 0, u64::MAX).unwrap();
    let mut buf = Vec::new();
    // Create, delete, create again: the new object's version is higher.
    let v1 = s.write(1, b"k", b"a", &NONE).unwrap();
    assert_eq!(s.remove(1, b"k", &NONE), Ok(Some(v1)));
    let v2 = s.write(1, b"k", b"b", &NONE).unwrap();
    assert!(v2 > v1, "{v2} <= {v1}");
    assert_eq!(v2, v1 + 1);
    // Push the key's version up, delete it, and let cleaning drop its tombstone.
    let mut v = v2;
    for i in 0..40 {
        v = s.write(1, b"k", &pattern(50, i), &NONE).unwrap();
    }
    assert_eq!(v, v2 + 40);
    assert_eq!(s.remove(1, b"k", &NONE), Ok(Some(v)));
    assert!(s.stats().log.tombstone_bytes > 0);
    // Churn that appends no tombstones (new keys in table 2, dropped whole with their
    // tablet now and then) until cleaning has dropped every tombstone in the log,
    // the delete's included.
    let mut i = 0u64;
    while s.stats().log.tombstone_bytes > 0 {
        i += 1;
        assert!(
            i < 200_000,
            "tombstones never cleaned: {:#?}",
            s.stats().log
        );
        let key = format!("churn{i}");
        write_retrying(&s, false, 2, key.as_bytes(), &pattern(2000, i), 20)
            .unwrap_or_else(|e| panic!("churn write {i}: {e}: {:#?}", s.stats()));
        if i.is_multiple_of(1500) {
            s.drop_tablet(2, 0, u64::MAX);
            s.add_tablet(2, 0, u64::MAX).unwrap();
        }
        if i.is_multiple_of(500) {
            s.clean_now(Some(CleanKind::Combined));
        }
    }
    assert!(s.stats().log.combined_passes > 0);
    assert_eq!(s.read(1, b"k", &mut buf), Err(ReadError::ObjectDoesntExist));
    // Re-created in the same table, and a new key in another table: both above v.
    let v3 = s.write(1, b"k", b"c", &NONE).unwrap();
    assert!(v3 > v, "re-created at version {v3} <= deleted version {v}");
    let other = s.write(2, b"fresh", b"c", &NONE).unwrap();
    assert!(other > v, "{other} <= {v}");
}

/// Versions of a key grow across delete and re-create, also after heavy cleaning
/// (two-level) dropped the delete's tombstone; the safe version is per master, shared
/// by all tables.
#[test]
fn versions_monotonic_across_delete_and_recreate_two_level() {
    recreate_after_delete(true);
}

/// As `versions_monotonic_across_delete_and_recreate_two_level`, with one-level
/// cleaning.
#[test]
fn versions_monotonic_across_delete_and_recreate_one_level() {
    recreate_after_delete(false);
}

/// A background cleaner at full memory neither aborts nor loses objects, and a
/// full store keeps answering reads while writes are refused.
#[test]
fn full_store_keeps_serving_reads_background() {
    let s = store(
        4 << 20,
        512 << 10,
        CleanerMode::Background { threads: 2 },
        true,
    );
    let objects = fill(&s, true);
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        assert_all_readable(&s, &objects[..objects.len().min(500)]);
    }
    assert_all_readable(&s, &objects);
}

fn overwrite_hot_keys(s: &ObjectStore, keys: usize, writes: u64) {
    for i in 0..writes {
        let key = format!("hot{}", i as usize % keys);
        let value = pattern(500 + (i as usize * 7) % 1000, i);
        let mut result = s.write(1, key.as_bytes(), &value, &NONE);
        let mut tries = 0;
        while result == Err(WriteError::NoSpace) && tries < 20 {
            tries += 1;
            s.clean_now(None);
            s.clean_now(Some(CleanKind::Combined));
            result = s.write(1, key.as_bytes(), &value, &NONE);
        }
        let log = s.stats().log;
        assert!(
            result.is_ok(),
            "write {i}: {result:?} after {tries} cleaning rounds, with only {} live bytes \
             of {} and {} dead: {log:#?}",
            log.live_object_bytes,
            log.memory_bytes,
            log.dead_bytes
        );
    }
}

/// One-level cleaning (combined only) keeps a store with little live data writable
/// whatever the segment size: with the smallest segments (128 KiB), hot overwrites
/// of ~600 KB of live data in 4 MiB never end in a lasting `NoSpace`.
#[test]
fn one_level_small_segments_keep_accepting_writes() {
    let s = store(4 << 20, 128 << 10, CleanerMode::Manual, false);
    overwrite_hot_keys(&s, 600, 40_000);
}

/// As `one_level_small_segments_keep_accepting_writes`, with two-level cleaning.
#[test]
fn two_level_small_segments_keep_accepting_writes() {
    let s = store(4 << 20, 128 << 10, CleanerMode::Manual, true);
    overwrite_hot_keys(&s, 600, 40_000);
}

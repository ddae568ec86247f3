//! The pool's reserves (L§7): the delete reserve is a share of memory up to a cap,
//! so large servers do not hold back memory that holds no data.

use ramstore_log::{AppendError, Log, LogConfig, NewObject, MAX_DELETE_RESERVE_BYTES, SEGLET_BYTES};

fn delete_seglets(memory_bytes: usize) -> usize {
    let log = Log::new(LogConfig::new(memory_bytes)).expect("log");
    log.pool().reserves().delete_seglets
}

#[test]
fn new_delete_reserve_is_a_fifth_of_a_percent_of_a_small_log() {
    // 128 MiB = 2,048 seglets: 0.2% is 4 seglets (256 KiB), under the cap.
    assert_eq!(delete_seglets(128 << 20), 4);
}

/// Regression (issue 17, session 28): at 1% the delete reserve made a 128 MiB
/// log hold back 2.2% of its memory (45 seglets with the cleaner's 23 and the
/// emergency heads' 2) where 1 GiB holds back 0.4%; at 90% utilisation that is a
/// fifth of the memory compaction wins dead objects back from.
#[test]
fn new_reserves_of_a_128_mib_log_hold_back_under_one_and_a_half_percent() {
    let log = Log::new(LogConfig::new(128 << 20)).expect("log");
    let r = log.pool().reserves();
    let held = r.emergency_seglets + r.cleaner_seglets + r.delete_seglets;
    let share = held as f64 / log.pool().seglet_count() as f64;
    assert!(
        share < 0.015,
        "{held} seglets, {:.2}% of memory",
        share * 100.0
    );
}

#[test]
fn new_delete_reserve_is_capped_in_a_large_log() {
    // 1 GiB: 0.2% is just over the cap (2.1 MB); 4 GiB: four times it.
    assert_eq!(
        delete_seglets(1 << 30),
        MAX_DELETE_RESERVE_BYTES / SEGLET_BYTES
    );
    assert_eq!(
        delete_seglets(4 << 30),
        MAX_DELETE_RESERVE_BYTES / SEGLET_BYTES
    );
}

#[test]
fn new_delete_reserve_never_falls_below_two_seglets() {
    let mut config = LogConfig::new(64 << 20);
    config.delete_reserve_fraction = 0.0;
    let log = Log::new(config).expect("log");
    assert_eq!(log.pool().reserves().delete_seglets, 2);
}

fn object<'a>(key: &'a [u8], value: &'a [u8]) -> NewObject<'a> {
    NewObject {
        table_id: 1,
        key,
        version: 1,
        value,
    }
}

/// Regression (issue 17, session 28): the cleaner's reserve was sized for the
/// longest entry a segment could hold (23 seglets) whatever the log held; a log
/// of entries up to a seglet long needs the up-front seglets of a one-segment
/// pass over such entries (5) plus slack, so it keeps 6.
#[test]
fn new_cleaner_reserve_is_sized_for_entries_up_to_a_seglet() {
    let log = Log::new(LogConfig::new(128 << 20)).expect("log");
    assert_eq!(log.pool().reserves().cleaner_seglets, 6);
    assert_eq!(log.covered_entry_bytes(), SEGLET_BYTES);
}

#[test]
fn append_object_of_small_entries_keeps_the_cleaner_reserve() {
    let log = Log::new(LogConfig::new(64 << 20)).expect("log");
    let before = log.pool().reserves().cleaner_seglets;
    let value = vec![7u8; 60_000];
    for i in 0..100u32 {
        let key = i.to_le_bytes();
        log.append_object(&object(&key, &value), None)
            .expect("append");
    }
    assert_eq!(log.pool().reserves().cleaner_seglets, before);
}

/// The liveness rule: a longer entry than the reserve covers is written only after
/// the reserve has grown to cover it.
#[test]
fn append_object_grows_the_cleaner_reserve_before_a_longer_entry() {
    let log = Log::new(LogConfig::new(64 << 20)).expect("log");
    let value = vec![7u8; 500_000];
    log.append_object(&object(b"big", &value), None)
        .expect("append");
    assert!(log.covered_entry_bytes() > 500_000);
    let want = log.cleaner_reserve_seglets_for(log.covered_entry_bytes());
    assert_eq!(log.pool().reserves().cleaner_seglets, want);
    // 64 KiB of batch span plus the entry, plus a partial seglet at each end, plus
    // the one-segment pass's seglet and the slack: more than the 6 of short entries.
    assert!(want >= 13, "reserve of {want} seglets");
}

/// With memory too short for the larger reserve, the longer entry is refused
/// (NO_SPACE) and the reserve and the bound stay as they were, so the passes
/// already possible stay possible.
#[test]
fn append_object_answers_no_space_when_the_larger_reserve_is_not_free() {
    let log = Log::new(LogConfig::new(32 << 20)).expect("log");
    let small = vec![1u8; 1_000];
    let mut i = 0u64;
    loop {
        let key = i.to_le_bytes();
        match log.append_object(&object(&key, &small), None) {
            Ok(_) => i += 1,
            Err(AppendError::NoSpace) => break,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    let before = log.pool().reserves();
    let covered = log.covered_entry_bytes();
    let big = vec![2u8; 500_000];
    assert_eq!(
        log.append_object(&object(b"big", &big), None),
        Err(AppendError::NoSpace)
    );
    assert_eq!(log.pool().reserves(), before);
    assert_eq!(log.covered_entry_bytes(), covered);
}

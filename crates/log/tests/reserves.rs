//! The pool's reserves (L§7): the delete reserve is a share of memory up to a cap,
//! so large servers do not hold back memory that holds no data.

use ramstore_log::{Log, LogConfig, MAX_DELETE_RESERVE_BYTES, SEGLET_BYTES};

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

//! The pool's reserves (L§7): the delete reserve is a share of memory up to a cap,
//! so large servers do not hold back memory that holds no data.

use ramstore_log::{Log, LogConfig, MAX_DELETE_RESERVE_BYTES, SEGLET_BYTES};

fn delete_seglets(memory_bytes: usize) -> usize {
    let log = Log::new(LogConfig::new(memory_bytes)).expect("log");
    log.pool().reserves().delete_seglets
}

#[test]
fn new_delete_reserve_is_one_percent_of_a_small_log() {
    // 64 MiB = 1,024 seglets: 1% is 10 seglets (640 KiB), under the cap.
    assert_eq!(delete_seglets(64 << 20), 10);
}

#[test]
fn new_delete_reserve_is_capped_in_a_large_log() {
    // 1 GiB: 1% would be 163 seglets (10 MiB).
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

//! How much free memory the cleaner works to keep ahead of writers (L§5.2's
//! balancer, `balancer::choose`): at most two segments, and at most 1/64 of memory.

use ramstore_log::balancer::CLEAN_AHEAD_MAX_MEMORY_SHARE;
use ramstore_log::{Cleaner, Log, LogConfig};

fn clean_ahead_fraction(memory_bytes: usize) -> f64 {
    let log = Log::new(LogConfig::new(memory_bytes)).expect("log");
    Cleaner::new(&log).balancer_input().clean_ahead_fraction
}

/// Regression (issue 17, session 28): two 8 MiB segments are 1/8 of 128 MiB, so
/// (1−L)/2 decided alone and at 90% the cleaner kept up to 5% of memory free
/// instead of letting dead objects gather; it copied 15–18 bytes per byte written
/// where 1/64 of memory gave 11.3–11.5.
#[test]
fn balancer_input_clean_ahead_of_a_128_mib_log_is_at_most_a_64th_of_memory() {
    assert_eq!(
        clean_ahead_fraction(128 << 20),
        CLEAN_AHEAD_MAX_MEMORY_SHARE
    );
}

#[test]
fn balancer_input_clean_ahead_of_a_large_log_is_two_segments() {
    // 1 GiB: two 8 MiB segments are exactly the share; 4 GiB: half of it.
    assert_eq!(clean_ahead_fraction(1 << 30), 1.0 / 64.0);
    assert_eq!(clean_ahead_fraction(4 << 30), 1.0 / 256.0);
}

#[test]
fn balancer_input_clean_ahead_of_zero_segments_is_no_cap() {
    let mut config = LogConfig::new(128 << 20);
    config.clean_ahead_segments = 0;
    let log = Log::new(config).expect("log");
    assert_eq!(
        Cleaner::new(&log).balancer_input().clean_ahead_fraction,
        1.0
    );
}

//! The background cleaner's pacing (L§6, `cleaner_thread`) on a manual clock: an
//! idle cleaner asks the balancer again every `CLEANER_IDLE_INTERVAL_MS` of its
//! store's clock, and a writer reaching a new head wakes it at once, from which
//! instant it paces itself again. Asserted at exact simulated instants.

use std::time::{Duration, Instant};

use ramstore_clock::ManualClock;
use ramstore_master::{
    CleanerMode, ObjectStore, RejectRules, StoreConfig, CLEANER_IDLE_INTERVAL_MS,
};

/// Waits (real time, bounded) until the threads waiting on `clock` wait for
/// exactly `want`: the cleaner thread gets there on its own schedule.
fn waits_for(clock: &ManualClock, want: &[Instant]) -> bool {
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < give_up {
        if clock.sleepers() == want {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

#[test]
fn idle_cleaner_waits_the_idle_interval_of_its_clock_and_a_new_head_wakes_it() {
    let clock = ManualClock::new();
    let mut config = StoreConfig::new(16 << 20);
    config.cleaner = CleanerMode::Background { threads: 1 };
    config.clock = clock.handle();
    let store = ObjectStore::new(config).expect("store");
    let idle = Duration::from_millis(CLEANER_IDLE_INTERVAL_MS);
    let origin = clock.origin();
    assert!(
        waits_for(&clock, &[origin + idle]),
        "{:?}",
        clock.sleepers()
    );
    // 99 ms: still waiting for the same instant.
    clock.advance(idle - Duration::from_millis(1));
    assert!(
        waits_for(&clock, &[origin + idle]),
        "{:?}",
        clock.sleepers()
    );
    // 100 ms: it looks, finds nothing to do, and waits another interval.
    clock.advance(Duration::from_millis(1));
    assert!(
        waits_for(&clock, &[origin + 2 * idle]),
        "{:?}",
        clock.sleepers()
    );
    // 150 ms: the first write reaches a new head and wakes it at once; it paces
    // itself from there.
    clock.advance(idle / 2);
    store.add_tablet(1, 0, u64::MAX).expect("tablet");
    store
        .write(1, b"k", b"v", &RejectRules::default())
        .expect("write");
    let woken_at = origin + idle + idle / 2;
    assert!(
        waits_for(&clock, &[woken_at + idle]),
        "{:?}",
        clock.sleepers()
    );
    drop(store);
    assert!(clock.sleepers().is_empty(), "stopping ends the wait");
}

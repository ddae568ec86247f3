//! The log's live and tombstone totals while a combined pass runs (L§5.2): every
//! entry counted once, so the balancer decides from what memory really holds.

use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use ramstore_log::{CleanKind, ReplicaSink};
use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig};

const TABLE: u64 = 1;

/// A sink that holds a combined pass where its survivors are copied and counted but
/// its victims not yet gone (`sync_closed`), until the test lets it go on.
#[derive(Default)]
struct GateSink {
    state: Mutex<Gate>,
    changed: Condvar,
}

#[derive(Default)]
struct Gate {
    armed: bool,
    reached: bool,
    released: bool,
}

impl GateSink {
    fn wait_reached(&self) {
        let mut g = self.state.lock().unwrap();
        while !g.reached {
            let (next, timeout) = self
                .changed
                .wait_timeout(g, Duration::from_secs(60))
                .unwrap();
            assert!(!timeout.timed_out(), "the pass never reached the gate");
            g = next;
        }
    }

    fn release(&self) {
        self.state.lock().unwrap().released = true;
        self.changed.notify_all();
    }
}

impl ReplicaSink for GateSink {
    fn replicate(&self, _segment_id: u64, _offset: usize, _len: usize) {}
    fn close(&self, _segment_id: u64) {}
    fn cleaned(&self, _survivors: &[u64], _freed: &[u64]) {}
    fn durable_on_close(&self) -> bool {
        true
    }
    fn sync_closed(&self, segment_ids: &[u64]) {
        let mut g = self.state.lock().unwrap();
        if !g.armed || segment_ids.is_empty() {
            return;
        }
        g.reached = true;
        self.changed.notify_all();
        while !g.released {
            g = self.changed.wait(g).unwrap();
        }
    }
}

/// Regression (issue 17, session 29): a combined pass counted each object it
/// relocated in its survivor as well as in its victim until the victim left the log,
/// so for as long as the pass copied and replicated, the live total was too high —
/// 0.937 of memory at a 90% benchmark point (docs/benchmarks.md) — and the balancer
/// forced combined cleaning for tombstones that were a smaller share than it saw.
#[test]
fn stats_during_combined_pass_count_each_relocated_object_once() {
    let sink = Arc::new(GateSink::default());
    let mut cfg = StoreConfig::new(64 << 20);
    cfg.segment_bytes = 8 << 20;
    cfg.cleaner = CleanerMode::Manual;
    cfg.replicas = sink.clone();
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    let rules = RejectRules::default();
    let key = |i: u64| format!("key-{i:08}").into_bytes();
    // Three segments' worth of objects, then every other one overwritten: the
    // early segments are half dead, so a combined pass relocates their other half.
    let n = 200_000u64;
    for i in 0..n {
        s.write(TABLE, &key(i), &[7u8; 100], &rules).expect("room");
    }
    for i in (0..n).step_by(2) {
        s.write(TABLE, &key(i), &[8u8; 100], &rules).expect("room");
    }
    assert!(s.log().roll_head_now());
    let before = s.stats().log;

    sink.state.lock().unwrap().armed = true;
    thread::scope(|scope| {
        let pass = scope.spawn(|| s.clean_now(Some(CleanKind::Combined)));
        sink.wait_reached();
        let during = s.stats().log;
        sink.release();
        let (kind, outcome) = pass.join().unwrap().expect("a combined pass ran");
        assert_eq!(kind, CleanKind::Combined);
        assert!(
            outcome.bytes_copied > 0,
            "the pass relocated objects: {outcome:?}"
        );
        assert_eq!(
            during.live_object_bytes, before.live_object_bytes,
            "live bytes mid-pass (relocated {} bytes)",
            outcome.bytes_copied
        );
        assert!(during.tombstone_bytes <= before.tombstone_bytes);
    });
    let after = s.stats().log;
    assert_eq!(after.live_object_bytes, before.live_object_bytes);
    s.log()
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
}

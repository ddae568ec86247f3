//! Regression (memory benchmark W3/W5/W8 stalled): a store that deletes most of its
//! objects and then fills up again with new, larger ones must get there.
//!
//! Deleting 90% of a full store leaves a log full of tombstones. They die when combined
//! cleaning removes the segments of the objects they killed — but they used to keep
//! counting as live until their own segment happened to be scanned, so every segment
//! looked full, compaction found nothing to gain and writes got `NoSpace` for ever.
//! Here the refill must complete with the cleaner run by hand (deterministic) and on
//! its own thread, every object must read back, and the tombstone accounting must
//! match a scan of the log.

use std::time::{Duration, Instant};

use ramstore_log::CleanKind;
use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig, WriteError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MEMORY_BYTES: usize = 64 << 20;
const SEGMENT_BYTES: usize = 2 << 20;
/// Live key + value bytes kept in the store: high enough that only tombstones that
/// are really collected make room.
const LIVE_TARGET_BYTES: usize = MEMORY_BYTES * 79 / 100;

fn store(cleaner: CleanerMode) -> ObjectStore {
    let mut cfg = StoreConfig::new(MEMORY_BYTES);
    cfg.segment_bytes = SEGMENT_BYTES;
    cfg.cleaner = cleaner;
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(1, 0, u64::MAX).expect("tablet");
    s
}

/// The objects the test believes are live, with their values.
struct Live {
    keys: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    bytes: usize,
}

struct Driver {
    store: ObjectStore,
    manual: bool,
    live: Live,
    next_key: u64,
    rng: StdRng,
}

impl Driver {
    fn new(cleaner: CleanerMode) -> Self {
        Self {
            manual: cleaner == CleanerMode::Manual,
            store: store(cleaner),
            live: Live {
                keys: Vec::new(),
                values: Vec::new(),
                bytes: 0,
            },
            next_key: 0,
            rng: StdRng::seed_from_u64(7),
        }
    }

    /// Frees memory after `NoSpace`: cleans by hand, or gives the background cleaner a
    /// moment. Fails the test once nothing has helped for a long time.
    fn relieve(&self, started: Instant, what: &str) {
        if self.manual {
            self.store.clean_now(None);
            self.store.clean_now(Some(CleanKind::Compaction));
            self.store.clean_now(Some(CleanKind::Combined));
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: no room for a minute (stalled); {:?}",
            self.store.stats().log
        );
    }

    fn write_new(&mut self, value_len: usize) {
        let key = format!("key-{:08}", self.next_key).into_bytes();
        self.next_key += 1;
        let mut value = vec![0u8; value_len];
        self.rng.fill(&mut value[..]);
        let started = Instant::now();
        loop {
            match self.store.write(1, &key, &value, &RejectRules::default()) {
                Ok(_) => break,
                Err(WriteError::NoSpace) => self.relieve(started, "write"),
                Err(e) => panic!("write: {e}"),
            }
        }
        self.live.bytes += key.len() + value.len();
        self.live.keys.push(key);
        self.live.values.push(value);
    }

    fn delete_random(&mut self) {
        let i = self.rng.gen_range(0..self.live.keys.len());
        let key = self.live.keys.swap_remove(i);
        let value = self.live.values.swap_remove(i);
        let started = Instant::now();
        loop {
            match self.store.remove(1, &key, &RejectRules::default()) {
                Ok(_) => break,
                Err(WriteError::NoSpace) => self.relieve(started, "delete"),
                Err(e) => panic!("delete: {e}"),
            }
        }
        self.live.bytes -= key.len() + value.len();
    }

    /// Allocates `total_bytes` of objects of `value_len` bytes, deleting random live
    /// ones to stay at the live target (one phase of L Table 1).
    fn phase(&mut self, value_len: usize, total_bytes: usize) {
        let mut written = 0;
        while written < total_bytes {
            while self.live.bytes + value_len + 12 > LIVE_TARGET_BYTES {
                self.delete_random();
            }
            self.write_new(value_len);
            written += value_len + 12;
        }
    }

    fn delete_share(&mut self, share: f64) {
        let n = (self.live.keys.len() as f64 * share) as usize;
        for _ in 0..n {
            self.delete_random();
        }
    }

    fn verify(&self) {
        for (key, value) in self.live.keys.iter().zip(&self.live.values) {
            let mut got = Vec::new();
            self.store
                .read(1, key, &mut got)
                .expect("acknowledged object reads back");
            assert!(got == *value, "object {key:?} has a wrong value");
        }
        assert_eq!(self.store.stats().objects, self.live.keys.len());
    }
}

fn mass_delete_then_refill(cleaner: CleanerMode) {
    let mut d = Driver::new(cleaner);
    d.phase(100, 3 * MEMORY_BYTES);
    d.delete_share(0.9);
    d.phase(130, 3 * MEMORY_BYTES);
    d.verify();
    if d.manual {
        d.store
            .log()
            .verify_tombstone_accounting()
            .expect("tombstone accounting matches the log");
    }
}

#[test]
fn mass_delete_then_refill_completes_manual_cleaning() {
    mass_delete_then_refill(CleanerMode::Manual);
}

#[test]
fn mass_delete_then_refill_completes_two_background_cleaners() {
    mass_delete_then_refill(CleanerMode::Background { threads: 2 });
}

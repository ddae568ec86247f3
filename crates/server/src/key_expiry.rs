//! The master's active expirer: deletes expired objects so their memory and
//! the log's story agree with what reads already answer (lazy expiry,
//! `ramstore_master::ObjectStore::expire_tick`).
//!
//! Like Redis's active expiry it samples instead of keeping a sorted index of
//! deadlines (which every write would have to maintain): every `interval_ms`
//! of the server's clock it runs a round of ticks, each examining at most
//! [`EXPIRE_SAMPLE_PER_TICK`] hash-table entries round-robin and deleting the
//! expired ones through the delete path (each gets a tombstone, replicated as
//! any delete's, R§4). A round goes on to another tick while the last one
//! found anything expired, for at most [`MAX_TICKS_PER_ROUND`] ticks: so while
//! keys expire the expirer sweeps the whole table every `entries / 655,360` s
//! (1.5 s for a million objects), and a round with nothing expired costs one
//! tick. Redis's rule, going on only while more than a quarter of a sample had
//! expired, suits its index of keys with a TTL; here a tick examines every
//! object, most of them never expiring, and with a million keys expiring evenly
//! over a minute a tick found far less than a quarter: deletions lagged their
//! deadlines by 10 s (docs/benchmarks.md, issue 24, `scripts/bench-expiry`).
//!
//! **CPU bound:** a round examines at most `MAX_TICKS_PER_ROUND ×
//! EXPIRE_SAMPLE_PER_TICK` = 65,536 entries and deletes at most as many; with
//! the default 100 ms interval that is at most 655,360 entries examined a
//! second, and a round with nothing expired costs one tick (4,096 entries,
//! well under a millisecond).
//!
//! It runs on the Clock seam, so the simulator and tests drive it too; a
//! zombie (R§7.11) stops, since its tablets are being recovered elsewhere.

use std::sync::Arc;
use std::time::Duration;

use ramstore_master::{ExpireTick, ObjectStore, EXPIRE_SAMPLE_PER_TICK};
use tracing::Instrument;

use crate::storage_service::StorageService;

/// Default pause between rounds, in ms (Redis runs its active expiry ten
/// times a second too).
pub const DEFAULT_EXPIRE_INTERVAL_MS: u64 = 100;

/// Most ticks in one round (see the module doc's CPU bound).
pub const MAX_TICKS_PER_ROUND: usize = 16;

/// Starts the expirer for `service`, one round every `interval_ms`; 0 starts
/// nothing. Abort the task to stop.
pub fn start(
    service: Arc<StorageService>,
    interval_ms: u64,
) -> Option<tokio::task::JoinHandle<()>> {
    if interval_ms == 0 {
        return None;
    }
    let task = async move {
        let clock = service.clock.clone();
        let mut tick = ramstore_clock::interval(&clock, Duration::from_millis(interval_ms));
        loop {
            tick.tick().await;
            if service.is_zombie() {
                return;
            }
            let round = round(service.store());
            if round.deleted > 0 {
                tracing::debug!(?round, "expired objects deleted");
            }
        }
    };
    Some(tokio::spawn(task.in_current_span()))
}

/// One round of ticks on `store` (module doc); what they did in total.
pub fn round(store: &ObjectStore) -> ExpireTick {
    let mut total = ExpireTick::default();
    for _ in 0..MAX_TICKS_PER_ROUND {
        let t = store.expire_tick(EXPIRE_SAMPLE_PER_TICK);
        total.examined += t.examined;
        total.deleted += t.deleted;
        if t.deleted == 0 {
            break;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_clock::ManualClock;
    use ramstore_master::{CleanerMode, Expiry, RejectRules, StoreConfig};

    fn store(clock: &ManualClock) -> ObjectStore {
        let mut cfg = StoreConfig::new(64 << 20);
        cfg.cleaner = CleanerMode::Manual;
        cfg.clock = clock.handle();
        let s = ObjectStore::new(cfg).expect("store");
        s.add_tablet(1, 0, u64::MAX).expect("tablet");
        s
    }

    #[test]
    fn round_examines_at_most_its_bound() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let at = s.now_ms() + 1;
        let n = 20 * EXPIRE_SAMPLE_PER_TICK;
        for i in 0..n {
            s.write_expiring(
                1,
                format!("k{i}").as_bytes(),
                b"v",
                &RejectRules::default(),
                Expiry::Set(Some(at)),
            )
            .expect("write");
        }
        clock.advance(Duration::from_millis(1));
        let r = round(&s);
        // Each tick may finish the bucket that reaches its bound (a few
        // entries more); the round stops after MAX_TICKS_PER_ROUND ticks.
        assert!(r.examined <= MAX_TICKS_PER_ROUND * (EXPIRE_SAMPLE_PER_TICK + 64));
        assert!(r.deleted < n, "a round deleted everything: unbounded");
        let mut rounds = 1;
        while s.stats().objects > 0 {
            round(&s);
            rounds += 1;
            assert!(rounds < 10, "the expirer never finished");
        }
    }

    #[test]
    fn round_with_nothing_expired_is_one_tick() {
        let clock = ManualClock::new();
        let s = store(&clock);
        for i in 0..10_000u32 {
            s.write(1, format!("k{i}").as_bytes(), b"v", &RejectRules::default())
                .expect("write");
        }
        let r = round(&s);
        assert_eq!(r.deleted, 0);
        assert!(r.examined <= EXPIRE_SAMPLE_PER_TICK + 64);
        assert_eq!(s.stats().objects, 10_000);
    }

    /// Regression (issue 24, `scripts/bench-expiry`): with Redis's "more than a
    /// quarter expired" rule a round whose ticks found a few expired objects
    /// among many others stopped after one tick, and deletions lagged their
    /// deadlines by 10 s. A round goes on while it finds any.
    #[test]
    fn round_goes_on_while_a_few_expired_are_found() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let at = s.now_ms() + 1;
        for i in 0..(8 * EXPIRE_SAMPLE_PER_TICK) {
            let expiry = if i % 50 == 0 {
                Expiry::Set(Some(at))
            } else {
                Expiry::Set(None)
            };
            s.write_expiring(
                1,
                format!("k{i}").as_bytes(),
                b"v",
                &RejectRules::default(),
                expiry,
            )
            .expect("write");
        }
        clock.advance(Duration::from_millis(1));
        let r = round(&s);
        assert!(
            r.examined >= 4 * EXPIRE_SAMPLE_PER_TICK,
            "the round stopped early: {r:?}"
        );
        assert!(
            r.deleted * 4 < r.examined,
            "the test expects a sparse sample"
        );
    }
}

//! The master's active expirer: deletes expired objects so their memory and
//! the log's story agree with what reads already answer (lazy expiry,
//! `ramstore_master::ObjectStore::expire_tick`).
//!
//! Every `interval_ms` of the server's clock it runs a round:
//!
//! 1. **Due deadlines.** Every write of an object with an expiry notes its key
//!    hash under its deadline's slot (`ramstore_master::deadlines`); the round
//!    takes the notes of slots that have ended, at most
//!    [`MAX_DUE_PER_ROUND`], and deletes the expired objects under them
//!    through the delete path (each gets a tombstone, replicated as any
//!    delete's, R§4). So an object is deleted within a slot (64 ms) and an
//!    interval of its deadline, at one hash-table lookup each.
//! 2. **A sampled sweep**, Redis's way: ticks examining hash-table entries
//!    round-robin. While the index holds every deadline, one small tick a
//!    round is the safety net (at most [`SAFETY_NET_BUCKETS_PER_ROUND`]
//!    buckets: a slow full sweep, whatever the table's size); once it has
//!    dropped notes (full: it is bounded) the round sweeps in earnest —
//!    ticks of at most [`EXPIRE_SAMPLE_PER_TICK`] entries and
//!    [`EXPIRE_BUCKETS_PER_TICK`] buckets, another while the last one found
//!    anything expired, at most [`MAX_TICKS_PER_ROUND`] — until two whole
//!    sweeps have passed.
//!
//! Why not sampling alone: here a tick examines every object, most of them
//! never expiring, and with a million keys expiring evenly over a minute
//! Redis's rule (another tick while a quarter of a sample expired) let
//! deletions lag their deadlines by 10 s, while sweeping until nothing was
//! found kept them within 0.8 s but took a quarter of a GET load's throughput
//! (docs/benchmarks.md, issue 24, `scripts/bench-expiry`).
//!
//! **CPU bound:** a round takes at most `MAX_DUE_PER_ROUND` notes (a lookup
//! each) and examines at most `MAX_TICKS_PER_ROUND × EXPIRE_SAMPLE_PER_TICK`
//! entries in at most `MAX_TICKS_PER_ROUND × EXPIRE_BUCKETS_PER_TICK`
//! buckets; with the default 100 ms interval at most 655,360 notes and
//! entries a second. A round with nothing due and a complete index visits at
//! most 4,096 buckets (about 0.1 ms) however large the table: an idle server
//! costs nothing measurable (before this bound, an idle server with 4 GiB of
//! memory and one key spent 37% of a core sweeping empty buckets).
//!
//! It runs on the Clock seam, so the simulator and tests drive it too; a
//! zombie (R§7.11) stops, since its tablets are being recovered elsewhere.

use std::sync::Arc;
use std::time::Duration;

use ramstore_master::{ExpireTick, ObjectStore, EXPIRE_BUCKETS_PER_TICK, EXPIRE_SAMPLE_PER_TICK};
use tracing::Instrument;

use crate::storage_service::StorageService;

/// Default pause between rounds, in ms (Redis runs its active expiry ten
/// times a second too).
pub const DEFAULT_EXPIRE_INTERVAL_MS: u64 = 100;

/// Most ticks in one round (see the module doc's CPU bound).
pub const MAX_TICKS_PER_ROUND: usize = 16;

/// Most buckets the safety-net tick of a round visits while the deadline
/// index is complete: the sweep then only guards against a note missed, so it
/// may take long (a 24 GiB server's ~40 million buckets in about 17 minutes)
/// but must cost nothing an idle server would notice.
pub const SAFETY_NET_BUCKETS_PER_ROUND: usize = 4_096;

/// Most due deadline notes one round takes (see the module doc's CPU bound).
pub const MAX_DUE_PER_ROUND: usize = 65_536;

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

/// One round on `store` (module doc): due deadlines, then the sweep; what
/// they did in total.
pub fn round(store: &ObjectStore) -> ExpireTick {
    let mut total = store.expire_due(MAX_DUE_PER_ROUND);
    let earnest = !store.deadlines_complete();
    let max_buckets = if earnest {
        EXPIRE_BUCKETS_PER_TICK
    } else {
        SAFETY_NET_BUCKETS_PER_ROUND
    };
    for _ in 0..MAX_TICKS_PER_ROUND {
        let t = store.expire_tick(EXPIRE_SAMPLE_PER_TICK, max_buckets);
        total.examined += t.examined;
        total.buckets += t.buckets;
        total.deleted += t.deleted;
        if !earnest || t.deleted == 0 {
            break;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_clock::ManualClock;
    use ramstore_master::deadlines::DEADLINE_SLOT_MS;
    use ramstore_master::{CleanerMode, Expiry, RejectRules, StoreConfig};

    fn store_with(clock: &ManualClock, max_deadline_notes: Option<usize>) -> ObjectStore {
        let mut cfg = StoreConfig::new(64 << 20);
        cfg.cleaner = CleanerMode::Manual;
        cfg.clock = clock.handle();
        if let Some(n) = max_deadline_notes {
            cfg.max_deadline_notes = n;
        }
        let s = ObjectStore::new(cfg).expect("store");
        s.add_tablet(1, 0, u64::MAX).expect("tablet");
        s
    }

    fn store(clock: &ManualClock) -> ObjectStore {
        store_with(clock, None)
    }

    fn put(s: &ObjectStore, key: &str, expires_at: Option<u64>) {
        s.write_expiring(
            1,
            key.as_bytes(),
            b"v",
            &RejectRules::default(),
            Expiry::Set(expires_at),
        )
        .expect("write");
    }

    /// Writes `n` keys `k{i}`, every `every`-th expiring at `at`.
    fn fill(s: &ObjectStore, n: usize, every: usize, at: u64) {
        for i in 0..n {
            put(s, &format!("k{i}"), (i % every == 0).then_some(at));
        }
    }

    #[test]
    fn round_examines_at_most_its_bound() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let at = s.now_ms() + 1;
        let n = MAX_DUE_PER_ROUND + 20 * EXPIRE_SAMPLE_PER_TICK;
        fill(&s, n, 1, at);
        clock.advance(Duration::from_millis(DEADLINE_SLOT_MS + 1));
        let r = round(&s);
        // Each tick may finish the bucket that reaches its bound (a few
        // entries more); the index gives at most MAX_DUE_PER_ROUND notes.
        assert!(
            r.examined <= MAX_DUE_PER_ROUND + MAX_TICKS_PER_ROUND * (EXPIRE_SAMPLE_PER_TICK + 64),
            "{r:?}"
        );
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
        fill(&s, 10_000, 1, u64::MAX);
        for i in 0..10_000u32 {
            s.write(1, format!("n{i}").as_bytes(), b"v", &RejectRules::default())
                .expect("write");
        }
        let r = round(&s);
        assert_eq!(r.deleted, 0);
        assert!(r.examined <= EXPIRE_SAMPLE_PER_TICK + 64);
        assert_eq!(s.stats().objects, 20_000);
    }

    /// Regression (session 41): the safety-net tick walked buckets until it
    /// had examined its sample, so a large table holding few objects had
    /// every bucket visited ten times a second (an idle server with 4 GiB of
    /// memory and one key: 37% of a core). A round now visits a bounded
    /// number of buckets, and the slow sweep still reaches every bucket.
    #[test]
    fn round_on_a_large_sparse_table_visits_a_bounded_number_of_buckets() {
        let clock = ManualClock::new();
        let mut cfg = StoreConfig::new(256 << 20);
        cfg.cleaner = CleanerMode::Manual;
        cfg.clock = clock.handle();
        let s = ObjectStore::new(cfg).expect("store");
        s.add_tablet(1, 0, u64::MAX).expect("tablet");
        let buckets = s.hash_table_buckets();
        assert!(buckets > 16 * SAFETY_NET_BUCKETS_PER_ROUND, "{buckets}");
        put(&s, "only", None);
        let r = round(&s);
        assert!(r.buckets <= SAFETY_NET_BUCKETS_PER_ROUND, "{r:?}");
        // Every bucket is still visited, one bounded round after another, and
        // the one object is examined in the sweep (twice if the last round
        // wrapped round to its bucket again).
        let (mut visited, mut examined, mut rounds) = (r.buckets, r.examined, 1);
        while visited < buckets {
            let r = round(&s);
            assert!(r.buckets <= SAFETY_NET_BUCKETS_PER_ROUND, "{r:?}");
            visited += r.buckets;
            examined += r.examined;
            rounds += 1;
        }
        assert!(visited - buckets < SAFETY_NET_BUCKETS_PER_ROUND);
        assert!((1..=2).contains(&examined), "examined {examined}");
        assert_eq!(rounds, buckets.div_ceil(SAFETY_NET_BUCKETS_PER_ROUND));
    }

    /// Regression (session 41, `MEMORY=200MiB scripts/bench-expiry`: lag
    /// 5.3 s): objects whose notes were dropped stayed unnoted while two
    /// sweeps passed before their deadline; the index then called itself
    /// complete, and only the slow safety net could find them. The sweeps now
    /// note what they pass, so past the deadline they go within a few rounds.
    #[test]
    fn round_deletes_objects_whose_notes_were_dropped_long_before_their_deadline() {
        let clock = ManualClock::new();
        let s = store_with(&clock, Some(100));
        let at = s.now_ms() + 60_000;
        let n = 1_000;
        fill(&s, n, 1, at);
        assert!(!s.deadlines_complete());
        // Many whole sweeps before the deadline: nothing is expired yet.
        let sweep_rounds = s.hash_table_buckets().div_ceil(EXPIRE_BUCKETS_PER_TICK);
        for _ in 0..10 * sweep_rounds {
            assert_eq!(round(&s).deleted, 0);
        }
        clock.advance(Duration::from_millis(60_000 + DEADLINE_SLOT_MS));
        let mut rounds = 0;
        while s.stats().objects > 0 {
            round(&s);
            rounds += 1;
            assert!(
                rounds <= 2 * sweep_rounds + 2,
                "{} objects left after {rounds} rounds",
                s.stats().objects
            );
        }
    }

    /// Issue 24 (`scripts/bench-expiry`): a few expiring keys among many are
    /// all deleted by one round from the deadline index, and the round
    /// examines about as many entries as there were deadlines, not the table.
    #[test]
    fn round_deletes_due_objects_without_sweeping_the_table() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let at = s.now_ms() + 1;
        let n = 8 * EXPIRE_SAMPLE_PER_TICK;
        fill(&s, n, 50, at);
        let expiring = n.div_ceil(50);
        // Not yet: the deadline's slot has not ended.
        assert_eq!(round(&s).deleted, 0);
        clock.advance(Duration::from_millis(DEADLINE_SLOT_MS + 1));
        let r = round(&s);
        assert_eq!(r.deleted, expiring, "{r:?}");
        assert!(
            r.examined <= expiring + EXPIRE_SAMPLE_PER_TICK + 64,
            "the round swept the table: {r:?}"
        );
        assert_eq!(s.stats().objects, n - expiring);
        assert_eq!(s.deadline_notes(), 0);
    }

    /// A note outlives what it noted: the key rewritten without an expiry, or
    /// with a later one, is not deleted when the old deadline passes.
    #[test]
    fn round_leaves_a_key_rewritten_after_its_note() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let now = s.now_ms();
        put(&s, "forever", Some(now + 1));
        put(&s, "forever", None);
        put(&s, "later", Some(now + 1));
        put(&s, "later", Some(now + 10_000));
        clock.advance(Duration::from_millis(2 * DEADLINE_SLOT_MS));
        assert_eq!(round(&s).deleted, 0);
        assert_eq!(s.stats().objects, 2);
        clock.advance(Duration::from_millis(10_000));
        assert_eq!(round(&s).deleted, 1);
        assert_eq!(s.stats().objects, 1);
    }

    /// When the index is full it drops notes, and the sweep then goes on
    /// while it finds expired objects (the sampled fallback), so the dropped
    /// ones are still deleted within a round or two.
    #[test]
    fn round_sweeps_in_earnest_after_the_index_dropped_notes() {
        let clock = ManualClock::new();
        let s = store_with(&clock, Some(10));
        let at = s.now_ms() + 1;
        let n = 8 * EXPIRE_SAMPLE_PER_TICK;
        fill(&s, n, 50, at);
        assert!(!s.deadlines_complete());
        clock.advance(Duration::from_millis(DEADLINE_SLOT_MS + 1));
        let r = round(&s);
        assert!(
            r.examined >= 4 * EXPIRE_SAMPLE_PER_TICK,
            "the round stopped early: {r:?}"
        );
        let mut rounds = 1;
        while s.stats().objects > n - n.div_ceil(50) {
            round(&s);
            rounds += 1;
            assert!(rounds < 5, "dropped notes were never swept");
        }
    }
}

//! Unlinking emptied overflow tails and reusing them (issue 17): chains shrink when
//! their tails empty, another chain may reuse a bucket while a walk stands in it,
//! and every walk still sees every present entry.

use std::collections::HashSet;

use super::tests::*;
use crate::{HashTable, IndexFull};

/// A hash in main bucket `bucket` of a table of 2^`log2_buckets` buckets, with
/// tag `tag` and `serial` in between (so hashes differ while tags may not).
fn hash_in(log2_buckets: u32, bucket: u64, serial: u64, tag: u64) -> u64 {
    (bucket << (64 - log2_buckets)) | (serial << 16) | tag
}

/// Overflow buckets linked into chains, counted by walking every chain.
fn linked_overflow_buckets(table: &HashTable) -> usize {
    (0..table.bucket_count())
        .map(|b| table.chain_buckets(b) - 1)
        .sum()
}

/// Checks the arena's counters against the chains.
fn check_overflow_counters(table: &HashTable) {
    assert_eq!(
        table.overflow_buckets_in_use(),
        linked_overflow_buckets(table)
    );
    assert_eq!(
        table.overflow_buckets_in_use() + table.overflow_buckets_free(),
        table.overflow_buckets_high_water()
    );
}

/// Removes the entry with reference `reference` (and hash `hash`), which must exist.
fn take(table: &HashTable, hash: u64, reference: u64) {
    let mut guard = table.lock(hash);
    let slot = guard.find_ref(reference).expect("entry to remove");
    guard.remove(slot);
}

#[test]
fn remove_unlinks_emptied_tail_and_another_chain_reuses_it() {
    let table = HashTable::new(2);
    let (a, b) = (hash_in(1, 0, 0, 7), hash_in(1, 1, 0, 7));
    // Chain a: main bucket 1..=7 and a link; overflow bucket 8, 9.
    for r in 1..=9 {
        put(&table, a, r);
    }
    assert_eq!(table.overflow_buckets_in_use(), 1);
    take(&table, a, 8);
    assert_eq!(table.overflow_buckets_in_use(), 1, "tail still holds 9");
    take(&table, a, 9);
    assert_eq!(table.chain_buckets(0), 1, "emptied tail unlinked");
    assert_eq!(
        (
            table.overflow_buckets_in_use(),
            table.overflow_buckets_free(),
            table.overflow_buckets_high_water()
        ),
        (0, 1, 1)
    );
    // Chain b overflows: it takes the freed bucket, the arena does not grow.
    for r in 101..=109 {
        put(&table, b, r);
    }
    assert_eq!(
        (
            table.overflow_buckets_in_use(),
            table.overflow_buckets_free(),
            table.overflow_buckets_high_water()
        ),
        (1, 0, 1)
    );
    // Chain a's main bucket takes new entries in its slot 7 again.
    put(&table, a, 10);
    for r in (1..=7).chain([10]) {
        assert_eq!(table.lookup(a, |c| c == r), Some(r));
    }
    for r in 101..=109 {
        assert_eq!(table.lookup(b, |c| c == r), Some(r));
    }
    assert_eq!(table.lookup(a, |c| c == 109), None);
    check_overflow_counters(&table);
}

#[test]
fn remove_keeps_empty_middle_bucket_until_everything_after_it_is_empty() {
    let table = HashTable::new(1);
    // Main 1..=7; X: 8..=14 and a link; Y: 15, 16.
    for r in 1..=16 {
        put(&table, 0, r);
    }
    assert_eq!(table.chain_buckets(0), 3);
    for r in 8..=14 {
        take(&table, 0, r);
    }
    assert_eq!(table.chain_buckets(0), 3, "empty X is followed by Y: stays");
    assert_eq!(table.lookup(0, |c| c == 16), Some(16));
    take(&table, 0, 15);
    assert_eq!(table.chain_buckets(0), 3);
    take(&table, 0, 16);
    assert_eq!(table.chain_buckets(0), 1, "X and Y unlinked together");
    assert_eq!(table.overflow_buckets_free(), 2);
    check_overflow_counters(&table);
}

#[test]
fn remove_of_entry_in_tail_last_slot_unlinks_the_tail() {
    let table = HashTable::new(1);
    // Main 1..=7; X: 8..=15 with 15 in X's last slot (an entry, not a link).
    for r in 1..=15 {
        put(&table, 0, r);
    }
    assert_eq!(table.chain_buckets(0), 2);
    for r in 8..=14 {
        take(&table, 0, r);
    }
    assert_eq!(table.chain_buckets(0), 2, "X's last slot still holds 15");
    take(&table, 0, 15);
    assert_eq!(table.chain_buckets(0), 1);
    check_overflow_counters(&table);
}

#[test]
fn remove_in_main_bucket_leaves_chain_alone() {
    let table = HashTable::new(1);
    for r in 1..=9 {
        put(&table, 0, r);
    }
    for r in 1..=7 {
        take(&table, 0, r);
    }
    assert_eq!(
        table.chain_buckets(0),
        2,
        "the overflow bucket holds 8 and 9"
    );
    assert_eq!(table.lookup(0, |c| c == 9), Some(9));
    check_overflow_counters(&table);
}

#[test]
fn insert_refuses_to_extend_chain_past_max_chain_buckets() {
    let table = HashTable::with_limits(1, crate::overflow::MAX_CHUNKS, 3, 1);
    let mut guard = table.lock(0);
    // 3 buckets hold 7 + 7 + 8 entries.
    for r in 1..=22 {
        guard.insert(r).expect("within the chain limit");
    }
    assert_eq!(guard.insert(23), Err(IndexFull));
    let slot = guard.find_ref(3).unwrap();
    guard.remove(slot);
    assert_eq!(guard.insert(23), Ok(slot));
    drop(guard);
    for r in (1..=23).filter(|&r| r != 3) {
        assert_eq!(table.lookup(0, |c| c == r), Some(r), "entry {r}");
    }
}

#[test]
fn walk_stops_after_max_chain_buckets_on_a_loop_of_links() {
    use std::sync::atomic::Ordering;
    // A stale reader can meet a loop over time (buckets relinked behind it); at one
    // instant operations never build one, so this test builds it by hand.
    let table = HashTable::with_limits(1, crate::overflow::MAX_CHUNKS, 5, 1);
    // Main → X → Y, with 7 entries in each and Y's last slot empty.
    for r in 1..=21 {
        put(&table, 0, r);
    }
    // Point Y's last slot back at X.
    let x = table.overflow_bucket(0);
    let y = table.overflow_bucket(1);
    assert_eq!(x.slots[7].load(Ordering::Relaxed), crate::bucket::link(1));
    assert_eq!(y.slots[7].load(Ordering::Relaxed), 0);
    y.slots[7].store(crate::bucket::link(0), Ordering::Release);
    let mut offered = 0;
    assert_eq!(
        table.lookup(0, |_| {
            offered += 1;
            false
        }),
        None
    );
    // Main (7 entries), then X, Y, X, Y with 7 each: 5 buckets.
    assert_eq!(offered, 7 * 5);
    let mut visited = 0;
    table.for_each_in_bucket(0, |_| visited += 1);
    assert_eq!(visited, 7 * 5);
}

/// A table of two buckets whose chains share tags, and a side map from
/// reference to hash standing in for the log.
struct TwoChains {
    table: HashTable,
    hash_of: std::collections::HashMap<u64, u64>,
    next_ref: u64,
}

impl TwoChains {
    fn new() -> Self {
        TwoChains {
            table: HashTable::new(2),
            hash_of: std::collections::HashMap::new(),
            next_ref: 1,
        }
    }

    fn hash(bucket: u64, serial: u64) -> u64 {
        // Only two tags: most entries of both chains are candidates for a lookup.
        hash_in(1, bucket, serial, serial % 2)
    }

    fn insert(&mut self, hash: u64) -> u64 {
        let r = self.next_ref;
        self.next_ref += 1;
        self.hash_of.insert(r, hash);
        put(&self.table, hash, r);
        r
    }
}

#[test]
fn for_each_in_bucket_passes_entries_of_a_chain_that_reused_its_bucket_mid_walk() {
    let mut t = TwoChains::new();
    let a = TwoChains::hash(0, 1);
    let b = TwoChains::hash(1, 1);
    let chain_a: Vec<u64> = (0..9).map(|_| t.insert(a)).collect();
    let chain_b: Vec<u64> = (0..8).map(|_| t.insert(b)).collect();
    let foreign = chain_b[7] + 1;
    t.hash_of.insert(foreign, b);
    let (table, hash_of) = (&t.table, &t.hash_of);
    // The walk of chain a stands in its overflow bucket (at chain_a[7], which
    // moved to the bucket's slot 0) when both of that bucket's entries are removed
    // and chain b overflows into the freed bucket.
    let mut seen = Vec::new();
    table.for_each_in_bucket(0, |r| {
        seen.push(r);
        if r == chain_a[7] {
            take(table, a, chain_a[7]);
            take(table, a, chain_a[8]);
            put(table, b, foreign);
        }
    });
    assert_eq!(&seen[..8], &chain_a[..8]);
    assert_eq!(
        &seen[8..],
        &[foreign],
        "the walk went on in chain b's new bucket"
    );
    assert_eq!(
        table.overflow_buckets_high_water(),
        1,
        "the bucket was reused"
    );
    // A caller that keeps entries whose hash maps to the bucket drops it.
    let own: Vec<u64> = seen
        .iter()
        .copied()
        .filter(|r| table.bucket_of(hash_of[r]) == 0)
        .collect();
    assert!(!own.contains(&foreign));
    assert_eq!(own, chain_a[..8]);
}

#[test]
fn lookup_offers_foreign_candidates_only_after_the_chain_and_finds_present_entries() {
    let mut t = TwoChains::new();
    let a = TwoChains::hash(0, 2);
    let b = TwoChains::hash(1, 2); // same tag as `a`
    let chain_a: Vec<u64> = (0..9).map(|_| t.insert(a)).collect();
    (0..8).for_each(|_| {
        t.insert(b);
    });
    let table = &t.table;
    let mut offered = Vec::new();
    let found = table.lookup(a, |r| {
        offered.push(r);
        if r == chain_a[7] {
            take(table, a, chain_a[7]);
            take(table, a, chain_a[8]);
            put(table, b, 1000);
        }
        false
    });
    assert_eq!(found, None);
    assert_eq!(&offered[..8], &chain_a[..8]);
    assert_eq!(
        &offered[8..],
        &[1000],
        "a foreign candidate, rejected by key"
    );
}

/// A small deterministic generator (xorshift), so these tests need no seed plumbing.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Writes on transient entries of both chains of a `TwoChains`-style table.
struct Churner {
    rng: Xorshift,
    /// Present transient entries: (hash, reference).
    transient: Vec<(u64, u64)>,
    next_ref: u64,
    serial: u64,
    /// References inserted into main bucket 1 (so foreign to a walk of bucket 0).
    in_bucket_1: HashSet<u64>,
}

impl Churner {
    fn insert(&mut self, table: &HashTable, bucket: u64) -> (u64, u64) {
        self.serial += 1;
        let hash = TwoChains::hash(bucket, self.serial);
        let reference = self.next_ref;
        self.next_ref += 1;
        put(table, hash, reference);
        if bucket == 1 {
            self.in_bucket_1.insert(reference);
        }
        (hash, reference)
    }

    /// Up to five random inserts (into either chain) and removes; one time in
    /// eight, first removes every transient entry of chain 0 (emptying its tail
    /// after the permanent entries) and overflows chain 1 (reusing that tail).
    fn step(&mut self, table: &HashTable) {
        if self.rng.below(8) == 0 {
            let in_bucket_1 = &self.in_bucket_1;
            let (chain_0, chain_1): (Vec<_>, Vec<_>) = self
                .transient
                .drain(..)
                .partition(|(_, r)| !in_bucket_1.contains(r));
            self.transient = chain_1;
            for (hash, reference) in chain_0 {
                take(table, hash, reference);
            }
            for _ in 0..self.rng.below(16) {
                let entry = self.insert(table, 1);
                self.transient.push(entry);
            }
        }
        for _ in 0..self.rng.below(6) {
            if !self.transient.is_empty() && self.rng.below(2) == 0 {
                let i = self.rng.below(self.transient.len() as u64) as usize;
                let (hash, reference) = self.transient.swap_remove(i);
                take(table, hash, reference);
            } else {
                let bucket = self.rng.below(2);
                let entry = self.insert(table, bucket);
                self.transient.push(entry);
            }
        }
    }
}

/// Runs writes on transient entries of both chains at every step of a walk of
/// chain 0 — between any two slots a walk reads, tails are unlinked and reused —
/// and checks that the walk still sees each of chain 0's permanent entries:
/// `lookup` finds each, `for_each_in_bucket` lists each exactly once.
#[test]
fn walks_see_every_present_entry_whatever_writers_do_between_steps() {
    let mut reused = 0;
    let mut foreign_seen = 0;
    for seed in 1..=300u64 {
        let table = HashTable::new(2);
        let mut churn = Churner {
            rng: Xorshift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            transient: Vec::new(),
            next_ref: 1,
            serial: 0,
            in_bucket_1: HashSet::new(),
        };
        // Chain 0: transient entries, then permanent ones, then more transient
        // ones, so permanent entries sit between buckets that empty and refill.
        for _ in 0..churn.rng.below(20) {
            let entry = churn.insert(&table, 0);
            churn.transient.push(entry);
        }
        let permanent: Vec<(u64, u64)> = (0..1 + churn.rng.below(12))
            .map(|_| churn.insert(&table, 0))
            .collect();
        for _ in 0..churn.rng.below(30) {
            let bucket = churn.rng.below(2);
            let entry = churn.insert(&table, bucket);
            churn.transient.push(entry);
        }
        for &(hash, want) in &permanent {
            let found = table.lookup(hash, |r| {
                churn.step(&table);
                r == want
            });
            assert_eq!(found, Some(want), "seed {seed}: permanent entry missed");
        }
        for _ in 0..3 {
            let mut seen = Vec::new();
            table.for_each_in_bucket(0, |r| {
                seen.push(r);
                churn.step(&table);
            });
            for &(_, want) in &permanent {
                let count = seen.iter().filter(|&&r| r == want).count();
                assert_eq!(count, 1, "seed {seed}: permanent entry seen {count} times");
            }
            foreign_seen += seen
                .iter()
                .filter(|r| churn.in_bucket_1.contains(r))
                .count();
        }
        check_overflow_counters(&table);
        reused += usize::from(
            table.overflow_buckets_free() > 0
                || table.overflow_buckets_high_water() > table.overflow_buckets_in_use(),
        );
    }
    assert!(reused > 0, "no overflow bucket was ever unlinked");
    // The walks did stand in buckets that were reused by the other chain.
    assert!(foreign_seen > 0, "no walk ever strayed into chain 1");
}

#[test]
fn churn_with_fresh_keys_keeps_overflow_high_water_near_its_early_peak() {
    // W1-like (L Table 1): a steady number of live keys, each operation inserts a
    // fresh key and removes the oldest. 3.5 entries per main bucket on average,
    // so about 1% of chains need an overflow bucket at any time — but a different
    // 1% as keys come and go. Without reuse the arena kept a bucket for every
    // chain that ever overflowed and grew many times over.
    const BUCKETS: usize = 4096;
    const LIVE: u64 = 14_336;
    let table = HashTable::new(BUCKETS);
    let mut rng = Xorshift(0x2545_F491_4F6C_DD1D);
    let mut live = std::collections::VecDeque::new();
    for r in 1..=LIVE {
        let hash = rng.next();
        put(&table, hash, r);
        live.push_back((hash, r));
    }
    let mut next = LIVE + 1;
    let mut churn = |ops: u64, live: &mut std::collections::VecDeque<(u64, u64)>| {
        for _ in 0..ops {
            let (hash, r) = live.pop_front().expect("live keys");
            take(&table, hash, r);
            let hash = rng.next();
            put(&table, hash, next);
            live.push_back((hash, next));
            next += 1;
        }
    };
    churn(2 * LIVE, &mut live);
    let early = table.overflow_buckets_high_water();
    churn(40 * LIVE, &mut live);
    let late = table.overflow_buckets_high_water();
    check_overflow_counters(&table);
    assert!(early > 0, "the test needs chains that overflow");
    assert!(
        late <= early + early / 2,
        "high-water mark grew with operations: {early} after {} ops, {late} after {}",
        2 * LIVE,
        42 * LIVE
    );
    // The buckets in use follow what the live keys need now.
    assert!(table.overflow_buckets_in_use() <= late);
    for (hash, r) in &live {
        assert_eq!(table.lookup(*hash, |c| c == *r), Some(*r));
    }
}

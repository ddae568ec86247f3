//! Unit tests of the table through its public API (plus the test-only overflow limit).

use std::collections::HashSet;

use crate::{HashTable, IndexFull, REF_BITS, SLOTS_PER_BUCKET};

/// Inserts `reference` under `hash`, failing the test if the table is full.
pub(super) fn put(table: &HashTable, hash: u64, reference: u64) {
    table
        .lock(hash)
        .insert(reference)
        .expect("table unexpectedly full");
}

/// All references in the table, bucket by bucket.
pub(super) fn all_refs(table: &HashTable) -> Vec<u64> {
    let mut refs = Vec::new();
    for bucket in 0..table.bucket_count() {
        table.for_each_in_bucket(bucket, |r| refs.push(r));
    }
    refs
}

/// Inserts `n` entries with distinct references into the single bucket of a
/// one-bucket table, all with the same hash, and checks every one is found.
pub(super) fn fill_one_bucket(n: u64) -> HashTable {
    let table = HashTable::new(1);
    let hash = 0x1234_5678_9ABC_DEF0;
    for r in 1..=n {
        put(&table, hash, r);
    }
    assert_eq!(table.len(), n as usize);
    for r in 1..=n {
        assert_eq!(table.lookup(hash, |c| c == r), Some(r), "entry {r} lost");
        let guard = table.lock(hash);
        let (slot, found) = guard.find(|c| c == r).expect("find");
        assert_eq!(found, r);
        assert_eq!(guard.find_ref(r), Some(slot));
    }
    let mut refs = all_refs(&table);
    refs.sort_unstable();
    assert_eq!(refs, (1..=n).collect::<Vec<_>>());
    table
}

#[test]
fn bucket_is_one_cache_line() {
    assert_eq!(std::mem::size_of::<crate::bucket::Bucket>(), 64);
    assert_eq!(std::mem::align_of::<crate::bucket::Bucket>(), 64);
    assert_eq!(std::mem::size_of::<parking_lot::RawMutex>(), 1);
}

#[test]
fn hash_table_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<HashTable>();
}

#[test]
fn insert_then_lookup_finds_reference() {
    let table = HashTable::new(16);
    assert!(table.is_empty());
    put(&table, 42, 7);
    assert_eq!(table.len(), 1);
    assert!(!table.is_empty());
    assert_eq!(table.lookup(42, |r| r == 7), Some(7));
    // The closure decides: a rejected candidate is not returned.
    assert_eq!(table.lookup(42, |_| false), None);
    // A different tag is filtered out without calling the closure.
    assert_eq!(table.lookup(43, |_| panic!("tag should not match")), None);
}

#[test]
fn insert_then_find_returns_slot() {
    let table = HashTable::new(4);
    let mut guard = table.lock(99);
    let slot = guard.insert(5).unwrap();
    assert_eq!(guard.find(|r| r == 5), Some((slot, 5)));
    assert_eq!(guard.find_ref(5), Some(slot));
    assert_eq!(guard.find_ref(6), None);
    assert_eq!(guard.find(|_| false), None);
}

#[test]
fn insert_accepts_tag_zero_and_max_reference() {
    let table = HashTable::new(2);
    let max_ref = (1u64 << REF_BITS) - 1;
    put(&table, 0, 1);
    put(&table, 0x1_0000, max_ref);
    assert_eq!(table.lookup(0, |r| r == 1), Some(1));
    assert_eq!(table.lookup(0, |r| r == max_ref), Some(max_ref));
}

#[test]
fn lookup_calls_closure_in_chain_order_until_match() {
    let table = HashTable::new(1);
    for r in 1..=20 {
        put(&table, 7, r);
    }
    let mut seen = Vec::new();
    let found = table.lookup(7, |r| {
        seen.push(r);
        r == 12
    });
    assert_eq!(found, Some(12));
    assert_eq!(seen.len(), 12);
    let mut all = Vec::new();
    table.lookup(7, |r| {
        all.push(r);
        false
    });
    assert_eq!(all.len(), 20);
    assert_eq!(&all[..12], &seen[..]);
}

#[test]
fn lookup_filters_by_tag_within_bucket() {
    let table = HashTable::new(1);
    put(&table, 1, 10);
    put(&table, 2, 20);
    put(&table, 1, 11);
    let mut candidates = Vec::new();
    table.lookup(1, |r| {
        candidates.push(r);
        false
    });
    assert_eq!(candidates, vec![10, 11]);
}

#[test]
fn replace_keeps_slot_and_tag() {
    let table = HashTable::new(8);
    let hash = 0xABCD_0000_0000_1111;
    let mut guard = table.lock(hash);
    let slot = guard.insert(100).unwrap();
    guard.replace(slot, 200);
    assert_eq!(guard.find_ref(100), None);
    assert_eq!(guard.find_ref(200), Some(slot));
    drop(guard);
    assert_eq!(table.lookup(hash, |r| r == 200), Some(200));
    assert_eq!(table.lookup(hash, |r| r == 100), None);
    assert_eq!(table.len(), 1);
}

#[test]
fn replace_in_overflow_bucket_keeps_slot() {
    let table = fill_one_bucket(30);
    let mut guard = table.lock(0x1234_5678_9ABC_DEF0);
    let slot = guard.find_ref(25).unwrap();
    guard.replace(slot, 1000);
    assert_eq!(guard.find_ref(1000), Some(slot));
    assert_eq!(table.len(), 30);
}

#[test]
fn remove_empties_slot() {
    let table = HashTable::new(8);
    let mut guard = table.lock(5);
    let a = guard.insert(1).unwrap();
    guard.insert(2).unwrap();
    guard.remove(a);
    assert_eq!(guard.find_ref(1), None);
    assert_eq!(guard.find(|r| r == 2).map(|(_, r)| r), Some(2));
    drop(guard);
    assert_eq!(table.len(), 1);
    assert_eq!(table.lookup(5, |r| r == 1), None);
    assert_eq!(table.lookup(5, |r| r == 2), Some(2));
}

#[test]
fn remove_then_insert_reuses_slot() {
    let table = fill_one_bucket(40);
    let overflow_before = table.overflow_buckets_in_use();
    let hash = 0x1234_5678_9ABC_DEF0;
    let mut guard = table.lock(hash);
    let freed: Vec<_> = [3, 17, 33]
        .iter()
        .map(|&r| {
            let slot = guard.find_ref(r).unwrap();
            guard.remove(slot);
            slot
        })
        .collect();
    let reused: Vec<_> = (41..=43).map(|r| guard.insert(r).unwrap()).collect();
    assert_eq!(
        freed, reused,
        "inserts fill the first empty slots of the chain"
    );
    drop(guard);
    assert_eq!(table.overflow_buckets_in_use(), overflow_before);
    assert_eq!(table.len(), 40);
}

#[test]
fn remove_all_then_reinsert_reuses_overflow_buckets() {
    let table = fill_one_bucket(100);
    let overflow_before = table.overflow_buckets_in_use();
    let hash = 0x1234_5678_9ABC_DEF0;
    let mut guard = table.lock(hash);
    for r in 1..=100 {
        let slot = guard.find_ref(r).unwrap();
        guard.remove(slot);
    }
    drop(guard);
    assert!(table.is_empty());
    assert!(all_refs(&table).is_empty());
    for r in 101..=200 {
        put(&table, hash, r);
    }
    assert_eq!(table.overflow_buckets_in_use(), overflow_before);
    assert_eq!(table.len(), 100);
}

#[test]
fn insert_extends_chain_past_8() {
    let table = fill_one_bucket(SLOTS_PER_BUCKET as u64 + 1);
    assert_eq!(table.overflow_buckets_in_use(), 1);
}

#[test]
fn insert_extends_chain_past_16() {
    let table = fill_one_bucket(17);
    // 7 entries per full bucket (the last slot is a link) and up to 8 in the last.
    assert_eq!(table.overflow_buckets_in_use(), 2);
}

#[test]
fn insert_extends_chain_to_100_entries() {
    let table = fill_one_bucket(100);
    // Buckets hold 7 + 7 + ... + 8: 14 buckets hold 99, so 100 needs 15 (14 overflow).
    assert_eq!(table.overflow_buckets_in_use(), 14);
}

#[test]
fn insert_moves_last_entry_into_new_overflow_bucket() {
    let table = HashTable::new(1);
    let mut guard = table.lock(3);
    let slots: Vec<_> = (1..=8).map(|r| guard.insert(r).unwrap()).collect();
    let ninth = guard.insert(9).unwrap();
    // Entry 8 moved out of the last slot into the new bucket's slot 0.
    let moved = guard.find_ref(8).unwrap();
    assert_ne!(moved, slots[7]);
    assert_ne!(moved, ninth);
    for (r, slot) in (1..=7).zip(&slots) {
        assert_eq!(guard.find_ref(r), Some(*slot));
    }
}

#[test]
fn insert_returns_index_full_when_arena_exhausted() {
    // One chunk of 64 overflow buckets: 1 main + 64 overflow buckets hold 64*7 + 8 entries.
    let table = HashTable::with_limits(1, 1, crate::MAX_CHAIN_BUCKETS, 1);
    let capacity = 64 * 7 + 8;
    let mut guard = table.lock(0);
    for r in 1..=capacity {
        guard.insert(r).expect("within capacity");
    }
    assert_eq!(guard.insert(capacity + 1), Err(IndexFull));
    // A failed insert leaves the table unchanged, and freed slots can still be used.
    assert_eq!(table.len(), capacity as usize);
    let slot = guard.find_ref(10).unwrap();
    guard.remove(slot);
    assert_eq!(guard.insert(capacity + 1), Ok(slot));
    drop(guard);
    for r in (1..=capacity + 1).filter(|&r| r != 10) {
        assert_eq!(table.lookup(0, |c| c == r), Some(r));
    }
    assert_eq!(
        IndexFull.to_string(),
        "hash table full: no overflow bucket available"
    );
}

/// The resident split (issue 17): main-array pages count once a key reaches them,
/// the locks always, an overflow chunk page by page as its buckets are handed out.
#[test]
fn resident_bytes_counts_touched_main_and_overflow_pages_and_locks() {
    // 64 Ki buckets: a 4 MiB main array, overflow chunk 0 of 8 Ki buckets (512 KiB).
    let table = HashTable::new(1 << 16);
    let locks = crate::LOCK_STRIPES * std::mem::size_of::<parking_lot::RawMutex>();
    let empty = table.resident_bytes();
    if !cfg!(target_os = "linux") {
        assert_eq!(empty, None, "unknown where mincore cannot be asked");
        return;
    }
    let empty = empty.expect("mincore answers on Linux");
    assert_eq!(
        empty, locks,
        "no main page is touched before the first insert"
    );

    put(&table, 0, 1);
    let one = table.resident_bytes().expect("asked once already");
    assert!(
        (empty + 4096..=empty + (2 << 20)).contains(&one),
        "one insert faults in one page (4 KiB, or 2 MiB with huge pages): {one}"
    );

    // Nine entries in one chain: the ninth needs an overflow bucket.
    for r in 2..=9 {
        put(&table, 0, r);
    }
    assert_eq!(table.overflow_buckets_high_water(), 1);
    let chained = table.resident_bytes().expect("asked once already");
    // One page of chunk 0 and one free-list entry, unless khugepaged merged the
    // main array's touched page into a huge page meanwhile.
    let overflow = 4096 + 8;
    assert!(
        (one + overflow..=one + overflow + (2 << 20)).contains(&chained),
        "{one} then {chained}"
    );
    assert!(chained <= table.resident_bound_bytes() + 4096);
}

/// Regression (issue 17): overflow chunks came from the global allocator, which
/// memsets a 64-byte-aligned zeroed block, so a chunk was resident whole from its
/// first bucket (W1 at 128 MiB live: chunk 0's 4 MiB, against about 0.7 MiB of
/// buckets ever handed out), while `resident_bytes` counted only those buckets.
#[test]
fn overflow_chunk_is_resident_only_where_buckets_were_handed_out() {
    let table = HashTable::new(1 << 16);
    for r in 1..=9 {
        put(&table, 0, r);
    }
    let Some(measured) = table.resident_bytes() else {
        return; // Not Linux: nothing to measure (the test above checks `None`).
    };
    let main = measured - table.lock_stripes() * std::mem::size_of::<parking_lot::RawMutex>();
    // The main array's one touched page (or huge page), plus at most one page and
    // one free-list entry of overflow: not the chunk's 512 KiB.
    assert!(main <= (2 << 20) + 4096 + 8, "{measured}");
    assert!(
        measured <= table.resident_bound_bytes() + 4096,
        "{measured}"
    );
}

/// Buckets share at most `LOCK_STRIPES` locks, as a power of two, and a small
/// table has no more locks than buckets.
#[test]
fn lock_stripes_are_bounded_and_a_power_of_two() {
    assert_eq!(HashTable::new(1 << 20).lock_stripes(), crate::LOCK_STRIPES);
    assert_eq!(HashTable::new(100).lock_stripes(), 128);
    assert_eq!(HashTable::new(1).lock_stripes(), 1);
    assert_eq!(
        HashTable::with_lock_stripes(1 << 12, 1 << 20).lock_stripes(),
        1 << 12
    );
    assert_eq!(HashTable::with_lock_stripes(1000, 0).lock_stripes(), 1);
}

/// Two buckets sharing a stripe: a guard on one holds writers of the other
/// off until it drops, and neither loses an entry.
#[test]
fn lock_shared_stripe_serialises_writers_of_different_buckets() {
    let table = HashTable::with_lock_stripes(64, 1);
    let (a, b) = (0u64, u64::MAX);
    assert_ne!(table.bucket_of(a), table.bucket_of(b));
    let entered = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut guard = table.lock(a);
        let waiter = s.spawn(|| {
            let mut other = table.lock(b);
            entered.store(true, std::sync::atomic::Ordering::SeqCst);
            other.insert(2).expect("room");
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !entered.load(std::sync::atomic::Ordering::SeqCst),
            "a writer of a bucket sharing the stripe entered while the guard was held"
        );
        guard.insert(1).expect("room");
        drop(guard);
        waiter.join().expect("waiter");
    });
    assert_eq!(table.lookup(a, |r| r == 1), Some(1));
    assert_eq!(table.lookup(b, |r| r == 2), Some(2));
}

#[test]
fn tag_ffff_is_remapped_to_fffe() {
    let table = HashTable::new(1);
    let hash_ffff = 0x0123_4567_89AB_FFFF;
    let hash_fffe = 0x0123_4567_89AB_FFFE;
    // Fill well past one bucket so that entries tagged like links sit next to real links.
    for r in 1..=30 {
        put(&table, hash_ffff, r);
    }
    for r in 1..=30 {
        assert_eq!(table.lookup(hash_ffff, |c| c == r), Some(r));
    }
    // 0xFFFE and the remapped 0xFFFF share a tag, so both see all 30 candidates.
    let mut candidates = 0;
    table.lookup(hash_fffe, |_| {
        candidates += 1;
        false
    });
    assert_eq!(candidates, 30);
    let slot_tag = table.lock(hash_fffe).find_ref(5);
    assert!(slot_tag.is_some());
    let mut refs = all_refs(&table);
    refs.sort_unstable();
    assert_eq!(refs, (1..=30).collect::<Vec<_>>());
}

#[test]
fn bucket_hash_range_covers_all_hashes_contiguously() {
    for count in [1, 2, 3, 4, 7, 8, 1000, 1024, 12_345] {
        let table = HashTable::new(count);
        let mut next = 0u64;
        for bucket in 0..count {
            let (first, last) = table.bucket_hash_range(bucket);
            assert_eq!(first, next, "gap before bucket {bucket} of {count}");
            assert!(first <= last);
            assert_eq!(table.bucket_of(first), bucket);
            assert_eq!(table.bucket_of(last), bucket);
            next = last.wrapping_add(1);
            if bucket + 1 == count {
                assert_eq!(last, u64::MAX);
            }
        }
    }
}

#[test]
fn bucket_of_uses_top_bits() {
    let table = HashTable::new(4);
    assert_eq!(table.bucket_of(0), 0);
    assert_eq!(table.bucket_of(0x3FFF_FFFF_FFFF_FFFF), 0);
    assert_eq!(table.bucket_of(0x4000_0000_0000_0000), 1);
    assert_eq!(table.bucket_of(0xC000_0000_0000_0000), 3);
    assert_eq!(table.bucket_of(u64::MAX), 3);
}

#[test]
fn bucket_of_single_bucket_is_zero() {
    let table = HashTable::new(1);
    assert_eq!(table.bucket_count(), 1);
    assert_eq!(table.bucket_of(0), 0);
    assert_eq!(table.bucket_of(u64::MAX), 0);
    assert_eq!(table.bucket_hash_range(0), (0, u64::MAX));
    put(&table, u64::MAX, 1);
    put(&table, 0, 2);
    assert_eq!(table.lookup(u64::MAX, |r| r == 1), Some(1));
    assert_eq!(table.lookup(0, |r| r == 2), Some(2));
}

#[test]
#[should_panic(expected = "out of range")]
fn bucket_hash_range_panics_past_bucket_count() {
    HashTable::new(4).bucket_hash_range(4);
}

#[test]
fn new_keeps_the_bucket_count_asked_for() {
    assert_eq!(HashTable::new(0).bucket_count(), 1);
    assert_eq!(HashTable::new(1).bucket_count(), 1);
    assert_eq!(HashTable::new(3).bucket_count(), 3);
    assert_eq!(HashTable::new(1000).bucket_count(), 1000);
    assert_eq!(HashTable::new(1024).bucket_count(), 1024);
}

#[test]
fn with_capacity_uses_one_bucket_per_four_entries() {
    assert_eq!(HashTable::with_capacity(0).bucket_count(), 1);
    assert_eq!(HashTable::with_capacity(3).bucket_count(), 1);
    assert_eq!(HashTable::with_capacity(4000).bucket_count(), 1000);
    assert_eq!(HashTable::with_capacity(4096).bucket_count(), 1024);
    assert_eq!(HashTable::with_capacity(1_000_000).bucket_count(), 250_000);
}

#[test]
fn bucket_of_spreads_hashes_evenly_over_any_bucket_count() {
    // Equal shares of the hash space within one hash, for a count that is no power
    // of two: the table's memory is sized exactly, not rounded up.
    let table = HashTable::new(3);
    let sizes: Vec<u64> = (0..3)
        .map(|b| {
            let (first, last) = table.bucket_hash_range(b);
            last - first
        })
        .collect();
    let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
    assert!(max - min <= 1, "uneven ranges {sizes:?}");
}

#[test]
fn memory_bytes_counts_buckets_locks_and_overflow_chunks() {
    let table = HashTable::new(1024);
    assert_eq!(table.memory_bytes(), 1024 * 64 + 1024);
    assert_eq!(table.resident_bound_bytes(), 1024 * 64 + 1024);
    // Chain one bucket past 8 entries: chunk 0 of max(64, 1024 / 8) = 128 buckets
    // appears, with a free list with room for all 128.
    for r in 1..=9 {
        put(&table, 0, r);
    }
    assert_eq!(table.memory_bytes(), 1024 * 64 + 1024 + 128 * 64 + 128 * 8);
    // Only the one overflow bucket handed out counts as resident.
    assert_eq!(table.resident_bound_bytes(), 1024 * 64 + 1024 + 64 + 8);
}

#[test]
fn for_each_in_bucket_visits_only_its_bucket() {
    let table = HashTable::new(4);
    let mut expected = vec![HashSet::new(); 4];
    for r in 1..=200u64 {
        let hash = r.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        put(&table, hash, r);
        expected[table.bucket_of(hash)].insert(r);
    }
    for (bucket, want) in expected.iter().enumerate() {
        let mut got = Vec::new();
        table.for_each_in_bucket(bucket, |r| got.push(r));
        assert_eq!(got.len(), want.len(), "duplicates in bucket {bucket}");
        assert_eq!(&got.into_iter().collect::<HashSet<_>>(), want);
    }
}

#[test]
fn find_ref_ignores_other_tags_and_invalid_refs() {
    let table = HashTable::new(1);
    put(&table, 1, 10);
    let guard = table.lock(2);
    assert_eq!(guard.find_ref(10), None, "same reference under another tag");
    assert_eq!(guard.find_ref(0), None);
    assert_eq!(guard.find_ref(1 << REF_BITS), None);
}

#[test]
fn lock_serialises_writers_of_one_bucket() {
    let table = HashTable::new(2);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let table = &table;
            s.spawn(move || {
                for i in 0..500u64 {
                    // All threads hit bucket 0 with different tags.
                    put(table, t << 8 | (i & 0xFF), t * 1000 + i + 1);
                }
            });
        }
    });
    assert_eq!(table.len(), 2000);
    assert_eq!(all_refs(&table).len(), 2000);
}

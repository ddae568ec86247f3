//! Cleaning never deadlocks (L§7, docs/design-notes.md "Deadlock freedom"): at
//! every memory size, segment size, value size, utilisation and delete mix, a log
//! whose live data fits keeps accepting writes once the cleaner has run, and a log
//! whose data does not fit says so at once — NO_SPACE, with every cleaning pass
//! finding nothing to gain — while deletes keep working.
//!
//! The cleaner runs only when asked (`CleanerMode::Manual`), as the background
//! threads would: after a NO_SPACE, up to `PASSES_PER_NO_SPACE` passes of whatever
//! the balancer picks. A configuration is stuck when all of them make no progress
//! while the data fits. Every case also checks, against a `BTreeMap` model, that
//! every object reads back and that the tombstone accounting is exact.
//!
//! CI runs `LIVENESS_CASES` seeded cases; `RAMSTORE_LIVENESS_CASES=N` (and
//! `RAMSTORE_LIVENESS_SEED=S`) run a longer sweep (`scripts/liveness-sweep`).

use std::collections::BTreeMap;

use ramstore_log::pool::AllocClass;
use ramstore_log::{LogStats, SEGLET_BYTES};
use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig, WriteError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TABLE: u64 = 1;
/// Cases CI runs (each a few seconds at most).
const LIVENESS_CASES: u64 = 10;
/// Cleaning passes a writer's NO_SPACE may be followed by before the log counts as
/// stuck. The background cleaner runs two threads that retry forever; here a few
/// passes in a row without progress mean no pass could make any.
const PASSES_PER_NO_SPACE: usize = 8;
/// Keys are 16 bytes, like the benchmarks' (L Table 1).
const KEY_BYTES: usize = 16;
/// Bytes of an object entry beyond its key and value (header, checksum, varints),
/// at most.
const ENTRY_OVERHEAD_BYTES: usize = 40;

/// One configuration of the sweep.
#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    memory_bytes: usize,
    segment_bytes: usize,
    value_bytes: usize,
    /// Share of the memory writes may use that the live objects take.
    utilization: f64,
    /// Share of operations that delete (the rest write).
    delete_share: f64,
    compaction: bool,
}

impl Case {
    fn draw(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        const MIB: usize = 1 << 20;
        // Mostly small memories (where the stalls were), now and then a large one.
        let memory_bytes = match rng.gen_range(0..10) {
            0 => 1024 * MIB,
            1 => 256 * MIB,
            2 | 3 => 128 * MIB,
            4 | 5 => 96 * MIB,
            6 | 7 => 64 * MIB,
            8 => 48 * MIB,
            _ => 32 * MIB,
        };
        let segment_bytes = [MIB, 2 * MIB, 4 * MIB, 8 * MIB][rng.gen_range(0..4)];
        let value_bytes = [0, 100, 1_000, 10_000, 100_000, MIB][rng.gen_range(0..6)];
        // A 1 GiB case writes large values, so it stays quick.
        let value_bytes = if memory_bytes > 256 * MIB {
            value_bytes.max(10_000)
        } else {
            value_bytes
        };
        Self {
            seed,
            memory_bytes,
            segment_bytes,
            value_bytes,
            utilization: [0.3, 0.5, 0.7, 0.8, 0.9][rng.gen_range(0..5)],
            delete_share: [0.0, 0.0, 0.1, 0.5][rng.gen_range(0..4)],
            compaction: rng.gen_bool(0.5),
        }
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:015}").into_bytes()
}

/// A value of `len` bytes that names its key and round, so a mix-up shows.
fn value(i: u64, round: u32, len: usize) -> Vec<u8> {
    let mut x = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(round)) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn store(case: &Case) -> ObjectStore {
    let mut cfg = StoreConfig::new(case.memory_bytes);
    cfg.segment_bytes = case.segment_bytes;
    cfg.compaction = case.compaction;
    cfg.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    s
}

/// Bytes of live objects that certainly fit: the memory writes may use, less what
/// the segments cannot fill (next-fit leaves at most one entry and one partial
/// seglet per segment, L§4.1).
fn fitting_live_bytes(s: &ObjectStore, case: &Case, entry_bytes: usize) -> usize {
    let stats = s.stats().log;
    let reserves = s.log().pool().reserves();
    let reserve_seglets =
        reserves.emergency_seglets + reserves.cleaner_seglets + reserves.delete_seglets;
    let usable = (stats.seglets_total - reserve_seglets) * SEGLET_BYTES;
    let segments = usable.div_ceil(case.segment_bytes) + 1;
    usable.saturating_sub(segments * (entry_bytes + SEGLET_BYTES))
}

/// Runs cleaning passes as the background cleaner would after a NO_SPACE; whether
/// one of them made progress.
fn clean_after_no_space(s: &ObjectStore) -> bool {
    (0..PASSES_PER_NO_SPACE)
        .any(|_| matches!(s.clean_now(None), Some((_, pass)) if pass.made_progress))
}

fn describe(stats: &LogStats) -> String {
    format!(
        "free seglets {} of {}, live {} B, tombstones {} B, dead {} B, segments {}, \
         compactions {}, combined {} (incremental {}), without memory {}, refused {}",
        stats.seglets_free,
        stats.seglets_total,
        stats.live_object_bytes,
        stats.tombstone_bytes,
        stats.dead_bytes,
        stats.segments,
        stats.compactions,
        stats.combined_passes,
        stats.incremental_combined_passes,
        stats.passes_without_memory,
        stats.combined_passes_refused,
    )
}

/// Drives one case: fills its live set, then overwrites and deletes at random until
/// twice the memory has been written (at most `max_ops` operations). Panics if the
/// log gets stuck with data that fits, or if anything reads back wrong.
fn run_case(case: &Case, max_ops: u64) {
    let s = store(case);
    let value_bytes = case
        .value_bytes
        .min(s.log().max_entry_bytes() - KEY_BYTES - 64);
    let entry_bytes = value_bytes + KEY_BYTES + ENTRY_OVERHEAD_BYTES;
    let live_target =
        (fitting_live_bytes(&s, case, entry_bytes) as f64 * case.utilization) as usize;
    let keys = (live_target / entry_bytes).max(1) as u64;
    let mut rng = StdRng::seed_from_u64(case.seed ^ 0x5eed);
    let mut model: BTreeMap<u64, u32> = BTreeMap::new();
    let rules = RejectRules::default();
    let budget_bytes = 2 * case.memory_bytes;
    let (mut written, mut ops, mut round) = (0usize, 0u64, 0u32);
    while written < budget_bytes && ops < max_ops {
        ops += 1;
        // The first pass over the keys creates them all; deletes start after it.
        let i = if (model.len() as u64) < keys && ops <= keys {
            ops - 1
        } else {
            rng.gen_range(0..keys)
        };
        if ops > keys && rng.gen_bool(case.delete_share) {
            // Deletes never wait for the cleaner (the delete reserve, L§7).
            match s.remove(TABLE, &key(i), &rules) {
                Ok(_) => {
                    model.remove(&i);
                }
                Err(e) => panic!(
                    "{case:?}: delete of {i} failed: {e}; {}",
                    describe(&s.stats().log)
                ),
            }
            continue;
        }
        round += 1;
        let v = value(i, round, value_bytes);
        loop {
            match s.write(TABLE, &key(i), &v, &rules) {
                Ok(_) => {
                    model.insert(i, round);
                    written += entry_bytes;
                    break;
                }
                Err(WriteError::NoSpace) => {
                    if !clean_after_no_space(&s) {
                        panic!(
                            "{case:?}: stuck after {ops} operations and {written} bytes written \
                             with {} of {} keys live (target {live_target} B): {}",
                            model.len(),
                            keys,
                            describe(&s.stats().log)
                        );
                    }
                }
                Err(e) => panic!("{case:?}: write of {i} failed: {e}"),
            }
        }
    }
    let mut got = Vec::new();
    for (&i, &r) in &model {
        s.read(TABLE, &key(i), &mut got)
            .unwrap_or_else(|e| panic!("{case:?}: object {i} lost: {e}"));
        assert!(
            got == value(i, r, value_bytes),
            "{case:?}: object {i} read back wrong"
        );
    }
    s.log()
        .verify_tombstone_accounting()
        .unwrap_or_else(|e| panic!("{case:?}: {e}"));
}

#[test]
fn cleaning_keeps_accepting_writes_when_data_fits() {
    let first: u64 = std::env::var("RAMSTORE_LIVENESS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let cases: u64 = std::env::var("RAMSTORE_LIVENESS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(LIVENESS_CASES);
    for seed in first..first + cases {
        let case = Case::draw(seed);
        eprintln!("liveness case {case:?}");
        run_case(&case, 3_000_000);
    }
}

/// Regression (issue 17): 64 MiB in 8 MiB segments at 90% with 100-byte values
/// stopped for good — every segment compacted down to live objects and
/// tombstones, the tombstones naming segments still on disk, less free memory
/// than one segment's live data, so no batch combined pass fit and no compaction
/// gained a seglet (free seglets stuck at 35, every manual pass `None`).
#[test]
fn clean_full_log_of_live_objects_and_tombstones_keeps_accepting_writes() {
    for compaction in [true, false] {
        run_case(
            &Case {
                seed: 17,
                memory_bytes: 64 << 20,
                segment_bytes: 8 << 20,
                value_bytes: 100,
                utilization: 0.9,
                delete_share: 0.0,
                compaction,
            },
            3_000_000,
        );
    }
}

/// Data that does not fit is refused at once: NO_SPACE, passes that find nothing
/// to gain, deletes still accepted, and writes accepted again once they freed
/// memory.
#[test]
fn write_beyond_memory_answers_no_space_and_deletes_make_room() {
    let case = Case {
        seed: 3,
        memory_bytes: 32 << 20,
        segment_bytes: 8 << 20,
        value_bytes: 1_000,
        utilization: 1.0,
        delete_share: 0.0,
        compaction: true,
    };
    let s = store(&case);
    let rules = RejectRules::default();
    let mut n = 0u64;
    loop {
        match s.write(TABLE, &key(n), &value(n, 0, 1_000), &rules) {
            Ok(_) => n += 1,
            Err(WriteError::NoSpace) if !clean_after_no_space(&s) => break,
            Err(WriteError::NoSpace) => {}
            Err(e) => panic!("write {n}: {e}"),
        }
        assert!(n < 1 << 20, "32 MiB took a million 1 KB objects");
    }
    let stats = s.stats().log;
    assert!(
        stats.live_object_bytes as usize > (32 << 20) * 8 / 10,
        "refused with only {} live bytes: {}",
        stats.live_object_bytes,
        describe(&stats)
    );
    // Deletes keep working on a full log: the delete reserve takes their tombstones
    // while the cleaner wins back the memory of the objects they kill.
    for i in 0..n / 2 {
        loop {
            match s.remove(TABLE, &key(i), &rules) {
                Ok(_) => break,
                Err(WriteError::NoSpace) => assert!(
                    clean_after_no_space(&s),
                    "delete {i} of {n} refused for good: {}",
                    describe(&s.stats().log)
                ),
                Err(e) => panic!("delete {i}: {e}"),
            }
        }
    }
    let accepted = (0..8).any(|_| {
        s.clean_now(None);
        s.write(TABLE, b"after", b"deletes", &rules).is_ok()
    });
    assert!(
        accepted,
        "no room after deleting half: {}",
        describe(&s.stats().log)
    );
    let mut got = Vec::new();
    for i in n / 2..n {
        s.read(TABLE, &key(i), &mut got).expect("kept object");
        assert_eq!(got, value(i, 0, 1_000));
    }
}

/// Regression ("Memory outside the log", L Table 1's W6 peaking 7.6 MiB above its
/// steady state): a first victim with more live entries than the combined pass's
/// work list holds used to be listed anyway — in W6 a segment of 131,000 live
/// tombstones, 4 MiB of list and 5 MiB of tombstone moves where the bound is
/// 2 MiB. Now the pass cleans it alone the way the one-segment pass does, without a
/// list (the list's bound is asserted in the pass), and loses nothing.
#[test]
fn combined_pass_victim_larger_than_work_list_is_cleaned_alone_without_one() {
    let bound = ramstore_log::cleaner::combined_work_list_entries(TINY_MEMORY_BYTES);
    // Delete 60%: one victim holds ~100,000 live entries, more than the bound of
    // 65,536.
    let (pass, one_segment_passes) = combined_pass_over_tiny_objects(5, |i| i % 5 < 2);
    assert!(bound < 100_000, "bound {bound}");
    assert_eq!(
        pass.segments, 1,
        "the pass took more victims than its list holds: {pass:?}"
    );
    assert_eq!(
        one_segment_passes, 1,
        "the victim was cleaned through the list: {pass:?}"
    );
}

/// The work list holds whole victims within its bound: a second victim whose
/// entries would take it past the bound is given back, not scanned in (before,
/// the list could pass its bound by a whole victim's entries).
#[test]
fn combined_pass_work_list_holds_whole_victims_within_its_bound() {
    let bound = ramstore_log::cleaner::combined_work_list_entries(TINY_MEMORY_BYTES);
    assert!((40_000..80_000).contains(&bound), "bound {bound}");
    // Keep 16%: ~40,000 live entries a segment, so two victims (~80,000) pass
    // the bound of 65,536 while one fits.
    let (pass, one_segment_passes) = combined_pass_over_tiny_objects(6, |i| i % 25 < 4);
    assert_eq!(
        pass.segments, 1,
        "the list took a victim past its bound: {pass:?}"
    );
    assert_eq!(one_segment_passes, 0, "a victim that fits is listed");
}

const TINY_MEMORY_BYTES: usize = 64 << 20;

/// Fills three 8 MiB segments with ~30-byte objects (~250,000 entries each),
/// deletes those `kept` rejects, runs one combined pass, and checks that every
/// kept object still reads and the tombstone accounting holds. Returns the pass
/// and how many one-segment (list-free) passes it ran.
fn combined_pass_over_tiny_objects(
    seed: u64,
    kept: impl Fn(u64) -> bool,
) -> (ramstore_log::PassOutcome, u64) {
    let case = Case {
        seed,
        memory_bytes: TINY_MEMORY_BYTES,
        segment_bytes: 8 << 20,
        value_bytes: 0,
        utilization: 0.5,
        delete_share: 0.0,
        compaction: true,
    };
    let s = store(&case);
    let rules = RejectRules::default();
    let mut n = 0u64;
    while s.stats().log.segments < 4 {
        s.write(TABLE, &key(n), b"", &rules).expect("room");
        n += 1;
    }
    for i in (0..n).filter(|&i| !kept(i)) {
        s.remove(TABLE, &key(i), &rules).expect("delete");
    }
    s.log().roll_head_now();
    let one_segment_before = s.stats().log.incremental_combined_passes;
    let (_, pass) = s
        .clean_now(Some(ramstore_log::CleanKind::Combined))
        .expect("a combined pass runs");
    let one_segment_passes = s.stats().log.incremental_combined_passes - one_segment_before;
    let mut got = Vec::new();
    for i in (0..n).filter(|&i| kept(i)) {
        s.read(TABLE, &key(i), &mut got).expect("kept object");
    }
    s.log()
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
    (pass, one_segment_passes)
}

/// Tombstone moves are told to the lists in batches while a pass copies
/// (`PendingMoves`, 1,024 at a time): passes that move tens of thousands of live
/// tombstones — L Table 1's W6 shape, half of ~30-byte objects deleted, so whole
/// segments of tombstones whose targets stay in the log — keep the accounting exact
/// after every pass, and lose nothing.
#[test]
fn combined_passes_moving_many_tombstones_keep_the_accounting() {
    let case = Case {
        seed: 7,
        memory_bytes: 128 << 20,
        segment_bytes: 8 << 20,
        value_bytes: 0,
        utilization: 0.5,
        delete_share: 0.0,
        compaction: true,
    };
    let s = store(&case);
    let rules = RejectRules::default();
    let mut n = 0u64;
    while s.stats().log.segments < 5 {
        s.write(TABLE, &key(n), b"", &rules).expect("room");
        n += 1;
    }
    // Every object of the first segment's worth, and every other one after it:
    // the tombstone segments hold tombstones that die with the first victims and
    // tombstones that stay live, which later passes must move.
    let first = n / 4;
    let deleted = |i: u64| i < first || i.is_multiple_of(2);
    for i in (0..n).filter(|&i| deleted(i)) {
        s.remove(TABLE, &key(i), &rules).expect("delete");
    }
    s.log().roll_head_now();
    let tombstone_segments = s.stats().log.segments - 5;
    assert!(tombstone_segments >= 2, "{}", describe(&s.stats().log));
    let moved_before = s.stats().log.tombstones_moved;
    for _ in 0..16 {
        let Some((_, pass)) = s.clean_now(Some(ramstore_log::CleanKind::Combined)) else {
            break;
        };
        s.log()
            .verify_tombstone_accounting()
            .expect("tombstone accounting after a pass");
        if !pass.made_progress {
            break;
        }
    }
    let moved = s.stats().log.tombstones_moved - moved_before;
    assert!(
        moved > 4 * 1024,
        "{moved} live tombstones moved: too few to need several batches; {}",
        describe(&s.stats().log)
    );
    let mut got = Vec::new();
    for i in (0..n).filter(|&i| !deleted(i)) {
        s.read(TABLE, &key(i), &mut got).expect("kept object");
    }
    for i in (0..n).filter(|&i| deleted(i)).step_by(97) {
        assert!(
            s.read(TABLE, &key(i), &mut got).is_err(),
            "deleted object {i} came back"
        );
    }
}

/// Regression (issue 17, session 28: 90%/30% write throughput 0.12 at 128 MiB, 0.56
/// at 1 GiB): the combined victim that gains most has more live data than the
/// memory free for a batch pass's survivors — at 90% a log has about 1% free, and
/// an 8 MiB segment's live data is 5.5% of 128 MiB — so a batch pass cleaned only
/// victims that fit, or nothing. Tombstones naming the segment then never died and
/// took the memory compaction lives on. Now that victim is cleaned alone in bounded
/// memory, as the one-segment pass does, and its tombstones die.
#[test]
fn clean_combined_best_victim_larger_than_free_memory_is_cleaned_alone() {
    let case = Case {
        seed: 28,
        memory_bytes: 64 << 20,
        segment_bytes: 8 << 20,
        value_bytes: 100,
        utilization: 1.0,
        delete_share: 0.0,
        compaction: true,
    };
    let s = store(&case);
    let rules = RejectRules::default();
    // The objects of the first segment, then half of them deleted: their
    // tombstones, in later segments, name it.
    let mut n = 0u64;
    while s.stats().log.segments < 2 {
        s.write(TABLE, &key(n), &value(n, 0, 100), &rules)
            .expect("room");
        n += 1;
    }
    let first = n;
    for i in (0..first).step_by(2) {
        s.remove(TABLE, &key(i), &rules).expect("delete");
    }
    // Then everything writes may take, without cleaning.
    while s.write(TABLE, &key(n), &value(n, 0, 100), &rules).is_ok() {
        n += 1;
    }
    s.log().roll_head_now();
    let before = s.stats().log;
    let free_seglets = s.log().pool().available(AllocClass::Cleaner);
    assert!(
        free_seglets * SEGLET_BYTES < (3 << 20),
        "set-up: the victim's ~4 MiB of live data must not fit in {free_seglets} free seglets"
    );
    let (_, pass) = s
        .clean_now(Some(ramstore_log::CleanKind::Combined))
        .unwrap_or_else(|| panic!("no combined pass ran: {}", describe(&s.stats().log)));
    let after = s.stats().log;
    assert_eq!(
        after.incremental_combined_passes - before.incremental_combined_passes,
        1,
        "not cleaned alone: {pass:?}"
    );
    assert!(pass.made_progress, "{pass:?}");
    assert!(
        after.tombstone_bytes < before.tombstone_bytes / 10,
        "the tombstones naming the victim did not die: {} -> {} B",
        before.tombstone_bytes,
        after.tombstone_bytes
    );
    let mut got = Vec::new();
    for i in 0..n {
        let read = s.read(TABLE, &key(i), &mut got);
        if i < first && i % 2 == 0 {
            assert!(read.is_err(), "deleted object {i} read back");
        } else {
            read.unwrap_or_else(|e| panic!("object {i} lost: {e}"));
            assert_eq!(got, value(i, 0, 100));
        }
    }
    s.log()
        .verify_tombstone_accounting()
        .expect("tombstone accounting");
}

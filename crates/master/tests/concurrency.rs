//! Concurrency stress: writers, readers and enumerations race with background
//! cleaner threads in tight memory, so objects are relocated and memory is reused
//! all the time.
//!
//! Each writer owns a disjoint set of keys. A value encodes its key id, the writer's
//! sequence number for the operation and a checksum of its padding. After every
//! acknowledged write or delete the writer publishes `seq << 1 | deleted` in the key's
//! `acked` atomic (and, before a delete starts, the delete's seq in `delete_started`).
//! Readers load `acked` before they read and check:
//! - the value is intact (key id, length, checksum);
//! - it is not older than the acknowledged operation (no lost or stale write);
//! - it is absent only if a delete was acknowledged or had started;
//! - per reader and key, seqs never go back and versions never decrease (and grow
//!   exactly when the seq does).
//!
//! Enumerations run concurrently: every never-deleted key written before the
//! enumeration started appears exactly once, with an intact, not-stale value.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ramstore_master::{
    CleanerMode, EnumeratedObject, ObjectStore, ReadError, RejectRules, StoreConfig, WriteError,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TABLE: u64 = 1;
/// The table is split into two tablets here, so enumerations cross a tablet boundary.
const SPLIT: u64 = 0x6000_0000_0000_0000;
const WRITERS: usize = 2;
const READERS: usize = 2;
const KEYS_PER_WRITER: usize = 150;
/// Keys with a per-writer index below this are never deleted.
const STABLE: usize = 50;
/// Keys with a per-writer index below this may hold values up to 20 KiB; the others
/// up to 2 KiB (bounds live data to ~1.3 MB).
const BIG: usize = 20;
const HEADER: usize = 20;
const MAX_WRITER_OPS: u64 = 400_000;

fn key_name(id: usize) -> Vec<u8> {
    format!("key-{id:05}").into_bytes()
}

fn key_id(key: &[u8]) -> Option<usize> {
    std::str::from_utf8(key)
        .ok()?
        .strip_prefix("key-")?
        .parse()
        .ok()
}

fn padding_byte(id: u32, seq: u64, j: usize) -> u8 {
    let x = (seq ^ ((id as u64) << 40))
        .wrapping_add(j as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

fn fnv(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

/// `id u32 | seq u64 | total length u32 | fnv(padding) u32 | padding`.
fn encode(id: u32, seq: u64, len: usize) -> Vec<u8> {
    let len = len.max(HEADER);
    let padding: Vec<u8> = (0..len - HEADER)
        .map(|j| padding_byte(id, seq, j))
        .collect();
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.extend_from_slice(&fnv(&padding).to_le_bytes());
    v.extend_from_slice(&padding);
    v
}

/// Checks a value's integrity; returns (key id, seq).
fn decode(v: &[u8]) -> Result<(usize, u64), String> {
    if v.len() < HEADER {
        return Err(format!(
            "value of {} bytes is shorter than its header",
            v.len()
        ));
    }
    let id = u32::from_le_bytes(v[0..4].try_into().unwrap());
    let seq = u64::from_le_bytes(v[4..12].try_into().unwrap());
    let len = u32::from_le_bytes(v[12..16].try_into().unwrap()) as usize;
    let sum = u32::from_le_bytes(v[16..20].try_into().unwrap());
    if len != v.len() {
        return Err(format!("value says {len} bytes, has {}", v.len()));
    }
    if fnv(&v[HEADER..]) != sum {
        return Err(format!("checksum mismatch (id {id} seq {seq})"));
    }
    if v[HEADER..]
        .iter()
        .enumerate()
        .any(|(j, &b)| b != padding_byte(id, seq, j))
    {
        return Err(format!("padding mismatch (id {id} seq {seq})"));
    }
    Ok((id as usize, seq))
}

/// What the writers publish per key.
#[derive(Default)]
struct KeyState {
    /// `seq << 1 | deleted` of the last acknowledged operation; 0 before the first.
    acked: AtomicU64,
    /// Seq of the last delete that was started (before `remove` is called).
    delete_started: AtomicU64,
}

/// A writer's final view of its keys: `Some(seq)` of the last write, `None` if the
/// last operation deleted the key or it was never written.
type FinalState = Vec<(usize, Option<u64>)>;

struct Shared<'a> {
    store: &'a ObjectStore,
    keys: Vec<KeyState>,
    stop: AtomicBool,
}

fn retry_nospace<T>(
    store: &ObjectStore,
    what: &str,
    mut op: impl FnMut() -> Result<T, WriteError>,
) -> T {
    let started = Instant::now();
    loop {
        match op() {
            Ok(t) => return t,
            Err(WriteError::NoSpace) if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("{what}: {e}: {:#?}", store.stats().log),
        }
    }
}

fn writer(sh: &Shared<'_>, w: usize, seed: u64) -> FinalState {
    let mut rng = StdRng::seed_from_u64(seed);
    let none = RejectRules::default();
    let ids: Vec<usize> = (0..KEYS_PER_WRITER)
        .map(|i| w * KEYS_PER_WRITER + i)
        .collect();
    let mut last_write: HashMap<usize, Option<u64>> = HashMap::new();
    let mut last_version: HashMap<usize, u64> = HashMap::new();
    let mut seq = 0u64;
    while !sh.stop.load(Ordering::Relaxed) && seq < MAX_WRITER_OPS {
        let i = rng.gen_range(0..KEYS_PER_WRITER);
        let id = ids[i];
        let key = key_name(id);
        seq += 1;
        let st = &sh.keys[id];
        if i >= STABLE && rng.gen_bool(0.15) {
            st.delete_started.store(seq, Ordering::SeqCst);
            let old = retry_nospace(sh.store, "remove", || sh.store.remove(TABLE, &key, &none));
            let expect_present = matches!(last_write.get(&id), Some(Some(_)));
            assert_eq!(old.is_some(), expect_present, "remove of key {id}: {old:?}");
            if let Some(v) = old {
                assert_eq!(Some(&v), last_version.get(&id), "remove of key {id}");
            }
            st.acked.store(seq << 1 | 1, Ordering::SeqCst);
            last_write.insert(id, None);
        } else {
            let len = if i < BIG {
                rng.gen_range(50..=20 << 10)
            } else {
                rng.gen_range(50..=2048)
            };
            let value = encode(id as u32, seq, len);
            let version = retry_nospace(sh.store, "write", || {
                sh.store.write(TABLE, &key, &value, &none)
            });
            if let Some(&prev) = last_version.get(&id) {
                assert!(version > prev, "key {id}: version {version} after {prev}");
            }
            last_version.insert(id, version);
            st.acked.store(seq << 1, Ordering::SeqCst);
            last_write.insert(id, Some(seq));
        }
    }
    ids.iter()
        .map(|&id| (id, last_write.get(&id).copied().flatten()))
        .collect()
}

/// Per reader and key: the last (seq, version) seen.
struct ReaderView {
    last: HashMap<usize, (u64, u64)>,
}

impl ReaderView {
    /// Checks one read of key `id`, given `acked` loaded before the read started.
    fn check(
        &mut self,
        sh: &Shared<'_>,
        id: usize,
        acked: u64,
        got: Result<(&[u8], u64), ReadError>,
    ) {
        let (acked_seq, acked_deleted) = (acked >> 1, acked & 1 == 1);
        match got {
            Ok((value, version)) => {
                let (vid, seq) = decode(value).unwrap_or_else(|e| panic!("key {id}: {e}"));
                assert_eq!(vid, id, "key {id} holds the value of key {vid}");
                if acked != 0 {
                    assert!(
                        seq > acked_seq || (seq == acked_seq && !acked_deleted),
                        "key {id}: read seq {seq} although op {acked_seq} (delete: \
                         {acked_deleted}) was acknowledged before the read"
                    );
                }
                if let Some(&(ls, lv)) = self.last.get(&id) {
                    assert!(seq >= ls, "key {id}: seq went back from {ls} to {seq}");
                    assert!(
                        version >= lv,
                        "key {id}: version went back from {lv} to {version}"
                    );
                    if seq > ls {
                        assert!(
                            version > lv,
                            "key {id}: new seq {seq} with old version {version}"
                        );
                    } else {
                        assert_eq!(version, lv, "key {id}: same seq {seq}, other version");
                    }
                }
                self.last.insert(id, (seq, version));
            }
            Err(ReadError::ObjectDoesntExist) => {
                let delete_started = sh.keys[id].delete_started.load(Ordering::SeqCst);
                assert!(
                    acked == 0 || acked_deleted || delete_started > acked_seq,
                    "key {id} is missing although write {acked_seq} was acknowledged and no \
                     delete started after it"
                );
            }
            Err(e) => panic!("read key {id}: {e}"),
        }
    }
}

fn reader(sh: &Shared<'_>, seed: u64) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut view = ReaderView {
        last: HashMap::new(),
    };
    let mut buf = Vec::new();
    let mut reads = 0u64;
    let n = WRITERS * KEYS_PER_WRITER;
    while !sh.stop.load(Ordering::Relaxed) {
        if reads % 8 == 7 {
            let ids: Vec<usize> = (0..4).map(|_| rng.gen_range(0..n)).collect();
            let keys: Vec<Vec<u8>> = ids.iter().map(|&id| key_name(id)).collect();
            let acked: Vec<u64> = ids
                .iter()
                .map(|&id| sh.keys[id].acked.load(Ordering::SeqCst))
                .collect();
            let items: Vec<(u64, &[u8])> = keys.iter().map(|k| (TABLE, k.as_slice())).collect();
            let got = sh.store.multi_read(&items);
            for ((&id, &a), g) in ids.iter().zip(&acked).zip(got) {
                view.check(
                    sh,
                    id,
                    a,
                    g.as_ref()
                        .map(|(v, ver)| (v.as_slice(), *ver))
                        .map_err(|e| *e),
                );
            }
            reads += 4;
        } else {
            let id = rng.gen_range(0..n);
            let acked = sh.keys[id].acked.load(Ordering::SeqCst);
            let got = sh.store.read(TABLE, &key_name(id), &mut buf);
            view.check(sh, id, acked, got.map(|v| (buf.as_slice(), v)));
            reads += 1;
        }
    }
    reads
}

fn enumerator(sh: &Shared<'_>, seed: u64) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut rounds = 0u64;
    let mut out: Vec<EnumeratedObject> = Vec::new();
    while !sh.stop.load(Ordering::Relaxed) {
        // Stable keys acknowledged before the enumeration starts must appear once.
        let acked_before: Vec<(usize, u64)> = (0..WRITERS)
            .flat_map(|w| (0..STABLE).map(move |i| w * KEYS_PER_WRITER + i))
            .map(|id| (id, sh.keys[id].acked.load(Ordering::SeqCst)))
            .filter(|&(_, a)| a != 0)
            .collect();
        let max_bytes = rng.gen_range(0..100_000);
        out.clear();
        let mut cursor = 0u64;
        let mut calls = 0;
        loop {
            calls += 1;
            assert!(calls < 1 << 20, "enumeration does not end");
            match sh.store.enumerate(TABLE, cursor, max_bytes, &mut out) {
                Ok(Some(next)) => {
                    assert!(next > cursor, "cursor went back");
                    cursor = next;
                }
                Ok(None) => break,
                Err(e) => panic!("enumerate at {cursor:#x}: {e}"),
            }
        }
        let mut seen: HashMap<usize, (usize, u64)> = HashMap::new();
        for o in &out {
            let id = key_id(&o.key).unwrap_or_else(|| panic!("enumerated unknown key {:?}", o.key));
            let (vid, seq) =
                decode(&o.value).unwrap_or_else(|e| panic!("enumerated key {id}: {e}"));
            assert_eq!(vid, id, "enumerated key {id} holds the value of key {vid}");
            let e = seen.entry(id).or_insert((0, seq));
            e.0 += 1;
        }
        for (id, acked) in acked_before {
            let (count, seq) = seen.get(&id).copied().unwrap_or((0, 0));
            assert_eq!(
                count,
                1,
                "stable key {id} (acked op {}) appeared {count} times in an enumeration \
                 (max_bytes {max_bytes})",
                acked >> 1
            );
            assert!(
                seq >= acked >> 1,
                "enumerated key {id}: seq {seq} older than acked {}",
                acked >> 1
            );
        }
        rounds += 1;
    }
    rounds
}

/// Hash table sizes for `stress`.
#[derive(Clone, Copy)]
enum Buckets {
    /// The default (one bucket per 640 B of memory): chains are short.
    Default,
    /// Two buckets: chains of tens of overflow buckets whose tails empty and
    /// are reused by the other chain as deletes and inserts come and go.
    Two,
}

fn stress(cleaner_threads: usize, compaction: bool, seconds: f64, seed: u64, buckets: Buckets) {
    let mut cfg = StoreConfig::new(4 << 20);
    cfg.segment_bytes = 512 << 10;
    if let Buckets::Two = buckets {
        cfg.hash_table_buckets = Some(2);
    }
    cfg.compaction = compaction;
    cfg.cleaner = CleanerMode::Background {
        threads: cleaner_threads,
    };
    let store = ObjectStore::new(cfg).unwrap();
    store.add_tablet(TABLE, 0, SPLIT - 1).unwrap();
    store.add_tablet(TABLE, SPLIT, u64::MAX).unwrap();
    let sh = Shared {
        store: &store,
        keys: (0..WRITERS * KEYS_PER_WRITER)
            .map(|_| KeyState::default())
            .collect(),
        stop: AtomicBool::new(false),
    };
    // Whether overflow buckets in use ever fell (emptied tails were unlinked).
    let mut overflow_unlinked = false;
    let mut peak_overflow = 0;
    let (finals, reads, enumerations) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let sh = &sh;
                s.spawn(move || writer(sh, w, seed + w as u64))
            })
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                let sh = &sh;
                s.spawn(move || reader(sh, seed + 100 + r as u64))
            })
            .collect();
        let en = {
            let sh = &sh;
            s.spawn(move || enumerator(sh, seed + 200))
        };
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        while Instant::now() < deadline && !writers.iter().all(|w| w.is_finished()) {
            if readers.iter().any(|r| r.is_finished()) || en.is_finished() {
                break; // a checker panicked: stop everyone and report it
            }
            std::thread::sleep(Duration::from_millis(10));
            let stats = store.stats();
            let in_use = stats.hash_table_overflow_buckets_in_use;
            overflow_unlinked |= in_use < peak_overflow;
            peak_overflow = peak_overflow.max(in_use);
        }
        sh.stop.store(true, Ordering::SeqCst);
        let finals: Vec<FinalState> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        (finals, reads, en.join().unwrap())
    });
    // Quiescent: every key holds exactly what its writer last did.
    let mut buf = Vec::new();
    let mut objects = 0;
    for (id, last) in finals.into_iter().flatten() {
        match (last, store.read(TABLE, &key_name(id), &mut buf)) {
            (Some(seq), Ok(_)) => {
                assert_eq!(decode(&buf), Ok((id, seq)), "final value of key {id}");
                objects += 1;
            }
            (None, Err(ReadError::ObjectDoesntExist)) => {}
            (want, got) => panic!("key {id}: final state {want:?}, read {got:?}"),
        }
    }
    let stats = store.stats();
    assert_eq!(stats.objects, objects);
    let log = stats.log;
    eprintln!(
        "cleaners {cleaner_threads} compaction {compaction}: {reads} reads, {enumerations} \
         enumerations, {} compactions, {} combined passes, {} MB appended",
        log.compactions,
        log.combined_passes,
        log.appended_bytes >> 20
    );
    assert!(log.compactions + log.combined_passes > 0, "{log:#?}");
    assert!(reads > 0 && enumerations > 0);
    if let Buckets::Two = buckets {
        // Sampling may miss a short dip of the in-use count on a busy machine;
        // the cumulative count cannot.
        assert!(
            overflow_unlinked || stats.hash_table_overflow_buckets_released > 0,
            "no overflow tail was unlinked"
        );
        assert!(stats.hash_table_overflow_buckets_high_water >= peak_overflow);
    }
}

/// Two writers, two readers and an enumerator race with two background cleaner
/// threads (two-level cleaning): no reader ever sees a corrupt, foreign, stale or
/// lost value, versions never go back, enumerations return every stable key once.
#[test]
fn readers_never_see_stale_or_torn_values_two_cleaners() {
    stress(2, true, 2.5, 1, Buckets::Default);
}

/// As `readers_never_see_stale_or_torn_values_two_cleaners`, with one background
/// cleaner thread doing one-level (combined only) cleaning.
#[test]
fn readers_never_see_stale_or_torn_values_one_level_cleaner() {
    stress(1, false, 2.0, 7, Buckets::Default);
}

/// As `readers_never_see_stale_or_torn_values_two_cleaners`, in a hash table of two
/// buckets: chain tails are unlinked and reused by the other chain while readers
/// and enumerations walk them (an enumeration's walk may pass the other bucket's
/// entries, which must not be returned twice).
#[test]
fn readers_never_see_stale_or_torn_values_long_chains_reusing_overflow() {
    stress(1, true, 2.0, 21, Buckets::Two);
}

/// An acknowledged write is never lost to a cleaning pass that picks the segment it
/// was appended to right after that segment stopped being the head (before the
/// writer published the object in the hash table). Writers overwrite a small hot key
/// set with mid-size values, so heads close often and are mostly dead at once (the
/// cleaners' favourite victims); every writer reads its own write back at once, and
/// everything is checked at the end.
#[test]
fn acknowledged_writes_survive_cleaning_of_just_closed_head() {
    hot_overwrites(false, 11, 1.5);
    hot_overwrites(true, 12, 0.5);
}

fn hot_overwrites(compaction: bool, seed: u64, seconds: f64) {
    let threads = 6;
    let keys = 100;
    let (vmin, vmax) = (50, 2000);
    let mut cfg = StoreConfig::new(4 << 20);
    cfg.segment_bytes = 512 << 10;
    cfg.compaction = compaction;
    cfg.cleaner = CleanerMode::Background { threads: 1 };
    let store = ObjectStore::new(cfg).unwrap();
    store.add_tablet(TABLE, 0, u64::MAX).unwrap();
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let finals: Vec<Vec<(usize, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (store, stop) = (&store, &stop);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * 100 + t as u64);
                    let mut last = vec![0u64; keys];
                    let mut buf = Vec::new();
                    let mut seq = 0;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        let k = rng.gen_range(0..keys);
                        let id = t * keys + k;
                        seq += 1;
                        let value = encode(id as u32, seq, rng.gen_range(vmin..vmax));
                        let key = key_name(id);
                        retry_nospace(store, "write", || {
                            store.write(TABLE, &key, &value, &RejectRules::default())
                        });
                        last[k] = seq;
                        let got = store.read(TABLE, &key, &mut buf);
                        assert!(
                            got.is_ok(),
                            "key {id}: own write {seq} not readable: {got:?}"
                        );
                        assert_eq!(decode(&buf), Ok((id, seq)), "key {id}: own write");
                    }
                    stop.store(true, Ordering::Relaxed);
                    last.into_iter()
                        .enumerate()
                        .map(|(k, seq)| (t * keys + k, seq))
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut buf = Vec::new();
    for (id, seq) in finals.into_iter().flatten().filter(|&(_, seq)| seq > 0) {
        assert!(
            store.read(TABLE, &key_name(id), &mut buf).is_ok(),
            "key {id}"
        );
        assert_eq!(decode(&buf), Ok((id, seq)), "final value of key {id}");
    }
    let log = store.stats().log;
    assert!(log.compactions + log.combined_passes > 0, "{log:#?}");
}

//! Model-based property tests of the object store.
//!
//! Random sequences of every object operation (write, read, remove, conditional write
//! and remove under random reject rules, increments, multi-operations, enumeration and
//! forced cleaning passes) run against an `ObjectStore` with tiny memory, so the
//! cleaner runs all the time, and against a `BTreeMap` model that predicts every
//! result exactly: values, errors and versions (by the safe-version rule of R§3.1).
//!
//! Layout of every case:
//! - table 1: one tablet over the whole hash space;
//! - table 2: two tablets, split at `SPLIT`;
//! - table 3: one tablet over `[0, T3_END]` only, so some of its keys are not owned;
//! - table 42: not owned at all (every operation gives `UnknownTablet`);
//! - table 9: ballast, written once at start-up and never touched again, so live
//!   data is high enough for the cleaner to work (and relocate it) in every case.
//!
//! Keys come from a small pool per table (the empty key included) so overwrites and
//! deletes hit existing objects; values are mostly small, some up to 70 KiB (entries
//! span 64 KiB seglets). Large values are only stored under three keys per table,
//! which bounds live data well below the memory size: `NoSpace` must always go away
//! after cleaning (the test fails if it does not).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ramstore_log::CleanKind;
use ramstore_master::{
    key_hash, CleanerMode, EnumeratedObject, MultiWrite, ObjectStore, ReadError, RejectRules,
    StoreConfig, WriteError,
};

const MEMORY_BYTES: usize = 8 << 20;
const SEGMENT_BYTES: usize = 512 << 10;
/// Table 2 is split into `[0, SPLIT - 1]` and `[SPLIT, u64::MAX]`.
const SPLIT: u64 = 0x9e37_79b9_7f4a_7c15;
/// Table 3 owns only `[0, T3_END]`.
const T3_END: u64 = 0xbfff_ffff_ffff_ffff;
const BALLAST_TABLE: u64 = 9;
const BALLAST_OBJECTS: usize = 600;
/// Tables the operations address, by index; the last one is never owned.
const TABLES: [u64; 4] = [1, 2, 3, 42];
/// Keys per table pool; index 0 is the empty key.
const POOL: usize = 8;
/// Only keys with a pool index below this may hold values above `SMALL_MAX`.
const LARGE_KEYS: usize = 3;
const SMALL_MAX: usize = 2048;
const LARGE_MAX: usize = 70 * 1024;
/// A full verification every this many operations.
const VERIFY_EVERY: usize = 64;

/// The tablets of each table: inclusive hash ranges, in order.
fn tablets_of(table: u64) -> &'static [(u64, u64)] {
    match table {
        1 | BALLAST_TABLE => &[(0, u64::MAX)],
        2 => &[(0, SPLIT - 1), (SPLIT, u64::MAX)],
        3 => &[(0, T3_END)],
        _ => &[],
    }
}

fn owned(table: u64, key: &[u8]) -> bool {
    let h = key_hash(key);
    tablets_of(table).iter().any(|&(s, e)| s <= h && h <= e)
}

/// Deterministic pseudo-random bytes, so values are cheap to generate and shrink
/// while every byte position is distinguishable.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn ballast_key(i: usize) -> Vec<u8> {
    format!("ballast-{i}").into_bytes()
}

/// 5000–9999 bytes, so ballast entries often straddle seglet boundaries.
fn ballast_value(i: usize, seed: u8) -> Vec<u8> {
    let len = 5000 + (i * 37 + seed as usize * 101) % 5000;
    pattern(len, 1_000_000 + (i as u64) * 256 + seed as u64)
}

// ---------------------------------------------------------------------------------
// Generated operations
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum ValSpec {
    Bytes {
        len: usize,
        seed: u8,
    },
    I64(i64),
    F64(f64),
    /// Text that looks like a number but is not a canonical integer ("+1", "01").
    Text(&'static str),
}

impl ValSpec {
    fn materialize(&self, key: KeyRef) -> Vec<u8> {
        match *self {
            ValSpec::Bytes { len, seed } => {
                let len = if key.k < LARGE_KEYS {
                    len
                } else {
                    len % (SMALL_MAX + 1)
                };
                pattern(len, seed as u64 + 1)
            }
            // Counters are stored as decimal text (Redis's form).
            ValSpec::I64(n) => n.to_string().into_bytes(),
            ValSpec::F64(x) => float_text(x).into_bytes(),
            ValSpec::Text(t) => t.as_bytes().to_vec(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct KeyRef {
    /// Index into `TABLES`.
    t: usize,
    /// Index into the table's key pool.
    k: usize,
}

#[derive(Clone, Copy, Debug)]
enum Given {
    /// Relative to the key's current version in the model (its safe version if the
    /// key does not exist), so version rules often sit right at the boundary.
    Rel(i8),
    Abs(u64),
}

#[derive(Clone, Copy, Debug)]
enum RulesSpec {
    Flags {
        doesnt_exist: bool,
        exists: bool,
        le: bool,
        ne: bool,
        gt: bool,
        given: Given,
    },
    MustExist,
    MustNotExist,
    VersionMustEqual(Given),
    VersionMustBeAtMost(Given),
}

#[derive(Clone, Copy, Debug)]
enum CleanSpec {
    Balancer,
    Compaction,
    Combined,
    Nothing,
}

#[derive(Clone, Debug)]
enum Op {
    Write(KeyRef, ValSpec, Option<RulesSpec>),
    Read(KeyRef),
    Remove(KeyRef, Option<RulesSpec>),
    IncI64(KeyRef, i64, Option<RulesSpec>),
    IncF64(KeyRef, f64, Option<RulesSpec>),
    MultiRead(Vec<KeyRef>),
    MultiWrite(Vec<(KeyRef, ValSpec, Option<RulesSpec>)>),
    MultiRemove(Vec<(KeyRef, Option<RulesSpec>)>),
    Enumerate(usize, usize),
    Clean(CleanSpec),
    Verify,
    /// Overwrites (and sometimes deletes) `n` ballast objects from `start` on: lots of
    /// appended bytes without more live data, so the cleaner has work in every case.
    Churn {
        start: usize,
        n: usize,
        seed: u8,
    },
}

fn key_ref() -> impl Strategy<Value = KeyRef> {
    (prop_oneof![12 => 0usize..3, 1 => Just(3usize)], 0..POOL).prop_map(|(t, k)| KeyRef { t, k })
}

fn val_spec() -> impl Strategy<Value = ValSpec> {
    prop_oneof![
        6 => (0usize..200, any::<u8>()).prop_map(|(len, seed)| ValSpec::Bytes { len, seed }),
        2 => (200usize..8192, any::<u8>()).prop_map(|(len, seed)| ValSpec::Bytes { len, seed }),
        2 => (8192usize..=LARGE_MAX, any::<u8>()).prop_map(|(len, seed)| ValSpec::Bytes { len, seed }),
        2 => prop_oneof![
            -1000i64..1000,
            Just(i64::MAX),
            Just(i64::MIN),
            Just(i64::MAX - 3),
            any::<i64>()
        ]
        .prop_map(ValSpec::I64),
        1 => prop_oneof![
            -1000.0f64..1000.0,
            Just(f64::MAX),
            Just(-f64::MAX),
            any::<f64>()
        ]
        .prop_map(ValSpec::F64),
        1 => prop::sample::select(vec!["+1", "01", "-0", " 7", "7 ", "1.5", "1e3", "-"])
            .prop_map(ValSpec::Text),
    ]
}

fn given() -> impl Strategy<Value = Given> {
    prop_oneof![3 => (-2i8..=2).prop_map(Given::Rel), 1 => (0u64..40).prop_map(Given::Abs)]
}

fn rules() -> impl Strategy<Value = Option<RulesSpec>> {
    let flag = || prop::bool::weighted(0.25);
    prop_oneof![
        6 => Just(None),
        3 => (flag(), flag(), flag(), flag(), flag(), given()).prop_map(
            |(doesnt_exist, exists, le, ne, gt, given)| Some(RulesSpec::Flags {
                doesnt_exist,
                exists,
                le,
                ne,
                gt,
                given,
            })
        ),
        1 => Just(Some(RulesSpec::MustExist)),
        1 => Just(Some(RulesSpec::MustNotExist)),
        1 => given().prop_map(|g| Some(RulesSpec::VersionMustEqual(g))),
        1 => given().prop_map(|g| Some(RulesSpec::VersionMustBeAtMost(g))),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (key_ref(), val_spec(), rules()).prop_map(|(k, v, r)| Op::Write(k, v, r)),
        5 => key_ref().prop_map(Op::Read),
        4 => (key_ref(), rules()).prop_map(|(k, r)| Op::Remove(k, r)),
        2 => (
            key_ref(),
            prop_oneof![-100i64..100, Just(i64::MAX), Just(i64::MIN), any::<i64>()],
            rules()
        )
            .prop_map(|(k, d, r)| Op::IncI64(k, d, r)),
        2 => (
            key_ref(),
            prop_oneof![
                -100.0f64..100.0,
                Just(f64::MAX),
                Just(f64::INFINITY),
                Just(f64::NAN),
                any::<f64>()
            ],
            rules()
        )
            .prop_map(|(k, d, r)| Op::IncF64(k, d, r)),
        1 => prop::collection::vec(key_ref(), 1..6).prop_map(Op::MultiRead),
        1 => prop::collection::vec((key_ref(), val_spec(), rules()), 1..5).prop_map(Op::MultiWrite),
        1 => prop::collection::vec((key_ref(), rules()), 1..5).prop_map(Op::MultiRemove),
        1 => (
            prop_oneof![6 => 0usize..3, 1 => Just(3usize)],
            prop_oneof![Just(0usize), 1usize..2000, 2000usize..300_000]
        )
            .prop_map(|(t, m)| Op::Enumerate(t, m)),
        1 => prop_oneof![
            Just(CleanSpec::Balancer),
            Just(CleanSpec::Compaction),
            Just(CleanSpec::Combined),
            Just(CleanSpec::Nothing)
        ]
        .prop_map(Op::Clean),
        1 => Just(Op::Verify),
        2 => (0..BALLAST_OBJECTS, 10usize..150, any::<u8>())
            .prop_map(|(start, n, seed)| Op::Churn { start, n, seed }),
    ]
}

/// Key pools of tables 1–3 (table 42 uses table 1's): the empty key, then short and
/// long keys up to 200 bytes.
fn pools() -> impl Strategy<Value = Vec<Vec<Vec<u8>>>> {
    let key = prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 1..8),
        1 => prop::collection::vec(any::<u8>(), 8..=200),
    ];
    prop::collection::vec(prop::collection::vec(key, POOL - 1), 3).prop_map(|tables| {
        tables
            .into_iter()
            .map(|mut keys| {
                keys.insert(0, Vec::new());
                keys
            })
            .collect()
    })
}

fn case(max_ops: usize) -> impl Strategy<Value = (Vec<Vec<Vec<u8>>>, Vec<Op>)> {
    (pools(), prop::collection::vec(op(), 1..max_ops))
}

// ---------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------

type Objects = BTreeMap<(u64, Vec<u8>), (Vec<u8>, u64)>;

struct Model {
    objects: Objects,
    /// The master's safe version (R§3.1).
    safe: u64,
}

/// The reject-rule semantics, written independently of `RejectRules::check`.
fn model_check(rules: &RejectRules, current: Option<u64>) -> Result<(), WriteError> {
    let Some(v) = current else {
        return if rules.doesnt_exist {
            Err(WriteError::ObjectDoesntExist)
        } else {
            Ok(())
        };
    };
    let g = rules.given_version;
    if rules.exists {
        Err(WriteError::ObjectExists)
    } else if (rules.version_le_given && v <= g)
        || (rules.version_ne_given && v != g)
        || (rules.version_gt_given && v > g)
    {
        Err(WriteError::WrongVersion { current: v })
    } else {
        Ok(())
    }
}

impl Model {
    fn current(&self, table: u64, key: &[u8]) -> Option<&(Vec<u8>, u64)> {
        self.objects.get(&(table, key.to_vec()))
    }

    fn read(&self, table: u64, key: &[u8]) -> Result<(Vec<u8>, u64), ReadError> {
        if !owned(table, key) {
            return Err(ReadError::UnknownTablet);
        }
        self.current(table, key)
            .cloned()
            .ok_or(ReadError::ObjectDoesntExist)
    }

    /// The outcome of a write or increment: the new version and value.
    fn update(
        &self,
        table: u64,
        key: &[u8],
        rules: &RejectRules,
        compute: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, WriteError>,
    ) -> Result<(u64, Vec<u8>), WriteError> {
        if !owned(table, key) {
            return Err(WriteError::UnknownTablet);
        }
        let cur = self.current(table, key);
        model_check(rules, cur.map(|c| c.1))?;
        let value = compute(cur.map(|c| c.0.as_slice()))?;
        let version = cur.map_or(self.safe, |c| c.1 + 1);
        Ok((version, value))
    }

    fn remove(
        &self,
        table: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<Option<u64>, WriteError> {
        if !owned(table, key) {
            return Err(WriteError::UnknownTablet);
        }
        let cur = self.current(table, key).map(|c| c.1);
        model_check(rules, cur)?;
        Ok(cur)
    }

    fn apply_write(&mut self, table: u64, key: &[u8], value: Vec<u8>, version: u64) {
        self.objects.insert((table, key.to_vec()), (value, version));
    }

    fn apply_remove(&mut self, table: u64, key: &[u8]) {
        if let Some((_, v)) = self.objects.remove(&(table, key.to_vec())) {
            self.safe = self.safe.max(v + 1);
        }
    }

    fn table(&self, table: u64) -> Vec<(Vec<u8>, Vec<u8>, u64)> {
        self.objects
            .range((table, Vec::new())..(table + 1, Vec::new()))
            .map(|((_, k), (v, ver))| (k.clone(), v.clone(), *ver))
            .collect()
    }

    fn live_bytes(&self) -> usize {
        self.objects
            .iter()
            .map(|((_, k), (v, _))| k.len() + v.len())
            .sum()
    }
}

/// The model's counter rules, stated independently of the store's parser: an
/// integer counter is exactly the text Rust writes for some i64 (which rules out
/// "+1", "01", "-0" and spaces, as Redis does); a float counter is any finite number
/// Rust parses from unspaced text; a float is written in Rust's shortest form, "0"
/// for -0.
fn model_i64(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    s.parse::<i64>().ok().filter(|n| n.to_string() == s)
}

fn model_f64(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.trim() != s {
        return None;
    }
    s.parse::<f64>().ok().filter(|x| x.is_finite())
}

fn float_text(x: f64) -> String {
    format!("{}", if x == 0.0 { 0.0 } else { x })
}

fn inc_i64(old: Option<&[u8]>, delta: i64) -> Result<Vec<u8>, WriteError> {
    let old = match old {
        None => 0,
        Some(b) => model_i64(b).ok_or(WriteError::NotNumeric(b.len()))?,
    };
    old.checked_add(delta)
        .map(|n| n.to_string().into_bytes())
        .ok_or(WriteError::Overflow)
}

fn inc_f64(old: Option<&[u8]>, delta: f64) -> Result<Vec<u8>, WriteError> {
    let old = match old {
        None => 0.0,
        Some(b) => model_f64(b).ok_or(WriteError::NotNumeric(b.len()))?,
    };
    let new = old + delta;
    if new.is_finite() {
        Ok(float_text(new).into_bytes())
    } else {
        Err(WriteError::Overflow)
    }
}

// ---------------------------------------------------------------------------------
// The harness: runs operations on the store and the model side by side
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Mode {
    compaction: bool,
    background: bool,
    /// Hash table buckets (`None`: the default, one per 640 bytes of memory).
    buckets: Option<usize>,
}

struct Harness {
    store: ObjectStore,
    model: Model,
    pools: Vec<Vec<Vec<u8>>>,
    mode: Mode,
    nospace: u64,
}

/// Fails the case with a message.
fn fail<T>(msg: String) -> Result<T, TestCaseError> {
    Err(TestCaseError::fail(msg))
}

impl Harness {
    fn new(mode: Mode, pools: Vec<Vec<Vec<u8>>>) -> Result<Self, TestCaseError> {
        let mut cfg = StoreConfig::new(MEMORY_BYTES);
        cfg.segment_bytes = SEGMENT_BYTES;
        cfg.compaction = mode.compaction;
        cfg.hash_table_buckets = mode.buckets;
        cfg.cleaner = if mode.background {
            CleanerMode::Background { threads: 1 }
        } else {
            CleanerMode::Manual
        };
        let store = ObjectStore::new(cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for table in [1, 2, 3, BALLAST_TABLE] {
            for &(s, e) in tablets_of(table) {
                store
                    .add_tablet(table, s, e)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
        let mut h = Harness {
            store,
            model: Model {
                objects: BTreeMap::new(),
                safe: 1,
            },
            pools,
            mode,
            nospace: 0,
        };
        // Ballast: ~4.4 MiB of live data that stays for the whole case.
        for i in 0..BALLAST_OBJECTS {
            h.write(
                BALLAST_TABLE,
                &ballast_key(i),
                &ballast_value(i, 0),
                &RejectRules::default(),
            )?;
        }
        Ok(h)
    }

    fn churn(&mut self, start: usize, n: usize, seed: u8) -> Result<(), TestCaseError> {
        for j in 0..n {
            let i = (start + j) % BALLAST_OBJECTS;
            let key = ballast_key(i);
            if (i + seed as usize).is_multiple_of(9) {
                self.remove(BALLAST_TABLE, &key, &RejectRules::default())?;
            } else {
                let value = ballast_value(i, seed);
                self.write(BALLAST_TABLE, &key, &value, &RejectRules::default())?;
            }
        }
        Ok(())
    }

    fn key(&self, k: KeyRef) -> (u64, Vec<u8>) {
        (TABLES[k.t], self.pools[k.t.min(2)][k.k].clone())
    }

    fn rules(&self, table: u64, key: &[u8], spec: Option<RulesSpec>) -> RejectRules {
        let given = |g: Given| match g {
            Given::Abs(v) => v,
            Given::Rel(d) => {
                let base = self
                    .model
                    .current(table, key)
                    .map_or(self.model.safe, |c| c.1);
                base.saturating_add_signed(d as i64)
            }
        };
        match spec {
            None => RejectRules::default(),
            Some(RulesSpec::Flags {
                doesnt_exist,
                exists,
                le,
                ne,
                gt,
                given: g,
            }) => RejectRules {
                given_version: given(g),
                doesnt_exist,
                exists,
                version_le_given: le,
                version_ne_given: ne,
                version_gt_given: gt,
            },
            Some(RulesSpec::MustExist) => RejectRules::must_exist(),
            Some(RulesSpec::MustNotExist) => RejectRules::must_not_exist(),
            Some(RulesSpec::VersionMustEqual(g)) => RejectRules::version_must_equal(given(g)),
            Some(RulesSpec::VersionMustBeAtMost(g)) => {
                RejectRules::version_must_be_at_most(given(g))
            }
        }
    }

    /// Makes room after a `NoSpace`: cleaning passes (manual mode) or a short sleep
    /// while the background cleaner works. Fails the case if the log stays full.
    fn relieve(&self, attempt: u32, started: Instant, what: &str) -> Result<(), TestCaseError> {
        let give_up = if self.mode.background {
            started.elapsed() > Duration::from_secs(10)
        } else {
            attempt > 40
        };
        if give_up {
            return fail(format!(
                "{what}: still NoSpace after {attempt} attempts although live data is only \
                 {} bytes of {MEMORY_BYTES}: {:#?}",
                self.model.live_bytes(),
                self.store.stats().log
            ));
        }
        if self.mode.background {
            std::thread::sleep(Duration::from_millis(1));
        } else {
            self.store.clean_now(None);
            self.store.clean_now(Some(CleanKind::Compaction));
            self.store.clean_now(Some(CleanKind::Combined));
        }
        Ok(())
    }

    /// Runs a mutating operation until it does not fail with `NoSpace` (cleaning in
    /// between) and checks its result against `expect`. `NoSpace` is accepted only
    /// where the model expects success. Returns whether the operation happened.
    fn mutate<T: PartialEq + Debug>(
        &mut self,
        what: &dyn Fn() -> String,
        expect: &Result<T, WriteError>,
        mut op: impl FnMut(&ObjectStore) -> Result<T, WriteError>,
    ) -> Result<bool, TestCaseError> {
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            let got = op(&self.store);
            if got == Err(WriteError::NoSpace) && expect.is_ok() {
                self.nospace += 1;
                attempt += 1;
                self.relieve(attempt, started, &what())?;
                continue;
            }
            prop_assert_eq!(&got, expect, "{}", what());
            return Ok(got.is_ok());
        }
    }

    fn write(
        &mut self,
        table: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<(), TestCaseError> {
        let expect = self
            .model
            .update(table, key, rules, |_| Ok(value.to_vec()))
            .map(|(v, _)| v);
        let what = || format!("write {table}:{key:?} ({} bytes) {rules:?}", value.len());
        if self.mutate(&what, &expect, |s| s.write(table, key, value, rules))? {
            self.model
                .apply_write(table, key, value.to_vec(), *expect.as_ref().unwrap());
        }
        Ok(())
    }

    fn remove(&mut self, table: u64, key: &[u8], rules: &RejectRules) -> Result<(), TestCaseError> {
        let expect = self.model.remove(table, key, rules);
        let what = || format!("remove {table}:{key:?} {rules:?}");
        if self.mutate(&what, &expect, |s| s.remove(table, key, rules))? {
            self.model.apply_remove(table, key);
        }
        Ok(())
    }

    fn inc_i64(
        &mut self,
        table: u64,
        key: &[u8],
        delta: i64,
        rules: &RejectRules,
    ) -> Result<(), TestCaseError> {
        let outcome = self
            .model
            .update(table, key, rules, |old| inc_i64(old, delta));
        let expect = outcome
            .clone()
            .map(|(v, bytes)| (model_i64(&bytes).expect("the model wrote an integer"), v));
        let what = || format!("increment_i64 {table}:{key:?} by {delta} {rules:?}");
        if self.mutate(&what, &expect, |s| {
            s.increment_i64(table, key, delta, rules)
        })? {
            let (version, bytes) = outcome.unwrap();
            self.model.apply_write(table, key, bytes, version);
        }
        Ok(())
    }

    fn inc_f64(
        &mut self,
        table: u64,
        key: &[u8],
        delta: f64,
        rules: &RejectRules,
    ) -> Result<(), TestCaseError> {
        let outcome = self
            .model
            .update(table, key, rules, |old| inc_f64(old, delta));
        // Compare floats by their bits; reads compare the stored text with the model's.
        let expect = outcome.clone().map(|(v, bytes)| {
            let x = model_f64(&bytes).expect("the model wrote a finite float");
            (x.to_bits(), v)
        });
        let what = || format!("increment_f64 {table}:{key:?} by {delta} {rules:?}");
        if self.mutate(&what, &expect, |s| {
            s.increment_f64(table, key, delta, rules)
                .map(|(x, v)| (x.to_bits(), v))
        })? {
            let (version, bytes) = outcome.unwrap();
            self.model.apply_write(table, key, bytes, version);
        }
        Ok(())
    }

    fn read(&self, table: u64, key: &[u8]) -> Result<(), TestCaseError> {
        let mut buf = vec![0xAA; 3]; // stale contents must be replaced
        let got = self.store.read(table, key, &mut buf);
        match self.model.read(table, key) {
            Ok((value, version)) => {
                prop_assert_eq!(got, Ok(version), "read {}:{:?}", table, key);
                prop_assert!(
                    buf == value,
                    "read {}:{:?}: value of {} bytes differs from the model's {} bytes",
                    table,
                    key,
                    buf.len(),
                    value.len()
                );
            }
            Err(e) => prop_assert_eq!(got, Err(e), "read {}:{:?}", table, key),
        }
        Ok(())
    }

    /// Enumerates every owned tablet of `table` and compares with the model.
    fn enumerate(&self, table: u64, max_bytes: usize) -> Result<(), TestCaseError> {
        let tablets = tablets_of(table);
        let mut out: Vec<EnumeratedObject> = Vec::new();
        let Some(&(first, _)) = tablets.first() else {
            let got = self.store.enumerate(table, 0, max_bytes, &mut out);
            prop_assert_eq!(got, Err(ReadError::UnknownTablet));
            prop_assert!(out.is_empty());
            return Ok(());
        };
        let mut cursor = first;
        let mut calls = 0u64;
        loop {
            calls += 1;
            prop_assert!(
                calls < 1 << 20,
                "enumeration of table {} does not end",
                table
            );
            let next = self
                .store
                .enumerate(table, cursor, max_bytes, &mut out)
                .map_err(|e| {
                    TestCaseError::fail(format!("enumerate {table} at {cursor:#x}: {e}"))
                })?;
            let Some(next) = next else { break };
            prop_assert!(
                next > cursor,
                "enumeration cursor went back: {} -> {}",
                cursor,
                next
            );
            if tablets.iter().any(|&(s, e)| s <= next && next <= e) {
                cursor = next;
            } else {
                // The rest of the hash space is not ours (table 3).
                let mut none = Vec::new();
                prop_assert_eq!(
                    self.store.enumerate(table, next, max_bytes, &mut none),
                    Err(ReadError::UnknownTablet)
                );
                break;
            }
        }
        let mut got: Vec<(Vec<u8>, Vec<u8>, u64)> = out
            .into_iter()
            .map(|o| (o.key, o.value, o.version))
            .collect();
        got.sort();
        let n = got.len();
        got.dedup_by(|a, b| a.0 == b.0);
        prop_assert_eq!(
            got.len(),
            n,
            "enumeration of table {} returned a key twice",
            table
        );
        let want = self.model.table(table);
        if got != want {
            let keys = |v: &[(Vec<u8>, Vec<u8>, u64)]| {
                v.iter()
                    .map(|o| (o.0.clone(), o.2, o.1.len()))
                    .collect::<Vec<_>>()
            };
            return fail(format!(
                "enumeration of table {table} (max_bytes {max_bytes}) differs:\n got  {:?}\n want {:?}",
                keys(&got),
                keys(&want)
            ));
        }
        Ok(())
    }

    /// Checks the whole store against the model.
    fn verify(&self) -> Result<(), TestCaseError> {
        for (table, key) in self.model.objects.keys() {
            self.read(*table, key)?;
        }
        for (t, &table) in TABLES.iter().enumerate() {
            for key in &self.pools[t.min(2)] {
                self.read(table, key)?;
            }
        }
        for table in [1, 2, 3, 42, BALLAST_TABLE] {
            self.enumerate(table, 64 << 10)?;
        }
        let stats = self.store.stats();
        prop_assert_eq!(stats.objects, self.model.objects.len());
        for t in &stats.tablets {
            let want = self
                .model
                .objects
                .keys()
                .filter(|(table, key)| {
                    let h = key_hash(key);
                    *table == t.table_id && t.start_hash <= h && h <= t.end_hash
                })
                .count() as u64;
            prop_assert_eq!(
                t.entry_count,
                want,
                "tablet {}:[{:#x}, {:#x}] counts objects wrongly",
                t.table_id,
                t.start_hash,
                t.end_hash
            );
        }
        if !self.mode.background {
            // With no cleaner running, tombstone accounting can be checked exactly.
            if let Err(e) = self.store.log().verify_tombstone_accounting() {
                return fail(e);
            }
            // With no cleaner running, the log's live bytes are exactly the tablets'.
            let tablet_bytes: u64 = stats.tablets.iter().map(|t| t.bytes).sum();
            prop_assert_eq!(stats.log.live_object_bytes, tablet_bytes);
        }
        Ok(())
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Write(k, v, r) => {
                let (table, key) = self.key(*k);
                let value = v.materialize(*k);
                let rules = self.rules(table, &key, *r);
                self.write(table, &key, &value, &rules)
            }
            Op::Read(k) => {
                let (table, key) = self.key(*k);
                self.read(table, &key)
            }
            Op::Remove(k, r) => {
                let (table, key) = self.key(*k);
                let rules = self.rules(table, &key, *r);
                self.remove(table, &key, &rules)
            }
            Op::IncI64(k, d, r) => {
                let (table, key) = self.key(*k);
                let rules = self.rules(table, &key, *r);
                self.inc_i64(table, &key, *d, &rules)
            }
            Op::IncF64(k, d, r) => {
                let (table, key) = self.key(*k);
                let rules = self.rules(table, &key, *r);
                self.inc_f64(table, &key, *d, &rules)
            }
            Op::MultiRead(ks) => {
                let keys: Vec<(u64, Vec<u8>)> = ks.iter().map(|k| self.key(*k)).collect();
                let items: Vec<(u64, &[u8])> =
                    keys.iter().map(|(t, k)| (*t, k.as_slice())).collect();
                let got = self.store.multi_read(&items);
                prop_assert_eq!(got.len(), items.len());
                for ((table, key), got) in keys.iter().zip(got) {
                    let want = self.model.read(*table, key);
                    if got != want {
                        return fail(format!(
                            "multi_read {table}:{key:?}: got {:?}, want {:?}",
                            got.as_ref().map(|(v, ver)| (v.len(), *ver)),
                            want.as_ref().map(|(v, ver)| (v.len(), *ver))
                        ));
                    }
                }
                Ok(())
            }
            Op::MultiWrite(items) => {
                let prepared: Vec<(u64, Vec<u8>, Vec<u8>)> = items
                    .iter()
                    .map(|(k, v, _)| {
                        let (t, key) = self.key(*k);
                        (t, key, v.materialize(*k))
                    })
                    .collect();
                // Rules are resolved against the model before the call, as a client
                // would build them.
                let rules: Vec<RejectRules> = prepared
                    .iter()
                    .zip(items)
                    .map(|((t, key, _), (_, _, r))| self.rules(*t, key, *r))
                    .collect();
                let batch: Vec<MultiWrite<'_>> = prepared
                    .iter()
                    .zip(&rules)
                    .map(|((t, key, value), rules)| MultiWrite {
                        table_id: *t,
                        key,
                        value,
                        rules: *rules,
                    })
                    .collect();
                let got = self.store.multi_write(&batch);
                prop_assert_eq!(got.len(), batch.len());
                let mut retry = Vec::new();
                for (i, got) in got.into_iter().enumerate() {
                    let (t, key, value) = &prepared[i];
                    let expect = self
                        .model
                        .update(*t, key, &rules[i], |_| Ok(value.clone()))
                        .map(|(v, _)| v);
                    if got == Err(WriteError::NoSpace) && expect.is_ok() {
                        self.nospace += 1;
                        retry.push(i);
                        continue;
                    }
                    prop_assert_eq!(got, expect, "multi_write item {} {}:{:?}", i, t, key);
                    if let Ok(v) = expect {
                        self.model.apply_write(*t, key, value.clone(), v);
                    }
                }
                for i in retry {
                    let (t, key, value) = &prepared[i];
                    self.relieve(1, Instant::now(), "multi_write")?;
                    self.write(*t, key, value, &rules[i])?;
                }
                Ok(())
            }
            Op::MultiRemove(items) => {
                let prepared: Vec<(u64, Vec<u8>, RejectRules)> = items
                    .iter()
                    .map(|(k, r)| {
                        let (t, key) = self.key(*k);
                        let rules = self.rules(t, &key, *r);
                        (t, key, rules)
                    })
                    .collect();
                let batch: Vec<(u64, &[u8], RejectRules)> = prepared
                    .iter()
                    .map(|(t, key, r)| (*t, key.as_slice(), *r))
                    .collect();
                let got = self.store.multi_remove(&batch);
                prop_assert_eq!(got.len(), batch.len());
                let mut retry = Vec::new();
                for (i, got) in got.into_iter().enumerate() {
                    let (t, key, rules) = &prepared[i];
                    let expect = self.model.remove(*t, key, rules);
                    if got == Err(WriteError::NoSpace) && expect.is_ok() {
                        self.nospace += 1;
                        retry.push(i);
                        continue;
                    }
                    prop_assert_eq!(got, expect, "multi_remove item {} {}:{:?}", i, t, key);
                    if expect.is_ok() {
                        self.model.apply_remove(*t, key);
                    }
                }
                for i in retry {
                    let (t, key, rules) = &prepared[i];
                    self.relieve(1, Instant::now(), "multi_remove")?;
                    self.remove(*t, key, rules)?;
                }
                Ok(())
            }
            Op::Enumerate(t, max_bytes) => self.enumerate(TABLES[*t], *max_bytes),
            Op::Clean(spec) => {
                let (kind, forced) = match spec {
                    CleanSpec::Balancer => (None, None),
                    CleanSpec::Compaction => {
                        (Some(CleanKind::Compaction), Some(CleanKind::Compaction))
                    }
                    CleanSpec::Combined => (Some(CleanKind::Combined), Some(CleanKind::Combined)),
                    CleanSpec::Nothing => (Some(CleanKind::None), None),
                };
                // L§7: once the pool is down to the cleaner's and emergency reserves,
                // no pass may leave less memory free than it found, but for an
                // emergency head, which leaves the log at the next roll (regression:
                // combined passes spent the reserve on heads, session 10).
                let pool = self.store.log().pool();
                let reserves = pool.reserves();
                let free_before = pool.free_seglets();
                let emergency_before = self.store.stats().log.emergency_heads;
                let in_reserve =
                    free_before <= reserves.emergency_seglets + reserves.cleaner_seglets;
                let done = self.store.clean_now(kind);
                let emergency_head = self.store.stats().log.emergency_heads > emergency_before;
                if in_reserve && !emergency_head && !self.mode.background {
                    let free_after = pool.free_seglets();
                    prop_assert!(
                        free_after >= free_before,
                        "a pass ({done:?}) took the reserve from {free_before} to \
                         {free_after} free seglets"
                    );
                }
                match (spec, done) {
                    (CleanSpec::Nothing, Some(d)) => {
                        return fail(format!("clean_now(Some(None)) did something: {d:?}"))
                    }
                    (_, Some((k, _))) if forced.is_some() => {
                        prop_assert_eq!(Some(k), forced, "clean_now ran another cleaner")
                    }
                    _ => {}
                }
                Ok(())
            }
            Op::Verify => self.verify(),
            Op::Churn { start, n, seed } => self.churn(*start, *n, *seed),
        }
    }
}

/// What the cases of one property did, for assertions across cases.
#[derive(Default)]
struct Totals {
    cases: Cell<u64>,
    cleaned_cases: Cell<u64>,
    nospace: Cell<u64>,
}

fn run_property(mode: Mode, cases: u32, max_ops: usize) {
    // `MODEL_CASES_FACTOR=n` runs n times as many cases (bug hunting).
    let factor: u32 = std::env::var("MODEL_CASES_FACTOR")
        .ok()
        .and_then(|f| f.parse().ok())
        .unwrap_or(1);
    let config = Config {
        cases: cases * factor,
        // Every case builds a store with ballast: keep shrinking bounded.
        max_shrink_iters: 1000,
        max_shrink_time: 60_000,
        ..Config::with_source_file(file!())
    };
    let mut runner = TestRunner::new(config);
    let totals = Totals::default();
    let result = runner.run(&case(max_ops), |(pools, ops)| {
        let mut h = Harness::new(mode, pools)?;
        for (i, op) in ops.iter().enumerate() {
            h.run(op)
                .map_err(|e| TestCaseError::fail(format!("op #{i} {op:?}: {e}")))?;
            if i % VERIFY_EVERY == VERIFY_EVERY - 1 {
                h.verify()?;
            }
        }
        h.verify()?;
        let log = h.store.stats().log;
        totals.cases.set(totals.cases.get() + 1);
        if log.compactions + log.combined_passes > 0 {
            totals.cleaned_cases.set(totals.cleaned_cases.get() + 1);
        }
        totals.nospace.set(totals.nospace.get() + h.nospace);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{mode:?}: {e}");
    }
    eprintln!(
        "{mode:?}: {} cases, {} with cleaning, {} NoSpace retries",
        totals.cases.get(),
        totals.cleaned_cases.get(),
        totals.nospace.get()
    );
    // Tiny memory: the cleaner must have been busy in most cases.
    assert!(
        totals.cleaned_cases.get() * 2 >= totals.cases.get(),
        "the cleaner ran in only {} of {} cases",
        totals.cleaned_cases.get(),
        totals.cases.get()
    );
}

/// Every operation's result (values, versions, errors) equals the model's under
/// two-level cleaning (compaction and combined) run by hand, with `NoSpace` always
/// curable by cleaning.
#[test]
fn operations_match_model_two_level_cleaning() {
    run_property(
        Mode {
            compaction: true,
            background: false,
            buckets: None,
        },
        40,
        300,
    );
}

/// As `operations_match_model_two_level_cleaning`, with one-level cleaning
/// (`compaction: false`: the balancer only ever picks combined cleaning).
#[test]
fn operations_match_model_one_level_cleaning() {
    run_property(
        Mode {
            compaction: false,
            background: false,
            buckets: None,
        },
        24,
        300,
    );
}

/// As `operations_match_model_two_level_cleaning`, with the cleaner on a background
/// thread relocating objects while the operations run; `NoSpace` is waited out.
#[test]
fn operations_match_model_background_cleaner() {
    run_property(
        Mode {
            compaction: true,
            background: true,
            buckets: None,
        },
        16,
        300,
    );
}

/// As `operations_match_model_two_level_cleaning`, with a hash table of only 16
/// buckets: every bucket has a long overflow chain, which writes, deletes, cleaner
/// relocations and enumeration batches must all handle.
#[test]
fn operations_match_model_overflow_chains() {
    run_property(
        Mode {
            compaction: true,
            background: false,
            buckets: Some(16),
        },
        16,
        300,
    );
}

/// The named reject-rule constructors mean what their documentation says.
#[test]
fn reject_rules_constructors_match_documented_fields() {
    assert_eq!(
        RejectRules::must_exist(),
        RejectRules {
            doesnt_exist: true,
            ..Default::default()
        }
    );
    assert_eq!(
        RejectRules::must_not_exist(),
        RejectRules {
            exists: true,
            ..Default::default()
        }
    );
    assert_eq!(
        RejectRules::version_must_equal(7),
        RejectRules {
            given_version: 7,
            doesnt_exist: true,
            version_ne_given: true,
            ..Default::default()
        }
    );
    assert_eq!(
        RejectRules::version_must_be_at_most(7),
        RejectRules {
            given_version: 7,
            version_gt_given: true,
            ..Default::default()
        }
    );
    assert_eq!(
        RejectRules::default(),
        RejectRules {
            given_version: 0,
            doesnt_exist: false,
            exists: false,
            version_le_given: false,
            version_ne_given: false,
            version_gt_given: false,
        }
    );
}

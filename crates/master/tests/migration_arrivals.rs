//! Model-based property test of the migration target's arrivals (K§2.3;
//! `ramstore_master::migration::Arrivals`): after any sequence of requests,
//! priority answers and failures, and partition advances, a key is settled
//! exactly when the model says so, a key is never in two PriorityPulls at once,
//! and the migration is complete exactly when every partition is done and no
//! client waits. And of the target's store (`IncomingMigration` with its side
//! logs): whatever clients did, pulled batches (applied [`APPLY_BATCH`] records
//! per hold of the mutex) never overwrite a settled key, and every key reads as
//! the model says before and after the side logs are committed.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use ramstore_master::key_hash;
use ramstore_master::migration::{
    Arrivals, ClientOp, Gate, IncomingMigration, PulledObject, APPLY_BATCH,
};
use ramstore_master::{CleanerMode, ObjectStore, ReadError, RejectRules, StoreConfig};

const KEYS: usize = 12;
const PARTS: u32 = 3;

fn key(i: usize) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

#[derive(Debug, Clone)]
enum Step {
    Request(usize),
    Settle(usize),
    TakePending(usize),
    Answer,
    Fail,
    /// Advance partition `p` to the hash of key `k` plus one, or to its end.
    Advance(usize, Option<usize>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..KEYS).prop_map(Step::Request),
        (0..KEYS).prop_map(Step::Settle),
        (1usize..5).prop_map(Step::TakePending),
        Just(Step::Answer),
        Just(Step::Fail),
        ((0..PARTS as usize), proptest::option::of(0..KEYS)).prop_map(|(p, k)| Step::Advance(p, k)),
    ]
}

/// The model: per-partition cursors, individually settled keys, pending and in
/// flight sets, kept naively.
struct Model {
    bounds: Vec<(u64, u64)>,
    next: Vec<Option<u64>>,
    settled: BTreeSet<usize>,
    pending: BTreeSet<usize>,
    in_flight: BTreeSet<usize>,
}

impl Model {
    fn covered(&self, k: usize) -> bool {
        let h = key_hash(&key(k));
        self.bounds
            .iter()
            .zip(&self.next)
            .any(|(&(lo, hi), next)| (lo..=hi).contains(&h) && next.is_none_or(|n| h < n))
    }

    fn settled(&self, k: usize) -> bool {
        self.covered(k) || self.settled.contains(&k)
    }
}

proptest! {
    #[test]
    fn arrivals_match_the_model(steps in proptest::collection::vec(step(), 1..60)) {
        let mut a = Arrivals::new(0, u64::MAX, PARTS);
        let mut m = Model {
            bounds: a.partitions().iter().map(|p| (p.lo, p.hi)).collect(),
            next: a.partitions().iter().map(|p| p.next).collect(),
            settled: BTreeSet::new(),
            pending: BTreeSet::new(),
            in_flight: BTreeSet::new(),
        };
        let index: BTreeMap<Vec<u8>, usize> = (0..KEYS).map(|i| (key(i), i)).collect();
        let mut last_taken: Vec<Vec<u8>> = Vec::new();
        for s in steps {
            match s {
                Step::Request(k) => {
                    let added = a.request(&key(k));
                    let expect = !m.settled(k) && !m.in_flight.contains(&k) && !m.pending.contains(&k);
                    prop_assert_eq!(added, expect);
                    if expect {
                        m.pending.insert(k);
                    }
                }
                Step::Settle(k) => {
                    a.settle(&key(k));
                    m.settled.insert(k);
                    m.pending.remove(&k);
                }
                Step::TakePending(n) => {
                    let taken = a.take_pending(n);
                    prop_assert!(taken.len() <= n);
                    for t in &taken {
                        let k = index[t];
                        prop_assert!(m.pending.remove(&k), "taken key {} was not pending", k);
                        prop_assert!(m.in_flight.insert(k), "key {} in two pulls", k);
                    }
                    if taken.len() < n {
                        prop_assert!(m.pending.is_empty());
                    }
                    last_taken = taken;
                }
                Step::Answer => {
                    a.priority_answered(&last_taken);
                    for t in last_taken.drain(..) {
                        let k = index[&t];
                        m.in_flight.remove(&k);
                        m.settled.insert(k);
                        m.pending.remove(&k);
                    }
                }
                Step::Fail => {
                    a.priority_failed(&last_taken);
                    for t in last_taken.drain(..) {
                        let k = index[&t];
                        if m.in_flight.remove(&k) && !m.settled(k) {
                            m.pending.insert(k);
                        }
                    }
                }
                Step::Advance(p, k) => {
                    let to = k.map(|k| key_hash(&key(k)).saturating_add(1));
                    a.advance(p, to);
                    let (_, hi) = m.bounds[p];
                    m.next[p] = match (m.next[p], to) {
                        (None, _) | (_, None) => None,
                        (Some(old), Some(new)) => Some(old.max(new).min(hi.saturating_add(1))),
                    }
                    .filter(|n| *n <= hi);
                }
            }
            for k in 0..KEYS {
                prop_assert_eq!(a.is_settled(&key(k)), m.settled(k), "key {}", k);
            }
            let waiters = !m.pending.is_empty() || !m.in_flight.is_empty();
            prop_assert_eq!(a.has_waiters(), waiters);
            prop_assert_eq!(a.is_complete(), m.next.iter().all(Option::is_none) && !waiters);
        }
    }
}

/// Store steps: what clients and pulls do on the target.
#[derive(Debug, Clone)]
enum StoreStep {
    /// A client's blind write of key `k`.
    Write(usize),
    /// A client's delete of key `k` (it waits unless the key is settled).
    Delete(usize),
    /// The PriorityPull in flight is answered with the source's records.
    Priority,
    /// A background batch of these keys' source records (several times the
    /// mutex's batch, so it is applied in several holds).
    Pull(Vec<usize>),
}

fn store_step() -> impl Strategy<Value = StoreStep> {
    prop_oneof![
        (0..KEYS).prop_map(StoreStep::Write),
        (0..KEYS).prop_map(StoreStep::Delete),
        Just(StoreStep::Priority),
        proptest::collection::vec(0..KEYS, 0..3 * APPLY_BATCH).prop_map(StoreStep::Pull),
    ]
}

/// The source's record of key `k`, if it has one (every third key has none):
/// versions below the safe version, 100.
fn source_record(k: usize) -> Option<(Vec<u8>, u64)> {
    (k % 3 != 2).then(|| (format!("source-{k}").into_bytes(), 10 + k as u64))
}

proptest! {
    #[test]
    fn pulled_batches_never_overwrite_settled_keys(
        steps in proptest::collection::vec(store_step(), 1..40),
    ) {
        let mut config = StoreConfig::new(16 << 20);
        config.segment_bytes = 128 * 1024;
        config.cleaner = CleanerMode::Manual;
        let s = ObjectStore::new(config).expect("store");
        s.add_migrating_tablet(1, 0, u64::MAX, 100).expect("tablet");
        let m = IncomingMigration::new(1, (1, 0, u64::MAX), 2, "source".into(), 100);
        let rules = RejectRules::default();
        // The model: each key's value once settled (`None`: absent), and the
        // keys whose source record arrived unsettled.
        let mut settled: BTreeMap<usize, Option<Vec<u8>>> = BTreeMap::new();
        let mut arrived: BTreeSet<usize> = BTreeSet::new();
        let mut in_flight: Vec<Vec<u8>> = Vec::new();
        let index: BTreeMap<Vec<u8>, usize> = (0..KEYS).map(|i| (key(i), i)).collect();
        for step in steps {
            match step {
                StoreStep::Write(k) => {
                    prop_assert_eq!(m.gate(&key(k), ClientOp::BlindWrite), Gate::Go);
                    let value = format!("client-{k}").into_bytes();
                    s.write_arrived(1, &key(k), &value, &rules).expect("write");
                    m.settle(&key(k));
                    settled.insert(k, Some(value));
                }
                StoreStep::Delete(k) => match m.gate(&key(k), ClientOp::ReadsRecord) {
                    Gate::Go => {
                        prop_assert!(settled.contains_key(&k), "key {} let through unsettled", k);
                        s.remove_arrived(1, &key(k), &rules).expect("delete");
                        settled.insert(k, None);
                    }
                    Gate::Wait(_) => prop_assert!(!settled.contains_key(&k)),
                },
                StoreStep::Priority => {
                    if in_flight.is_empty() {
                        in_flight = m.take_pending(256);
                    }
                    let records: Vec<(Vec<u8>, Vec<u8>, u64)> = in_flight
                        .iter()
                        .filter_map(|kb| {
                            source_record(index[kb]).map(|(v, ver)| (kb.clone(), v, ver))
                        })
                        .collect();
                    let pulled = records.iter().map(|(kb, v, ver)| PulledObject {
                        key: kb,
                        value: v,
                        version: *ver,
                    });
                    m.apply_priority(&s, &in_flight, pulled, &[]).expect("priority");
                    for kb in in_flight.drain(..) {
                        let k = index[&kb];
                        settled
                            .entry(k)
                            .or_insert_with(|| source_record(k).map(|(v, _)| v));
                    }
                }
                StoreStep::Pull(keys) => {
                    let records: Vec<(Vec<u8>, Vec<u8>, u64)> = keys
                        .iter()
                        .filter_map(|&k| source_record(k).map(|(v, ver)| (key(k), v, ver)))
                        .collect();
                    let pulled = records.iter().map(|(kb, v, ver)| PulledObject {
                        key: kb,
                        value: v,
                        version: *ver,
                    });
                    // Cursor 0: the batch settles nothing by itself.
                    m.apply_pull(&s, 0, pulled, &[], Some(0)).expect("pull");
                    for &k in &keys {
                        if !settled.contains_key(&k) && source_record(k).is_some() {
                            arrived.insert(k);
                        }
                    }
                }
            }
            check_store(&s, &settled, &arrived)?;
        }
        m.commit_side_logs(&s);
        check_store(&s, &settled, &arrived)?;
    }
}

/// Every key reads as the model says: its settled value, else its source record
/// if that arrived, else nothing.
fn check_store(
    s: &ObjectStore,
    settled: &BTreeMap<usize, Option<Vec<u8>>>,
    arrived: &BTreeSet<usize>,
) -> Result<(), TestCaseError> {
    for k in 0..KEYS {
        let expect = match settled.get(&k) {
            Some(v) => v.clone(),
            None if arrived.contains(&k) => source_record(k).map(|(v, _)| v),
            None => None,
        };
        let found = s.read_with_arrived(1, &key(k), |o| {
            let mut v = Vec::new();
            o.copy_value(&mut v);
            v
        });
        match (found, expect) {
            (Ok(v), Some(e)) => prop_assert_eq!(v, e, "key {}", k),
            (Err(ReadError::ObjectDoesntExist), None) => {}
            (found, expect) => {
                prop_assert!(false, "key {}: found {:?}, expected {:?}", k, found, expect)
            }
        }
    }
    Ok(())
}

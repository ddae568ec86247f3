//! Model-based property test of the migration target's arrivals (K§2.3;
//! `ramstore_master::migration::Arrivals`): after any sequence of requests,
//! priority answers and failures, and partition advances, a key is settled
//! exactly when the model says so, a key is never in two PriorityPulls at once,
//! and the migration is complete exactly when every partition is done and no
//! client waits.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use ramstore_master::key_hash;
use ramstore_master::migration::Arrivals;

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

//! Per-key linearizability search: Wing & Gong's algorithm with Lowe's memoization
//! (the algorithm porcupine and Knossos implement), over the operations of one
//! object. Linearizability is local (Herlihy & Wing), so a history is linearizable
//! iff each object's sub-history is, which keeps every search small.
//!
//! The search picks, again and again, an operation that may take effect next — one
//! invoked before every not yet linearized definite operation returned — applies it
//! to the model, and backtracks when the model refuses. A (linearized set, state)
//! pair seen before is not explored again; the set is remembered by a 128-bit
//! Zobrist hash kept up to date on every step (O(1), and 16 bytes per entry
//! instead of a bit per operation), so a collision — odds about 2⁻¹²⁸ per pair —
//! could at worst prune one branch. Operations whose outcome is unknown are
//! *optional*: they may take effect at any point after their invocation (or before
//! their own return when they are duplicate applications of a completed call), or
//! never.

use std::collections::HashSet;

use crate::history::{Call, Outcome};
use crate::model::{step, State, Values};

/// One operation as the search sees it.
#[derive(Clone, Debug)]
pub struct SearchOp {
    pub invoke: u64,
    /// Return time; `u64::MAX` for an operation that never returned definitely.
    pub ret: u64,
    /// May be left out of the linearization.
    pub optional: bool,
    pub call: Call,
    pub outcome: Outcome,
    /// Index of the operation in the caller's list (for reports).
    pub source: usize,
}

/// The search's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A linearization exists.
    Linearizable,
    /// None exists. `stuck` are the sources of the operations that could have come
    /// next at the deepest point the search reached, with `linearized` definite
    /// operations placed before them.
    NotLinearizable {
        linearized: usize,
        stuck: Vec<usize>,
    },
    /// The step budget ran out before an answer.
    Inconclusive,
}

struct Frame {
    /// Successors still to try: (operation index, state after it).
    next: Vec<(usize, State)>,
    /// The operation that led to this frame, and the previous latest invocation.
    taken: Option<(usize, u64)>,
}

struct Search<'a> {
    ops: &'a [SearchOp],
    linearized: Vec<u64>,
    /// Zobrist hash of `linearized`: the xor of `keys[i]` over linearized `i`.
    hash: u128,
    keys: Vec<u128>,
    /// Latest invocation among linearized operations (optional operations that
    /// returned before it can no longer take effect).
    latest_invoke: u64,
}

impl Search<'_> {
    fn is_set(&self, i: usize) -> bool {
        self.linearized[i / 64] & (1 << (i % 64)) != 0
    }

    fn flip(&mut self, i: usize) {
        self.linearized[i / 64] ^= 1 << (i % 64);
        self.hash ^= self.keys[i];
    }

    /// Indices of the operations that may take effect next (ops sorted by
    /// invocation). An operation invoked after some pending definite operation
    /// returned must wait for it; scanning in invocation order, the running minimum
    /// of pending returns is final for every operation accepted before it (each
    /// later operation returns after it was invoked).
    fn candidates(&self) -> Vec<usize> {
        let mut min_ret = u64::MAX;
        let mut out = Vec::new();
        for (i, op) in self.ops.iter().enumerate() {
            if self.is_set(i) {
                continue;
            }
            if op.invoke >= min_ret {
                break;
            }
            if op.optional {
                if op.ret >= self.latest_invoke {
                    out.push(i);
                }
            } else {
                min_ret = min_ret.min(op.ret);
                out.push(i);
            }
        }
        out
    }

    /// The operations that may come next with the states they lead to, in the
    /// order the search pops them: definite operations first (a clean history is
    /// usually linearized without backtracking), optional ones last.
    fn successors(&self, state: &State, values: &mut Values) -> Vec<(usize, State)> {
        let mut next: Vec<(usize, State)> = self
            .candidates()
            .into_iter()
            .filter_map(|i| {
                let op = &self.ops[i];
                let next = step(state, &op.call, &op.outcome, values)?;
                // An optional operation that changes nothing is the same as leaving
                // it out.
                (!op.optional || next != *state).then_some((i, next))
            })
            .collect();
        // Popped from the end: optional ones to the front.
        next.sort_by_key(|&(i, _)| !self.ops[i].optional);
        next
    }
}

/// A fixed pseudo-random 128-bit key for operation `i` (splitmix64, twice), so a
/// search is reproducible.
fn zobrist_key(i: u64) -> u128 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let a = mix(i.wrapping_mul(2).wrapping_add(0x9E37_79B9_7F4A_7C15));
    let b = mix(i
        .wrapping_mul(2)
        .wrapping_add(1)
        .wrapping_add(0x9E37_79B9_7F4A_7C15));
    (u128::from(a) << 64) | u128::from(b)
}

/// Searches for a linearization of `ops` (any order) from an absent object, giving
/// up after `max_steps` explored states.
pub fn check_key(ops: &[SearchOp], max_steps: u64) -> Verdict {
    let mut ops: Vec<SearchOp> = ops.to_vec();
    ops.sort_by_key(|o| (o.invoke, o.ret));
    let mandatory_total = ops.iter().filter(|o| !o.optional).count();
    if mandatory_total == 0 {
        return Verdict::Linearizable;
    }
    let mut values = Values::default();
    let mut search = Search {
        ops: &ops,
        linearized: vec![0; ops.len().div_ceil(64)],
        hash: 0,
        keys: (0..ops.len() as u64).map(zobrist_key).collect(),
        latest_invoke: 0,
    };
    let mut seen: HashSet<(u128, State)> = HashSet::new();
    let mut mandatory_done = 0usize;
    let mut deepest = (0usize, Vec::new());
    let root = search.successors(&State::EMPTY, &mut values);
    if root.is_empty() {
        return Verdict::NotLinearizable {
            linearized: 0,
            stuck: search.candidates().iter().map(|&i| ops[i].source).collect(),
        };
    }
    let mut stack = vec![Frame {
        next: root,
        taken: None,
    }];
    let mut steps = 0u64;
    while let Some(frame) = stack.last_mut() {
        let Some((i, state)) = frame.next.pop() else {
            // Exhausted: undo the operation that led here.
            let frame = stack.pop().expect("stack is not empty inside the loop");
            if let Some((i, latest)) = frame.taken {
                search.flip(i);
                search.latest_invoke = latest;
                if !ops[i].optional {
                    mandatory_done -= 1;
                }
            }
            continue;
        };
        steps += 1;
        if steps > max_steps {
            return Verdict::Inconclusive;
        }
        search.flip(i);
        let saved = search.latest_invoke;
        search.latest_invoke = saved.max(ops[i].invoke);
        if !ops[i].optional {
            mandatory_done += 1;
            if mandatory_done == mandatory_total {
                return Verdict::Linearizable;
            }
        }
        if !seen.insert((search.hash, state)) {
            search.flip(i);
            search.latest_invoke = saved;
            if !ops[i].optional {
                mandatory_done -= 1;
            }
            continue;
        }
        let next = search.successors(&state, &mut values);
        if next.is_empty() && mandatory_done >= deepest.0 {
            let stuck = search.candidates().iter().map(|&c| ops[c].source).collect();
            deepest = (mandatory_done, stuck);
        }
        stack.push(Frame {
            next,
            taken: Some((i, saved)),
        });
    }
    Verdict::NotLinearizable {
        linearized: deepest.0,
        stuck: deepest.1,
    }
}

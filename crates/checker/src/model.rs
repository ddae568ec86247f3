//! The sequential specification of one ramstore object (one table and key), as the
//! linearizability search needs it: a small hashable state and a step function that
//! says which states an operation with a given outcome can lead to.
//!
//! Versions (R§3.1): every write gives the object a version higher than any version
//! the key ever had, also across delete-and-recreate; a remove returns the version
//! it removed. The model asks only for "higher", not "exactly one more", so it holds
//! whether a write follows a delete (safe version) or an object.
//!
//! An operation whose outcome is unknown (a timeout, or a duplicate application of a
//! retried call, see `CheckOptions::at_least_once`) takes effect without telling its
//! version, so the state may hold an object whose version is only known to be above
//! a floor; a later definite outcome that reports it (a read, a refusal naming the
//! current version, a remove) pins it down.

use std::collections::HashMap;

use crate::history::{Call, Outcome, Refusal};

/// Interned values: the search clones and hashes states constantly, so a state holds
/// a value's index rather than its bytes.
#[derive(Debug, Default)]
pub struct Values {
    ids: HashMap<Vec<u8>, u32>,
    bytes: Vec<Vec<u8>>,
}

impl Values {
    /// The id of `value`, adding it if new.
    pub fn intern(&mut self, value: &[u8]) -> u32 {
        if let Some(&id) = self.ids.get(value) {
            return id;
        }
        let id = u32::try_from(self.bytes.len()).unwrap_or(u32::MAX);
        self.ids.insert(value.to_vec(), id);
        self.bytes.push(value.to_vec());
        id
    }

    /// The bytes of an interned value.
    pub fn get(&self, id: u32) -> &[u8] {
        self.bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// One object's state between operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The object, if it exists: its value and its version (`None`: above `floor`
    /// but not learned yet).
    pub object: Option<(u32, Option<u64>)>,
    /// The highest version the key is known to have had (or a lower bound on its
    /// current version when that is unknown); every later write exceeds it.
    pub floor: u64,
}

impl State {
    /// No object, no version ever given.
    pub const EMPTY: State = State {
        object: None,
        floor: 0,
    };
}

/// The possible versions of the current object, for deciding reject rules: absent,
/// exactly `v`, or "some version above `floor`".
#[derive(Clone, Copy, Debug)]
enum Current {
    Absent,
    Known(u64),
    Above(u64),
}

fn current(state: &State) -> Current {
    match state.object {
        None => Current::Absent,
        Some((_, Some(v))) => Current::Known(v),
        Some((_, None)) => Current::Above(state.floor),
    }
}

/// Pins an unknown version to `v` if `v` is possible (above the floor).
fn pin(state: &State, v: u64) -> Option<State> {
    match state.object {
        Some((value, None)) if v > state.floor => Some(State {
            object: Some((value, Some(v))),
            floor: v,
        }),
        Some((_, Some(k))) if k == v => Some(*state),
        _ => None,
    }
}

/// Whether `rules` let the operation through, and the state refined by what that
/// implies: `Some(state)` if it may pass (for an unknown version, the version the
/// rules require when they pin one down).
fn passes(state: &State, rules: &crate::history::RejectRules) -> Option<State> {
    match current(state) {
        Current::Absent => rules.check(None).ok().map(|()| *state),
        Current::Known(v) => rules.check(Some(v)).ok().map(|()| *state),
        Current::Above(floor) => {
            if rules.exists {
                return None;
            }
            // The only version rule that pins the version is "must equal".
            if rules.version_ne_given {
                let g = rules.given_version;
                if g <= floor || rules.check(Some(g)).is_err() {
                    return None;
                }
                return pin(state, g);
            }
            // Otherwise some version above the floor passes iff one passes
            // "> given" (always) and "≤ given" (given > floor).
            if rules.version_gt_given && rules.given_version <= floor {
                return None;
            }
            Some(*state)
        }
    }
}

/// Whether `rules` refuse with `refusal`, and the refined state if they can.
fn refuses(state: &State, rules: &crate::history::RejectRules, refusal: Refusal) -> Option<State> {
    match (current(state), refusal) {
        (Current::Absent, r) => (rules.check(None) == Err(r)).then_some(*state),
        (Current::Known(v), r) => (rules.check(Some(v)) == Err(r)).then_some(*state),
        (Current::Above(_), Refusal::Exists) => rules.exists.then_some(*state),
        (Current::Above(_), Refusal::DoesntExist) => None,
        (Current::Above(_), Refusal::WrongVersion { current }) => {
            let refined = pin(state, current)?;
            (rules.check(Some(current)) == Err(refusal)).then_some(refined)
        }
    }
}

/// The current value as an i64, for increments: absent counts as 0; `None` if the
/// value is not an integer in decimal text (the stored form of counters,
/// `ramstore_wire::counter`).
fn as_number(state: &State, values: &Values) -> Option<i64> {
    match state.object {
        None => Some(0),
        Some((value, _)) => ramstore_wire::counter::parse_i64(values.get(value)),
    }
}

/// The value an increment to `n` stores.
fn counter_value(n: i64) -> Vec<u8> {
    ramstore_wire::counter::CounterText::from_i64(n)
        .as_bytes()
        .to_vec()
}

/// The state after a write of `value` with version `version` (`None`: unknown) to
/// `state` (already refined by the rules). `None` if the version is impossible.
fn written(state: &State, value: u32, version: Option<u64>) -> Option<State> {
    let below = match state.object {
        Some((_, Some(v))) => v.max(state.floor),
        _ => state.floor,
    };
    match version {
        Some(v) if v > below => Some(State {
            object: Some((value, Some(v))),
            floor: v,
        }),
        Some(_) => None,
        None => Some(State {
            object: Some((value, None)),
            floor: below,
        }),
    }
}

/// The states `call` with `outcome` can lead to from `state` (empty: impossible
/// here). An [`Outcome::Unknown`] means the call took effect with an unknown
/// result: callers linearize such operations optionally, so a refusal (no effect)
/// is covered by not linearizing them at all.
pub fn step(state: &State, call: &Call, outcome: &Outcome, values: &mut Values) -> Option<State> {
    match (call, outcome) {
        (Call::Read, Outcome::Value { value, version }) => {
            let id = values.intern(value);
            match state.object {
                Some((v, _)) if v == id => pin(state, *version),
                _ => None,
            }
        }
        (Call::Read, Outcome::NotFound) => state.object.is_none().then_some(*state),
        (Call::Read, Outcome::Unknown(_)) => Some(*state),

        (Call::Write { value, rules }, Outcome::Written { version, .. }) => {
            let s = passes(state, rules)?;
            let id = values.intern(value);
            written(&s, id, Some(*version))
        }
        (Call::Write { value, rules }, Outcome::Unknown(_)) => {
            let s = passes(state, rules)?;
            let id = values.intern(value);
            written(&s, id, None)
        }
        (Call::Write { rules, .. } | Call::Remove { rules }, Outcome::Refused(r)) => {
            refuses(state, rules, *r)
        }

        (Call::Remove { rules }, Outcome::Removed { version }) => {
            let s = passes(state, rules)?;
            match (s.object, version) {
                (None, None) => Some(s),
                (Some(_), Some(v)) => {
                    let s = pin(&s, *v)?;
                    Some(State {
                        object: None,
                        floor: s.floor.max(*v),
                    })
                }
                _ => None,
            }
        }
        (Call::Remove { rules }, Outcome::Unknown(_)) => {
            let s = passes(state, rules)?;
            let floor = match s.object {
                Some((_, Some(v))) => v.max(s.floor),
                _ => s.floor,
            };
            Some(State {
                object: None,
                floor,
            })
        }

        (Call::Increment { delta }, Outcome::Written { version, number }) => {
            let new = as_number(state, values)?.checked_add(*delta)?;
            if *number != Some(new) {
                return None;
            }
            let id = values.intern(&counter_value(new));
            written(state, id, Some(*version))
        }
        (Call::Increment { delta }, Outcome::Unknown(_)) => {
            let new = as_number(state, values)?.checked_add(*delta)?;
            let id = values.intern(&counter_value(new));
            written(state, id, None)
        }
        (Call::Increment { .. }, Outcome::NotNumeric) => {
            as_number(state, values).is_none().then_some(*state)
        }
        (Call::Increment { delta }, Outcome::Overflow) => {
            let old = as_number(state, values)?;
            old.checked_add(*delta).is_none().then_some(*state)
        }
        // Outcomes a call cannot have (a read that "wrote", …): a broken history.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::RejectRules;

    fn write(v: &[u8]) -> Call {
        Call::Write {
            value: v.to_vec(),
            rules: RejectRules::default(),
        }
    }

    fn written_v(version: u64) -> Outcome {
        Outcome::Written {
            version,
            number: None,
        }
    }

    #[test]
    fn step_write_then_read_same_version() {
        let mut values = Values::default();
        let s = step(&State::EMPTY, &write(b"a"), &written_v(3), &mut values).expect("write");
        let read = Outcome::Value {
            value: b"a".to_vec(),
            version: 3,
        };
        assert!(step(&s, &Call::Read, &read, &mut values).is_some());
        let stale = Outcome::Value {
            value: b"a".to_vec(),
            version: 2,
        };
        assert!(step(&s, &Call::Read, &stale, &mut values).is_none());
        assert!(step(&s, &Call::Read, &Outcome::NotFound, &mut values).is_none());
    }

    #[test]
    fn step_write_version_must_grow() {
        let mut values = Values::default();
        let s = step(&State::EMPTY, &write(b"a"), &written_v(5), &mut values).expect("write");
        assert!(step(&s, &write(b"b"), &written_v(5), &mut values).is_none());
        assert!(step(&s, &write(b"b"), &written_v(4), &mut values).is_none());
        assert!(step(&s, &write(b"b"), &written_v(6), &mut values).is_some());
    }

    #[test]
    fn step_remove_then_write_exceeds_removed_version() {
        let mut values = Values::default();
        let s = step(&State::EMPTY, &write(b"a"), &written_v(5), &mut values).expect("write");
        let remove = Call::Remove {
            rules: RejectRules::default(),
        };
        let s = step(
            &s,
            &remove,
            &Outcome::Removed { version: Some(5) },
            &mut values,
        )
        .expect("remove");
        assert_eq!(s.object, None);
        assert!(step(&s, &write(b"b"), &written_v(5), &mut values).is_none());
        assert!(step(&s, &write(b"b"), &written_v(6), &mut values).is_some());
    }

    #[test]
    fn step_unknown_write_is_pinned_by_a_read() {
        let mut values = Values::default();
        let s = step(&State::EMPTY, &write(b"a"), &written_v(5), &mut values).expect("write");
        let s = step(
            &s,
            &write(b"b"),
            &Outcome::Unknown("timeout".into()),
            &mut values,
        )
        .expect("unknown write");
        let read = |v| Outcome::Value {
            value: b"b".to_vec(),
            version: v,
        };
        assert!(step(&s, &Call::Read, &read(5), &mut values).is_none());
        let pinned = step(&s, &Call::Read, &read(9), &mut values).expect("read pins");
        assert_eq!(pinned.object.map(|o| o.1), Some(Some(9)));
    }

    #[test]
    fn step_conditional_write_obeys_rules() {
        let mut values = Values::default();
        let s = step(&State::EMPTY, &write(b"a"), &written_v(5), &mut values).expect("write");
        let cas = |g| Call::Write {
            value: b"c".to_vec(),
            rules: RejectRules {
                given_version: g,
                doesnt_exist: true,
                version_ne_given: true,
                ..RejectRules::default()
            },
        };
        assert!(step(&s, &cas(5), &written_v(6), &mut values).is_some());
        assert!(step(&s, &cas(4), &written_v(6), &mut values).is_none());
        let refused = Outcome::Refused(Refusal::WrongVersion { current: 5 });
        assert!(step(&s, &cas(4), &refused, &mut values).is_some());
        assert!(step(&s, &cas(5), &refused, &mut values).is_none());
    }

    #[test]
    fn step_increment_adds() {
        let mut values = Values::default();
        let inc = Call::Increment { delta: 3 };
        let ok = |n, v| Outcome::Written {
            version: v,
            number: Some(n),
        };
        let s = step(&State::EMPTY, &inc, &ok(3, 1), &mut values).expect("first");
        assert!(step(&s, &inc, &ok(3, 2), &mut values).is_none());
        assert!(step(&s, &inc, &ok(6, 2), &mut values).is_some());
        let s = step(&s, &inc, &Outcome::Unknown("lost".into()), &mut values).expect("unknown");
        assert!(step(&s, &inc, &ok(9, 9), &mut values).is_some());
    }
}

//! The reference operation mix that both producers of checked histories draw from:
//! the process harness's workers (`ramstore-harness`) and the simulator's clients
//! (`ramstore-sim`). The callers draw the numbers (each from its own generator, in
//! its own order); these functions only map a draw to a call, so the two workloads
//! cannot drift apart.

use crate::history::{Call, RejectRules};

/// The call on an ordinary key for `draw` in `0..20`: 8 reads, 5 plain writes,
/// 3 conditional writes (compare-and-swap on `last_version`, the version this
/// worker saw last, or create when it saw none), 3 plain deletes and 1 delete of
/// an object that must exist.
pub fn key_call(draw: u64, value: Vec<u8>, last_version: Option<u64>) -> Call {
    match draw {
        0..=7 => Call::Read,
        8..=12 => Call::Write {
            value,
            rules: RejectRules::default(),
        },
        13..=15 => {
            let rules = match last_version {
                Some(v) => RejectRules {
                    given_version: v,
                    doesnt_exist: true,
                    version_ne_given: true,
                    ..RejectRules::default()
                },
                None => RejectRules {
                    exists: true,
                    ..RejectRules::default()
                },
            };
            Call::Write { value, rules }
        }
        16..=18 => Call::Remove {
            rules: RejectRules::default(),
        },
        // Delete only an object that exists (a conditional delete).
        _ => Call::Remove {
            rules: RejectRules {
                doesnt_exist: true,
                ..RejectRules::default()
            },
        },
    }
}

/// The call on a counter for `draw` in `0..10`: 6 increments (by `delta()`, drawn
/// only then), 3 reads and 1 delete.
pub fn counter_call(draw: u64, delta: impl FnOnce() -> i64) -> Call {
    match draw {
        0..=5 => Call::Increment { delta: delta() },
        6..=8 => Call::Read,
        _ => Call::Remove {
            rules: RejectRules::default(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_call_covers_the_mix_in_twentieths() {
        let calls: Vec<Call> = (0..20)
            .map(|d| key_call(d, b"v".to_vec(), Some(3)))
            .collect();
        let reads = calls.iter().filter(|c| matches!(c, Call::Read)).count();
        let writes = calls
            .iter()
            .filter(|c| matches!(c, Call::Write { .. }))
            .count();
        let removes = calls
            .iter()
            .filter(|c| matches!(c, Call::Remove { .. }))
            .count();
        assert_eq!((reads, writes, removes), (8, 8, 4));
        assert!(matches!(
            key_call(13, Vec::new(), None),
            Call::Write { rules, .. } if rules.exists && !rules.version_ne_given
        ));
    }

    #[test]
    fn counter_call_draws_a_delta_only_for_an_increment() {
        let mut drawn = 0;
        assert!(matches!(
            counter_call(7, || {
                drawn += 1;
                1
            }),
            Call::Read
        ));
        assert_eq!(drawn, 0);
        assert!(matches!(
            counter_call(0, || 4),
            Call::Increment { delta: 4 }
        ));
    }
}

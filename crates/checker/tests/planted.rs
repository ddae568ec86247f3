//! The checker catches planted violations of each kind and passes histories that are
//! linearizable, including random ones generated from a sequential execution.

use ramstore_checker::{
    check, Call, CheckOptions, History, Op, Outcome, Refusal, RejectRules, Report, ViolationKind,
};

const TABLE: u64 = 1;

/// A history under construction (times in nanoseconds).
#[derive(Default)]
struct H {
    ops: Vec<Op>,
}

impl H {
    fn op(&mut self, client: u64, key: &str, call: Call, outcome: Outcome, t: (u64, u64)) {
        self.ops.push(Op {
            client,
            table: TABLE,
            key: key.as_bytes().to_vec(),
            call,
            outcome,
            invoke_ns: t.0,
            return_ns: Some(t.1),
        });
    }
    fn write(&mut self, c: u64, key: &str, value: &str, version: u64, t: (u64, u64)) {
        self.op(c, key, write(value), written(version), t);
    }
    fn read(&mut self, c: u64, key: &str, value: &str, version: u64, t: (u64, u64)) {
        self.op(c, key, Call::Read, val(value, version), t);
    }
    fn check(&self) -> Report {
        check_with(self, true)
    }
}

/// Checks with duplicates allowed for calls of any length (the hand-made and
/// random histories use nanosecond times).
fn check_with(h: &H, at_least_once: bool) -> Report {
    check(
        &History { ops: h.ops.clone() },
        &CheckOptions {
            at_least_once,
            duplicate_min_ns: 0,
            ..CheckOptions::default()
        },
    )
}

fn write(value: &str) -> Call {
    Call::Write {
        value: value.as_bytes().to_vec(),
        rules: RejectRules::default(),
    }
}

fn remove() -> Call {
    Call::Remove {
        rules: RejectRules::default(),
    }
}

fn written(version: u64) -> Outcome {
    Outcome::Written {
        version,
        number: None,
    }
}

fn val(value: &str, version: u64) -> Outcome {
    Outcome::Value {
        value: value.as_bytes().to_vec(),
        version,
    }
}

fn unknown() -> Outcome {
    Outcome::Unknown("deadline exceeded".into())
}

#[track_caller]
fn assert_clean(report: &Report) {
    assert!(report.is_clean(), "expected clean:\n{report}");
}

#[track_caller]
fn assert_caught(report: &Report, kind: ViolationKind) {
    assert!(report.count(kind) > 0, "expected {kind:?}:\n{report}");
    assert!(
        report.count(ViolationKind::NotLinearizable) > 0,
        "every violation is also non-linearizable:\n{report}"
    );
}

#[test]
fn check_sequential_history_is_clean() {
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.read(2, "k", "a", 1, (20, 30));
    h.write(1, "k", "b", 2, (40, 50));
    h.read(2, "k", "b", 2, (60, 70));
    h.op(
        1,
        "k",
        remove(),
        Outcome::Removed { version: Some(2) },
        (80, 90),
    );
    h.op(2, "k", Call::Read, Outcome::NotFound, (100, 110));
    h.write(1, "k", "c", 3, (120, 130));
    let report = h.check();
    assert_clean(&report);
    assert_eq!((report.reads, report.writes, report.removes), (3, 3, 1));
}

#[test]
fn check_concurrent_read_may_see_either_value() {
    for seen in [("a", 1), ("b", 2)] {
        let mut h = H::default();
        h.write(1, "k", "a", 1, (0, 10));
        h.write(1, "k", "b", 2, (20, 60));
        h.read(2, "k", seen.0, seen.1, (30, 40));
        assert_clean(&h.check());
    }
}

#[test]
fn check_indeterminate_write_may_or_may_not_have_happened() {
    for (value, version) in [("a", 1), ("b", 7)] {
        let mut h = H::default();
        h.write(1, "k", "a", 1, (0, 10));
        h.op(1, "k", write("b"), unknown(), (20, 30));
        h.read(2, "k", value, version, (40, 50));
        assert_clean(&h.check());
    }
    // …but once seen, it cannot disappear again.
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.op(1, "k", write("b"), unknown(), (20, 30));
    h.read(2, "k", "b", 7, (40, 50));
    h.read(2, "k", "a", 1, (60, 70));
    assert_caught(&h.check(), ViolationKind::VersionRegressed);
}

#[test]
fn check_stale_read_after_acknowledged_write_is_caught() {
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.write(1, "k", "b", 2, (20, 30));
    h.read(2, "k", "a", 1, (40, 50));
    assert_caught(&h.check(), ViolationKind::LostWrite);
}

#[test]
fn check_lost_acknowledged_write_is_caught() {
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.op(2, "k", Call::Read, Outcome::NotFound, (20, 30));
    assert_caught(&h.check(), ViolationKind::LostWrite);
}

#[test]
fn check_absent_after_write_is_fine_when_a_remove_may_intervene() {
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.op(3, "k", remove(), unknown(), (5, 15));
    h.op(2, "k", Call::Read, Outcome::NotFound, (20, 30));
    assert_clean(&h.check());
}

#[test]
fn check_retried_conditional_remove_refused_after_it_removed_is_clean_at_least_once() {
    // Seen in a partition run: a remove-if-exists stalled on a cut-off master was
    // applied, retried after recovery and refused as "doesn't exist"; the object is
    // gone although the only remove reports a refusal.
    let must_exist = Call::Remove {
        rules: RejectRules {
            doesnt_exist: true,
            ..RejectRules::default()
        },
    };
    let mut h = H::default();
    h.write(0, "k", "a", 7, (0, 10));
    h.op(
        0,
        "k",
        must_exist,
        Outcome::Refused(Refusal::DoesntExist),
        (20, 1_300),
    );
    h.op(2, "k", Call::Read, Outcome::NotFound, (2_000, 2_010));
    assert_clean(&check_with(&h, true));
    let strict = check_with(&h, false);
    assert!(strict.count(ViolationKind::LostWrite) > 0, "{strict}");
    assert!(strict.count(ViolationKind::NotLinearizable) > 0, "{strict}");
}

#[test]
fn check_resurrected_delete_is_caught() {
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.op(
        1,
        "k",
        remove(),
        Outcome::Removed { version: Some(1) },
        (20, 30),
    );
    h.read(2, "k", "a", 1, (40, 50));
    assert_caught(&h.check(), ViolationKind::ResurrectedDelete);
}

#[test]
fn check_version_going_backwards_is_caught() {
    // Two writes overlap, so either order is possible; but two reads in sequence
    // must agree on it.
    let mut h = H::default();
    h.write(1, "k", "a", 4, (0, 100));
    h.write(2, "k", "b", 5, (0, 100));
    h.read(3, "k", "b", 5, (10, 20));
    h.read(3, "k", "a", 4, (30, 40));
    assert_caught(&h.check(), ViolationKind::VersionRegressed);
}

#[test]
fn check_lost_update_of_increments_is_caught() {
    // Both increments succeed from 0 to 1: one update is lost. No version goes back,
    // so only the linearizability search can see it.
    let inc = Call::Increment { delta: 1 };
    let ok = |n, v| Outcome::Written {
        version: v,
        number: Some(n),
    };
    let mut h = H::default();
    h.op(1, "c", inc.clone(), ok(1, 1), (0, 50));
    h.op(2, "c", inc.clone(), ok(1, 2), (10, 60));
    let report = check_with(&h, false);
    assert_eq!(report.count(ViolationKind::NotLinearizable), 1, "{report}");
    assert_eq!(report.violations.len(), 1, "{report}");
    // Correct counts are fine.
    let mut h = H::default();
    h.op(1, "c", inc.clone(), ok(1, 1), (0, 50));
    h.op(2, "c", inc, ok(2, 2), (10, 60));
    assert_clean(&check_with(&h, false));
}

#[test]
fn check_two_successful_compare_and_swaps_on_one_version_are_caught() {
    let cas = |value: &str| Call::Write {
        value: value.as_bytes().to_vec(),
        rules: RejectRules {
            given_version: 1,
            doesnt_exist: true,
            version_ne_given: true,
            ..RejectRules::default()
        },
    };
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.op(1, "k", cas("b"), written(2), (20, 100));
    h.op(2, "k", cas("c"), written(3), (20, 100));
    let report = h.check();
    assert_eq!(report.count(ViolationKind::NotLinearizable), 1, "{report}");
    // One success and one refusal naming the winner's version is fine.
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.op(1, "k", cas("b"), written(2), (20, 100));
    h.op(
        2,
        "k",
        cas("c"),
        Outcome::Refused(Refusal::WrongVersion { current: 2 }),
        (20, 100),
    );
    assert_clean(&h.check());
}

#[test]
fn check_non_linearizable_read_order_is_caught() {
    // The write of b finished before the second read began, and the first read saw
    // b; the second read then sees a value nobody wrote after b.
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.write(1, "k", "b", 2, (20, 100));
    h.read(2, "k", "b", 2, (30, 40));
    h.read(3, "k", "a", 1, (50, 60));
    let report = h.check();
    assert!(report.count(ViolationKind::NotLinearizable) > 0, "{report}");
}

#[test]
fn check_duplicate_of_retried_write_is_allowed_only_at_least_once() {
    // A retried write took effect twice: a reader saw the first application (v2)
    // before the client got the second's version (v3).
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.write(1, "k", "b", 3, (20, 100));
    h.read(2, "k", "b", 2, (30, 40));
    assert_clean(&check_with(&h, true));
    let strict = check_with(&h, false);
    assert_eq!(strict.count(ViolationKind::NotLinearizable), 1, "{strict}");
}

#[test]
fn check_failed_reads_are_ignored_and_counted() {
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.op(2, "k", Call::Read, unknown(), (20, 30));
    let report = h.check();
    assert_clean(&report);
    assert_eq!((report.failed_reads, report.definite), (1, 1));
}

#[test]
fn check_jsonl_round_trip_keeps_every_field() {
    let mut h = H::default();
    h.write(1, "k", "a", 1, (0, 10));
    h.op(2, "k", remove(), unknown(), (5, 15));
    h.ops[1].return_ns = None;
    let history = History { ops: h.ops.clone() };
    let mut out = Vec::new();
    history.write_jsonl(&mut out).expect("write to a Vec");
    let back =
        History::read_jsonl(std::str::from_utf8(&out).expect("JSON is UTF-8")).expect("parses");
    assert_eq!(back, history);
}

/// At-least-once options, with duplicates allowed for calls of any length.
fn any_duplicates() -> CheckOptions {
    CheckOptions {
        duplicate_min_ns: 0,
        ..CheckOptions::at_least_once()
    }
}

#[test]
fn check_duplicates_are_allowed_only_for_calls_slow_enough_to_be_retried() {
    // As in the test above, but in milliseconds: a reader saw a first application
    // of a write whose answer carried the version of a second.
    let ms = 1_000_000;
    let history = |write_ms: u64| {
        let mut h = H::default();
        h.write(1, "k", "a", 1, (0, 10 * ms));
        h.write(1, "k", "b", 3, (20 * ms, (20 + write_ms) * ms));
        h.read(2, "k", "b", 2, (21 * ms, 22 * ms));
        History { ops: h.ops }
    };
    let slow = check(&history(500), &CheckOptions::at_least_once());
    assert!(
        slow.is_clean(),
        "a 500 ms write may have been retried:\n{slow}"
    );
    let fast = check(&history(5), &CheckOptions::at_least_once());
    assert_eq!(
        fast.count(ViolationKind::NotLinearizable),
        1,
        "a 5 ms write was not retried:\n{fast}"
    );
    // Exactly-once (the default, issue 21): even a slow write takes effect once.
    let strict = check(&history(500), &CheckOptions::default());
    assert_eq!(
        strict.count(ViolationKind::NotLinearizable),
        1,
        "an exactly-once write applied twice is a violation:\n{strict}"
    );
}

/// A slow retried call may have taken effect several times — one duplicate, plus
/// one per `RETRY_ATTEMPT_MIN_NS` beyond `duplicate_min_ns`, up to
/// `MAX_DUPLICATES_PER_CALL` —, a call just slow enough at most once more. Regression: a 3.1 s increment applied three times in the
/// 30-minute soak (seed 5) was reported as a violation.
#[test]
fn check_slow_calls_may_carry_several_duplicates_fast_ones_one() {
    let ms = 1_000_000;
    // Counters are stored as decimal text.
    let number = |n: i64| n.to_string().into_bytes();
    let history = |increment_ms: u64| {
        let mut h = H::default();
        // Applied three times: readers see 5 and 10 before the answer reports 15.
        h.op(
            1,
            "c",
            Call::Increment { delta: 5 },
            Outcome::Written {
                version: 3,
                number: Some(15),
            },
            (0, increment_ms * ms),
        );
        h.op(
            2,
            "c",
            Call::Read,
            Outcome::Value {
                value: number(5),
                version: 1,
            },
            (10 * ms, 11 * ms),
        );
        h.op(
            2,
            "c",
            Call::Read,
            Outcome::Value {
                value: number(10),
                version: 2,
            },
            (20 * ms, 21 * ms),
        );
        History { ops: h.ops }
    };
    let slow = check(&history(3_100), &CheckOptions::at_least_once());
    assert!(
        slow.is_clean(),
        "a 3.1 s increment may have been applied three times:\n{slow}"
    );
    // Exactly-once (the default, issue 21): a slow increment applied three
    // times is two duplicates too many.
    let strict = check(&history(3_100), &CheckOptions::default());
    assert_eq!(
        strict.count(ViolationKind::NotLinearizable),
        1,
        "an exactly-once increment applied three times is a violation:\n{strict}"
    );
    let fast = check(&history(150), &CheckOptions::at_least_once());
    assert_eq!(
        fast.count(ViolationKind::NotLinearizable),
        1,
        "a 150 ms increment may carry one duplicate, not two:\n{fast}"
    );
    // Four applications exceed the limit even for a very slow call.
    let mut h = history(60_000);
    h.ops.push(Op {
        client: 2,
        table: TABLE,
        key: b"c".to_vec(),
        call: Call::Read,
        outcome: Outcome::Value {
            value: number(15),
            version: 3,
        },
        invoke_ns: 30 * ms,
        return_ns: Some(31 * ms),
    });
    h.ops[0].outcome = Outcome::Written {
        version: 5,
        number: Some(25),
    };
    h.ops.push(Op {
        client: 2,
        table: TABLE,
        key: b"c".to_vec(),
        call: Call::Read,
        outcome: Outcome::Value {
            value: number(20),
            version: 4,
        },
        invoke_ns: 40 * ms,
        return_ns: Some(41 * ms),
    });
    let too_many = check(&h, &CheckOptions::at_least_once());
    assert_eq!(
        too_many.count(ViolationKind::NotLinearizable),
        1,
        "{too_many}"
    );
}

/// A small deterministic generator (xorshift64*), so the test needs no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A linearizable history: each client's operations get an invocation, a
/// linearization point and a return; outcomes come from running the calls in
/// linearization-point order against a sequential store with versions.
fn random_history(seed: u64, clients: u64, ops_per_client: usize) -> History {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut planned = Vec::new();
    for c in 0..clients {
        let mut t = rng.below(50);
        for i in 0..ops_per_client {
            let invoke = t + 1 + rng.below(30);
            let lin = invoke + 1 + rng.below(60);
            let ret = lin + 1 + rng.below(60);
            t = ret;
            let key = format!("k{}", rng.below(3));
            let call = match rng.below(6) {
                0 | 1 => write(&format!("c{c}-{i}")),
                2 => remove(),
                3 => Call::Increment { delta: 1 },
                _ => Call::Read,
            };
            planned.push((lin, c, key, call, invoke, ret));
        }
    }
    planned.sort_by_key(|p| p.0);
    // The sequential store: key -> (value, version), and the highest version ever.
    let mut store: std::collections::HashMap<String, (Vec<u8>, u64)> = Default::default();
    let mut highest: std::collections::HashMap<String, u64> = Default::default();
    let mut ops = Vec::new();
    for (_, client, key, call, invoke, ret) in planned {
        let top = highest.entry(key.clone()).or_insert(0);
        let outcome = match &call {
            Call::Read => match store.get(&key) {
                Some((v, ver)) => Outcome::Value {
                    value: v.clone(),
                    version: *ver,
                },
                None => Outcome::NotFound,
            },
            Call::Write { value, .. } => {
                *top += 1;
                store.insert(key.clone(), (value.clone(), *top));
                written(*top)
            }
            Call::Remove { .. } => Outcome::Removed {
                version: store.remove(&key).map(|(_, v)| v),
            },
            Call::Increment { delta } => {
                let old = match store.get(&key) {
                    None => Some(0),
                    Some((v, _)) => std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()),
                };
                match old {
                    None => Outcome::NotNumeric,
                    Some(old) => {
                        *top += 1;
                        let new = old + delta;
                        store.insert(key.clone(), (new.to_string().into_bytes(), *top));
                        Outcome::Written {
                            version: *top,
                            number: Some(new),
                        }
                    }
                }
            }
        };
        ops.push(Op {
            client,
            table: TABLE,
            key: key.into_bytes(),
            call,
            outcome,
            invoke_ns: invoke,
            return_ns: Some(ret),
        });
    }
    History { ops }
}

#[test]
fn check_random_linearizable_histories_are_clean() {
    for seed in 1..=40 {
        let history = random_history(seed, 4, 60);
        for at_least_once in [false, true] {
            let report = check(
                &history,
                &CheckOptions {
                    at_least_once,
                    duplicate_min_ns: 0,
                    ..CheckOptions::default()
                },
            );
            assert!(report.is_clean(), "seed {seed}:\n{report}");
        }
    }
}

#[test]
fn check_random_histories_with_some_outcomes_unknown_are_clean() {
    for seed in 1..=20 {
        let mut history = random_history(seed, 4, 60);
        for (i, op) in history.ops.iter_mut().enumerate() {
            if i % 20 == 3 {
                op.outcome = unknown();
            }
        }
        let report = check(&history, &any_duplicates());
        assert!(report.is_clean(), "seed {seed}:\n{report}");
    }
}

#[test]
fn check_random_histories_with_a_planted_phantom_value_are_caught() {
    for seed in 1..=20 {
        let mut history = random_history(seed, 4, 60);
        let read = history
            .ops
            .iter_mut()
            .find(|o| matches!(o.outcome, Outcome::Value { .. }))
            .expect("a random history of 240 operations has a successful read");
        read.outcome = val("nobody wrote this", 1_000_000);
        let report = check(&history, &any_duplicates());
        assert!(
            report.count(ViolationKind::NotLinearizable) >= 1,
            "seed {seed}:\n{report}"
        );
    }
}

//! Checks a recorded client history of a ramstore cluster against the store's
//! guarantees (docs/design.md §1): (a) every acknowledged write is readable with its value or
//! a later one, (b) no deleted object comes back, (c) versions per key only grow,
//! (d) per-key linearizability of reads, writes, deletes, conditional writes and
//! increments.
//!
//! A history is a list of [`Op`]s (invocation, return, arguments, outcome) recorded
//! by client workers on one monotonic clock; the reliability harness
//! (`ramstore-harness`) and the simulator (`ramstore-sim`) record them, drawing their
//! calls from one reference mix ([`mix`]), and `ramstore-checker FILE` checks a
//! history saved as JSON lines.
//!
//! How it decides:
//! - Operations are grouped by object (table, key). Linearizability is local, so each
//!   object is checked alone (`linearizability.rs`: Wing & Gong search with
//!   memoization over the model in `model.rs`).
//! - An operation whose outcome is unknown (timeout, lost connection) may have taken
//!   effect at any time after its invocation, or never; a failed read is ignored.
//! - Mutations are exactly-once (RIFL completion records, issue 21): a retried
//!   call takes effect at most once, so by default a duplicate is a violation.
//!   With [`CheckOptions::at_least_once`] (clients without RPC ids, or tablets
//!   whose completion records do not follow them yet, see
//!   [`CheckOptions::at_least_once`]) every mutating call slow enough to have been
//!   retried may also have taken effect more times, unseen, between its
//!   invocation and its return (duplicates from retries: one, plus one per
//!   [`RETRY_ATTEMPT_MIN_NS`] it lasted beyond [`CheckOptions::duplicate_min_ns`],
//!   at most [`MAX_DUPLICATES_PER_CALL`]).
//! - The named real-time checks (`checks.rs`) classify what went wrong (lost write,
//!   resurrected delete, version regressed) before the search gives its verdict.
//!
//! Invariants: a history with a violation is never reported clean — the checker's
//! tests (`tests/planted.rs`) plant each kind of violation and show it is caught; a
//! search that exceeds its step budget is reported as inconclusive, never as clean.
//!
//! Thread-safety: everything here is plain data and pure functions; [`check`] may
//! run on any thread.

pub mod checks;
pub mod history;
pub mod linearizability;
pub mod mix;
pub mod model;

use std::collections::BTreeMap;
use std::fmt;

pub use history::{Call, History, Op, Outcome, Refusal, RejectRules};
use linearizability::{check_key, SearchOp, Verdict};

/// States the search may explore per object before it gives up (inconclusive).
pub const DEFAULT_MAX_STEPS_PER_KEY: u64 = 2_000_000;

/// With at-least-once retries, only calls that took at least this long may have
/// been applied twice. A duplicate needs an attempt that was applied and then
/// failed, and every such failure takes longer: a lost connection to a crashed or
/// cut-off master is retried only once the tablet has a new owner (failure
/// detection alone takes ≥ 250 ms), and a write whose replication stalls is
/// answered RETRY only after 1 s (`REPLICATION_WAIT_MS`). Limiting duplicates to
/// slow calls keeps the search small: every duplicate doubles the states around it.
pub const DEFAULT_DUPLICATE_MIN_NS: u64 = 100_000_000;

/// The least time each further failed attempt of a retried call takes: a failure
/// is noticed by failure detection (≥ 250 ms) or a replication timeout (1 s).
pub const RETRY_ATTEMPT_MIN_NS: u64 = 250_000_000;

/// The most times a single call may have taken effect unseen, besides the
/// application its answer reports. A call lasting `d` ≥
/// [`CheckOptions::duplicate_min_ns`] may carry one duplicate, plus one per
/// [`RETRY_ATTEMPT_MIN_NS`] beyond that, up to this many (each doubles the search
/// states around the call). Regression: a 3.1 s increment that started as its
/// master was cut off was applied three times — once by the old master (durable,
/// its answer lost in the partition) and twice by the recovery master, whose
/// replication timed out once — which the old limit of one duplicate reported as a
/// violation.
pub const MAX_DUPLICATES_PER_CALL: usize = 3;

/// How to check.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Mutating calls may have taken effect a second time within their own
    /// interval (at-least-once retries; see the crate documentation). Off by
    /// default: clients send exactly-once RPCs.
    pub at_least_once: bool,
    /// Only calls lasting at least this long (or with an unknown outcome) may
    /// have such a duplicate ([`DEFAULT_DUPLICATE_MIN_NS`]).
    pub duplicate_min_ns: u64,
    /// Search budget per object (explored states).
    pub max_steps_per_key: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            at_least_once: false,
            duplicate_min_ns: DEFAULT_DUPLICATE_MIN_NS,
            max_steps_per_key: DEFAULT_MAX_STEPS_PER_KEY,
        }
    }
}

impl CheckOptions {
    /// The defaults, but tolerating duplicates of slow mutating calls (for
    /// histories of at-least-once clients).
    pub fn at_least_once() -> Self {
        CheckOptions {
            at_least_once: true,
            ..CheckOptions::default()
        }
    }
}

/// The kinds of violation the checker names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    /// (a) An acknowledged write was not seen by a later read (absent or older).
    LostWrite,
    /// (b) A read found an object a completed remove had deleted.
    ResurrectedDelete,
    /// (c) A version lower than one observed earlier was observed.
    VersionRegressed,
    /// (d) No sequential order of the object's operations explains the outcomes.
    NotLinearizable,
}

/// One violation, with the object and a description of the operations involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub kind: ViolationKind,
    pub table: u64,
    pub key: Vec<u8>,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} on table {} key {:?}: {}",
            self.kind,
            self.table,
            String::from_utf8_lossy(&self.key),
            self.message
        )
    }
}

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Operations in the history.
    pub ops: usize,
    /// Operations with a definite outcome (checked exactly).
    pub definite: usize,
    /// Mutating operations whose outcome is unknown (may or may not have happened).
    pub indeterminate: usize,
    /// Failed reads (ignored).
    pub failed_reads: usize,
    /// Objects (table, key) checked.
    pub keys: usize,
    /// Definite operations by call: reads, writes (incl. conditional), removes,
    /// increments.
    pub reads: usize,
    pub writes: usize,
    pub removes: usize,
    pub increments: usize,
    pub violations: Vec<Violation>,
    /// Objects whose search ran out of budget.
    pub inconclusive: Vec<(u64, Vec<u8>)>,
}

impl Report {
    /// No violation and every object decided.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.inconclusive.is_empty()
    }

    /// Adds the counts and findings of `other` (a history of other objects, e.g.
    /// the next window of a long run).
    pub fn merge(&mut self, other: Report) {
        self.ops += other.ops;
        self.definite += other.definite;
        self.indeterminate += other.indeterminate;
        self.failed_reads += other.failed_reads;
        self.keys += other.keys;
        self.reads += other.reads;
        self.writes += other.writes;
        self.removes += other.removes;
        self.increments += other.increments;
        self.violations.extend(other.violations);
        self.inconclusive.extend(other.inconclusive);
    }

    /// Violations of one kind.
    pub fn count(&self, kind: ViolationKind) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checked {} operations on {} keys: {} definite ({} reads, {} writes, {} removes, {} increments), {} indeterminate, {} failed reads",
            self.ops,
            self.keys,
            self.definite,
            self.reads,
            self.writes,
            self.removes,
            self.increments,
            self.indeterminate,
            self.failed_reads
        )?;
        let verdict = if self.is_clean() {
            "clean".to_string()
        } else {
            format!(
                "{} violations ({} lost writes, {} resurrected deletes, {} versions regressed, {} not linearizable), {} keys inconclusive",
                self.violations.len(),
                self.count(ViolationKind::LostWrite),
                self.count(ViolationKind::ResurrectedDelete),
                self.count(ViolationKind::VersionRegressed),
                self.count(ViolationKind::NotLinearizable),
                self.inconclusive.len()
            )
        };
        writeln!(f, "verdict: {verdict}")?;
        for v in self.violations.iter().take(20) {
            writeln!(f, "  {v}")?;
        }
        if self.violations.len() > 20 {
            writeln!(f, "  … and {} more", self.violations.len() - 20)?;
        }
        Ok(())
    }
}

/// Checks `history` (see the crate documentation).
pub fn check(history: &History, options: &CheckOptions) -> Report {
    let mut report = Report {
        ops: history.ops.len(),
        ..Report::default()
    };
    /// An object's operations, with their indices in the history.
    type KeyOps<'h> = Vec<(usize, &'h Op)>;
    let mut by_key: BTreeMap<(u64, &[u8]), KeyOps<'_>> = BTreeMap::new();
    for (i, op) in history.ops.iter().enumerate() {
        if op.is_definite() {
            report.definite += 1;
            match op.call {
                Call::Read => report.reads += 1,
                Call::Write { .. } => report.writes += 1,
                Call::Remove { .. } => report.removes += 1,
                Call::Increment { .. } => report.increments += 1,
            }
        } else if op.call.mutates() {
            report.indeterminate += 1;
        } else {
            report.failed_reads += 1;
            continue;
        }
        by_key
            .entry((op.table, op.key.as_slice()))
            .or_default()
            .push((i, op));
    }
    report.keys = by_key.len();
    for ((table, key), ops) in by_key {
        let plain: Vec<&Op> = ops.iter().map(|(_, o)| *o).collect();
        let before = report.violations.len();
        checks::real_time_checks(
            table,
            key,
            &plain,
            |op| may_duplicate(op, options),
            &mut report.violations,
        );
        let search = search_ops(&ops, options);
        match check_key(&search, options.max_steps_per_key) {
            Verdict::Linearizable => {
                // The named checks are implied by linearizability, so one that fired
                // on a linearizable object is a checker bug: say so rather than
                // report the history clean or hide the finding.
                for v in &mut report.violations[before..] {
                    v.message
                        .push_str(" (yet the search found a linearization: checker bug)");
                }
            }
            Verdict::NotLinearizable { linearized, stuck } => {
                let mut message = format!(
                    "no linearization of {} operations; the deepest order placed {linearized} definite operations, then none of these could come next:",
                    ops.len()
                );
                for s in stuck.iter().take(8) {
                    let op = &history.ops[*s];
                    message.push_str(&format!(
                        "\n      client {} {} -> {} [{} ns .. {:?}]",
                        op.client,
                        checks::short_call(&op.call),
                        checks::short_outcome(&op.outcome),
                        op.invoke_ns,
                        op.return_ns
                    ));
                }
                report.violations.push(Violation {
                    kind: ViolationKind::NotLinearizable,
                    table,
                    key: key.to_vec(),
                    message,
                });
            }
            Verdict::Inconclusive => report.inconclusive.push((table, key.to_vec())),
        }
    }
    report
}

/// Whether `op` may have taken effect once more, unseen (see
/// [`CheckOptions::at_least_once`]).
fn may_duplicate(op: &Op, options: &CheckOptions) -> bool {
    duplicates_allowed(op, options) > 0
}

/// How many times `op` may have taken effect unseen besides the application its
/// answer reports (see [`MAX_DUPLICATES_PER_CALL`]): none unless at-least-once and
/// mutating; one for a call that lasted `duplicate_min_ns` (or whose outcome is
/// unknown), one more per [`RETRY_ATTEMPT_MIN_NS`] beyond.
fn duplicates_allowed(op: &Op, options: &CheckOptions) -> usize {
    if !options.at_least_once || !op.call.mutates() {
        return 0;
    }
    // How long the client tried (an unknown outcome may still take effect later,
    // but its retries ended when the client gave up).
    let duration = op
        .return_ns
        .unwrap_or(u64::MAX)
        .saturating_sub(op.invoke_ns);
    if duration < options.duplicate_min_ns {
        // Too fast to have been retried; an unknown outcome keeps one duplicate
        // (its attempts may have been cut short, not answered).
        return usize::from(!op.is_definite());
    }
    let more = (duration - options.duplicate_min_ns) / RETRY_ATTEMPT_MIN_NS;
    usize::try_from(more)
        .unwrap_or(usize::MAX)
        .saturating_add(1)
        .min(MAX_DUPLICATES_PER_CALL)
}

/// The search's view of one object's operations: indeterminate ones optional with
/// an unbounded return; with `at_least_once`, an optional duplicate of every
/// mutating call slow enough to have been retried, within its own interval.
fn search_ops(ops: &[(usize, &Op)], options: &CheckOptions) -> Vec<SearchOp> {
    let mut out = Vec::with_capacity(ops.len() * 2);
    for &(i, op) in ops {
        let definite = op.is_definite();
        out.push(SearchOp {
            invoke: op.invoke_ns,
            ret: op.effective_return_ns(),
            optional: !definite,
            call: op.call.clone(),
            outcome: op.outcome.clone(),
            source: i,
        });
        for _ in 0..duplicates_allowed(op, options) {
            out.push(SearchOp {
                invoke: op.invoke_ns,
                ret: op.effective_return_ns(),
                optional: true,
                call: op.call.clone(),
                outcome: Outcome::Unknown("a possible duplicate of a retried call".into()),
                source: i,
            });
        }
    }
    out
}

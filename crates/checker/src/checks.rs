//! Named checks that explain the usual ways a store goes wrong, in the words of the
//! guarantees (docs/design.md §1), before the linearizability search gives its verdict. Each
//! compares pairs of operations ordered in real time (one returned before the other
//! was invoked), so each is implied by linearizability; they exist to say *what*
//! went wrong in terms an operator recognises.

use crate::history::{Call, Op, Outcome};
use crate::{Violation, ViolationKind};

fn describe(op: &Op) -> String {
    format!(
        "client {} {:?} -> {:?} [{} ns .. {}]",
        op.client,
        short_call(&op.call),
        short_outcome(&op.outcome),
        op.invoke_ns,
        op.return_ns
            .map(|r| format!("{r} ns"))
            .unwrap_or_else(|| "never".into())
    )
}

fn short_bytes(b: &[u8]) -> String {
    const SHOWN_BYTES: usize = 40;
    let s = String::from_utf8_lossy(b);
    if s.len() <= SHOWN_BYTES {
        return s.into_owned();
    }
    let mut cut = SHOWN_BYTES;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

/// A short text of a call for violation messages.
pub fn short_call(call: &Call) -> String {
    match call {
        Call::Read => "read".into(),
        Call::Write { value, rules } if rules.is_unconditional() => {
            format!("write {}", short_bytes(value))
        }
        Call::Write { value, rules } => format!("write {} if {rules:?}", short_bytes(value)),
        Call::Remove { rules } if rules.is_unconditional() => "remove".into(),
        Call::Remove { rules } => format!("remove if {rules:?}"),
        Call::Increment { delta } => format!("increment {delta}"),
    }
}

/// A short text of an outcome for violation messages.
pub fn short_outcome(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Value { value, version } => format!("{} v{version}", short_bytes(value)),
        other => format!("{other:?}"),
    }
}

/// Reads and version-reporting operations must never see a version below one
/// already observed by an operation that finished before they began; a read after an
/// acknowledged write must not find the object absent unless a remove may have come
/// between; a read after a remove must not find the removed object.
///
/// `may_duplicate` says which calls may have taken effect unseen (a retried
/// call's first application, [`crate::CheckOptions::at_least_once`]): a remove
/// refused as "doesn't exist" may be the retry of one that removed the object.
pub fn real_time_checks(
    table: u64,
    key: &[u8],
    ops: &[&Op],
    may_duplicate: impl Fn(&Op) -> bool,
    out: &mut Vec<Violation>,
) {
    let definite: Vec<&Op> = ops.iter().copied().filter(|o| o.is_definite()).collect();
    let mut by_return: Vec<&Op> = definite
        .iter()
        .copied()
        .filter(|o| o.observed_version().is_some())
        .collect();
    by_return.sort_by_key(|o| o.effective_return_ns());
    let mut by_invoke: Vec<&Op> = definite.clone();
    by_invoke.sort_by_key(|o| o.invoke_ns);

    let violation = |kind, message: String| Violation {
        kind,
        table,
        key: key.to_vec(),
        message,
    };

    // (c) and the version-based parts of (a) and (b): sweep in invocation order,
    // keeping the highest version observed by operations returned before.
    let mut done = 0usize;
    let mut highest: Option<&Op> = None;
    let mut highest_removed: Option<&Op> = None;
    for b in &by_invoke {
        while done < by_return.len() && by_return[done].effective_return_ns() < b.invoke_ns {
            let a = by_return[done];
            let v = a.observed_version();
            if highest.is_none_or(|h| h.observed_version() < v) {
                highest = Some(a);
            }
            if matches!(a.outcome, Outcome::Removed { version: Some(_) })
                && highest_removed.is_none_or(|h| h.observed_version() < v)
            {
                highest_removed = Some(a);
            }
            done += 1;
        }
        let Some(y) = b.observed_version() else {
            continue;
        };
        if let Some(r) = highest_removed {
            let removed = r.observed_version().unwrap_or(0);
            if matches!(b.outcome, Outcome::Value { .. }) && y <= removed {
                out.push(violation(
                    ViolationKind::ResurrectedDelete,
                    format!(
                        "read found version {y} after a remove of version {removed} had returned: {} after {}",
                        describe(b),
                        describe(r)
                    ),
                ));
                continue;
            }
        }
        if let Some(a) = highest {
            let x = a.observed_version().unwrap_or(0);
            if y < x {
                let kind = match a.outcome {
                    Outcome::Written { .. } if matches!(b.outcome, Outcome::Value { .. }) => {
                        ViolationKind::LostWrite
                    }
                    Outcome::Removed { .. } => ViolationKind::ResurrectedDelete,
                    _ => ViolationKind::VersionRegressed,
                };
                out.push(violation(
                    kind,
                    format!(
                        "version {y} observed after version {x} had been: {} after {}",
                        describe(b),
                        describe(a)
                    ),
                ));
            }
        }
    }

    // (a) a read that finds nothing after an acknowledged write, with no remove
    // (that may have taken effect) in between.
    let removes: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|o| {
            matches!(o.call, Call::Remove { .. })
                && (matches!(o.outcome, Outcome::Removed { .. } | Outcome::Unknown(_))
                    || may_duplicate(o))
        })
        .collect();
    for b in by_invoke
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::NotFound))
    {
        let b_ret = b.effective_return_ns();
        let latest_write = definite
            .iter()
            .filter(|a| {
                matches!(a.outcome, Outcome::Written { .. })
                    && a.effective_return_ns() < b.invoke_ns
            })
            .max_by_key(|a| a.invoke_ns);
        let Some(a) = latest_write else { continue };
        let remove_between = removes
            .iter()
            .any(|d| d.effective_return_ns() > a.invoke_ns && d.invoke_ns < b_ret);
        if !remove_between {
            out.push(violation(
                ViolationKind::LostWrite,
                format!(
                    "acknowledged write not found and no remove could have come between: {} after {}",
                    describe(b),
                    describe(a)
                ),
            ));
        }
    }
}

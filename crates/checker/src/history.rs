//! What a history is: one record per operation a client invoked, with its arguments,
//! when it was invoked and when it returned (nanoseconds on one monotonic clock shared
//! by every client), and what it returned.
//!
//! Outcomes are sorted into three kinds, because a checker must treat them
//! differently (the usual treatment of indeterminate operations in linearizability
//! checking, as in Knossos and porcupine):
//! - *definite* results (an object, a version, a refusal by a reject rule): the
//!   operation took effect (or, for a refusal, observed the state) exactly as said;
//! - *indeterminate* failures (deadline exceeded, coordinator unreachable, internal
//!   error): the operation may or may not have taken effect, at any time after its
//!   invocation — its return time is taken to be infinite;
//! - a failed read constrains nothing and is ignored.

use serde::{Deserialize, Serialize};

/// Reject rules and why they refused: the product's own definition, with the same
/// decision ([`RejectRules::check`]) the master applies, recorded in JSON through
/// `ramstore-wire`'s `serde` feature.
pub use ramstore_wire::{Refusal, RejectRules};

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    /// Read the object.
    Read,
    /// Write `value` (a conditional write when `rules` can refuse).
    Write { value: Vec<u8>, rules: RejectRules },
    /// Delete the object (conditional when `rules` can refuse).
    Remove { rules: RejectRules },
    /// Add `delta` to an 8-byte little-endian i64 value (absent counts as 0).
    Increment { delta: i64 },
}

impl Call {
    /// Whether the call can change the object.
    pub fn mutates(&self) -> bool {
        !matches!(self, Call::Read)
    }
}

/// What the client got back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A read found the object.
    Value { value: Vec<u8>, version: u64 },
    /// A read found no object.
    NotFound,
    /// A write or increment took effect with this version (an increment also
    /// reports the new number).
    Written { version: u64, number: Option<i64> },
    /// A remove took effect; the version of the object it removed (`None`: there
    /// was none).
    Removed { version: Option<u64> },
    /// A reject rule refused the operation (it had no effect).
    Refused(Refusal),
    /// An increment of a value that is not an integer in decimal text (no effect).
    NotNumeric,
    /// An increment that would overflow (no effect).
    Overflow,
    /// The client does not know whether the operation took effect (deadline,
    /// lost connection, internal error): the message it got.
    Unknown(String),
}

impl Outcome {
    /// Whether the client learned what happened.
    pub fn is_definite(&self) -> bool {
        !matches!(self, Outcome::Unknown(_))
    }
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// The client (worker) that issued it; a client issues one operation at a time.
    pub client: u64,
    /// The object: table id and key.
    pub table: u64,
    pub key: Vec<u8>,
    pub call: Call,
    pub outcome: Outcome,
    /// When the call was made, in nanoseconds since the history's start.
    pub invoke_ns: u64,
    /// When it returned (`None`: never, e.g. the client died; treated like
    /// [`Outcome::Unknown`]).
    pub return_ns: Option<u64>,
}

impl Op {
    /// Whether the operation's effect is known (a definite outcome with a return).
    pub fn is_definite(&self) -> bool {
        self.outcome.is_definite() && self.return_ns.is_some()
    }

    /// The return time used for ordering: infinite when not definite.
    pub fn effective_return_ns(&self) -> u64 {
        if self.is_definite() {
            self.return_ns.unwrap_or(u64::MAX)
        } else {
            u64::MAX
        }
    }

    /// The version this operation observed or produced, if it learned one.
    pub fn observed_version(&self) -> Option<u64> {
        match &self.outcome {
            Outcome::Value { version, .. } | Outcome::Written { version, .. } => Some(*version),
            Outcome::Removed { version } => *version,
            Outcome::Refused(Refusal::WrongVersion { current }) => Some(*current),
            _ => None,
        }
    }
}

/// A whole history, as recorded (any order; the checker sorts).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub ops: Vec<Op>,
}

impl History {
    /// Reads a history written by [`History::write_jsonl`]: one JSON [`Op`] a line.
    pub fn read_jsonl(text: &str) -> Result<History, serde_json::Error> {
        let ops = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<Vec<Op>, _>>()?;
        Ok(History { ops })
    }

    /// Writes one JSON [`Op`] a line.
    pub fn write_jsonl(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        for op in &self.ops {
            serde_json::to_writer(&mut *out, op)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

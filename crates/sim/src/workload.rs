//! Client workers on simulated time: a random mix of reads, writes, conditional
//! writes, removes and increments over a small key space, each operation recorded
//! (invocation, return, outcome) for `ramstore_checker`, as the process harness
//! records them (`crates/harness/src/workload.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_checker::{Call, Op, Outcome, Refusal};
use ramstore_client::{Client, ClientError};
use ramstore_clock::Rng;

use crate::clock::SimClock;
use crate::trace::{hash_bytes, Kind, Trace};

/// Plain keys (reads, writes, conditional writes, removes).
pub const KEYS: usize = 32;
/// Counter keys (increments, reads, removes).
pub const COUNTERS: usize = 4;

pub fn key_name(i: usize) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

pub fn counter_name(i: usize) -> Vec<u8> {
    format!("counter-{i}").into_bytes()
}

/// Every key the workload touches.
pub fn all_keys() -> Vec<Vec<u8>> {
    (0..KEYS)
        .map(key_name)
        .chain((0..COUNTERS).map(counter_name))
        .collect()
}

/// The checker's view of a client error (as the harness's `outcome_of_error`).
fn outcome_of_error(call: &Call, e: &ClientError) -> Outcome {
    match (call, e) {
        (Call::Read, ClientError::ObjectDoesntExist) => Outcome::NotFound,
        (_, ClientError::ObjectDoesntExist) => Outcome::Refused(Refusal::DoesntExist),
        (_, ClientError::ObjectExists) => Outcome::Refused(Refusal::Exists),
        (_, ClientError::WrongVersion { current }) => {
            Outcome::Refused(Refusal::WrongVersion { current: *current })
        }
        (_, ClientError::NotNumeric) => Outcome::NotNumeric,
        (_, ClientError::Overflow) => Outcome::Overflow,
        (_, e) => Outcome::Unknown(e.to_string()),
    }
}

async fn execute(client: &Client, table: u64, key: &[u8], call: &Call) -> Outcome {
    let result = match call {
        Call::Read => client
            .read(table, key)
            .await
            .map(|(value, version)| Outcome::Value { value, version }),
        Call::Write { value, rules } => client
            .write_with_rules(table, key, value, rules)
            .await
            .map(|version| Outcome::Written {
                version,
                number: None,
            }),
        Call::Remove { rules } => client
            .remove_with_rules(table, key, rules)
            .await
            .map(|version| Outcome::Removed { version }),
        Call::Increment { delta } => {
            client
                .increment_i64(table, key, *delta)
                .await
                .map(|(n, version)| Outcome::Written {
                    version,
                    number: Some(n),
                })
        }
    };
    result.unwrap_or_else(|e| outcome_of_error(call, &e))
}

/// The history every worker appends to, timed on the simulated clock, each
/// operation also folded into the trace.
#[derive(Debug)]
pub struct Recorder {
    pub ops: Mutex<Vec<Op>>,
    clock: Arc<SimClock>,
    trace: Arc<Trace>,
}

impl Recorder {
    pub fn new(clock: Arc<SimClock>, trace: Arc<Trace>) -> Self {
        Self {
            ops: Mutex::default(),
            clock,
            trace,
        }
    }

    /// Runs one operation of `worker` and records it.
    pub async fn record(
        &self,
        client: &Client,
        worker: u64,
        table: u64,
        key: &[u8],
        call: Call,
    ) -> Outcome {
        let invoke_ns = self.clock.elapsed_ns();
        let outcome = execute(client, table, key, &call).await;
        let return_ns = self.clock.elapsed_ns();
        let shown = format!("{worker} {call:?} {outcome:?}");
        self.trace.event(
            return_ns,
            Kind::Op,
            "client",
            "",
            hash_bytes(shown.as_bytes()),
        );
        self.ops.lock().push(Op {
            client: worker,
            table,
            key: key.to_vec(),
            call,
            outcome: outcome.clone(),
            invoke_ns,
            return_ns: Some(return_ns),
        });
        outcome
    }
}

fn below(rng: &dyn Rng, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

/// Picks worker `w`'s `seq`-th operation: (key, call, plain key index).
fn choose(
    rng: &dyn Rng,
    w: u64,
    seq: u64,
    last_version: &[Option<u64>],
) -> (Vec<u8>, Call, Option<usize>) {
    if below(rng, 5) == 0 {
        let key = counter_name(below(rng, COUNTERS as u64) as usize);
        let call = ramstore_checker::mix::counter_call(below(rng, 10), || 1 + below(rng, 5) as i64);
        return (key, call, None);
    }
    let k = below(rng, KEYS as u64) as usize;
    let mut value = format!("w{w}-{seq}-").into_bytes();
    let len = 16 + below(rng, 100) as usize;
    value.resize(len.max(value.len()), b'a' + (seq % 26) as u8);
    let call = ramstore_checker::mix::key_call(below(rng, 20), value, last_version[k]);
    (key_name(k), call, Some(k))
}

/// One worker: operations with a random think time (0–20 ms) between them,
/// until `stop` is set.
pub async fn worker(
    client: Client,
    recorder: Arc<Recorder>,
    rng: Arc<dyn Rng>,
    w: u64,
    table: u64,
    stop: Arc<AtomicBool>,
) {
    let mut last_version: Vec<Option<u64>> = vec![None; KEYS];
    let mut seq = 0u64;
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_micros(below(rng.as_ref(), 20_000))).await;
        seq += 1;
        let (key, call, k) = choose(rng.as_ref(), w, seq, &last_version);
        let outcome = recorder.record(&client, w, table, &key, call).await;
        if let Some(k) = k {
            last_version[k] = match &outcome {
                Outcome::Value { version, .. } | Outcome::Written { version, .. } => Some(*version),
                Outcome::Refused(Refusal::WrongVersion { current }) => Some(*current),
                Outcome::NotFound | Outcome::Removed { .. } => None,
                _ => last_version[k],
            };
        }
    }
}

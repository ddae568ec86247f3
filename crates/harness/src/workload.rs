//! Client workers that drive a mixed load on shared keys and record every
//! operation's invocation, return, arguments and outcome for the checker.
//!
//! Keys are shared by all workers, so operations on a key overlap in time and the
//! checker's linearizability search has real concurrency to judge. Every written
//! value is unique (worker and sequence number), so a read names the write it saw.
//! Conditional writes use the version the worker last saw for the key; counters
//! (a separate set of keys) only get increments, reads and removes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ramstore_checker::{Call, History, Op, Outcome, Refusal};
use ramstore_client::{BlockingClient, ClientError, ClientOptions};

use crate::HarnessError;

/// Moves the calling thread into network namespace `name` (`ip netns` names it
/// under /var/run/netns); `None`: stay.
pub(crate) fn enter_netns(name: Option<&str>) -> Result<(), HarnessError> {
    let Some(name) = name else { return Ok(()) };
    let path = format!("/var/run/netns/{name}");
    let file =
        std::fs::File::open(&path).map_err(|e| HarnessError::Netns(format!("{path}: {e}")))?;
    use std::os::fd::AsRawFd;
    // SAFETY: setns on a namespace file descriptor we hold open; it changes only
    // the calling thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(HarnessError::Netns(format!(
            "setns {path}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The load's shape.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Client workers (each its own client and connection).
    pub workers: usize,
    /// Plain keys (reads, writes, conditional writes, removes).
    pub keys: usize,
    /// Counter keys (increments, reads, removes).
    pub counters: usize,
    /// Largest value written, in bytes (values are 16 bytes or more).
    pub max_value_bytes: usize,
    /// Seed of the workers' choices.
    pub seed: u64,
    /// Most operations per second, all workers together (`None`: as fast as the
    /// cluster answers). A soak on a shared machine leaves room for others.
    pub max_ops_per_sec: Option<u32>,
    /// A probe for zombie reads (R§7.11): clients keep their tablet map until an
    /// operation fails, and a write to a cut-off master waits there (RETRY) — so
    /// all workers stay with a zombie together and none can see it serve a stale
    /// read. With `Some(deadline)`, worker 0 refreshes its map before every
    /// operation and gives up on each after `deadline` (it moves to a recovery
    /// master as soon as one owns the tablet), and the last worker only reads (it
    /// keeps reading from the zombie meanwhile).
    pub zombie_probe: Option<Duration>,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            workers: 4,
            keys: 64,
            counters: 8,
            max_value_bytes: 200,
            seed: 1,
            max_ops_per_sec: None,
            zombie_probe: None,
        }
    }
}

/// Running workers; [`Workload::stop`] returns the history.
pub struct Workload {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    handles: Vec<JoinHandle<Vec<Op>>>,
    start: Instant,
    table: u64,
}

fn key_name(i: usize) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

fn counter_name(i: usize) -> Vec<u8> {
    format!("counter-{i}").into_bytes()
}

/// The checker's view of a client error for `call`: refusals and increment
/// errors are definite, everything else may or may not have taken effect.
pub fn outcome_of_error(call: &Call, e: &ClientError) -> Outcome {
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

/// Runs `call` on `key` and returns its outcome.
pub fn execute(client: &BlockingClient, table: u64, key: &[u8], call: &Call) -> Outcome {
    let result = match call {
        Call::Read => client
            .read(table, key)
            .map(|(value, version)| Outcome::Value { value, version }),
        Call::Write { value, rules } => {
            client
                .write_with_rules(table, key, value, rules)
                .map(|version| Outcome::Written {
                    version,
                    number: None,
                })
        }
        Call::Remove { rules } => client
            .remove_with_rules(table, key, rules)
            .map(|version| Outcome::Removed { version }),
        Call::Increment { delta } => {
            client
                .increment_i64(table, key, *delta)
                .map(|(n, version)| Outcome::Written {
                    version,
                    number: Some(n),
                })
        }
    };
    result.unwrap_or_else(|e| outcome_of_error(call, &e))
}

/// Records one operation: invocation and return times around `execute`.
pub fn record(
    client: &BlockingClient,
    worker: u64,
    table: u64,
    key: &[u8],
    call: Call,
    start: Instant,
) -> Op {
    let invoke_ns = start.elapsed().as_nanos() as u64;
    let outcome = execute(client, table, key, &call);
    let return_ns = start.elapsed().as_nanos() as u64;
    Op {
        client: worker,
        table,
        key: key.to_vec(),
        call,
        outcome,
        invoke_ns,
        return_ns: Some(return_ns),
    }
}

/// Picks the next operation of worker `w` (its `seq`-th).
fn choose(
    rng: &mut SmallRng,
    config: &WorkloadConfig,
    w: usize,
    seq: u64,
    last_version: &mut [Option<u64>],
) -> (Vec<u8>, Call, Option<usize>) {
    let reader = config.zombie_probe.is_some() && config.workers >= 3 && w == config.workers - 1;
    let on_counter = config.counters > 0 && rng.gen_ratio(1, 5);
    if on_counter {
        let key = counter_name(rng.gen_range(0..config.counters));
        let draw = if reader { 6 } else { rng.gen_range(0..10) };
        let call = ramstore_checker::mix::counter_call(draw, || rng.gen_range(1..=5));
        return (key, call, None);
    }
    let k = rng.gen_range(0..config.keys.max(1));
    let len = rng.gen_range(16..=config.max_value_bytes.max(16));
    let mut value = format!("w{w}-{seq}-").into_bytes();
    value.resize(len.max(value.len()), b'a' + (seq % 26) as u8);
    let draw = if reader { 0 } else { rng.gen_range(0..20) };
    let call = ramstore_checker::mix::key_call(draw, value, last_version[k]);
    (key_name(k), call, Some(k))
}

impl Workload {
    /// Starts `config.workers` workers on `table`, each with its own client
    /// (`options`), made on the worker's thread — inside network namespace
    /// `netns` when given, so the clients' packets come from their own address
    /// (the client runtime's threads inherit the namespace of the thread that
    /// makes them). Times are nanoseconds since `start` (shared by all workers).
    pub fn start(
        config: &WorkloadConfig,
        table: u64,
        start: Instant,
        options: &ClientOptions,
        netns: Option<&str>,
    ) -> Result<Workload, HarnessError> {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        let (ready_tx, ready_rx) = mpsc::channel();
        for w in 0..config.workers {
            let (stop, ops, errors) = (stop.clone(), ops.clone(), errors.clone());
            let config = config.clone();
            let mut options = options.clone();
            if let (0, Some(deadline)) = (w, config.zombie_probe) {
                options.operation_deadline = deadline;
            }
            let netns = netns.map(str::to_string);
            let ready = ready_tx.clone();
            handles.push(thread::spawn(move || {
                let connected = enter_netns(netns.as_deref())
                    .and_then(|()| BlockingClient::connect(options).map_err(HarnessError::Client));
                let client = match connected {
                    Ok(c) => {
                        let _ = ready.send(Ok(()));
                        c
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return Vec::new();
                    }
                };
                let mut rng = SmallRng::seed_from_u64(config.seed.wrapping_mul(1000) + w as u64);
                let mut last_version: Vec<Option<u64>> = vec![None; config.keys.max(1)];
                let mut history = Vec::new();
                let mut seq = 0u64;
                // Each worker's share of the rate, as a gap between its calls.
                let gap = config
                    .max_ops_per_sec
                    .map(|r| Duration::from_secs_f64(config.workers as f64 / f64::from(r.max(1))));
                let mut next_call = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    if let Some(gap) = gap {
                        let now = Instant::now();
                        if next_call > now {
                            thread::sleep(next_call - now);
                        }
                        next_call = next_call.max(now) + gap;
                    }
                    if w == 0 && config.zombie_probe.is_some() {
                        // A failed refresh changes nothing the checker sees.
                        let _ = client.tablet_map();
                    }
                    seq += 1;
                    let (key, call, k) = choose(&mut rng, &config, w, seq, &mut last_version);
                    let op = record(&client, w as u64, table, &key, call, start);
                    if let Some(k) = k {
                        last_version[k] = match &op.outcome {
                            Outcome::Value { version, .. } | Outcome::Written { version, .. } => {
                                Some(*version)
                            }
                            Outcome::Refused(Refusal::WrongVersion { current }) => Some(*current),
                            Outcome::NotFound | Outcome::Removed { .. } => None,
                            _ => last_version[k],
                        };
                    }
                    if !op.outcome.is_definite() {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                    history.push(op);
                }
                history
            }));
        }
        drop(ready_tx);
        for _ in 0..config.workers {
            let connected = ready_rx
                .recv()
                .map_err(|_| HarnessError::Io("a worker ended before connecting".into()))
                .and_then(|r| r);
            if let Err(e) = connected {
                stop.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(Workload {
            stop,
            ops,
            errors,
            handles,
            start,
            table,
        })
    }

    /// Operations completed so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    /// Operations whose outcome was unknown so far.
    pub fn unknown(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Stops the workers, then reads every key once more with `client` (so every
    /// acknowledged write is checked after the faults; the pass stops at the first
    /// read without an answer), and returns the history.
    pub fn stop(self, config: &WorkloadConfig, client: &BlockingClient) -> History {
        self.stop.store(true, Ordering::Relaxed);
        let mut ops = Vec::new();
        for h in self.handles {
            // A worker thread only panics on a bug in this file; keep the others'
            // history rather than lose it.
            if let Ok(part) = h.join() {
                ops.extend(part);
            }
        }
        let final_worker = config.workers as u64;
        let keys = (0..config.keys)
            .map(key_name)
            .chain((0..config.counters).map(counter_name));
        for key in keys {
            let op = record(
                client,
                final_worker,
                self.table,
                &key,
                Call::Read,
                self.start,
            );
            let answered = op.outcome.is_definite();
            ops.push(op);
            // An unanswered read means part of the table is unavailable (the run
            // has failed to heal): do not wait a deadline for every other key.
            if !answered {
                break;
            }
        }
        History { ops }
    }
}

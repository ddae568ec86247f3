//! `ramstore bench`: closed-loop latency and throughput of a running cluster.
//!
//! The table is created if missing and (unless `--no-load`) its `--keys` objects are
//! written with multi-writes. Then `--clients` closed-loop clients each issue one
//! operation at a time for a warm-up (not measured) and then `--duration` seconds;
//! every operation that *starts* inside the measured window is timed on its own and
//! recorded in an HDR histogram (µs, 3 significant digits).
//!
//! # How clients are driven (`--mode`)
//!
//! - `threads` (default): each client is an OS thread running its own current-thread
//!   tokio runtime and its own [`Client`] (own TCP connection to the master). The
//!   request is written and the response read on the same thread, so one operation
//!   costs what an async application with a runtime per thread pays: no hand-off
//!   between threads on the client side.
//! - `tasks`: every client is a task on one shared multi-thread runtime (one worker
//!   per CPU), each with its own `Client`. The usual shape of a tokio service; the
//!   response can wake the waiting task on another worker.
//! - `blocking`: each client is an OS thread with its own [`BlockingClient`], whose
//!   runtime thread reads the response and then wakes the calling thread: one more
//!   thread wake-up per operation than `threads`.
//!
//! With `--shared-client` all clients use one `Client` (one connection per master,
//! requests multiplexed on it) instead of one each.
//!
//! # Workloads
//!
//! `read` and `write` pick keys uniformly. `ycsb-a` (50% read, 50% update),
//! `ycsb-b` (95/5), `ycsb-c` (100% read) and `ycsb-f` (50% read, 50%
//! read-modify-write, as YCSB's workload F; a read-modify-write is a read and then a
//! write of the same key, timed and counted as one operation) pick keys from YCSB's
//! scrambled Zipfian distribution (θ = 0.99): Zipfian ranks hashed with 64-bit FNV
//! over the key space so the hot keys are spread out.
//!
//! Errors are counted and reported, not fatal. A read of a missing object
//! (`--no-load` on an empty table) is a complete round trip: it is timed and counted
//! as `not_found`, not as an error.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use ramstore_client::{BlockingClient, Client, ClientError, ClientOptions, MultiWriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;

/// Largest latency the histograms hold (longer ones are recorded as this): 1 hour.
const MAX_LATENCY_US: u64 = 3_600_000_000;
/// Objects per multi-write while loading (fewer for large values).
const LOAD_BATCH_OBJECTS: usize = 1000;
/// Bytes of keys and values per multi-write while loading, at most.
const LOAD_BATCH_BYTES: usize = 1 << 20;
/// YCSB's default Zipfian constant.
const ZIPFIAN_THETA: f64 = 0.99;
/// How long one operation of the benchmark may take, retries included, before it
/// counts as an error.
const OPERATION_DEADLINE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// 100% reads, uniform keys.
    Read,
    /// 100% writes (overwrites), uniform keys.
    Write,
    /// YCSB A: 50% reads, 50% updates, Zipfian keys.
    YcsbA,
    /// YCSB B: 95% reads, 5% updates, Zipfian keys.
    YcsbB,
    /// YCSB C: 100% reads, Zipfian keys.
    YcsbC,
    /// YCSB F: 50% reads, 50% read-modify-writes, Zipfian keys.
    YcsbF,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Read => "read",
            Workload::Write => "write",
            Workload::YcsbA => "ycsb-a",
            Workload::YcsbB => "ycsb-b",
            Workload::YcsbC => "ycsb-c",
            Workload::YcsbF => "ycsb-f",
        }
    }

    /// The percentage of operations that are not plain reads (updates, or
    /// read-modify-writes for F).
    fn non_read_percent(self) -> u32 {
        match self {
            Workload::Read | Workload::YcsbC => 0,
            Workload::Write => 100,
            Workload::YcsbA | Workload::YcsbF => 50,
            Workload::YcsbB => 5,
        }
    }

    fn zipfian(self) -> bool {
        !matches!(self, Workload::Read | Workload::Write)
    }

    fn pick(self, rng: &mut SmallRng) -> Op {
        let p = self.non_read_percent();
        if p == 0 || rng.gen_range(0..100) >= p {
            Op::Read
        } else if self == Workload::YcsbF {
            Op::ReadModifyWrite
        } else {
            Op::Update
        }
    }
}

/// How the clients are driven (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// A thread per client, each with its own current-thread runtime.
    Threads,
    /// A task per client on one multi-thread runtime.
    Tasks,
    /// A thread per client, each with its own BlockingClient.
    Blocking,
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The coordinator's address [env: RAMSTORE_COORDINATOR; default:
    /// 127.0.0.1:7000] (`main` fills it in before [`run`]).
    #[arg(long, value_name = "ADDR")]
    pub coordinator: Option<String>,
    #[arg(long, value_enum, default_value_t = Workload::Read)]
    workload: Workload,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Objects in the key space.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Closed-loop clients (each has one operation outstanding at a time).
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds run before measuring starts (not measured).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// The table to use (created if missing).
    #[arg(long, default_value = "bench")]
    table: String,
    /// Also write the results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write every key before running (the default).
    #[arg(long, overrides_with = "no_load")]
    load: bool,
    /// Do not load: the keys were written by an earlier run.
    #[arg(long, overrides_with = "load")]
    no_load: bool,
    /// How clients are driven: a thread with its own runtime each, tasks on one
    /// multi-thread runtime, or a thread with a BlockingClient each.
    #[arg(long, value_enum, default_value_t = Mode::Threads)]
    mode: Mode,
    /// All clients share one Client (one connection per master) instead of one each.
    #[arg(long)]
    shared_client: bool,
    /// Seed of the key and operation choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// The operations a client performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Read,
    Update,
    ReadModifyWrite,
}

const OPS: [Op; 3] = [Op::Read, Op::Update, Op::ReadModifyWrite];

impl Op {
    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Update => "update",
            Op::ReadModifyWrite => "read-modify-write",
        }
    }
}

/// Picks key indexes.
#[derive(Clone)]
enum KeyChooser {
    Uniform(u64),
    Zipfian(Zipfian),
}

impl KeyChooser {
    fn next(&self, rng: &mut SmallRng) -> u64 {
        match self {
            KeyChooser::Uniform(n) => rng.gen_range(0..*n),
            KeyChooser::Zipfian(z) => z.next_scrambled(rng),
        }
    }
}

/// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record
/// synthetic databases"), over ranks `0..n` with rank 0 the most popular.
#[derive(Clone, Debug)]
struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    fn new(n: u64, theta: f64) -> Self {
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let eta = if n > 2 {
            (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        } else {
            1.0
        };
        Self {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
        }
    }

    fn next_rank(&self, rng: &mut SmallRng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let rank = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.n - 1)
    }

    /// A rank scrambled over the key space, as YCSB's ScrambledZipfianGenerator.
    fn next_scrambled(&self, rng: &mut SmallRng) -> u64 {
        fnv1a64(self.next_rank(rng)) % self.n
    }
}

/// YCSB's FNV-1a over the 8 bytes of `v`, least significant first.
fn fnv1a64(mut v: u64) -> u64 {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        hash ^= v & 0xff;
        hash = hash.wrapping_mul(1_099_511_628_211);
        v >>= 8;
    }
    hash
}

/// Bytes of every key: `user` and 12 decimal digits (at least; more for huge `i`).
const KEY_BYTES: usize = 16;

/// Writes the key of object `i` into `out` (cleared first). Keys are made on the
/// fly instead of kept in a big table, so picking one costs no cache miss in the
/// benchmark itself.
fn write_key(out: &mut Vec<u8>, i: u64) {
    use std::io::Write as _;
    out.clear();
    let _ = write!(out, "user{i:012}");
}

/// What every client shares.
struct Shared {
    table_id: u64,
    workload: Workload,
    key_count: u64,
    value: Vec<u8>,
    chooser: KeyChooser,
    warmup: Duration,
    duration: Duration,
    seed: u64,
    /// When the warm-up started: set by the first client past the start barrier.
    start: OnceLock<Instant>,
    /// A client could not connect: everyone stops at the start barrier.
    failed: AtomicBool,
}

/// What one client measured.
struct ClientStats {
    all: Histogram<u64>,
    by_op: [Histogram<u64>; 3],
    ops: u64,
    errors: u64,
    not_found: u64,
    first_error: Option<String>,
}

impl ClientStats {
    fn new() -> Self {
        let h = || Histogram::new_with_max(MAX_LATENCY_US, 3).expect("valid histogram bounds");
        Self {
            all: h(),
            by_op: [h(), h(), h()],
            ops: 0,
            errors: 0,
            not_found: 0,
            first_error: None,
        }
    }

    fn merge(&mut self, other: &ClientStats) {
        // Same bounds everywhere: adding cannot fail.
        let _ = self.all.add(&other.all);
        for (a, b) in self.by_op.iter_mut().zip(&other.by_op) {
            let _ = a.add(b);
        }
        self.ops += other.ops;
        self.errors += other.errors;
        self.not_found += other.not_found;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }
}

/// A client the benchmark can drive: the async [`Client`] or a [`BlockingClient`]
/// (whose "futures" complete before they are first polled).
trait Store {
    async fn bench_read(&self, table_id: u64, key: &[u8]) -> Result<(), ClientError>;
    async fn bench_write(&self, table_id: u64, key: &[u8], value: &[u8])
        -> Result<(), ClientError>;
}

impl Store for Client {
    async fn bench_read(&self, table_id: u64, key: &[u8]) -> Result<(), ClientError> {
        self.read(table_id, key).await.map(drop)
    }

    async fn bench_write(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), ClientError> {
        self.write(table_id, key, value).await.map(drop)
    }
}

impl Store for BlockingClient {
    async fn bench_read(&self, table_id: u64, key: &[u8]) -> Result<(), ClientError> {
        self.read(table_id, key).map(drop)
    }

    async fn bench_write(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), ClientError> {
        self.write(table_id, key, value).map(drop)
    }
}

/// One operation: `Ok(true)` done, `Ok(false)` the object was missing.
async fn perform<S: Store>(
    store: &S,
    shared: &Shared,
    op: Op,
    key: &[u8],
) -> Result<bool, ClientError> {
    let found = |r: Result<(), ClientError>| match r {
        Ok(()) => Ok(true),
        Err(ClientError::ObjectDoesntExist) => Ok(false),
        Err(e) => Err(e),
    };
    match op {
        Op::Read => found(store.bench_read(shared.table_id, key).await),
        Op::Update => found(store.bench_write(shared.table_id, key, &shared.value).await),
        Op::ReadModifyWrite => {
            let present = found(store.bench_read(shared.table_id, key).await)?;
            store
                .bench_write(shared.table_id, key, &shared.value)
                .await?;
            Ok(present)
        }
    }
}

/// A closed loop: one operation at a time until the measured window is over.
async fn client_loop<S: Store>(store: &S, shared: &Shared, index: usize) -> ClientStats {
    let mut rng = SmallRng::seed_from_u64(
        shared
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(index as u64),
    );
    let start = *shared.start.get_or_init(Instant::now);
    let measure_from = start + shared.warmup;
    let until = measure_from + shared.duration;
    let mut stats = ClientStats::new();
    let mut key = Vec::with_capacity(KEY_BYTES);
    loop {
        let op = shared.workload.pick(&mut rng);
        write_key(&mut key, shared.chooser.next(&mut rng));
        let key = key.as_slice();
        let began = Instant::now();
        if began >= until {
            break;
        }
        let result = perform(store, shared, op, key).await;
        let took = began.elapsed();
        if began < measure_from {
            continue;
        }
        stats.ops += 1;
        match result {
            Ok(found) => {
                if !found {
                    stats.not_found += 1;
                }
                let us = ((took.as_nanos() + 500) / 1000) as u64;
                stats.all.saturating_record(us);
                stats.by_op[op.index()].saturating_record(us);
            }
            Err(e) => {
                stats.errors += 1;
                if stats.first_error.is_none() {
                    stats.first_error = Some(format!(
                        "{} of {}: {e}",
                        op.name(),
                        String::from_utf8_lossy(key)
                    ));
                }
            }
        }
    }
    stats
}

/// Runs a future whose awaits never pend (a [`BlockingClient`]'s) to completion.
fn complete<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => unreachable!("a blocking client's operation pended"),
    }
}

impl BenchArgs {
    /// The coordinator's address (`main` resolves the default).
    fn coordinator(&self) -> &str {
        self.coordinator.as_deref().unwrap_or("127.0.0.1:7000")
    }
}

fn client_options(coordinator: &str) -> ClientOptions {
    ClientOptions {
        operation_deadline: OPERATION_DEADLINE,
        ..ClientOptions::new(coordinator.to_string())
    }
}

/// Runs `clients` closed-loop clients as `mode` says and merges what they measured.
fn run_clients(args: &BenchArgs, shared: Arc<Shared>) -> Result<ClientStats> {
    let n = args.clients;
    let options = client_options(args.coordinator());
    let mut merged = ClientStats::new();
    match args.mode {
        Mode::Tasks => {
            let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()?;
            let results = rt.block_on(async {
                let common = if args.shared_client {
                    Some(Client::connect(options.clone()).await?)
                } else {
                    None
                };
                let barrier = Arc::new(tokio::sync::Barrier::new(n));
                let mut handles = Vec::with_capacity(n);
                for i in 0..n {
                    let (shared, barrier, options, common) = (
                        shared.clone(),
                        barrier.clone(),
                        options.clone(),
                        common.clone(),
                    );
                    handles.push(tokio::spawn(async move {
                        let client = match common {
                            Some(c) => Ok(c),
                            None => Client::connect(options).await,
                        };
                        if client.is_err() {
                            shared.failed.store(true, Ordering::SeqCst);
                        }
                        barrier.wait().await;
                        if shared.failed.load(Ordering::SeqCst) {
                            return client.map(|_| None);
                        }
                        let client = client?;
                        Ok(Some(client_loop(&client, &shared, i).await))
                    }));
                }
                let mut results = Vec::with_capacity(n);
                for h in handles {
                    results.push(h.await.context("a client task panicked")?);
                }
                anyhow::Ok(results)
            })?;
            for r in results {
                if let Some(stats) = r.context("connecting a client")? {
                    merged.merge(&stats);
                }
            }
        }
        Mode::Threads | Mode::Blocking => {
            let start_barrier = Arc::new(Barrier::new(n));
            let end_barrier = Arc::new(Barrier::new(n));
            // A connection's reader task runs on the runtime that opened it, and a
            // client thread's runtime only runs while that thread drives it. A shared
            // client therefore opens its connections (coordinator, and the master via
            // one read) on a runtime of its own that always runs.
            let common_rt;
            let common = if args.shared_client && args.mode == Mode::Threads {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()?;
                let c = rt.block_on(Client::connect(options.clone()))?;
                let mut key = Vec::with_capacity(KEY_BYTES);
                write_key(&mut key, 0);
                match rt.block_on(c.read(shared.table_id, &key)) {
                    Ok(_) | Err(ClientError::ObjectDoesntExist) => {}
                    Err(e) => return Err(anyhow::anyhow!("warming the shared client: {e}")),
                }
                common_rt = Some(rt);
                Some(c)
            } else {
                common_rt = None;
                None
            };
            let common_blocking = if args.shared_client && args.mode == Mode::Blocking {
                Some(BlockingClient::connect(options.clone())?)
            } else {
                None
            };
            let mut handles = Vec::with_capacity(n);
            for i in 0..n {
                let (shared, start_barrier, end_barrier, options) = (
                    shared.clone(),
                    start_barrier.clone(),
                    end_barrier.clone(),
                    options.clone(),
                );
                let (common, common_blocking) = (common.clone(), common_blocking.clone());
                let mode = args.mode;
                let handle = std::thread::Builder::new()
                    .name(format!("bench-client-{i}"))
                    .spawn(move || -> Result<Option<ClientStats>> {
                        let wait_start = |ok: bool| {
                            if !ok {
                                shared.failed.store(true, Ordering::SeqCst);
                            }
                            start_barrier.wait();
                            !shared.failed.load(Ordering::SeqCst)
                        };
                        let stats = if mode == Mode::Threads {
                            let rt = tokio::runtime::Builder::new_current_thread()
                                .enable_all()
                                .build()?;
                            let client = match common {
                                Some(c) => Ok(c),
                                None => rt.block_on(Client::connect(options)),
                            };
                            if !wait_start(client.is_ok()) {
                                return client.map(|_| None).map_err(Into::into);
                            }
                            let client = client?;
                            let stats = rt.block_on(client_loop(&client, &shared, i));
                            // Keep this runtime (and any connection it reads) alive until
                            // every client is done.
                            end_barrier.wait();
                            stats
                        } else {
                            let client = match common_blocking {
                                Some(c) => Ok(c),
                                None => BlockingClient::connect(options),
                            };
                            if !wait_start(client.is_ok()) {
                                return client.map(|_| None).map_err(Into::into);
                            }
                            let client = client?;
                            let stats = complete(client_loop(&client, &shared, i));
                            end_barrier.wait();
                            stats
                        };
                        Ok(Some(stats))
                    })?;
                handles.push(handle);
            }
            let mut first_err = None;
            for h in handles {
                match h.join() {
                    Ok(Ok(Some(stats))) => merged.merge(&stats),
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => {
                        first_err.get_or_insert(e);
                    }
                    Err(_) => bail!("a client thread panicked"),
                }
            }
            drop(common_rt);
            if let Some(e) = first_err {
                return Err(e.context("connecting a client"));
            }
        }
    }
    Ok(merged)
}

/// Writes every key with multi-writes, showing progress on a terminal.
async fn load(client: &Client, shared: &Shared) -> Result<()> {
    let n = shared.key_count;
    let per_object = shared.value.len() + KEY_BYTES + 32;
    let batch = (LOAD_BATCH_BYTES / per_object).clamp(1, LOAD_BATCH_OBJECTS) as u64;
    let bar = if std::io::stdout().is_terminal() {
        let bar = indicatif::ProgressBar::new(n);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "loading {bar:40} {pos}/{len} keys ({per_sec}, eta {eta})",
        ) {
            bar.set_style(style);
        }
        Some(bar)
    } else {
        None
    };
    let started = Instant::now();
    for first in (0..n).step_by(batch as usize) {
        let chunk: Vec<Vec<u8>> = (first..n.min(first + batch))
            .map(|i| {
                let mut k = Vec::with_capacity(KEY_BYTES);
                write_key(&mut k, i);
                k
            })
            .collect();
        let ops: Vec<MultiWriteOp<'_>> = chunk
            .iter()
            .map(|k| MultiWriteOp::new(shared.table_id, k, &shared.value))
            .collect();
        let results = client.multi_write(&ops).await;
        if let Some((i, Err(e))) = results.iter().enumerate().find(|(_, r)| r.is_err()) {
            if let Some(bar) = &bar {
                bar.abandon();
            }
            bail!("loading key {}: {e}", String::from_utf8_lossy(&chunk[i]));
        }
        if let Some(bar) = &bar {
            bar.inc(chunk.len() as u64);
        }
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    eprintln!(
        "loaded {n} keys of {} B in {:.1} s",
        shared.value.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Percentiles of one histogram, in µs.
#[derive(Serialize)]
struct Summary {
    ops: u64,
    p50_us: u64,
    p90_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    mean_us: f64,
}

impl Summary {
    fn of(h: &Histogram<u64>) -> Self {
        Self {
            ops: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: (h.mean() * 10.0).round() / 10.0,
        }
    }
}

#[derive(Serialize)]
struct Machine {
    nproc: usize,
    model: String,
    kernel: String,
    loadavg_start: String,
    loadavg_end: String,
}

fn read_proc(path: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn cpu_model() -> String {
    read_proc("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[derive(Serialize)]
struct Report {
    workload: Workload,
    clients: usize,
    value_size: usize,
    ops_per_sec: f64,
    p50_us: u64,
    p90_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    mean_us: f64,
    keys: u64,
    duration_s: f64,
    warmup_s: f64,
    /// Operations started in the measured window (errors included).
    ops: u64,
    errors: u64,
    not_found: u64,
    mode: Mode,
    shared_client: bool,
    table: String,
    coordinator: String,
    /// Percentiles per kind of operation (mixed workloads).
    per_op: std::collections::BTreeMap<&'static str, Summary>,
    machine: Machine,
}

pub fn run(args: BenchArgs) -> Result<()> {
    // Bad values are usage errors (exit code 2), found before anything starts.
    let usage = |m: &str| -> Result<()> { Err(crate::reach::Exit::Usage(m.to_string()).into()) };
    if args.clients == 0 {
        return usage("--clients must be at least 1");
    }
    if args.keys == 0 {
        return usage("--keys must be at least 1");
    }
    if !(args.duration > 0.0 && args.duration.is_finite()) {
        return usage("--duration must be a positive number of seconds");
    }
    if !(args.warmup >= 0.0 && args.warmup.is_finite()) {
        return usage("--warmup must be zero or a positive number of seconds");
    }
    let loadavg_start = read_proc("/proc/loadavg");
    let do_load = !args.no_load;

    // Set up on a runtime of its own, dropped before the clients start.
    let setup = crate::runtime()?;
    let table_id = setup.block_on(async {
        let client = Client::connect(client_options(args.coordinator()))
            .await
            .map_err(|e| match e {
                ClientError::CoordinatorUnreachable(_) => anyhow::anyhow!(
                    "cannot reach coordinator at {} (is `ramstore dev` running? set --coordinator or RAMSTORE_COORDINATOR)",
                    args.coordinator()
                ),
                e => anyhow::anyhow!("cannot connect to coordinator at {}: {e}", args.coordinator()),
            })?;
        let table_id = match client.get_table_id(&args.table).await {
            Ok(id) => id,
            Err(ClientError::TableDoesntExist) => client
                .create_table(&args.table, 1)
                .await
                .with_context(|| format!("creating table '{}'", args.table))?,
            Err(e) => return Err(anyhow::anyhow!("looking up table '{}': {e}", args.table)),
        };
        anyhow::Ok((client, table_id))
    })?;
    let (setup_client, table_id) = table_id;

    let mut value = vec![0u8; args.value_size];
    SmallRng::seed_from_u64(args.seed).fill_bytes(&mut value);
    let shared = Arc::new(Shared {
        table_id,
        workload: args.workload,
        key_count: args.keys,
        value,
        chooser: if args.workload.zipfian() {
            KeyChooser::Zipfian(Zipfian::new(args.keys, ZIPFIAN_THETA))
        } else {
            KeyChooser::Uniform(args.keys)
        },
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        seed: args.seed,
        start: OnceLock::new(),
        failed: AtomicBool::new(false),
    });
    if do_load {
        setup.block_on(load(&setup_client, &shared))?;
    }
    drop(setup_client);
    drop(setup);

    eprintln!(
        "running {} with {} client(s) ({}{}): {} s warm-up, then {} s measured",
        args.workload.name(),
        args.clients,
        match args.mode {
            Mode::Threads => "a thread and runtime each",
            Mode::Tasks => "tasks on a multi-thread runtime",
            Mode::Blocking => "a thread and BlockingClient each",
        },
        if args.shared_client {
            ", one shared client"
        } else {
            ""
        },
        args.warmup,
        args.duration
    );
    let stats = run_clients(&args, shared.clone())?;
    let all = Summary::of(&stats.all);
    let ops_per_sec = (stats.ops as f64 / args.duration * 10.0).round() / 10.0;
    let per_op: std::collections::BTreeMap<_, _> = OPS
        .iter()
        .filter(|op| !stats.by_op[op.index()].is_empty())
        .map(|op| (op.name(), Summary::of(&stats.by_op[op.index()])))
        .collect();

    println!(
        "{:<10} {:>7} {:>6} {:>10} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7}",
        "WORKLOAD",
        "CLIENTS",
        "VALUE",
        "OPS/S",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "ERRORS"
    );
    let row = |name: &str, ops: f64, s: &Summary, errors: u64| {
        println!(
            "{name:<10} {:>7} {:>6} {ops:>10.0} {:>8} {:>8} {:>8} {:>9} {:>8} {errors:>7}",
            args.clients, args.value_size, s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us
        )
    };
    row(args.workload.name(), ops_per_sec, &all, stats.errors);
    if per_op.len() > 1 {
        for (name, s) in &per_op {
            row(&format!("  {name}"), s.ops as f64 / args.duration, s, 0);
        }
    }
    if stats.not_found > 0 {
        println!(
            "{} operation(s) found no object (was the table loaded? drop --no-load)",
            stats.not_found
        );
    }
    if stats.errors > 0 {
        println!(
            "{} operation(s) failed; the first: {}",
            stats.errors,
            stats.first_error.as_deref().unwrap_or("?")
        );
    }

    if let Some(path) = &args.json {
        let report = Report {
            workload: args.workload,
            clients: args.clients,
            value_size: args.value_size,
            ops_per_sec,
            p50_us: all.p50_us,
            p90_us: all.p90_us,
            p99_us: all.p99_us,
            p999_us: all.p999_us,
            max_us: all.max_us,
            mean_us: all.mean_us,
            keys: args.keys,
            duration_s: args.duration,
            warmup_s: args.warmup,
            ops: stats.ops,
            errors: stats.errors,
            not_found: stats.not_found,
            mode: args.mode,
            shared_client: args.shared_client,
            table: args.table.clone(),
            coordinator: args.coordinator().to_string(),
            per_op,
            machine: Machine {
                nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
                model: cpu_model(),
                kernel: read_proc("/proc/sys/kernel/osrelease"),
                loadavg_start,
                loadavg_end: read_proc("/proc/loadavg"),
            },
        };
        let text = serde_json::to_string_pretty(&report)? + "\n";
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipfian_stays_in_range_and_favours_rank_zero() {
        let z = Zipfian::new(1000, ZIPFIAN_THETA);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            let r = z.next_rank(&mut rng);
            counts[r as usize] += 1;
            assert!(z.next_scrambled(&mut rng) < 1000);
        }
        // With θ = 0.99 over 1000 items rank 0 draws about 13% of the picks.
        assert!(counts[0] > 10_000 && counts[0] < 16_000, "{}", counts[0]);
        assert!(counts[0] > counts[1] && counts[1] > counts[10]);
    }

    #[test]
    fn keys_are_fixed_width() {
        let mut k = Vec::new();
        write_key(&mut k, 42);
        assert_eq!(k, b"user000000000042");
        assert_eq!(k.len(), KEY_BYTES);
        write_key(&mut k, 7);
        assert_eq!(k, b"user000000000007");
    }

    #[test]
    fn workload_mixes() {
        let mut rng = SmallRng::seed_from_u64(1);
        let count = |w: Workload, op: Op, rng: &mut SmallRng| {
            (0..10_000).filter(|_| w.pick(rng) == op).count()
        };
        assert_eq!(count(Workload::Read, Op::Read, &mut rng), 10_000);
        assert_eq!(count(Workload::Write, Op::Update, &mut rng), 10_000);
        assert_eq!(count(Workload::YcsbC, Op::Read, &mut rng), 10_000);
        let b = count(Workload::YcsbB, Op::Update, &mut rng);
        assert!((300..700).contains(&b), "{b}");
        let f = count(Workload::YcsbF, Op::ReadModifyWrite, &mut rng);
        assert!((4_500..5_500).contains(&f), "{f}");
    }
}

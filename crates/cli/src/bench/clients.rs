//! The closed-loop clients of `ramstore bench`: loading the table, driving one
//! operation at a time per client in each `--mode`, and timing every operation
//! into HDR histograms.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use ramstore_client::{BlockingClient, Client, ClientError, ClientOptions, MultiWriteOp};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::args::{BenchArgs, Mode};
use super::workload::{write_key, KeyChooser, Op, Workload, KEY_BYTES};

/// Largest latency the histograms hold (longer ones are recorded as this): 1 hour.
const MAX_LATENCY_US: u64 = 3_600_000_000;
/// Objects per multi-write while loading (fewer for large values).
const LOAD_BATCH_OBJECTS: usize = 1000;
/// Bytes of keys and values per multi-write while loading, at most.
const LOAD_BATCH_BYTES: usize = 1 << 20;
/// How long one operation of the benchmark may take, retries included, before it
/// counts as an error.
const OPERATION_DEADLINE: Duration = Duration::from_secs(5);
/// What every client shares.
pub(super) struct Shared {
    pub(super) table_id: u64,
    pub(super) workload: Workload,
    pub(super) key_count: u64,
    pub(super) value: Vec<u8>,
    pub(super) chooser: KeyChooser,
    pub(super) warmup: Duration,
    pub(super) duration: Duration,
    pub(super) seed: u64,
    /// Objects each `tx` transaction writes.
    pub(super) tx_objects: usize,
    /// When the warm-up started: set by the first client past the start barrier.
    pub(super) start: OnceLock<Instant>,
    /// A client could not connect: everyone stops at the start barrier.
    pub(super) failed: AtomicBool,
}

/// What one client measured.
pub(super) struct ClientStats {
    pub(super) all: Histogram<u64>,
    pub(super) by_op: [Histogram<u64>; 4],
    pub(super) ops: u64,
    pub(super) errors: u64,
    pub(super) not_found: u64,
    pub(super) first_error: Option<String>,
}

impl ClientStats {
    pub(super) fn new() -> Self {
        let h = || Histogram::new_with_max(MAX_LATENCY_US, 3).expect("valid histogram bounds");
        Self {
            all: h(),
            by_op: [h(), h(), h(), h()],
            ops: 0,
            errors: 0,
            not_found: 0,
            first_error: None,
        }
    }

    pub(super) fn merge(&mut self, other: &ClientStats) {
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
    /// One transaction writing `value` to every key of `keys`, committed.
    async fn bench_tx(
        &self,
        table_id: u64,
        keys: &[Vec<u8>],
        value: &[u8],
    ) -> Result<(), ClientError>;
    /// One bank transfer of 1 from `from` to `to`, retried on abort.
    async fn bench_transfer(
        &self,
        table_id: u64,
        from: &[u8],
        to: &[u8],
    ) -> Result<(), ClientError>;
}

/// Attempts of one bank transfer before it counts as an error.
const TRANSFER_ATTEMPTS: u32 = 100;

/// A balance as the bank workload stores it (decimal text); anything else (the
/// loaded random values) counts as 0.
fn balance(value: Option<Vec<u8>>) -> i64 {
    value
        .and_then(|v| ramstore_client::counter::parse_i64(&v))
        .unwrap_or(0)
}

fn balance_text(n: i64) -> ramstore_client::counter::CounterText {
    ramstore_client::counter::CounterText::from_i64(n)
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

    async fn bench_tx(
        &self,
        table_id: u64,
        keys: &[Vec<u8>],
        value: &[u8],
    ) -> Result<(), ClientError> {
        let mut tx = self.transaction();
        for key in keys {
            tx.write(table_id, key, value)?;
        }
        tx.commit().await
    }

    async fn bench_transfer(
        &self,
        table_id: u64,
        from: &[u8],
        to: &[u8],
    ) -> Result<(), ClientError> {
        self.run_transaction(TRANSFER_ATTEMPTS, |mut tx| async move {
            let a = balance(tx.read(table_id, from).await?);
            let b = balance(tx.read(table_id, to).await?);
            tx.write(table_id, from, balance_text(a.wrapping_sub(1)).as_bytes())?;
            tx.write(table_id, to, balance_text(b.wrapping_add(1)).as_bytes())?;
            Ok((tx, ()))
        })
        .await
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

    async fn bench_tx(
        &self,
        table_id: u64,
        keys: &[Vec<u8>],
        value: &[u8],
    ) -> Result<(), ClientError> {
        let mut tx = self.transaction();
        for key in keys {
            tx.write(table_id, key, value)?;
        }
        tx.commit()
    }

    async fn bench_transfer(
        &self,
        table_id: u64,
        from: &[u8],
        to: &[u8],
    ) -> Result<(), ClientError> {
        self.run_transaction(TRANSFER_ATTEMPTS, |tx| {
            let a = balance(tx.read(table_id, from)?);
            let b = balance(tx.read(table_id, to)?);
            tx.write(table_id, from, balance_text(a.wrapping_sub(1)).as_bytes())?;
            tx.write(table_id, to, balance_text(b.wrapping_add(1)).as_bytes())?;
            Ok(())
        })
    }
}

/// One operation: `Ok(true)` done, `Ok(false)` the object was missing.
async fn perform<S: Store>(
    store: &S,
    shared: &Shared,
    op: Op,
    key: &[u8],
    tx_keys: &[Vec<u8>],
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
        Op::Transaction => match (shared.workload, tx_keys) {
            (Workload::Bank, [from, to]) => {
                store.bench_transfer(shared.table_id, from, to).await?;
                Ok(true)
            }
            _ => {
                store
                    .bench_tx(shared.table_id, tx_keys, &shared.value)
                    .await?;
                Ok(true)
            }
        },
    }
}

/// Fills `keys` with `n` distinct keys from `chooser` (`n` ≤ the key count,
/// checked before the clients start).
fn pick_distinct(keys: &mut Vec<Vec<u8>>, n: usize, shared: &Shared, rng: &mut SmallRng) {
    keys.clear();
    let mut picked: Vec<u64> = Vec::with_capacity(n);
    while picked.len() < n {
        let i = shared.chooser.next(rng);
        if !picked.contains(&i) {
            picked.push(i);
            let mut k = Vec::with_capacity(KEY_BYTES);
            write_key(&mut k, i);
            keys.push(k);
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
    let mut tx_keys = Vec::new();
    loop {
        let op = shared.workload.pick(&mut rng);
        if op == Op::Transaction {
            let n = shared.workload.objects(shared.tx_objects);
            pick_distinct(&mut tx_keys, n, shared, &mut rng);
        }
        write_key(&mut key, shared.chooser.next(&mut rng));
        let key = key.as_slice();
        let began = Instant::now();
        if began >= until {
            break;
        }
        let result = perform(store, shared, op, key, &tx_keys).await;
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
pub(super) fn complete<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => unreachable!("a blocking client's operation pended"),
    }
}

pub(super) fn client_options(args: &BenchArgs) -> ClientOptions {
    ClientOptions {
        operation_deadline: OPERATION_DEADLINE,
        exactly_once: args.exactly_once(),
        reply_poll_us: args.reply_poll_us,
        ..ClientOptions::new(args.coordinator().to_string())
    }
}

/// Runs `clients` closed-loop clients as `mode` says and merges what they measured.
pub(super) fn run_clients(args: &BenchArgs, shared: Arc<Shared>) -> Result<ClientStats> {
    let n = args.clients;
    let options = client_options(args);
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
pub(super) async fn load(client: &Client, shared: &Shared) -> Result<()> {
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

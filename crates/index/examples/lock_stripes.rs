//! The cost of a write's bucket lock: one lock per main bucket against
//! [`ramstore_index::LOCK_STRIPES`] shared locks.
//!
//! Builds tables of `--buckets` main buckets (default: a 1 GiB store's, one per
//! 640 B) holding `--fill` entries per bucket, then times `--threads` threads that
//! each lock the bucket of a random hash, look for a reference in it (as a write
//! does) and unlock, `--ops` times; the stripe counts alternate round by round so
//! both see the same machine. Reports the median ns per operation of `--rounds`
//! rounds per stripe count, with the spread, in wall time and in the threads' CPU
//! time (which a loaded machine's waits for a core do not inflate).
//!
//! ```text
//! cargo run --release -p ramstore-index --example lock_stripes -- \
//!     [--buckets 1677721] [--fill 4] [--threads 2] [--ops 2000000] [--rounds 7] [--stripes N]
//! ```
//!
//! A measurement tool, not a test: it asserts nothing about time.

use std::time::Instant;

use ramstore_index::{HashTable, LOCK_STRIPES};

mod common;
use common::SplitMix;

struct Args {
    buckets: usize,
    fill: usize,
    threads: usize,
    ops: u64,
    rounds: usize,
    /// One stripe count only (0: one per bucket, `LOCK_STRIPES` and 1,024), so
    /// that `perf stat -e cycles:u` can count each alone, unaffected by time the
    /// threads spend descheduled on a loaded machine.
    stripes: Option<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        buckets: (1usize << 30) / 640,
        fill: 4,
        threads: 2,
        ops: 2_000_000,
        rounds: 7,
        stripes: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number: u64 = value
            .parse()
            .map_err(|_| format!("{flag}: not a number: {value}"))?;
        match flag.as_str() {
            "--buckets" => args.buckets = number as usize,
            "--fill" => args.fill = number as usize,
            "--threads" => args.threads = (number as usize).max(1),
            "--ops" => args.ops = number,
            "--rounds" => args.rounds = (number as usize).max(1),
            "--stripes" => args.stripes = (number > 0).then_some(number as usize),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// A table of `buckets` main buckets with `fill` entries per bucket on average.
fn filled(buckets: usize, fill: usize, stripes: usize) -> HashTable {
    let table = HashTable::with_lock_stripes(buckets, stripes);
    let mut rng = SplitMix(1);
    for _ in 0..buckets * fill {
        let hash = rng.next();
        let reference = (rng.next() & ((1 << 48) - 1)).max(1);
        // The table has overflow room for far more than `fill` per bucket.
        table
            .lock(hash)
            .insert(reference)
            .expect("the table has room");
    }
    table
}

/// This thread's CPU time in nanoseconds: unlike wall time, it does not grow
/// while the thread waits for a core on a loaded machine.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write into; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Wall and CPU nanoseconds per lock + find + unlock (CPU: the mean of the
/// threads'), `threads` threads at once.
fn time_round(table: &HashTable, threads: usize, ops: u64, seed: u64) -> (f64, f64) {
    let start = Instant::now();
    let cpu_ns: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let cpu_start = thread_cpu_ns();
                    let mut rng = SplitMix(seed ^ ((t as u64 + 1) * 0x1234_5678));
                    let mut found = 0u64;
                    for _ in 0..ops {
                        let hash = rng.next();
                        let guard = table.lock(hash);
                        found += u64::from(guard.find_ref(hash & ((1 << 48) - 1)).is_some());
                    }
                    std::hint::black_box(found);
                    thread_cpu_ns() - cpu_start
                })
            })
            .collect();
        // A worker panics only if the table is broken; then so is the run.
        workers.into_iter().map(|w| w.join().expect("worker")).sum()
    });
    let wall = start.elapsed().as_nanos() as f64 / ops as f64;
    (wall, cpu_ns as f64 / (threads as u64 * ops) as f64)
}

fn median_and_spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("lock_stripes: {e}");
            std::process::exit(2);
        }
    };
    let configs = match args.stripes {
        Some(stripes) => vec![stripes],
        None => vec![args.buckets, LOCK_STRIPES, 1024],
    };
    let tables: Vec<HashTable> = configs
        .iter()
        .map(|&stripes| filled(args.buckets, args.fill, stripes))
        .collect();
    let mut walls = vec![Vec::new(); configs.len()];
    let mut cpus = vec![Vec::new(); configs.len()];
    for round in 0..args.rounds {
        for (i, table) in tables.iter().enumerate() {
            let (wall, cpu) = time_round(table, args.threads, args.ops, round as u64);
            walls[i].push(wall);
            cpus[i].push(cpu);
        }
    }
    println!(
        "{} buckets, {} entries per bucket, {} threads, {} ops per thread, {} rounds",
        args.buckets, args.fill, args.threads, args.ops, args.rounds
    );
    for (i, table) in tables.iter().enumerate() {
        let (wall, wall_low, wall_high) = median_and_spread(walls[i].clone());
        let (cpu, cpu_low, cpu_high) = median_and_spread(cpus[i].clone());
        println!(
            "{:>9} lock stripes: wall {wall:6.1} ns/op per thread [{wall_low:.1}–{wall_high:.1}], \
             thread CPU {cpu:6.1} ns/op [{cpu_low:.1}–{cpu_high:.1}]",
            table.lock_stripes()
        );
    }
}

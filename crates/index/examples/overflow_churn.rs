//! Overflow memory under W1-like churn (L Table 1), and lookup cost.
//!
//! Fills a table with `--live` entries of random hashes, then runs `--ops`
//! operations that each insert a fresh key and remove the oldest one (Redis-style
//! SET new key / DEL old key), reporting the overflow buckets in use, the arena's
//! high-water mark (every overflow bucket whose memory was ever touched) and the
//! table's resident bound as it goes. Before and after the churn it times lookups
//! of present keys: median over `--rounds` rounds of `--lookups` random lookups.
//!
//! ```text
//! cargo run --release -p ramstore-index --example overflow_churn -- \
//!     [--buckets 327680] [--live 1100000] [--ops 5000000] [--lookups 1000000] [--rounds 9]
//! ```
//!
//! A measurement tool, not a test: it asserts nothing about time.

use std::collections::VecDeque;
use std::time::Instant;

use ramstore_index::HashTable;

mod common;
use common::SplitMix;

struct Args {
    buckets: usize,
    live: u64,
    ops: u64,
    lookups: usize,
    rounds: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        buckets: 327_680,
        live: 1_100_000,
        ops: 5_000_000,
        lookups: 1_000_000,
        rounds: 9,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number: u64 = value
            .parse()
            .map_err(|_| format!("{flag}: not a number: {value}"))?;
        match flag.as_str() {
            "--buckets" => args.buckets = number as usize,
            "--live" => args.live = number,
            "--ops" => args.ops = number,
            "--lookups" => args.lookups = number as usize,
            "--rounds" => args.rounds = number as usize,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// Overflow buckets linked into chains now.
fn overflow_in_use(table: &HashTable) -> usize {
    table.overflow_buckets_in_use()
}

/// Overflow buckets ever touched.
fn overflow_high_water(table: &HashTable) -> usize {
    table.overflow_buckets_high_water()
}

fn report(table: &HashTable, ops: u64) {
    let high_water = overflow_high_water(table);
    let resident_mib = (table.bucket_count() * 64 + high_water * 64) as f64 / (1 << 20) as f64;
    println!(
        "ops {ops:>9}  live {:>8}  overflow in use {:>7}  high-water {:>7} ({:.2} MiB)  main + high-water {:.2} MiB",
        table.len(),
        overflow_in_use(table),
        high_water,
        (high_water * 64) as f64 / (1 << 20) as f64,
        resident_mib
    );
}

/// Median nanoseconds per lookup of present keys.
fn time_lookups(
    table: &HashTable,
    live: &VecDeque<(u64, u64)>,
    args: &Args,
    rng: &mut SplitMix,
) -> f64 {
    let picks: Vec<(u64, u64)> = (0..args.lookups)
        .map(|_| live[(rng.next() % live.len() as u64) as usize])
        .collect();
    let mut per_lookup: Vec<f64> = (0..args.rounds)
        .map(|_| {
            let start = Instant::now();
            let mut found = 0usize;
            for &(hash, reference) in &picks {
                found += usize::from(
                    table
                        .lookup(std::hint::black_box(hash), |r| r == reference)
                        .is_some(),
                );
            }
            let elapsed = start.elapsed();
            assert_eq!(found, picks.len(), "a present key was not found");
            elapsed.as_nanos() as f64 / picks.len() as f64
        })
        .collect();
    per_lookup.sort_by(f64::total_cmp);
    per_lookup[per_lookup.len() / 2]
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("overflow_churn: {e}");
            std::process::exit(2);
        }
    };
    let table = HashTable::new(args.buckets);
    let mut rng = SplitMix(0x1234_5678);
    let mut live = VecDeque::with_capacity(args.live as usize);
    let mut next_ref = 1u64;
    for _ in 0..args.live {
        let hash = rng.next();
        // The table is sized generously: an insert can only fail if it is not.
        table.lock(hash).insert(next_ref).expect("table full");
        live.push_back((hash, next_ref));
        next_ref += 1;
    }
    report(&table, 0);
    let mut pick_rng = SplitMix(42);
    let before = time_lookups(&table, &live, &args, &mut pick_rng);
    let step = (args.ops / 5).max(1);
    for op in 1..=args.ops {
        let (hash, reference) = live.pop_front().expect("live keys");
        let mut guard = table.lock(hash);
        let slot = guard.find_ref(reference).expect("live key missing");
        guard.remove(slot);
        drop(guard);
        let hash = rng.next();
        table.lock(hash).insert(next_ref).expect("table full");
        live.push_back((hash, next_ref));
        next_ref += 1;
        if op % step == 0 {
            report(&table, op);
        }
    }
    let after = time_lookups(&table, &live, &args, &mut pick_rng);
    println!(
        "lookup of a present key, median of {} rounds of {}: {before:.1} ns before churn, {after:.1} ns after",
        args.rounds, args.lookups
    );
}

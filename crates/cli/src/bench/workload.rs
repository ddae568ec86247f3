//! The workloads of `ramstore bench`: the operation mix of each (YCSB A, B, C, F;
//! read; write) and how keys are chosen, uniformly or from YCSB's scrambled
//! Zipfian distribution.

use rand::rngs::SmallRng;
use rand::Rng;
use serde::Serialize;

/// YCSB's default Zipfian constant.
pub(super) const ZIPFIAN_THETA: f64 = 0.99;
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
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn non_read_percent(self) -> u32 {
        match self {
            Workload::Read | Workload::YcsbC => 0,
            Workload::Write => 100,
            Workload::YcsbA | Workload::YcsbF => 50,
            Workload::YcsbB => 5,
        }
    }

    pub(super) fn zipfian(self) -> bool {
        !matches!(self, Workload::Read | Workload::Write)
    }

    pub(super) fn pick(self, rng: &mut SmallRng) -> Op {
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

/// The operations a client performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Read,
    Update,
    ReadModifyWrite,
}

pub(super) const OPS: [Op; 3] = [Op::Read, Op::Update, Op::ReadModifyWrite];

impl Op {
    pub(super) fn index(self) -> usize {
        self as usize
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Update => "update",
            Op::ReadModifyWrite => "read-modify-write",
        }
    }
}

/// Picks key indexes.
#[derive(Clone)]
pub(super) enum KeyChooser {
    Uniform(u64),
    Zipfian(Zipfian),
}

impl KeyChooser {
    pub(super) fn next(&self, rng: &mut SmallRng) -> u64 {
        match self {
            KeyChooser::Uniform(n) => rng.gen_range(0..*n),
            KeyChooser::Zipfian(z) => z.next_scrambled(rng),
        }
    }
}

/// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record
/// synthetic databases"), over ranks `0..n` with rank 0 the most popular.
#[derive(Clone, Debug)]
pub(super) struct Zipfian {
    pub(super) n: u64,
    pub(super) theta: f64,
    pub(super) alpha: f64,
    pub(super) zetan: f64,
    pub(super) eta: f64,
}

impl Zipfian {
    pub(super) fn new(n: u64, theta: f64) -> Self {
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

    pub(super) fn next_rank(&self, rng: &mut SmallRng) -> u64 {
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
    pub(super) fn next_scrambled(&self, rng: &mut SmallRng) -> u64 {
        fnv1a64(self.next_rank(rng)) % self.n
    }
}

/// YCSB's FNV-1a over the 8 bytes of `v`, least significant first.
pub(super) fn fnv1a64(mut v: u64) -> u64 {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        hash ^= v & 0xff;
        hash = hash.wrapping_mul(1_099_511_628_211);
        v >>= 8;
    }
    hash
}

/// Bytes of every key: `user` and 12 decimal digits (at least; more for huge `i`).
pub(super) const KEY_BYTES: usize = 16;

/// Writes the key of object `i` into `out` (cleared first). Keys are made on the
/// fly instead of kept in a big table, so picking one costs no cache miss in the
/// benchmark itself.
pub(super) fn write_key(out: &mut Vec<u8>, i: u64) {
    use std::io::Write as _;
    out.clear();
    let _ = write!(out, "user{i:012}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

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

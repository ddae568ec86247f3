//! The workloads of `ramstore bench`: the operation mix of each (YCSB A, B, C, F;
//! read; write) and how keys are chosen, uniformly or from YCSB's scrambled
//! Zipfian distribution.

pub(super) use ramstore_bench::zipfian::{Zipfian, ZIPFIAN_THETA};
use rand::rngs::SmallRng;
use rand::Rng;
use serde::Serialize;

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
    /// Transactions that write `--tx-objects` distinct uniform keys (blind
    /// writes, buffered by the client): each operation is one commit (issue 21).
    Tx,
    /// Bank transfers: a transaction reads two distinct uniform accounts and
    /// writes both (one decremented, one incremented), retried on abort; each
    /// operation is one committed transfer, its retries included.
    Bank,
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
            Workload::Tx => "tx",
            Workload::Bank => "bank",
        }
    }

    /// The percentage of operations that are not plain reads (updates, or
    /// read-modify-writes for F).
    pub(super) fn non_read_percent(self) -> u32 {
        match self {
            Workload::Read | Workload::YcsbC => 0,
            Workload::Write | Workload::Tx | Workload::Bank => 100,
            Workload::YcsbA | Workload::YcsbF => 50,
            Workload::YcsbB => 5,
        }
    }

    pub(super) fn zipfian(self) -> bool {
        !matches!(
            self,
            Workload::Read | Workload::Write | Workload::Tx | Workload::Bank
        )
    }

    /// Distinct keys each operation touches beyond the one picked for it: the
    /// transactions' objects.
    pub(super) fn objects(self, tx_objects: usize) -> usize {
        match self {
            Workload::Tx => tx_objects,
            Workload::Bank => 2,
            _ => 1,
        }
    }

    pub(super) fn pick(self, rng: &mut SmallRng) -> Op {
        if matches!(self, Workload::Tx | Workload::Bank) {
            return Op::Transaction;
        }
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
    /// A commit (`tx`) or a committed transfer (`bank`).
    Transaction,
}

pub(super) const OPS: [Op; 4] = [Op::Read, Op::Update, Op::ReadModifyWrite, Op::Transaction];

impl Op {
    pub(super) fn index(self) -> usize {
        self as usize
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Update => "update",
            Op::ReadModifyWrite => "read-modify-write",
            Op::Transaction => "transaction",
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
        assert_eq!(count(Workload::Tx, Op::Transaction, &mut rng), 10_000);
        assert_eq!(count(Workload::Bank, Op::Transaction, &mut rng), 10_000);
    }
}

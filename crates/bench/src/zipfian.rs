//! YCSB's scrambled Zipfian key chooser, shared by `ramstore bench` (the CLI's
//! client benchmark) and the migration scenario's YCSB-B client, so both draw
//! keys from one implementation.
//!
//! The generator is Gray et al.'s ("Quickly generating billion-record synthetic
//! databases", SIGMOD 1994) over ranks `0..n`, rank 0 the most popular; a rank
//! is scrambled over the key space with 64-bit FNV-1a, as YCSB's
//! `ScrambledZipfianGenerator` does, so the hot keys are spread over the hash
//! space (and so over tablets) rather than packed at its start.
//!
//! Invariants: every draw is in `0..n` (`n` is at least 1). Thread-safety: a
//! [`Zipfian`] is immutable after [`Zipfian::new`] (`Send + Sync`, cheap to
//! clone); each thread brings its own generator.

use rand::rngs::SmallRng;
use rand::Rng;

/// YCSB's default Zipfian constant.
pub const ZIPFIAN_THETA: f64 = 0.99;

/// The Zipfian distribution over ranks `0..n` with constant `theta`.
#[derive(Clone, Debug)]
pub struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    /// The distribution over `0..n` (an `n` of 0 counts as 1) with constant
    /// `theta` in (0, 1). Sums `n` terms once (about 1 s for a billion keys).
    pub fn new(n: u64, theta: f64) -> Self {
        let n = n.max(1);
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

    /// How many ranks (keys) there are.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// A rank in `0..n`, rank 0 the most popular.
    pub fn next_rank(&self, rng: &mut SmallRng) -> u64 {
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

    /// A rank scrambled over the key space, as YCSB's
    /// ScrambledZipfianGenerator: a key index in `0..n`.
    pub fn next_scrambled(&self, rng: &mut SmallRng) -> u64 {
        fnv1a64(self.next_rank(rng)) % self.n
    }
}

/// YCSB's FNV-1a over the 8 bytes of `v`, least significant first.
pub fn fnv1a64(mut v: u64) -> u64 {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        hash ^= v & 0xff;
        hash = hash.wrapping_mul(1_099_511_628_211);
        v >>= 8;
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn next_rank_stays_in_range_and_favours_rank_zero() {
        let z = Zipfian::new(1000, ZIPFIAN_THETA);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.next_rank(&mut rng) as usize] += 1;
        }
        // With θ = 0.99 over 1000 items rank 0 draws about 13% of the picks.
        assert!(counts[0] > 10_000 && counts[0] < 16_000, "{}", counts[0]);
        assert!(counts[0] > counts[1] && counts[1] > counts[10]);
    }

    #[test]
    fn next_scrambled_stays_in_range_and_moves_the_hottest_key() {
        let z = Zipfian::new(1000, ZIPFIAN_THETA);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.next_scrambled(&mut rng) as usize] += 1;
        }
        let hottest = (0..1000).max_by_key(|&i| counts[i]).unwrap_or(0);
        assert_eq!(hottest as u64, fnv1a64(0) % 1000, "rank 0, scrambled");
        assert!(counts[hottest] > 10_000 && counts[hottest] < 16_000);
    }

    #[test]
    fn new_of_zero_or_one_key_always_draws_zero() {
        let mut rng = SmallRng::seed_from_u64(1);
        for n in [0, 1] {
            let z = Zipfian::new(n, ZIPFIAN_THETA);
            assert_eq!(z.n(), 1);
            assert!((0..100).all(|_| z.next_scrambled(&mut rng) == 0));
        }
    }

    #[test]
    fn fnv1a64_matches_ycsb() {
        // FNV-1a of eight zero bytes.
        assert_eq!(fnv1a64(0), 0xA8C7_F832_281A_39C5);
    }
}

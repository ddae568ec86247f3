//! The [`Rng`] seam: where components get their random bits.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// A source of random bits, shared between threads (`Arc<dyn Rng>`). Components
/// draw every random choice (nonces, seeds, shuffles, jitter) from the one they
/// were given.
pub trait Rng: Send + Sync + fmt::Debug + 'static {
    /// 64 random bits.
    fn next_u64(&self) -> u64;
}

impl dyn Rng {
    /// This source as a `rand::RngCore`, for rand's algorithms (`shuffle`,
    /// `gen_range`, `index::sample`).
    pub fn as_rand(&self) -> RandSource<'_> {
        RandSource(self)
    }

    /// A `StdRng` seeded from this source: for a component that keeps a generator
    /// of its own (one task's pings), deterministic when this source is.
    pub fn seed_std(&self) -> StdRng {
        let mut seed = <StdRng as SeedableRng>::Seed::default();
        self.as_rand().fill_bytes(&mut seed);
        StdRng::from_seed(seed)
    }
}

/// A borrowed [`Rng`] as a `rand::RngCore` ([`as_rand`](trait.Rng.html#method.as_rand)).
#[derive(Debug, Clone, Copy)]
pub struct RandSource<'a>(&'a dyn Rng);

impl RngCore for RandSource<'_> {
    fn next_u32(&mut self) -> u32 {
        // The high half: the better-mixed bits of generators like SplitMix64.
        (self.0.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bits = self.0.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bits[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// rand's thread-local generator (ChaCha, seeded from the OS): what `rand::random`
/// and `rand::thread_rng` gave before the seam.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemRng;

/// A shared [`SystemRng`]: the production default wherever a component takes an
/// `Rng`.
pub fn system_rng() -> Arc<dyn Rng> {
    Arc::new(SystemRng)
}

impl Rng for SystemRng {
    fn next_u64(&self) -> u64 {
        rand::thread_rng().next_u64()
    }
}

/// SplitMix64 from a seed: the same seed gives the same draws in the same order
/// (across threads, in the order the draws happen). Lock-free: one atomic add
/// per draw.
#[derive(Debug)]
pub struct SeededRng {
    state: AtomicU64,
}

/// SplitMix64's increment (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }

    /// A shared generator from `seed`.
    pub fn handle(seed: u64) -> Arc<dyn Rng> {
        Arc::new(Self::new(seed))
    }
}

impl Rng for SeededRng {
    fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use rand::seq::SliceRandom;
    use rand::Rng as _;

    use super::*;

    #[test]
    fn seeded_rng_gives_the_same_draws_for_the_same_seed() {
        let a = SeededRng::handle(42);
        let b = SeededRng::handle(42);
        let c = SeededRng::handle(43);
        let draws = |r: &Arc<dyn Rng>| (0..8).map(|_| r.next_u64()).collect::<Vec<_>>();
        let first = draws(&a);
        assert_eq!(first, draws(&b));
        assert_ne!(first, draws(&c));
    }

    #[test]
    fn seeded_rng_matches_the_splitmix64_reference() {
        // The first output of SplitMix64 seeded with 0 (Vigna's reference code).
        assert_eq!(SeededRng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn as_rand_drives_rand_algorithms_deterministically() {
        let shuffled = |seed| {
            let rng = SeededRng::handle(seed);
            let mut v: Vec<u32> = (0..20).collect();
            v.shuffle(&mut rng.as_rand());
            let pick = rng.as_rand().gen_range(10..=20);
            (v, pick)
        };
        let (v, pick) = shuffled(7);
        assert_eq!((v.clone(), pick), shuffled(7));
        assert!((10..=20).contains(&pick));
        let mut sorted = v;
        sorted.sort();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn fill_bytes_fills_a_tail_shorter_than_a_draw() {
        let rng = SeededRng::handle(1);
        let mut buf = [0u8; 11];
        rng.as_rand().fill_bytes(&mut buf);
        assert!(buf[8..].iter().any(|&b| b != 0));
        let seeded = SeededRng::handle(5).seed_std().next_u64();
        assert_eq!(seeded, SeededRng::handle(5).seed_std().next_u64());
    }
}

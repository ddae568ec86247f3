//! Which object the `cleaner` scenario's writer overwrites next: uniform, or 90%
//! of writes to a hot 15% of the objects (L§8.1), and the key of an object id.

use rand::rngs::SmallRng;
use rand::Rng;

use super::args::Dist;

/// Hot set of the skewed ("zipfian") distribution: 15% of the objects (3 of every 20
/// ids, spread over the whole key space) get 90% of the writes (L§8.1).
pub(super) const HOT_PER_20: u64 = 3;
pub(super) const HOT_WRITE_SHARE: f64 = 0.9;

/// Picks object ids to overwrite.
pub(super) struct Picker {
    pub(super) n: u64,
    pub(super) dist: Dist,
    pub(super) hot: u64,
    pub(super) cold: u64,
}

impl Picker {
    pub(super) fn new(n: u64, dist: Dist) -> Self {
        let hot = HOT_PER_20 * (n / 20) + (n % 20).min(HOT_PER_20);
        Self {
            n,
            dist,
            hot,
            cold: n - hot,
        }
    }

    pub(super) fn pick(&self, rng: &mut SmallRng) -> u64 {
        match self.dist {
            Dist::Uniform => rng.gen_range(0..self.n),
            Dist::Zipfian => {
                // Ids with id % 20 < 3 are hot: k-th hot id = 20·(k/3) + k%3, k-th
                // cold id = 20·(k/17) + 3 + k%17.
                let cold_per_20 = 20 - HOT_PER_20;
                if self.cold == 0 || (self.hot > 0 && rng.gen_bool(HOT_WRITE_SHARE)) {
                    let k = rng.gen_range(0..self.hot);
                    20 * (k / HOT_PER_20) + k % HOT_PER_20
                } else {
                    let k = rng.gen_range(0..self.cold);
                    20 * (k / cold_per_20) + HOT_PER_20 + k % cold_per_20
                }
            }
        }
    }
}

/// Key of object `id`: its 8 bytes, padded to 8–16 bytes (length fixed per id).
pub(super) fn key_of(id: u64, buf: &mut [u8; 16]) -> &[u8] {
    buf[..8].copy_from_slice(&id.to_le_bytes());
    buf[8..].fill(b'.');
    // A cheap mix of the id picks the length, so a key's length never changes.
    let len = 8 + (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60) as usize % 9;
    &buf[..len]
}

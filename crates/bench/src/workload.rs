//! The changing workloads of L Table 1 (W1–W8), as a deterministic stream of
//! writes and deletes that any store can replay.
//!
//! Each workload has up to three phases (L§2):
//! 1. allocate objects of the "before" size distribution until `alloc_bytes` of them
//!    were allocated, deleting random live objects whenever the next allocation would
//!    push live data above `live_target`;
//! 2. delete the given fraction of the live objects at random;
//! 3. like phase 1, with the "after" distribution.
//!
//! W1 has no change ("N/A"), so it is phase 1 only.
//!
//! Sizes count key + value bytes, the data an application stores. Keys are 8–30
//! bytes: the object's counter (8 bytes, little-endian, which makes keys unique)
//! padded to a random length. Values are fixed bytes: no store here looks at them.
//!
//! The same seed gives the same operations, so the ramstore child and the malloc
//! baseline child replay exactly the same sequence.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Shortest and longest key.
pub const MIN_KEY: usize = 8;
pub const MAX_KEY: usize = 30;
/// Largest value of any workload (W8 after: 15,000 bytes).
pub const MAX_VALUE: usize = 15_000;

/// An object size distribution of L Table 1 (value bytes; the key comes on top).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeDist {
    Fixed(u32),
    /// Uniform over `[lo, hi]`.
    Uniform(u32, u32),
}

impl SizeDist {
    fn sample(self, rng: &mut SmallRng) -> u32 {
        match self {
            SizeDist::Fixed(n) => n,
            SizeDist::Uniform(lo, hi) => rng.gen_range(lo..=hi),
        }
    }

    pub fn describe(self) -> String {
        match self {
            SizeDist::Fixed(n) => format!("fixed {n}"),
            SizeDist::Uniform(lo, hi) => format!("uniform {lo}-{hi}"),
        }
    }
}

/// One row of L Table 1.
#[derive(Debug, Clone, Copy)]
pub struct WorkloadSpec {
    pub name: &'static str,
    pub before: SizeDist,
    /// Fraction of live objects deleted between the phases.
    pub delete_fraction: f64,
    /// `None`: a single phase (W1).
    pub after: Option<SizeDist>,
}

/// L Table 1.
pub const WORKLOADS: [WorkloadSpec; 8] = [
    WorkloadSpec {
        name: "W1",
        before: SizeDist::Fixed(100),
        delete_fraction: 0.0,
        after: None,
    },
    WorkloadSpec {
        name: "W2",
        before: SizeDist::Fixed(100),
        delete_fraction: 0.0,
        after: Some(SizeDist::Fixed(130)),
    },
    WorkloadSpec {
        name: "W3",
        before: SizeDist::Fixed(100),
        delete_fraction: 0.9,
        after: Some(SizeDist::Fixed(130)),
    },
    WorkloadSpec {
        name: "W4",
        before: SizeDist::Uniform(100, 150),
        delete_fraction: 0.0,
        after: Some(SizeDist::Uniform(200, 250)),
    },
    WorkloadSpec {
        name: "W5",
        before: SizeDist::Uniform(100, 150),
        delete_fraction: 0.9,
        after: Some(SizeDist::Uniform(200, 250)),
    },
    WorkloadSpec {
        name: "W6",
        before: SizeDist::Uniform(100, 200),
        delete_fraction: 0.5,
        after: Some(SizeDist::Uniform(1_000, 2_000)),
    },
    WorkloadSpec {
        name: "W7",
        before: SizeDist::Uniform(1_000, 2_000),
        delete_fraction: 0.9,
        after: Some(SizeDist::Uniform(1_500, 2_500)),
    },
    WorkloadSpec {
        name: "W8",
        before: SizeDist::Uniform(50, 150),
        delete_fraction: 0.9,
        after: Some(SizeDist::Uniform(5_000, 15_000)),
    },
];

pub fn find(name: &str) -> Option<&'static WorkloadSpec> {
    WORKLOADS.iter().find(|w| w.name.eq_ignore_ascii_case(name))
}

/// A live object as the generator tracks it: 12 bytes, so the bookkeeping of a
/// 1 GiB run stays small next to the data it describes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveObj {
    /// Object counter; the key's first 8 bytes.
    pub id: u32,
    /// The version the store gives the object (replayed from the store's rule: a new
    /// object gets the master's safe version, which deletes raise, R§3.1).
    pub version: u32,
    pub value_len: u16,
    pub key_len: u8,
    /// Free for the executor (the sizing pass keeps the entry overhead here).
    pub aux: u8,
}

impl LiveObj {
    pub fn kv_bytes(&self) -> u64 {
        self.key_len as u64 + self.value_len as u64
    }
}

/// Writes the key of object `id` with `len` bytes into `buf` and returns it.
pub fn key_of(id: u32, len: usize, buf: &mut [u8; MAX_KEY]) -> &[u8] {
    buf[..8].copy_from_slice(&u64::from(id).to_le_bytes());
    buf[8..].fill(b'.');
    &buf[..len]
}

/// Value bytes shared by every object (the first `len` bytes are the value).
pub fn value_source() -> Vec<u8> {
    (0..MAX_VALUE).map(|i| (i * 131 % 251) as u8).collect()
}

/// Receives the operations of a workload.
pub trait Executor {
    /// Error that ends the run early.
    type Error;
    /// Creates `obj` (which may update `obj.aux`).
    fn write(&mut self, obj: &mut LiveObj, key: &[u8], value: &[u8]) -> Result<(), Self::Error>;
    /// Deletes `obj`.
    fn delete(&mut self, obj: &LiveObj, key: &[u8]) -> Result<(), Self::Error>;
    /// Phase `n` (1–3) begins.
    fn phase(&mut self, _n: u8) {}
}

/// How big a run is.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    /// Most live key + value bytes at any time.
    pub live_target: u64,
    /// Key + value bytes allocated in each allocation phase.
    pub alloc_bytes: u64,
    pub seed: u64,
    /// Every key this long instead of 8–30 bytes at random (`resp-replay`).
    pub key_bytes: Option<usize>,
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub writes: u64,
    pub deletes: u64,
    pub live_objects: u64,
    pub live_kv_bytes: u64,
}

/// The generator's state; `live` is supplied by the caller so it can be allocated
/// (and its pages touched) before memory measurements start.
pub struct Generator<'a> {
    rng: SmallRng,
    live: &'a mut Vec<LiveObj>,
    live_kv: u64,
    next_id: u32,
    safe_version: u32,
    counts: Counts,
    key_buf: [u8; MAX_KEY],
    values: Vec<u8>,
}

impl<'a> Generator<'a> {
    pub fn new(spec: &WorkloadSpec, seed: u64, live: &'a mut Vec<LiveObj>) -> Self {
        live.clear();
        // One stream per workload, so workloads are independent of the order they run in.
        let name_salt = spec
            .name
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
        Self {
            rng: SmallRng::seed_from_u64(seed ^ name_salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            live,
            live_kv: 0,
            next_id: 0,
            safe_version: 1,
            counts: Counts::default(),
            key_buf: [0; MAX_KEY],
            values: value_source(),
        }
    }

    /// Replays the whole workload into `exec`.
    pub fn run<E: Executor>(
        mut self,
        spec: &WorkloadSpec,
        scale: Scale,
        exec: &mut E,
    ) -> Result<Counts, E::Error> {
        exec.phase(1);
        self.allocate(spec.before, scale, exec)?;
        if let Some(after) = spec.after {
            exec.phase(2);
            let n = (self.live.len() as f64 * spec.delete_fraction).round() as usize;
            for _ in 0..n {
                self.delete_random(exec)?;
            }
            exec.phase(3);
            self.allocate(after, scale, exec)?;
        }
        self.counts.live_objects = self.live.len() as u64;
        self.counts.live_kv_bytes = self.live_kv;
        Ok(self.counts)
    }

    fn allocate<E: Executor>(
        &mut self,
        dist: SizeDist,
        scale: Scale,
        exec: &mut E,
    ) -> Result<(), E::Error> {
        let mut allocated = 0u64;
        while allocated < scale.alloc_bytes {
            let value_len = dist.sample(&mut self.rng) as usize;
            let key_len = match scale.key_bytes {
                Some(n) => n.clamp(MIN_KEY, MAX_KEY),
                None => self.rng.gen_range(MIN_KEY..=MAX_KEY),
            };
            let size = (key_len + value_len) as u64;
            while self.live_kv + size > scale.live_target && !self.live.is_empty() {
                self.delete_random(exec)?;
            }
            let mut obj = LiveObj {
                id: self.next_id,
                version: self.safe_version,
                // Values are at most MAX_VALUE (15,000) and keys at most 30 bytes.
                value_len: value_len as u16,
                key_len: key_len as u8,
                aux: 0,
            };
            // Ids stay far below 2^32: a run allocates at most 2 × alloc_bytes in
            // objects of at least 58 bytes.
            self.next_id += 1;
            let key = key_of(obj.id, key_len, &mut self.key_buf);
            exec.write(&mut obj, key, &self.values[..value_len])?;
            self.live.push(obj);
            self.live_kv += size;
            allocated += size;
            self.counts.writes += 1;
        }
        Ok(())
    }

    fn delete_random<E: Executor>(&mut self, exec: &mut E) -> Result<(), E::Error> {
        let i = self.rng.gen_range(0..self.live.len());
        let obj = self.live.swap_remove(i);
        let key = key_of(obj.id, obj.key_len as usize, &mut self.key_buf);
        exec.delete(&obj, key)?;
        // The store raises its safe version above every deleted version (R§3.1).
        self.safe_version = self.safe_version.max(obj.version + 1);
        self.live_kv -= obj.kv_bytes();
        self.counts.deletes += 1;
        Ok(())
    }
}

//! Model-based test: random sequences of operations, restarts and power failures
//! against a `BackupStore` on a `MemDisk` and against a plain map of what each
//! replica should hold. Every result, every listing, and what survives each restart
//! must agree.

use std::collections::BTreeMap;

use proptest::prelude::*;
use ramstore_backup::{BackupConfig, BackupError, BackupStore, MemDisk, ReplicaInfo, SyncMode};

const SEG: u32 = 4096;
const FRAMES: u32 = 4;
const BUFFERS: u32 = 3;
/// Replica ids 0..IDS map to (master id / 3, id % 3).
const IDS: u8 = 6;

fn config(mode: SyncMode) -> BackupConfig {
    BackupConfig {
        frame_count: FRAMES,
        segment_bytes: SEG,
        max_open_buffers: BUFFERS,
        sync_mode: mode,
    }
}

fn key(id: u8) -> (u64, u64) {
    (u64::from(id / 3), u64::from(id % 3))
}

/// Which replica an operation names.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// The n-th (modulo) replica the model holds, or id n if it holds none: most
    /// operations should reach a live replica.
    Held(u8),
    /// Replica id n, held or not.
    Id(u8),
}

#[derive(Clone, Debug)]
enum Offset {
    /// At the replica's end (an append).
    End,
    /// This many bytes before the end (an overlap).
    Back(u16),
    /// This many bytes past the end, plus one (a gap).
    Gap(u16),
    /// Anywhere.
    Abs(u16),
}

#[derive(Clone, Debug)]
enum Op {
    Open {
        id: u8,
        atomic: bool,
    },
    Write {
        id: Target,
        offset: Offset,
        len: u16,
        fill: u8,
        retransmit: bool,
    },
    Close {
        id: Target,
    },
    Free {
        id: Target,
    },
    Read {
        id: Target,
    },
    Flush,
    Restart,
    PowerLoss {
        seed: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0..IDS;
    let target = prop_oneof![
        4 => (0..IDS).prop_map(Target::Held),
        1 => (0..IDS).prop_map(Target::Id),
    ];
    let offset = prop_oneof![
        4 => Just(Offset::End),
        2 => (0u16..600).prop_map(Offset::Back),
        1 => (0u16..100).prop_map(Offset::Gap),
        1 => (0u16..5000).prop_map(Offset::Abs),
    ];
    prop_oneof![
        4 => (id, any::<bool>()).prop_map(|(id, atomic)| Op::Open { id, atomic }),
        8 => (target.clone(), offset, 0u16..1200, any::<u8>(), any::<bool>()).prop_map(
            |(id, offset, len, fill, retransmit)| Op::Write { id, offset, len, fill, retransmit }
        ),
        2 => target.clone().prop_map(|id| Op::Close { id }),
        1 => target.clone().prop_map(|id| Op::Free { id }),
        2 => target.prop_map(|id| Op::Read { id }),
        1 => Just(Op::Flush),
        1 => Just(Op::Restart),
        1 => any::<u64>().prop_map(|seed| Op::PowerLoss { seed }),
    ]
}

/// The observable outcome of an operation.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Bytes(Vec<u8>),
    BuffersFull,
    FramesFull,
    Unknown,
    Closed,
    AtomicMismatch,
    Gap,
    PastFrameEnd,
    NotClosed,
}

fn outcome(r: Result<(), BackupError>) -> Outcome {
    match r {
        Ok(()) => Outcome::Ok,
        Err(e) => error_outcome(e),
    }
}

fn error_outcome(e: BackupError) -> Outcome {
    match e {
        BackupError::BuffersFull { .. } => Outcome::BuffersFull,
        BackupError::FramesFull { .. } => Outcome::FramesFull,
        BackupError::UnknownReplica { .. } => Outcome::Unknown,
        BackupError::Closed { .. } => Outcome::Closed,
        BackupError::AtomicMismatch { .. } => Outcome::AtomicMismatch,
        BackupError::Gap { .. } => Outcome::Gap,
        BackupError::PastFrameEnd { .. } => Outcome::PastFrameEnd,
        BackupError::NotClosed { .. } => Outcome::NotClosed,
        other => panic!("unexpected error from a healthy disk: {other}"),
    }
}

#[derive(Clone, Debug)]
struct ModelReplica {
    bytes: Vec<u8>,
    closed: bool,
    atomic: bool,
    /// For an open replica: the bytes a restart brings back, if any. A restart is
    /// a process crash, which keeps what was written to the file, synced or not:
    /// every acknowledged open and write of a non-atomic replica, in both modes.
    /// (Power failures run a flush first in buffered mode, so the same holds.)
    on_disk: Option<Vec<u8>>,
}

struct Model {
    replicas: BTreeMap<(u64, u64), ModelReplica>,
}

impl Model {
    fn resolve(&self, t: Target) -> (u64, u64) {
        match t {
            Target::Held(n) if !self.replicas.is_empty() => {
                let i = usize::from(n) % self.replicas.len();
                // `i` is below the number of replicas.
                *self.replicas.keys().nth(i).unwrap()
            }
            Target::Held(n) | Target::Id(n) => key(n),
        }
    }

    fn len(&self, k: (u64, u64)) -> usize {
        self.replicas.get(&k).map_or(0, |r| r.bytes.len())
    }

    fn open(&mut self, k: (u64, u64), atomic: bool) -> Outcome {
        if let Some(r) = self.replicas.get(&k) {
            return if r.closed {
                Outcome::Closed
            } else if r.atomic != atomic {
                Outcome::AtomicMismatch
            } else {
                Outcome::Ok
            };
        }
        let open = self.replicas.values().filter(|r| !r.closed).count();
        if open >= BUFFERS as usize {
            return Outcome::BuffersFull;
        }
        if self.replicas.len() >= FRAMES as usize {
            return Outcome::FramesFull;
        }
        let on_disk = (!atomic).then(Vec::new);
        self.replicas.insert(
            k,
            ModelReplica {
                bytes: Vec::new(),
                closed: false,
                atomic,
                on_disk,
            },
        );
        Outcome::Ok
    }

    fn write(&mut self, k: (u64, u64), offset: usize, data: &[u8]) -> Outcome {
        if offset + data.len() > SEG as usize {
            return Outcome::PastFrameEnd;
        }
        let Some(r) = self.replicas.get_mut(&k) else {
            return Outcome::Unknown;
        };
        if r.closed {
            return Outcome::Closed;
        }
        if offset > r.bytes.len() {
            return Outcome::Gap;
        }
        let end = offset + data.len();
        if end > r.bytes.len() {
            r.bytes.resize(end, 0);
        }
        r.bytes[offset..end].copy_from_slice(data);
        if !r.atomic {
            r.on_disk = Some(r.bytes.clone());
        }
        Outcome::Ok
    }

    fn close(&mut self, k: (u64, u64)) -> Outcome {
        match self.replicas.get_mut(&k) {
            None => Outcome::Unknown,
            Some(r) => {
                r.closed = true;
                Outcome::Ok
            }
        }
    }

    fn free(&mut self, k: (u64, u64)) -> Outcome {
        match self.replicas.remove(&k) {
            None => Outcome::Unknown,
            Some(_) => Outcome::Ok,
        }
    }

    fn read(&self, k: (u64, u64)) -> Outcome {
        match self.replicas.get(&k) {
            None => Outcome::Unknown,
            Some(r) if r.atomic && !r.closed => Outcome::NotClosed,
            Some(r) => Outcome::Bytes(r.bytes.clone()),
        }
    }

    fn flush(&mut self) {
        for r in self.replicas.values_mut() {
            if !r.closed && !r.atomic {
                r.on_disk = Some(r.bytes.clone());
            }
        }
    }

    fn restart(&mut self) {
        self.replicas.retain(|_, r| r.closed || r.on_disk.is_some());
        for r in self.replicas.values_mut() {
            if let Some(bytes) = &r.on_disk {
                if !r.closed {
                    r.bytes = bytes.clone();
                }
            }
        }
    }

    fn list(&self) -> Vec<ReplicaInfo> {
        self.replicas
            .iter()
            .map(|(&(master_id, segment_id), r)| ReplicaInfo {
                master_id,
                segment_id,
                length: r.bytes.len() as u32,
                closed: r.closed,
                atomic: r.atomic,
            })
            .collect()
    }
}

/// A small deterministic generator for tearing writes at a power failure.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn reopen(store: BackupStore<MemDisk>, mode: SyncMode) -> BackupStore<MemDisk> {
    let (store, summary) = BackupStore::open_existing(store.into_disk(), config(mode)).unwrap();
    assert!(summary.corrupt.is_empty(), "{summary:?}");
    store
}

fn run(mode: SyncMode, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut store = BackupStore::create(MemDisk::new(), config(mode)).unwrap();
    let mut model = Model {
        replicas: BTreeMap::new(),
    };
    for (step, op) in ops.iter().enumerate() {
        let (got, want) = match op {
            Op::Open { id, atomic } => {
                let (m, s) = key(*id);
                (
                    outcome(store.open(m, s, *atomic)),
                    model.open((m, s), *atomic),
                )
            }
            Op::Write {
                id,
                offset,
                len,
                fill,
                retransmit,
            } => {
                let k = model.resolve(*id);
                let cur = model.len(k);
                let offset = match offset {
                    Offset::End => cur,
                    Offset::Back(b) => cur.saturating_sub(usize::from(*b)),
                    Offset::Gap(g) => cur + 1 + usize::from(*g),
                    Offset::Abs(a) => usize::from(*a),
                };
                let mut data: Vec<u8> = (0..usize::from(*len))
                    .map(|i| fill.wrapping_add((i % 251) as u8))
                    .collect();
                if *retransmit {
                    // Repeat the bytes already there, as a retried RPC would.
                    if let Some(r) = model.replicas.get(&k) {
                        for (i, b) in data.iter_mut().enumerate() {
                            if let Some(&old) = r.bytes.get(offset + i) {
                                *b = old;
                            }
                        }
                    }
                }
                let got = outcome(store.write(k.0, k.1, offset as u32, &data));
                (got, model.write(k, offset, &data))
            }
            Op::Close { id } => {
                let (m, s) = model.resolve(*id);
                (outcome(store.close(m, s)), model.close((m, s)))
            }
            Op::Free { id } => {
                let (m, s) = model.resolve(*id);
                (outcome(store.free(m, s)), model.free((m, s)))
            }
            Op::Read { id } => {
                let (m, s) = model.resolve(*id);
                let got = match store.read_replica(m, s) {
                    Ok(bytes) => Outcome::Bytes(bytes),
                    Err(e) => error_outcome(e),
                };
                (got, model.read((m, s)))
            }
            Op::Flush => {
                store.flush().unwrap();
                model.flush();
                (Outcome::Ok, Outcome::Ok)
            }
            Op::Restart => {
                store = reopen(store, mode);
                model.restart();
                (Outcome::Ok, Outcome::Ok)
            }
            Op::PowerLoss { seed } => {
                if mode == SyncMode::Buffered {
                    // The buffered-mode assumption: power failures leave time to flush.
                    store.flush().unwrap();
                    model.flush();
                }
                let mut rng = XorShift(seed | 1);
                store.disk().power_loss(|_, len| match rng.next() % 3 {
                    0 => 0,
                    1 => len,
                    _ => (rng.next() % (len as u64 + 1)) as usize,
                });
                store = reopen(store, mode);
                model.restart();
                (Outcome::Ok, Outcome::Ok)
            }
        };
        prop_assert_eq!(got, want, "step {}: {:?}", step, op);
        prop_assert_eq!(store.list(), model.list(), "after step {}: {:?}", step, op);
        let stats = store.stats();
        let open = model.replicas.values().filter(|r| !r.closed).count() as u32;
        prop_assert_eq!(stats.replicas, model.replicas.len() as u32);
        prop_assert_eq!(stats.frames_free, FRAMES - model.replicas.len() as u32);
        prop_assert_eq!(stats.open_buffers_in_use, open);
    }
    // Whatever the sequence, a final restart gives back exactly what it should.
    store.flush().unwrap();
    model.flush();
    let store = reopen(store, mode);
    model.restart();
    prop_assert_eq!(store.list(), model.list());
    for (&(m, s), r) in &model.replicas {
        if r.closed || !r.atomic {
            prop_assert_eq!(store.read_replica(m, s).unwrap(), r.bytes.clone());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn model_buffered(ops in proptest::collection::vec(op(), 1..60)) {
        run(SyncMode::Buffered, &ops)?;
    }

    #[test]
    fn model_fsync(ops in proptest::collection::vec(op(), 1..60)) {
        run(SyncMode::Fsync, &ops)?;
    }
}

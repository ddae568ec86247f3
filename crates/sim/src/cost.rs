//! The simulator's cost model (issue 22): simulated time for what a server's
//! NIC, disk and CPU cores would spend on each message, so recovery takes time
//! that depends on how much data each server handles — the quantity R§7.12
//! (Fig. 16) shows stays flat as the cluster grows.
//!
//! Where it charges (all in the simulated network, [`crate::net`]: the server
//! code runs unchanged, its effects already pass through the Transport seam):
//! - **NIC**: every bulk message (a BackupWrite, a bucket of recovery data)
//!   queues on its sender's transmit link and on its receiver's receive link,
//!   each `bytes / nic_bytes_per_sec`, first come first served (a link busy
//!   until t starts the next message at t). Control messages (everything
//!   else) take their own transmission time, unscaled, and wait behind no
//!   backlog ([`Charge::Control`]). The drawn propagation delay of
//!   [`crate::net`] comes between the two.
//! - **Replication** (BackupWrite): the sender's CPU copies and checksums the
//!   bytes (`replicate_ps_per_byte` on one of its cores) before they leave; the
//!   backup's disk writes them (`disk_write_bytes_per_sec`) on a write-behind
//!   queue of its own: the acknowledgement does not wait (backups buffer in
//!   memory and write behind, R§4.2), and the model does not let those writes
//!   slow the disk's reads (R§7.12's recovery is bound by reads; contention
//!   between the two is not modelled).
//! - **Recovery at a backup** (BackupGetRecoveryData): before it answers, the
//!   backup reads the bucket's bytes from its disk and its CPU parses and
//!   buckets them (`bucket_ps_per_byte`). Charging the answer's bytes rather
//!   than whole replicas sums to the same total: every byte of a replica lands
//!   in exactly one partition's bucket (R§7.5).
//! - **Replay** at the recovery master: when a bucket arrives, its master
//!   replays it (`replay_ps_per_byte`) on a lane of its own, one bucket at a
//!   time, as `recovery_master::replay_partition` does (fetches overlap it).
//!
//! Cores are a pool per host (`cores`): a charge takes the core that frees up
//! first. Everything else (request handling, client operations) costs no
//! simulated CPU — the model covers recovery's bulk work, not the fast path.
//!
//! `bytes_scale` lets a small simulated byte stand for many real ones: every
//! per-byte charge of bulk data is multiplied by it, so a 1,000-server cluster whose
//! servers hold 256 KiB each takes the time servers holding 256 KiB ×
//! `bytes_scale` would (memory stays that of 256 KiB; fixed costs such as RPC
//! latencies and the coordinator's polling are not scaled).
//!
//! Off by default: a run without `--cost-model` draws nothing more and sleeps
//! nothing more, so every seed keeps the trace it had.
//!
//! Determinism: reservations are made in the order the single simulation
//! thread reaches them and hosts are kept in a `BTreeMap`, so a seed gives the
//! same schedule every time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Rates and sizes of the model (see the module doc); the defaults are this
/// machine's measured rates (docs/benchmarks.md, "session 35 — scale22").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostModel {
    /// Bytes per second each way per host. 10 Gb/s: the node links of R§7.12
    /// (this machine has only loopback, nothing to measure).
    pub nic_bytes_per_sec: u64,
    /// 210 MB/s: `dd if=F of=/dev/null bs=1M iflag=direct` of 256 MiB on this
    /// machine's disk, median of 3 (201–381 MB/s), loaded (session 35).
    pub disk_read_bytes_per_sec: u64,
    /// 167 MB/s: `dd if=/dev/zero of=F bs=1M count=256 oflag=direct`, median of
    /// 3 (147–172 MB/s), loaded (session 35).
    pub disk_write_bytes_per_sec: u64,
    /// CPU cores per server: 8, as issue 22 suggests (R's nodes had 4).
    pub cores: usize,
    /// Replay, picoseconds per byte: 1,221 ps (819 MB/s per core), the
    /// recovery master's per-core replay of 1 KiB objects with prefaulted
    /// memory (`scripts/bench-recovery --skip-cluster`, session 4; benchmarks
    /// "Issue 5 — crash recovery", replay table).
    pub replay_ps_per_byte: u64,
    /// Bucketing at a backup, picoseconds per byte: 676 ps (1,480 MB/s),
    /// the in-process replay loop's rate for 1 KiB objects (`ramstore-bench
    /// replay`, same section). Bucketing was never measured alone; it parses
    /// and hashes each entry as replay does but inserts into no hash table, so
    /// this is an upper bound on its cost.
    pub bucket_ps_per_byte: u64,
    /// Replication at the sender, picoseconds per byte: 250 ps (4 GB/s), an
    /// estimate of one copy into the frame plus a CRC32C — not measured yet.
    pub replicate_ps_per_byte: u64,
    /// Real bytes each simulated byte stands for (1: none).
    pub bytes_scale: u64,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            nic_bytes_per_sec: 1_250_000_000,
            disk_read_bytes_per_sec: 210_000_000,
            disk_write_bytes_per_sec: 167_000_000,
            cores: 8,
            replay_ps_per_byte: 1_221,
            bucket_ps_per_byte: 676,
            replicate_ps_per_byte: 250,
            bytes_scale: 1,
        }
    }
}

impl CostModel {
    /// Time to move `bytes` (simulated) at `per_sec` real bytes a second.
    fn at_rate(&self, bytes: usize, per_sec: u64) -> Duration {
        let real = (bytes as u128) * u128::from(self.bytes_scale.max(1));
        let ns = real * 1_000_000_000 / u128::from(per_sec.max(1));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// CPU time for `bytes` (simulated) at `ps` picoseconds a real byte.
    fn per_byte(&self, bytes: usize, ps: u64) -> Duration {
        let real = (bytes as u128) * u128::from(self.bytes_scale.max(1));
        let ns = real * u128::from(ps) / 1000;
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// What a charge occupies on a host.
#[derive(Debug, Clone, Copy)]
pub enum Charge {
    /// Sending `n` bytes.
    Send(usize),
    /// Receiving `n` bytes.
    Receive(usize),
    /// Reading `n` bytes from the disk.
    DiskRead(usize),
    /// Writing `n` bytes to the disk.
    DiskWrite(usize),
    /// Bucketing `n` bytes of a replica (CPU).
    Bucket(usize),
    /// Copying and checksumming `n` bytes for a replica (CPU).
    Replicate(usize),
    /// Replaying `n` bytes of a bucket (the replay lane).
    Replay(usize),
    /// Sending or receiving a control message of `n` bytes (pings, requests,
    /// acknowledgements): its own transmission time, unscaled, without
    /// waiting behind bulk transfers — TCP shares a link between connections
    /// rather than queueing one behind another's backlog. (Regression: with
    /// one FIFO queue and scaled bytes, at 200 servers pings waited seconds
    /// behind recovery traffic and the coordinator declared every server
    /// crashed.)
    Control(usize),
}

/// When each of a host's resources is next free.
#[derive(Debug)]
struct Host {
    tx: Instant,
    rx: Instant,
    disk: Instant,
    disk_write: Instant,
    replay: Instant,
    cores: Vec<Instant>,
}

/// Moments of a recovery the model notes while it is on, so an experiment can
/// split the recovery into phases (issue 22: which term grows with N).
#[derive(Debug, Clone, Copy, Default)]
pub struct Marks {
    /// The first bucket request reaching a backup: the coordinator's set-up
    /// (finding the log, announcing partitions, R§7.3–7.5) ends.
    pub first_fetch: Option<Instant>,
    /// The last replica read and bucketed at its backup (R§7.4–7.5).
    pub last_read: Option<Instant>,
    /// The last bucket replayed (R§7.6).
    pub last_replay: Option<Instant>,
    /// The last replication write received by a backup (R§7.6: the
    /// recovered data made durable).
    pub last_replication: Option<Instant>,
}

/// Which moment [`Costs::note`] records.
#[derive(Debug, Clone, Copy)]
pub enum Mark {
    FirstFetch,
    Read,
    Replay,
    Replication,
}

/// The model's state: per host, when each resource frees up.
#[derive(Debug)]
pub struct Costs {
    pub model: CostModel,
    on: AtomicBool,
    hosts: Mutex<BTreeMap<String, Host>>,
    /// Simulated time charged so far, by kind (for the summary and tests):
    /// send, receive, disk read, disk write, bucket, replicate, replay (ns).
    charged_ns: Mutex<[u64; 7]>,
    /// Disk read time charged per host (ns): R Fig. 16's slowest and average
    /// backup.
    read_ns: Mutex<BTreeMap<String, u64>>,
    marks: Mutex<Marks>,
    /// Replica lengths each backup published when a recovery was announced
    /// (BackupStartPartitioning's answer), by (backup host, master, segment).
    replica_bytes: Mutex<BTreeMap<(String, u64, u64), usize>>,
    /// When each replica's buckets are ready at its backup, by (backup host,
    /// master, segment): set by the first bucket request (R§7.4).
    buckets_ready: Mutex<BTreeMap<(String, u64, u64), Instant>>,
}

impl Costs {
    /// A model, charging from the start if `on`.
    pub fn new(model: CostModel, on: bool) -> Self {
        Self {
            model,
            on: AtomicBool::new(on),
            hosts: Mutex::default(),
            charged_ns: Mutex::new([0; 7]),
            read_ns: Mutex::default(),
            marks: Mutex::default(),
            replica_bytes: Mutex::default(),
            buckets_ready: Mutex::default(),
        }
    }

    /// Backup `host` announced it will bucket `replicas` (segment id, bytes)
    /// of `master` for a new recovery: their lengths, and no buckets ready yet
    /// (a newer recovery buckets again, R§7.5).
    pub fn replicas_announced(&self, host: &str, master: u64, replicas: &[(u64, usize)]) {
        let mut lengths = self.replica_bytes.lock();
        let mut ready = self.buckets_ready.lock();
        for &(segment, bytes) in replicas {
            let key = (host.to_string(), master, segment);
            ready.remove(&key);
            lengths.insert(key, bytes);
        }
    }

    /// When backup `host` has `master`'s replica `segment` bucketed, reading
    /// and bucketing it now if no earlier request did (`bucket_bytes`: the
    /// answer's size, the replica's if the backup never announced it).
    ///
    /// R§7.4–7.5: a backup reads each replica from disk once and splits it into
    /// every partition's bucket; every recovery master's request for a bucket
    /// of it is then served from memory. The read and the bucketing are
    /// charged once, for the whole replica, when the first recovery master asks
    /// for it: a fall-back holder nobody asks is not charged (RAMCloud reads
    /// secondary replicas only when needed; ramstore's backup reads them all,
    /// which the model leaves out — docs/design-notes.md "Simulator cost
    /// model").
    pub fn buckets_ready(
        &self,
        host: &str,
        master: u64,
        segment: u64,
        bucket_bytes: usize,
    ) -> Instant {
        let key = (host.to_string(), master, segment);
        if let Some(&at) = self.buckets_ready.lock().get(&key) {
            return at;
        }
        let bytes = self
            .replica_bytes
            .lock()
            .get(&key)
            .copied()
            .unwrap_or(bucket_bytes);
        let read = self.reserve(host, Charge::DiskRead(bytes));
        let at = self.reserve_from(host, Charge::Bucket(bytes), read);
        self.buckets_ready.lock().insert(key, at);
        self.note(Mark::Read, at);
        at
    }

    /// Records `mark` at `at` (the first fetch keeps the earliest, the others
    /// the latest); nothing while the model is off.
    pub fn note(&self, mark: Mark, at: Instant) {
        if !self.is_on() {
            return;
        }
        let mut m = self.marks.lock();
        let (slot, keep_earliest) = match mark {
            Mark::FirstFetch => (&mut m.first_fetch, true),
            Mark::Read => (&mut m.last_read, false),
            Mark::Replay => (&mut m.last_replay, false),
            Mark::Replication => (&mut m.last_replication, false),
        };
        *slot = Some(match *slot {
            Some(t) if keep_earliest => t.min(at),
            Some(t) => t.max(at),
            None => at,
        });
    }

    /// The moments noted so far.
    pub fn marks(&self) -> Marks {
        *self.marks.lock()
    }

    /// Starts (or stops) charging: an experiment loads its data for free and
    /// measures with costs on.
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }

    /// Simulated time charged so far by kind (see the field's doc).
    pub fn charged(&self) -> [Duration; 7] {
        self.charged_ns.lock().map(Duration::from_nanos)
    }

    /// Disk read time charged so far: (the busiest disk's, the mean over the
    /// disks that read anything).
    pub fn disk_reads(&self) -> (Duration, Duration) {
        let reads = self.read_ns.lock();
        let max = reads.values().copied().max().unwrap_or(0);
        let mean = reads.values().sum::<u64>() / (reads.len().max(1) as u64);
        (Duration::from_nanos(max), Duration::from_nanos(mean))
    }

    /// Reserves `charge` on `host`'s resource and returns when it ends; the
    /// caller sleeps until then (or not, for write-behind). Nothing (now) when
    /// the model is off.
    pub fn reserve(&self, host: &str, charge: Charge) -> Instant {
        self.reserve_from(host, charge, Instant::now())
    }

    /// As [`Costs::reserve`], for work that cannot start before `start` (the
    /// bucketing of a replica still being read). `start` itself when off.
    pub fn reserve_from(&self, host: &str, charge: Charge, start: Instant) -> Instant {
        let now = start.max(Instant::now());
        if !self.is_on() {
            return now;
        }
        let m = &self.model;
        if let Charge::Control(n) = charge {
            let ns = (n as u128) * 1_000_000_000 / u128::from(m.nic_bytes_per_sec.max(1));
            return now + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
        }
        let (kind, cost) = match charge {
            Charge::Send(n) => (0, m.at_rate(n, m.nic_bytes_per_sec)),
            Charge::Receive(n) => (1, m.at_rate(n, m.nic_bytes_per_sec)),
            Charge::DiskRead(n) => (2, m.at_rate(n, m.disk_read_bytes_per_sec)),
            Charge::DiskWrite(n) => (3, m.at_rate(n, m.disk_write_bytes_per_sec)),
            Charge::Bucket(n) => (4, m.per_byte(n, m.bucket_ps_per_byte)),
            Charge::Replicate(n) => (5, m.per_byte(n, m.replicate_ps_per_byte)),
            Charge::Replay(n) => (6, m.per_byte(n, m.replay_ps_per_byte)),
            // Returned above.
            Charge::Control(_) => return now,
        };
        let mut hosts = self.hosts.lock();
        let first = Instant::now();
        let h = hosts.entry(host.to_string()).or_insert_with(|| Host {
            tx: first,
            rx: first,
            disk: first,
            disk_write: first,
            replay: first,
            cores: vec![first; m.cores.max(1)],
        });
        let slot = match kind {
            0 => &mut h.tx,
            1 => &mut h.rx,
            2 => &mut h.disk,
            3 => &mut h.disk_write,
            6 => &mut h.replay,
            // The core that frees up first (the lowest index among equals).
            _ => {
                let i = (0..h.cores.len()).min_by_key(|&i| h.cores[i]).unwrap_or(0);
                &mut h.cores[i]
            }
        };
        let end = (*slot).max(now) + cost;
        *slot = end;
        drop(hosts);
        let ns = u64::try_from(cost.as_nanos()).unwrap_or(u64::MAX);
        self.charged_ns.lock()[kind] += ns;
        if kind == 2 {
            *self.read_ns.lock().entry(host.to_string()).or_default() += ns;
        }
        end
    }

    /// Reserves `charge` and waits until it ends.
    pub async fn pay(&self, host: &str, charge: Charge) {
        let end = self.reserve(host, charge);
        if end > Instant::now() {
            tokio::time::sleep_until(end).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paused() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime")
    }

    fn model() -> CostModel {
        CostModel {
            nic_bytes_per_sec: 1_000_000,
            cores: 2,
            ..CostModel::default()
        }
    }

    #[test]
    fn reserve_queues_sends_on_one_link_first_come_first_served() {
        paused().block_on(async {
            let costs = Costs::new(model(), true);
            let t0 = Instant::now();
            let a = costs.reserve("s1", Charge::Send(1_000));
            let b = costs.reserve("s1", Charge::Send(1_000));
            let other = costs.reserve("s2", Charge::Send(1_000));
            assert_eq!(a - t0, Duration::from_millis(1));
            assert_eq!(b - t0, Duration::from_millis(2), "waits for the first");
            assert_eq!(other - t0, Duration::from_millis(1), "another host's link");
        });
    }

    /// Regression: pings queued behind recovery's bulk transfers, and at 200
    /// servers the coordinator declared every server crashed.
    #[test]
    fn reserve_control_message_waits_behind_no_bulk_backlog() {
        paused().block_on(async {
            let costs = Costs::new(
                CostModel {
                    bytes_scale: 1000,
                    ..model()
                },
                true,
            );
            let t0 = Instant::now();
            let bulk = costs.reserve("s1", Charge::Send(1_000));
            assert_eq!(bulk - t0, Duration::from_secs(1), "scaled and queued");
            let ping = costs.reserve("s1", Charge::Control(100));
            assert_eq!(ping - t0, Duration::from_micros(100), "unscaled, no queue");
        });
    }

    /// R§7.4–7.5: the second recovery master asking for a bucket of the same
    /// replica waits for the one read, not for a second one; another replica
    /// queues behind it on the disk; a newer recovery reads again.
    #[test]
    fn buckets_ready_reads_each_replica_once() {
        paused().block_on(async {
            let costs = Costs::new(
                CostModel {
                    disk_read_bytes_per_sec: 1_000_000,
                    bucket_ps_per_byte: 1_000_000,
                    ..model()
                },
                true,
            );
            let t0 = Instant::now();
            costs.replicas_announced("b1", 7, &[(1, 1_000), (2, 1_000)]);
            // 1 ms to read 1,000 bytes, then 1 ms to bucket them.
            let first = costs.buckets_ready("b1", 7, 1, 10);
            assert_eq!(first - t0, Duration::from_millis(2));
            assert_eq!(costs.buckets_ready("b1", 7, 1, 10), first, "read once");
            let second = costs.buckets_ready("b1", 7, 2, 10);
            assert_eq!(
                second - t0,
                Duration::from_millis(3),
                "after the first read"
            );
            assert_eq!(costs.charged()[2], Duration::from_millis(2), "two reads");
            assert_eq!(costs.marks().last_read, Some(second));
            costs.replicas_announced("b1", 7, &[(1, 1_000)]);
            assert!(costs.buckets_ready("b1", 7, 1, 10) > second, "read again");
        });
    }

    #[test]
    fn reserve_spreads_cpu_work_over_the_cores() {
        paused().block_on(async {
            let costs = Costs::new(model(), true);
            let t0 = Instant::now();
            // 1 MB at 1,221 ps a byte: 1.221 ms each.
            let ends: Vec<_> = (0..3)
                .map(|_| costs.reserve("s1", Charge::Replay(0)))
                .collect();
            assert!(ends.iter().all(|&e| e == t0), "zero bytes cost nothing");
            let a = costs.reserve("s1", Charge::Bucket(1_000_000));
            let b = costs.reserve("s1", Charge::Bucket(1_000_000));
            let c = costs.reserve("s1", Charge::Bucket(1_000_000));
            assert_eq!(a, b, "two cores work at once");
            assert_eq!(c - t0, (a - t0) * 2, "the third waits for a core");
        });
    }

    #[test]
    fn reserve_costs_nothing_while_off_and_scales_bytes_when_on() {
        paused().block_on(async {
            let costs = Costs::new(
                CostModel {
                    bytes_scale: 10,
                    ..model()
                },
                false,
            );
            let t0 = Instant::now();
            assert_eq!(costs.reserve("s1", Charge::Send(1_000)), t0);
            costs.set_on(true);
            let end = costs.reserve("s1", Charge::Send(1_000));
            assert_eq!(end - t0, Duration::from_millis(10), "10 real bytes each");
            assert_eq!(costs.charged()[0], Duration::from_millis(10));
        });
    }
}

//! The recovery-scaling experiment (issue 22, R§7.12 Fig. 16): does crash
//! recovery stay as fast when the cluster grows and every server recovers the
//! same amount of data?
//!
//! One point: N servers (master + backup each, R = 3). Host 0 is the one master
//! loaded with data: (N − 1) × `data_per_server` bytes of 1 KiB objects in one
//! table, so that — as in Fig. 16, where a master held N × 500 MB for N
//! recovery nodes — each of the other N − 1 servers recovers one partition of
//! `data_per_server` bytes (the coordinator's partition limit is set just
//! above it). The other servers hold no data of their own; as backups they
//! hold about 3 × `data_per_server` of host 0's replicas each. The load runs
//! with the cost model off (it is set-up); then the model goes on and host 0
//! crashes.
//!
//! Measured in simulated time: detection (crash → the coordinator marks the
//! server crashed) and recovery (marked crashed → the coordinator finished the
//! recovery: every partition replayed, durable on R backups and handed out,
//! R§7.4–7.10) — Fig. 16's "total recovery time" starts at detection too.
//! Then every object is read back once through the client: a key missing or
//! holding another value counts as a violation.
//!
//! Each point runs in a process of its own (the binary's `getrandom` override
//! is process-wide, as for `run`), so a point is a function of its arguments.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_client::{Client, MultiWriteOp};
use ramstore_clock::SeededRng;
use ramstore_coordinator::partition::PartitionLimits;
use ramstore_coordinator::server_list::{ServerId, ServerStatus};

use crate::clock::SimClock;
use crate::cluster::{Cluster, Layout, ServerShape};
use crate::cost::{CostModel, Costs, Marks};
use crate::run::{connect, paused_runtime, SimError};
use crate::trace::Trace;

/// Value size of the loaded objects: R Fig. 16 used 1 KB objects, and the
/// replay constant is calibrated on 1 KiB objects.
pub const VALUE_BYTES: usize = 1024;
/// Objects per MultiWrite while loading.
const LOAD_BATCH: usize = 64;

/// One point's parameters.
#[derive(Debug, Clone)]
pub struct PointConfig {
    pub servers: usize,
    /// Bytes of object values each recovery master recovers.
    pub data_per_server: u64,
    pub seed: u64,
    pub cost: CostModel,
    /// Log memory of every server but host 0.
    pub memory_bytes: usize,
    pub segment_bytes: usize,
    pub backup_frames: u32,
    /// Topology, placement rule and recovery masters (issue 22; flat,
    /// scattered and anywhere by default).
    pub layout: Layout,
}

/// One point's results.
#[derive(Debug, Clone, Default)]
pub struct Point {
    pub servers: usize,
    pub data_per_server_bytes: u64,
    /// Crash → marked crashed (simulated seconds).
    pub detection_s: f64,
    /// Marked crashed → recovery finished (simulated seconds).
    pub recovery_s: f64,
    pub objects: u64,
    /// Keys that read back missing or wrong after the recovery.
    pub violations: u64,
    pub wall_s: f64,
    /// Peak resident memory of the process (bytes), from the OS.
    pub max_rss_bytes: u64,
    /// Simulated seconds charged by the cost model while recovering, summed
    /// over hosts: send, receive, disk read, disk write, bucket, replicate,
    /// replay.
    pub charged_s: [f64; 7],
    /// Disk read time of the busiest backup and the mean over the backups
    /// that read (simulated seconds; R Fig. 16's disk curves).
    pub disk_read_max_s: f64,
    pub disk_read_mean_s: f64,
    /// The recovery split into phases (simulated seconds, summing to
    /// `recovery_s`): set-up (marked crashed → the first bucket request
    /// reaches a backup: finding the log, announcing the partitions, R§7.3–7.5),
    /// reading (→ the last replica read and bucketed at its backup, R§7.4),
    /// replay tail (→ the last bucket replayed, R§7.6), re-replication (→ the
    /// last replication write received, if later), finish (→ the coordinator
    /// records the recovery finished, R§7.8).
    pub phases_s: [f64; 5],
    /// Bytes of buckets (backup → recovery master) and of replication during
    /// the recovery, by distance (local, one hop, more; [`crate::hops`]).
    pub hops_buckets: [u64; 3],
    pub hops_replication: [u64; 3],
}

/// Names of [`Point::phases_s`], in order.
pub const PHASES: [&str; 5] = ["setup", "reading", "replay_tail", "rereplication", "finish"];

impl Point {
    /// The one line a point process prints and the experiment parses.
    pub fn to_line(&self) -> String {
        let c = &self.charged_s;
        format!(
            "point servers={} data_per_server_bytes={} detection_s={:.6} recovery_s={:.6} \
             objects={} violations={} wall_s={:.2} max_rss_bytes={} \
             charged_s={:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4} \
             disk_read_max_s={:.4} disk_read_mean_s={:.4} \
             phases_s={:.4},{:.4},{:.4},{:.4},{:.4} \
             hops_buckets={},{},{} hops_replication={},{},{}",
            self.servers,
            self.data_per_server_bytes,
            self.detection_s,
            self.recovery_s,
            self.objects,
            self.violations,
            self.wall_s,
            self.max_rss_bytes,
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            c[6],
            self.disk_read_max_s,
            self.disk_read_mean_s,
            self.phases_s[0],
            self.phases_s[1],
            self.phases_s[2],
            self.phases_s[3],
            self.phases_s[4],
            self.hops_buckets[0],
            self.hops_buckets[1],
            self.hops_buckets[2],
            self.hops_replication[0],
            self.hops_replication[1],
            self.hops_replication[2]
        )
    }

    /// Parses [`Point::to_line`]'s output; `None` if it is not one.
    pub fn from_line(line: &str) -> Option<Point> {
        let rest = line.strip_prefix("point ")?;
        let mut p = Point::default();
        for field in rest.split_whitespace() {
            let (name, value) = field.split_once('=')?;
            match name {
                "servers" => p.servers = value.parse().ok()?,
                "data_per_server_bytes" => p.data_per_server_bytes = value.parse().ok()?,
                "detection_s" => p.detection_s = value.parse().ok()?,
                "recovery_s" => p.recovery_s = value.parse().ok()?,
                "objects" => p.objects = value.parse().ok()?,
                "violations" => p.violations = value.parse().ok()?,
                "wall_s" => p.wall_s = value.parse().ok()?,
                "max_rss_bytes" => p.max_rss_bytes = value.parse().ok()?,
                "disk_read_max_s" => p.disk_read_max_s = value.parse().ok()?,
                "disk_read_mean_s" => p.disk_read_mean_s = value.parse().ok()?,
                "phases_s" => {
                    let v: Vec<f64> = value.split(',').filter_map(|x| x.parse().ok()).collect();
                    p.phases_s = v.try_into().ok()?;
                }
                "hops_buckets" => p.hops_buckets = counts(value)?,
                "hops_replication" => p.hops_replication = counts(value)?,
                "charged_s" => {
                    let v: Vec<f64> = value.split(',').filter_map(|x| x.parse().ok()).collect();
                    p.charged_s = v.try_into().ok()?;
                }
                _ => {}
            }
        }
        Some(p)
    }
}

/// Three comma-separated counts.
fn counts(value: &str) -> Option<[u64; 3]> {
    let v: Vec<u64> = value.split(',').filter_map(|x| x.parse().ok()).collect();
    v.try_into().ok()
}

/// Runs one point on a fresh single-threaded runtime with paused time.
pub fn run_point(config: &PointConfig) -> Result<Point, SimError> {
    let runtime = paused_runtime()?;
    let started = Instant::now();
    let mut point = runtime.block_on(point(config.clone()))?;
    point.wall_s = started.elapsed().as_secs_f64();
    point.max_rss_bytes = max_rss_bytes();
    runtime.shutdown_background();
    Ok(point)
}

/// The process's peak resident memory (`getrusage`), 0 if the OS will not say.
pub fn max_rss_bytes() -> u64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is a valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc == 0 {
        // Linux reports kilobytes.
        u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024
    } else {
        0
    }
}

/// Log memory host 0 needs for its load: the values, about 5% of entry
/// headers and keys, and room for its heads.
fn loaded_memory(config: &PointConfig) -> usize {
    let values = config.data_per_server * (config.servers as u64 - 1);
    usize::try_from(values + values / 8).unwrap_or(usize::MAX) + (16 << 20)
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:09}").into_bytes()
}

/// The value of object `i`: its number spread over 1 KiB, so a wrong or stale
/// value is told apart.
fn value(i: u64) -> Vec<u8> {
    let mut v = vec![0u8; VALUE_BYTES];
    for (n, chunk) in v.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(i ^ ((n as u64) << 40)).to_le_bytes());
    }
    v
}

pub(crate) async fn wait_for(
    cluster: &Cluster,
    what: &str,
    within: Duration,
    mut done: impl FnMut() -> bool,
) -> Result<(), SimError> {
    let by = cluster.clock.elapsed() + within;
    while !done() {
        if cluster.clock.elapsed() > by {
            return Err(SimError::Setup(format!("{what}: not within {within:?}")));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Starts host 0, waits for it to enlist, then starts the other `servers - 1`
/// and waits for them all: host 0 has the lowest id, so a one-tablet table
/// created next lands on it (the coordinator places tablets on the least
/// loaded master, ties by id).
pub(crate) async fn start_host0_first(
    cluster: &Arc<Cluster>,
    servers: usize,
) -> Result<(), SimError> {
    cluster.start_server(0);
    wait_for(cluster, "host 0 enlists", Duration::from_secs(30), || {
        cluster.running().contains(&0)
    })
    .await?;
    for i in 1..servers {
        cluster.start_server(i);
    }
    wait_for(
        cluster,
        "every server enlists",
        Duration::from_secs(60),
        || cluster.running().len() == servers,
    )
    .await
}

async fn point(config: PointConfig) -> Result<Point, SimError> {
    if config.servers < 4 {
        return Err(SimError::Setup(
            "recovery-scaling needs at least 4 servers (R = 3)".into(),
        ));
    }
    let clock = SimClock::handle();
    let rng = SeededRng::handle(config.seed);
    let costs = Arc::new(Costs::new(config.cost, false));
    let shape = ServerShape {
        memory_bytes: config.memory_bytes,
        first_memory_bytes: Some(loaded_memory(&config)),
        segment_bytes: config.segment_bytes,
        backup_frames: config.backup_frames,
    };
    shape.check().map_err(SimError::Setup)?;
    let cluster = Cluster::new(
        clock.clone(),
        SeededRng::handle(rng.next_u64()),
        Arc::new(Trace::default()),
        config.servers,
        false,
        shape,
        costs.clone(),
    );
    cluster.set_layout(config.layout.clone());
    cluster
        .net
        .hops
        .set_topology(config.layout.topology.clone());
    cluster.start_coordinator();
    let coordinator = cluster
        .coordinator()
        .ok_or_else(|| SimError::Setup("no coordinator".into()))?;

    // Each recovery master gets one partition of about `data_per_server`
    // (R§7.5): the bound sits 10% above a share of values, headers included.
    coordinator.recoveries().set_limits(PartitionLimits {
        max_bytes: config.data_per_server + config.data_per_server / 10,
        max_entries: u64::MAX,
    });
    start_host0_first(&cluster, config.servers).await?;
    let admin = connect(&cluster, rng.as_ref(), "client-admin").await?;
    let table = admin
        .create_table("scaling", 1)
        .await
        .map_err(|e| SimError::Setup(format!("create table: {e}")))?;
    let victim = cluster
        .owner_of(table, 0, u64::MAX)
        .ok_or_else(|| SimError::Setup("the table has no single owner".into()))?;
    if cluster.host_of(victim) != Some(0) {
        return Err(SimError::Setup(format!(
            "the table landed on server {victim}, not host 0"
        )));
    }
    let objects = config.data_per_server * (config.servers as u64 - 1) / VALUE_BYTES as u64;
    load(&admin, table, objects).await?;
    // Let the last replication rounds finish before the crash.
    tokio::time::sleep(Duration::from_millis(500)).await;

    costs.set_on(true);
    cluster.net.hops.set_on(true);
    let crashed_at = clock.elapsed();
    let completed_before = cluster.recoveries_completed();
    cluster.crash_server(0);
    let marked = || {
        cluster.coordinator().is_some_and(|c| {
            c.with_core(|core| {
                core.server(ServerId(victim))
                    .is_some_and(|e| e.status != ServerStatus::Up)
            })
        })
    };
    wait_for(
        &cluster,
        "the crash is detected",
        Duration::from_secs(30),
        marked,
    )
    .await?;
    let detected_at = clock.elapsed();
    let detected_instant = tokio::time::Instant::now();
    wait_for(
        &cluster,
        "the recovery finishes",
        Duration::from_secs(600),
        || cluster.recoveries_completed() > completed_before,
    )
    .await?;
    let recovered_at = clock.elapsed();
    let phases_s = phases(
        &costs.marks(),
        detected_instant,
        tokio::time::Instant::now(),
    );
    costs.set_on(false);
    cluster.net.hops.set_on(false);
    let (buckets, replication) = cluster.net.hops.counts();
    let charged = costs.charged().map(|d| d.as_secs_f64());
    let (read_max, read_mean) = costs.disk_reads();
    let violations = verify(&admin, table, objects).await;
    Ok(Point {
        servers: config.servers,
        data_per_server_bytes: config.data_per_server,
        detection_s: (detected_at - crashed_at).as_secs_f64(),
        recovery_s: (recovered_at - detected_at).as_secs_f64(),
        objects,
        violations,
        wall_s: 0.0,
        max_rss_bytes: 0,
        charged_s: charged,
        disk_read_max_s: read_max.as_secs_f64(),
        disk_read_mean_s: read_mean.as_secs_f64(),
        phases_s,
        hops_buckets: [buckets.local, buckets.one_hop, buckets.multi_hop],
        hops_replication: [
            replication.local,
            replication.one_hop,
            replication.multi_hop,
        ],
    })
}

/// Splits `detected → recovered` at the noted moments (see
/// [`Point::phases_s`]); a moment never noted, or noted out of order, makes its
/// phase 0 and the next one longer.
fn phases(
    marks: &Marks,
    detected: tokio::time::Instant,
    recovered: tokio::time::Instant,
) -> [f64; 5] {
    let clamp = |t: Option<tokio::time::Instant>, after: tokio::time::Instant| {
        t.unwrap_or(after).clamp(after, recovered.max(after))
    };
    let fetching = clamp(marks.first_fetch, detected);
    let read = clamp(marks.last_read, fetching);
    let replayed = clamp(marks.last_replay, read);
    let replicated = clamp(marks.last_replication, replayed);
    let s = |a: tokio::time::Instant, b: tokio::time::Instant| {
        b.saturating_duration_since(a).as_secs_f64()
    };
    [
        s(detected, fetching),
        s(fetching, read),
        s(read, replayed),
        s(replayed, replicated),
        s(replicated, recovered),
    ]
}

/// Writes objects `0..objects` in MultiWrite batches.
pub(crate) async fn load(admin: &Client, table: u64, objects: u64) -> Result<(), SimError> {
    let mut next = 0u64;
    while next < objects {
        let end = (next + LOAD_BATCH as u64).min(objects);
        let keys: Vec<Vec<u8>> = (next..end).map(key).collect();
        let values: Vec<Vec<u8>> = (next..end).map(value).collect();
        let ops: Vec<MultiWriteOp<'_>> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| MultiWriteOp::new(table, k, v))
            .collect();
        for (i, r) in admin.multi_write(&ops).await.into_iter().enumerate() {
            r.map_err(|e| SimError::Setup(format!("loading object {}: {e}", next + i as u64)))?;
        }
        next = end;
    }
    Ok(())
}

/// Reads every object back; how many are missing or wrong.
pub(crate) async fn verify(admin: &Client, table: u64, objects: u64) -> u64 {
    let mut bad = 0u64;
    let mut next = 0u64;
    while next < objects {
        let end = (next + LOAD_BATCH as u64).min(objects);
        let keys: Vec<Vec<u8>> = (next..end).map(key).collect();
        let items: Vec<(u64, &[u8])> = keys.iter().map(|k| (table, k.as_slice())).collect();
        for (i, r) in admin.multi_read(&items).await.into_iter().enumerate() {
            match r {
                Ok((v, _)) if v == value(next + i as u64) => {}
                _ => bad += 1,
            }
        }
        next = end;
    }
    bad
}

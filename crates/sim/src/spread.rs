//! The placement experiment's point (issue 22, R§7.1 and Fig. 17): how evenly
//! do masters spread their replicas over the backups' disks?
//!
//! N servers; host 0 writes enough to put `per_backup` of its replicas on each
//! other backup on average (R Fig. 17: one crashed master's replicas over 120
//! backups), every other master writes `other_bytes`. Then the masters' replica
//! managers say where each segment's replicas went (the placement code ran
//! unchanged, `ramstore_server::placement`), and this counts:
//!
//! - host 0's replicas per backup: what a recovery of host 0 reads, so the
//!   busiest disk sets its time (Fig. 17) — spread = max / mean over the
//!   backups (every host but 0), and the coefficient of variation;
//! - host 0's first-placed replicas per backup (RAMCloud's primary replicas,
//!   R§7.4; ramstore picks which replica to read at recovery instead,
//!   `fetch_order`, so this is reported, not required);
//! - every master's replicas per backup, cluster-wide;
//! - of host 0's replicas, the fraction one hop from it, and segments with two
//!   replicas (or a replica and host 0) in one failure domain where the rule
//!   forbids it (must be 0).
//!
//! Every object is read back at the end: a wrong or missing one is a violation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_clock::SeededRng;
use ramstore_server::placement::Placement;

use crate::clock::SimClock;
use crate::cluster::{Cluster, Layout, ServerShape};
use crate::cost::{CostModel, Costs};
use crate::run::{connect, paused_runtime, SimError};
use crate::scaling::{load, max_rss_bytes, start_host0_first, verify, VALUE_BYTES};
use crate::topology::Hops;
use crate::trace::Trace;

/// One point's parameters.
#[derive(Debug, Clone)]
pub struct SpreadConfig {
    pub servers: usize,
    pub seed: u64,
    /// Host 0's replicas per other backup, on average, to aim for.
    pub per_backup: u64,
    /// Bytes of values every other master writes.
    pub other_bytes: u64,
    pub shape: ServerShape,
    pub layout: Layout,
}

/// A distribution's spread over the backups.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    pub mean: f64,
    /// Busiest backup / mean: R§7.1's concern (recovery waits for it).
    pub max_over_mean: f64,
    pub min_over_mean: f64,
    /// Standard deviation / mean.
    pub cv: f64,
}

impl Spread {
    /// The spread of `counts` (one per backup).
    pub fn of(counts: &[u64]) -> Spread {
        if counts.is_empty() {
            return Spread::default();
        }
        let n = counts.len() as f64;
        let mean = counts.iter().sum::<u64>() as f64 / n;
        if mean == 0.0 {
            return Spread::default();
        }
        let var = counts
            .iter()
            .map(|&c| (c as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        Spread {
            mean,
            max_over_mean: counts.iter().copied().max().unwrap_or(0) as f64 / mean,
            min_over_mean: counts.iter().copied().min().unwrap_or(0) as f64 / mean,
            cv: var.sqrt() / mean,
        }
    }

    fn line(&self) -> String {
        format!(
            "{:.3},{:.4},{:.4},{:.4}",
            self.mean, self.max_over_mean, self.min_over_mean, self.cv
        )
    }

    fn parse(value: &str) -> Option<Spread> {
        let v: Vec<f64> = value.split(',').filter_map(|x| x.parse().ok()).collect();
        let [mean, max_over_mean, min_over_mean, cv] = v.try_into().ok()?;
        Some(Spread {
            mean,
            max_over_mean,
            min_over_mean,
            cv,
        })
    }
}

/// One point's results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpreadPoint {
    pub servers: usize,
    pub proximity: bool,
    /// Host 0's segments counted.
    pub segments: u64,
    /// Host 0's replicas over the backups outside its failure domain (those
    /// scattered placement may use, R§7.1; all others when flat).
    pub replicas: Spread,
    /// Its first-placed replicas over the same backups.
    pub primaries: Spread,
    /// Its replicas over the backups one hop from it (C§3.2).
    pub near: Spread,
    /// Every master's replicas over every backup.
    pub cluster: Spread,
    /// Of host 0's replicas, the fraction one hop from it (C§3.2).
    pub one_hop: f64,
    /// Segments breaking the failure-domain rule (must be 0).
    pub domain_breaks: u64,
    /// Objects that read back missing or wrong.
    pub violations: u64,
    pub wall_s: f64,
    pub max_rss_bytes: u64,
}

impl SpreadPoint {
    /// The one line a point process prints.
    pub fn to_line(&self) -> String {
        format!(
            "spread servers={} proximity={} segments={} replicas={} primaries={} near={} cluster={} \
             one_hop={:.4} domain_breaks={} violations={} wall_s={:.2} max_rss_bytes={}",
            self.servers,
            self.proximity,
            self.segments,
            self.replicas.line(),
            self.primaries.line(),
            self.near.line(),
            self.cluster.line(),
            self.one_hop,
            self.domain_breaks,
            self.violations,
            self.wall_s,
            self.max_rss_bytes
        )
    }

    /// Parses [`SpreadPoint::to_line`]'s output.
    pub fn from_line(line: &str) -> Option<SpreadPoint> {
        let rest = line.strip_prefix("spread ")?;
        let mut p = SpreadPoint::default();
        for field in rest.split_whitespace() {
            let (name, value) = field.split_once('=')?;
            match name {
                "servers" => p.servers = value.parse().ok()?,
                "proximity" => p.proximity = value.parse().ok()?,
                "segments" => p.segments = value.parse().ok()?,
                "replicas" => p.replicas = Spread::parse(value)?,
                "primaries" => p.primaries = Spread::parse(value)?,
                "cluster" => p.cluster = Spread::parse(value)?,
                "near" => p.near = Spread::parse(value)?,
                "one_hop" => p.one_hop = value.parse().ok()?,
                "domain_breaks" => p.domain_breaks = value.parse().ok()?,
                "violations" => p.violations = value.parse().ok()?,
                "wall_s" => p.wall_s = value.parse().ok()?,
                "max_rss_bytes" => p.max_rss_bytes = value.parse().ok()?,
                _ => {}
            }
        }
        Some(p)
    }
}

/// Runs one point on a fresh single-threaded runtime with paused time.
pub fn run_spread(config: &SpreadConfig) -> Result<SpreadPoint, SimError> {
    let runtime = paused_runtime()?;
    let started = Instant::now();
    let mut point = runtime.block_on(spread(config.clone()))?;
    point.wall_s = started.elapsed().as_secs_f64();
    point.max_rss_bytes = max_rss_bytes();
    runtime.shutdown_background();
    Ok(point)
}

/// Bytes of values host 0 writes: `per_backup` × (N − 1) replicas, R per
/// segment, segments about 7/8 values.
fn loaded_bytes(config: &SpreadConfig) -> u64 {
    let segments = config.per_backup * (config.servers as u64 - 1) / 3;
    segments * config.shape.segment_bytes as u64 * 7 / 8
}

async fn spread(config: SpreadConfig) -> Result<SpreadPoint, SimError> {
    if config.servers < 5 {
        return Err(SimError::Setup("placement needs at least 5 servers".into()));
    }
    let rng = SeededRng::handle(config.seed);
    let loaded = loaded_bytes(&config);
    let mut shape = config.shape;
    shape.first_memory_bytes =
        Some(usize::try_from(loaded + loaded / 4).unwrap_or(usize::MAX) + (16 << 20));
    shape.check().map_err(SimError::Setup)?;
    let cluster = Cluster::new(
        SimClock::handle(),
        SeededRng::handle(rng.next_u64()),
        Arc::new(Trace::default()),
        config.servers,
        false,
        shape,
        Arc::new(Costs::new(CostModel::default(), false)),
    );
    cluster.set_layout(config.layout.clone());
    cluster.start_coordinator();
    start_host0_first(&cluster, config.servers).await?;
    let admin = connect(&cluster, rng.as_ref(), "client-admin").await?;
    let setup = |e: ramstore_client::ClientError| SimError::Setup(format!("create table: {e}"));
    let first = admin.create_table("loaded", 1).await.map_err(setup)?;
    let tablets = u32::try_from(config.servers - 1).unwrap_or(u32::MAX);
    let others = admin.create_table("others", tablets).await.map_err(setup)?;
    let first_objects = loaded / VALUE_BYTES as u64;
    let other_objects = config.other_bytes * (config.servers as u64 - 1) / VALUE_BYTES as u64;
    load(&admin, first, first_objects).await?;
    load(&admin, others, other_objects).await?;
    // Let the last replication rounds finish.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut point = count(&cluster, &config);
    point.violations =
        verify(&admin, first, first_objects).await + verify(&admin, others, other_objects).await;
    Ok(point)
}

/// Counts where the masters' replicas went (see the module documentation).
fn count(cluster: &Cluster, config: &SpreadConfig) -> SpreadPoint {
    let topology = cluster.topology();
    let places = cluster.replica_places();
    let host_of: BTreeMap<u64, usize> = places.iter().map(|(h, id, _)| (*id, *h)).collect();
    let backups = config.servers;
    let (mut replicas, mut primaries, mut all) = (
        vec![0u64; backups],
        vec![0u64; backups],
        vec![0u64; backups],
    );
    let (mut segments, mut near, mut placed, mut breaks) = (0u64, 0u64, 0u64, 0u64);
    for (host, _, segs) in &places {
        for (_, holders) in segs {
            let hosts: Vec<usize> = holders
                .iter()
                .filter_map(|b| host_of.get(b).copied())
                .collect();
            for &b in &hosts {
                all[b] += 1;
            }
            if *host != 0 {
                continue;
            }
            segments += 1;
            if let Some(&p) = hosts.first() {
                primaries[p] += 1;
            }
            for &b in &hosts {
                replicas[b] += 1;
                placed += 1;
                near += u64::from(topology.hops(0, b) == Hops::One);
            }
            breaks += u64::from(breaks_domains(&topology, &hosts, config.layout.placement));
        }
    }
    let home = topology.domain(0);
    let outside: Vec<usize> = (1..backups)
        .filter(|&b| home.is_empty() || topology.domain(b) != home)
        .collect();
    let near_hosts: Vec<usize> = (1..backups)
        .filter(|&b| topology.hops(0, b) == Hops::One)
        .collect();
    let pick = |counts: &[u64], hosts: &[usize]| -> Vec<u64> {
        hosts.iter().map(|&h| counts[h]).collect()
    };
    SpreadPoint {
        servers: config.servers,
        proximity: config.layout.placement == Placement::Proximity,
        segments,
        replicas: Spread::of(&pick(&replicas, &outside)),
        primaries: Spread::of(&pick(&primaries, &outside)),
        near: Spread::of(&pick(&replicas, &near_hosts)),
        cluster: Spread::of(&all),
        one_hop: near as f64 / placed.max(1) as f64,
        domain_breaks: breaks,
        ..SpreadPoint::default()
    }
}

/// Whether host 0's segment on `hosts` breaks the failure-domain rule: two
/// replicas in one named domain, or a replica in host 0's — which proximity
/// placement allows once, for the one near replica of a tree
/// (`choose_backup_with`, step 2).
fn breaks_domains(
    topology: &crate::topology::Topology,
    hosts: &[usize],
    placement: Placement,
) -> bool {
    let domain = |h: usize| topology.domain(h);
    let named = |h: usize| !domain(h).is_empty();
    let pairs = hosts.iter().enumerate().any(|(i, &a)| {
        hosts[i + 1..]
            .iter()
            .any(|&b| named(a) && domain(a) == domain(b))
    });
    let at_home = hosts
        .iter()
        .filter(|&&h| named(h) && domain(h) == domain(0))
        .count();
    let allowed_at_home = usize::from(placement == Placement::Proximity);
    pairs || at_home > allowed_at_home
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_even_counts_is_one() {
        let s = Spread::of(&[4, 4, 4, 4]);
        assert_eq!(
            (s.mean, s.max_over_mean, s.min_over_mean, s.cv),
            (4.0, 1.0, 1.0, 0.0)
        );
        let s = Spread::of(&[2, 6]);
        assert_eq!((s.max_over_mean, s.cv), (1.5, 0.5));
    }

    #[test]
    fn spread_point_line_round_trips() {
        let p = SpreadPoint {
            servers: 20,
            proximity: true,
            segments: 120,
            replicas: Spread::of(&[3, 4, 5]),
            one_hop: 0.5,
            ..SpreadPoint::default()
        };
        let back = SpreadPoint::from_line(&p.to_line()).expect("parses");
        assert_eq!(back.to_line(), p.to_line());
    }
}

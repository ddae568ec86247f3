//! Live tablet migrations in the simulation (K§2.3, issue 20): while the
//! clients run, one admin client keeps moving a random tablet of the table to
//! another master and follows the move to its end, so the history checker
//! judges every operation that ran across an ownership move, a PriorityPull, a
//! background pull, and — with faults on — a crash of the migration's source,
//! its target, both, or the coordinator (lineage recovery, K§2.3.4).
//!
//! Every migration must end *done* (the target owns the range) or *rolled
//! back* (the record is gone and the range's owner is not the target: the
//! source, or a master that replaced a crashed source and then took the range
//! back from a crashed target). One that is still recorded when the run ends,
//! after every fault healed and recoveries settled, is *stuck*: half-applied,
//! a violation.
//!
//! Thread-safety: one task; its choices come from its own seeded generator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramstore_client::Client;
use ramstore_clock::Rng;
use tokio::sync::watch;

use crate::cluster::Cluster;

/// How often the driver looks at the coordinator's record of a migration.
const POLL: Duration = Duration::from_millis(5);

/// What the migrations of a run came to.
#[derive(Debug)]
pub struct MigrationStats {
    /// Migrations the coordinator accepted.
    pub started: AtomicU64,
    /// Ended with the target owning the range.
    pub done: AtomicU64,
    /// Ended with the record gone and the range not on the target (lineage
    /// recovery rolled it back onto its source).
    pub rolled_back: AtomicU64,
    /// Still recorded at the end of the run, or ended with no tablet exactly
    /// its range: half-applied (a violation).
    pub stuck: AtomicU64,
    /// Bumped just before each `MigrateTablet` request: the fault schedule
    /// watches it to strike while that migration runs.
    pub attempts: watch::Sender<u64>,
}

impl Default for MigrationStats {
    fn default() -> Self {
        Self {
            started: AtomicU64::new(0),
            done: AtomicU64::new(0),
            rolled_back: AtomicU64::new(0),
            stuck: AtomicU64::new(0),
            attempts: watch::Sender::new(0),
        }
    }
}

/// A migration the coordinator accepted and the driver follows.
#[derive(Debug, Clone, Copy)]
pub struct Followed {
    pub id: u64,
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    pub target: u64,
}

/// How a followed migration stands now.
enum Standing {
    InProgress,
    Done,
    RolledBack,
    /// Its record is gone but no tablet is exactly its range.
    Lost,
}

fn standing(cluster: &Cluster, m: &Followed) -> Standing {
    if cluster
        .migrations_in_progress()
        .iter()
        .any(|r| r.id == m.id)
    {
        return Standing::InProgress;
    }
    // The record is deleted in the same document write that makes the target
    // the owner for good (MigrationDone) or gives the range back
    // (`migration_rolled_back`), so the owner read after it tells which: the
    // target only after a completed move (design notes, "Migration: lineage
    // recovery").
    match cluster.owner_of(m.table_id, m.start_hash, m.end_hash) {
        Some(owner) if owner == m.target => Standing::Done,
        Some(_) => Standing::RolledBack,
        None => Standing::Lost,
    }
}

impl MigrationStats {
    /// Counts `m`'s end if it has ended; whether it has.
    fn settle(&self, cluster: &Cluster, m: &Followed, verbose: bool) -> bool {
        let (counter, what) = match standing(cluster, m) {
            Standing::InProgress => return false,
            Standing::Done => (&self.done, "done"),
            Standing::RolledBack => (&self.rolled_back, "rolled back"),
            Standing::Lost => (&self.stuck, "lost its tablet"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if verbose {
            eprintln!(
                "{:>10.3} s  migration {} {what}",
                cluster.clock.elapsed().as_secs_f64(),
                m.id
            );
        }
        true
    }

    /// Waits until `m` ends or `deadline` (simulated) passes. One still
    /// recorded then is left for the run's final count of the records left
    /// (which counts it stuck once).
    pub async fn finish(&self, cluster: &Cluster, m: Followed, deadline: Duration, verbose: bool) {
        while cluster.clock.elapsed() < deadline {
            if self.settle(cluster, &m, verbose) {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// How the migrator runs.
#[derive(Debug, Clone, Copy)]
pub struct DrivePlan {
    /// When to stop asking for migrations (simulated time since the cluster's
    /// clock started).
    pub end: Duration,
    /// Print each migration, its end, and the tablets' owners (stderr).
    pub verbose: bool,
    /// Move a range only to a master never seen owning it.
    pub fresh_targets: bool,
}

/// Moves random tablets of `table` (named `name`), one at a time, until
/// `plan.end`; counts their ends in `stats`. Returns the migration still in
/// progress at the end, if any, for the run to follow to its end after the
/// faults heal.
pub async fn drive(
    admin: Client,
    (name, table): (&str, u64),
    cluster: Arc<Cluster>,
    rng: Arc<dyn Rng>,
    stats: Arc<MigrationStats>,
    plan: DrivePlan,
) -> Option<Followed> {
    let DrivePlan {
        end,
        verbose,
        fresh_targets,
    } = plan;
    let clock = cluster.clock.clone();
    // Masters seen owning each range so far (`fresh_targets`).
    let mut held: BTreeMap<(u64, u64), BTreeSet<u64>> = BTreeMap::new();
    while clock.elapsed() < end {
        let pause = 500 + rng.next_u64() % 1_500;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let Ok(map) = admin.tablet_map().await else {
            continue;
        };
        let tablets: Vec<_> = map.iter().filter(|t| t.table_id == table).collect();
        if verbose {
            let owners: Vec<String> = tablets
                .iter()
                .map(|t| format!("{:#x}:{}", t.start_hash, t.server_id))
                .collect();
            eprintln!(
                "{:>10.3} s  owners {}",
                clock.elapsed().as_secs_f64(),
                owners.join(" ")
            );
        }
        for t in &tablets {
            held.entry((t.start_hash, t.end_hash))
                .or_default()
                .insert(t.server_id);
        }
        let mut owners: Vec<u64> = map.iter().map(|t| t.server_id).collect();
        owners.sort_unstable();
        owners.dedup();
        if tablets.is_empty() || owners.len() < 2 {
            continue;
        }
        let t = tablets[(rng.next_u64() % tablets.len() as u64) as usize];
        let before = held.get(&(t.start_hash, t.end_hash));
        let others: Vec<u64> = owners
            .into_iter()
            .filter(|o| *o != t.server_id)
            .filter(|o| !fresh_targets || before.is_none_or(|b| !b.contains(o)))
            .collect();
        if others.is_empty() {
            continue;
        }
        let target = others[(rng.next_u64() % others.len() as u64) as usize];
        stats.attempts.send_modify(|n| *n += 1);
        let asked = clock.elapsed();
        let Ok(id) = admin
            .migrate_tablet(name, t.start_hash, t.end_hash, target)
            .await
        else {
            // Refused (a target that crashed meanwhile, a range recovering) or
            // unanswered. An unanswered request may still have been recorded:
            // the coordinator then drives it to its end like any other, and
            // the final check finds it if it does not end.
            continue;
        };
        stats.started.fetch_add(1, Ordering::Relaxed);
        if verbose {
            eprintln!(
                "{:>10.3} s  migration {id} of [{:#x}, {:#x}] to server {target} (asked at {:.3} s)",
                clock.elapsed().as_secs_f64(),
                t.start_hash,
                t.end_hash,
                asked.as_secs_f64()
            );
        }
        held.entry((t.start_hash, t.end_hash))
            .or_default()
            .insert(target);
        let m = Followed {
            id,
            table_id: table,
            start_hash: t.start_hash,
            end_hash: t.end_hash,
            target,
        };
        // One migration at a time: a crash may make this one long (a source
        // that waits for a master to recover onto), but never endless.
        loop {
            if stats.settle(&cluster, &m, verbose) {
                break;
            }
            if clock.elapsed() >= end {
                return Some(m);
            }
            tokio::time::sleep(POLL).await;
        }
    }
    None
}

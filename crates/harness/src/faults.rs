//! Fault injection on a seeded schedule: each fault is applied to a target chosen by
//! the injector's random generator, the cluster is given time to notice and
//! recover, and the injector waits until it is whole again (every server up, no
//! recovery running) before the next fault — so a run never loses more servers at
//! once than R replicas tolerate, and a cluster that does not heal is a failure of
//! its own ("not live") with every process's log.
//!
//! Kinds (R§7 crash recovery, R§7.11 zombies, R§9 coordinator failover):
//! - `KillMaster` / `KillBackup`: SIGKILL a server that owns tablets / owns none
//!   (every server is also a backup); it stays down a while, then restarts on its
//!   address with its disks (cold start);
//! - `ZombieMaster`: SIGSTOP a master for a while (its pings and clients' calls time
//!   out, so it may be declared crashed and recovered elsewhere), then SIGCONT: a
//!   server that learns it was declared crashed refuses service and exits (code 4)
//!   and is restarted with its disks;
//! - `KillCoordinator`: SIGKILL the active coordinator (the standby takes over on
//!   etcd; on a file store it restarts on its state);
//! - with the servers in network namespaces (`crate::netns`, root only):
//!   `PartitionMaster` (a master cut off from everyone, clients included),
//!   `PartitionGroup` (a master and one other server cut off together) and
//!   `PacketLoss` (random drops on one server's traffic); after the heal, a server
//!   declared crashed meanwhile must exit as a zombie;
//! - with small disks (`crate::disk`, root only): `FillDisk` (one server's disk
//!   full for a while; it must keep running and lose nothing).

use std::collections::BTreeMap;
use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use ramstore_client::BlockingClient;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::cluster::{Cluster, ZOMBIE_EXIT_CODE};
use crate::HarnessError;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    KillMaster,
    KillBackup,
    /// SIGSTOP a master for this long, then SIGCONT.
    ZombieMaster {
        stopped_ms: u64,
    },
    KillCoordinator,
    /// Cut a master off from every other process (network namespaces only) for
    /// this long, then heal.
    PartitionMaster {
        ms: u64,
    },
    /// Cut a group of two servers (a master and another) off from the rest; they
    /// still reach each other.
    PartitionGroup {
        ms: u64,
    },
    /// Cut a master off from the coordinators and the other servers, but not from
    /// the clients, for `ms`: the zombie case where stale reads could be served.
    IsolateMaster {
        ms: u64,
    },
    /// Delay one server's traffic by `delay_ms` plus up to `jitter_ms` (delaying
    /// proxies only) for `ms`: late and reordered answers.
    Delay {
        delay_ms: u64,
        jitter_ms: u64,
        ms: u64,
    },
    /// Drop this percentage of one server's packets each way for `ms`.
    PacketLoss {
        percent: u8,
        ms: u64,
    },
    /// Fill one server's (small) disk for `ms`, then free it: the server must stay
    /// up and keep its replicas (small disks only, root).
    FillDisk {
        ms: u64,
    },
}

impl Fault {
    /// A short name for counts and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::KillMaster => "kill-master",
            Fault::KillBackup => "kill-backup",
            Fault::ZombieMaster { .. } => "zombie-master",
            Fault::KillCoordinator => "kill-coordinator",
            Fault::PartitionMaster { .. } => "partition-master",
            Fault::PartitionGroup { .. } => "partition-group",
            Fault::IsolateMaster { .. } => "isolate-master",
            Fault::PacketLoss { .. } => "packet-loss",
            Fault::Delay { .. } => "delay",
            Fault::FillDisk { .. } => "fill-disk",
        }
    }

    /// Whether the fault needs the servers in network namespaces.
    pub fn needs_netns(&self) -> bool {
        matches!(
            self,
            Fault::PartitionMaster { .. }
                | Fault::PartitionGroup { .. }
                | Fault::IsolateMaster { .. }
                | Fault::PacketLoss { .. }
        )
    }
}

/// What one injection did.
#[derive(Clone, Debug)]
pub struct FaultRecord {
    /// When it was injected, since the injector started.
    pub at: Duration,
    pub fault: Fault,
    /// What it hit (e.g. "server 3 (slot 1)").
    pub target: String,
    /// What followed (e.g. "zombie exited", "not declared crashed").
    pub result: String,
    /// From injection until the cluster was whole again.
    pub healed_after: Duration,
}

impl fmt::Display for FaultRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:>7.1}s] {} {}: {}; healthy again after {:.1}s",
            self.at.as_secs_f64(),
            self.fault.name(),
            self.target,
            self.result,
            self.healed_after.as_secs_f64()
        )
    }
}

/// Applies faults and keeps a record of them.
pub struct Injector {
    rng: SmallRng,
    start: Instant,
    /// How long the cluster may take to heal after a fault.
    pub patience: Duration,
    /// How long a killed server stays down before it restarts (random in range).
    pub down_ms: (u64, u64),
    pub records: Vec<FaultRecord>,
}

impl Injector {
    /// An injector whose choices follow `seed`.
    pub fn new(seed: u64, patience: Duration) -> Injector {
        Injector {
            rng: SmallRng::seed_from_u64(seed),
            start: Instant::now(),
            patience,
            down_ms: (500, 3_000),
            records: Vec::new(),
        }
    }

    /// A fault drawn from `kinds`.
    pub fn pick(&mut self, kinds: &[Fault]) -> Option<Fault> {
        kinds.choose(&mut self.rng).copied()
    }

    /// A pause drawn from `[lo, hi]` milliseconds.
    pub fn pause(&mut self, lo_ms: u64, hi_ms: u64) -> Duration {
        Duration::from_millis(self.rng.gen_range(lo_ms..=hi_ms.max(lo_ms)))
    }

    /// Faults injected so far by kind.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for r in &self.records {
            *m.entry(r.fault.name()).or_insert(0) += 1;
        }
        m
    }

    /// Injects `fault`, waits until the cluster is whole again, and records it.
    pub fn inject(
        &mut self,
        cluster: &mut Cluster,
        client: &BlockingClient,
        fault: Fault,
    ) -> Result<FaultRecord, HarnessError> {
        let at = self.start.elapsed();
        let injected = Instant::now();
        let masters = cluster.masters(client)?;
        let master_slots: Vec<usize> = masters
            .iter()
            .filter_map(|id| cluster.slot_of(*id))
            .collect();
        let (target, result) = match fault {
            Fault::KillMaster | Fault::KillBackup => {
                let candidates: Vec<usize> = if fault == Fault::KillMaster {
                    master_slots.clone()
                } else {
                    let backups: Vec<usize> = (0..cluster.servers.len())
                        .filter(|i| !master_slots.contains(i))
                        .collect();
                    // Every server is a backup; prefer one that is only that.
                    if backups.is_empty() {
                        (0..cluster.servers.len()).collect()
                    } else {
                        backups
                    }
                };
                let slot = *candidates
                    .choose(&mut self.rng)
                    .ok_or_else(|| HarnessError::Io("no server to kill".into()))?;
                let id = cluster.servers[slot].id;
                cluster.kill_server(slot);
                let down = self.pause(self.down_ms.0, self.down_ms.1);
                thread::sleep(down);
                (
                    format!("server {id} (slot {slot})"),
                    format!(
                        "SIGKILL, down {:.1}s, restarted with its disks",
                        down.as_secs_f64()
                    ),
                )
            }
            Fault::ZombieMaster { stopped_ms } => {
                let slot = *master_slots
                    .choose(&mut self.rng)
                    .ok_or_else(|| HarnessError::Io("no master to stop".into()))?;
                let id = cluster.servers[slot].id;
                cluster.stop_server(slot);
                thread::sleep(Duration::from_millis(stopped_ms));
                let state = cluster
                    .server_states(client)
                    .ok()
                    .and_then(|s| s.get(&id).cloned())
                    .unwrap_or_else(|| "unknown".into());
                cluster.continue_server(slot);
                let result = if state == "up" {
                    "stopped, still up when continued".to_string()
                } else {
                    // Declared crashed while stopped: it must find out and exit.
                    let exited = cluster.servers[slot]
                        .proc
                        .as_mut()
                        .and_then(|p| p.wait_timeout(self.patience));
                    match exited.and_then(|s| s.code()) {
                        Some(ZOMBIE_EXIT_CODE) => format!("stopped, declared {state}, zombie exited"),
                        other => {
                            return Err(HarnessError::Timeout {
                                what: format!(
                                    "zombie server {id} to exit with code {ZOMBIE_EXIT_CODE} (got {other:?})"
                                ),
                                logs: cluster.log_tails(),
                            })
                        }
                    }
                };
                (
                    format!(
                        "server {id} (slot {slot}) for {:.1}s",
                        stopped_ms as f64 / 1000.0
                    ),
                    result,
                )
            }
            Fault::PartitionMaster { ms } | Fault::PartitionGroup { ms } => {
                let slot = *master_slots
                    .choose(&mut self.rng)
                    .ok_or_else(|| HarnessError::Io("no master to partition".into()))?;
                let mut group = vec![slot];
                if matches!(fault, Fault::PartitionGroup { .. }) {
                    let others: Vec<usize> =
                        (0..cluster.servers.len()).filter(|&i| i != slot).collect();
                    group.extend(others.choose(&mut self.rng));
                }
                for &i in &group {
                    let peers: Vec<usize> = group.iter().copied().filter(|&j| j != i).collect();
                    cluster.partition_server(i, &peers)?;
                }
                let ids: Vec<String> = group
                    .iter()
                    .map(|&i| format!("server {} (slot {i})", cluster.servers[i].id))
                    .collect();
                thread::sleep(Duration::from_millis(ms));
                for &i in &group {
                    cluster.heal(i)?;
                }
                let result = self.after_isolation(cluster, client, &group)?;
                (
                    format!("{} for {:.1}s", ids.join(" + "), ms as f64 / 1000.0),
                    result,
                )
            }
            Fault::IsolateMaster { ms } => {
                let slot = *master_slots
                    .choose(&mut self.rng)
                    .ok_or_else(|| HarnessError::Io("no master to isolate".into()))?;
                let id = cluster.servers[slot].id;
                cluster.isolate_from_cluster(slot)?;
                thread::sleep(Duration::from_millis(ms));
                cluster.heal(slot)?;
                let result = self.after_isolation(cluster, client, &[slot])?;
                (
                    format!(
                        "server {id} (slot {slot}) for {:.1}s, clients still reach it",
                        ms as f64 / 1000.0
                    ),
                    result,
                )
            }
            Fault::Delay {
                delay_ms,
                jitter_ms,
                ms,
            } => {
                let slot = self.rng.gen_range(0..cluster.servers.len());
                let id = cluster.servers[slot].id;
                cluster.delay_server(
                    slot,
                    Duration::from_millis(delay_ms),
                    Duration::from_millis(jitter_ms),
                )?;
                thread::sleep(Duration::from_millis(ms));
                cluster.delay_server(slot, Duration::ZERO, Duration::ZERO)?;
                let result = self.after_isolation(cluster, client, &[slot])?;
                (
                    format!(
                        "server {id} (slot {slot}) +{delay_ms}..{} ms for {:.1}s",
                        delay_ms + jitter_ms,
                        ms as f64 / 1000.0
                    ),
                    result,
                )
            }
            Fault::PacketLoss { percent, ms } => {
                let slot = self.rng.gen_range(0..cluster.servers.len());
                let id = cluster.servers[slot].id;
                cluster.packet_loss(slot, percent)?;
                thread::sleep(Duration::from_millis(ms));
                cluster.heal(slot)?;
                let result = self.after_isolation(cluster, client, &[slot])?;
                (
                    format!(
                        "server {id} (slot {slot}) {percent}% for {:.1}s",
                        ms as f64 / 1000.0
                    ),
                    result,
                )
            }
            Fault::FillDisk { ms } => {
                let slot = self.rng.gen_range(0..cluster.servers.len());
                let id = cluster.servers[slot].id;
                let filled = cluster.fill_disk(slot)?;
                thread::sleep(Duration::from_millis(ms));
                // It must have ridden it out: its frames were allocated up front.
                let running = cluster.server_running(slot);
                cluster.unfill_disk(slot)?;
                if !running {
                    return Err(HarnessError::Io(format!(
                        "server {id} (slot {slot}) exited while its disk was full\n{}",
                        cluster.log_tails()
                    )));
                }
                (
                    format!(
                        "server {id} (slot {slot}) for {:.1}s ({} MiB filler)",
                        ms as f64 / 1000.0,
                        filled >> 20
                    ),
                    "still running".to_string(),
                )
            }
            Fault::KillCoordinator => {
                let slot = cluster.active_coordinator();
                cluster.kill_coordinator()?;
                (
                    format!("coordinator {slot}"),
                    format!(
                        "SIGKILL, coordinator {} now active",
                        cluster.active_coordinator()
                    ),
                )
            }
        };
        cluster.wait_healthy(client, self.patience)?;
        let record = FaultRecord {
            at,
            fault,
            target,
            result,
            healed_after: injected.elapsed(),
        };
        self.records.push(record.clone());
        Ok(record)
    }

    /// After servers in `slots` were cut off and are reachable again: each one the
    /// coordinator declared crashed meanwhile must learn it is a zombie and exit
    /// with [`ZOMBIE_EXIT_CODE`] (R§7.11); one still UP goes on. Says what
    /// happened.
    fn after_isolation(
        &mut self,
        cluster: &mut Cluster,
        client: &BlockingClient,
        slots: &[usize],
    ) -> Result<String, HarnessError> {
        let states = cluster.server_states(client).unwrap_or_default();
        let mut out = Vec::new();
        for &slot in slots {
            let id = cluster.servers[slot].id;
            let state = states.get(&id).cloned().unwrap_or_else(|| "unknown".into());
            if state == "up" {
                out.push(format!("server {id} still up"));
                continue;
            }
            let exited = cluster.servers[slot]
                .proc
                .as_mut()
                .and_then(|p| p.wait_timeout(self.patience));
            match exited.and_then(|s| s.code()) {
                Some(ZOMBIE_EXIT_CODE) => {
                    out.push(format!("server {id} declared {state}, zombie exited"))
                }
                other => {
                    return Err(HarnessError::Timeout {
                        what: format!(
                        "zombie server {id} to exit with code {ZOMBIE_EXIT_CODE} (got {other:?})"
                    ),
                        logs: cluster.log_tails(),
                    })
                }
            }
        }
        Ok(out.join(", "))
    }
}

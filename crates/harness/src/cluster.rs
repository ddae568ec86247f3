//! A ramstore cluster of real processes on 127.0.0.1: a coordinator (on a file
//! store, or on etcd with a standby coordinator for failover, R§9) and N storage
//! servers, each a master and a backup with its own disk directory, on fixed ports
//! so a killed server restarts on the same address with the same disk (cold start:
//! it names its previous id, which crash recovery brings back, R§7).
//!
//! Faults are methods: kill (SIGKILL), stop/continue (SIGSTOP/SIGCONT: a hung
//! process, then a zombie, R§7.11), restart with the same disks, kill the active
//! coordinator. Every process is spawned from the thread that made the cluster
//! (`PR_SET_PDEATHSIG` is per thread); methods that spawn refuse other threads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use crate::etcd::TestEtcd;
use ramstore_client::{BlockingClient, ClientOptions};

use crate::disk::DiskMount;
use crate::netns::Netns;
use crate::process::Proc;
use crate::proxy::DelayProxy;
use crate::HarnessError;

/// The port every server listens on inside its own network namespace.
pub const NETNS_SERVER_PORT: u16 = 7100;

/// Exit code of a server that learned it was declared crashed (a zombie).
pub const ZOMBIE_EXIT_CODE: i32 = 4;

/// What to start.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The `ramstore` binary.
    pub ramstore_bin: PathBuf,
    /// Storage servers (each master + backup).
    pub servers: usize,
    /// Replicas per segment (R).
    pub replicas: u8,
    /// Log memory per server (e.g. "96MiB").
    pub server_memory: String,
    /// Frames in each backup file (8 MiB each on disk).
    pub backup_frames: u32,
    /// Coordinator state in a throwaway etcd, with a standby coordinator;
    /// otherwise in a directory (one coordinator, restarted in place when killed).
    pub etcd: bool,
    /// More coordinator arguments.
    pub coordinator_args: Vec<String>,
    /// More server arguments.
    pub server_args: Vec<String>,
    /// Where logs and disks go (a temporary directory, removed on drop, if `None`).
    pub dir: Option<PathBuf>,
    /// How long a process may take to print its ready line.
    pub ready_timeout: Duration,
    /// Run each server in its own network namespace (root only; see
    /// [`crate::netns`]), so partitions and packet loss can be injected.
    pub netns: bool,
    /// Give each server a disk of its own just large enough for its frames file
    /// (a tmpfs; root only; see [`crate::disk`]), so full disks can be injected.
    pub small_disks: bool,
    /// Put a delaying proxy ([`crate::proxy`]) in front of each server, so delay
    /// and reordering can be injected.
    pub delay_proxy: bool,
}

impl ClusterConfig {
    /// Defaults for a small replicated cluster of `servers` servers.
    pub fn new(ramstore_bin: impl Into<PathBuf>, servers: usize) -> ClusterConfig {
        ClusterConfig {
            ramstore_bin: ramstore_bin.into(),
            servers,
            replicas: 2,
            // The load's live data is small; what matters is that backups have
            // room for every master's log several times over (a log under churn
            // spans more segments than its live data, and recovery writes the
            // crashed master's data again): 5 servers × 32 frames of 8 MiB hold
            // 5 logs of 4 segments, R = 2, four times over. Too few frames stall
            // replication, then cleaning, then recovery (docs/reliability.md).
            server_memory: "32MiB".into(),
            backup_frames: 32,
            etcd: false,
            coordinator_args: Vec::new(),
            server_args: Vec::new(),
            dir: None,
            ready_timeout: Duration::from_secs(60),
            netns: false,
            delay_proxy: false,
            small_disks: false,
        }
    }
}

/// One storage server's slot: its address and disk stay across restarts.
pub struct ServerSlot {
    /// Where the server listens (`127.0.0.1:PORT`, or its namespace's address).
    pub addr: String,
    /// The delaying proxy in front of it, whose address it advertises (when the
    /// cluster runs with [`ClusterConfig::delay_proxy`]).
    pub proxy: Option<DelayProxy>,
    pub backup_dir: PathBuf,
    /// The id of the current (or last) process.
    pub id: u64,
    /// Processes started in this slot so far.
    pub starts: u32,
    pub proc: Option<Proc>,
    /// The small disk mounted on `backup_dir` ([`ClusterConfig::small_disks`]);
    /// last, so it is unmounted after the process is gone.
    pub disk: Option<DiskMount>,
}

struct CoordinatorSlot {
    addr: String,
    proc: Option<Proc>,
}

/// The cluster (see the module documentation). Dropping it kills every process.
pub struct Cluster {
    pub config: ClusterConfig,
    // Drop order: servers, coordinators, etcd, then the directory.
    pub servers: Vec<ServerSlot>,
    coordinators: Vec<CoordinatorSlot>,
    netns: Option<Netns>,
    /// Index of the coordinator that serves (the other, if any, stands by).
    active: usize,
    etcd: Option<TestEtcd>,
    store: String,
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    owner: ThreadId,
    log_seq: u32,
}

pub use crate::local::try_free_port as free_port;

fn coordinator_ready(line: &str) -> bool {
    line.starts_with("ramstore coordinator listening on ")
}

fn coordinator_standing_by(line: &str) -> bool {
    line.starts_with("ramstore coordinator standing by")
}

impl Cluster {
    /// Starts etcd (if asked), the coordinator(s) and the servers, and waits until
    /// every server is up.
    pub fn start(config: ClusterConfig) -> Result<Cluster, HarnessError> {
        let (temp, dir) = match &config.dir {
            Some(d) => {
                std::fs::create_dir_all(d)
                    .map_err(|e| HarnessError::Io(format!("{}: {e}", d.display())))?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::tempdir().map_err(|e| HarnessError::Io(e.to_string()))?;
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        std::fs::create_dir_all(dir.join("logs"))
            .map_err(|e| HarnessError::Io(format!("{}: {e}", dir.display())))?;
        let (etcd, store) = if config.etcd {
            let etcd = TestEtcd::start().map_err(HarnessError::Etcd)?;
            let store = etcd.store_arg();
            (Some(etcd), store)
        } else {
            (None, format!("file:{}", dir.join("coordinator").display()))
        };
        let netns = if config.netns {
            crate::netns::available().map_err(HarnessError::Netns)?;
            Some(Netns::create(config.servers)?)
        } else {
            None
        };
        // Coordinators (and clients) live in the root namespace: on the bridge's
        // address when servers are in namespaces.
        let host = netns
            .as_ref()
            .map_or("127.0.0.1".to_string(), |n| n.host_ip());
        let coordinators = (0..if config.etcd { 2 } else { 1 })
            .map(|_| {
                Ok(CoordinatorSlot {
                    addr: format!("{host}:{}", free_port()?),
                    proc: None,
                })
            })
            .collect::<Result<Vec<_>, HarnessError>>()?;
        let servers = (0..config.servers)
            .map(|i| {
                // In a namespace of its own a server has every port to itself.
                let (addr, proxy_addr) = match &netns {
                    Some(n) => (
                        format!("{}:{NETNS_SERVER_PORT}", n.ip(i)),
                        format!("{}:{}", n.ip(i), NETNS_SERVER_PORT + 1),
                    ),
                    // The proxy binds port 0 itself: a port picked here could
                    // be taken by another test before the proxy binds it.
                    None => (
                        format!("127.0.0.1:{}", free_port()?),
                        "127.0.0.1:0".to_string(),
                    ),
                };
                let proxy = if config.delay_proxy {
                    let ns = netns.as_ref().map(|n| n.namespace(i));
                    Some(DelayProxy::start(&proxy_addr, &addr, ns)?)
                } else {
                    None
                };
                let backup_dir = dir.join(format!("server-{i}"));
                let disk = if config.small_disks {
                    // The frames file exactly as the backup lays it out
                    // (`posix_fallocate`d at start-up), metadata areas included.
                    let frames_bytes =
                        ramstore_backup::BackupConfig::new(config.backup_frames).file_bytes();
                    Some(DiskMount::mount(
                        &backup_dir,
                        frames_bytes + crate::disk::DISK_SLACK_BYTES,
                    )?)
                } else {
                    None
                };
                Ok(ServerSlot {
                    addr,
                    proxy,
                    backup_dir,
                    id: 0,
                    starts: 0,
                    proc: None,
                    disk,
                })
            })
            .collect::<Result<Vec<_>, HarnessError>>()?;
        let mut cluster = Cluster {
            config,
            servers,
            coordinators,
            netns,
            active: 0,
            etcd,
            store,
            dir,
            _temp: temp,
            owner: thread::current().id(),
            log_seq: 0,
        };
        cluster.start_coordinator(0, false)?;
        if cluster.coordinators.len() > 1 {
            cluster.start_coordinator(1, true)?;
        }
        let all: Vec<usize> = (0..cluster.servers.len()).collect();
        cluster.start_servers(&all)?;
        Ok(cluster)
    }

    fn check_thread(&self) -> Result<(), HarnessError> {
        if thread::current().id() != self.owner {
            return Err(HarnessError::WrongThread);
        }
        Ok(())
    }

    fn log_path(&mut self, name: &str) -> PathBuf {
        self.log_seq += 1;
        self.dir
            .join("logs")
            .join(format!("{:03}-{name}.log", self.log_seq))
    }

    /// The directory with the logs and disks.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every coordinator address, comma-separated (clients and servers move to the
    /// next on a transport failure).
    pub fn coordinator_addrs(&self) -> String {
        self.coordinators
            .iter()
            .map(|c| c.addr.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Client options for this cluster with operation deadline `deadline`.
    pub fn client_options(&self, deadline: Duration) -> ClientOptions {
        ClientOptions {
            operation_deadline: deadline,
            // The checker counts a duplicate as a violation (issue 21).
            exactly_once: true,
            ..ClientOptions::new(self.coordinator_addrs())
        }
    }

    /// A blocking client with operation deadline `deadline`.
    pub fn client(&self, deadline: Duration) -> Result<BlockingClient, HarnessError> {
        BlockingClient::connect(self.client_options(deadline)).map_err(HarnessError::Client)
    }

    fn start_coordinator(&mut self, i: usize, standby: bool) -> Result<(), HarnessError> {
        self.check_thread()?;
        let name = format!("coordinator-{i}");
        let log = self.log_path(&name);
        let mut args = vec![
            "coordinator".to_string(),
            "--listen".into(),
            self.coordinators[i].addr.clone(),
            "--store".into(),
            self.store.clone(),
        ];
        if standby {
            args.push("--standby".into());
        }
        args.extend(self.config.coordinator_args.iter().cloned());
        let mut proc = Proc::spawn(&name, &self.config.ramstore_bin, &args, None, &log)?;
        let timeout = self.config.ready_timeout;
        if standby {
            proc.wait_for_line(coordinator_standing_by, timeout)?;
        } else {
            proc.wait_for_line(coordinator_ready, timeout)?;
            self.active = i;
        }
        self.coordinators[i].proc = Some(proc);
        Ok(())
    }

    fn server_args(&self, i: usize) -> Vec<String> {
        let c = &self.config;
        let slot = &self.servers[i];
        let mut args: Vec<String> = vec![
            "server".into(),
            "--coordinator".into(),
            self.coordinator_addrs(),
            "--listen".into(),
            slot.addr.clone(),
            "--advertise".into(),
            slot.proxy
                .as_ref()
                .map_or(slot.addr.clone(), |p| p.addr().to_string()),
            "--memory".into(),
            c.server_memory.clone(),
            "--replicas".into(),
            c.replicas.to_string(),
            "--backup-dir".into(),
            slot.backup_dir.display().to_string(),
            "--backup-frames".into(),
            c.backup_frames.to_string(),
        ];
        args.extend(c.server_args.iter().cloned());
        args
    }

    /// Starts the servers in `slots` concurrently (a restarted server reloads its
    /// log through recovery before it is ready) and waits for each.
    pub fn start_servers(&mut self, slots: &[usize]) -> Result<(), HarnessError> {
        self.check_thread()?;
        let mut procs = Vec::new();
        for &i in slots {
            let name = format!("server-{i}");
            let log = self.log_path(&name);
            let args = self.server_args(i);
            let ns = self.netns.as_ref().map(|n| n.namespace(i).to_string());
            procs.push((
                i,
                Proc::spawn(&name, &self.config.ramstore_bin, &args, ns.as_deref(), &log)?,
            ));
        }
        let timeout = self.config.ready_timeout;
        for (i, mut proc) in procs {
            let line = proc.wait_for_line(|l| l.starts_with("ramstore server "), timeout)?;
            // "ramstore server ID listening on ADDR ..."; ID is INDEX[.RUN] (a
            // restarted server's next run of its index).
            let id = line
                .split_whitespace()
                .nth(2)
                .and_then(ramstore_client::server_id::parse)
                .ok_or_else(|| HarnessError::NotReady {
                    name: proc.name.clone(),
                    why: format!("no server id in {line:?}"),
                    log: proc.log_tail(),
                })?;
            let slot = &mut self.servers[i];
            slot.id = id;
            slot.starts += 1;
            slot.proc = Some(proc);
        }
        Ok(())
    }

    /// SIGKILLs server `i` (a crash). Its disk stays.
    pub fn kill_server(&mut self, i: usize) {
        if let Some(p) = self.servers[i].proc.as_mut() {
            p.kill();
        }
    }

    /// SIGSTOPs server `i` (hung: pings time out; clients' calls wait).
    pub fn stop_server(&mut self, i: usize) {
        if let Some(p) = self.servers[i].proc.as_mut() {
            p.signal(libc::SIGSTOP);
        }
    }

    /// SIGCONTs server `i`.
    pub fn continue_server(&mut self, i: usize) {
        if let Some(p) = self.servers[i].proc.as_mut() {
            p.signal(libc::SIGCONT);
        }
    }

    fn netns(&self) -> Result<&Netns, HarnessError> {
        self.netns
            .as_ref()
            .ok_or_else(|| HarnessError::Netns("the servers are not in namespaces".into()))
    }

    /// Cuts server `i` off from everything but the servers in `allowed` (its
    /// group), until [`Cluster::heal`].
    pub fn partition_server(&mut self, i: usize, allowed: &[usize]) -> Result<(), HarnessError> {
        let n = self.netns()?;
        let ips: Vec<String> = allowed.iter().map(|&j| n.ip(j)).collect();
        n.partition(i, &ips)
    }

    /// Cuts server `i` off from the coordinators and the other servers while the
    /// client workers still reach it (a zombie that clients can talk to, R§7.11).
    pub fn isolate_from_cluster(&mut self, i: usize) -> Result<(), HarnessError> {
        let n = self.netns()?;
        n.partition(i, &[n.client_ip()])
    }

    /// The client workers' network namespace, when the servers have theirs.
    pub fn clients_namespace(&self) -> Option<&str> {
        self.netns.as_ref().map(|n| n.clients_namespace())
    }

    /// Drops `percent`% of server `i`'s packets each way until [`Cluster::heal`].
    pub fn packet_loss(&mut self, i: usize, percent: u8) -> Result<(), HarnessError> {
        self.netns()?.packet_loss(i, percent)
    }

    /// Removes server `i`'s partition or loss rules.
    pub fn heal(&mut self, i: usize) -> Result<(), HarnessError> {
        self.netns()?.heal(i)
    }

    /// Delays server `i`'s traffic (both ways) by `delay` plus up to `jitter`;
    /// zero heals.
    pub fn delay_server(
        &mut self,
        i: usize,
        delay: Duration,
        jitter: Duration,
    ) -> Result<(), HarnessError> {
        let proxy = self.servers[i]
            .proxy
            .as_ref()
            .ok_or_else(|| HarnessError::Io("the cluster runs without delay proxies".into()))?;
        proxy.set_delay(delay, jitter);
        Ok(())
    }

    /// Fills server `i`'s small disk ([`ClusterConfig::small_disks`]); returns the
    /// bytes the filler took.
    pub fn fill_disk(&mut self, i: usize) -> Result<u64, HarnessError> {
        if self.servers[i].disk.is_none() {
            return Err(HarnessError::Io(
                "full-disk faults need small disks (ClusterConfig::small_disks)".into(),
            ));
        }
        crate::disk::fill(&self.servers[i].backup_dir)
    }

    /// Frees what [`Self::fill_disk`] took on server `i`'s disk.
    pub fn unfill_disk(&mut self, i: usize) -> Result<(), HarnessError> {
        crate::disk::unfill(&self.servers[i].backup_dir)
    }

    /// Whether the servers run in network namespaces.
    pub fn has_netns(&self) -> bool {
        self.netns.is_some()
    }

    /// Whether server `i`'s process is running (not exited; it may be stopped).
    pub fn server_running(&mut self, i: usize) -> bool {
        self.servers[i]
            .proc
            .as_mut()
            .is_some_and(|p| p.try_exited().is_none())
    }

    /// Servers whose processes have ended, with their exit codes (`None`: killed by
    /// a signal).
    pub fn exited_servers(&mut self) -> Vec<(usize, Option<i32>)> {
        let mut out = Vec::new();
        for (i, s) in self.servers.iter_mut().enumerate() {
            if let Some(p) = s.proc.as_mut() {
                if let Some(status) = p.try_exited() {
                    out.push((i, status.code()));
                }
            }
        }
        out
    }

    /// Restarts every server whose process ended, on its address with its disks.
    pub fn restart_exited(&mut self) -> Result<Vec<usize>, HarnessError> {
        let dead: Vec<usize> = self.exited_servers().into_iter().map(|(i, _)| i).collect();
        if !dead.is_empty() {
            self.start_servers(&dead)?;
        }
        Ok(dead)
    }

    /// The index of the active coordinator's slot.
    pub fn active_coordinator(&self) -> usize {
        self.active
    }

    /// SIGKILLs the active coordinator. On etcd the standby takes over (waited
    /// for) and the killed one comes back as the new standby; on a file store it
    /// is restarted in place on its state.
    pub fn kill_coordinator(&mut self) -> Result<(), HarnessError> {
        self.check_thread()?;
        let killed = self.active;
        if let Some(p) = self.coordinators[killed].proc.as_mut() {
            p.kill();
        }
        if self.coordinators.len() == 1 {
            return self.start_coordinator(killed, false);
        }
        let other = 1 - killed;
        let timeout = self.config.ready_timeout;
        let proc = self.coordinators[other]
            .proc
            .as_mut()
            .ok_or(HarnessError::Io("no standby coordinator".into()))?;
        proc.wait_for_line(coordinator_ready, timeout)?;
        self.active = other;
        self.start_coordinator(killed, true)
    }

    /// The coordinator's `key=value` stats (through the client's coordinator list).
    pub fn coordinator_stats(
        &self,
        client: &BlockingClient,
    ) -> Result<BTreeMap<String, String>, HarnessError> {
        let addr = &self.coordinators[self.active].addr;
        let text = client.server_stats(addr).map_err(HarnessError::Client)?;
        Ok(text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    /// Server ids by state word (`up`, `crashed`, `removed`) in the coordinator's
    /// list.
    pub fn server_states(
        &self,
        client: &BlockingClient,
    ) -> Result<BTreeMap<u64, String>, HarnessError> {
        Ok(self
            .coordinator_stats(client)?
            .iter()
            .filter_map(|(k, v)| {
                let id = k.strip_prefix("server.")?.parse().ok()?;
                Some((id, v.split_whitespace().nth(1)?.to_string()))
            })
            .collect())
    }

    /// Waits until the cluster is whole again: every slot's process runs and is
    /// UP, no server is CRASHED and no recovery is in progress. Servers that exited
    /// meanwhile (zombies) are restarted. Returns how long it took.
    pub fn wait_healthy(
        &mut self,
        client: &BlockingClient,
        patience: Duration,
    ) -> Result<Duration, HarnessError> {
        let start = Instant::now();
        loop {
            self.restart_exited()?;
            let healthy = match self.coordinator_stats(client) {
                Ok(stats) => {
                    let states: BTreeMap<u64, &str> = stats
                        .iter()
                        .filter_map(|(k, v)| {
                            let id = k.strip_prefix("server.")?.parse().ok()?;
                            Some((id, v.split_whitespace().nth(1)?))
                        })
                        .collect();
                    let no_recovery = !stats.keys().any(|k| k.starts_with("recovery."));
                    let none_crashed = !states.values().any(|s| *s == "crashed");
                    let all_up = self
                        .servers
                        .iter()
                        .all(|s| states.get(&s.id) == Some(&"up"));
                    no_recovery && none_crashed && all_up
                }
                Err(_) => false,
            };
            if healthy {
                return Ok(start.elapsed());
            }
            if start.elapsed() > patience {
                return Err(HarnessError::Timeout {
                    what: format!("the cluster to become healthy within {patience:?}"),
                    logs: self.log_tails(),
                });
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ids of servers that own tablets (masters) and of those that own none, from
    /// the tablet map.
    pub fn masters(&self, client: &BlockingClient) -> Result<Vec<u64>, HarnessError> {
        let mut ids: Vec<u64> = client
            .tablet_map()
            .map_err(HarnessError::Client)?
            .into_iter()
            .map(|t| t.server_id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// The slot of the server with id `id`, if one of the current processes has it.
    pub fn slot_of(&self, id: u64) -> Option<usize> {
        self.servers.iter().position(|s| s.id == id)
    }

    /// The tail of every process's log, for failure reports.
    pub fn log_tails(&self) -> String {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(self.dir.join("logs"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        paths.sort();
        paths
            .iter()
            .map(|p| crate::process::log_tail(p, crate::process::LOG_TAIL_LINES))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// etcd's client address, when the coordinators use etcd.
    pub fn etcd_addr(&self) -> Option<&str> {
        self.etcd.as_ref().map(|e| e.client_addr.as_str())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for s in &mut self.servers {
            if let Some(p) = s.proc.as_mut() {
                p.kill();
            }
        }
        for c in &mut self.coordinators {
            if let Some(p) = c.proc.as_mut() {
                p.kill();
            }
        }
        if let Some(e) = self.etcd.as_mut() {
            e.kill();
        }
    }
}

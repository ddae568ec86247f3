//! The simulated cluster: one coordinator over an in-process external store, and
//! storage servers (master + backup on a simulated disk) started, crashed and
//! restarted by the fault schedule.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use ramstore_backup::{BackupConfig, BackupStore, Disk, FaultPlan, FaultyDisk, SyncMode};
use ramstore_clock::{Clock, Rng, SeededRng};
use ramstore_coordinator::{
    CoordinatorCore, CoordinatorService, ExternalStorage, FailureDetectorConfig, MemoryStorage,
    StorageError,
};
use ramstore_master::{CleanerMode, StoreConfig};
use ramstore_server::{
    placement::Placement, start_in_process, BackupService, Blocking, InProcessParts,
    InProcessServer, ServerOptions, ZombieHook,
};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::clock::SimClock;
use crate::cost::Costs;
use crate::disk::SparseDisk;
use crate::net::SimNet;
use crate::topology::Topology;
use crate::trace::{Kind, Trace};

/// The coordinator's address.
pub const COORDINATOR: &str = "coord";

/// Segment size in the simulation: small, so a hundred servers' backups fit in
/// memory.
pub const SIM_SEGMENT_BYTES: usize = 128 * 1024;
/// Frames per simulated backup disk. 64 let a 4-server run's backups fill up
/// with side segments and tenure heads (nothing is cleaned here), so a
/// migration's side logs never got R replicas and it stayed `Pulling`
/// (`run_migrations_without_faults_keep_every_seed_linearizable`, seed 1, after
/// tablet ctimes; session 32). 256 is over the backup's open-buffer limit.
pub const SIM_BACKUP_FRAMES: u32 = 128;
/// Log memory per master: room for the workload without cleaning (the cleaner
/// runs on a thread, and its passes wait for replication, so the simulation
/// never cleans; L§4 is tested elsewhere).
pub const SIM_MEMORY_BYTES: usize = 16 << 20;

/// What each simulated server is given: log memory, segment size and backup
/// frames (issue 22: large clusters give each server little, so 1,000 fit in
/// one process). What a server costs in resident memory is the log and hash
/// table pages it touches (both mapped lazily), the backup chunks written
/// ([`SparseDisk`]) and the open replicas' buffers — so it follows the data it
/// holds, not these sizes (docs/operations.md, "Simulating large clusters").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerShape {
    /// Log memory per master.
    pub memory_bytes: usize,
    /// Log memory of host 0 if set (the one master loaded with data in the
    /// recovery-scaling experiment), else `memory_bytes`.
    pub first_memory_bytes: Option<usize>,
    pub segment_bytes: usize,
    pub backup_frames: u32,
}

impl ServerShape {
    /// Why servers of this shape could not start, if they could not: the log
    /// takes segments of whole 64 KiB seglets, at least two (L§5.1), and a
    /// backup needs a frame or more.
    pub fn check(&self) -> Result<(), String> {
        let seglet = ramstore_log::SEGLET_BYTES;
        if !self.segment_bytes.is_multiple_of(seglet) || self.segment_bytes < 2 * seglet {
            return Err(format!(
                "segments must be a multiple of {} KiB and at least {} KiB, not {} bytes",
                seglet >> 10,
                (2 * seglet) >> 10,
                self.segment_bytes
            ));
        }
        let least = 8 * self.segment_bytes;
        if self
            .memory_bytes
            .min(self.first_memory_bytes.unwrap_or(usize::MAX))
            < least
        {
            return Err(format!(
                "log memory must hold at least 8 segments ({least} bytes)"
            ));
        }
        if self.backup_frames == 0 {
            return Err("a backup needs at least one frame".into());
        }
        Ok(())
    }
}

impl Default for ServerShape {
    /// The sizes every run had before issue 22 (seeds keep their traces).
    fn default() -> Self {
        Self {
            memory_bytes: SIM_MEMORY_BYTES,
            first_memory_bytes: None,
            segment_bytes: SIM_SEGMENT_BYTES,
            backup_frames: SIM_BACKUP_FRAMES,
        }
    }
}

/// The etcd store as the coordinator sees it (R§9): writes are fenced by the
/// leader's epoch, so a deposed coordinator's leftover tasks cannot overwrite its
/// successor's state, as etcd's conditional transactions ensure.
struct FencedStorage {
    inner: Arc<MemoryStorage>,
    leader: Arc<AtomicU64>,
    epoch: u64,
}

impl FencedStorage {
    fn check(&self) -> Result<(), StorageError> {
        if self.leader.load(Ordering::SeqCst) == self.epoch {
            Ok(())
        } else {
            Err(StorageError::NotLeader {
                reason: "a newer coordinator took over (simulated failover)".into(),
            })
        }
    }
}

impl ExternalStorage for FencedStorage {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.get(key)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        self.check()?;
        self.inner.put(key, value)
    }
    fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.check()?;
        self.inner.delete(key)
    }
    fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        self.inner.list(prefix)
    }
}

struct Coordinator {
    service: Arc<CoordinatorService>,
    tasks: Vec<JoinHandle<()>>,
}

/// One server slot: a host whose process is started, crashed and restarted.
struct Slot {
    /// Incarnations started on this host so far.
    incarnation: u64,
    running: Option<InProcessServer>,
    /// Being started (enlisting).
    starting: bool,
    /// The disk of the current incarnation (slow and full disk faults).
    disk: Option<Arc<FaultyDisk<SparseDisk>>>,
    /// Set by the zombie hook: the coordinator declared this incarnation crashed.
    zombie: Arc<AtomicBool>,
}

/// Counts for the summary.
#[derive(Debug, Default)]
pub struct ClusterStats {
    pub starts: AtomicU64,
    pub crashes: AtomicU64,
    pub failovers: AtomicU64,
    /// Recoveries finished by coordinators since replaced.
    pub recoveries_before: AtomicU64,
    pub start_failures: AtomicU64,
}

/// The cluster (see the module doc).
pub struct Cluster {
    pub clock: Arc<SimClock>,
    pub net: Arc<SimNet>,
    pub trace: Arc<Trace>,
    rng: Arc<dyn Rng>,
    storage: Arc<MemoryStorage>,
    leader: Arc<AtomicU64>,
    coordinator: Mutex<Option<Coordinator>>,
    slots: Mutex<Vec<Slot>>,
    /// Replicas per segment (R).
    pub replicas: usize,
    pub stats: ClusterStats,
    shape: ServerShape,
    /// Where each host sits and how its master places replicas (issue 22);
    /// flat and scattered unless [`Cluster::set_layout`] says otherwise.
    layout: Mutex<Layout>,
}

/// One master's replica places: its host, its server id, and each segment's
/// backups by server id (first placed first).
pub type MasterPlaces = (usize, u64, Vec<(u64, Vec<u64>)>);

/// The network topology and the placement rule servers start with.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    pub topology: Topology,
    pub placement: Placement,
    /// Recovery masters chosen near the crashed log's holders (C§4.2); the
    /// coordinator and its successors are told at start.
    pub recovery_near: bool,
}

impl Cluster {
    /// A cluster of `servers` hosts (none started) and no coordinator yet.
    pub fn new(
        clock: Arc<SimClock>,
        rng: Arc<dyn Rng>,
        trace: Arc<Trace>,
        servers: usize,
        lying_backups: bool,
        shape: ServerShape,
        costs: Arc<Costs>,
    ) -> Arc<Self> {
        let net = SimNet::with_costs(
            clock.clone(),
            Arc::new(SeededRng::new(rng.next_u64())),
            trace.clone(),
            lying_backups,
            costs,
        );
        let slots = (0..servers)
            .map(|_| Slot {
                incarnation: 0,
                running: None,
                starting: false,
                disk: None,
                zombie: Arc::new(AtomicBool::new(false)),
            })
            .collect();
        Arc::new(Self {
            clock,
            net,
            trace,
            rng,
            storage: Arc::new(MemoryStorage::new()),
            leader: Arc::new(AtomicU64::new(0)),
            coordinator: Mutex::new(None),
            slots: Mutex::new(slots),
            replicas: servers.saturating_sub(1).min(3),
            stats: ClusterStats::default(),
            shape,
            layout: Mutex::new(Layout::default()),
        })
    }

    /// Sets the topology and placement rule for servers started from now on
    /// (each enlists with its host's failure-domain field, C§3).
    pub fn set_layout(&self, layout: Layout) {
        *self.layout.lock() = layout;
    }

    /// The topology servers are placed in.
    pub fn topology(&self) -> Topology {
        self.layout.lock().topology.clone()
    }

    fn child_rng(&self) -> Arc<dyn Rng> {
        SeededRng::handle(self.rng.next_u64())
    }

    /// Starts a coordinator (the first, or a successor after a failover) over the
    /// shared store: it reads the state its predecessor left and reissues what
    /// that one may not have finished (R§9).
    pub fn start_coordinator(&self) {
        let epoch = self.leader.fetch_add(1, Ordering::SeqCst) + 1;
        let storage = Arc::new(FencedStorage {
            inner: self.storage.clone(),
            leader: self.leader.clone(),
            epoch,
        });
        // The store is in memory and was written whole by a fenced leader: it
        // always opens. (A failure here would be a simulator bug, reported.)
        let core = CoordinatorCore::open(storage).expect("the simulated store opens");
        let endpoint = self.net.endpoint(COORDINATOR, epoch);
        let clock: Arc<dyn Clock> = self.clock.clone();
        let service = CoordinatorService::new(core, endpoint, clock, self.child_rng());
        service
            .recoveries()
            .set_near(self.layout.lock().recovery_near);
        self.net.register(COORDINATOR, epoch, service.clone());
        let tasks = vec![
            tokio::spawn(service.clone().retry_loop()),
            tokio::spawn(
                service
                    .clone()
                    .failure_detector_loop(FailureDetectorConfig::default()),
            ),
            tokio::spawn(service.clone().recovery_loop()),
        ];
        self.trace
            .event(self.clock.elapsed_ns(), Kind::Start, COORDINATOR, "", epoch);
        *self.coordinator.lock() = Some(Coordinator { service, tasks });
    }

    /// Coordinator failover: the active coordinator dies and a standby takes over
    /// the same store at once (its lease had expired, R§9).
    pub fn fail_over_coordinator(&self) {
        self.net.crash(COORDINATOR);
        if let Some(old) = self.coordinator.lock().take() {
            for t in &old.tasks {
                t.abort();
            }
            self.stats
                .recoveries_before
                .fetch_add(old.service.recoveries().completed(), Ordering::Relaxed);
        }
        self.stats.failovers.fetch_add(1, Ordering::Relaxed);
        self.start_coordinator();
    }

    /// The active coordinator's service.
    pub fn coordinator(&self) -> Option<Arc<CoordinatorService>> {
        self.coordinator.lock().as_ref().map(|c| c.service.clone())
    }

    /// Recoveries the active coordinator is running.
    pub fn recoveries_in_progress(&self) -> usize {
        self.coordinator()
            .map_or(0, |c| c.recoveries().in_progress().len())
    }

    /// Crash recoveries finished by every coordinator so far.
    pub fn recoveries_completed(&self) -> u64 {
        self.stats.recoveries_before.load(Ordering::Relaxed)
            + self.coordinator().map_or(0, |c| c.recoveries().completed())
    }

    /// Hosts in the cluster.
    pub fn hosts(&self) -> usize {
        self.slots.lock().len()
    }

    /// The address of host `i`'s incarnation `n`.
    pub fn address(i: usize, n: u64) -> String {
        format!("s{i}.{n}")
    }

    /// Whether host `i` runs (or is starting) a server that is not a zombie.
    pub fn is_up(&self, i: usize) -> bool {
        let slots = self.slots.lock();
        let s = &slots[i];
        (s.running.is_some() || s.starting) && !s.zombie.load(Ordering::SeqCst)
    }

    /// Hosts whose server was declared crashed while it ran (zombies, R§7.11).
    pub fn zombies(&self) -> Vec<usize> {
        let slots = self.slots.lock();
        (0..slots.len())
            .filter(|&i| slots[i].running.is_some() && slots[i].zombie.load(Ordering::SeqCst))
            .collect()
    }

    /// Starts a new incarnation on host `i` (a fresh server on an empty disk,
    /// enlisting under a new id, R§7.3); enlistment finishes in the background.
    pub fn start_server(self: &Arc<Self>, i: usize) {
        let (address, incarnation, zombie, disk) = {
            let mut slots = self.slots.lock();
            let s = &mut slots[i];
            if s.running.is_some() || s.starting {
                return;
            }
            s.incarnation += 1;
            s.starting = true;
            s.zombie = Arc::new(AtomicBool::new(false));
            let clock: Arc<dyn Clock> = self.clock.clone();
            let disk = Arc::new(FaultyDisk::with_clock(SparseDisk::new(), clock));
            s.disk = Some(disk.clone());
            (
                Self::address(i, s.incarnation),
                s.incarnation,
                s.zombie.clone(),
                disk,
            )
        };
        let me = self.clone();
        tokio::spawn(async move {
            // Its tasks (replicator, failure monitor) keep this span: their
            // logs name the server (`server=s1.1`).
            let span = tracing::info_span!(parent: None, "server", server = %address);
            let result = me
                .launch(i, &address, incarnation, zombie, disk)
                .instrument(span)
                .await;
            let mut slots = me.slots.lock();
            let s = &mut slots[i];
            s.starting = false;
            match result {
                // Crashed while enlisting: the new server dies with it.
                Ok(mut server) if s.incarnation != incarnation => server.abort(),
                Ok(server) => {
                    me.stats.starts.fetch_add(1, Ordering::Relaxed);
                    me.trace.event(
                        me.clock.elapsed_ns(),
                        Kind::Start,
                        &address,
                        "",
                        server.service.server_id(),
                    );
                    s.running = Some(server);
                }
                Err(_) => {
                    me.stats.start_failures.fetch_add(1, Ordering::Relaxed);
                    me.net.crash(&address);
                }
            }
        });
    }

    async fn launch(
        &self,
        host: usize,
        address: &str,
        incarnation: u64,
        zombie: Arc<AtomicBool>,
        disk: Arc<FaultyDisk<SparseDisk>>,
    ) -> Result<InProcessServer, ramstore_server::ServerError> {
        let clock: Arc<dyn Clock> = self.clock.clone();
        let shape = self.shape;
        let memory_bytes = match (host, shape.first_memory_bytes) {
            (0, Some(first)) => first,
            _ => shape.memory_bytes,
        };
        let mut options = ServerOptions::new(COORDINATOR);
        options.memory_bytes = memory_bytes;
        options.replicas = self.replicas;
        {
            let layout = self.layout.lock();
            options.failure_domain = layout.topology.field(host);
            options.placement = layout.placement;
        }
        options.clock = clock.clone();
        options.rng = self.child_rng();
        options.on_zombie = Some(ZombieHook(Arc::new(move || {
            zombie.store(true, Ordering::SeqCst)
        })));
        let config = BackupConfig {
            frame_count: shape.backup_frames,
            segment_bytes: u32::try_from(shape.segment_bytes).unwrap_or(u32::MAX),
            max_open_buffers: shape.backup_frames.min(ramstore_backup::MAX_OPEN_BUFFERS),
            sync_mode: SyncMode::Buffered,
        };
        let store =
            BackupStore::create(Box::new(disk) as Box<dyn Disk>, config).map_err(|error| {
                ramstore_server::ServerError::Backup {
                    dir: address.into(),
                    error,
                }
            })?;
        let mut store_config = StoreConfig::new(memory_bytes);
        store_config.segment_bytes = shape.segment_bytes;
        store_config.cleaner = CleanerMode::Manual;
        let parts = InProcessParts {
            transport: self.net.endpoint(address, incarnation),
            address: address.to_string(),
            backup: Some(BackupService::new(store)),
            store: store_config,
            blocking: Blocking::Inline,
            backup_read_mbps: 100,
        };
        let net = self.net.clone();
        start_in_process(&options, parts, |service| {
            net.register(address, incarnation, service)
        })
        .await
    }

    /// Host `i`'s server crashes: no flush, no goodbye; its disk is gone with it
    /// (a replaced machine), so only other backups hold its data.
    pub fn crash_server(&self, i: usize) {
        let mut slots = self.slots.lock();
        let s = &mut slots[i];
        let address = Self::address(i, s.incarnation);
        self.net.crash(&address);
        if let Some(mut server) = s.running.take() {
            server.abort();
        }
        // A start in progress finds the incarnation moved on and gives up.
        s.incarnation += 1;
        s.starting = false;
        s.disk = None;
        self.stats.crashes.fetch_add(1, Ordering::Relaxed);
    }

    /// Sets a fault plan on host `i`'s disk (slow or full), if it runs.
    pub fn set_disk_plan(&self, i: usize, plan: FaultPlan) {
        if let Some(d) = &self.slots.lock()[i].disk {
            d.set_plan(plan);
        }
    }

    /// The host whose running server enlisted as `server_id`, if any (a
    /// migration record names servers by id; the fault schedule crashes hosts).
    pub fn host_of(&self, server_id: u64) -> Option<usize> {
        let slots = self.slots.lock();
        (0..slots.len()).find(|&i| {
            slots[i]
                .running
                .as_ref()
                .is_some_and(|s| s.service.server_id() == server_id)
        })
    }

    /// The migrations in progress as the active coordinator's core records
    /// them (empty while no coordinator runs).
    pub fn migrations_in_progress(&self) -> Vec<ramstore_coordinator::migrations::MigrationRecord> {
        self.coordinator()
            .map_or_else(Vec::new, |c| c.with_core(|core| core.migrations()))
    }

    /// The owner of the tablet of `table_id` that is exactly `[start, end]`, as
    /// the active coordinator records it; `None` if no tablet is exactly that
    /// range (or no coordinator runs).
    pub fn owner_of(&self, table_id: u64, start: u64, end: u64) -> Option<u64> {
        self.coordinator()?.with_core(|core| {
            core.state()
                .tables()
                .tablets()
                .find(|t| t.table_id == table_id && t.start_hash == start && t.end_hash == end)
                .map(|t| t.server_id.0)
        })
    }

    /// Every running master's replica places: (host, its server id, each
    /// segment's backups by server id, first placed first).
    pub fn replica_places(&self) -> Vec<MasterPlaces> {
        let slots = self.slots.lock();
        (0..slots.len())
            .filter_map(|i| {
                let server = slots[i].running.as_ref()?;
                let places = server.service.replicas()?.replica_places();
                Some((i, server.service.server_id(), places))
            })
            .collect()
    }

    /// Hosts whose server runs now.
    pub fn running(&self) -> Vec<usize> {
        let slots = self.slots.lock();
        (0..slots.len())
            .filter(|&i| slots[i].running.is_some())
            .collect()
    }
}

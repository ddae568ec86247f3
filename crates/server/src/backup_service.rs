//! The backup half of a storage server (R§2, docs/design.md §2): the four backup opcodes
//! served from a [`BackupStore`] over one frames file (R§4.2, R§7.4, R§8).
//!
//! # Files
//!
//! The store lives in `<backup_dir>/replicas.frames` ([`FRAMES_FILE`]). A new file
//! is made under a temporary name, formatted, synced and only then renamed into
//! place, so a crash during the format never leaves a half-made file that a restart
//! would take for a frames file of the wrong size. An existing file is reopened
//! with [`BackupStore::open_existing`], which keeps the replicas that are still
//! valid; what it found is logged.
//!
//! # Fast and slow path
//!
//! Pings must stay fast while backups write (docs/design.md §6). So a request that may
//! block on the disk — a close (writes up to a whole segment, then syncs), any write
//! in [`SyncMode::Fsync`], a write larger than [`MAX_FAST_BACKUP_WRITE_BYTES`], a
//! free, a replica list or a replica read — runs on the blocking pool (the storage
//! service's slow path). Only small writes (and opens) in [`SyncMode::Buffered`],
//! which copy bytes into an in-memory buffer, are served on the task that read
//! them.
//!
//! A replica's operations are serialized by its lock inside the store, so a
//! fast-path write to a replica whose close is still running on the slow path
//! would wait for that close. A master therefore keeps at most one RPC in flight per
//! replica (as RAMCloud's replica manager does); the protocol needs nothing more,
//! since every operation is idempotent (a resent request changes nothing).
//!
//! # Statuses
//!
//! | outcome | status |
//! | --- | --- |
//! | no free buffer or frame, disk out of space (ENOSPC) ([`BackupError::is_full`]) | NO_SPACE: place the replica elsewhere (R§7.1) |
//! | replica not held, or open in atomic mode (never offered, R§8) | OBJECT_DOESNT_EXIST |
//! | gap, past the frame, closed replica, atomic mismatch | INVALID_REQUEST |
//! | disk failure, corrupt replica | INTERNAL |
//! | write from a master declared crashed or removed (zombie fence) | SERVER_NOT_UP |
//!
//! # Zombie fence and restart retention (R§7.11, R§8)
//!
//! The coordinator's server list reaches the backup through
//! [`BackupService::apply_server_list`] (called for every ServerListUpdate; lists
//! only ever move a server forward, Up → Crashed → Removed, so applying an old or a
//! repeated list changes nothing).
//!
//! - **Zombie fence (R§7.11).** A master the list shows Crashed or Removed is
//!   fenced for good: every BackupWrite from it (open, write or close) is refused
//!   with SERVER_NOT_UP, "master N crashed; its replication is refused (zombie
//!   fence)". A master that gets this knows it has been declared dead. Frees, replica
//!   lists and replica reads stay allowed: recovery reads a crashed master's
//!   replicas. (A write already past the check when the list arrives may still
//!   complete; every write after the list has been applied is refused.)
//! - **Retention after a restart (R§8).** The replicas found on disk when the
//!   service starts are kept or freed by their master's state in each list
//!   received: Crashed → kept (recovery needs them); Up → kept (the master
//!   re-replicates the segment elsewhere, since this backup came back under a new
//!   id, and frees this replica itself); Removed → freed (recovered or gone: nobody
//!   will read it), each one logged; absent from the list → kept, with a warning.
//!   Nothing is decided before the first list arrives. The frees write the disk, so
//!   they run on the blocking pool, like a BackupFree. A replica kept because its
//!   master was Crashed is freed by the first list that shows the master Removed.
//!
//! Thread-safety: `Send + Sync`, like the store. Durability: the store's contract
//! (crate `ramstore-backup`), chosen by [`SyncMode`].

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::backup_recovery::{BackupRecoveries, Fetched, MAX_RECOVERY_PARTITIONS};
use crate::blocking::Blocking;

use parking_lot::{Mutex, RwLock};

use ramstore_backup::{
    BackupConfig, BackupError, BackupStats, BackupStore, Disk, FileDisk, RestartSummary, SyncMode,
};
use ramstore_wire::{
    encode_response, BackupReplicasEncoder, BackupWriteFlags, ErrorBody, Opcode, Request, Response,
    Status, WireError,
};

/// Name of the frames file inside the backup directory.
pub const FRAMES_FILE: &str = "replicas.frames";
/// Name a new frames file has while it is being formatted.
const FRAMES_FILE_NEW: &str = "replicas.frames.new";
/// Largest BackupWrite served on the reading task (buffered mode, no close): copying
/// and checksumming 64 KiB takes microseconds, far inside the ping budget. Group
/// commits are usually much smaller; whole segments (re-replication) go slow.
pub const MAX_FAST_BACKUP_WRITE_BYTES: usize = 64 * 1024;
/// The delay a recovery master is asked to wait for a replica still being read.
const RECOVERY_DATA_RETRY_MS: u32 = 2;

/// A store whose disk is chosen at run time (defined beside the bucketing that
/// reads it, [`crate::backup_recovery`]).
pub use crate::backup_recovery::ServerBackupStore;

/// A server's state in the coordinator's server list, as the backup acts on it
/// (R§7.3; see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerState {
    Up,
    Crashed,
    Removed,
}

impl From<ramstore_wire::ServerStatus> for ServerState {
    fn from(s: ramstore_wire::ServerStatus) -> Self {
        match s {
            ramstore_wire::ServerStatus::Up => ServerState::Up,
            ramstore_wire::ServerStatus::Crashed => ServerState::Crashed,
            ramstore_wire::ServerStatus::Removed => ServerState::Removed,
        }
    }
}

/// The backup service of one storage server.
pub struct BackupService {
    /// Shared with the restart-retention frees running on the blocking pool.
    store: Arc<ServerBackupStore>,
    /// The frames file, if the store is one.
    path: Option<PathBuf>,
    /// Masters shown Crashed or Removed (R§7.11), each with whether a refusal of its
    /// writes was logged yet. Only grows.
    fenced: RwLock<HashMap<u64, AtomicBool>>,
    /// Writes refused by the fence.
    fenced_writes: AtomicU64,
    retention: Arc<Retention>,
    /// Replicas of crashed masters being bucketed for recovery (R§7.5).
    recoveries: BackupRecoveries,
    /// Where retention frees run (the blocking pool, or inline in a simulation).
    blocking: Blocking,
}

/// What is left to decide about the replicas found at start-up (R§8).
#[derive(Debug, Default)]
struct Retention {
    /// Replicas (master id, segment id) found at start-up, still held, and not yet
    /// freed or being freed.
    replicas: Mutex<BTreeSet<(u64, u64)>>,
    /// Masters absent from a list whose replicas were kept (warned about once).
    warned_absent: Mutex<BTreeSet<u64>>,
    /// Replicas freed because their master was Removed.
    frees: AtomicU64,
}

impl Retention {
    /// Frees `replicas` (of Removed masters); one that cannot be freed now goes back
    /// to the undecided set, so the next list tries again.
    fn free(&self, store: &ServerBackupStore, replicas: Vec<(u64, u64)>) {
        for (master_id, segment_id) in replicas {
            match store.free(master_id, segment_id) {
                Ok(()) => {
                    self.frees.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        master_id,
                        segment_id,
                        "freed a replica: its master is removed (R§8)"
                    );
                }
                // Freed meanwhile (by a BackupFree): nothing left to do.
                Err(BackupError::UnknownReplica { .. }) => {}
                Err(e) => {
                    tracing::warn!(
                        master_id,
                        segment_id,
                        error = %e,
                        "cannot free a replica of a removed master; will try again with the next server list"
                    );
                    self.replicas.lock().insert((master_id, segment_id));
                }
            }
        }
    }
}

impl std::fmt::Debug for BackupService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupService")
            .field("path", &self.path)
            .field("store", &self.store)
            .finish()
    }
}

impl BackupService {
    /// A service over an open store (tests use an in-memory disk). The replicas the
    /// store holds now count as found at start-up (see the module doc).
    pub fn new(store: ServerBackupStore) -> Self {
        Self::over(store, None)
    }

    fn over(store: ServerBackupStore, path: Option<PathBuf>) -> Self {
        let found = store
            .list()
            .into_iter()
            .map(|r| (r.master_id, r.segment_id))
            .collect();
        Self {
            store: Arc::new(store),
            path,
            fenced: RwLock::new(HashMap::new()),
            fenced_writes: AtomicU64::new(0),
            retention: Arc::new(Retention {
                replicas: Mutex::new(found),
                ..Retention::default()
            }),
            recoveries: BackupRecoveries::default(),
            blocking: Blocking::Pool,
        }
    }

    /// Opens `<dir>/replicas.frames`, creating the directory and a formatted file
    /// if there is none. Returns the restart summary when an existing file was
    /// reopened. Blocks for the format or the restart scan (which reads every kept
    /// replica once).
    pub fn open(
        dir: &Path,
        config: BackupConfig,
    ) -> Result<(Self, Option<RestartSummary>), BackupError> {
        config.validate()?;
        std::fs::create_dir_all(dir).map_err(io_error("creating the backup directory"))?;
        let path = dir.join(FRAMES_FILE);
        // `try_exists`, not `exists`: a file that cannot be looked at must not be
        // taken for a missing one and replaced by a new, empty store.
        let exists = path
            .try_exists()
            .map_err(io_error("looking for the frames file"))?;
        if exists {
            let disk = FileDisk::open(&path).map_err(io_error("opening the frames file"))?;
            let (store, summary) =
                BackupStore::open_existing(Box::new(disk) as Box<dyn Disk>, config)?;
            return Ok((Self::over(store, Some(path)), Some(summary)));
        }
        let new_path = dir.join(FRAMES_FILE_NEW);
        // Left over from a crash during an earlier format: it never held replicas.
        match std::fs::remove_file(&new_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io_error("removing an unfinished frames file")(e))
            }
            _ => {}
        }
        let disk = FileDisk::create(&new_path, config.file_bytes())
            .map_err(io_error("creating the frames file"))?;
        let store = BackupStore::create(Box::new(disk) as Box<dyn Disk>, config)?;
        std::fs::rename(&new_path, &path).map_err(io_error("naming the frames file"))?;
        // The rename is durable once the directory is synced.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error("syncing the backup directory"))?;
        Ok((Self::over(store, Some(path)), None))
    }

    /// The same service running its blocking work (bucketing for recovery,
    /// retention frees) as `blocking` says: inline in a simulation.
    pub fn with_blocking(mut self, blocking: Blocking) -> Self {
        self.blocking = blocking;
        self.recoveries = BackupRecoveries::with_blocking(blocking);
        self
    }

    /// The replica store.
    pub fn store(&self) -> &ServerBackupStore {
        &self.store
    }

    /// The frames file, when the store is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The store's counters.
    pub fn stats(&self) -> BackupStats {
        self.store.stats()
    }

    /// Acts on the coordinator's server list `servers` (server id, state): fences
    /// the masters that are Crashed or Removed, and frees the replicas found at
    /// start-up whose master is Removed (on the blocking pool when called inside a
    /// Tokio runtime, else before returning). Idempotent; see the module doc.
    pub fn apply_server_list(&self, servers: &[(u64, ServerState)]) {
        let dead: Vec<u64> = {
            let fenced = self.fenced.read();
            servers
                .iter()
                .filter(|(id, state)| *state != ServerState::Up && !fenced.contains_key(id))
                .map(|(id, _)| *id)
                .collect()
        };
        if !dead.is_empty() {
            let mut fenced = self.fenced.write();
            for id in dead {
                if fenced.insert(id, AtomicBool::new(false)).is_none() {
                    tracing::info!(
                        master_id = id,
                        "master crashed or removed: its replication is refused from now on (zombie fence)"
                    );
                }
            }
        }

        let removed: Vec<u64> = servers
            .iter()
            .filter(|(_, state)| *state == ServerState::Removed)
            .map(|(id, _)| *id)
            .collect();
        self.recoveries.forget(&removed);

        let states: HashMap<u64, ServerState> = servers.iter().copied().collect();
        let mut to_free = Vec::new();
        let mut absent = BTreeSet::new();
        {
            let mut replicas = self.retention.replicas.lock();
            replicas.retain(|&(master_id, segment_id)| {
                // Freed by its master meanwhile: nothing to decide.
                if self.store.info(master_id, segment_id).is_none() {
                    return false;
                }
                match states.get(&master_id) {
                    Some(ServerState::Removed) => {
                        to_free.push((master_id, segment_id));
                        false
                    }
                    Some(ServerState::Up | ServerState::Crashed) => true,
                    None => {
                        absent.insert(master_id);
                        true
                    }
                }
            });
        }
        if !absent.is_empty() {
            let mut warned = self.retention.warned_absent.lock();
            for master_id in absent {
                if warned.insert(master_id) {
                    tracing::warn!(
                        master_id,
                        "replicas found at start-up belong to a master the server list does not know; keeping them"
                    );
                }
            }
        }
        // Replicas written in this run by masters since removed (recovered, or
        // replaced): nothing will ever read them (R§8).
        if !removed.is_empty() {
            let removed: BTreeSet<u64> = removed.iter().copied().collect();
            to_free.extend(
                self.store
                    .list()
                    .into_iter()
                    .filter(|r| removed.contains(&r.master_id))
                    .map(|r| (r.master_id, r.segment_id)),
            );
            to_free.sort_unstable();
            to_free.dedup();
        }
        if to_free.is_empty() {
            return;
        }
        let store = Arc::clone(&self.store);
        let retention = Arc::clone(&self.retention);
        self.blocking.spawn(move || retention.free(&store, to_free));
    }

    /// Whether writes from `master_id` are refused (R§7.11); counts and logs (once
    /// per master) a refusal.
    fn refuses_writes_from(&self, master_id: u64) -> bool {
        let fenced = self.fenced.read();
        let Some(logged) = fenced.get(&master_id) else {
            return false;
        };
        self.fenced_writes.fetch_add(1, Ordering::Relaxed);
        if !logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                master_id,
                "refused a write from a master declared crashed (zombie fence)"
            );
        }
        true
    }

    /// Writes refused by the zombie fence so far.
    pub fn fenced_writes(&self) -> u64 {
        self.fenced_writes.load(Ordering::Relaxed)
    }

    /// Replicas found at start-up that were freed because their master was
    /// Removed, so far.
    pub fn retention_frees(&self) -> u64 {
        self.retention.frees.load(Ordering::Relaxed)
    }

    /// Whether `req` (a backup request) may be answered on the task that read it:
    /// only when it cannot block on the disk (see the module doc).
    pub(crate) fn is_fast(&self, req: &Request<'_>) -> bool {
        match req {
            Request::BackupWrite { flags, bytes, .. } => {
                self.store.config().sync_mode == SyncMode::Buffered
                    && !flags.close
                    && bytes.len() <= MAX_FAST_BACKUP_WRITE_BYTES
            }
            _ => false,
        }
    }

    /// Answers a backup request by appending its response frame to `out`. Every
    /// operation is idempotent, so a master may resend a request whose answer it
    /// lost: opening an open replica, rewriting bytes already held, closing a closed
    /// replica with the same closing write, and freeing a replica not held all
    /// succeed without effect.
    pub(crate) fn answer(
        &self,
        id: u64,
        req: &Request<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let op = req.opcode();
        if let Request::BackupWrite { master_id, .. } = *req {
            if self.refuses_writes_from(master_id) {
                let message = format!(
                    "master {master_id} crashed; its replication is refused (zombie fence)"
                );
                return encode_response(
                    id,
                    op,
                    &Response::Error(ErrorBody::Message {
                        status: Status::ServerNotUp,
                        message: &message,
                    }),
                    out,
                );
            }
        }
        let result = match *req {
            Request::BackupWrite {
                master_id,
                segment_id,
                offset,
                flags,
                bytes,
            } => self
                .write(master_id, segment_id, offset, flags, bytes)
                .map(|()| encode_response(id, op, &Response::BackupWrite, out)),
            Request::BackupFree {
                master_id,
                segment_id,
            } => match self.store.free(master_id, segment_id) {
                Ok(()) | Err(BackupError::UnknownReplica { .. }) => {
                    Ok(encode_response(id, op, &Response::BackupFree, out))
                }
                Err(e) => Err(e),
            },
            Request::BackupGetReplicas { master_id } => Ok(self.get_replicas(id, master_id, out)),
            Request::BackupStartPartitioning {
                master_id,
                recovery_id,
                tablets,
            } => Ok(self.start_partitioning(id, master_id, recovery_id, tablets, out)),
            Request::BackupGetRecoveryData {
                master_id,
                recovery_id,
                segment_id,
                partition_id,
            } => Ok(self.recovery_data(id, master_id, recovery_id, segment_id, partition_id, out)),
            Request::BackupReadReplica {
                master_id,
                segment_id,
            } => self
                .read_replica(master_id, segment_id)
                .map(|(closed, bytes)| {
                    encode_response(
                        id,
                        op,
                        &Response::BackupReadReplica {
                            closed,
                            bytes: &bytes,
                        },
                        out,
                    )
                }),
            _ => return Err(WireError::Malformed("not a backup request")),
        };
        match result {
            Ok(encoded) => encoded,
            Err(e) => {
                if backup_status(&e) == Status::Internal {
                    tracing::warn!(opcode = ?op, error = %e, "backup operation failed");
                }
                let message = e.to_string();
                encode_response(
                    id,
                    op,
                    &Response::Error(ErrorBody::Message {
                        status: backup_status(&e),
                        message: &message,
                    }),
                    out,
                )
            }
        }
    }

    /// Open, write, close, as `flags` say (R§7.4: a replica is opened, written
    /// while it is the head, then closed).
    fn write(
        &self,
        master_id: u64,
        segment_id: u64,
        offset: u32,
        flags: BackupWriteFlags,
        bytes: &[u8],
    ) -> Result<(), BackupError> {
        if flags.close {
            // A closing write whose answer was lost comes again and finds the
            // replica closed with exactly its bytes: acknowledge it again. (The
            // bytes themselves are not compared: a segment's bytes at an offset
            // never change, and reading them back would cost a disk read.)
            if let Some(info) = self.store.info(master_id, segment_id) {
                let end = u64::from(offset) + bytes.len() as u64;
                if info.closed
                    && end == u64::from(info.length)
                    && (!flags.open || info.atomic == flags.atomic)
                {
                    return Ok(());
                }
            }
        }
        if flags.open {
            if flags.reserve {
                self.store
                    .open_reclaiming(master_id, segment_id, flags.atomic)?;
            } else {
                self.store.open(master_id, segment_id, flags.atomic)?;
            }
        }
        // Also with no bytes: that checks the replica exists and `offset` leaves
        // no gap, so a bare close cannot close a replica that is missing bytes.
        self.store.write(master_id, segment_id, offset, bytes)?;
        if flags.close {
            self.store.close(master_id, segment_id)?;
        }
        Ok(())
    }

    /// The replicas of `master_id` that recovery may use: closed ones, and open
    /// ones not in atomic mode (an open atomic replica is never offered, R§8).
    fn get_replicas(&self, id: u64, master_id: u64, out: &mut Vec<u8>) -> Result<(), WireError> {
        let mut enc = BackupReplicasEncoder::new(id, out);
        for r in self.offered(master_id) {
            enc.push(r.segment_id, r.length, r.closed)?;
        }
        enc.finish()
    }

    /// The replicas of `master_id` that recovery may use (see [`Self::get_replicas`]).
    fn offered(&self, master_id: u64) -> Vec<ramstore_backup::ReplicaInfo> {
        self.store
            .list()
            .into_iter()
            .filter(|r| r.master_id == master_id && (r.closed || !r.atomic))
            .collect()
    }

    /// Starts bucketing the offered replicas of a crashed master (R§7.5) and
    /// answers the order they are read in.
    fn start_partitioning(
        &self,
        id: u64,
        master_id: u64,
        recovery_id: u64,
        tablets: ramstore_wire::PartitionTablets<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let tablets: Vec<_> = tablets.iter().collect();
        if tablets
            .iter()
            .any(|t| t.partition_id as usize >= MAX_RECOVERY_PARTITIONS)
        {
            return encode_response(
                id,
                Opcode::BackupStartPartitioning,
                &Response::Error(ErrorBody::Message {
                    status: Status::InvalidRequest,
                    message: "partition id beyond MAX_RECOVERY_PARTITIONS",
                }),
                out,
            );
        }
        let offered = self.offered(master_id);
        let order = self
            .recoveries
            .start(&self.store, master_id, recovery_id, offered, tablets);
        let mut enc = BackupReplicasEncoder::for_partitioning(id, out);
        for r in order {
            enc.push(r.segment_id, r.length, r.closed)?;
        }
        enc.finish()
    }

    /// One partition's entries of one replica, or RETRY while it is being read.
    fn recovery_data(
        &self,
        id: u64,
        master_id: u64,
        recovery_id: u64,
        segment_id: u64,
        partition_id: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let op = Opcode::BackupGetRecoveryData;
        let message;
        let body = match self
            .recoveries
            .fetch(master_id, recovery_id, segment_id, partition_id)
        {
            Fetched::Ready(buckets, i) => {
                return encode_response(
                    id,
                    op,
                    &Response::BackupGetRecoveryData { bytes: &buckets[i] },
                    out,
                )
            }
            Fetched::NotYet => ErrorBody::Retry {
                delay_ms: RECOVERY_DATA_RETRY_MS,
            },
            Fetched::Unknown => ErrorBody::Message {
                status: Status::ObjectDoesntExist,
                message: "no such recovery, replica or partition on this backup",
            },
            Fetched::Failed(why) => {
                message = why;
                ErrorBody::Message {
                    status: Status::Internal,
                    message: &message,
                }
            }
        };
        encode_response(id, op, &Response::Error(body), out)
    }

    /// A replica's bytes and whether it was closed. The state is looked at first:
    /// a replica seen closed stays closed, so its bytes are the closed replica's;
    /// one seen open may close meanwhile, and is then reported open with bytes that
    /// happen to be complete, which is safe.
    fn read_replica(
        &self,
        master_id: u64,
        segment_id: u64,
    ) -> Result<(bool, Vec<u8>), BackupError> {
        let closed = self
            .store
            .info(master_id, segment_id)
            .ok_or(BackupError::UnknownReplica {
                master_id,
                segment_id,
            })?
            .closed;
        let bytes = self.store.read_replica(master_id, segment_id)?;
        Ok((closed, bytes))
    }

    /// Writes every open replica's bytes to disk (a planned stop in buffered mode,
    /// or a power failure, R§4.2). Returns how many it wrote.
    pub fn flush(&self) -> Result<usize, BackupError> {
        self.store.flush()
    }

    /// Appends the backup's `key=value` lines for GetServerStats.
    pub(crate) fn stats_lines(&self, line: &mut impl FnMut(&str, String)) {
        let s = self.store.stats();
        let sync = match self.store.config().sync_mode {
            SyncMode::Buffered => "buffered",
            SyncMode::Fsync => "fsync",
        };
        line("backup", "on".into());
        line("backup_sync", sync.into());
        line("backup_frames_total", s.frames_total.to_string());
        line("backup_frames_free", s.frames_free.to_string());
        line("backup_replicas", s.replicas.to_string());
        line(
            "backup_open_buffers_used",
            s.open_buffers_in_use.to_string(),
        );
        line("backup_open_buffers_max", s.open_buffers_max.to_string());
        line("backup_bytes_on_disk", s.bytes_on_disk.to_string());
        line("backup_syncs", s.syncs.to_string());
        line(
            "backup_fenced_masters",
            self.fenced.read().len().to_string(),
        );
        line("backup_fenced_writes", self.fenced_writes().to_string());
        line("backup_retention_frees", self.retention_frees().to_string());
    }
}

/// The status a backup answers a failed operation with (see the module doc).
pub fn backup_status(e: &BackupError) -> Status {
    match e {
        e if e.is_full() => Status::NoSpace,
        BackupError::UnknownReplica { .. } | BackupError::NotClosed { .. } => {
            Status::ObjectDoesntExist
        }
        BackupError::Closed { .. }
        | BackupError::AtomicMismatch { .. }
        | BackupError::Gap { .. }
        | BackupError::PastFrameEnd { .. } => Status::InvalidRequest,
        _ => Status::Internal,
    }
}

fn io_error(op: &'static str) -> impl FnOnce(io::Error) -> BackupError {
    move |source| BackupError::Io { op, source }
}

#[cfg(test)]
#[path = "backup_service_tests.rs"]
mod tests;

//! The backup half of a storage server (R§2, DESIGN §2): the four backup opcodes
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
//! Pings must stay fast while backups write (DESIGN §6). So a request that may
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
//! | no free buffer or frame ([`BackupError::is_full`]) | NO_SPACE: place the replica elsewhere (R§7.1) |
//! | replica not held, or open in atomic mode (never offered, R§8) | OBJECT_DOESNT_EXIST |
//! | gap, past the frame, closed replica, atomic mismatch | INVALID_REQUEST |
//! | disk failure, corrupt replica | INTERNAL |
//!
//! Thread-safety: `Send + Sync`, like the store. Durability: the store's contract
//! (crate `ramstore-backup`), chosen by [`SyncMode`].

use std::io;
use std::path::{Path, PathBuf};

use ramstore_backup::{
    BackupConfig, BackupError, BackupStats, BackupStore, Disk, FileDisk, RestartSummary, SyncMode,
};
use ramstore_wire::{
    encode_response, BackupReplicasEncoder, BackupWriteFlags, ErrorBody, Request, Response, Status,
    WireError,
};

/// Name of the frames file inside the backup directory.
pub const FRAMES_FILE: &str = "replicas.frames";
/// Name a new frames file has while it is being formatted.
const FRAMES_FILE_NEW: &str = "replicas.frames.new";
/// Largest BackupWrite served on the reading task (buffered mode, no close): copying
/// and checksumming 64 KiB takes microseconds, far inside the ping budget. Group
/// commits are usually much smaller; whole segments (re-replication) go slow.
pub const MAX_FAST_BACKUP_WRITE_BYTES: usize = 64 * 1024;

/// A store whose disk is chosen at run time: the frames file in production, an
/// in-memory or fault-injecting disk in tests.
pub type ServerBackupStore = BackupStore<Box<dyn Disk>>;

/// The backup service of one storage server.
pub struct BackupService {
    store: ServerBackupStore,
    /// The frames file, if the store is one.
    path: Option<PathBuf>,
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
    /// A service over an open store (tests use an in-memory disk).
    pub fn new(store: ServerBackupStore) -> Self {
        Self { store, path: None }
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
            let service = Self {
                store,
                path: Some(path),
            };
            return Ok((service, Some(summary)));
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
        Ok((
            Self {
                store,
                path: Some(path),
            },
            None,
        ))
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
            self.store.open(master_id, segment_id, flags.atomic)?;
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
        for r in self
            .store
            .list()
            .into_iter()
            .filter(|r| r.master_id == master_id && (r.closed || !r.atomic))
        {
            enc.push(r.segment_id, r.length, r.closed)?;
        }
        enc.finish()
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
    }
}

/// The status a backup answers a failed operation with (see the module doc).
pub fn backup_status(e: &BackupError) -> Status {
    match e {
        BackupError::BuffersFull { .. } | BackupError::FramesFull { .. } => Status::NoSpace,
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

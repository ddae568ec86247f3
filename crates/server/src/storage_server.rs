//! Running a storage server: open its backup store, bind, serve, enlist with the
//! coordinator, export metrics, stop on request (docs/design.md §2).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ramstore_backup::BackupError;
use ramstore_clock::Clock;
use ramstore_master::StoreConfig;
use ramstore_rpc::{serve_with_poller, ConnLimits, ConnTable, Poller, TcpTransport, Transport};
use ramstore_wire::{Request, Services};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::backup_service::BackupService;
use crate::cold_start;
use crate::metrics::{render_backup, render_full_log, render_store};
use crate::parts::{build_store, enlist, run_enlisted};
use crate::resident::ResidentSplit;
use crate::storage_service::StorageService;

pub use crate::server_options::{
    ServerError, ServerOptions, DEFAULT_BACKUP_FRAMES, ENLIST_TIMEOUT_MS,
};

/// A running storage server.
pub struct StartedServer {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    /// Where the Redis protocol is served, if it is.
    pub resp_addr: Option<SocketAddr>,
    pub service: Arc<StorageService>,
    tasks: Vec<JoinHandle<()>>,
    /// The coordinator's addresses (for [`StartedServer::leave`]).
    coordinator: String,
    /// Where this server records its identity and a clean stop (its backup
    /// directory; `None`: no identity is kept, every start is a new server).
    identity_dir: Option<PathBuf>,
}

impl StartedServer {
    /// Stops serving at once: the listener, pings, lease renewals and replication
    /// stop (so nothing, not even a server list naming it crashed, reaches the
    /// zombie hook any more). Part of [`StartedServer::stop`]; `ramstore dev` calls
    /// it on every server first, so none is declared crashed while the others
    /// finish stopping.
    pub fn stop_serving(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }

    /// Stops (a clean stop): stops serving (connections close; the store is freed
    /// when the last reference goes); a buffered backup then writes its open
    /// replicas to disk (`BackupStore::flush`, at most the open buffers), so a
    /// planned stop keeps every acknowledged byte — this blocks for that write —;
    /// then the stop is recorded in the backup directory, so the next start is a
    /// restart, not a crash's recovery (`cold_start`).
    pub fn stop(mut self) {
        self.stop_serving();
        if let Some(m) = self.service.replicas() {
            m.shutdown();
        }
        let mut flushed = true;
        if let Some(backup) = self.service.backup() {
            match backup.flush() {
                Ok(n) => tracing::info!(open_replicas_written = n, "backup flushed"),
                Err(e) => {
                    flushed = false;
                    tracing::error!(error = %e, "backup flush failed");
                }
            }
        }
        let id = self.service.server_id();
        if let Some(dir) = self.identity_dir.as_deref().filter(|_| flushed && id != 0) {
            match cold_start::record_clean_stop(dir, id) {
                Ok(()) => tracing::info!(
                    server = %ramstore_wire::server_id::Show(id),
                    "stopped cleanly"
                ),
                Err(e) => tracing::error!(error = %e, "cannot record the clean stop"),
            }
        }
    }

    /// [`StartedServer::stop`], telling the coordinator first that this server is
    /// leaving (`Leave`, waited for at most `cold_start::LEAVE_DEADLINE_MS`): it
    /// recovers this server's data at once, as a restart's (R§7), instead of after
    /// the failure detector finds the process gone and reports a crash.
    pub async fn leave(mut self) {
        // Before the Leave goes out: a lease renewal still in flight (aborting a
        // task does not stop a poll under way) may be answered "not UP" after it.
        self.service.begin_leave();
        self.stop_serving();
        let id = self.service.server_id();
        if id != 0 && !cold_start::leave(&self.coordinator, id, self.service.clock()).await {
            tracing::info!(
                "the coordinator did not acknowledge the clean stop; the next start tells it"
            );
        }
        self.stop();
    }
}

/// Starts a storage server and enlists it; returns once it is serving and enlisted.
pub async fn start(options: ServerOptions) -> Result<StartedServer, ServerError> {
    let clock = options.clock.clone();
    // Replication, enlistment and the failure monitor each have a transport (and
    // so connections) of their own.
    let tcp = || -> Arc<dyn Transport> { Arc::new(TcpTransport::with_clock(clock.clone())) };
    let store_config = StoreConfig::new(options.memory_bytes);
    let (store, manager) = build_store(&options, store_config, tcp())?;
    let backup = match &options.backup_dir {
        Some(dir) => Some(open_backup(dir, &options).await?),
        None => None,
    };
    let backup_read_mbps = match backup.as_ref().and_then(BackupService::path) {
        Some(path) => read_speed(path.to_path_buf(), clock.clone()).await,
        None => 0,
    };
    let services = Services {
        master: true,
        backup: backup.is_some(),
        replicated_log: manager.is_some(),
    };
    // Capped, so that a misconfigured wait cannot outlast the clients' deadlines.
    let no_space_wait =
        Duration::from_millis(options.no_space_wait_ms.min(crate::MAX_NO_SPACE_WAIT_MS));
    let conns = ConnTable::with_clock(
        ConnLimits {
            max_connections: options.max_connections,
            request_timeout_ms: options.request_timeout_ms,
            idle_timeout_ms: options.idle_timeout_ms,
        },
        clock.clone(),
    );
    let mut service = StorageService::with_backup(store, backup)
        .with_no_space_wait(no_space_wait)
        .with_conns(conns.clone())
        .with_rng(options.rng.clone());
    if let Some(m) = &manager {
        service = service.with_replicas(m.clone());
    }
    let service = Arc::new(service);
    if options.prefault_memory {
        let owner = service.clone();
        tokio::task::spawn_blocking(move || {
            let started = owner.clock().now();
            match owner.store().prefault_memory() {
                Ok(()) => tracing::info!(
                    elapsed_ms = owner.clock().elapsed(started).as_millis() as u64,
                    "log memory faulted in, hash table too"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot fault log memory in ahead of use; pages are zeroed on first touch")
                }
            }
        });
    }
    let listener =
        TcpListener::bind(&options.listen)
            .await
            .map_err(|source| ServerError::Listen {
                addr: options.listen.clone(),
                source,
            })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ServerError::Listen {
            addr: options.listen.clone(),
            source,
        })?;
    // Without a loop poller, a disabled one: the native port does not poll.
    let poller = options
        .loop_poller
        .clone()
        .unwrap_or_else(|| Arc::new(Poller::new(0)));
    let mut tasks = vec![tokio::spawn(serve_with_poller(
        listener,
        service.clone(),
        conns,
        poller,
    ))];
    let mut metrics_addr = None;
    if let Some(m) = &options.metrics_listen {
        let listener = TcpListener::bind(m)
            .await
            .map_err(|source| ServerError::Listen {
                addr: m.clone(),
                source,
            })?;
        metrics_addr = listener.local_addr().ok();
        tasks.push(tokio::spawn(serve_metrics(listener, service.clone())));
    }
    let advertise = options
        .advertise
        .clone()
        .unwrap_or_else(|| addr.to_string());
    // Restart: a server restarted on its directory names its previous run, whose
    // index it keeps and whose data crash recovery brings back (see `cold_start`).
    let identity_dir = options.backup_dir.clone();
    let previous = match &identity_dir {
        Some(dir) => cold_start::read_identity(dir)?,
        None => None,
    };
    let replaces = match (&previous, &identity_dir) {
        (Some(previous), Some(dir)) => {
            let clean = cold_start::take_clean_stop(dir)? == Some(previous.server_id);
            let old = ramstore_wire::server_id::Show(previous.server_id);
            if clean {
                tracing::info!(previous = %old, "restart after a clean stop");
            } else {
                tracing::warn!(
                    previous = %old,
                    "restart after a crash: the previous run did not stop cleanly; its data is recovered from the backups"
                );
            }
            cold_start::replaced_id(&options.coordinator, previous, clean, &clock, &options.rng)
                .await?
        }
        _ => 0,
    };
    let server_id = enlist(
        &clock,
        tcp().as_ref(),
        &options.coordinator,
        &Request::Enlist {
            replaces_server_id: replaces,
            services,
            memory_bytes: options.memory_bytes as u64,
            backup_read_mbps,
            address: &advertise,
            failure_domain: &options.failure_domain,
        },
    )
    .await?;
    if let Some(dir) = &identity_dir {
        cold_start::write_identity(dir, server_id, &advertise)?;
    }
    service.set_migration_lanes(tcp(), tcp());
    tasks.extend(run_enlisted(
        &options,
        &service,
        manager.as_ref(),
        server_id,
        tcp(),
    ));
    let resp_addr = match &options.resp_listen {
        Some(listen) => {
            let (resp_addr, task) = start_resp(listen, &options, service.clone()).await?;
            tasks.push(task);
            Some(resp_addr)
        }
        None => None,
    };
    tracing::info!(
        server_id,
        server = %ramstore_wire::server_id::Show(server_id),
        %addr,
        coordinator = %options.coordinator,
        memory_bytes = options.memory_bytes,
        failure_domain = %options.failure_domain,
        backup_read_mbps,
        "storage server enlisted"
    );
    Ok(StartedServer {
        addr,
        metrics_addr,
        resp_addr,
        service,
        tasks,
        coordinator: options.coordinator.clone(),
        identity_dir,
    })
}

/// Starts the Redis protocol front end on `listen`: keys this master owns are
/// served by `service` in-process, others forwarded through a client of the
/// cluster (made here, after enlistment, so the coordinator knows this server).
async fn start_resp(
    listen: &str,
    options: &ServerOptions,
    service: Arc<StorageService>,
) -> Result<(SocketAddr, JoinHandle<()>), ServerError> {
    let no_space_wait = service.full_log().patience();
    let client = ramstore_client::Client::connect(ramstore_client::ClientOptions {
        // Forwarded writes give up on a full log as soon as local ones do.
        no_space_patience: no_space_wait,
        // Forwarded writes, deletes and counters' compare-and-swaps are
        // exactly-once whatever the client default (RIFL; issue 21): a retried
        // CAS of an INCR must not apply the increment twice. Local ones run
        // in-process, where no reply can be lost.
        exactly_once: true,
        clock: options.clock.clone(),
        rng: options.rng.clone(),
        ..ramstore_client::ClientOptions::new(options.coordinator.clone())
    })
    .await
    .map_err(|e| ServerError::Resp(e.to_string()))?;
    let backend =
        ramstore_resp::Backend::new(Some(local_master(service)), client, options.resp_table_span)
            .with_no_space_patience(no_space_wait);
    let config = ramstore_resp::RespConfig {
        require_pass: options.resp_require_pass.clone(),
        port: 0,
        memory_bytes: options.memory_bytes as u64,
        // One event loop, like Redis: on small machines a hand-off between
        // threads costs more than a command. A server on a current-thread runtime
        // (`ramstore dev`) serves Redis on that very loop (0; `ramstore_resp::start`).
        threads: 0,
        poll_before_sleep_us: options.resp_poll_us,
        loop_poller: options.loop_poller.clone(),
        request_timeout_ms: options.request_timeout_ms,
        idle_timeout_ms: options.idle_timeout_ms,
        clock: options.clock.clone(),
    };
    ramstore_resp::start(listen, backend, config)
        .await
        .map_err(|source| ServerError::Listen {
            addr: listen.to_string(),
            source,
        })
}

/// This server's master as the Redis front end's local fast path (its direct
/// object operations: `StorageService::read_local` and friends).
pub fn local_master(service: Arc<StorageService>) -> ramstore_resp::LocalMaster {
    ramstore_resp::LocalMaster { objects: service }
}

/// Opens (or creates) the backup store off the async threads: the format and the
/// restart scan read and write the disk. Logs what a restart found.
async fn open_backup(
    dir: &std::path::Path,
    options: &ServerOptions,
) -> Result<BackupService, ServerError> {
    let config = options.backup_config();
    let fail = |error| match error {
        // The usual cause: a restart with another --backup-frames.
        BackupError::FileSize { actual, .. } => ServerError::BackupGeometry {
            dir: dir.to_path_buf(),
            file_frames: actual / config.frame_bytes(),
            configured: config.frame_count,
        },
        error => ServerError::Backup {
            dir: dir.to_path_buf(),
            error,
        },
    };
    config.validate().map_err(|e| fail(e.into()))?;
    let owned = dir.to_path_buf();
    let (backup, summary) =
        tokio::task::spawn_blocking(move || BackupService::open(&owned, config))
            .await
            .map_err(|e| {
                fail(BackupError::Io {
                    op: "opening the backup store",
                    source: std::io::Error::other(e.to_string()),
                })
            })?
            .map_err(fail)?;
    let path = backup.path().unwrap_or(dir).display().to_string();
    match summary {
        None => tracing::info!(
            %path,
            frames = config.frame_count,
            sync = ?config.sync_mode,
            "backup store created"
        ),
        Some(s) => {
            tracing::info!(
                %path,
                frames = s.frames,
                empty_frames = s.empty_frames,
                closed_replicas = s.closed_replicas,
                open_replicas = s.open_replicas,
                discarded_atomic = s.discarded_atomic,
                superseded = s.superseded,
                damaged_slots = s.damaged_slots,
                older_state_used = s.older_state_used,
                corrupt_frames = s.corrupt.len(),
                "backup store reopened"
            );
            for c in &s.corrupt {
                tracing::warn!(
                    %path,
                    frame = c.frame,
                    replica = ?c.replica,
                    problem = ?c.problem,
                    "backup frame held nothing usable; it is free now"
                );
            }
        }
    }
    Ok(backup)
}

/// Bytes read from the frames file to measure the backup's disk read speed.
pub const READ_SPEED_PROBE_BYTES: u64 = 32 << 20;

/// Measures the backup disk's read speed off the async threads and logs it;
/// 1 MB/s (the least) if it cannot be measured, so masters prefer other backups.
async fn read_speed(path: PathBuf, clock: Arc<dyn Clock>) -> u32 {
    let shown = path.display().to_string();
    // Measured on a probe file written (and synced) next to the frames file: the
    // frames file's unwritten extents read as zeros without touching the disk.
    let probe = path.with_file_name(READ_SPEED_PROBE_FILE);
    let measured = tokio::task::spawn_blocking(move || {
        let result = write_probe(&probe, READ_SPEED_PROBE_WRITE_BYTES)
            .and_then(|()| measure_read_mbps(&probe, READ_SPEED_PROBE_WRITE_BYTES, &clock));
        let _ = std::fs::remove_file(&probe);
        result
    })
    .await
    .map_err(|e| std::io::Error::other(e.to_string()))
    .and_then(|r| r);
    match measured {
        Ok(mbps) => {
            tracing::info!(path = %shown, backup_read_mbps = mbps, "backup disk read speed measured");
            mbps
        }
        Err(e) => {
            tracing::warn!(path = %shown, error = %e, "cannot measure the backup disk's read speed; reporting 1 MB/s");
            1
        }
    }
}

/// The probe file written beside the frames file to measure the disk's read speed.
pub const READ_SPEED_PROBE_FILE: &str = "read-speed.probe";
/// Bytes of the probe: enough to leave the disk's cache, little at start-up.
pub const READ_SPEED_PROBE_WRITE_BYTES: u64 = 8 << 20;

/// Writes `bytes` of non-zero data to `path` and syncs it to the disk.
fn write_probe(path: &std::path::Path, bytes: u64) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8 + 1).collect();
    let mut left = bytes;
    while left > 0 {
        let n = usize::try_from(left).map_or(chunk.len(), |l| l.min(chunk.len()));
        file.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    file.sync_all()
}

/// The read speed of the disk holding `path`, in MB/s (10^6 bytes), at least 1:
/// reads up to `max_bytes` of the file sequentially, after asking the kernel to
/// drop its cached pages (`posix_fadvise(DONTNEED)`) so the page cache does not
/// make the figure meaningless. Blocks for the reads.
///
/// Regions of a preallocated file never written read as zeros without touching
/// the disk, so a freshly formatted frames file can look faster than its disk;
/// the figure only ranks backups (R§7.1), and errs towards the fastest disks.
/// Timed on `clock`.
pub fn measure_read_mbps(
    path: &std::path::Path,
    max_bytes: u64,
    clock: &Arc<dyn Clock>,
) -> std::io::Result<u32> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len().min(max_bytes);
    drop_cached_pages(&file, len);
    let mut buf = vec![0u8; 1 << 20];
    let started = clock.now();
    let mut read = 0u64;
    while read < len {
        let want = usize::try_from(len - read).map_or(buf.len(), |n| n.min(buf.len()));
        match file.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => read += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(mbps(read, clock.elapsed(started)))
}

/// `bytes` in `elapsed` as MB/s, clamped to `1..=u32::MAX`.
fn mbps(bytes: u64, elapsed: Duration) -> u32 {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let rate = bytes as f64 / 1e6 / secs;
    // `as` saturates; NaN cannot occur (secs > 0).
    (rate as u32).max(1)
}

/// Asks the kernel to drop the cached pages of the first `len` bytes of `file`
/// (best effort: dirty pages stay, and other systems keep their cache).
fn drop_cached_pages(file: &std::fs::File, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let len = libc::off_t::try_from(len).unwrap_or(libc::off_t::MAX);
        // SAFETY: the descriptor is open and owned by `file`, which outlives the
        // call; posix_fadvise reads no memory of ours.
        let rc =
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, len, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            tracing::debug!(
                rc,
                "posix_fadvise(DONTNEED) failed; the read speed may include the page cache"
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, len);
}

/// A minimal HTTP endpoint: every request gets the Prometheus text of this server.
async fn serve_metrics(listener: TcpListener, service: Arc<StorageService>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            service.clock().sleep(Duration::from_millis(10)).await;
            continue;
        };
        let service = service.clone();
        tokio::spawn(async move {
            let mut request = [0u8; 4096];
            let read = stream.read(&mut request);
            let _ = service.clock().timeout(Duration::from_secs(2), read).await;
            let mut body = String::new();
            service.metrics().render(&mut body);
            render_store(&service.store().stats(), &mut body);
            ResidentSplit::measure(service.store()).render(&mut body);
            render_full_log(service.full_log(), service.clock().now(), &mut body);
            if let Some(backup) = service.backup() {
                render_backup(&backup.stats(), &mut body);
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_clock::system_clock;

    #[test]
    fn read_speed_is_measured_on_a_file_and_is_at_least_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("frames");
        std::fs::write(&path, vec![7u8; 3 << 20]).expect("write");
        let mbps =
            measure_read_mbps(&path, READ_SPEED_PROBE_BYTES, &system_clock()).expect("measured");
        assert!(mbps >= 1);
        // An empty file reads nothing in no time: still at least 1.
        std::fs::write(&path, b"").expect("truncate");
        assert_eq!(
            measure_read_mbps(&path, READ_SPEED_PROBE_BYTES, &system_clock()).ok(),
            Some(1)
        );
        assert!(measure_read_mbps(&dir.path().join("missing"), 1, &system_clock()).is_err());
    }

    #[test]
    fn read_speed_probe_is_written_synced_and_read_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let probe = dir.path().join(READ_SPEED_PROBE_FILE);
        write_probe(&probe, 3 << 20).expect("probe written");
        assert_eq!(std::fs::metadata(&probe).expect("probe").len(), 3 << 20);
        assert!(measure_read_mbps(&probe, 3 << 20, &system_clock()).expect("measured") >= 1);
    }

    #[test]
    fn mbps_is_megabytes_per_second_clamped() {
        assert_eq!(mbps(200_000_000, Duration::from_secs(2)), 100);
        assert_eq!(mbps(0, Duration::from_secs(1)), 1);
        assert_eq!(mbps(10, Duration::from_secs(100)), 1);
        assert_eq!(mbps(u64::MAX, Duration::ZERO), u32::MAX);
    }
}

//! `ramstore dev`, `ramstore coordinator` and `ramstore server`: the processes.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use ramstore_coordinator::{
    exit_on_lost_leadership, CoordinatorOptions, FailureDetectorConfig, StoreSpec,
    DEFAULT_LEASE_TTL_MS,
};
use ramstore_resp::Poller;
use ramstore_server::{MonitorConfig, ServerOptions, StartedServer, SyncMode, ZombieHook};

/// Structured logs to stderr, filtered by `RUST_LOG` (default: info), in colour
/// only when stderr is a terminal and `NO_COLOR` is not set (no-color.org): logs
/// piped to a file, journald or a container runtime carry no escape codes.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(log_colours(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .try_init();
}

/// Whether logs are coloured: on a terminal, unless `NO_COLOR` is set to anything
/// but the empty string (no-color.org).
fn log_colours(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Ctrl-C and SIGTERM, listened for from the moment this is made. Make it before
/// printing that the process is ready: a signal that arrives between "ready" and
/// the first wait must still stop the process cleanly.
pub struct Shutdown {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Shutdown {
    pub fn install() -> Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
                interrupt: signal(SignalKind::interrupt())
                    .context("installing the SIGINT handler")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for Ctrl-C or SIGTERM.
    pub async fn wait(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Aborts a task when dropped (dev's poller stops with `dev`).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Options of `ramstore dev`.
pub struct DevOptions {
    pub dir: Option<PathBuf>,
    pub servers: usize,
    /// Replicas asked for (dev places at most servers − 1).
    pub replicas: usize,
    pub memory_bytes: usize,
    pub port: u16,
    /// Frames of each server's backup file.
    pub backup_frames: u32,
    /// When the backups acknowledge writes.
    pub backup_sync: SyncMode,
    /// The coordinator's failure detector timing.
    pub detector: FailureDetectorConfig,
    /// The servers' randomized pings (R§7.2).
    pub monitor: MonitorConfig,
    /// Serve the Redis protocol on this port of 127.0.0.1.
    pub resp_port: Option<u16>,
    /// The password Redis clients must give with AUTH.
    pub require_pass: Option<String>,
    /// How long dev's event loop polls after the last read (native or Redis)
    /// before sleeping, in µs (`--poll-us`; 0: sleep at once; see
    /// `ramstore_rpc::poller`).
    pub poll_us: u64,
    /// How long a write refused for lack of memory is retried, in ms
    /// (`ServerOptions::no_space_wait_ms`).
    pub no_space_wait_ms: u64,
    /// How long a request may take to arrive once begun, on every server's native
    /// port and the Redis port (`ServerOptions::request_timeout_ms`; 0: never).
    pub request_timeout_ms: u64,
    /// How long a client connection may sit idle, on the same ports
    /// (`ServerOptions::idle_timeout_ms`; 0: never).
    pub idle_timeout_ms: u64,
}

/// The exit code of a `ramstore server` that learned it was declared crashed
/// (R§7.11: a zombie stops serving and exits).
pub const ZOMBIE_EXIT_CODE: i32 = 4;

/// The zombie hook of `ramstore server`: log and exit with [`ZOMBIE_EXIT_CODE`].
/// (`ramstore dev` does not use it: its servers share the process with the
/// coordinator; a zombie there only stops serving.)
pub fn exit_as_zombie() -> ZombieHook {
    ZombieHook::new(|| {
        tracing::error!(
            exit_code = ZOMBIE_EXIT_CODE,
            "the cluster declared this server crashed; exiting (R§7.11)"
        );
        std::process::exit(ZOMBIE_EXIT_CODE);
    })
}

/// Where server `n` (1-based) of `ramstore dev` keeps its backup.
pub fn dev_backup_dir(dir: &std::path::Path, n: usize) -> PathBuf {
    dir.join(format!("server-{n}")).join("backup")
}

/// " (backup: N frames in DIR, MODE)" for a server that runs a backup.
fn backup_note(server: &StartedServer) -> String {
    let Some(backup) = server.service.backup() else {
        return String::new();
    };
    let config = backup.store().config();
    let mode = match config.sync_mode {
        SyncMode::Buffered => "buffered",
        SyncMode::Fsync => "fsync",
    };
    format!(
        ", backup of {} frames in {} ({mode})",
        config.frame_count,
        backup
            .path()
            .and_then(|p| p.parent())
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    )
}

/// Runs a coordinator and `servers` storage servers in this process until stopped.
/// If the start fails (a port in use, a full disk), what this run created on disk
/// is removed again: the directory, if it did not exist, else the servers'
/// directories that did not (their preallocated backup files are large).
pub async fn dev(mut o: DevOptions) -> Result<()> {
    init_logging();
    anyhow::ensure!(o.servers >= 1, "--servers must be at least 1");
    let dir = o
        .dir
        .take()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("ramstore-dev-{}", o.port)));
    let created: Vec<PathBuf> = if dir.exists() {
        (1..=o.servers)
            .map(|n| dir.join(format!("server-{n}")))
            .filter(|d| !d.exists())
            .collect()
    } else {
        vec![dir.clone()]
    };
    let result = dev_in(o, &dir).await;
    if result.is_err() {
        remove_created(&created);
    }
    result
}

/// Removes the directories a failed `ramstore dev` start created.
fn remove_created(created: &[PathBuf]) {
    for d in created {
        match std::fs::remove_dir_all(d) {
            Ok(()) => eprintln!(
                "ramstore dev: removed {} (made by this failed start)",
                d.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("ramstore dev: could not remove {}: {e}", d.display()),
        }
    }
}

/// The body of [`dev`] in `dir`: `Ok` once it has run and been stopped; every
/// error is a failed start (nothing after the start can fail).
async fn dev_in(o: DevOptions, dir: &std::path::Path) -> Result<()> {
    let shutdown = Shutdown::install()?;
    let dir = dir.to_path_buf();
    let coordinator_addr = format!("127.0.0.1:{}", o.port);
    let coordinator = ramstore_coordinator::start_with(
        &coordinator_addr,
        &StoreSpec::File(dir.join("coordinator")),
        o.detector,
    )
    .await
    .with_context(|| format!("starting the coordinator on {coordinator_addr}"))?;
    let replicas = o.replicas.min(o.servers - 1);
    // One poller for the one event loop (`dev_runtime`): every server's native
    // port and the Redis port report to it, so a durable write — the client's
    // request, the BackupWrites between the in-process servers, their
    // acknowledgements — keeps the loop polling instead of sleeping between its
    // steps (R§5.1). On a multi-thread runtime (RAMSTORE_WORKER_THREADS) a
    // poller would spin a worker the others need: none there.
    let loop_poller = (tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::CurrentThread)
        .then(|| Arc::new(Poller::sharing_runtime(o.poll_us)));
    // Stops polling when dev returns (a failed start included).
    let _polling = loop_poller.as_ref().map(|p| AbortOnDrop(p.spawn()));
    // Servers start concurrently: after a restart each reloads its log from the
    // others' backups before it enlists (cold start), so none may wait for another
    // to finish starting.
    let mut starting = Vec::new();
    for i in 0..o.servers {
        let port = o.port as usize + 1 + i;
        anyhow::ensure!(
            port <= u16::MAX as usize,
            "--port is too high for {} servers",
            o.servers
        );
        let listen = format!("127.0.0.1:{port}");
        let options = ServerOptions {
            listen: listen.clone(),
            memory_bytes: o.memory_bytes,
            backup_dir: Some(dev_backup_dir(&dir, i + 1)),
            backup_sync: o.backup_sync,
            backup_frames: o.backup_frames,
            replicas,
            monitor: o.monitor,
            no_space_wait_ms: o.no_space_wait_ms,
            request_timeout_ms: o.request_timeout_ms,
            idle_timeout_ms: o.idle_timeout_ms,
            loop_poller: loop_poller.clone(),
            ..ServerOptions::new(coordinator_addr.clone())
        };
        starting.push((i, listen, tokio::spawn(ramstore_server::start(options))));
    }
    let mut servers = Vec::new();
    for (i, listen, task) in starting {
        let server = task
            .await
            .context("a server's start task failed")?
            .with_context(|| format!("starting storage server {} on {listen}", i + 1))?;
        servers.push(server);
    }
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    println!(
        "ramstore dev: coordinator on {coordinator_addr} (state in {}), {} storage server(s) on {}, {} MiB of log memory each.",
        dir.display(),
        servers.len(),
        addrs.join(", "),
        o.memory_bytes >> 20
    );
    // Each backup's frames file is allocated in full at its first start.
    let backup_disk: u64 = servers
        .iter()
        .filter_map(|s| s.service.backup())
        .map(|b| b.store().config().file_bytes())
        .sum();
    println!(
        "Backups: server N keeps replicas in {} ({} frames of 8 MiB each): {} of disk allocated up front ({} frames x 8 MiB x {} servers; --backup-frames sets it).",
        dir.join("server-N").join("backup").display(),
        o.backup_frames,
        crate::size::spaced(backup_disk),
        o.backup_frames,
        servers.len(),
    );
    match replicas {
        0 => println!(
            "WARNING: no replicas (one server): data lives in DRAM only and is lost when this process stops. Run --servers 4 for 3 replicas."
        ),
        r if r < 3 => println!(
            "WARNING: {r} replica(s) per segment (at most servers - 1 = {}); a cluster keeps 3. Run --servers 4 for 3 replicas.",
            o.servers - 1
        ),
        r => println!("Durability: every write is on {r} backups before it is acknowledged."),
    }
    let resp = match o.resp_port {
        Some(port) => Some(
            start_dev_resp(
                &coordinator_addr,
                &servers,
                port,
                o.require_pass,
                o.poll_us,
                (o.request_timeout_ms, o.idle_timeout_ms),
                loop_poller.clone(),
            )
            .await?,
        ),
        None => None,
    };
    println!("Try, in another terminal:");
    println!("  export RAMSTORE_COORDINATOR={coordinator_addr}");
    println!("  ramstore create-table demo");
    println!("  ramstore put demo hello world");
    println!("  ramstore get demo hello");
    println!("  ramstore status");
    if let Some((addr, _)) = &resp {
        println!("  redis-cli -p {}", addr.port());
    }
    println!("Press Ctrl-C to stop.");
    shutdown.wait().await;
    println!("stopping");
    if let Some((_, task)) = resp {
        task.abort();
    }
    // A clean stop: every server stops serving first (none can be declared
    // crashed while the others finish), the coordinator records that each left
    // cleanly (so the next start recovers them as a restart, not a crash), then
    // each writes out its open replicas and records the clean stop in its
    // directory.
    for s in &mut servers {
        // Before any Leave: the "not UP" answers it causes are not zombie verdicts.
        s.service.begin_leave();
        s.stop_serving();
    }
    for s in &servers {
        ramstore_server::cold_start::leave(
            &coordinator_addr,
            s.service.server_id(),
            s.service.clock(),
        )
        .await;
    }
    for s in servers {
        s.stop();
    }
    coordinator.stop();
    Ok(())
}

/// Starts the Redis protocol front end of `ramstore dev` on 127.0.0.1:`port`, in
/// the server that owns database 0 (table `db0`, made here with one tablet), so
/// database 0's commands are answered without a hop between servers.
async fn start_dev_resp(
    coordinator: &str,
    servers: &[StartedServer],
    port: u16,
    require_pass: Option<String>,
    poll_before_sleep_us: u64,
    (request_timeout_ms, idle_timeout_ms): (u64, u64),
    loop_poller: Option<Arc<Poller>>,
) -> Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    // Every dev server has the same patience (`--no-space-wait-ms`).
    let no_space_wait = servers.first().map_or(
        std::time::Duration::from_millis(ramstore_server::DEFAULT_NO_SPACE_WAIT_MS),
        |s| s.service.full_log().patience(),
    );
    let client = ramstore_client::Client::connect(ramstore_client::ClientOptions {
        // Forwarded writes give up on a full log as soon as local ones do.
        no_space_patience: no_space_wait,
        // Forwarded writes, deletes and counters' compare-and-swaps are
        // exactly-once whatever the client default (RIFL; issue 21): a retried
        // CAS of an INCR must not apply the increment twice. Local ones run
        // in-process, where no reply can be lost.
        exactly_once: true,
        ..ramstore_client::ClientOptions::new(coordinator)
    })
    .await
    .context("connecting the Redis front end's client")?;
    let db0 = client
        .create_table("db0", 1)
        .await
        .context("creating table db0 for the Redis front end")?;
    let owner = client
        .tablet_map()
        .await
        .context("reading the tablet map")?
        .into_iter()
        .find(|t| t.table_id == db0)
        .map(|t| t.address);
    let server = servers
        .iter()
        .find(|s| Some(s.addr.to_string()) == owner)
        .or(servers.first())
        .context("no storage server to serve the Redis protocol")?;
    let local = ramstore_server::storage_server::local_master(server.service.clone());
    let backend =
        ramstore_resp::Backend::new(Some(local), client, 1).with_no_space_patience(no_space_wait);
    let config = ramstore_resp::RespConfig {
        require_pass,
        port,
        memory_bytes: server.service.store().stats().log.memory_bytes as u64,
        // On dev's one event loop (`dev_runtime`): command, replication and the
        // backups' work on one thread (`ramstore_resp::start`), polling with the
        // loop's poller.
        threads: 0,
        poll_before_sleep_us,
        request_timeout_ms,
        idle_timeout_ms,
        loop_poller,
        ..ramstore_resp::RespConfig::default()
    };
    let listen = format!("127.0.0.1:{port}");
    let (addr, task) = ramstore_resp::start(&listen, backend, config)
        .await
        .with_context(|| format!("serving the Redis protocol on {listen}"))?;
    println!(
        "Redis protocol (RESP2/RESP3) on {addr}, served by storage server {} ({}); database 0 lives there.",
        ramstore_client::server_id::Show(server.service.server_id()),
        server.addr
    );
    Ok((addr, task))
}

/// Options of `ramstore coordinator`.
pub struct CoordinatorArgs {
    pub listen: String,
    pub store: StoreSpec,
    /// Wait for the active coordinator to go away (etcd stores only).
    pub standby: bool,
    /// The leader lease's TTL (etcd stores only).
    pub lease_ttl_ms: Option<u64>,
    /// The term of client leases (RIFL).
    pub client_lease_term_ms: u64,
    /// The failure detector's timing.
    pub detector: FailureDetectorConfig,
    /// How crash recovery partitions a crashed master's tablets.
    pub recovery: ramstore_coordinator::partition::PartitionLimits,
    /// Recovery masters near the crashed log's holders (C§4.2).
    pub recovery_near: bool,
}

/// Runs a coordinator until stopped; it declares crashed the servers that stop
/// answering its pings (`detector`). With an etcd store it first waits until it is
/// the leader (R§9), and exits if it ever stops being the leader.
pub async fn coordinator(a: CoordinatorArgs) -> Result<()> {
    init_logging();
    let is_etcd = matches!(a.store, StoreSpec::Etcd(_));
    // Flags that do not fit the store are usage errors (exit 2), before anything starts.
    if !is_etcd && a.standby {
        return Err(crate::reach::Exit::Usage(
            "--standby needs an etcd store (--store etcd://HOST:PORT): standbys find the \
             active coordinator's lease there"
                .into(),
        )
        .into());
    }
    if !is_etcd && a.lease_ttl_ms.is_some() {
        return Err(crate::reach::Exit::Usage(
            "--lease-ttl-ms only applies to an etcd store (--store etcd://HOST:PORT)".into(),
        )
        .into());
    }
    let shutdown = Shutdown::install()?;
    let mut stop = std::pin::pin!(shutdown.wait());
    let announce = {
        let (standby, listen, store) = (a.standby, a.listen.clone(), a.store.to_string());
        move || {
            println!(
                "ramstore coordinator {} for {listen} (store {store}): it serves once it holds the leader lease",
                if standby { "standing by" } else { "campaigning" },
            );
        }
    };
    let options = CoordinatorOptions {
        detector: a.detector,
        lease_ttl_ms: a.lease_ttl_ms.unwrap_or(DEFAULT_LEASE_TTL_MS),
        // Lost leadership ends the process (R§9: only the leader may act).
        on_leadership_lost: std::sync::Arc::new(exit_on_lost_leadership),
        on_campaign: Some(std::sync::Arc::new(announce)),
        // The process is where real time and randomness enter.
        clock: ramstore_clock::system_clock(),
        rng: ramstore_clock::system_rng(),
        client_lease_term_ms: a.client_lease_term_ms,
    };
    let started = tokio::select! {
        started = ramstore_coordinator::start_with_options(&a.listen, &a.store, options) => started,
        () = &mut stop => return Ok(()),
    };
    let c = started.with_context(|| format!("starting the coordinator on {}", a.listen))?;
    c.service.recoveries().set_limits(a.recovery);
    c.service.recoveries().set_near(a.recovery_near);
    println!(
        "ramstore coordinator listening on {} (store {})",
        c.addr, a.store
    );
    stop.await;
    c.shutdown().await;
    Ok(())
}

/// Runs a storage server until stopped.
pub async fn server(options: ServerOptions) -> Result<()> {
    init_logging();
    let listen = options.listen.clone();
    let shutdown = Shutdown::install()?;
    let s = ramstore_server::start(options)
        .await
        .with_context(|| format!("starting the storage server on {listen}"))?;
    println!(
        "ramstore server {} listening on {}{}{} ({})",
        ramstore_client::server_id::Show(s.service.server_id()),
        s.addr,
        s.metrics_addr
            .map(|m| format!(", metrics on http://{m}/metrics"))
            .unwrap_or_default()
            + &s.resp_addr
                .map(|r| format!(", Redis protocol on {r}"))
                .unwrap_or_default(),
        backup_note(&s),
        match s.service.replicas() {
            Some(m) => format!("log replicated to {} backups", m.replicas()),
            None => "DRAM only: --replicas 0".to_string(),
        }
    );
    shutdown.wait().await;
    // Tells the coordinator it is leaving, then writes out its open replicas and
    // records the clean stop (`StartedServer::leave`).
    s.leave().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_colours_only_on_a_terminal_without_no_color() {
        let set = Some(std::ffi::OsStr::new("1"));
        let empty = Some(std::ffi::OsStr::new(""));
        assert!(log_colours(true, None));
        assert!(
            log_colours(true, empty),
            "an empty NO_COLOR counts as unset"
        );
        assert!(!log_colours(true, set));
        assert!(!log_colours(false, None));
        assert!(!log_colours(false, set));
    }
}

//! Running a coordinator: open external storage, become the leader (etcd stores),
//! restore state, serve.

use std::net::SocketAddr;
use std::sync::Arc;

use ramstore_clock::{system_clock, system_rng, Clock, Rng};
use ramstore_rpc::{serve_with_table, ConnLimits, ConnTable, TcpTransport};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::coordinator::CoordinatorCore;
use crate::election::{campaign, Leadership, LostCallback, DEFAULT_LEASE_TTL_MS};
use crate::error::CoordinatorError;
use crate::etcd_storage::{EtcdSpec, EtcdStorage};
use crate::failure_detector::FailureDetectorConfig;
use crate::file_storage::FileStorage;
use crate::service::CoordinatorService;
use crate::storage::{ExternalStorage, MemoryStorage};

/// Exit code of a `ramstore coordinator` process that lost its leadership.
pub const EXIT_LEADERSHIP_LOST: i32 = 3;

/// Where the coordinator keeps its state, parsed from `--store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `file:DIR`: the embedded store in a directory.
    File(std::path::PathBuf),
    /// `memory:`: nothing survives a restart (tests).
    Memory,
    /// `etcd://HOST:PORT[,HOST:PORT…][/CLUSTER]`: an etcd cluster; coordinators
    /// elect a leader there, and standbys take over (R§9).
    Etcd(EtcdSpec),
}

impl std::str::FromStr for StoreSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(dir) = s.strip_prefix("file:") {
            if dir.is_empty() {
                return Err("file: needs a directory, e.g. file:/var/lib/ramstore".into());
            }
            return Ok(StoreSpec::File(dir.into()));
        }
        if s == "memory:" {
            return Ok(StoreSpec::Memory);
        }
        if s.starts_with("etcd://") {
            return EtcdSpec::parse(s).map(StoreSpec::Etcd);
        }
        Err(format!(
            "unknown store {s:?}: use file:DIR, etcd://HOST:PORT[,HOST:PORT][/CLUSTER] or memory:"
        ))
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::File(dir) => write!(f, "file:{}", dir.display()),
            StoreSpec::Memory => f.write_str("memory:"),
            StoreSpec::Etcd(spec) => spec.fmt(f),
        }
    }
}

/// How a coordinator runs.
#[derive(Clone)]
pub struct CoordinatorOptions {
    /// The failure detector's timing.
    pub detector: FailureDetectorConfig,
    /// Lifetime of the leader lease (etcd stores only; [`crate::election`]).
    pub lease_ttl_ms: u64,
    /// Runs once if an etcd coordinator loses its leadership, after it has stopped
    /// serving. Default: [`exit_on_lost_leadership`]; tests pass a flag instead.
    pub on_leadership_lost: LostCallback,
    /// Runs once an etcd store has answered, just before campaigning (and perhaps
    /// standing by for a long time) begins.
    pub on_campaign: Option<Arc<dyn Fn() + Send + Sync>>,
    /// The time every timer, deadline and lease of the coordinator runs on
    /// (default: the system clock).
    pub clock: Arc<dyn Clock>,
    /// Where the coordinator's random choices come from (default: the system's).
    pub rng: Arc<dyn Rng>,
    /// The term of the client leases it grants (`--client-lease-term-ms`), set
    /// before it accepts its first connection: set afterwards, a client that
    /// connected in between was granted the default term instead.
    pub client_lease_term_ms: u64,
}

impl Default for CoordinatorOptions {
    fn default() -> Self {
        Self {
            detector: FailureDetectorConfig::default(),
            lease_ttl_ms: DEFAULT_LEASE_TTL_MS,
            on_leadership_lost: Arc::new(exit_on_lost_leadership),
            on_campaign: None,
            clock: system_clock(),
            rng: system_rng(),
            client_lease_term_ms: crate::client_leases::CLIENT_LEASE_TERM_MS,
        }
    }
}

impl std::fmt::Debug for CoordinatorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorOptions")
            .field("detector", &self.detector)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("client_lease_term_ms", &self.client_lease_term_ms)
            .finish_non_exhaustive()
    }
}

/// The production reaction to lost leadership (R§9): a coordinator that is not the
/// leader must not act, and the simplest way to make sure nothing it has queued
/// (notifications, failure decisions) goes out is to end the process. A supervisor
/// restarts it, and it comes back as a standby.
pub fn exit_on_lost_leadership(reason: &str) {
    tracing::error!(reason, "exiting: this coordinator is no longer the leader");
    eprintln!("error: lost coordinator leadership: {reason}");
    std::process::exit(EXIT_LEADERSHIP_LOST);
}

/// Why a coordinator could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
    /// The failure detector's timing makes no sense.
    #[error("bad failure detector settings: {0}")]
    BadConfig(String),
    /// The lease settings make no sense.
    #[error("bad leader lease settings: {0}")]
    BadLease(String),
}

/// A running coordinator.
pub struct StartedCoordinator {
    pub addr: SocketAddr,
    pub service: Arc<CoordinatorService>,
    tasks: Vec<JoinHandle<()>>,
    /// Held with an etcd store.
    leadership: Option<Arc<Leadership>>,
}

impl StartedCoordinator {
    /// Stops serving. With an etcd store the lease is revoked in the background
    /// (best effort; see [`Self::shutdown`] to wait for it).
    pub fn stop(self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(l) = self.leadership {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move { l.resign().await });
            }
        }
    }

    /// Stops serving and, with an etcd store, gives leadership up (revokes the
    /// lease), so that a standby takes over at once rather than after the TTL.
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(l) = &self.leadership {
            l.resign().await;
        }
    }

    /// This coordinator's leadership (etcd stores only).
    pub fn leadership(&self) -> Option<&Leadership> {
        self.leadership.as_deref()
    }
}

/// Opens the store, restores the state and starts serving on `listen`, with the
/// default failure detector ([`FailureDetectorConfig::default`]).
pub async fn start(listen: &str, store: &StoreSpec) -> Result<StartedCoordinator, StartError> {
    start_with(listen, store, FailureDetectorConfig::default()).await
}

/// [`start`], with the failure detector's timing given: every
/// `ping_interval_ms` each UP server is pinged, and one that answers none for
/// `failure_timeout_ms` is declared crashed (R§7.2, R§7.3; [`crate::failure_detector`]).
pub async fn start_with(
    listen: &str,
    store: &StoreSpec,
    detector: FailureDetectorConfig,
) -> Result<StartedCoordinator, StartError> {
    let options = CoordinatorOptions {
        detector,
        ..CoordinatorOptions::default()
    };
    start_with_options(listen, store, options).await
}

/// [`start_with`] with every option. With an etcd store this first campaigns for
/// leadership and waits — without binding `listen` — until it wins (a standby waits
/// here for as long as the active coordinator lives); then it reads the state,
/// binds, serves, and reissues the notifications its predecessor may not have
/// finished (R§9, [`CoordinatorCore::reissue_actions`], queued by
/// [`CoordinatorService::new`]). If leadership is lost later, the coordinator stops
/// at once accepting connections, retrying notifications and detecting failures, and
/// `options.on_leadership_lost` runs; the default callback ends the process, which
/// also closes the connections already open (a test's callback must not rely on a
/// deposed coordinator being silent on those; its writes are refused by the fence).
pub async fn start_with_options(
    listen: &str,
    store: &StoreSpec,
    options: CoordinatorOptions,
) -> Result<StartedCoordinator, StartError> {
    let detector = options.detector;
    detector.validate().map_err(StartError::BadConfig)?;
    let mut leadership = None;
    let storage: Arc<dyn ExternalStorage> = match store {
        StoreSpec::File(dir) => Arc::new(FileStorage::open(dir).map_err(CoordinatorError::from)?),
        StoreSpec::Memory => Arc::new(MemoryStorage::new()),
        StoreSpec::Etcd(spec) => {
            crate::election::validate_lease_ttl_ms(options.lease_ttl_ms)
                .map_err(StartError::BadLease)?;
            let spec = spec.clone();
            // Connecting waits (bounded) for etcd's first answer: off the async
            // threads.
            let clock = options.clock.clone();
            let etcd =
                tokio::task::spawn_blocking(move || EtcdStorage::connect_with_clock(&spec, clock))
                    .await
                    .map_err(|e| StartError::BadConfig(format!("etcd connect task failed: {e}")))?
                    .map_err(CoordinatorError::from)?;
            if let Some(f) = &options.on_campaign {
                f();
            }
            let won = campaign(
                &etcd,
                options.lease_ttl_ms,
                listen,
                options.on_leadership_lost.clone(),
            )
            .await
            .map_err(|e| StartError::BadLease(e.to_string()))?;
            leadership = Some(Arc::new(won));
            Arc::new(etcd)
        }
    };
    let started = serve_state(listen, storage, &options, leadership.clone()).await;
    if let (Err(_), Some(l)) = (&started, &leadership) {
        // Leader but unable to serve: let a standby have it now.
        l.resign().await;
    }
    started
}

async fn serve_state(
    listen: &str,
    storage: Arc<dyn ExternalStorage>,
    options: &CoordinatorOptions,
    leadership: Option<Arc<Leadership>>,
) -> Result<StartedCoordinator, StartError> {
    let detector = options.detector;
    let core = CoordinatorCore::open(storage)?;
    let clock = options.clock.clone();
    let transport = Arc::new(TcpTransport::with_clock(clock.clone()));
    let service = CoordinatorService::new(core, transport, clock.clone(), options.rng.clone());
    service.set_client_lease_term_ms(options.client_lease_term_ms);
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: listen.to_string(),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen {
        addr: listen.to_string(),
        source,
    })?;
    let mut tasks = vec![
        tokio::spawn(serve_with_table(
            listener,
            service.clone(),
            ConnTable::with_clock(
                ConnLimits::with_max_connections(ramstore_rpc::DEFAULT_MAX_CONNECTIONS),
                clock,
            ),
        )),
        tokio::spawn(service.clone().retry_loop()),
        tokio::spawn(service.clone().failure_detector_loop(detector)),
        tokio::spawn(service.clone().recovery_loop()),
    ];
    if let Some(l) = &leadership {
        // R§9: only the leader acts. When leadership goes, stop serving, retrying
        // notifications and detecting failures at once; the callback (which exits
        // the process in production) runs from the election itself.
        let mut lost = l.lost_signal();
        let serving: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        tasks.push(tokio::spawn(async move {
            while !*lost.borrow_and_update() {
                if lost.changed().await.is_err() {
                    break;
                }
            }
            for t in serving {
                t.abort();
            }
        }));
    }
    Ok(StartedCoordinator {
        addr,
        service,
        tasks,
        leadership,
    })
}

//! Running a coordinator: open external storage, restore state, serve.

use std::net::SocketAddr;
use std::sync::Arc;

use ramstore_rpc::{serve, TcpTransport};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::coordinator::CoordinatorCore;
use crate::error::CoordinatorError;
use crate::failure_detector::FailureDetectorConfig;
use crate::file_storage::FileStorage;
use crate::service::CoordinatorService;
use crate::storage::{ExternalStorage, MemoryStorage};

/// Where the coordinator keeps its state, parsed from `--store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `file:DIR`: the embedded store in a directory.
    File(std::path::PathBuf),
    /// `memory:`: nothing survives a restart (tests).
    Memory,
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
        Err(format!(
            "unknown store {s:?}: use file:DIR (etcd comes later)"
        ))
    }
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
}

/// A running coordinator.
pub struct StartedCoordinator {
    pub addr: SocketAddr,
    pub service: Arc<CoordinatorService>,
    tasks: Vec<JoinHandle<()>>,
}

impl StartedCoordinator {
    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
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
    detector.validate().map_err(StartError::BadConfig)?;
    let storage: Arc<dyn ExternalStorage> = match store {
        StoreSpec::File(dir) => Arc::new(FileStorage::open(dir).map_err(CoordinatorError::from)?),
        StoreSpec::Memory => Arc::new(MemoryStorage::new()),
    };
    let core = CoordinatorCore::open(storage)?;
    let service = CoordinatorService::new(core, Arc::new(TcpTransport::new()));
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
    let tasks = vec![
        tokio::spawn(serve(listener, service.clone())),
        tokio::spawn(service.clone().retry_loop()),
        tokio::spawn(service.clone().failure_detector_loop(detector)),
    ];
    Ok(StartedCoordinator {
        addr,
        service,
        tasks,
    })
}

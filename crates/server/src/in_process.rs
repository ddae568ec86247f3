//! A storage server inside another program (docs/design.md §7): the same parts as
//! [`crate::start`] — store, replica manager, backup, failure monitor — built over a
//! [`Transport`] the caller gives and registered by the caller wherever its
//! requests arrive, with no listener, no files and no threads of its own. The
//! deterministic cluster simulator (`crates/sim`) runs whole clusters of these on
//! one thread on simulated time.
//!
//! Differences from a TCP server, all by design: the caller owns the backup (any
//! [`ramstore_backup::Disk`]), the store's configuration (segment size, cleaner
//! mode) and where blocking work runs ([`Blocking`]); no identity is kept, so
//! every start is a new server (a restart enlists afresh, R§7.3); there are no
//! metrics, Redis or connection limits.

use std::sync::Arc;
use std::time::Duration;

use ramstore_master::StoreConfig;
use ramstore_rpc::Transport;
use ramstore_wire::{Request, Services};
use tokio::task::JoinHandle;

use crate::backup_service::BackupService;
use crate::blocking::Blocking;
use crate::parts::{build_store, enlist, run_enlisted};
use crate::server_options::{ServerError, ServerOptions};
use crate::storage_service::StorageService;

/// What an in-process server is made of besides its [`ServerOptions`].
pub struct InProcessParts {
    /// Everything this server sends (replication, pings, enlistment, recovery
    /// fetches) goes through it.
    pub transport: Arc<dyn Transport>,
    /// The address this server enlists under (where the caller makes its service
    /// reachable).
    pub address: String,
    /// The backup half, if this server runs one.
    pub backup: Option<BackupService>,
    /// The master's store configuration; its clock and replica sink are set here.
    pub store: StoreConfig,
    /// Where blocking work runs ([`Blocking::Inline`] in a simulation).
    pub blocking: Blocking,
    /// The read speed this backup reports to the coordinator, MB/s (R§7.1).
    pub backup_read_mbps: u32,
}

/// A running in-process server: the service to make reachable, and the tasks
/// that stop it when aborted (a crash: no flush, no goodbye).
pub struct InProcessServer {
    pub service: Arc<StorageService>,
    pub tasks: Vec<JoinHandle<()>>,
}

impl InProcessServer {
    /// Stops every task this server started (its in-flight requests go on until
    /// the caller stops delivering to it).
    pub fn abort(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

/// Builds a server from `options` and `parts` and enlists it with the
/// coordinator (`options.coordinator`) over `parts.transport`. The caller must
/// have made `register(service)` possible before the coordinator talks to it:
/// `register` is called with the service before enlistment.
pub async fn start_in_process(
    options: &ServerOptions,
    parts: InProcessParts,
    register: impl FnOnce(Arc<StorageService>),
) -> Result<InProcessServer, ServerError> {
    let transport = parts.transport;
    let (store, manager) = build_store(options, parts.store, transport.clone())?;
    let services = Services {
        master: true,
        backup: parts.backup.is_some(),
        replicated_log: manager.is_some(),
    };
    let backup = parts.backup.map(|b| b.with_blocking(parts.blocking));
    let no_space_wait =
        Duration::from_millis(options.no_space_wait_ms.min(crate::MAX_NO_SPACE_WAIT_MS));
    let mut service = StorageService::with_backup(store, backup)
        .with_no_space_wait(no_space_wait)
        .with_rng(options.rng.clone())
        .with_blocking(parts.blocking)
        .with_recovery_transport(transport.clone());
    if let Some(m) = &manager {
        service = service.with_replicas(m.clone());
    }
    let service = Arc::new(service);
    register(service.clone());
    let server_id = enlist(
        &options.clock,
        transport.as_ref(),
        &options.coordinator,
        &Request::Enlist {
            replaces_server_id: 0,
            services,
            memory_bytes: options.memory_bytes as u64,
            backup_read_mbps: if services.backup {
                parts.backup_read_mbps
            } else {
                0
            },
            address: &parts.address,
            failure_domain: &options.failure_domain,
        },
    )
    .await?;
    let tasks = run_enlisted(options, &service, manager.as_ref(), server_id, transport);
    Ok(InProcessServer { service, tasks })
}

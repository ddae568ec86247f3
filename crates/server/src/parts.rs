//! The parts every storage server is built from, whether it serves TCP
//! ([`crate::start`]) or runs inside another program
//! ([`crate::in_process::start_in_process`]): the store and replica manager, the
//! enlistment with the coordinator, and what runs once enlisted.

use std::sync::Arc;
use std::time::Duration;

use ramstore_backup::BackupClient;
use ramstore_clock::Clock;
use ramstore_master::{ObjectStore, StoreConfig};
use ramstore_rpc::Transport;
use ramstore_wire::{decode_response, encode_request, ErrorBody, Request, Response, Status};
use tokio::task::JoinHandle;

use crate::replica_manager::{ReplicaManager, MAX_REPLICAS};
use crate::server_options::{ServerError, ServerOptions, ENLIST_TIMEOUT_MS};
use crate::storage_service::StorageService;
use crate::{client_lease_expiry, failure_monitor, key_expiry, tx_recovery};

/// Checks the options and builds the master's store (`store_config` with the
/// options' clock) and replica manager (whose BackupWrites go over `transport`): the first step of [`start`] and of
/// [`crate::in_process::start_in_process`].
pub(crate) fn build_store(
    options: &ServerOptions,
    mut store_config: StoreConfig,
    transport: Arc<dyn Transport>,
) -> Result<(ObjectStore, Option<Arc<ReplicaManager>>), ServerError> {
    if options.replicas > MAX_REPLICAS {
        return Err(ServerError::Replicas(options.replicas));
    }
    options.monitor.validate().map_err(ServerError::Monitor)?;
    let clock = options.clock.clone();
    let manager = (options.replicas > 0).then(|| {
        // Rounds are bounded by the replica manager, not per RPC (no timer per
        // replication RPC on the write path).
        let client = BackupClient::new(transport).with_rpc_deadline(ramstore_rpc::NO_DEADLINE);
        let seed = options.rng.next_u64();
        let manager = ReplicaManager::new(options.replicas, client, seed, clock.clone());
        manager.set_replica_check_interval_ms(options.replica_check_interval_ms);
        manager.set_placement(options.placement);
        manager
    });
    store_config.clock = clock;
    if let Some(m) = &manager {
        store_config.replicas = m.clone();
    }
    Ok((ObjectStore::new(store_config)?, manager))
}

/// What a server does once enlisted as `server_id`: records its id, starts
/// replicating (R§4.2), its lease-expiry loop (RIFL §4.2), its active key
/// expirer (`key_expiry`), its transaction
/// recovery manager (SOSP'15 §6.4) and its failure
/// monitor (pings and zombie detection, R§7.2, R§7.11, over `transport`);
/// returns the tasks it started.
pub(crate) fn run_enlisted(
    options: &ServerOptions,
    service: &Arc<StorageService>,
    manager: Option<&Arc<ReplicaManager>>,
    server_id: u64,
    transport: Arc<dyn Transport>,
) -> Vec<JoinHandle<()>> {
    service.set_server_id(server_id);
    service.set_migration_links(transport.clone(), options.coordinator.clone());
    let mut tasks = Vec::new();
    if let Some(m) = manager {
        tasks.push(m.start(
            service.store().log_handle(),
            server_id,
            &options.failure_domain,
        ));
    }
    tasks.extend(client_lease_expiry::start(
        service.clone(),
        transport.clone(),
        options.coordinator.clone(),
        options.client_lease_check_ms,
    ));
    tasks.extend(key_expiry::start(
        service.clone(),
        options.expire_interval_ms,
    ));
    tasks.extend(tx_recovery::start(
        service.clone(),
        transport.clone(),
        options.coordinator.clone(),
        tx_recovery::check_ms_for(options.tx_recovery_timeout_ms),
        options.tx_recovery_timeout_ms,
    ));
    tasks.push(failure_monitor::start(
        service.clone(),
        transport,
        options.coordinator.clone(),
        options.monitor,
        options.on_zombie.clone(),
    ));
    tasks
}

/// Enlists with the coordinator, retrying while it is unreachable (it may start
/// after us). A refusal for a bad request (a bad failure domain, say) is final.
/// `coordinator` may list several addresses separated by commas (the active
/// coordinator and its standbys, R§9): after a transport failure the next one is
/// tried, round-robin.
pub(crate) async fn enlist(
    clock: &Arc<dyn Clock>,
    transport: &dyn Transport,
    coordinator: &str,
    request: &Request<'_>,
) -> Result<u64, ServerError> {
    let mut frame = Vec::new();
    encode_request(0, request, &mut frame).map_err(|e| ServerError::Enlist {
        addr: coordinator.into(),
        reason: e.to_string(),
    })?;
    let addrs: Vec<&str> = coordinator
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    let mut next = 0;
    let deadline = clock.deadline_after(Duration::from_millis(ENLIST_TIMEOUT_MS));
    let mut last = String::new();
    while clock.now() < deadline {
        let addr = addrs
            .get(next % addrs.len().max(1))
            .copied()
            .unwrap_or(coordinator);
        next += 1;
        match transport
            .call(addr, frame.clone(), Duration::from_secs(10))
            .await
        {
            Ok(bytes) => match decode_response(&bytes) {
                Ok((_, Response::Enlist { server_id })) => return Ok(server_id),
                Ok((
                    _,
                    Response::Error(ErrorBody::Message {
                        status: status @ (Status::InvalidRequest | Status::TooLarge),
                        message,
                    }),
                )) => {
                    return Err(ServerError::Enlist {
                        addr: coordinator.into(),
                        reason: format!("{status}: {message}"),
                    })
                }
                Ok((_, other)) => last = format!("unexpected answer {other:?}"),
                Err(e) => last = e.to_string(),
            },
            Err(e) => {
                last = e.to_string();
                // A standby does not listen: try the next coordinator at once.
                if next % addrs.len().max(1) != 0 {
                    continue;
                }
            }
        }
        clock.sleep(Duration::from_millis(200)).await;
    }
    Err(ServerError::Enlist {
        addr: coordinator.into(),
        reason: last,
    })
}

//! Requests that change the persisted cluster state: tables, tablet splits,
//! enlistment, an operator's crash drill and a clean leave (R§3, R§7, R§9). Each
//! asks the core, which persists the change before it returns its actions
//! (R§9), then has the notifier carry them out or queue them.
//!
//! Thread-safety: `Send + Sync`; holds the core's lock for one core call only.

use std::sync::Arc;

use crate::cluster::Cluster;
use crate::error::CoordinatorError;
use crate::notifier::Notifier;
use crate::server_list::ServerId;

/// An `Enlist` request's fields.
#[derive(Debug, Clone, Copy)]
pub struct Enlistment<'a> {
    pub replaces: Option<ServerId>,
    pub services: u32,
    pub memory_bytes: u64,
    pub backup_read_mbps: u32,
    pub address: &'a str,
    pub failure_domain: &'a str,
}

/// Table and membership changes. Thread-safe.
pub struct Changes {
    cluster: Arc<Cluster>,
    notifier: Arc<Notifier>,
}

impl Changes {
    pub fn new(cluster: Arc<Cluster>, notifier: Arc<Notifier>) -> Self {
        Self { cluster, notifier }
    }

    /// Creates table `name` over `server_span` masters; its id.
    pub async fn create_table(
        &self,
        name: &str,
        server_span: u32,
    ) -> Result<u64, CoordinatorError> {
        let (table_id, actions) = self.cluster.core().create_table(name, server_span)?;
        tracing::info!(name, table_id, server_span, "table created");
        self.notifier.carry_out(actions).await;
        Ok(table_id)
    }

    /// Drops table `name`.
    pub async fn drop_table(&self, name: &str) -> Result<(), CoordinatorError> {
        let actions = self.cluster.core().drop_table(name)?;
        tracing::info!(name, "table dropped");
        self.notifier.carry_out(actions).await;
        Ok(())
    }

    /// Splits the tablet of table `name` holding `split_hash` there.
    pub async fn split_tablet(&self, name: &str, split_hash: u64) -> Result<(), CoordinatorError> {
        let actions = self.cluster.core().split_tablet(name, split_hash)?;
        self.notifier.carry_out(actions).await;
        Ok(())
    }

    /// Enlists a server; its new id. The answer goes first: the new server learns
    /// its id, then its tablets arrive (TakeTabletOwnership is idempotent and
    /// retried), so the actions are queued rather than sent now.
    pub fn enlist(&self, e: Enlistment<'_>) -> Result<ServerId, CoordinatorError> {
        let (server_id, actions) = self.cluster.core().enlist(
            e.address,
            e.services,
            e.memory_bytes,
            e.failure_domain,
            e.backup_read_mbps,
            e.replaces,
        )?;
        tracing::info!(
            server_id = server_id.0,
            server = %ramstore_wire::server_id::Show(server_id.0),
            address = e.address,
            failure_domain = e.failure_domain,
            backup_read_mbps = e.backup_read_mbps,
            "server enlisted"
        );
        self.notifier.queue(actions);
        Ok(server_id)
    }

    /// An operator's drill (`ramstore crash-server`): recovered like any crash (R§7).
    pub fn crash_server(&self, server_id: u64) -> Result<(), CoordinatorError> {
        let actions = self.cluster.core().server_crashed(ServerId(server_id))?;
        tracing::warn!(server_id, "server declared crashed by an operator");
        self.notifier.queue(actions);
        Ok(())
    }

    /// A server stopping cleanly (SIGINT/SIGTERM): its data is recovered now, as a
    /// restart's (design notes "Server identity across restarts").
    pub fn leave(&self, server_id: u64) -> Result<(), CoordinatorError> {
        let actions = self.cluster.core().server_left(ServerId(server_id))?;
        if !actions.is_empty() {
            tracing::info!(
                server = %ramstore_wire::server_id::Show(server_id),
                "server stopped cleanly; its data is recovered from its backups (a restart, R§7)"
            );
        }
        self.notifier.queue(actions);
        Ok(())
    }
}

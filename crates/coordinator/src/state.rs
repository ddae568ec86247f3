//! The coordinator's whole metadata (R§9: the server list and the tables) and the
//! document it is persisted as.
//!
//! The state is small (servers and tablets, not objects), so it is written whole, as
//! one JSON document, on every change. RAMCloud writes one external-storage object per
//! server-list slot and per table instead (R§9); splitting the document that way is a
//! later optimisation that the [`crate::ExternalStorage`] trait already allows.

use serde::{Deserialize, Serialize};

use crate::migrations::Migrations;
use crate::server_list::ServerList;
use crate::tables::Tables;

/// The external-storage key of the persisted state document.
pub const STATE_KEY: &str = "state";
/// Version of the state document's layout; a coordinator refuses any other.
pub const STATE_FORMAT: u32 = 1;

/// Everything the coordinator must remember across a crash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorState {
    servers: ServerList,
    tables: Tables,
    /// Tablet migrations in progress (K§2.3); absent from documents written
    /// before migrations existed.
    #[serde(default)]
    migrations: Migrations,
}

impl CoordinatorState {
    pub fn servers(&self) -> &ServerList {
        &self.servers
    }

    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    pub(crate) fn servers_mut(&mut self) -> &mut ServerList {
        &mut self.servers
    }

    pub(crate) fn tables_mut(&mut self) -> &mut Tables {
        &mut self.tables
    }

    pub fn migrations(&self) -> &Migrations {
        &self.migrations
    }

    pub(crate) fn migrations_mut(&mut self) -> &mut Migrations {
        &mut self.migrations
    }

    /// Checks every invariant the coordinator relies on, so that a restored document
    /// that was damaged (or hand-edited) is refused at start-up rather than acted on.
    pub(crate) fn validate(&self) -> Result<(), String> {
        self.servers.validate()?;
        self.tables.validate(|id| self.servers.get(id).is_some())?;
        self.migrations
            .validate(|id| self.servers.get(id).is_some())
    }
}

/// The document stored under [`STATE_KEY`].
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct PersistedState {
    pub(crate) format: u32,
    /// Incremented on every write; orders the documents a coordinator wrote, and is
    /// where R§9's per-update sequence numbers will go once updates are reissued
    /// selectively rather than all at once.
    pub(crate) sequence: u64,
    pub(crate) state: CoordinatorState,
}

//! The cluster's server list: every server that ever enlisted, with its state (R§7.3).
//!
//! The coordinator keeps the master copy and pushes it to every server after each
//! change; the version lets servers order the pushes they receive. A server's id is
//! never reused: once a server is CRASHED or removed it can only come back with a new
//! id (R§7.3, "once a server has been marked CRASHED, it will never again be UP"),
//! which is what lets peers fence a zombie by id alone.
//!
//! An id is a stable *index* and an *incarnation* (`ramstore_wire::server_id`): a
//! server restarted on its directory names its previous id and gets the next
//! incarnation of the same index, so operators keep seeing one server, while the
//! `u64` it runs under is new (design notes "Server identity across restarts").

use std::fmt;

use ramstore_wire::server_id;
use serde::{Deserialize, Serialize};

/// `services` bit: the server runs a master (holds tablets in DRAM).
pub const SERVICE_MASTER: u32 = 1 << 0;
/// `services` bit: the server runs a backup (stores segment replicas on disk).
pub const SERVICE_BACKUP: u32 = 1 << 1;
/// `services` bit: the master replicates its log (R > 0), so its data is
/// recovered from backups after a crash (R§7).
pub const SERVICE_REPLICATED_LOG: u32 = 1 << 2;

/// The longest server address accepted, in bytes (a host name of 253 bytes plus a
/// port fits comfortably).
pub const MAX_ADDRESS_BYTES: usize = 300;

/// The longest failure domain name accepted, in bytes (the wire's limit too).
pub const MAX_FAILURE_DOMAIN_BYTES: usize = 64;

/// Whether `domain` is an acceptable failure domain name: at most
/// [`MAX_FAILURE_DOMAIN_BYTES`] bytes, no whitespace or control characters (it is
/// one word in the coordinator's stats text). Empty is allowed: the server is its
/// own failure domain.
pub fn valid_failure_domain(domain: &str) -> bool {
    domain.len() <= MAX_FAILURE_DOMAIN_BYTES
        && !domain.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A server's identity in the cluster: a stable index (from 1) and an incarnation
/// in one `u64` (`ramstore_wire::server_id`); no `u64` is ever reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ServerId(pub u64);

impl ServerId {
    /// The stable part: the same for every run of one server (its directory).
    pub fn index(self) -> u64 {
        server_id::index(self.0)
    }

    /// Which run of its index this is (0: the first).
    pub fn incarnation(self) -> u64 {
        server_id::incarnation(self.0)
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server {}", server_id::Show(self.0))
    }
}

/// Where a server is in its life (R§7.3). Transitions only go forward:
/// Up → Crashed → Removed, or Up → Removed.
// Ordered by life stage (Up < Crashed < Removed), which is the only direction a
// status may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ServerStatus {
    /// Enlisted and believed alive; serves its tablets.
    Up,
    /// Declared dead by the coordinator; its tablets await recovery.
    Crashed,
    /// Gone for good (recovered, replaced by a restart, or decommissioned). Kept in
    /// the list so servers that see the id learn it is dead.
    Removed,
}

/// One server in the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerEntry {
    pub id: ServerId,
    /// Where the server accepts RPCs (`host:port`).
    pub address: String,
    /// [`SERVICE_MASTER`] | [`SERVICE_BACKUP`] bits.
    pub services: u32,
    /// DRAM the master offers for its log, in bytes.
    pub memory_bytes: u64,
    pub status: ServerStatus,
    /// Servers in one failure domain share a failure cause (a rack, a power
    /// supply); replica placement keeps replicas of a segment, and the master, in
    /// distinct domains (R§7.1). Empty: the server is its own domain. (Absent from
    /// state documents written before it existed: empty.)
    #[serde(default)]
    pub failure_domain: String,
    /// The backup's disk read speed measured at its start-up, in MB/s (0: no
    /// backup, or not reported).
    #[serde(default)]
    pub backup_read_mbps: u32,
    /// The server told the coordinator it was stopping cleanly (`Leave`) before it
    /// left the UP state: its recovery is an ordinary restart's, not a crash's.
    /// (Absent from older state documents: false.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped_cleanly: bool,
}

impl ServerEntry {
    pub fn is_up(&self) -> bool {
        self.status == ServerStatus::Up
    }

    pub fn is_master(&self) -> bool {
        self.services & SERVICE_MASTER != 0
    }

    pub fn is_backup(&self) -> bool {
        self.services & SERVICE_BACKUP != 0
    }

    /// Whether the master replicates its log (its data survives its crash).
    pub fn has_replicated_log(&self) -> bool {
        self.services & SERVICE_REPLICATED_LOG != 0
    }
}

/// Every server that ever enlisted, sorted by id, with the list's version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerList {
    /// Incremented by the coordinator on every operation that changes an entry.
    version: u64,
    /// The index the next new server gets (a restarted one keeps its index);
    /// persisted so ids are never reused, also across coordinator restarts.
    next_id: u64,
    servers: Vec<ServerEntry>,
}

impl Default for ServerList {
    fn default() -> Self {
        Self {
            version: 0,
            next_id: 1,
            servers: Vec::new(),
        }
    }
}

impl ServerList {
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The id the next new (not restarted) server will get: incarnation 0 of the
    /// next index.
    pub fn next_id(&self) -> ServerId {
        ServerId(self.next_id)
    }

    /// The newest incarnation of `index`, if any server ever had that index.
    pub fn latest_of(&self, index: u64) -> Option<&ServerEntry> {
        self.servers
            .iter()
            .filter(|e| e.id.index() == index)
            .max_by_key(|e| e.id)
    }

    /// The id a server restarting after run `old` gets: the next incarnation of
    /// `old`'s index, if `old` is listed and is that index's newest incarnation
    /// (so one directory's restarts form one line of incarnations, and a stale
    /// copy of a directory cannot take an index that moved on); else `None`.
    pub fn next_incarnation(&self, old: ServerId) -> Option<ServerId> {
        let latest = self.latest_of(old.index())?;
        if latest.id != old {
            return None;
        }
        server_id::compose(old.index(), old.incarnation() + 1).map(ServerId)
    }

    /// Every entry, sorted by id, including crashed and removed servers.
    pub fn entries(&self) -> &[ServerEntry] {
        &self.servers
    }

    pub fn get(&self, id: ServerId) -> Option<&ServerEntry> {
        self.servers
            .binary_search_by_key(&id, |e| e.id)
            .ok()
            .map(|i| &self.servers[i])
    }

    /// UP servers offering the master service.
    pub fn up_masters(&self) -> impl Iterator<Item = &ServerEntry> {
        self.servers.iter().filter(|e| e.is_up() && e.is_master())
    }

    /// Adds an UP server: the next incarnation of `restarted`'s index if
    /// [`Self::next_incarnation`] allows it, else incarnation 0 of a new index.
    /// `None` when no id is left (2³² indexes or incarnations).
    pub(crate) fn add(
        &mut self,
        address: &str,
        services: u32,
        memory_bytes: u64,
        failure_domain: &str,
        backup_read_mbps: u32,
        restarted: Option<ServerId>,
    ) -> Option<ServerId> {
        let id = match restarted.and_then(|old| self.next_incarnation(old)) {
            Some(id) => id,
            None => {
                let id = ServerId(server_id::compose(self.next_id, 0)?);
                self.next_id += 1;
                id
            }
        };
        // A new incarnation sorts after every incarnation-0 id, so insert in order.
        let at = self.servers.partition_point(|e| e.id < id);
        self.servers.insert(
            at,
            ServerEntry {
                id,
                address: address.to_owned(),
                services,
                memory_bytes,
                status: ServerStatus::Up,
                failure_domain: failure_domain.to_owned(),
                backup_read_mbps,
                stopped_cleanly: false,
            },
        );
        Some(id)
    }

    /// Marks `id` as having stopped cleanly (see [`ServerEntry::stopped_cleanly`]).
    pub(crate) fn set_stopped_cleanly(&mut self, id: ServerId) {
        if let Ok(i) = self.servers.binary_search_by_key(&id, |e| e.id) {
            self.servers[i].stopped_cleanly = true;
        }
    }

    /// Sets `id`'s status; returns false if there is no such server.
    pub(crate) fn set_status(&mut self, id: ServerId, status: ServerStatus) -> bool {
        match self.servers.binary_search_by_key(&id, |e| e.id) {
            Ok(i) => {
                self.servers[i].status = status;
                true
            }
            Err(_) => false,
        }
    }

    pub(crate) fn bump_version(&mut self) {
        self.version += 1;
    }

    /// Checks the invariants a restored list must satisfy.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.next_id == 0 {
            return Err("next server id is 0".to_owned());
        }
        let mut prev = 0;
        for e in &self.servers {
            if e.id.0 <= prev || e.id.index() == 0 || e.id.index() >= self.next_id {
                return Err(format!(
                    "{} out of order or its index not below the next index {}",
                    e.id, self.next_id
                ));
            }
            prev = e.id.0;
        }
        Ok(())
    }
}

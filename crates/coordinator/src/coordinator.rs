//! [`CoordinatorCore`]: the coordinator's operations on its state, each persisted to
//! external storage before it is applied or acted on (R§9).
//!
//! Every mutating operation works on a copy of the state, writes the copy to storage,
//! and only then replaces the in-memory state and returns the [`Action`]s the network
//! layer must carry out. So:
//! - a failed write changes nothing (the caller gets the error and no actions);
//! - a coordinator that crashes after the write but before the actions were carried
//!   out finds the change in storage on restart and reissues the notifications
//!   ([`CoordinatorCore::reissue_actions`]); every action is idempotent at its
//!   receiver ("take this tablet; if you already own it, do nothing"), so reissuing is
//!   always safe (R§9).
//!
//! An operation that changes nothing (creating an existing table, splitting at an
//! existing boundary, crashing an already crashed server) writes nothing and returns
//! no actions, which is what makes retried requests harmless.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::error::CoordinatorError;
use crate::server_list::{
    valid_failure_domain, ServerEntry, ServerId, ServerStatus, MAX_ADDRESS_BYTES,
};
use crate::state::{CoordinatorState, PersistedState, STATE_FORMAT, STATE_KEY};
use crate::storage::{ExternalStorage, StorageError};
use crate::tables::{split_hash_space, validate_table_name, Table, TabletEntry, MAX_SERVER_SPAN};

/// Something the network layer must do after an operation returned, in order.
/// Every action is idempotent at its receiver, so it may be repeated (after a
/// coordinator restart, or a retry); a receiver that is no longer UP ("server not up")
/// counts as done.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Tell the master at `address` to own this tablet (empty, if it has no data for
    /// it); if it already owns it, nothing happens.
    TakeTablet {
        server_id: ServerId,
        address: String,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    },
    /// Tell the master at `address` to drop this tablet and its objects; if it does
    /// not own it, nothing happens.
    DropTablet {
        server_id: ServerId,
        address: String,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    },
    /// Tell the master at `address` that its tablet of `table_id` containing
    /// `split_hash` is now two tablets, `[start, split_hash - 1]` and
    /// `[split_hash, end]`; if `split_hash` already starts a tablet, nothing happens.
    SplitTablet {
        server_id: ServerId,
        address: String,
        table_id: u64,
        split_hash: u64,
    },
    /// Send the current server list ([`CoordinatorCore::server_list`]) to every UP
    /// server.
    PushServerList,
    /// Tell the master at `address` to own the tablet as the target of migration
    /// `migration_id` and pull its records from the source (K§2.3); if it already
    /// does, nothing happens.
    TakeMigratingTablet {
        server_id: ServerId,
        address: String,
        record: crate::migrations::MigrationRecord,
        source_address: String,
    },
}

/// The coordinator's state and its persistence; no networking.
///
/// Not internally synchronised: mutating operations take `&mut self`, and the caller
/// keeps the core behind one `Mutex`. Storage writes happen while that lock is held,
/// so the order of the documents in storage is the order the changes were applied.
pub struct CoordinatorCore {
    state: CoordinatorState,
    /// Sequence number of the last document written (or read at start-up).
    sequence: u64,
    storage: Arc<dyn ExternalStorage>,
}

// The caller shares the core between RPC handler threads behind a Mutex, which needs
// `Send`; `Sync` lets read-only accessors run under a read lock if it prefers one.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CoordinatorCore>();
};

impl std::fmt::Debug for CoordinatorCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorCore")
            .field("state", &self.state)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl CoordinatorCore {
    /// Restores the state from `storage`, or starts empty if it holds none. A stored
    /// document that cannot be parsed or breaks an invariant is an error: starting
    /// empty instead would forget tables and reuse ids.
    pub fn open(storage: Arc<dyn ExternalStorage>) -> Result<Self, CoordinatorError> {
        let (state, sequence) = match storage.get(STATE_KEY)? {
            None => (CoordinatorState::default(), 0),
            Some(bytes) => {
                let corrupt = |reason: String| StorageError::Corrupt {
                    key: STATE_KEY.to_owned(),
                    reason,
                };
                let doc: PersistedState = serde_json::from_slice(&bytes)
                    .map_err(|e| corrupt(format!("not a state document: {e}")))?;
                if doc.format != STATE_FORMAT {
                    return Err(corrupt(format!(
                        "format {} is not the supported format {STATE_FORMAT}",
                        doc.format
                    ))
                    .into());
                }
                doc.state.validate().map_err(corrupt)?;
                (doc.state, doc.sequence)
            }
        };
        Ok(Self {
            state,
            sequence,
            storage,
        })
    }

    /// The external storage the state is kept in (other parts persist their own
    /// keys there, e.g. `client_leases`).
    pub fn storage(&self) -> Arc<dyn ExternalStorage> {
        self.storage.clone()
    }

    /// The whole current state.
    pub fn state(&self) -> &CoordinatorState {
        &self.state
    }

    /// Sequence number of the last persisted state document (0: none yet).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Adds an UP server at `address` offering `services` ([`crate::SERVICE_MASTER`],
    /// [`crate::SERVICE_BACKUP`]) and returns its new id.
    ///
    /// A server that restarts comes back with a new id (R§7.3). A server restarted
    /// on its directory names its previous id in `replaces`: if that id is the
    /// newest incarnation of its index, the new id is the next incarnation of the
    /// same index (the server keeps its identity; `ServerList::next_incarnation`),
    /// else a new index. The old run's entry — `replaces` if it is not removed yet,
    /// and any UP server with the same address — stops being UP: Crashed if it owns
    /// tablets, so crash recovery brings their objects back from its backups (R§7),
    /// else Removed. Tablets still owned by any removed server after that go to the
    /// least-loaded UP masters (they start empty: their objects were in DRAM only).
    /// A `replaces` id that is unknown is ignored.
    ///
    /// `failure_domain` (empty: the server is its own domain) and
    /// `backup_read_mbps` (0: no backup) are kept in the entry and pushed with the
    /// server list, for replica placement (R§7.1).
    pub fn enlist(
        &mut self,
        address: &str,
        services: u32,
        memory_bytes: u64,
        failure_domain: &str,
        backup_read_mbps: u32,
        replaces: Option<ServerId>,
    ) -> Result<(ServerId, Vec<Action>), CoordinatorError> {
        if address.is_empty() || address.len() > MAX_ADDRESS_BYTES {
            return Err(CoordinatorError::BadAddress {
                address: address.to_owned(),
            });
        }
        if !valid_failure_domain(failure_domain) {
            return Err(CoordinatorError::BadFailureDomain {
                domain: failure_domain.to_owned(),
            });
        }
        let mut next = self.state.clone();
        let mut replaced = BTreeSet::new();
        let restarted = replaces.filter(|&old| next.servers().get(old).is_some());
        if let Some(old) = replaces {
            if next
                .servers()
                .get(old)
                .is_some_and(|e| e.status != ServerStatus::Removed)
            {
                replaced.insert(old);
            }
        }
        replaced.extend(
            next.servers()
                .entries()
                .iter()
                .filter(|e| e.is_up() && e.address == address)
                .map(|e| e.id),
        );
        let id = next
            .servers_mut()
            .add(
                address,
                services,
                memory_bytes,
                failure_domain,
                backup_read_mbps,
                restarted,
            )
            .ok_or(CoordinatorError::ServerIdsExhausted)?;
        // A replaced server's data is recovered from its backups like any crashed
        // master's (R§7): one that owns tablets becomes Crashed and crash
        // recovery moves them; one that owns none has nothing to recover.
        for &old in &replaced {
            let owns_tablets = next.tables().tablets().any(|t| t.server_id == old);
            let status = if owns_tablets {
                ServerStatus::Crashed
            } else {
                ServerStatus::Removed
            };
            if next.servers().get(old).is_some_and(|e| e.status < status) {
                next.servers_mut().set_status(old, status);
            }
        }
        let moved = place_orphans(&mut next);
        let mut actions = take_actions(&next, &moved);
        actions.push(Action::PushServerList);
        self.commit(next)?;
        Ok((id, actions))
    }

    /// Creates table `name` split into `server_span` tablets (0 counts as 1) and
    /// returns its id; an existing table's id is returned with no actions (creation is
    /// idempotent by name, whatever the span).
    ///
    /// The key-hash space is split into `server_span` equal contiguous ranges covering
    /// `[0, u64::MAX]` (the last absorbs the remainder), dealt round-robin to the UP
    /// masters ordered by (tablets owned, id), so the new table's tablets differ by at
    /// most one between masters and the least-loaded masters get the extra ones.
    pub fn create_table(
        &mut self,
        name: &str,
        server_span: u32,
    ) -> Result<(u64, Vec<Action>), CoordinatorError> {
        validate_table_name(name).map_err(CoordinatorError::BadName)?;
        if server_span > MAX_SERVER_SPAN {
            return Err(CoordinatorError::BadServerSpan(server_span));
        }
        if let Some(table) = self.state.tables().get(name) {
            return Ok((table.id, Vec::new()));
        }
        let masters = masters_by_load(&self.state);
        if masters.is_empty() {
            return Err(CoordinatorError::NoMasters);
        }
        let placed: Vec<_> = split_hash_space(server_span)
            .into_iter()
            .zip(masters.iter().copied().cycle())
            .collect();
        let mut next = self.state.clone();
        let id = next.tables_mut().create(name, &placed);
        let tablets: Vec<_> = next
            .tables()
            .get(name)
            .map(|t| t.tablets.clone())
            .unwrap_or_default();
        let actions = take_actions(&next, &tablets);
        self.commit(next)?;
        Ok((id, actions))
    }

    /// Drops table `name`: one `DropTablet` per tablet, to its owner. The id is never
    /// given to another table.
    pub fn drop_table(&mut self, name: &str) -> Result<Vec<Action>, CoordinatorError> {
        let mut next = self.state.clone();
        let table = next
            .tables_mut()
            .remove(name)
            .ok_or_else(|| CoordinatorError::TableDoesntExist(name.to_owned()))?;
        next.migrations_mut().forget_table(table.id);
        let actions = table
            .tablets
            .iter()
            .map(|t| Action::DropTablet {
                server_id: t.server_id,
                address: address_of(&next, t.server_id),
                table_id: t.table_id,
                start_hash: t.start_hash,
                end_hash: t.end_hash,
            })
            .collect();
        self.commit(next)?;
        Ok(actions)
    }

    /// The id of table `name`.
    pub fn get_table_id(&self, name: &str) -> Result<u64, CoordinatorError> {
        self.state
            .tables()
            .get(name)
            .map(|t| t.id)
            .ok_or_else(|| CoordinatorError::TableDoesntExist(name.to_owned()))
    }

    /// Splits the tablet of `name` containing `split_hash` into `[start,
    /// split_hash - 1]` and `[split_hash, end]`, both on the same server, which learns
    /// of it through a `SplitTablet` action. If `split_hash` already starts a tablet
    /// (including 0) nothing changes and no action is returned.
    pub fn split_tablet(
        &mut self,
        name: &str,
        split_hash: u64,
    ) -> Result<Vec<Action>, CoordinatorError> {
        let mut next = self.state.clone();
        let table = next
            .tables_mut()
            .get_mut(name)
            .ok_or_else(|| CoordinatorError::TableDoesntExist(name.to_owned()))?;
        if table.tablets.iter().any(|t| t.start_hash == split_hash) {
            return Ok(Vec::new());
        }
        let table_id = table.id;
        if let Some(m) = self
            .state
            .migrations()
            .iter()
            .find(|m| m.table_id == table_id && m.contains(split_hash))
        {
            return Err(CoordinatorError::MigrationInProgress(m.id));
        }
        table.split_at(split_hash);
        // split_hash does not start a tablet (checked above), so the split made
        // one starting there, whose owner is the old tablet's.
        let Some(old) = table
            .tablets
            .iter()
            .find(|t| t.start_hash == split_hash)
            .copied()
        else {
            return Ok(Vec::new());
        };
        let action = Action::SplitTablet {
            server_id: old.server_id,
            address: address_of(&next, old.server_id),
            table_id: old.table_id,
            split_hash,
        };
        self.commit(next)?;
        Ok(vec![action])
    }

    /// Marks server `id` Crashed (R§7.3) and asks for the new list to be pushed. Its
    /// tablets stay assigned to it: moving them is crash recovery's job (a later
    /// issue). Crashing a server that is already Crashed or Removed changes nothing.
    pub fn server_crashed(&mut self, id: ServerId) -> Result<Vec<Action>, CoordinatorError> {
        let entry = self
            .state
            .servers()
            .get(id)
            .ok_or(CoordinatorError::UnknownServer(id))?;
        if entry.status != ServerStatus::Up {
            return Ok(Vec::new());
        }
        let mut next = self.state.clone();
        next.servers_mut().set_status(id, ServerStatus::Crashed);
        self.commit(next)?;
        Ok(vec![Action::PushServerList])
    }

    /// Server `id` is stopping cleanly (`Leave`, sent on SIGINT/SIGTERM): it stops
    /// being UP at once — Crashed if it owns tablets, so recovery brings its data
    /// back from its backups now instead of after the failure detector notices
    /// (R§7: a restart is a recovery), else Removed — and the entry remembers the
    /// stop was clean, so the recovery is reported as a restart's, not a crash's.
    /// A server that is no longer UP is left as it is (idempotent: a retried
    /// Leave, or one that lost the race with the failure detector).
    pub fn server_left(&mut self, id: ServerId) -> Result<Vec<Action>, CoordinatorError> {
        let entry = self
            .state
            .servers()
            .get(id)
            .ok_or(CoordinatorError::UnknownServer(id))?;
        if entry.status != ServerStatus::Up {
            return Ok(Vec::new());
        }
        let mut next = self.state.clone();
        let owns_tablets = next.tables().tablets().any(|t| t.server_id == id);
        let status = if owns_tablets {
            ServerStatus::Crashed
        } else {
            ServerStatus::Removed
        };
        next.servers_mut().set_status(id, status);
        next.servers_mut().set_stopped_cleanly(id);
        self.commit(next)?;
        Ok(vec![Action::PushServerList])
    }

    /// Crash recovery moved `ranges` (table id, start hash, end hash) of crashed
    /// server `crashed` to `owner` (R§7.6): the ranges become `owner`'s, splitting
    /// the crashed server's tablets where a range covers only part of one.
    /// Idempotent: a range `owner` already holds changes nothing. A range held by
    /// a third server is an error (and nothing changes).
    pub fn recovered_partition(
        &mut self,
        crashed: ServerId,
        ranges: &[(u64, u64, u64)],
        owner: ServerId,
    ) -> Result<Vec<Action>, CoordinatorError> {
        self.recovered_partition_since(crashed, ranges, owner, 0)
    }

    /// [`Self::recovered_partition`], recording `ctime` (the recovery master's
    /// answer, design notes "Tablet ctime") with each moved tablet.
    pub fn recovered_partition_since(
        &mut self,
        crashed: ServerId,
        ranges: &[(u64, u64, u64)],
        owner: ServerId,
        ctime: u64,
    ) -> Result<Vec<Action>, CoordinatorError> {
        if !self
            .state
            .servers()
            .get(owner)
            .is_some_and(ServerEntry::is_up)
        {
            return Err(CoordinatorError::UnknownServer(owner));
        }
        let mut next = self.state.clone();
        let mut moved = Vec::new();
        for &(table_id, start_hash, end_hash) in ranges {
            let Some(table) = next.tables_mut().by_id_mut(table_id) else {
                // Dropped during recovery: nothing to hand out.
                continue;
            };
            table.split_at(start_hash);
            if let Some(after) = end_hash.checked_add(1) {
                table.split_at(after);
            }
            for t in table
                .tablets
                .iter_mut()
                .filter(|t| t.start_hash >= start_hash && t.end_hash <= end_hash)
            {
                if t.server_id != crashed && t.server_id != owner {
                    return Err(CoordinatorError::RecoveryConflict {
                        table_id,
                        start_hash: t.start_hash,
                        owner: t.server_id,
                    });
                }
                t.server_id = owner;
                t.ctime = ctime;
                moved.push(*t);
            }
        }
        let actions = take_actions(&next, &moved);
        self.commit(next)?;
        Ok(actions)
    }

    /// Ends the recovery of crashed server `crashed` once it owns no tablet: it
    /// becomes Removed, so backups free its replicas (R§8). Returns no actions
    /// while it still owns tablets, or if it is not Crashed.
    pub fn finish_recovery(&mut self, crashed: ServerId) -> Result<Vec<Action>, CoordinatorError> {
        let crashed_now = self
            .state
            .servers()
            .get(crashed)
            .is_some_and(|e| e.status == ServerStatus::Crashed);
        let owns = self
            .state
            .tables()
            .tablets()
            .any(|t| t.server_id == crashed);
        // A migration source's log holds the records not pulled yet: its
        // replicas must stay until lineage recovery has replayed them onto a
        // new source, which the record then names (K§2.3.4, design notes
        // "Migration: lineage recovery").
        let migrating_from = self.state.migrations().iter().any(|m| m.source == crashed);
        if !crashed_now || owns || migrating_from {
            return Ok(Vec::new());
        }
        let mut next = self.state.clone();
        next.servers_mut()
            .set_status(crashed, ServerStatus::Removed);
        self.commit(next)?;
        Ok(vec![Action::PushServerList])
    }

    /// Marks server `id` Removed for good. Tablets it still owned go to the
    /// least-loaded UP masters, starting empty (their objects were only in the removed
    /// server's DRAM); with no UP master they stay with the removed id until a master
    /// enlists. Removing a removed server changes nothing.
    pub fn remove_server(&mut self, id: ServerId) -> Result<Vec<Action>, CoordinatorError> {
        let entry = self
            .state
            .servers()
            .get(id)
            .ok_or(CoordinatorError::UnknownServer(id))?;
        if entry.status == ServerStatus::Removed {
            return Ok(Vec::new());
        }
        let mut next = self.state.clone();
        next.servers_mut().set_status(id, ServerStatus::Removed);
        let moved = place_orphans(&mut next);
        let mut actions = take_actions(&next, &moved);
        actions.push(Action::PushServerList);
        self.commit(next)?;
        Ok(actions)
    }

    /// The server list's version and every entry (crashed and removed ones too),
    /// sorted by id.
    pub fn server_list(&self) -> (u64, Vec<ServerEntry>) {
        let servers = self.state.servers();
        (servers.version(), servers.entries().to_vec())
    }

    /// The tablet map's version and every tablet with its owner's address, sorted by
    /// (table id, start hash).
    pub fn tablet_map(&self) -> (u64, Vec<(TabletEntry, String)>) {
        let mut map: Vec<_> = self
            .state
            .tables()
            .tablets()
            .map(|t| (*t, address_of(&self.state, t.server_id)))
            .collect();
        map.sort_by_key(|(t, _)| (t.table_id, t.start_hash));
        (self.state.tables().version(), map)
    }

    /// Every table, sorted by name.
    pub fn tables(&self) -> impl Iterator<Item = &Table> {
        self.state.tables().iter()
    }

    pub fn server(&self, id: ServerId) -> Option<&ServerEntry> {
        self.state.servers().get(id)
    }

    /// The notifications a newly started coordinator must (re)issue because its
    /// predecessor may have crashed between persisting a change and carrying it out
    /// (R§9): a `TakeTablet` for every tablet whose owner is UP, and a server-list
    /// push. All are idempotent. Dropped tables leave no trace in the state, so a
    /// `DropTablet` lost in such a crash is not reissued; the orphaned tablet holds
    /// only memory, as its table id is never reused.
    pub fn reissue_actions(&self) -> Vec<Action> {
        // A tablet migrating in is sent as TakeMigratingTablet only: a plain
        // TakeTabletOwnership arriving first would make it serve empty.
        let owned: Vec<TabletEntry> = self
            .state
            .tables()
            .tablets()
            .filter(|t| {
                self.state
                    .servers()
                    .get(t.server_id)
                    .is_some_and(ServerEntry::is_up)
                    && !self.state.migrations().is_migrating_in(t)
            })
            .copied()
            .collect();
        let mut actions = take_actions(&self.state, &owned);
        // Migrations whose target owns the tablet, or copies it (stop-and-copy):
        // resend TakeMigratingTablet.
        let migrating = self.state.migrations().iter().filter(|m| {
            m.state != crate::migrations::MigrationState::Preparing
                && self
                    .state
                    .servers()
                    .get(m.target)
                    .is_some_and(ServerEntry::is_up)
        });
        actions.extend(migrating.map(|m| take_migrating_action(&self.state, m)));
        actions.push(Action::PushServerList);
        actions
    }

    /// Persists `next` and then makes it the current state (R§9: write to external
    /// storage before acting). Bumps the server-list and tablet-map versions if they
    /// changed; writes nothing if nothing changed.
    pub(crate) fn commit(&mut self, mut next: CoordinatorState) -> Result<(), CoordinatorError> {
        if next == self.state {
            return Ok(());
        }
        let servers_changed = next.servers() != self.state.servers();
        let tablets_changed = next.tables() != self.state.tables();
        if servers_changed {
            next.servers_mut().bump_version();
        }
        if tablets_changed {
            next.tables_mut().bump_version();
        }
        let doc = PersistedState {
            format: STATE_FORMAT,
            sequence: self.sequence + 1,
            state: next,
        };
        // Cannot fail: the state holds only integers, strings, sequences and maps with
        // string keys, and no type has a hand-written Serialize that could refuse.
        let bytes = serde_json::to_vec(&doc).expect("coordinator state always serialises");
        self.storage.put(STATE_KEY, &bytes)?;
        self.sequence = doc.sequence;
        self.state = doc.state;
        Ok(())
    }
}

/// The address of server `id`. Every tablet owner is in the server list (checked at
/// load; servers are never deleted from it), so the empty fallback is never used.
pub(crate) fn address_of(state: &CoordinatorState, id: ServerId) -> String {
    state
        .servers()
        .get(id)
        .map(|e| e.address.clone())
        .unwrap_or_default()
}

/// The action that tells migration `m`'s target to own its tablet and pull.
pub(crate) fn take_migrating_action(
    state: &CoordinatorState,
    m: &crate::migrations::MigrationRecord,
) -> Action {
    Action::TakeMigratingTablet {
        server_id: m.target,
        address: address_of(state, m.target),
        record: *m,
        source_address: address_of(state, m.source),
    }
}

fn take_actions(state: &CoordinatorState, tablets: &[TabletEntry]) -> Vec<Action> {
    tablets
        .iter()
        .map(|t| Action::TakeTablet {
            server_id: t.server_id,
            address: address_of(state, t.server_id),
            table_id: t.table_id,
            start_hash: t.start_hash,
            end_hash: t.end_hash,
        })
        .collect()
}

/// Tablets owned by each UP master.
fn master_loads(state: &CoordinatorState) -> BTreeMap<ServerId, usize> {
    let mut load: BTreeMap<ServerId, usize> =
        state.servers().up_masters().map(|e| (e.id, 0)).collect();
    for t in state.tables().tablets() {
        if let Some(n) = load.get_mut(&t.server_id) {
            *n += 1;
        }
    }
    load
}

/// UP masters ordered by (tablets owned, id): the round-robin order of
/// `create_table`.
fn masters_by_load(state: &CoordinatorState) -> Vec<ServerId> {
    let mut masters: Vec<(usize, ServerId)> = master_loads(state)
        .into_iter()
        .map(|(id, n)| (n, id))
        .collect();
    masters.sort_unstable();
    masters.into_iter().map(|(_, id)| id).collect()
}

/// Moves every tablet owned by a Removed server to the UP master with the fewest
/// tablets at that moment (ties by id) and returns the moved tablets. With no UP
/// master, nothing moves.
fn place_orphans(state: &mut CoordinatorState) -> Vec<TabletEntry> {
    let removed: BTreeSet<ServerId> = state
        .servers()
        .entries()
        .iter()
        .filter(|e| e.status == ServerStatus::Removed)
        .map(|e| e.id)
        .collect();
    let mut load = master_loads(state);
    let mut moved = Vec::new();
    for t in state.tables_mut().tablets_mut() {
        if !removed.contains(&t.server_id) {
            continue;
        }
        let Some((&id, n)) = load.iter_mut().min_by_key(|(id, n)| (**n, **id)) else {
            break;
        };
        *n += 1;
        t.server_id = id;
        // The new owner's log is another log: its entries of the range start
        // somewhere unknown here, so nothing is cut off (design notes "Tablet
        // ctime"; the tablet restarts empty, R§8).
        t.ctime = 0;
        moved.push(*t);
    }
    moved
}

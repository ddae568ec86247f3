//! Tablet migration from the client (K§2.3): ask the coordinator to move a
//! tablet, and list migrations. The data path needs nothing here: a migrated
//! tablet's old owner answers UNKNOWN_TABLET (the client refreshes its map) and
//! its new owner answers RETRY for a key still being pulled (the client waits
//! the short delay it is told), both handled by every operation's retry loop.

use ramstore_wire::{MigrationMode, Request, Response};

use crate::client::Client;
use crate::error::ClientError;

/// One migration as the coordinator lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationInfo {
    pub id: u64,
    /// The table's name (empty if it was dropped since).
    pub table: String,
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    pub source: u64,
    pub target: u64,
    /// In progress: `preparing`, `pulling`, `copying` (stop-and-copy) or
    /// `cancelling`. Finished (kept by the coordinator across restarts):
    /// `done`, `cancelled` (its return migration brings the range back) or
    /// `rolled_back` (a master crashed mid-way; the range is on its source).
    pub state: String,
    /// Bytes (keys and values) moved so far (once pulling) or in all (done).
    pub bytes: Option<u64>,
    /// Objects moved so far (once pulling) or in all (done).
    pub objects: Option<u64>,
    /// Bytes of the range's objects in its source's log when the migration
    /// started (entry headers included, so a little above `bytes` at the end);
    /// unknown if the source could not say, or the migration was started by a
    /// coordinator version that did not store it.
    pub total_bytes: Option<u64>,
    /// Objects in the range when the migration started.
    pub total_objects: Option<u64>,
    /// For a migration that brings a cancelled one's range back to its
    /// source: the cancelled one's id.
    pub returns: Option<u64>,
}

impl MigrationInfo {
    pub fn is_done(&self) -> bool {
        self.state == "done"
    }

    /// Whether the migration rolled back: the range is on its source.
    pub fn is_rolled_back(&self) -> bool {
        self.state == "rolled_back"
    }

    /// Whether the migration has ended, whatever the outcome.
    pub fn is_finished(&self) -> bool {
        matches!(self.state.as_str(), "done" | "cancelled" | "rolled_back")
    }

    /// How far the migration is, 0 to 100, from objects moved against the
    /// range's objects at the start (writes during the migration can add
    /// objects, so it is capped); `None` if either is unknown.
    pub fn percent(&self) -> Option<f64> {
        if self.is_done() {
            return Some(100.0);
        }
        let (moved, total) = (self.objects?, self.total_objects?);
        if total == 0 {
            return Some(100.0);
        }
        Some((moved as f64 * 100.0 / total as f64).min(100.0))
    }

    /// Parses one line of the coordinator's `ListMigrations` text; `None` if it
    /// is not one.
    fn parse(line: &str) -> Option<Self> {
        // The table's name is last and may hold spaces.
        let (fields, table) = line.split_once(" table=")?;
        let mut info = MigrationInfo {
            id: 0,
            table: table.to_owned(),
            table_id: 0,
            start_hash: 0,
            end_hash: 0,
            source: 0,
            target: 0,
            state: String::new(),
            bytes: None,
            objects: None,
            total_bytes: None,
            total_objects: None,
            returns: None,
        };
        let hex = |v: &str| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
        for field in fields.split_whitespace() {
            let (key, value) = field.split_once('=')?;
            match key {
                "id" => info.id = value.parse().ok()?,
                "table_id" => info.table_id = value.parse().ok()?,
                "start_hash" => info.start_hash = hex(value)?,
                "end_hash" => info.end_hash = hex(value)?,
                "source" => info.source = value.parse().ok()?,
                "target" => info.target = value.parse().ok()?,
                "state" => info.state = value.to_owned(),
                "bytes" => info.bytes = value.parse().ok(),
                "objects" => info.objects = value.parse().ok(),
                "total_bytes" => info.total_bytes = value.parse().ok(),
                "total_objects" => info.total_objects = value.parse().ok(),
                "returns" => info.returns = value.parse().ok(),
                _ => {}
            }
        }
        Some(info)
    }
}

impl Client {
    /// Moves the tablet `[start_hash, end_hash]` of table `name` (exactly one
    /// tablet; split first with [`Client::split_tablet`]) to master
    /// `target_server_id`, live (K§2.3). Returns the migration's id once
    /// ownership has moved: the target serves the tablet from then on while its
    /// records are pulled; follow the rest with [`Client::migrations`]. Refused
    /// (`InvalidRequest`, nothing changed) for a range that is not one tablet, a
    /// target that is unknown, not up or the owner, or a range already migrating;
    /// `TableDoesntExist` for an unknown table.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// let id = client.migrate_tablet("users", 1 << 63, u64::MAX, 3).await?;
    /// # Ok(()) }
    /// ```
    pub async fn migrate_tablet(
        &self,
        name: &str,
        start_hash: u64,
        end_hash: u64,
        target_server_id: u64,
    ) -> Result<u64, ClientError> {
        self.migrate_tablet_with_mode(
            name,
            start_hash,
            end_hash,
            target_server_id,
            MigrationMode::Rocksteady,
        )
        .await
    }

    /// [`Client::migrate_tablet`] with the data moved as `mode` says. The modes
    /// other than Rocksteady are baselines for `scripts/bench-migration`: without
    /// PriorityPulls a read of a key not pulled yet waits for the background
    /// pulls; stop-and-copy keeps the range locked on the source (clients retry)
    /// until every record is copied, and returns only after that.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::MigrationMode;
    /// let id = client
    ///     .migrate_tablet_with_mode("users", 1 << 63, u64::MAX, 3, MigrationMode::StopAndCopy)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn migrate_tablet_with_mode(
        &self,
        name: &str,
        start_hash: u64,
        end_hash: u64,
        target_server_id: u64,
        mode: MigrationMode,
    ) -> Result<u64, ClientError> {
        let req = Request::MigrateTablet {
            name,
            start_hash,
            end_hash,
            target_server_id,
            mode,
        };
        let id = self
            .inner
            .coordinator(req, |r| match r {
                Response::MigrateTablet { migration_id } => Some(migration_id),
                _ => None,
            })
            .await?;
        // Route to the new owner now rather than at the next UNKNOWN_TABLET.
        self.refresh_now().await.ok();
        Ok(id)
    }

    /// Cancels migration `migration_id` (state `cancelling`): it finishes, and a
    /// return migration (listed with `returns` = this id) brings the range back
    /// to its source, so no write acknowledged meanwhile is lost. Refused
    /// (`InvalidRequest`) for an unknown or finished id or a return migration.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// client.cancel_migration(7).await?;
    /// # Ok(()) }
    /// ```
    pub async fn cancel_migration(&self, migration_id: u64) -> Result<(), ClientError> {
        let req = Request::CancelMigration { migration_id };
        self.inner
            .coordinator(req, |r| match r {
                Response::CancelMigration => Some(()),
                _ => None,
            })
            .await
    }

    /// The migrations in progress, then those finished since the coordinator
    /// started.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// for m in client.migrations().await? {
    ///     println!("{} {}", m.id, m.state);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn migrations(&self) -> Result<Vec<MigrationInfo>, ClientError> {
        let text = self
            .inner
            .coordinator(Request::ListMigrations, |r| match r {
                Response::ListMigrations { text } => Some(text.to_owned()),
                _ => None,
            })
            .await?;
        Ok(text.lines().filter_map(MigrationInfo::parse).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_a_coordinator_line() {
        let m = MigrationInfo::parse(
            "id=3 table_id=2 start_hash=0x10 end_hash=0xffffffffffffffff source=1 target=2 \
             state=done bytes=100 objects=4 table=my table",
        )
        .expect("parses");
        assert_eq!(m.id, 3);
        assert_eq!(m.table, "my table");
        assert_eq!((m.start_hash, m.end_hash), (0x10, u64::MAX));
        assert_eq!((m.source, m.target), (1, 2));
        assert!(m.is_done());
        assert_eq!((m.bytes, m.objects), (Some(100), Some(4)));
        assert_eq!(MigrationInfo::parse("garbage"), None);
    }

    #[test]
    fn is_finished_covers_every_outcome_and_nothing_in_progress() {
        let line = |state: &str| {
            MigrationInfo::parse(&format!(
                "id=1 table_id=2 start_hash=0x0 end_hash=0xff source=1 target=2 state={state} \
                 total_bytes=400 total_objects=100 table=t"
            ))
            .expect("parses")
        };
        for state in ["done", "cancelled", "rolled_back"] {
            assert!(line(state).is_finished(), "{state}");
        }
        for state in ["preparing", "pulling", "copying", "cancelling"] {
            assert!(!line(state).is_finished(), "{state}");
        }
        let back = line("rolled_back");
        assert!(back.is_rolled_back() && !back.is_done());
        assert_eq!(back.total_objects, Some(100));
    }

    #[test]
    fn percent_comes_from_objects_moved_against_the_total() {
        let m = MigrationInfo::parse(
            "id=1 table_id=2 start_hash=0x0 end_hash=0xff source=1 target=2 state=pulling \
             bytes=10 objects=25 total_bytes=400 total_objects=100 table=t",
        )
        .expect("parses");
        assert_eq!(m.total_bytes, Some(400));
        assert_eq!(m.percent(), Some(25.0));
        let over = MigrationInfo {
            objects: Some(150),
            ..m.clone()
        };
        assert_eq!(over.percent(), Some(100.0), "capped");
        let unknown = MigrationInfo {
            total_objects: None,
            ..m
        };
        assert_eq!(unknown.percent(), None);
    }
}

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
    /// `preparing`, `pulling` or `done`.
    pub state: String,
    /// Bytes (keys and values) moved; known once done.
    pub bytes: Option<u64>,
    /// Objects moved; known once done.
    pub objects: Option<u64>,
}

impl MigrationInfo {
    pub fn is_done(&self) -> bool {
        self.state == "done"
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
}

//! Table operations, answered by the coordinator (R§4.2): create, look up, drop
//! and split tables, and declaring a server crashed.

use ramstore_wire::{Request, Response};

use super::Client;
use crate::error::ClientError;

impl Client {
    // ----- tables -------------------------------------------------------------

    /// Creates table `name` spread over `server_span` masters and returns its id;
    /// if the table exists, returns its id (the request is idempotent).
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// let table_id = client.create_table("users", 4).await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_table(&self, name: &str, server_span: u32) -> Result<u64, ClientError> {
        self.inner
            .coordinator(Request::CreateTable { server_span, name }, |r| match r {
                Response::CreateTable { table_id } => Some(table_id),
                _ => None,
            })
            .await
    }

    /// The id of table `name`; [`ClientError::TableDoesntExist`] if there is none.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// let table_id = client.get_table_id("users").await?;
    /// # Ok(()) }
    /// ```
    pub async fn get_table_id(&self, name: &str) -> Result<u64, ClientError> {
        self.inner
            .coordinator(Request::GetTableId { name }, |r| match r {
                Response::GetTableId { table_id } => Some(table_id),
                _ => None,
            })
            .await
    }

    /// Asks the coordinator to treat server `server_id` as crashed and recover its
    /// tablets elsewhere (R§7; for drills and tests). Crashing a server that is
    /// already crashed or removed changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// client.crash_server(3).await?;
    /// # Ok(()) }
    /// ```
    pub async fn crash_server(&self, server_id: u64) -> Result<(), ClientError> {
        self.inner
            .coordinator(Request::CrashServer { server_id }, |r| match r {
                Response::CrashServer => Some(()),
                _ => None,
            })
            .await
    }

    /// Drops table `name` and all its objects. A retried drop whose first attempt
    /// took effect may report [`ClientError::TableDoesntExist`].
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// client.drop_table("users").await?;
    /// # Ok(()) }
    /// ```
    pub async fn drop_table(&self, name: &str) -> Result<(), ClientError> {
        self.inner
            .coordinator(Request::DropTable { name }, |r| match r {
                Response::DropTable => Some(()),
                _ => None,
            })
            .await?;
        // Drop the table's tablets from the cache now rather than at the next
        // UNKNOWN_TABLET; a failure here changes nothing the caller relies on.
        self.refresh_now().await.ok();
        Ok(())
    }

    /// Makes `split_hash` the first key hash of a tablet of table `name` (a no-op
    /// if it already is). The tablet stays on its master until it is migrated.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// client.split_tablet("users", 1 << 63).await?;
    /// # Ok(()) }
    /// ```
    pub async fn split_tablet(&self, name: &str, split_hash: u64) -> Result<(), ClientError> {
        self.inner
            .coordinator(Request::SplitTablet { name, split_hash }, |r| match r {
                Response::SplitTablet => Some(()),
                _ => None,
            })
            .await
    }
}

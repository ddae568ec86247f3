//! The blocking facade: the same operations as [`Client`], for programs without an
//! async runtime. A [`BlockingClient`] owns a small tokio runtime and blocks the
//! calling thread on each operation.
//!
//! Do not call it from inside an async runtime (blocking a runtime thread panics),
//! and drop it outside one.

use std::sync::Arc;

use ramstore_rpc::Transport;

use crate::client::{Client, PingReply};
use crate::enumerate::{EnumeratedObject, Enumeration};
use crate::error::ClientError;
use crate::multi::{MultiRemoveOp, MultiWriteOp};
use crate::options::ClientOptions;
use crate::tablet_map::TabletInfo;
use ramstore_wire::RejectRules;

// A child module: it reaches the client and runtime of [`BlockingClient`].
mod transaction;

pub use transaction::BlockingTransaction;

/// Threads of the runtime a [`BlockingClient`] owns: they keep connections read
/// while the caller is not inside a call.
pub const BLOCKING_RUNTIME_THREADS: usize = 1;

/// A client whose methods block until done. Cheap to clone; clones share the
/// runtime, connections and tablet map.
///
/// ```no_run
/// use ramstore_client::{BlockingClient, ClientOptions};
///
/// let client = BlockingClient::connect(ClientOptions::new("127.0.0.1:11100"))?;
/// let table = client.create_table("users", 1)?;
/// client.write(table, b"alice", b"30")?;
/// let (value, _version) = client.read(table, b"alice")?;
/// for object in client.enumerate(table) {
///     println!("{:?}", object?.key);
/// }
/// # Ok::<(), ramstore_client::ClientError>(())
/// ```
#[derive(Clone, Debug)]
pub struct BlockingClient {
    client: Client,
    runtime: Arc<tokio::runtime::Runtime>,
}

/// Blocks on `f` with `runtime`.
macro_rules! block {
    ($self:ident, $f:expr) => {
        $self.runtime.block_on($f)
    };
}

impl BlockingClient {
    /// Connects over TCP; see [`Client::connect`].
    ///
    /// ```no_run
    /// # use ramstore_client::{BlockingClient, ClientOptions};
    /// let client = BlockingClient::connect(ClientOptions::new("127.0.0.1:11100"))?;
    /// # Ok::<(), ramstore_client::ClientError>(())
    /// ```
    pub fn connect(options: ClientOptions) -> Result<Self, ClientError> {
        let runtime = Arc::new(runtime()?);
        let client = runtime.block_on(Client::connect(options))?;
        Ok(Self { client, runtime })
    }

    /// Connects over any transport; see [`Client::with_transport`].
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use ramstore_client::{BlockingClient, ClientOptions};
    /// let transport = Arc::new(ramstore_rpc::LocalTransport::new());
    /// let client = BlockingClient::with_transport(ClientOptions::new("coordinator"), transport)?;
    /// # Ok::<(), ramstore_client::ClientError>(())
    /// ```
    pub fn with_transport(
        options: ClientOptions,
        transport: Arc<dyn Transport>,
    ) -> Result<Self, ClientError> {
        let runtime = Arc::new(runtime()?);
        let client = runtime.block_on(Client::with_transport(options, transport))?;
        Ok(Self { client, runtime })
    }

    /// The async client underneath (usable on this client's runtime or any other).
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient) {
    /// let async_client: ramstore_client::Client = client.client().clone();
    /// # }
    /// ```
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// See [`Client::create_table`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient) -> Result<(), ramstore_client::ClientError> {
    /// let table_id = client.create_table("users", 4)?;
    /// # Ok(()) }
    /// ```
    pub fn create_table(&self, name: &str, server_span: u32) -> Result<u64, ClientError> {
        block!(self, self.client.create_table(name, server_span))
    }

    /// See [`Client::get_table_id`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient) -> Result<(), ramstore_client::ClientError> {
    /// let table_id = client.get_table_id("users")?;
    /// # Ok(()) }
    /// ```
    pub fn get_table_id(&self, name: &str) -> Result<u64, ClientError> {
        block!(self, self.client.get_table_id(name))
    }

    /// See [`Client::drop_table`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient) -> Result<(), ramstore_client::ClientError> {
    /// client.drop_table("users")?;
    /// # Ok(()) }
    /// ```
    pub fn drop_table(&self, name: &str) -> Result<(), ClientError> {
        block!(self, self.client.drop_table(name))
    }

    /// See [`Client::crash_server`].
    pub fn crash_server(&self, server_id: u64) -> Result<(), ClientError> {
        block!(self, self.client.crash_server(server_id))
    }

    /// See [`Client::split_tablet`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient) -> Result<(), ramstore_client::ClientError> {
    /// client.split_tablet("users", 1 << 63)?;
    /// # Ok(()) }
    /// ```
    pub fn split_tablet(&self, name: &str, split_hash: u64) -> Result<(), ClientError> {
        block!(self, self.client.split_tablet(name, split_hash))
    }

    /// See [`Client::migrate_tablet`].
    pub fn migrate_tablet(
        &self,
        name: &str,
        start_hash: u64,
        end_hash: u64,
        target_server_id: u64,
    ) -> Result<u64, ClientError> {
        block!(
            self,
            self.client
                .migrate_tablet(name, start_hash, end_hash, target_server_id)
        )
    }

    /// See [`Client::migrate_tablet_with_mode`].
    pub fn migrate_tablet_with_mode(
        &self,
        name: &str,
        start_hash: u64,
        end_hash: u64,
        target_server_id: u64,
        mode: crate::MigrationMode,
    ) -> Result<u64, ClientError> {
        block!(
            self,
            self.client.migrate_tablet_with_mode(
                name,
                start_hash,
                end_hash,
                target_server_id,
                mode
            )
        )
    }

    /// See [`Client::migrations`].
    pub fn migrations(&self) -> Result<Vec<crate::MigrationInfo>, ClientError> {
        block!(self, self.client.migrations())
    }

    /// See [`Client::cancel_migration`].
    pub fn cancel_migration(&self, migration_id: u64) -> Result<(), ClientError> {
        block!(self, self.client.cancel_migration(migration_id))
    }

    /// See [`Client::read`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let (value, version) = client.read(table_id, b"alice")?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self, table_id: u64, key: &[u8]) -> Result<(Vec<u8>, u64), ClientError> {
        block!(self, self.client.read(table_id, key))
    }

    /// See [`Client::read_with_rules`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::RejectRules;
    /// let (value, _) = client.read_with_rules(table_id, b"alice", &RejectRules::version_must_equal(7))?;
    /// # Ok(()) }
    /// ```
    pub fn read_with_rules(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<(Vec<u8>, u64), ClientError> {
        block!(self, self.client.read_with_rules(table_id, key, rules))
    }

    /// See [`Client::write`] (exactly-once when retried, by default).
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let version = client.write(table_id, b"alice", b"30")?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self, table_id: u64, key: &[u8], value: &[u8]) -> Result<u64, ClientError> {
        block!(self, self.client.write(table_id, key, value))
    }

    /// See [`Client::write_with_rules`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::RejectRules;
    /// client.write_with_rules(table_id, b"alice", b"31", &RejectRules::must_exist())?;
    /// # Ok(()) }
    /// ```
    pub fn write_with_rules(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<u64, ClientError> {
        block!(
            self,
            self.client.write_with_rules(table_id, key, value, rules)
        )
    }

    /// See [`Client::remove`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let removed: Option<u64> = client.remove(table_id, b"alice")?;
    /// # Ok(()) }
    /// ```
    pub fn remove(&self, table_id: u64, key: &[u8]) -> Result<Option<u64>, ClientError> {
        block!(self, self.client.remove(table_id, key))
    }

    /// See [`Client::write_with_ttl`].
    pub fn write_with_ttl(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        ttl: std::time::Duration,
    ) -> Result<u64, ClientError> {
        block!(self, self.client.write_with_ttl(table_id, key, value, ttl))
    }

    /// See [`Client::write_expiring`].
    pub fn write_expiring(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
        expiry: crate::ExpiryChange,
    ) -> Result<u64, ClientError> {
        block!(
            self,
            self.client
                .write_expiring(table_id, key, value, rules, expiry)
        )
    }

    /// See [`Client::expiry`].
    pub fn expiry(&self, table_id: u64, key: &[u8]) -> Result<Option<u64>, ClientError> {
        block!(self, self.client.expiry(table_id, key))
    }

    /// See [`Client::persist`].
    pub fn persist(&self, table_id: u64, key: &[u8]) -> Result<bool, ClientError> {
        block!(self, self.client.persist(table_id, key))
    }

    /// See [`Client::wall_ms`].
    pub fn wall_ms(&self) -> u64 {
        self.client.wall_ms()
    }

    /// See [`Client::remove_with_rules`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::RejectRules;
    /// client.remove_with_rules(table_id, b"alice", &RejectRules::must_exist())?;
    /// # Ok(()) }
    /// ```
    pub fn remove_with_rules(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<Option<u64>, ClientError> {
        block!(self, self.client.remove_with_rules(table_id, key, rules))
    }

    /// See [`Client::increment_i64`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let (hits, _) = client.increment_i64(table_id, b"hits", 1)?;
    /// # Ok(()) }
    /// ```
    pub fn increment_i64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
    ) -> Result<(i64, u64), ClientError> {
        block!(self, self.client.increment_i64(table_id, key, delta))
    }

    /// See [`Client::increment_f64`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let (balance, _) = client.increment_f64(table_id, b"balance", 0.5)?;
    /// # Ok(()) }
    /// ```
    pub fn increment_f64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
    ) -> Result<(f64, u64), ClientError> {
        block!(self, self.client.increment_f64(table_id, key, delta))
    }

    /// See [`Client::multi_read`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) {
    /// let results = client.multi_read(&[(table_id, b"alice".as_slice()), (table_id, b"bob")]);
    /// # }
    /// ```
    pub fn multi_read(&self, items: &[(u64, &[u8])]) -> Vec<Result<(Vec<u8>, u64), ClientError>> {
        block!(self, self.client.multi_read(items))
    }

    /// See [`Client::multi_write`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) {
    /// use ramstore_client::MultiWriteOp;
    /// let versions = client.multi_write(&[MultiWriteOp::new(table_id, b"alice", b"1")]);
    /// # }
    /// ```
    pub fn multi_write(&self, ops: &[MultiWriteOp<'_>]) -> Vec<Result<u64, ClientError>> {
        block!(self, self.client.multi_write(ops))
    }

    /// See [`Client::multi_remove`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) {
    /// use ramstore_client::MultiRemoveOp;
    /// let removed = client.multi_remove(&[MultiRemoveOp::new(table_id, b"alice")]);
    /// # }
    /// ```
    pub fn multi_remove(&self, ops: &[MultiRemoveOp<'_>]) -> Vec<Result<Option<u64>, ClientError>> {
        block!(self, self.client.multi_remove(ops))
    }

    /// Every object of `table_id`, as an iterator that fetches batches as it goes;
    /// see [`Client::enumerate`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// for object in client.enumerate(table_id) {
    ///     let object = object?;
    ///     println!("{:?} (v{})", object.key, object.version);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn enumerate(&self, table_id: u64) -> BlockingEnumeration {
        BlockingEnumeration {
            inner: self.client.enumerate(table_id),
            runtime: self.runtime.clone(),
        }
    }

    /// See [`Client::tablet_map`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient) -> Result<(), ramstore_client::ClientError> {
    /// let tablets = client.tablet_map()?;
    /// # Ok(()) }
    /// ```
    pub fn tablet_map(&self) -> Result<Vec<TabletInfo>, ClientError> {
        block!(self, self.client.tablet_map())
    }

    /// See [`Client::server_stats`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient) -> Result<(), ramstore_client::ClientError> {
    /// println!("{}", client.server_stats("10.0.0.7:11101")?);
    /// # Ok(()) }
    /// ```
    pub fn server_stats(&self, addr: &str) -> Result<String, ClientError> {
        block!(self, self.client.server_stats(addr))
    }

    /// See [`Client::ping`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient) -> Result<(), ramstore_client::ClientError> {
    /// let reply = client.ping("10.0.0.7:11101")?;
    /// # Ok(()) }
    /// ```
    pub fn ping(&self, addr: &str) -> Result<PingReply, ClientError> {
        block!(self, self.client.ping(addr))
    }
}

/// The objects of a table, fetched batch by batch as the iterator advances
/// (from [`BlockingClient::enumerate`]). Ends after the first error.
#[derive(Debug)]
pub struct BlockingEnumeration {
    inner: Enumeration,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl Iterator for BlockingEnumeration {
    type Item = Result<EnumeratedObject, ClientError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.runtime.block_on(self.inner.next())
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ClientError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(BLOCKING_RUNTIME_THREADS)
        .thread_name("ramstore-client")
        .enable_all()
        .build()
        .map_err(|e| ClientError::Internal(format!("cannot start the client runtime: {e}")))
}

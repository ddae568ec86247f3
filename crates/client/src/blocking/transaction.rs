//! Transactions on the blocking facade: [`BlockingTransaction`] mirrors the async
//! [`Transaction`] (reads record versions, writes and removes are buffered, commit
//! runs the two-phase commit; SOSP'15 §6, design notes "Transactions"), blocking
//! the calling thread on each call; [`BlockingClient::run_transaction`] retries a
//! body whose commit was aborted by a conflict.

use crate::client::Transaction;
use crate::error::ClientError;
use crate::retry::Retrier;

use super::BlockingClient;

/// A transaction being built, whose methods block until done (from
/// [`BlockingClient::transaction`]). Dropping it without
/// [`BlockingTransaction::commit`] changes nothing.
///
/// ```no_run
/// # fn demo(client: ramstore_client::BlockingClient, table: u64) -> Result<(), ramstore_client::ClientError> {
/// let mut tx = client.transaction();
/// let from: i64 = tx.read(table, b"alice")?.map_or(0, |v| String::from_utf8_lossy(&v).parse().unwrap_or(0));
/// tx.write(table, b"alice", (from - 10).to_string().as_bytes())?;
/// tx.commit()?; // or ClientError::Aborted: nothing applied
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct BlockingTransaction {
    tx: Transaction,
    runtime: std::sync::Arc<tokio::runtime::Runtime>,
}

impl BlockingClient {
    /// A new, empty transaction; see [`crate::Client::transaction`].
    pub fn transaction(&self) -> BlockingTransaction {
        BlockingTransaction {
            tx: self.client.transaction(),
            runtime: self.runtime.clone(),
        }
    }

    /// Runs `body` in a fresh transaction and commits it, again (after a jittered
    /// back-off) each time the commit is [`ClientError::Aborted`], at most
    /// `attempts` times and not past [`crate::ClientOptions::operation_deadline`]
    /// (then the last `Aborted` is returned); any other error, from `body` or the
    /// commit, ends it. The
    /// blocking twin of [`crate::Client::run_transaction`].
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::BlockingClient, table: u64) -> Result<(), ramstore_client::ClientError> {
    /// let moved = client.run_transaction(10, |tx| {
    ///     let a = tx.read(table, b"a")?.unwrap_or_default();
    ///     tx.write(table, b"b", &a)?;
    ///     tx.remove(table, b"a")?;
    ///     Ok(a.len())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn run_transaction<T>(
        &self,
        attempts: u32,
        mut body: impl FnMut(&mut BlockingTransaction) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let options = self.client.options();
        let mut retry = Retrier::new(options, options.operation_deadline);
        let mut left = attempts.max(1);
        loop {
            let mut tx = self.transaction();
            let value = body(&mut tx)?;
            match tx.commit() {
                Ok(()) => return Ok(value),
                Err(ClientError::Aborted) if left > 1 && retry.has_time_left() => {
                    left -= 1;
                    self.runtime.block_on(retry.back_off());
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl BlockingTransaction {
    /// See [`Transaction::read`]: the value as this transaction sees it, `None`
    /// if the object does not exist; the first read records the version.
    pub fn read(&mut self, table_id: u64, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        self.runtime.block_on(self.tx.read(table_id, key))
    }

    /// See [`Transaction::read_with_version`].
    pub fn read_with_version(
        &mut self,
        table_id: u64,
        key: &[u8],
    ) -> Result<(Option<Vec<u8>>, u64), ClientError> {
        self.runtime
            .block_on(self.tx.read_with_version(table_id, key))
    }

    /// See [`Transaction::write`]: buffered until commit.
    pub fn write(&mut self, table_id: u64, key: &[u8], value: &[u8]) -> Result<(), ClientError> {
        self.tx.write(table_id, key, value)
    }

    /// See [`Transaction::remove`]: buffered until commit.
    pub fn remove(&mut self, table_id: u64, key: &[u8]) -> Result<(), ClientError> {
        self.tx.remove(table_id, key)
    }

    /// Test only: see [`Transaction::abandon_after_prepare`].
    #[doc(hidden)]
    pub fn abandon_after_prepare(&mut self) {
        self.tx.abandon_after_prepare();
    }

    /// See [`Transaction::commit`]: every version read is still current and every
    /// change applied, or [`ClientError::Aborted`] and nothing applied.
    pub fn commit(self) -> Result<(), ClientError> {
        let Self { tx, runtime } = self;
        runtime.block_on(tx.commit())
    }

    /// The async transaction underneath.
    pub fn into_inner(self) -> Transaction {
        self.tx
    }
}

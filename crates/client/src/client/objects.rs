//! Single-object operations at the owning master (R§3 Fig. 2): read, write,
//! remove and increment, each optionally conditional on reject rules.

use ramstore_wire::{encode_request, key_hash, NumberKind, Opcode, RejectRules, Request, Response};

use super::{Client, REQUEST_OVERHEAD_BYTES};
use crate::error::ClientError;

impl Client {
    // ----- single objects -----------------------------------------------------

    /// Reads an object: its value and version; [`ClientError::ObjectDoesntExist`]
    /// if there is none.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let (value, version) = client.read(table_id, b"alice").await?;
    /// # Ok(()) }
    /// ```
    pub async fn read(&self, table_id: u64, key: &[u8]) -> Result<(Vec<u8>, u64), ClientError> {
        self.read_with_rules(table_id, key, &RejectRules::default())
            .await
    }

    /// Reads an object unless `rules` reject it (e.g. fail with
    /// [`ClientError::WrongVersion`] unless its version is still 7).
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::RejectRules;
    /// let (value, _) = client
    ///     .read_with_rules(table_id, b"alice", &RejectRules::version_must_equal(7))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn read_with_rules(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<(Vec<u8>, u64), ClientError> {
        let req = Request::Read {
            table_id,
            rules: *rules,
            key,
        };
        self.inner
            .keyed(
                Opcode::Read,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::Read { version, value } => Some((value.to_vec(), version)),
                    _ => None,
                },
            )
            .await
    }

    /// Writes an object (creating or replacing it) and returns its new version.
    ///
    /// A write retried after a lost response takes effect once and answers as
    /// the first attempt did (exactly-once, [`crate::ClientOptions::exactly_once`];
    /// see the crate documentation).
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let version = client.write(table_id, b"alice", b"{\"age\":30}").await?;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self, table_id: u64, key: &[u8], value: &[u8]) -> Result<u64, ClientError> {
        self.write_with_rules(table_id, key, value, &RejectRules::default())
            .await
    }

    /// Writes an object unless `rules` reject it (conditional write): e.g.
    /// compare-and-swap with [`RejectRules::version_must_equal`], create-only with
    /// [`RejectRules::must_not_exist`]. Returns the new version.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::{ClientError, RejectRules};
    /// let (value, version) = client.read(table_id, b"counter").await?;
    /// match client
    ///     .write_with_rules(table_id, b"counter", b"new", &RejectRules::version_must_equal(version))
    ///     .await
    /// {
    ///     Ok(_new_version) => {}
    ///     Err(ClientError::WrongVersion { current }) => { /* someone else won; reread */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn write_with_rules(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<u64, ClientError> {
        let ticket = self.ticket().await?;
        let req = Request::Write {
            table_id,
            rules: *rules,
            key,
            value,
            rpc_id: ticket.as_ref().map(|t| t.id),
        };
        self.inner
            .keyed(
                Opcode::Write,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len() + value.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::Write { version } => Some(version),
                    _ => None,
                },
            )
            .await
    }

    /// Removes an object; returns the version removed, or `None` if there was no
    /// such object.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// if let Some(version) = client.remove(table_id, b"alice").await? {
    ///     println!("removed version {version}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remove(&self, table_id: u64, key: &[u8]) -> Result<Option<u64>, ClientError> {
        self.remove_with_rules(table_id, key, &RejectRules::default())
            .await
    }

    /// Removes an object unless `rules` reject it; returns the version removed, or
    /// `None` if there was no such object.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::RejectRules;
    /// client
    ///     .remove_with_rules(table_id, b"alice", &RejectRules::version_must_equal(3))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn remove_with_rules(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<Option<u64>, ClientError> {
        let ticket = self.ticket().await?;
        let req = Request::Remove {
            table_id,
            rules: *rules,
            key,
            rpc_id: ticket.as_ref().map(|t| t.id),
        };
        self.inner
            .keyed(
                Opcode::Remove,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::Remove { existed, version } => Some(existed.then_some(version)),
                    _ => None,
                },
            )
            .await
    }

    /// Atomically adds `delta` to the object's value read as an integer in decimal
    /// text (an absent object counts as 0) and stores the sum as decimal text;
    /// returns the new value and version. Counters are stored exactly as Redis's
    /// INCR stores them ([`crate::counter`]), so the same key can be incremented
    /// and read through either protocol. [`ClientError::NotNumeric`] if the value
    /// is not such an integer (`"41"` is, `"+41"`, `" 41"` and `"041"` are not),
    /// [`ClientError::Overflow`] if the sum leaves i64.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let (hits, _version) = client.increment_i64(table_id, b"hits", 1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn increment_i64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
    ) -> Result<(i64, u64), ClientError> {
        let (value, version) = self
            .increment(table_id, key, NumberKind::I64, delta.to_le_bytes())
            .await?;
        Ok((i64::from_le_bytes(value), version))
    }

    /// Atomically adds `delta` to the object's value read as a number in decimal
    /// text (an absent object counts as 0) and stores the sum as Redis's
    /// INCRBYFLOAT does (`"10.5"`, `"3"`; [`crate::counter`]); returns the new
    /// value and version. [`ClientError::NotNumeric`] if the value is not a
    /// number, [`ClientError::Overflow`] if the result is not finite.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let (balance, _version) = client.increment_f64(table_id, b"balance", -2.5).await?;
    /// # Ok(()) }
    /// ```
    pub async fn increment_f64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
    ) -> Result<(f64, u64), ClientError> {
        let (value, version) = self
            .increment(table_id, key, NumberKind::F64, delta.to_le_bytes())
            .await?;
        Ok((f64::from_le_bytes(value), version))
    }

    async fn increment(
        &self,
        table_id: u64,
        key: &[u8],
        kind: NumberKind,
        delta: [u8; 8],
    ) -> Result<([u8; 8], u64), ClientError> {
        let ticket = self.ticket().await?;
        let req = Request::Increment {
            table_id,
            rules: RejectRules::default(),
            kind,
            delta,
            key,
            rpc_id: ticket.as_ref().map(|t| t.id),
        };
        self.inner
            .keyed(
                Opcode::Increment,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::Increment { version, value } => Some((value, version)),
                    _ => None,
                },
            )
            .await
    }

    /// An exactly-once RPC id when [`crate::ClientOptions::exactly_once`] is on
    /// (RIFL): the same id goes with every retry of the operation.
    async fn ticket(&self) -> Result<Option<super::rifl::Ticket>, ClientError> {
        if !self.inner.options.exactly_once {
            return Ok(None);
        }
        self.inner.rpc_ticket().await.map(Some)
    }

    /// The client lease exactly-once operations are sent under, once opened.
    pub fn client_lease_id(&self) -> Option<u64> {
        self.inner.lease_id()
    }
}

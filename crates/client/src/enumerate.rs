//! Enumeration as a stream (R Fig. 2, enumerateTable): a cursor (a key hash) walks
//! the table's hash space from 0; each batch comes from the master owning the
//! tablet that holds the cursor, and says where to continue — possibly in a tablet
//! on another master, found through the tablet map.
//!
//! Every object that exists for the whole enumeration is returned exactly once (the
//! master returns whole hash ranges, and the cursor only moves forward); objects
//! written or removed meanwhile may or may not appear. The order is unspecified.

use std::collections::VecDeque;

use ramstore_wire::{encode_request, Opcode, Request, Response};

use crate::client::Client;
use crate::error::ClientError;
use crate::tablet_map::Locate;

/// About how many bytes of keys and values one Enumerate request asks for.
pub const ENUMERATE_BATCH_BYTES: u32 = 256 * 1024;

/// One object returned by an enumeration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EnumeratedObject {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub version: u64,
}

/// An enumeration of one table, from [`Client::enumerate`]: call
/// [`Enumeration::next`] until it returns `None`. After an error it ends.
#[derive(Debug)]
pub struct Enumeration {
    client: Client,
    table_id: u64,
    cursor: u64,
    done: bool,
    batch: VecDeque<EnumeratedObject>,
}

impl Client {
    /// Enumerates every object of `table_id`, in batches fetched as they are
    /// consumed. No request is sent until the first [`Enumeration::next`].
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let mut objects = client.enumerate(table_id);
    /// while let Some(object) = objects.next().await {
    ///     let object = object?;
    ///     println!("{:?} = {:?} (v{})", object.key, object.value, object.version);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn enumerate(&self, table_id: u64) -> Enumeration {
        self.enumerate_from(table_id, 0)
    }

    /// Like [`Client::enumerate`], resuming at `cursor`, a value an earlier
    /// enumeration's [`Enumeration::cursor`] returned (0: the start). Lets a caller
    /// that keeps no state between batches (Redis SCAN) walk a table.
    pub fn enumerate_from(&self, table_id: u64, cursor: u64) -> Enumeration {
        Enumeration {
            client: self.clone(),
            table_id,
            cursor,
            done: false,
            batch: VecDeque::new(),
        }
    }
}

impl Enumeration {
    /// The next object; `None` once every object has been returned (or after an
    /// error, which is returned once).
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let mut objects = client.enumerate(table_id);
    /// let mut count = 0;
    /// while let Some(object) = objects.next().await {
    ///     object?;
    ///     count += 1;
    /// }
    /// # Ok(()) }
    /// ```
    #[allow(clippy::should_implement_trait)] // async: not `Iterator::next`
    pub async fn next(&mut self) -> Option<Result<EnumeratedObject, ClientError>> {
        loop {
            if let Some(object) = self.batch.pop_front() {
                return Some(Ok(object));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.fetch().await {
                self.done = true;
                self.batch.clear();
                return Some(Err(e));
            }
        }
    }

    /// The next whole batch, as one master returned it (possibly empty when the
    /// cursor moves past an empty range); `None` once the enumeration is over.
    /// Objects already taken with [`Enumeration::next`] are not repeated.
    pub async fn next_batch(&mut self) -> Option<Result<Vec<EnumeratedObject>, ClientError>> {
        if !self.batch.is_empty() {
            return Some(Ok(self.batch.drain(..).collect()));
        }
        if self.done {
            return None;
        }
        if let Err(e) = self.fetch().await {
            self.done = true;
            return Some(Err(e));
        }
        Some(Ok(self.batch.drain(..).collect()))
    }

    /// Where the enumeration resumes once the objects fetched so far are consumed
    /// (for [`Client::enumerate_from`]); `None` when nothing is left to fetch.
    pub fn cursor(&self) -> Option<u64> {
        (!self.done).then_some(self.cursor)
    }

    /// Fetches the batch at the cursor and moves the cursor past it.
    async fn fetch(&mut self) -> Result<(), ClientError> {
        let inner = &*self.client.inner;
        let table_id = self.table_id;
        // A map whose tablets do not cover the cursor (tablets are meant to cover
        // the whole hash space) is refreshed once; hash ranges no tablet holds hold
        // no objects and are skipped.
        let located = inner.map().locate(table_id, self.cursor);
        let located = match located {
            Locate::Owner(_) => located,
            _ => {
                // A failure is the request's to report: it retries on its own.
                let deadline = inner.options.rpc_deadline;
                let _ = inner.refresh_map(inner.refresh_count(), deadline).await;
                inner.map().locate(table_id, self.cursor)
            }
        };
        match located {
            Locate::Owner(_) | Locate::NoTable => {}
            Locate::Uncovered(Some(next)) => {
                self.cursor = next;
                return Ok(());
            }
            Locate::Uncovered(None) => {
                self.done = true;
                return Ok(());
            }
        }
        let cursor = self.cursor;
        let req = Request::Enumerate {
            table_id,
            cursor,
            max_bytes: ENUMERATE_BATCH_BYTES,
        };
        let batch = &mut self.batch;
        let (has_next, next_cursor) = inner
            .keyed(
                Opcode::Enumerate,
                table_id,
                cursor,
                64,
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::Enumerate {
                        has_next,
                        next_cursor,
                        objects,
                    } => {
                        batch.extend(objects.iter().map(|o| EnumeratedObject {
                            key: o.key.to_vec(),
                            value: o.value.to_vec(),
                            version: o.version,
                        }));
                        Some((has_next, next_cursor))
                    }
                    _ => None,
                },
            )
            .await?;
        if !has_next {
            self.done = true;
        } else if next_cursor <= cursor {
            return Err(ClientError::Internal(format!(
                "enumeration of table {table_id}: the cursor went from {cursor:#x} back to \
                 {next_cursor:#x}"
            )));
        } else {
            self.cursor = next_cursor;
        }
        Ok(())
    }
}

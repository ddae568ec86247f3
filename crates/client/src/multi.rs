//! Multi-operations (R Fig. 2, bulk operations): the items are grouped by owning
//! master, each group goes out as one request (or several, at the frame and item
//! limits), the requests to different masters are in flight at once, and the
//! results come back in the caller's order. Items a master answers with
//! UNKNOWN_TABLET, RETRY, SERVER_NOT_UP or NO_SPACE — and whole requests lost to
//! transport errors — are routed again (after refreshing the tablet map) and resent,
//! until the operation deadline.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::join_all;
use ramstore_wire::{
    decode_response, key_hash, MultiReadRequestEncoder, MultiRemoveRequestEncoder,
    MultiWriteRequestEncoder, Opcode, RejectRules, Response, Status, WireError,
};

use crate::client::rifl::Tickets;
use crate::client::{Client, Inner};
use crate::error::{describe_body, encode_error, ClientError, Outcome};
use crate::retry::Retrier;

/// One object of a [`Client::multi_write`]: write `value` under `key` in
/// `table_id`, unless `rules` reject it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiWriteOp<'a> {
    pub table_id: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub rules: RejectRules,
}

impl<'a> MultiWriteOp<'a> {
    /// An unconditional write.
    ///
    /// ```
    /// # use ramstore_client::MultiWriteOp;
    /// let op = MultiWriteOp::new(1, b"k", b"v");
    /// assert_eq!(op.rules, Default::default());
    /// ```
    pub fn new(table_id: u64, key: &'a [u8], value: &'a [u8]) -> Self {
        Self {
            table_id,
            key,
            value,
            rules: RejectRules::default(),
        }
    }

    /// The same write, conditional on `rules`.
    ///
    /// ```
    /// # use ramstore_client::{MultiWriteOp, RejectRules};
    /// let op = MultiWriteOp::new(1, b"k", b"v").with_rules(RejectRules::must_not_exist());
    /// assert!(op.rules.exists);
    /// ```
    pub fn with_rules(self, rules: RejectRules) -> Self {
        Self { rules, ..self }
    }
}

/// One object of a [`Client::multi_remove`]: remove `key` from `table_id`, unless
/// `rules` reject it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiRemoveOp<'a> {
    pub table_id: u64,
    pub key: &'a [u8],
    pub rules: RejectRules,
}

impl<'a> MultiRemoveOp<'a> {
    /// An unconditional remove.
    ///
    /// ```
    /// # use ramstore_client::MultiRemoveOp;
    /// let op = MultiRemoveOp::new(1, b"k");
    /// assert_eq!(op.key, b"k");
    /// ```
    pub fn new(table_id: u64, key: &'a [u8]) -> Self {
        Self {
            table_id,
            key,
            rules: RejectRules::default(),
        }
    }

    /// The same remove, conditional on `rules`.
    ///
    /// ```
    /// # use ramstore_client::{MultiRemoveOp, RejectRules};
    /// let op = MultiRemoveOp::new(1, b"k").with_rules(RejectRules::version_must_equal(2));
    /// assert_eq!(op.rules.given_version, 2);
    /// ```
    pub fn with_rules(self, rules: RejectRules) -> Self {
        Self { rules, ..self }
    }
}

/// One request frame of a multi-operation and the items (caller indices) in it.
struct Chunk {
    addr: Arc<str>,
    frame: Vec<u8>,
    members: Vec<usize>,
}

/// The outcome of one item in an OK multi-op response.
enum ItemResult<T> {
    Done(T),
    /// Not OK: the status, and the version that goes with it (WRONG_VERSION).
    Failed(Status, u64),
}

/// What differs between the three multi-operations.
trait MultiSpec {
    type Output;
    const OPCODE: Opcode;
    fn count(&self) -> usize;
    fn target(&self, i: usize) -> (u64, &[u8]);
    /// Encodes the items `indices` into frames (one or more), appending them to
    /// `chunks` (with an empty address, filled in by the caller); items that cannot
    /// be encoded go to `failed`.
    fn encode(
        &self,
        indices: &[usize],
        chunks: &mut Vec<Chunk>,
        failed: &mut Vec<(usize, ClientError)>,
    );
    /// The per-item results of an OK response, in request order; `false` if the
    /// response is of another kind.
    fn parse(&self, response: Response<'_>, out: &mut Vec<ItemResult<Self::Output>>) -> bool;
}

/// Encodes items into as many frames as the frame and item limits need; each
/// frame is completed by `finish(encoder, its members)`.
macro_rules! encode_chunks {
    ($encoder:ident, $indices:expr, $chunks:expr, $failed:expr, |$enc:ident, $i:ident| $push:expr,
     finish(|$fenc:ident, $fm:ident| $finish:expr)) => {{
        let indices: &[usize] = $indices;
        let mut next = 0;
        while next < indices.len() {
            let mut frame = Vec::new();
            let mut members = Vec::new();
            let mut $enc = $encoder::new(0, &mut frame);
            while let Some(&$i) = indices.get(next) {
                match $push {
                    Ok(()) => {
                        members.push($i);
                        next += 1;
                    }
                    // This frame is full: the item opens the next one.
                    Err(WireError::FrameTooLarge(_) | WireError::TooManyItems(_))
                        if !$enc.is_empty() =>
                    {
                        break
                    }
                    Err(e) => {
                        $failed.push(($i, encode_error(e)));
                        next += 1;
                    }
                }
            }
            if $enc.is_empty() {
                continue;
            }
            let finished = {
                let $fenc = $enc;
                let $fm: &[usize] = &members;
                $finish
            };
            match finished {
                Ok(()) => $chunks.push(Chunk {
                    addr: Arc::from(""),
                    frame,
                    members,
                }),
                Err(e) => $failed.extend(members.into_iter().map(|m| (m, encode_error(e.clone())))),
            }
        }
    }};
}

struct ReadSpec<'s, 'k>(&'s [(u64, &'k [u8])]);

impl MultiSpec for ReadSpec<'_, '_> {
    type Output = (Vec<u8>, u64);
    const OPCODE: Opcode = Opcode::MultiRead;

    fn count(&self) -> usize {
        self.0.len()
    }

    fn target(&self, i: usize) -> (u64, &[u8]) {
        self.0[i]
    }

    fn encode(
        &self,
        indices: &[usize],
        chunks: &mut Vec<Chunk>,
        failed: &mut Vec<(usize, ClientError)>,
    ) {
        encode_chunks!(
            MultiReadRequestEncoder,
            indices,
            chunks,
            failed,
            |enc, i| {
                let (table_id, key) = self.0[i];
                enc.push(table_id, key)
            },
            finish(|enc, _members| enc.finish())
        );
    }

    fn parse(&self, response: Response<'_>, out: &mut Vec<ItemResult<Self::Output>>) -> bool {
        let Response::MultiRead(items) = response else {
            return false;
        };
        out.extend(items.iter().map(|r| match r.status {
            Status::Ok => ItemResult::Done((r.value.to_vec(), r.version)),
            s => ItemResult::Failed(s, r.version),
        }));
        true
    }
}

/// The ops, and their exactly-once rpc ids when the client has them on.
struct WriteSpec<'s, 'k>(&'s [MultiWriteOp<'k>], Option<&'s Tickets>);

impl MultiSpec for WriteSpec<'_, '_> {
    type Output = u64;
    const OPCODE: Opcode = Opcode::MultiWrite;

    fn count(&self) -> usize {
        self.0.len()
    }

    fn target(&self, i: usize) -> (u64, &[u8]) {
        (self.0[i].table_id, self.0[i].key)
    }

    fn encode(
        &self,
        indices: &[usize],
        chunks: &mut Vec<Chunk>,
        failed: &mut Vec<(usize, ClientError)>,
    ) {
        encode_chunks!(
            MultiWriteRequestEncoder,
            indices,
            chunks,
            failed,
            |enc, i| {
                let op = &self.0[i];
                enc.push(op.table_id, op.rules, op.key, op.value)
            },
            finish(|enc, members| match self.1 {
                Some(t) =>
                    enc.finish_with_rpc_ids(t.lease_id, t.first_incomplete, &t.seqs_of(members)),
                None => enc.finish(),
            })
        );
    }

    fn parse(&self, response: Response<'_>, out: &mut Vec<ItemResult<Self::Output>>) -> bool {
        let Response::MultiWrite(items) = response else {
            return false;
        };
        out.extend(items.iter().map(|r| match r.status {
            Status::Ok => ItemResult::Done(r.version),
            s => ItemResult::Failed(s, r.version),
        }));
        true
    }
}

/// The ops, and their exactly-once rpc ids when the client has them on.
struct RemoveSpec<'s, 'k>(&'s [MultiRemoveOp<'k>], Option<&'s Tickets>);

impl MultiSpec for RemoveSpec<'_, '_> {
    type Output = Option<u64>;
    const OPCODE: Opcode = Opcode::MultiRemove;

    fn count(&self) -> usize {
        self.0.len()
    }

    fn target(&self, i: usize) -> (u64, &[u8]) {
        (self.0[i].table_id, self.0[i].key)
    }

    fn encode(
        &self,
        indices: &[usize],
        chunks: &mut Vec<Chunk>,
        failed: &mut Vec<(usize, ClientError)>,
    ) {
        encode_chunks!(
            MultiRemoveRequestEncoder,
            indices,
            chunks,
            failed,
            |enc, i| {
                let op = &self.0[i];
                enc.push(op.table_id, op.rules, op.key)
            },
            finish(|enc, members| match self.1 {
                Some(t) =>
                    enc.finish_with_rpc_ids(t.lease_id, t.first_incomplete, &t.seqs_of(members)),
                None => enc.finish(),
            })
        );
    }

    fn parse(&self, response: Response<'_>, out: &mut Vec<ItemResult<Self::Output>>) -> bool {
        let Response::MultiRemove(items) = response else {
            return false;
        };
        out.extend(items.iter().map(|r| match r.status {
            Status::Ok => ItemResult::Done(r.existed.then_some(r.version)),
            s => ItemResult::Failed(s, r.version),
        }));
        true
    }
}

/// How to wait before the next round of a multi-operation.
#[derive(Default)]
struct NextRound {
    /// Some item needs a fresh tablet map.
    refresh: bool,
    /// Some item needs a backoff (even if the map changes).
    back_off: bool,
    /// The longest delay a RETRY asked for.
    told_ms: Option<u32>,
}

impl NextRound {
    fn add(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Fail(_) => {}
            Outcome::RetryAfter(ms) => self.told_ms = self.told_ms.max(Some(*ms)),
            Outcome::RefreshMap => self.refresh = true,
            Outcome::RefreshAndBackOff => {
                self.refresh = true;
                self.back_off = true;
            }
            Outcome::BackOff | Outcome::NoSpace => self.back_off = true,
        }
    }
}

impl Inner {
    /// Runs a multi-operation to completion: one result per item, in order.
    async fn multi<S: MultiSpec>(&self, spec: &S) -> Vec<Result<S::Output, ClientError>> {
        let n = spec.count();
        let mut results: Vec<Option<Result<S::Output, ClientError>>> =
            (0..n).map(|_| None).collect();
        let hashes: Vec<u64> = (0..n).map(|i| key_hash(spec.target(i).1)).collect();
        let mut pending: Vec<usize> = (0..n).collect();
        let mut retry = Retrier::new(&self.options, self.options.operation_deadline)
            .with_no_space_patience(self.options.no_space_patience);
        let op = S::OPCODE;
        while !pending.is_empty() {
            let Some(deadline) = retry.attempt_deadline(self.options.rpc_deadline) else {
                let e = retry.deadline_exceeded();
                for &i in &pending {
                    results[i] = Some(Err(e.clone()));
                }
                break;
            };

            // Route every pending item by the map as it is now.
            let seen_refreshes = self.refresh_count();
            let mut groups: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
            let mut unrouted = Vec::new();
            let map_version = {
                let map = self.map();
                for &i in &pending {
                    match map.owner(spec.target(i).0, hashes[i]) {
                        Some(addr) => groups.entry(addr.clone()).or_default().push(i),
                        None => unrouted.push(i),
                    }
                }
                map.version()
            };
            if !unrouted.is_empty() {
                // Unknown tables fail; the rest go out once the map knows them.
                let refreshed = self.refresh_map(seen_refreshes, deadline).await;
                let stuck = match refreshed {
                    Ok(_) => {
                        let map = self.map();
                        for &i in &unrouted {
                            if !map.has_table(spec.target(i).0) {
                                results[i] = Some(Err(ClientError::TableDoesntExist));
                            }
                        }
                        pending.retain(|&i| results[i].is_none());
                        pending
                            .iter()
                            .find(|&&i| map.owner(spec.target(i).0, hashes[i]).is_none())
                            .map(|&i| {
                                format!(
                                    "the tablet map (version {}) has no tablet of table {} \
                                     holding key hash {:#018x}",
                                    map.version(),
                                    spec.target(i).0,
                                    hashes[i]
                                )
                            })
                    }
                    Err(e) => Some(e.why),
                };
                if let Some(why) = stuck {
                    retry.note(why);
                    retry.back_off().await;
                }
                continue;
            }

            // One request per server (more at the frame limits), all in flight at once.
            let mut chunks = Vec::new();
            let mut failed = Vec::new();
            for (addr, members) in groups {
                let first = chunks.len();
                spec.encode(&members, &mut chunks, &mut failed);
                for c in &mut chunks[first..] {
                    c.addr = addr.clone();
                }
            }
            for (i, e) in failed {
                results[i] = Some(Err(e));
            }
            let frames: Vec<Vec<u8>> = chunks
                .iter_mut()
                .map(|c| std::mem::take(&mut c.frame))
                .collect();
            let calls = chunks
                .iter()
                .zip(frames)
                .map(|(c, frame)| self.transport.call(&c.addr, frame, deadline));
            // Polled together in this task rather than spawned, so the calls may
            // borrow the caller's data; one future per server, so polling all is cheap.
            let answers = join_all(calls).await;

            let mut next = NextRound::default();
            let mut items = Vec::new();
            for (chunk, answer) in chunks.iter().zip(answers) {
                let what = || {
                    format!(
                        "{op:?} of {} objects at {}",
                        chunk.members.len(),
                        chunk.addr
                    )
                };
                let bytes = match answer {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        retry.note(format!("{}: {e}", what()));
                        next.add(&Outcome::RefreshAndBackOff);
                        continue;
                    }
                };
                let whole = |e: ClientError, results: &mut Vec<Option<_>>| {
                    for &i in &chunk.members {
                        results[i] = Some(Err(e.clone()));
                    }
                };
                let response = match decode_response(&bytes) {
                    Ok((header, response)) if header.opcode == op => response,
                    Ok((header, _)) => {
                        let e = format!("{} answered opcode {:?}", what(), header.opcode);
                        whole(ClientError::Internal(e), &mut results);
                        continue;
                    }
                    Err(e) => {
                        let e = format!("malformed response to {}: {e}", what());
                        whole(ClientError::Internal(e), &mut results);
                        continue;
                    }
                };
                if let Response::Error(body) = response {
                    retry.note(format!("{}: {}", what(), describe_body(&body)));
                    match Outcome::of_body(&body) {
                        Outcome::Fail(e) => whole(e, &mut results),
                        Outcome::NoSpace => match retry.no_space(&chunk.addr) {
                            Some(e) => whole(e, &mut results),
                            None => next.add(&Outcome::NoSpace),
                        },
                        outcome => next.add(&outcome),
                    }
                    continue;
                }
                items.clear();
                if !spec.parse(response, &mut items) || items.len() != chunk.members.len() {
                    let e = format!("unexpected response to {}", what());
                    whole(ClientError::Internal(e), &mut results);
                    continue;
                }
                for (&i, item) in chunk.members.iter().zip(items.drain(..)) {
                    match item {
                        ItemResult::Done(v) => results[i] = Some(Ok(v)),
                        ItemResult::Failed(status, version) => {
                            match Outcome::of_status(status, version, "") {
                                Outcome::Fail(e) => results[i] = Some(Err(e)),
                                Outcome::NoSpace => {
                                    retry.note(format!("{}: {status} for item {i}", what()));
                                    match retry.no_space(&chunk.addr) {
                                        Some(e) => results[i] = Some(Err(e)),
                                        None => next.add(&Outcome::NoSpace),
                                    }
                                }
                                outcome => {
                                    retry.note(format!("{}: {status} for item {i}", what()));
                                    next.add(&outcome);
                                }
                            }
                        }
                    }
                }
            }
            pending.retain(|&i| results[i].is_none());
            if pending.is_empty() {
                break;
            }
            if next.refresh {
                match self.refresh_noting(&mut retry, seen_refreshes).await {
                    // The map changed: the tablets have likely moved; go now.
                    Some(version) if version > map_version => {}
                    _ => next.back_off = true,
                }
            }
            if let Some(ms) = next.told_ms {
                retry.wait_as_told(ms).await;
            } else if next.back_off {
                retry.back_off().await;
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(ClientError::Internal("an item got no result".into())))
            })
            .collect()
    }
}

impl Client {
    /// Reads many objects, each `(table_id, key)`: one result per object, in the
    /// order given. The objects are grouped by master and the masters are asked in
    /// parallel; each object fails or succeeds on its own (e.g.
    /// [`ClientError::ObjectDoesntExist`] for one does not affect the others).
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) {
    /// let keys: [&[u8]; 2] = [b"alice", b"bob"];
    /// let items: Vec<(u64, &[u8])> = keys.iter().map(|k| (table_id, *k)).collect();
    /// for (key, result) in keys.iter().zip(client.multi_read(&items).await) {
    ///     match result {
    ///         Ok((value, version)) => println!("{key:?} = {value:?} (v{version})"),
    ///         Err(e) => println!("{key:?}: {e}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn multi_read(
        &self,
        items: &[(u64, &[u8])],
    ) -> Vec<Result<(Vec<u8>, u64), ClientError>> {
        self.inner.multi(&ReadSpec(items)).await
    }

    /// Writes many objects: one result (the new version) per object, in the order
    /// given; masters are asked in parallel. Not atomic across objects (use a
    /// [`crate::Transaction`] for that). With
    /// [`crate::ClientOptions::exactly_once`] on (the default) each object's
    /// write is its own exactly-once RPC (RIFL): a retry, even one regrouped onto
    /// another master, answers the first outcome and never writes twice.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) {
    /// use ramstore_client::MultiWriteOp;
    /// let ops = [
    ///     MultiWriteOp::new(table_id, b"alice", b"1"),
    ///     MultiWriteOp::new(table_id, b"bob", b"2"),
    /// ];
    /// let versions = client.multi_write(&ops).await;
    /// # }
    /// ```
    pub async fn multi_write(&self, ops: &[MultiWriteOp<'_>]) -> Vec<Result<u64, ClientError>> {
        let tickets = match self.multi_tickets(ops.len()).await {
            Ok(t) => t,
            Err(e) => return ops.iter().map(|_| Err(e.clone())).collect(),
        };
        self.inner.multi(&WriteSpec(ops, tickets.as_ref())).await
    }

    /// Removes many objects: one result per object (the removed version, or `None`
    /// if it did not exist), in the order given; masters are asked in parallel.
    /// Exactly-once per object, as [`Client::multi_write`].
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) {
    /// use ramstore_client::MultiRemoveOp;
    /// let ops = [MultiRemoveOp::new(table_id, b"alice"), MultiRemoveOp::new(table_id, b"bob")];
    /// let removed = client.multi_remove(&ops).await;
    /// # }
    /// ```
    pub async fn multi_remove(
        &self,
        ops: &[MultiRemoveOp<'_>],
    ) -> Vec<Result<Option<u64>, ClientError>> {
        let tickets = match self.multi_tickets(ops.len()).await {
            Ok(t) => t,
            Err(e) => return ops.iter().map(|_| Err(e.clone())).collect(),
        };
        self.inner.multi(&RemoveSpec(ops, tickets.as_ref())).await
    }

    /// One exactly-once rpc id per op of a multi-op when
    /// [`crate::ClientOptions::exactly_once`] is on (none for no ops).
    async fn multi_tickets(&self, n: usize) -> Result<Option<Tickets>, ClientError> {
        if !self.inner.options.exactly_once || n == 0 {
            return Ok(None);
        }
        self.inner.rpc_tickets(n).await.map(Some)
    }
}

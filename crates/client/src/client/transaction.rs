//! Multi-object transactions (Lee et al., SOSP'15 §6; R§10.3): optimistic
//! concurrency with client-driven two-phase commit. Reads go to the masters and
//! record the version read; writes and removes are buffered here; `commit`
//! sends one TxPrepare per participant master (checking every version read and
//! locking every object), then a TxDecision to each. A transaction on one
//! master commits in one round trip (prepare and decide in one RPC).
//!
//! `commit` returns once every participant applied the decision, so a later
//! read anywhere sees the transaction (design notes "Transactions").

use std::collections::BTreeMap;
use std::future::Future;

use futures_util::future::join_all;
use ramstore_wire::{
    encode_request, encode_tx_prepare, encode_tx_request_vote, key_hash, Opcode, Request, Response,
    TxOp, TxOpKind, TxParticipant, TxVote, MAX_TX_BYTES, MAX_TX_OBJECTS, TX_DECIDE_NOW,
};

use super::{Client, REQUEST_OVERHEAD_BYTES};
use crate::error::ClientError;
use crate::retry::Retrier;

/// What a transaction knows of one object.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// The version read (0: the object did not exist) and the value read.
    read: Option<(u64, Option<Vec<u8>>)>,
    /// The buffered change: `Some(Some(value))` a write, `Some(None)` a remove.
    change: Option<Option<Vec<u8>>>,
}

/// A transaction being built: see the module documentation. Dropping it
/// without `commit` changes nothing.
#[derive(Debug)]
pub struct Transaction {
    client: Client,
    objects: BTreeMap<(u64, Vec<u8>), Entry>,
    bytes: usize,
    /// Test hook: commit stops after the prepares, deciding nothing, as a
    /// client that crashed mid-commit would ([`Transaction::abandon_after_prepare`]).
    abandon_after_prepare: bool,
}

impl Client {
    /// A new, empty transaction.
    pub fn transaction(&self) -> Transaction {
        Transaction {
            client: self.clone(),
            objects: BTreeMap::new(),
            bytes: 0,
            abandon_after_prepare: false,
        }
    }

    /// Runs `body` in a fresh transaction and commits what it returns, again
    /// (after a jittered back-off) each time the commit is [`ClientError::Aborted`],
    /// at most `attempts` times and not past [`crate::ClientOptions::operation_deadline`]
    /// (then the last `Aborted` is returned); any other error ends it.
    pub async fn run_transaction<T, F, Fut>(
        &self,
        attempts: u32,
        mut body: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Transaction) -> Fut,
        Fut: Future<Output = Result<(Transaction, T), ClientError>>,
    {
        let options = &self.inner.options;
        let mut retry = Retrier::new(options, options.operation_deadline);
        let mut left = attempts.max(1);
        loop {
            let (tx, value) = body(self.transaction()).await?;
            match tx.commit().await {
                Ok(()) => return Ok(value),
                Err(ClientError::Aborted) if left > 1 && retry.has_time_left() => {
                    left -= 1;
                    retry.back_off().await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Transaction {
    /// The object's value as this transaction sees it (its own buffered write
    /// first), `None` if it does not exist. The first read of an object records
    /// its version, which commit checks.
    pub async fn read(
        &mut self,
        table_id: u64,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, ClientError> {
        if let Some(entry) = self.objects.get(&(table_id, key.to_vec())) {
            if let Some(change) = &entry.change {
                return Ok(change.clone());
            }
            if let Some((_, value)) = &entry.read {
                return Ok(value.clone());
            }
        }
        let (version, value) = match self.client.read(table_id, key).await {
            Ok((value, version)) => (version, Some(value)),
            Err(ClientError::ObjectDoesntExist) => (0, None),
            Err(e) => return Err(e),
        };
        self.entry(table_id, key)?.read = Some((version, value.clone()));
        Ok(value)
    }

    /// Buffers a write of `value`; applied at commit.
    pub fn write(&mut self, table_id: u64, key: &[u8], value: &[u8]) -> Result<(), ClientError> {
        self.bytes += value.len();
        self.entry(table_id, key)?.change = Some(Some(value.to_vec()));
        self.check_bytes()
    }

    /// Buffers a remove; applied at commit.
    pub fn remove(&mut self, table_id: u64, key: &[u8]) -> Result<(), ClientError> {
        self.entry(table_id, key)?.change = Some(None);
        Ok(())
    }

    fn entry(&mut self, table_id: u64, key: &[u8]) -> Result<&mut Entry, ClientError> {
        let id = (table_id, key.to_vec());
        if !self.objects.contains_key(&id) {
            if self.objects.len() >= MAX_TX_OBJECTS {
                return Err(ClientError::TxTooLarge(format!(
                    "more than {MAX_TX_OBJECTS} objects"
                )));
            }
            self.bytes += key.len();
            self.check_bytes()?;
        }
        Ok(self.objects.entry(id).or_default())
    }

    fn check_bytes(&self) -> Result<(), ClientError> {
        if self.bytes > MAX_TX_BYTES {
            return Err(ClientError::TxTooLarge(format!(
                "{} bytes of keys and values, over {MAX_TX_BYTES}",
                self.bytes
            )));
        }
        Ok(())
    }

    /// Commits: every version read is still current and every change applied, or
    /// [`ClientError::Aborted`] and nothing applied.
    pub async fn commit(self) -> Result<(), ClientError> {
        if self.objects.is_empty() {
            return Ok(());
        }
        let inner = &self.client.inner;
        // The transaction's id is its client lease and a RIFL sequence number
        // (SOSP'15 §6.1); the ticket keeps the number incomplete until the end.
        let ticket = inner.rpc_ticket().await?;
        let (lease_id, tx_seq) = (ticket.id.lease_id, ticket.id.seq);
        let ops: Vec<TxOp<'_>> = self
            .objects
            .iter()
            .map(|((table_id, key), e)| {
                let expected_version = e.read.as_ref().map(|r| r.0);
                let (kind, value) = match &e.change {
                    None => (TxOpKind::Read, &[][..]),
                    Some(Some(v)) => (TxOpKind::Write, &v[..]),
                    Some(None) => (TxOpKind::Remove, &[][..]),
                };
                TxOp {
                    kind,
                    expected_version,
                    table_id: *table_id,
                    key,
                    value,
                }
            })
            .collect();
        let participants: Vec<TxParticipant> = ops
            .iter()
            .map(|op| TxParticipant {
                table_id: op.table_id,
                key_hash: key_hash(op.key),
            })
            .collect();
        let participants = &participants[..];
        let groups = self.group_by_master(&ops).await?;
        let one = groups.len() == 1;
        let flags = if one { TX_DECIDE_NOW } else { 0 };
        let prepares = groups.iter().map(|group| {
            let mine: Vec<TxOp<'_>> = group.iter().map(|&i| ops[i]).collect();
            let first = mine[0];
            let size = REQUEST_OVERHEAD_BYTES + 24 + participants.len() * 16 + self.bytes;
            async move {
                inner
                    .keyed(
                        Opcode::TxPrepare,
                        first.table_id,
                        key_hash(first.key),
                        size,
                        |out| {
                            encode_tx_prepare(0, lease_id, tx_seq, flags, participants, &mine, out)
                        },
                        |r| match r {
                            Response::TxPrepare { vote } => Some(vote),
                            _ => None,
                        },
                    )
                    .await
            }
        });
        let votes = join_all(prepares).await;
        if self.abandon_after_prepare && !one {
            return Err(ClientError::Internal(
                "abandoned after the prepares (test hook): the transaction is left to a \
                 recovery manager"
                    .into(),
            ));
        }
        if one {
            return match votes.into_iter().next() {
                Some(Ok(TxVote::Committed)) => Ok(()),
                Some(Ok(TxVote::Abort)) => Err(ClientError::Aborted),
                Some(Ok(TxVote::Prepared)) => Err(ClientError::Internal(
                    "a single-server transaction was prepared, not committed".into(),
                )),
                Some(Err(e)) => Err(e),
                None => Err(ClientError::Internal("no vote".into())),
            };
        }
        let mut votes = votes;
        // A prepare that got no vote (its master unreachable until the
        // deadline) may still have prepared, and a transaction recovery
        // manager may be deciding meanwhile (SOSP'15 §6.4). Deciding ABORT on a
        // missing vote could then disagree with its COMMIT, so the client asks
        // that master for its vote as the manager would: ABORT is sticky there
        // (and refuses the prepare forever), PREPARED means it voted. Only if
        // no vote is known and none is ABORT does the client decide nothing and
        // leave the transaction to the recovery manager (design notes
        // "Transaction recovery").
        if !votes.iter().any(|v| matches!(v, Ok(TxVote::Abort))) {
            let failed: Vec<usize> = (0..votes.len()).filter(|&i| votes[i].is_err()).collect();
            let asked = join_all(
                failed
                    .iter()
                    .map(|&i| self.ask_vote(lease_id, tx_seq, &groups[i], &ops)),
            )
            .await;
            for (&i, answer) in failed.iter().zip(asked) {
                if let Ok(vote) = answer {
                    votes[i] = Ok(vote);
                }
            }
            let abort = votes.iter().any(|v| matches!(v, Ok(TxVote::Abort)));
            if !abort {
                if let Some(i) = votes.iter().position(Result::is_err) {
                    drop(ticket);
                    return Err(votes
                        .swap_remove(i)
                        .err()
                        .unwrap_or(ClientError::Internal("no vote".into())));
                }
            }
        }
        // COMMITTED from a resent prepare or a vote request: a recovery manager
        // saw every vote PREPARED and committed. It outvotes an ABORT, which
        // beside it can only come from a participant that applied that commit
        // and forgot it (design notes "Transaction recovery", *Held outcomes*).
        let all_prepared = votes.iter().any(|v| matches!(v, Ok(TxVote::Committed)))
            || votes
                .iter()
                .all(|v| matches!(v, Ok(TxVote::Prepared | TxVote::Committed)));
        // Every participant hears the decision, even one whose prepare failed: it
        // may have prepared and lost the answer.
        // The decision RPC to the master owning a group's first object.
        let decide = |group: &[usize]| {
            let first = ops[group[0]];
            let req = Request::TxDecision {
                lease_id,
                tx_seq,
                commit: all_prepared,
            };
            async move {
                inner
                    .keyed(
                        Opcode::TxDecision,
                        first.table_id,
                        key_hash(first.key),
                        REQUEST_OVERHEAD_BYTES + 24,
                        |out| encode_request(0, &req, out),
                        |r| matches!(r, Response::TxDecision).then_some(()),
                    )
                    .await
            }
        };
        let mut decided = join_all(groups.iter().map(|g| decide(g))).await;
        // A participant that crashed meanwhile had its objects recovered by
        // other masters, each of which re-took the locks of its prepared ops
        // (SOSP'15 §6.2, design notes "Transactions"): the decision goes to
        // every master that owns one of the objects now, not only to the one
        // that owns each group's first object. Cheap when nothing moved: the
        // grouping is read from the cached tablet map.
        if let Ok(now) = self.group_by_master(&ops).await {
            let moved: Vec<&Vec<usize>> = now.iter().filter(|g| !groups.contains(g)).collect();
            decided.extend(join_all(moved.iter().map(|g| decide(g))).await);
        }
        drop(ticket);
        if !all_prepared {
            return match votes.into_iter().find_map(Result::err) {
                Some(e) => Err(e),
                None => Err(ClientError::Aborted),
            };
        }
        decided
            .into_iter()
            .collect::<Result<Vec<()>, _>>()
            .map(|_| ())
    }

    /// The vote of the master owning `group`'s objects now, as a recovery
    /// manager asks it (`TxRequestVote`): a master that never saw the prepare
    /// decides ABORT and refuses it from then on.
    async fn ask_vote(
        &self,
        lease_id: u64,
        tx_seq: u64,
        group: &[usize],
        ops: &[TxOp<'_>],
    ) -> Result<TxVote, ClientError> {
        let objects: Vec<TxParticipant> = group
            .iter()
            .map(|&i| TxParticipant {
                table_id: ops[i].table_id,
                key_hash: key_hash(ops[i].key),
            })
            .collect();
        let Some(&first) = objects.first() else {
            return Err(ClientError::Internal("an empty participant group".into()));
        };
        self.client
            .inner
            .keyed(
                Opcode::TxRequestVote,
                first.table_id,
                first.key_hash,
                REQUEST_OVERHEAD_BYTES + 20 + 16 * objects.len(),
                |out| encode_tx_request_vote(0, lease_id, tx_seq, &objects, out),
                |r| match r {
                    Response::TxRequestVote { vote } => Some(vote),
                    _ => None,
                },
            )
            .await
    }

    /// The ops' indexes grouped by the master that owns them now.
    async fn group_by_master(&self, ops: &[TxOp<'_>]) -> Result<Vec<Vec<usize>>, ClientError> {
        let inner = &self.client.inner;
        let mut groups: Vec<(_, Vec<usize>)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let hash = key_hash(op.key);
            let mut route = inner.route(op.table_id, hash);
            if route.addr.is_none() {
                self.client.refresh_now().await?;
                route = inner.route(op.table_id, hash);
            }
            let Some(addr) = route.addr else {
                return Err(ClientError::TableDoesntExist);
            };
            match groups.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, members)) => members.push(i),
                None => groups.push((addr, vec![i])),
            }
        }
        Ok(groups.into_iter().map(|(_, members)| members).collect())
    }
}

impl Transaction {
    /// Test only: makes `commit` of a multi-server transaction send its
    /// prepares and stop before any decision, leaving its locks held as a
    /// client that crashed mid-commit would (the transaction recovery manager's
    /// tests, `cli/tests/transactions_client_crash.rs`).
    #[doc(hidden)]
    pub fn abandon_after_prepare(&mut self) {
        self.abandon_after_prepare = true;
    }

    /// Like [`Transaction::read`], with the version the transaction depends on:
    /// the version first read (0: the object did not exist then), which commit
    /// checks. An object this transaction only wrote (never read) answers its
    /// buffered value and version 0. (The Redis front end's WATCH compares it
    /// with the version seen at WATCH time, and RS.GETV reports it.)
    pub async fn read_with_version(
        &mut self,
        table_id: u64,
        key: &[u8],
    ) -> Result<(Option<Vec<u8>>, u64), ClientError> {
        let value = self.read(table_id, key).await?;
        let version = self
            .objects
            .get(&(table_id, key.to_vec()))
            .and_then(|e| e.read.as_ref())
            .map_or(0, |(version, _)| *version);
        Ok((value, version))
    }

    /// Objects this transaction has read or changed so far.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the transaction has neither read nor changed anything.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

//! [`BackupClient`]: the typed calls a master (its replica manager), the recovery
//! code and cold start make to backups (R§4.2, R§7.4, R§8), over the
//! [`Transport`] seam.
//!
//! It lives here, beside the replica store it reaches, because it is internal
//! server-to-server traffic, not part of the public client library: its callers
//! are the storage server (replica manager, recovery master, cold start) and the
//! coordinator (recovery), which both depend on this crate and neither on the
//! other. It needs only `ramstore-wire` and `ramstore-rpc`, which depend on
//! nothing of ours, so there is no cycle. `ramstore-rpc` knows frames, not
//! messages; the store itself ([`crate::BackupStore`]) does no networking.
//!
//! # Semantics
//!
//! One call is one RPC to the backup at `addr`, with [`BackupClient::rpc_deadline`]
//! as its deadline; nothing is retried inside. Which backup to try next, and when,
//! is the caller's policy (R§7.1: a backup that answers [`BackupClientError::Full`]
//! is skipped for another candidate). Every backup operation is idempotent (opening
//! an open replica, rewriting bytes already held, repeating the closing write of a
//! closed replica, freeing a replica not held), so the caller may resend a request
//! whose answer it did not get.
//!
//! A caller keeps at most one request in flight per replica: the backup serializes
//! a replica's operations, and a write sent while the same replica's close is
//! still running would wait behind it (see `ramstore_server::backup_service`).
//!
//! Thread-safety: `Send + Sync` and cheap to clone; share one per process.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ramstore_rpc::{RpcError, Transport};
use ramstore_wire::{
    decode_response, encode_request, BackupStartPartitioningEncoder, BackupWriteFlags, ErrorBody,
    Opcode, PartitionTablet, Request, Response, Status, WireError, MAX_REPLICA_BYTES,
};

/// Default deadline of one backup RPC: a close writes and syncs a whole 8 MiB
/// segment, and a replica read moves one, so this is far above the 2 s a data
/// RPC gets.
pub const DEFAULT_BACKUP_RPC_DEADLINE_MS: u64 = 10_000;

/// Bytes of a backup request frame besides its replica bytes (prefix, header,
/// fixed fields), used to size the encode buffer in one allocation.
const BACKUP_REQUEST_OVERHEAD_BYTES: usize = 64;

/// One replica a backup holds for a master, as BackupGetReplicas reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackupReplica {
    /// The segment of the master's log.
    pub segment_id: u64,
    /// Valid bytes held.
    pub length: u32,
    /// Closed (complete, read-only) or still open (the head, or a segment being
    /// filled; its bytes may still grow).
    pub closed: bool,
}

/// A replica's bytes as BackupReadReplica returns them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaBytes {
    /// Whether the replica was closed when read. An open replica's bytes are a
    /// prefix of what its master wrote (R§7.4: the head is read open).
    pub closed: bool,
    /// The valid bytes: a view into the response frame, not a copy.
    pub bytes: Bytes,
}

/// Why a backup call failed. Which of these the caller should retry elsewhere is
/// its policy; the variants say what happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackupClientError {
    /// NO_SPACE: the backup has no free open-replica buffer or frame. Place the
    /// replica on another backup (R§7.1).
    #[error("backup {addr} is full: {message}")]
    Full { addr: String, message: String },
    /// OBJECT_DOESNT_EXIST: the backup holds no such replica (never opened, freed,
    /// lost in a restart, or open in atomic mode and so never offered).
    #[error("backup {addr} holds no such replica: {message}")]
    UnknownReplica { addr: String, message: String },
    /// INVALID_REQUEST, TOO_LARGE or UNKNOWN_OPCODE: the backup refused the request
    /// (a gap, a write past the segment, a closed replica, no backup service on
    /// that server, ...). Resending it unchanged fails again.
    #[error("backup {addr} refused the request ({status}): {message}")]
    Refused {
        addr: String,
        status: Status,
        message: String,
    },
    /// RETRY: the backup asked to be asked again after `delay_ms`.
    #[error("backup {addr} asks to retry in {delay_ms} ms")]
    Retry { addr: String, delay_ms: u32 },
    /// INTERNAL or any other status: the backup failed (its disk, a corrupt
    /// replica). Its replicas should be treated as suspect.
    #[error("backup {addr} failed ({status}): {message}")]
    Failed {
        addr: String,
        status: Status,
        message: String,
    },
    /// No answer: the backup could not be reached or did not answer in time. It
    /// may or may not have carried the request out.
    #[error("backup {addr} did not answer: {source}")]
    Unreachable {
        addr: String,
        #[source]
        source: RpcError,
    },
    /// The request cannot be encoded (e.g. more than a segment of bytes).
    #[error("cannot encode the backup request: {0}")]
    Encode(#[source] WireError),
    /// The backup's answer was malformed or for another operation.
    #[error("backup {addr} sent a bad response: {reason}")]
    BadResponse { addr: String, reason: String },
}

impl BackupClientError {
    /// Whether this is a backup's refusal for lack of free frames (its disk holds
    /// all the replicas it can: [`crate::BackupError::FramesFull`]), as opposed to
    /// the passing lack of open buffers. The status (NO_SPACE) is the same, so the
    /// backup's message tells them apart; `frames_full_is_recognised_from_the_message`
    /// pairs this with the text.
    pub fn is_out_of_frames(&self) -> bool {
        matches!(self, Self::Full { message, .. } if message.contains("frames hold replicas"))
    }

    fn of_body(addr: &str, body: &ErrorBody<'_>) -> Self {
        let addr = addr.to_string();
        match *body {
            ErrorBody::Retry { delay_ms } => Self::Retry { addr, delay_ms },
            ErrorBody::WrongVersion { current_version } => Self::BadResponse {
                addr,
                reason: format!("WRONG_VERSION ({current_version}) from a backup"),
            },
            ErrorBody::Message { status, message } => {
                let message = message.to_string();
                match status {
                    Status::NoSpace => Self::Full { addr, message },
                    Status::ObjectDoesntExist => Self::UnknownReplica { addr, message },
                    Status::InvalidRequest | Status::TooLarge | Status::UnknownOpcode => {
                        Self::Refused {
                            addr,
                            status,
                            message,
                        }
                    }
                    _ => Self::Failed {
                        addr,
                        status,
                        message,
                    },
                }
            }
        }
    }
}

/// Calls backups. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct BackupClient {
    transport: Arc<dyn Transport>,
    rpc_deadline: Duration,
}

impl std::fmt::Debug for BackupClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupClient")
            .field("rpc_deadline", &self.rpc_deadline)
            .finish_non_exhaustive()
    }
}

impl BackupClient {
    /// A client sending through `transport` with the default deadline
    /// ([`DEFAULT_BACKUP_RPC_DEADLINE_MS`]).
    pub fn new(transport: Arc<dyn Transport>) -> Self {
        Self {
            transport,
            rpc_deadline: Duration::from_millis(DEFAULT_BACKUP_RPC_DEADLINE_MS),
        }
    }

    /// The same client with another per-RPC deadline.
    pub fn with_rpc_deadline(mut self, deadline: Duration) -> Self {
        self.rpc_deadline = deadline;
        self
    }

    /// The deadline of each RPC.
    pub fn rpc_deadline(&self) -> Duration {
        self.rpc_deadline
    }

    /// Puts `bytes` at `offset` of the replica of `segment_id` of `master_id` on
    /// the backup at `addr`, opening it first and/or closing it afterwards as
    /// `flags` say (one RPC for all three, like RAMCloud's BackupWriteRpc). Writes
    /// are contiguous: `offset` may not exceed what the replica holds. Returns once
    /// the backup acknowledged: in buffered mode the bytes are in its memory, in
    /// fsync mode on its disk; a close returns once the closed replica is on disk.
    ///
    /// At most [`MAX_REPLICA_BYTES`] per call (a whole segment).
    pub async fn write(
        &self,
        addr: &str,
        master_id: u64,
        segment_id: u64,
        offset: u32,
        bytes: &[u8],
        flags: BackupWriteFlags,
    ) -> Result<(), BackupClientError> {
        let req = Request::BackupWrite {
            master_id,
            segment_id,
            offset,
            flags,
            bytes,
        };
        let frame = self.call(addr, &req, bytes.len()).await?;
        match decode(addr, &frame, Opcode::BackupWrite)? {
            Response::BackupWrite => Ok(()),
            other => Err(unexpected(addr, &other)),
        }
    }

    /// Drops the replica on the backup at `addr` (its segment left the log, R§4.4,
    /// or it was re-replicated elsewhere, R§8). Succeeds if the backup does not
    /// hold it.
    pub async fn free(
        &self,
        addr: &str,
        master_id: u64,
        segment_id: u64,
    ) -> Result<(), BackupClientError> {
        let req = Request::BackupFree {
            master_id,
            segment_id,
        };
        let frame = self.call(addr, &req, 0).await?;
        match decode(addr, &frame, Opcode::BackupFree)? {
            Response::BackupFree => Ok(()),
            other => Err(unexpected(addr, &other)),
        }
    }

    /// The replicas of `master_id` the backup at `addr` offers for recovery or
    /// cold start (R§7.4), by segment id: closed ones and open non-atomic ones.
    pub async fn get_replicas(
        &self,
        addr: &str,
        master_id: u64,
    ) -> Result<Vec<BackupReplica>, BackupClientError> {
        let frame = self
            .call(addr, &Request::BackupGetReplicas { master_id }, 0)
            .await?;
        match decode(addr, &frame, Opcode::BackupGetReplicas)? {
            Response::BackupGetReplicas { replicas } => Ok(replica_list(replicas)),
            other => Err(unexpected(addr, &other)),
        }
    }

    /// The valid bytes of one replica on the backup at `addr`, and whether it was
    /// closed (R§7.4, R§7.10). A closed replica's bytes were checked against the
    /// checksum recorded when they were written.
    pub async fn read_replica(
        &self,
        addr: &str,
        master_id: u64,
        segment_id: u64,
    ) -> Result<ReplicaBytes, BackupClientError> {
        let req = Request::BackupReadReplica {
            master_id,
            segment_id,
        };
        let frame = self.call(addr, &req, 0).await?;
        match decode(addr, &frame, Opcode::BackupReadReplica)? {
            Response::BackupReadReplica { closed, bytes } => Ok(ReplicaBytes {
                closed,
                // `bytes` borrows `frame`, so the view needs no copy.
                bytes: frame.slice_ref(bytes),
            }),
            other => Err(unexpected(addr, &other)),
        }
    }

    /// Announces the partitions of crashed master `master_id` to the backup at
    /// `addr` (R§7.5): it starts reading and bucketing its replicas of that master
    /// and answers them in the order it reads them. `tablets` are (partition id,
    /// table id, start hash, end hash). Idempotent per `recovery_id`.
    pub async fn start_partitioning(
        &self,
        addr: &str,
        master_id: u64,
        recovery_id: u64,
        tablets: &[PartitionTablet],
    ) -> Result<Vec<BackupReplica>, BackupClientError> {
        let mut frame = Vec::new();
        let mut enc = BackupStartPartitioningEncoder::new(0, master_id, recovery_id, &mut frame);
        for t in tablets {
            enc.push(t).map_err(BackupClientError::Encode)?;
        }
        enc.finish().map_err(BackupClientError::Encode)?;
        let response = self.send(addr, frame).await?;
        match decode(addr, &response, Opcode::BackupStartPartitioning)? {
            Response::BackupStartPartitioning { replicas } => Ok(replica_list(replicas)),
            other => Err(unexpected(addr, &other)),
        }
    }

    /// The entries of partition `partition_id` in replica `segment_id` of crashed
    /// master `master_id`, as bucketed by the backup at `addr` (R§7.5). A backup
    /// still reading that replica answers [`BackupClientError::Retry`].
    pub async fn get_recovery_data(
        &self,
        addr: &str,
        master_id: u64,
        recovery_id: u64,
        segment_id: u64,
        partition_id: u32,
    ) -> Result<Bytes, BackupClientError> {
        let req = Request::BackupGetRecoveryData {
            master_id,
            recovery_id,
            segment_id,
            partition_id,
        };
        let frame = self.call(addr, &req, 0).await?;
        match decode(addr, &frame, Opcode::BackupGetRecoveryData)? {
            // `bytes` borrows `frame`, so the view needs no copy.
            Response::BackupGetRecoveryData { bytes } => Ok(frame.slice_ref(bytes)),
            other => Err(unexpected(addr, &other)),
        }
    }

    /// Encodes `req` and sends it; the response frame.
    async fn call(
        &self,
        addr: &str,
        req: &Request<'_>,
        payload_bytes: usize,
    ) -> Result<Bytes, BackupClientError> {
        if payload_bytes > MAX_REPLICA_BYTES {
            return Err(BackupClientError::Encode(WireError::ReplicaTooLarge(
                payload_bytes,
            )));
        }
        let mut frame = Vec::with_capacity(BACKUP_REQUEST_OVERHEAD_BYTES + payload_bytes);
        encode_request(0, req, &mut frame).map_err(BackupClientError::Encode)?;
        self.send(addr, frame).await
    }

    /// Sends an encoded request frame; the response frame.
    async fn send(&self, addr: &str, frame: Vec<u8>) -> Result<Bytes, BackupClientError> {
        self.transport
            .call(addr, frame, self.rpc_deadline)
            .await
            .map_err(|source| BackupClientError::Unreachable {
                addr: addr.to_string(),
                source,
            })
    }
}

/// The replicas of a BackupGetReplicas or BackupStartPartitioning answer.
fn replica_list(replicas: ramstore_wire::ReplicaEntries<'_>) -> Vec<BackupReplica> {
    replicas
        .iter()
        .map(|r| BackupReplica {
            segment_id: r.segment_id,
            length: r.length,
            closed: r.closed,
        })
        .collect()
}

/// Decodes a response to a request with `opcode`; error statuses become errors.
fn decode<'f>(
    addr: &str,
    frame: &'f [u8],
    opcode: Opcode,
) -> Result<Response<'f>, BackupClientError> {
    let (header, response) =
        decode_response(frame).map_err(|e| BackupClientError::BadResponse {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
    if header.opcode != opcode {
        return Err(BackupClientError::BadResponse {
            addr: addr.to_string(),
            reason: format!("answer for {:?} to a {opcode:?}", header.opcode),
        });
    }
    match response {
        Response::Error(body) => Err(BackupClientError::of_body(addr, &body)),
        ok => Ok(ok),
    }
}

fn unexpected(addr: &str, response: &Response<'_>) -> BackupClientError {
    BackupClientError::BadResponse {
        addr: addr.to_string(),
        reason: format!("unexpected answer {:?}", response.opcode()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_full_is_recognised_from_the_message() {
        let refusal = |e: crate::BackupError| {
            let message = e.to_string();
            BackupClientError::of_body(
                "b:1",
                &ErrorBody::Message {
                    status: Status::NoSpace,
                    message: &message,
                },
            )
        };
        assert!(refusal(crate::BackupError::FramesFull { frames: 64 }).is_out_of_frames());
        assert!(!refusal(crate::BackupError::BuffersFull { limit: 8 }).is_out_of_frames());
    }

    #[test]
    fn of_body_sorts_every_status() {
        for status in Status::ALL {
            let body = match status {
                Status::Ok => continue,
                Status::WrongVersion => ErrorBody::WrongVersion { current_version: 1 },
                Status::Retry => ErrorBody::Retry { delay_ms: 5 },
                status => ErrorBody::Message {
                    status,
                    message: "why",
                },
            };
            let e = BackupClientError::of_body("b:1", &body);
            let expected_full = status == Status::NoSpace;
            assert_eq!(
                matches!(e, BackupClientError::Full { .. }),
                expected_full,
                "{status}: {e}"
            );
            assert_eq!(
                matches!(e, BackupClientError::UnknownReplica { .. }),
                status == Status::ObjectDoesntExist,
                "{status}: {e}"
            );
            assert!(e.to_string().contains("b:1"), "{e}");
        }
        assert_eq!(
            BackupClientError::of_body("b:1", &ErrorBody::Retry { delay_ms: 5 }),
            BackupClientError::Retry {
                addr: "b:1".into(),
                delay_ms: 5
            }
        );
        assert!(matches!(
            BackupClientError::of_body(
                "b:1",
                &ErrorBody::Message {
                    status: Status::InvalidRequest,
                    message: "gap"
                }
            ),
            BackupClientError::Refused {
                status: Status::InvalidRequest,
                ..
            }
        ));
        assert!(matches!(
            BackupClientError::of_body(
                "b:1",
                &ErrorBody::Message {
                    status: Status::Internal,
                    message: "disk"
                }
            ),
            BackupClientError::Failed { .. }
        ));
    }
}

//! Responses: one OK variant per opcode plus [`Response::Error`], decoded zero-copy
//! from a frame and encoded into one. A response's header carries the opcode of the
//! request it answers and the status; the body layout depends on both.

use crate::codec::{
    check_value_len, put_bool, put_long_string, put_replica_bytes, put_string, put_u32, put_u64,
    put_u8, put_value, Reader,
};
use crate::error::WireError;
use crate::expiry::{put_optional_time, read_optional_time};
use crate::frame::{atomically, begin_frame, end_frame, split_frame, Header};
use crate::list::{
    EnumeratedObjects, List, MultiReadResults, MultiRemoveResults, MultiWriteResults,
    ReplicaEntries, TabletMapEntries,
};
use crate::moved_record::{
    optional_moved_records, optional_pull_trailers, MovedHeldCommits, MovedRpcResults,
};
use crate::opcode::Opcode;
use crate::status::Status;
use crate::tx::TxVote;
use crate::FLAG_RESPONSE;

/// A response, borrowed from the frame it was decoded from (or from the caller's data
/// when encoding). Lists can only come from a decoded frame; build new ones with the
/// encoders in [`crate::encoder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response<'a> {
    Ping {
        nonce: u64,
        server_id: u64,
    },
    CreateTable {
        table_id: u64,
    },
    GetTableId {
        table_id: u64,
    },
    DropTable,
    /// See [`encode_read_response_header`] to send the value without copying it.
    Read {
        version: u64,
        value: &'a [u8],
    },
    Write {
        version: u64,
    },
    /// Whether the expiry time changed (`expiry.rs`).
    SetExpiry {
        changed: bool,
    },
    /// The object's expiry time (`None`: never expires).
    GetExpiry {
        expires_at: Option<u64>,
    },
    WriteExpiring {
        version: u64,
    },
    /// Whether the object existed and its removed version (0 if none).
    Remove {
        existed: bool,
        version: u64,
    },
    /// The new version and the new value (8 little-endian bytes of the request's
    /// number kind).
    Increment {
        version: u64,
        value: [u8; 8],
    },
    MultiRead(MultiReadResults<'a>),
    MultiWrite(MultiWriteResults<'a>),
    MultiRemove(MultiRemoveResults<'a>),
    /// A batch of objects; continue from `next_cursor` if `has_next`.
    Enumerate {
        has_next: bool,
        next_cursor: u64,
        objects: EnumeratedObjects<'a>,
    },
    SplitTablet,
    Enlist {
        server_id: u64,
    },
    ServerListUpdate,
    TakeTabletOwnership,
    DropTabletOwnership,
    GetTabletMap {
        map_version: u64,
        tablets: TabletMapEntries<'a>,
    },
    /// `key=value` lines of UTF-8 text.
    GetServerStats {
        text: &'a str,
    },
    BackupWrite,
    BackupFree,
    /// The replicas of the master this backup holds and offers, by segment id.
    /// Build with [`crate::BackupReplicasEncoder`].
    BackupGetReplicas {
        replicas: ReplicaEntries<'a>,
    },
    /// A replica's valid bytes, and whether it was closed when read.
    BackupReadReplica {
        closed: bool,
        bytes: &'a [u8],
    },
    /// The replicas the backup buckets, in the order it reads them (R§7.5: recovery
    /// masters ask for them in this order). Build with
    /// [`crate::BackupReplicasEncoder::for_partitioning`].
    BackupStartPartitioning {
        replicas: ReplicaEntries<'a>,
    },
    /// The partition's entries from one replica, in log entry format.
    BackupGetRecoveryData {
        bytes: &'a [u8],
    },
    /// What the recovery master replayed: entries applied and their bytes.
    RecoverPartition {
        entries: u64,
        bytes: u64,
        /// The recovered tablets' ctime on the recovery master (design notes
        /// "Tablet ctime"): the coordinator records it with the new owner.
        /// Absent on the wire when 0 (no cutoff, as from an older master).
        ctime: u64,
    },
    CrashServer,
    /// The coordinator recorded the clean stop.
    Leave,
    /// The suspicion is noted (the coordinator confirms it in the background).
    SuspectServer,
    /// Whether the pinged server answered as itself within the pinger's timeout.
    PingServer {
        answered: bool,
    },
    /// The lease granted, in milliseconds from when the caller sent its request;
    /// 0 when none is granted now.
    RenewLease {
        lease_ms: u32,
    },
    /// The client lease opened or renewed, live for `lease_ms` from when the
    /// client sent its request (RIFL §4).
    ClientLease {
        lease_id: u64,
        lease_ms: u32,
    },
    /// Whether the client lease asked about is still live.
    CheckClientLease {
        live: bool,
    },
    /// A participant's vote on a transaction (`tx.rs`).
    TxPrepare {
        vote: TxVote,
    },
    TxDecision,
    /// Every transaction of a TxDecisions request was decided here.
    TxDecisions,
    /// A participant's vote for a recovery manager (`tx_vote.rs`).
    TxRequestVote {
        vote: TxVote,
    },
    /// Ownership has moved; the migration goes on under this id.
    MigrateTablet {
        migration_id: u64,
    },
    /// `key=value` lines, one migration per line.
    ListMigrations {
        text: &'a str,
    },
    MigrationDone,
    CancelMigration,
    /// The tablet is fenced; every version the master issued is below this.
    PrepareMigration {
        safe_version: u64,
    },
    TakeMigratingTablet,
    /// A batch of records; continue from `next_cursor` if `has_next`. Build with
    /// [`crate::EnumerateResponseEncoder::for_pull`]. `records`: the completion
    /// records of the hashes the batch covers (an optional trailer,
    /// `moved_record.rs`).
    Pull {
        has_next: bool,
        next_cursor: u64,
        objects: EnumeratedObjects<'a>,
        records: MovedRpcResults<'a>,
        /// The held commits naming an object of the hashes the batch covers
        /// (a second optional trailer, `moved_record.rs`; issue 21).
        held: MovedHeldCommits<'a>,
    },
    /// The records of the keys asked for that exist (a key not answered does not
    /// exist), and the completion records of their key hashes (an optional
    /// trailer). Build with [`crate::PriorityPullResponseEncoder`].
    PriorityPull {
        objects: EnumeratedObjects<'a>,
        records: MovedRpcResults<'a>,
    },
    /// Any status other than OK, for any opcode.
    Error(ErrorBody<'a>),
}

/// The body of a response whose status is not OK. Its layout depends on the status:
/// WRONG_VERSION carries the current version, RETRY a delay, every other status a
/// (possibly empty) message for humans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorBody<'a> {
    /// `u64 LE current_version`.
    WrongVersion { current_version: u64 },
    /// `u32 LE delay_ms`: try again after this long.
    Retry { delay_ms: u32 },
    /// `u16 LE len + UTF-8 message`; `status` is neither OK, WRONG_VERSION nor RETRY.
    Message { status: Status, message: &'a str },
}

impl ErrorBody<'_> {
    /// The status this body is sent under.
    pub fn status(&self) -> Status {
        match self {
            ErrorBody::WrongVersion { .. } => Status::WrongVersion,
            ErrorBody::Retry { .. } => Status::Retry,
            ErrorBody::Message { status, .. } => *status,
        }
    }
}

impl<'a> ErrorBody<'a> {
    /// The body for `err`, a request that failed to decode: its status and its
    /// description as the message.
    pub fn for_wire_error(err: &WireError, message: &'a str) -> Self {
        ErrorBody::Message {
            status: err.status(),
            message,
        }
    }
}

/// What a server or the coordinator answers a caller it lists CRASHED or removed
/// (R§7.11): how a zombie learns it is one. One text, so both sides say the same.
pub const NOT_UP_MESSAGE: &str = "you are not UP in the cluster";

/// SERVER_NOT_UP with [`NOT_UP_MESSAGE`].
pub fn not_up() -> Response<'static> {
    Response::Error(ErrorBody::Message {
        status: Status::ServerNotUp,
        message: NOT_UP_MESSAGE,
    })
}

impl Response<'_> {
    /// The opcode whose OK layout this is; `None` for [`Response::Error`], which any
    /// opcode may answer.
    pub fn opcode(&self) -> Option<Opcode> {
        Some(match self {
            Response::Ping { .. } => Opcode::Ping,
            Response::CreateTable { .. } => Opcode::CreateTable,
            Response::GetTableId { .. } => Opcode::GetTableId,
            Response::DropTable => Opcode::DropTable,
            Response::Read { .. } => Opcode::Read,
            Response::Write { .. } => Opcode::Write,
            Response::SetExpiry { .. } => Opcode::SetExpiry,
            Response::GetExpiry { .. } => Opcode::GetExpiry,
            Response::WriteExpiring { .. } => Opcode::WriteExpiring,
            Response::Remove { .. } => Opcode::Remove,
            Response::Increment { .. } => Opcode::Increment,
            Response::MultiRead(_) => Opcode::MultiRead,
            Response::MultiWrite(_) => Opcode::MultiWrite,
            Response::MultiRemove(_) => Opcode::MultiRemove,
            Response::Enumerate { .. } => Opcode::Enumerate,
            Response::SplitTablet => Opcode::SplitTablet,
            Response::Enlist { .. } => Opcode::Enlist,
            Response::ServerListUpdate => Opcode::ServerListUpdate,
            Response::TakeTabletOwnership => Opcode::TakeTabletOwnership,
            Response::DropTabletOwnership => Opcode::DropTabletOwnership,
            Response::GetTabletMap { .. } => Opcode::GetTabletMap,
            Response::GetServerStats { .. } => Opcode::GetServerStats,
            Response::BackupWrite => Opcode::BackupWrite,
            Response::BackupFree => Opcode::BackupFree,
            Response::BackupGetReplicas { .. } => Opcode::BackupGetReplicas,
            Response::BackupReadReplica { .. } => Opcode::BackupReadReplica,
            Response::BackupStartPartitioning { .. } => Opcode::BackupStartPartitioning,
            Response::BackupGetRecoveryData { .. } => Opcode::BackupGetRecoveryData,
            Response::RecoverPartition { .. } => Opcode::RecoverPartition,
            Response::CrashServer => Opcode::CrashServer,
            Response::Leave => Opcode::Leave,
            Response::SuspectServer => Opcode::SuspectServer,
            Response::PingServer { .. } => Opcode::PingServer,
            Response::RenewLease { .. } => Opcode::RenewLease,
            Response::ClientLease { .. } => Opcode::ClientLease,
            Response::CheckClientLease { .. } => Opcode::CheckClientLease,
            Response::TxPrepare { .. } => Opcode::TxPrepare,
            Response::TxDecision => Opcode::TxDecision,
            Response::TxDecisions => Opcode::TxDecisions,
            Response::TxRequestVote { .. } => Opcode::TxRequestVote,
            Response::MigrateTablet { .. } => Opcode::MigrateTablet,
            Response::ListMigrations { .. } => Opcode::ListMigrations,
            Response::MigrationDone => Opcode::MigrationDone,
            Response::CancelMigration => Opcode::CancelMigration,
            Response::PrepareMigration { .. } => Opcode::PrepareMigration,
            Response::TakeMigratingTablet => Opcode::TakeMigratingTablet,
            Response::Pull { .. } => Opcode::Pull,
            Response::PriorityPull { .. } => Opcode::PriorityPull,
            Response::Error(_) => return None,
        })
    }

    /// The status the header carries.
    pub fn status(&self) -> Status {
        match self {
            Response::Error(e) => e.status(),
            _ => Status::Ok,
        }
    }
}

/// Decodes one whole response frame (length prefix included, nothing after it).
/// Checks as [`crate::decode_request`] does; the RESPONSE flag must be set.
pub fn decode_response(frame: &[u8]) -> Result<(Header, Response<'_>), WireError> {
    let (header, body) = split_frame(frame)?;
    if !header.is_response() {
        return Err(WireError::BadFlags(header.flags));
    }
    let mut r = Reader::new(body);
    let response = match header.status {
        Status::Ok => decode_ok_body(header.opcode, &mut r)?,
        Status::WrongVersion => Response::Error(ErrorBody::WrongVersion {
            current_version: r.u64()?,
        }),
        Status::Retry => Response::Error(ErrorBody::Retry { delay_ms: r.u32()? }),
        status => Response::Error(ErrorBody::Message {
            status,
            message: r.string()?,
        }),
    };
    r.finish()?;
    Ok((header, response))
}

fn decode_ok_body<'a>(opcode: Opcode, r: &mut Reader<'a>) -> Result<Response<'a>, WireError> {
    Ok(match opcode {
        Opcode::Ping => Response::Ping {
            nonce: r.u64()?,
            server_id: r.u64()?,
        },
        Opcode::CreateTable => Response::CreateTable { table_id: r.u64()? },
        Opcode::GetTableId => Response::GetTableId { table_id: r.u64()? },
        Opcode::DropTable => Response::DropTable,
        Opcode::Read => Response::Read {
            version: r.u64()?,
            value: r.value()?,
        },
        Opcode::Write => Response::Write { version: r.u64()? },
        Opcode::SetExpiry => Response::SetExpiry {
            changed: r.bool("changed")?,
        },
        Opcode::GetExpiry => Response::GetExpiry {
            expires_at: read_optional_time(r)?,
        },
        Opcode::WriteExpiring => Response::WriteExpiring { version: r.u64()? },
        Opcode::Remove => Response::Remove {
            existed: r.bool("existed")?,
            version: r.u64()?,
        },
        Opcode::Increment => Response::Increment {
            version: r.u64()?,
            value: r.array()?,
        },
        Opcode::MultiRead => Response::MultiRead(List::read(r)?),
        Opcode::MultiWrite => Response::MultiWrite(List::read(r)?),
        Opcode::MultiRemove => Response::MultiRemove(List::read(r)?),
        Opcode::Enumerate => Response::Enumerate {
            has_next: r.bool("has_next")?,
            next_cursor: r.u64()?,
            objects: List::read(r)?,
        },
        Opcode::SplitTablet => Response::SplitTablet,
        Opcode::Enlist => Response::Enlist {
            server_id: r.u64()?,
        },
        Opcode::ServerListUpdate => Response::ServerListUpdate,
        Opcode::TakeTabletOwnership => Response::TakeTabletOwnership,
        Opcode::DropTabletOwnership => Response::DropTabletOwnership,
        Opcode::GetTabletMap => Response::GetTabletMap {
            map_version: r.u64()?,
            tablets: List::read(r)?,
        },
        Opcode::GetServerStats => Response::GetServerStats {
            text: r.long_string()?,
        },
        Opcode::BackupWrite => Response::BackupWrite,
        Opcode::BackupFree => Response::BackupFree,
        Opcode::BackupGetReplicas => Response::BackupGetReplicas {
            replicas: List::read(r)?,
        },
        Opcode::BackupReadReplica => Response::BackupReadReplica {
            closed: r.bool("closed")?,
            bytes: r.replica_bytes()?,
        },
        Opcode::BackupStartPartitioning => Response::BackupStartPartitioning {
            replicas: List::read(r)?,
        },
        Opcode::BackupGetRecoveryData => Response::BackupGetRecoveryData {
            bytes: r.replica_bytes()?,
        },
        Opcode::RecoverPartition => Response::RecoverPartition {
            entries: r.u64()?,
            bytes: r.u64()?,
            ctime: optional_nonzero_u64(r, "an explicit ctime of 0")?,
        },
        Opcode::CrashServer => Response::CrashServer,
        Opcode::Leave => Response::Leave,
        Opcode::SuspectServer => Response::SuspectServer,
        Opcode::PingServer => Response::PingServer {
            answered: r.bool("answered")?,
        },
        Opcode::RenewLease => Response::RenewLease { lease_ms: r.u32()? },
        Opcode::ClientLease => Response::ClientLease {
            lease_id: r.u64()?,
            lease_ms: r.u32()?,
        },
        Opcode::CheckClientLease => Response::CheckClientLease {
            live: r.bool("live")?,
        },
        Opcode::TxPrepare => Response::TxPrepare {
            vote: TxVote::from_code(r.u8()?)?,
        },
        Opcode::TxDecision => Response::TxDecision,
        Opcode::TxDecisions => Response::TxDecisions,
        Opcode::TxRequestVote => Response::TxRequestVote {
            vote: TxVote::from_code(r.u8()?)?,
        },
        Opcode::MigrateTablet => Response::MigrateTablet {
            migration_id: r.u64()?,
        },
        Opcode::ListMigrations => Response::ListMigrations {
            text: r.long_string()?,
        },
        Opcode::MigrationDone => Response::MigrationDone,
        Opcode::CancelMigration => Response::CancelMigration,
        Opcode::PrepareMigration => Response::PrepareMigration {
            safe_version: r.u64()?,
        },
        Opcode::TakeMigratingTablet => Response::TakeMigratingTablet,
        Opcode::Pull => {
            let (has_next, next_cursor) = (r.bool("has_next")?, r.u64()?);
            let objects = List::read(r)?;
            let (records, held) = optional_pull_trailers(r)?;
            Response::Pull {
                has_next,
                next_cursor,
                objects,
                records,
                held,
            }
        }
        Opcode::PriorityPull => Response::PriorityPull {
            objects: List::read(r)?,
            records: optional_moved_records(r)?,
        },
    })
}

/// Appends one whole response frame (length prefix included) to `out`, answering a
/// request with `opcode`.
///
/// Fails, appending nothing, if an OK body is for another opcode
/// ([`WireError::OpcodeMismatch`]), an error body is malformed (see
/// [`encode_error_response`]), or a field or the frame exceeds its limit.
pub fn encode_response(
    request_id: u64,
    opcode: Opcode,
    resp: &Response<'_>,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    match resp {
        Response::Error(body) => encode_error_response(request_id, opcode.code(), body, out),
        ok => {
            if let Some(body_opcode) = ok.opcode().filter(|o| *o != opcode) {
                return Err(WireError::OpcodeMismatch {
                    header: opcode.code(),
                    body: body_opcode.code(),
                });
            }
            atomically(out, |out| {
                let start = begin_frame(out, opcode.code(), Status::Ok, FLAG_RESPONSE, request_id);
                encode_ok_body(ok, out)?;
                end_frame(out, start, 0)
            })
        }
    }
}

/// Appends one whole error response frame. The opcode is raw, so a server can answer
/// a request whose opcode it does not know (with `UNKNOWN_OPCODE`) or could not
/// decode, echoing what the request's header said.
///
/// Fails, appending nothing, if a [`ErrorBody::Message`] carries OK, WRONG_VERSION
/// or RETRY (those have their own layouts) or a message over the string limit.
pub fn encode_error_response(
    request_id: u64,
    opcode: u16,
    body: &ErrorBody<'_>,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    atomically(out, |out| {
        let start = begin_frame(out, opcode, body.status(), FLAG_RESPONSE, request_id);
        match body {
            ErrorBody::WrongVersion { current_version } => put_u64(out, *current_version),
            ErrorBody::Retry { delay_ms } => put_u32(out, *delay_ms),
            ErrorBody::Message { status, message } => {
                if matches!(status, Status::Ok | Status::WrongVersion | Status::Retry) {
                    return Err(WireError::Malformed(
                        "an error message under OK, WRONG_VERSION or RETRY",
                    ));
                }
                put_string(out, message)?;
            }
        }
        end_frame(out, start, 0)
    })
}

/// Appends the start of an OK Read response — length prefix, header, version and
/// value length — for a value of `value_len` bytes that the caller appends right
/// after, from one slice or several (scatter-gather, e.g. straight from the log's
/// seglets or as separate I/O vectors).
///
/// The length prefix already counts those `value_len` bytes: the frame is complete,
/// and valid, only once exactly `value_len` more bytes follow in the stream.
pub fn encode_read_response_header(
    request_id: u64,
    version: u64,
    value_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    atomically(out, |out| {
        let len = check_value_len(value_len)?;
        let start = begin_frame(
            out,
            Opcode::Read.code(),
            Status::Ok,
            FLAG_RESPONSE,
            request_id,
        );
        put_u64(out, version);
        put_u32(out, len);
        end_frame(out, start, value_len)
    })
}

fn encode_ok_body(resp: &Response<'_>, out: &mut Vec<u8>) -> Result<(), WireError> {
    match resp {
        Response::Ping { nonce, server_id } => {
            put_u64(out, *nonce);
            put_u64(out, *server_id);
        }
        Response::CreateTable { table_id } | Response::GetTableId { table_id } => {
            put_u64(out, *table_id)
        }
        Response::Read { version, value } => {
            put_u64(out, *version);
            put_value(out, value)?;
        }
        Response::Write { version } | Response::WriteExpiring { version } => put_u64(out, *version),
        Response::SetExpiry { changed } => put_bool(out, *changed),
        Response::GetExpiry { expires_at } => put_optional_time(out, *expires_at),
        Response::Remove { existed, version } => {
            put_bool(out, *existed);
            put_u64(out, *version);
        }
        Response::Increment { version, value } => {
            put_u64(out, *version);
            out.extend_from_slice(value);
        }
        Response::MultiRead(items) => items.write(out),
        Response::MultiWrite(items) => items.write(out),
        Response::MultiRemove(items) => items.write(out),
        Response::Enumerate {
            has_next,
            next_cursor,
            objects,
        } => {
            put_bool(out, *has_next);
            put_u64(out, *next_cursor);
            objects.write(out);
        }
        Response::Enlist { server_id } => put_u64(out, *server_id),
        Response::GetTabletMap {
            map_version,
            tablets,
        } => {
            put_u64(out, *map_version);
            tablets.write(out);
        }
        Response::GetServerStats { text } => put_long_string(out, text)?,
        Response::BackupGetReplicas { replicas }
        | Response::BackupStartPartitioning { replicas } => replicas.write(out),
        Response::BackupReadReplica { closed, bytes } => {
            put_bool(out, *closed);
            put_replica_bytes(out, bytes)?;
        }
        Response::BackupGetRecoveryData { bytes } => put_replica_bytes(out, bytes)?,
        Response::RecoverPartition {
            entries,
            bytes,
            ctime,
        } => {
            put_u64(out, *entries);
            put_u64(out, *bytes);
            if *ctime != 0 {
                put_u64(out, *ctime);
            }
        }
        Response::PingServer { answered } => put_bool(out, *answered),
        Response::RenewLease { lease_ms } => put_u32(out, *lease_ms),
        Response::ClientLease { lease_id, lease_ms } => {
            put_u64(out, *lease_id);
            put_u32(out, *lease_ms);
        }
        Response::CheckClientLease { live } => put_bool(out, *live),
        Response::TxPrepare { vote } | Response::TxRequestVote { vote } => put_u8(out, *vote as u8),
        Response::MigrateTablet { migration_id } => put_u64(out, *migration_id),
        Response::ListMigrations { text } => put_long_string(out, text)?,
        Response::PrepareMigration { safe_version } => put_u64(out, *safe_version),
        Response::Pull {
            has_next,
            next_cursor,
            objects,
            records,
            held,
        } => {
            put_bool(out, *has_next);
            put_u64(out, *next_cursor);
            objects.write(out);
            // An empty records list is written only to lead held commits.
            if !records.is_empty() || !held.is_empty() {
                records.write(out);
            }
            if !held.is_empty() {
                held.write(out);
            }
        }
        Response::PriorityPull { objects, records } => {
            objects.write(out);
            if !records.is_empty() {
                records.write(out);
            }
        }
        Response::MigrationDone
        | Response::CancelMigration
        | Response::TxDecision
        | Response::TxDecisions
        | Response::TakeMigratingTablet
        | Response::CrashServer
        | Response::Leave
        | Response::SuspectServer
        | Response::DropTable
        | Response::SplitTablet
        | Response::ServerListUpdate
        | Response::TakeTabletOwnership
        | Response::DropTabletOwnership
        | Response::BackupWrite
        | Response::BackupFree => {}
        // Handled by `encode_error_response`; an error body never reaches here.
        Response::Error(_) => {
            return Err(WireError::Malformed("an error body under status OK"));
        }
    }
    Ok(())
}

/// An optional last `u64` of a body: absent means 0, and an explicit 0 is
/// refused (`why`), so each value has one encoding.
fn optional_nonzero_u64(r: &mut Reader<'_>, why: &'static str) -> Result<u64, WireError> {
    if r.remaining() == 0 {
        return Ok(0);
    }
    match r.u64()? {
        0 => Err(WireError::Malformed(why)),
        v => Ok(v),
    }
}

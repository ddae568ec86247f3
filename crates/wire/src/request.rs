//! Requests: one variant per opcode, decoded zero-copy from a frame and encoded into
//! one. Byte strings borrow the frame; lists are validated [`List`]s.

use crate::codec::{
    put_failure_domain, put_key, put_replica_bytes, put_rules, put_string, put_u32, put_u64,
    put_u8, put_value, Reader,
};
use crate::error::WireError;
use crate::expiry::{put_optional_time, read_optional_time, ExpireCondition, ExpiryChange};
use crate::fields::{BackupWriteFlags, MigrationMode, NumberKind, Services};
use crate::frame::{atomically, begin_frame, end_frame, split_frame, Header};
use crate::list::{
    List, MultiReadItems, MultiRemoveItems, MultiWriteItems, PartitionTablets, RecoveryItems,
    ServerListEntries,
};
use crate::multi_rpc_ids::{optional_multi_rpc_ids, put_optional_multi_rpc_ids, MultiRpcIds};
use crate::opcode::Opcode;
use crate::rpc_id::{optional_rpc_id, put_optional_rpc_id, RpcId};
use crate::rules::RejectRules;
use crate::status::Status;
use crate::tx::{read_prepare, write_prepare, TxPrepare};
use crate::tx_vote::{
    read_decisions, read_request_vote, write_decisions, write_request_vote, TxDecisions,
    TxRequestVote,
};

/// A request, borrowed from the frame it was decoded from (or from the caller's data
/// when encoding). Multi-op and server lists can only come from a decoded frame; build
/// new ones with the encoders in [`crate::encoder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// Liveness check; the server echoes `nonce`. `caller_id` is the sending
    /// server's id (0: not a server, e.g. the coordinator or a client): a receiver
    /// whose server list shows the caller CRASHED or removed answers SERVER_NOT_UP,
    /// which is how a zombie learns its fate (R§7.11).
    Ping {
        nonce: u64,
        caller_id: u64,
    },
    /// Create a table spread over `server_span` masters (no-op if it exists).
    CreateTable {
        server_span: u32,
        name: &'a str,
    },
    GetTableId {
        name: &'a str,
    },
    DropTable {
        name: &'a str,
    },
    Read {
        table_id: u64,
        rules: RejectRules,
        key: &'a [u8],
    },
    /// `rpc_id`, when present, makes the write exactly-once (RIFL; [`RpcId`]).
    Write {
        table_id: u64,
        rules: RejectRules,
        key: &'a [u8],
        value: &'a [u8],
        rpc_id: Option<RpcId>,
    },
    Remove {
        table_id: u64,
        rules: RejectRules,
        key: &'a [u8],
        rpc_id: Option<RpcId>,
    },
    /// Add `delta` (8 little-endian bytes of `kind`) to the object's number; bytes
    /// rather than `i64`/`f64` so every bit pattern (NaNs included) round-trips.
    Increment {
        table_id: u64,
        rules: RejectRules,
        kind: NumberKind,
        delta: [u8; 8],
        key: &'a [u8],
        rpc_id: Option<RpcId>,
    },
    MultiRead(MultiReadItems<'a>),
    /// The ids, when present, make each item exactly-once (RIFL; one
    /// [`MultiRpcIds`] sequence number per item).
    MultiWrite(MultiWriteItems<'a>, Option<MultiRpcIds<'a>>),
    MultiRemove(MultiRemoveItems<'a>, Option<MultiRpcIds<'a>>),
    /// Objects of `table_id` from key hash `cursor` on, about `max_bytes` of them.
    Enumerate {
        table_id: u64,
        cursor: u64,
        max_bytes: u32,
    },
    /// Make `split_hash` the first key hash of a tablet of table `name`.
    SplitTablet {
        name: &'a str,
        split_hash: u64,
    },
    /// A server joins the cluster; `replaces_server_id` is 0 for none (server ids
    /// start at 1).
    ///
    /// Body: `replaces_server_id u64 | services u32 | memory_bytes u64 |
    /// backup_read_mbps u32 | address | failure_domain` (the strings `u16 len +
    /// UTF-8`, the domain at most [`crate::MAX_FAILURE_DOMAIN_BYTES`]).
    Enlist {
        replaces_server_id: u64,
        services: Services,
        memory_bytes: u64,
        /// The backup's disk read speed measured at start-up, in MB/s (0: the
        /// server runs no backup). Masters weigh backups by it (R§7.1).
        backup_read_mbps: u32,
        address: &'a str,
        /// Servers in one domain share a failure cause (a rack, a power supply);
        /// replica placement never puts two replicas of a segment, nor a replica
        /// and its master, in one domain. Empty: the server is its own domain.
        failure_domain: &'a str,
    },
    /// The coordinator's server list at `list_version`.
    ServerListUpdate {
        list_version: u64,
        servers: ServerListEntries<'a>,
    },
    /// The tablet `[start_hash, end_hash]` of `table_id` is now the receiver's.
    /// `server_id` is the server the coordinator means: a process that is not
    /// that server (e.g. a new one on a dead server's address) refuses.
    TakeTabletOwnership {
        server_id: u64,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    },
    /// The tablet `[start_hash, end_hash]` of `table_id` is no longer the receiver's
    /// (`server_id` as for TakeTabletOwnership).
    DropTabletOwnership {
        server_id: u64,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    },
    GetTabletMap,
    GetServerStats,
    /// Put `bytes` at `offset` of the replica of `segment_id` of `master_id`,
    /// opening it first and/or closing it afterwards as `flags` say. Replicas are
    /// written contiguously: `offset` may not exceed the bytes already held.
    BackupWrite {
        master_id: u64,
        segment_id: u64,
        offset: u32,
        flags: BackupWriteFlags,
        bytes: &'a [u8],
    },
    /// Drop the replica (a no-op if it is not held: frees are retransmitted).
    BackupFree {
        master_id: u64,
        segment_id: u64,
    },
    /// The replicas of `master_id` this backup holds and offers.
    BackupGetReplicas {
        master_id: u64,
    },
    /// The valid bytes of one replica.
    BackupReadReplica {
        master_id: u64,
        segment_id: u64,
    },
    /// Read every replica of crashed master `master_id` this backup offers and put
    /// each entry into the bucket of the partition whose tablet holds it (R§7.5).
    /// Idempotent per `recovery_id`; a new id replaces an older recovery's buckets.
    /// Build with [`crate::BackupStartPartitioningEncoder`].
    BackupStartPartitioning {
        master_id: u64,
        recovery_id: u64,
        tablets: PartitionTablets<'a>,
    },
    /// The entries of partition `partition_id` found in replica `segment_id` of
    /// `master_id` (RETRY until the backup has bucketed that replica).
    BackupGetRecoveryData {
        master_id: u64,
        recovery_id: u64,
        segment_id: u64,
        partition_id: u32,
    },
    /// Recover partition `partition_id` of crashed master `crashed_id`: fetch its
    /// entries from the listed replicas, replay them, make them durable, answer.
    /// Build with [`crate::RecoverPartitionEncoder`].
    RecoverPartition {
        crashed_id: u64,
        recovery_id: u64,
        partition_id: u32,
        items: RecoveryItems<'a>,
    },
    /// Treat server `server_id` as crashed and recover its tablets.
    CrashServer {
        server_id: u64,
    },
    /// Server `caller_id` could not ping server `server_id`: the coordinator
    /// confirms from other paths before declaring it crashed (R§7.2, C§4.1). A
    /// caller the coordinator does not list as UP is answered SERVER_NOT_UP.
    SuspectServer {
        caller_id: u64,
        server_id: u64,
    },
    /// Ping server `server_id` at `address` and say whether it answered as itself.
    PingServer {
        server_id: u64,
        address: &'a str,
    },
    /// Server `caller_id` asks for a membership lease: the time, counted from
    /// when it sent this request, during which the coordinator promises not to
    /// declare it crashed (design notes "Membership leases").
    RenewLease {
        caller_id: u64,
    },
    /// Client → coordinator: open a client lease (`lease_id` 0) or renew lease
    /// `lease_id` (RIFL §4, design notes "Exactly-once RPCs (RIFL)").
    ClientLease {
        lease_id: u64,
    },
    /// Master → coordinator: is client lease `lease_id` still live? (the master
    /// forgets an expired lease's completion records, RIFL §4).
    CheckClientLease {
        lease_id: u64,
    },
    /// Server `server_id` is stopping cleanly: the coordinator marks it crashed
    /// (so its data is recovered at once, R§7) and remembers the stop was clean.
    Leave {
        server_id: u64,
    },
    /// Move the tablet `[start_hash, end_hash]` of table `name` (exactly one
    /// tablet) to master `target_server_id` (K§2.3). Answered once ownership has
    /// moved, with the migration's id.
    MigrateTablet {
        name: &'a str,
        start_hash: u64,
        end_hash: u64,
        target_server_id: u64,
        mode: MigrationMode,
    },
    /// The migrations the coordinator knows of, as `key=value` lines.
    ListMigrations,
    /// The target of migration `migration_id` holds every record of the range;
    /// it pulled `objects` objects of `bytes` bytes.
    MigrationDone {
        migration_id: u64,
        bytes: u64,
        objects: u64,
    },
    /// Stop serving the tablet (clients get UNKNOWN_TABLET) and answer a version
    /// above every version issued so far (`server_id` as for TakeTabletOwnership).
    PrepareMigration {
        server_id: u64,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
        migration_id: u64,
    },
    /// Own the tablet now, serving it while its records are pulled from
    /// `source_server_id` at `source_address`; issue only versions above
    /// `safe_version`.
    TakeMigratingTablet {
        server_id: u64,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
        migration_id: u64,
        source_server_id: u64,
        safe_version: u64,
        source_address: &'a str,
        mode: MigrationMode,
    },
    /// Records of `table_id` with key hash in `[cursor, end_hash]`, whole hash
    /// buckets, about `max_bytes` of them, from a tablet being migrated away.
    Pull {
        table_id: u64,
        cursor: u64,
        end_hash: u64,
        max_bytes: u32,
    },
    /// The records of these keys, from a tablet being migrated away. Build with
    /// [`crate::MultiReadRequestEncoder::priority_pull`].
    PriorityPull(MultiReadItems<'a>),
    /// Phase one of a transaction's commit on one participant (`tx.rs`).
    TxPrepare(TxPrepare<'a>),
    /// Phase two: apply (`commit`) or drop the prepared ops of transaction
    /// (`lease_id`, `tx_seq`).
    TxDecision {
        lease_id: u64,
        tx_seq: u64,
        commit: bool,
    },
    /// Cancel migration `migration_id`: its range goes back to its source.
    CancelMigration {
        migration_id: u64,
    },
    /// A transaction recovery manager asks for this master's vote
    /// (`tx_vote.rs`).
    TxRequestVote(TxRequestVote<'a>),
    /// One decision for many transactions (`tx_vote.rs`).
    TxDecisions(TxDecisions<'a>),
    /// Give an object expiry time `expires_at` (`None`: never expires) if
    /// `condition` admits it (`expiry.rs`).
    SetExpiry {
        table_id: u64,
        condition: ExpireCondition,
        expires_at: Option<u64>,
        key: &'a [u8],
    },
    /// An object's expiry time.
    GetExpiry {
        table_id: u64,
        key: &'a [u8],
    },
    /// A write that also changes the object's expiry time as `expiry` says.
    WriteExpiring {
        table_id: u64,
        rules: RejectRules,
        expiry: ExpiryChange,
        key: &'a [u8],
        value: &'a [u8],
    },
}

impl Request<'_> {
    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Ping { .. } => Opcode::Ping,
            Request::CreateTable { .. } => Opcode::CreateTable,
            Request::GetTableId { .. } => Opcode::GetTableId,
            Request::DropTable { .. } => Opcode::DropTable,
            Request::Read { .. } => Opcode::Read,
            Request::Write { .. } => Opcode::Write,
            Request::Remove { .. } => Opcode::Remove,
            Request::Increment { .. } => Opcode::Increment,
            Request::MultiRead(_) => Opcode::MultiRead,
            Request::MultiWrite(..) => Opcode::MultiWrite,
            Request::MultiRemove(..) => Opcode::MultiRemove,
            Request::Enumerate { .. } => Opcode::Enumerate,
            Request::SplitTablet { .. } => Opcode::SplitTablet,
            Request::Enlist { .. } => Opcode::Enlist,
            Request::ServerListUpdate { .. } => Opcode::ServerListUpdate,
            Request::TakeTabletOwnership { .. } => Opcode::TakeTabletOwnership,
            Request::DropTabletOwnership { .. } => Opcode::DropTabletOwnership,
            Request::GetTabletMap => Opcode::GetTabletMap,
            Request::GetServerStats => Opcode::GetServerStats,
            Request::BackupWrite { .. } => Opcode::BackupWrite,
            Request::BackupFree { .. } => Opcode::BackupFree,
            Request::BackupGetReplicas { .. } => Opcode::BackupGetReplicas,
            Request::BackupReadReplica { .. } => Opcode::BackupReadReplica,
            Request::BackupStartPartitioning { .. } => Opcode::BackupStartPartitioning,
            Request::BackupGetRecoveryData { .. } => Opcode::BackupGetRecoveryData,
            Request::RecoverPartition { .. } => Opcode::RecoverPartition,
            Request::CrashServer { .. } => Opcode::CrashServer,
            Request::SuspectServer { .. } => Opcode::SuspectServer,
            Request::PingServer { .. } => Opcode::PingServer,
            Request::RenewLease { .. } => Opcode::RenewLease,
            Request::ClientLease { .. } => Opcode::ClientLease,
            Request::CheckClientLease { .. } => Opcode::CheckClientLease,
            Request::TxPrepare(_) => Opcode::TxPrepare,
            Request::TxDecision { .. } => Opcode::TxDecision,
            Request::Leave { .. } => Opcode::Leave,
            Request::MigrateTablet { .. } => Opcode::MigrateTablet,
            Request::ListMigrations => Opcode::ListMigrations,
            Request::MigrationDone { .. } => Opcode::MigrationDone,
            Request::PrepareMigration { .. } => Opcode::PrepareMigration,
            Request::TakeMigratingTablet { .. } => Opcode::TakeMigratingTablet,
            Request::Pull { .. } => Opcode::Pull,
            Request::PriorityPull(_) => Opcode::PriorityPull,
            Request::CancelMigration { .. } => Opcode::CancelMigration,
            Request::TxRequestVote(_) => Opcode::TxRequestVote,
            Request::TxDecisions(_) => Opcode::TxDecisions,
            Request::SetExpiry { .. } => Opcode::SetExpiry,
            Request::GetExpiry { .. } => Opcode::GetExpiry,
            Request::WriteExpiring { .. } => Opcode::WriteExpiring,
        }
    }
}

/// Decodes one whole request frame (length prefix included, nothing after it).
///
/// Checks every length against the bytes present and the limits, every enumeration
/// and flag bit, UTF-8 of every string, and that no byte is left over. On error, a
/// server answers with [`WireError::status`], taking the request id from
/// [`crate::decode_raw_header`].
pub fn decode_request(frame: &[u8]) -> Result<(Header, Request<'_>), WireError> {
    let (header, body) = split_frame(frame)?;
    if header.is_response() {
        return Err(WireError::BadFlags(header.flags));
    }
    if header.status != Status::Ok {
        return Err(WireError::Malformed("a request's status must be OK"));
    }
    let mut r = Reader::new(body);
    let request = decode_body(header.opcode, &mut r)?;
    r.finish()?;
    Ok((header, request))
}

fn decode_body<'a>(opcode: Opcode, r: &mut Reader<'a>) -> Result<Request<'a>, WireError> {
    Ok(match opcode {
        Opcode::Ping => Request::Ping {
            nonce: r.u64()?,
            caller_id: r.u64()?,
        },
        Opcode::CreateTable => Request::CreateTable {
            server_span: r.u32()?,
            name: r.string()?,
        },
        Opcode::GetTableId => Request::GetTableId { name: r.string()? },
        Opcode::DropTable => Request::DropTable { name: r.string()? },
        Opcode::Read => Request::Read {
            table_id: r.u64()?,
            rules: r.rules()?,
            key: r.key()?,
        },
        Opcode::Write => Request::Write {
            table_id: r.u64()?,
            rules: r.rules()?,
            key: r.key()?,
            value: r.value()?,
            rpc_id: optional_rpc_id(r)?,
        },
        Opcode::Remove => Request::Remove {
            table_id: r.u64()?,
            rules: r.rules()?,
            key: r.key()?,
            rpc_id: optional_rpc_id(r)?,
        },
        Opcode::Increment => Request::Increment {
            table_id: r.u64()?,
            rules: r.rules()?,
            kind: NumberKind::try_from(r.u8()?)?,
            delta: r.array()?,
            key: r.key()?,
            rpc_id: optional_rpc_id(r)?,
        },
        Opcode::MultiRead => Request::MultiRead(List::read(r)?),
        Opcode::MultiWrite => {
            let items: MultiWriteItems<'_> = List::read(r)?;
            Request::MultiWrite(items, optional_multi_rpc_ids(r, items.len())?)
        }
        Opcode::MultiRemove => {
            let items: MultiRemoveItems<'_> = List::read(r)?;
            Request::MultiRemove(items, optional_multi_rpc_ids(r, items.len())?)
        }
        Opcode::Enumerate => Request::Enumerate {
            table_id: r.u64()?,
            cursor: r.u64()?,
            max_bytes: r.u32()?,
        },
        Opcode::SplitTablet => Request::SplitTablet {
            name: r.string()?,
            split_hash: r.u64()?,
        },
        Opcode::Enlist => Request::Enlist {
            replaces_server_id: r.u64()?,
            services: Services::from_bits(r.u32()?)?,
            memory_bytes: r.u64()?,
            backup_read_mbps: r.u32()?,
            address: r.string()?,
            failure_domain: r.failure_domain()?,
        },
        Opcode::ServerListUpdate => Request::ServerListUpdate {
            list_version: r.u64()?,
            servers: List::read(r)?,
        },
        Opcode::TakeTabletOwnership => Request::TakeTabletOwnership {
            server_id: r.u64()?,
            table_id: r.u64()?,
            start_hash: r.u64()?,
            end_hash: r.u64()?,
        },
        Opcode::DropTabletOwnership => Request::DropTabletOwnership {
            server_id: r.u64()?,
            table_id: r.u64()?,
            start_hash: r.u64()?,
            end_hash: r.u64()?,
        },
        Opcode::GetTabletMap => Request::GetTabletMap,
        Opcode::GetServerStats => Request::GetServerStats,
        Opcode::BackupWrite => Request::BackupWrite {
            master_id: r.u64()?,
            segment_id: r.u64()?,
            offset: r.u32()?,
            flags: BackupWriteFlags::from_bits(r.u8()?)?,
            bytes: r.replica_bytes()?,
        },
        Opcode::BackupFree => Request::BackupFree {
            master_id: r.u64()?,
            segment_id: r.u64()?,
        },
        Opcode::BackupGetReplicas => Request::BackupGetReplicas {
            master_id: r.u64()?,
        },
        Opcode::BackupReadReplica => Request::BackupReadReplica {
            master_id: r.u64()?,
            segment_id: r.u64()?,
        },
        Opcode::BackupStartPartitioning => Request::BackupStartPartitioning {
            master_id: r.u64()?,
            recovery_id: r.u64()?,
            tablets: List::read(r)?,
        },
        Opcode::BackupGetRecoveryData => Request::BackupGetRecoveryData {
            master_id: r.u64()?,
            recovery_id: r.u64()?,
            segment_id: r.u64()?,
            partition_id: r.u32()?,
        },
        Opcode::RecoverPartition => Request::RecoverPartition {
            crashed_id: r.u64()?,
            recovery_id: r.u64()?,
            partition_id: r.u32()?,
            items: List::read(r)?,
        },
        Opcode::CrashServer => Request::CrashServer {
            server_id: r.u64()?,
        },
        Opcode::SuspectServer => Request::SuspectServer {
            caller_id: r.u64()?,
            server_id: r.u64()?,
        },
        Opcode::PingServer => Request::PingServer {
            server_id: r.u64()?,
            address: r.string()?,
        },
        Opcode::RenewLease => Request::RenewLease {
            caller_id: r.u64()?,
        },
        Opcode::ClientLease => Request::ClientLease { lease_id: r.u64()? },
        Opcode::CheckClientLease => Request::CheckClientLease { lease_id: r.u64()? },
        Opcode::TxPrepare => Request::TxPrepare(read_prepare(r)?),
        Opcode::TxRequestVote => Request::TxRequestVote(read_request_vote(r)?),
        Opcode::TxDecisions => Request::TxDecisions(read_decisions(r)?),
        Opcode::SetExpiry => Request::SetExpiry {
            table_id: r.u64()?,
            condition: ExpireCondition::try_from(r.u8()?)?,
            expires_at: read_optional_time(r)?,
            key: r.key()?,
        },
        Opcode::GetExpiry => Request::GetExpiry {
            table_id: r.u64()?,
            key: r.key()?,
        },
        Opcode::WriteExpiring => Request::WriteExpiring {
            table_id: r.u64()?,
            rules: r.rules()?,
            expiry: ExpiryChange::read(r)?,
            key: r.key()?,
            value: r.value()?,
        },
        Opcode::TxDecision => Request::TxDecision {
            lease_id: r.u64()?,
            tx_seq: r.u64()?,
            commit: r.bool("commit")?,
        },
        Opcode::Leave => Request::Leave {
            server_id: r.u64()?,
        },
        Opcode::MigrateTablet => Request::MigrateTablet {
            name: r.string()?,
            start_hash: r.u64()?,
            end_hash: r.u64()?,
            target_server_id: r.u64()?,
            mode: optional_mode(r)?,
        },
        Opcode::ListMigrations => Request::ListMigrations,
        Opcode::MigrationDone => Request::MigrationDone {
            migration_id: r.u64()?,
            bytes: r.u64()?,
            objects: r.u64()?,
        },
        Opcode::PrepareMigration => Request::PrepareMigration {
            server_id: r.u64()?,
            table_id: r.u64()?,
            start_hash: r.u64()?,
            end_hash: r.u64()?,
            migration_id: r.u64()?,
        },
        Opcode::TakeMigratingTablet => Request::TakeMigratingTablet {
            server_id: r.u64()?,
            table_id: r.u64()?,
            start_hash: r.u64()?,
            end_hash: r.u64()?,
            migration_id: r.u64()?,
            source_server_id: r.u64()?,
            safe_version: r.u64()?,
            source_address: r.string()?,
            mode: optional_mode(r)?,
        },
        Opcode::Pull => Request::Pull {
            table_id: r.u64()?,
            cursor: r.u64()?,
            end_hash: r.u64()?,
            max_bytes: r.u32()?,
        },
        Opcode::PriorityPull => Request::PriorityPull(List::read(r)?),
        Opcode::CancelMigration => Request::CancelMigration {
            migration_id: r.u64()?,
        },
    })
}

/// Appends one whole request frame (length prefix included) to `out`.
///
/// Fails, appending nothing, if a key, value or string exceeds its limit or the
/// frame exceeds [`crate::MAX_FRAME_BYTES`].
pub fn encode_request(
    request_id: u64,
    req: &Request<'_>,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    atomically(out, |out| {
        let start = begin_frame(out, req.opcode().code(), Status::Ok, 0, request_id);
        encode_body(req, out)?;
        end_frame(out, start, 0)
    })
}

fn encode_body(req: &Request<'_>, out: &mut Vec<u8>) -> Result<(), WireError> {
    match req {
        Request::Ping { nonce, caller_id } => {
            put_u64(out, *nonce);
            put_u64(out, *caller_id);
        }
        Request::CreateTable { server_span, name } => {
            put_u32(out, *server_span);
            put_string(out, name)?;
        }
        Request::GetTableId { name } | Request::DropTable { name } => put_string(out, name)?,
        Request::Read {
            table_id,
            rules,
            key,
        } => {
            put_u64(out, *table_id);
            put_rules(out, rules);
            put_key(out, key)?;
        }
        Request::Remove {
            table_id,
            rules,
            key,
            rpc_id,
        } => {
            put_u64(out, *table_id);
            put_rules(out, rules);
            put_key(out, key)?;
            put_optional_rpc_id(out, rpc_id)?;
        }
        Request::Write {
            table_id,
            rules,
            key,
            value,
            rpc_id,
        } => {
            put_u64(out, *table_id);
            put_rules(out, rules);
            put_key(out, key)?;
            put_value(out, value)?;
            put_optional_rpc_id(out, rpc_id)?;
        }
        Request::Increment {
            table_id,
            rules,
            kind,
            delta,
            key,
            rpc_id,
        } => {
            put_u64(out, *table_id);
            put_rules(out, rules);
            put_u8(out, *kind as u8);
            out.extend_from_slice(delta);
            put_key(out, key)?;
            put_optional_rpc_id(out, rpc_id)?;
        }
        Request::MultiRead(items) => items.write(out),
        Request::MultiWrite(items, ids) => {
            items.write(out);
            put_optional_multi_rpc_ids(out, ids);
        }
        Request::MultiRemove(items, ids) => {
            items.write(out);
            put_optional_multi_rpc_ids(out, ids);
        }
        Request::Enumerate {
            table_id,
            cursor,
            max_bytes,
        } => {
            put_u64(out, *table_id);
            put_u64(out, *cursor);
            put_u32(out, *max_bytes);
        }
        Request::SplitTablet { name, split_hash } => {
            put_string(out, name)?;
            put_u64(out, *split_hash);
        }
        Request::Enlist {
            replaces_server_id,
            services,
            memory_bytes,
            backup_read_mbps,
            address,
            failure_domain,
        } => {
            put_u64(out, *replaces_server_id);
            put_u32(out, services.bits());
            put_u64(out, *memory_bytes);
            put_u32(out, *backup_read_mbps);
            put_string(out, address)?;
            put_failure_domain(out, failure_domain)?;
        }
        Request::ServerListUpdate {
            list_version,
            servers,
        } => {
            put_u64(out, *list_version);
            servers.write(out);
        }
        Request::TakeTabletOwnership {
            server_id,
            table_id,
            start_hash,
            end_hash,
        }
        | Request::DropTabletOwnership {
            server_id,
            table_id,
            start_hash,
            end_hash,
        } => {
            put_u64(out, *server_id);
            put_u64(out, *table_id);
            put_u64(out, *start_hash);
            put_u64(out, *end_hash);
        }
        Request::GetTabletMap | Request::GetServerStats => {}
        Request::BackupWrite {
            master_id,
            segment_id,
            offset,
            flags,
            bytes,
        } => {
            put_u64(out, *master_id);
            put_u64(out, *segment_id);
            put_u32(out, *offset);
            put_u8(out, flags.bits()?);
            put_replica_bytes(out, bytes)?;
        }
        Request::BackupFree {
            master_id,
            segment_id,
        }
        | Request::BackupReadReplica {
            master_id,
            segment_id,
        } => {
            put_u64(out, *master_id);
            put_u64(out, *segment_id);
        }
        Request::BackupGetReplicas { master_id } => put_u64(out, *master_id),
        Request::BackupStartPartitioning {
            master_id,
            recovery_id,
            tablets,
        } => {
            put_u64(out, *master_id);
            put_u64(out, *recovery_id);
            tablets.write(out);
        }
        Request::BackupGetRecoveryData {
            master_id,
            recovery_id,
            segment_id,
            partition_id,
        } => {
            put_u64(out, *master_id);
            put_u64(out, *recovery_id);
            put_u64(out, *segment_id);
            put_u32(out, *partition_id);
        }
        Request::RecoverPartition {
            crashed_id,
            recovery_id,
            partition_id,
            items,
        } => {
            put_u64(out, *crashed_id);
            put_u64(out, *recovery_id);
            put_u32(out, *partition_id);
            items.write(out);
        }
        Request::CrashServer { server_id } | Request::Leave { server_id } => {
            put_u64(out, *server_id)
        }
        Request::SuspectServer {
            caller_id,
            server_id,
        } => {
            put_u64(out, *caller_id);
            put_u64(out, *server_id);
        }
        Request::PingServer { server_id, address } => {
            put_u64(out, *server_id);
            put_string(out, address)?;
        }
        Request::RenewLease { caller_id } => put_u64(out, *caller_id),
        Request::ClientLease { lease_id } | Request::CheckClientLease { lease_id } => {
            put_u64(out, *lease_id)
        }
        Request::TxPrepare(p) => write_prepare(p, out),
        Request::TxRequestVote(v) => write_request_vote(v, out),
        Request::TxDecisions(d) => write_decisions(d, out),
        Request::SetExpiry {
            table_id,
            condition,
            expires_at,
            key,
        } => {
            put_u64(out, *table_id);
            put_u8(out, *condition as u8);
            put_optional_time(out, *expires_at);
            put_key(out, key)?;
        }
        Request::GetExpiry { table_id, key } => {
            put_u64(out, *table_id);
            put_key(out, key)?;
        }
        Request::WriteExpiring {
            table_id,
            rules,
            expiry,
            key,
            value,
        } => {
            put_u64(out, *table_id);
            put_rules(out, rules);
            expiry.write(out);
            put_key(out, key)?;
            put_value(out, value)?;
        }
        Request::TxDecision {
            lease_id,
            tx_seq,
            commit,
        } => {
            put_u64(out, *lease_id);
            put_u64(out, *tx_seq);
            put_u8(out, u8::from(*commit));
        }
        Request::MigrateTablet {
            name,
            start_hash,
            end_hash,
            target_server_id,
            mode,
        } => {
            put_string(out, name)?;
            put_u64(out, *start_hash);
            put_u64(out, *end_hash);
            put_u64(out, *target_server_id);
            put_optional_mode(out, *mode);
        }
        Request::ListMigrations => {}
        Request::MigrationDone {
            migration_id,
            bytes,
            objects,
        } => {
            put_u64(out, *migration_id);
            put_u64(out, *bytes);
            put_u64(out, *objects);
        }
        Request::PrepareMigration {
            server_id,
            table_id,
            start_hash,
            end_hash,
            migration_id,
        } => {
            put_u64(out, *server_id);
            put_u64(out, *table_id);
            put_u64(out, *start_hash);
            put_u64(out, *end_hash);
            put_u64(out, *migration_id);
        }
        Request::TakeMigratingTablet {
            server_id,
            table_id,
            start_hash,
            end_hash,
            migration_id,
            source_server_id,
            safe_version,
            source_address,
            mode,
        } => {
            put_u64(out, *server_id);
            put_u64(out, *table_id);
            put_u64(out, *start_hash);
            put_u64(out, *end_hash);
            put_u64(out, *migration_id);
            put_u64(out, *source_server_id);
            put_u64(out, *safe_version);
            put_string(out, source_address)?;
            put_optional_mode(out, *mode);
        }
        Request::Pull {
            table_id,
            cursor,
            end_hash,
            max_bytes,
        } => {
            put_u64(out, *table_id);
            put_u64(out, *cursor);
            put_u64(out, *end_hash);
            put_u32(out, *max_bytes);
        }
        Request::PriorityPull(items) => items.write(out),
        Request::CancelMigration { migration_id } => put_u64(out, *migration_id),
    }
    Ok(())
}

/// A migration mode as the optional last byte of a body ([`MigrationMode`]):
/// absent is Rocksteady, an explicit Rocksteady is refused (one encoding).
fn optional_mode(r: &mut Reader<'_>) -> Result<MigrationMode, WireError> {
    if r.remaining() == 0 {
        return Ok(MigrationMode::Rocksteady);
    }
    match MigrationMode::try_from(r.u8()?)? {
        MigrationMode::Rocksteady => Err(WireError::Malformed(
            "a Rocksteady migration mode is sent as no byte",
        )),
        mode => Ok(mode),
    }
}

/// Appends `mode` as [`optional_mode`] reads it.
fn put_optional_mode(out: &mut Vec<u8>, mode: MigrationMode) {
    if mode != MigrationMode::Rocksteady {
        put_u8(out, mode as u8);
    }
}

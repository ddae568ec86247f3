//! Fixed sample messages shared by the golden-vector and round-trip tests: at least
//! one request per opcode, one OK response per opcode, and error responses of each
//! body layout. Values are distinct and multi-byte, so byte order shows in the hex.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use ramstore_wire::*;

/// The request id of every sample: its bytes on the wire read 01 02 … 08.
pub const ID: u64 = 0x0807_0605_0403_0201;

pub const TABLE: u64 = 42;

pub fn rules_cas(version: u64) -> RejectRules {
    RejectRules {
        given_version: version,
        doesnt_exist: true,
        version_ne_given: true,
        ..Default::default()
    }
}

pub fn request_frame(req: &Request<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(ID, req, &mut out).expect("sample request encodes");
    out
}

pub fn response_frame(opcode: Opcode, resp: &Response<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_response(ID, opcode, resp, &mut out).expect("sample response encodes");
    out
}

/// Requests that are plain values (no lists), by golden-file name.
pub fn simple_requests() -> Vec<(&'static str, Request<'static>)> {
    vec![
        (
            "ping_request",
            Request::Ping {
                nonce: 0x1122_3344_5566_7788,
                caller_id: 5,
            },
        ),
        (
            "create_table_request",
            Request::CreateTable {
                server_span: 3,
                name: "users",
            },
        ),
        (
            "get_table_id_request",
            Request::GetTableId { name: "users" },
        ),
        ("drop_table_request", Request::DropTable { name: "users" }),
        (
            "read_request",
            Request::Read {
                table_id: TABLE,
                rules: RejectRules::default(),
                key: b"k1",
            },
        ),
        (
            "write_request",
            Request::Write {
                table_id: TABLE,
                rules: rules_cas(5),
                key: b"k1",
                value: b"hello",
                rpc_id: None,
            },
        ),
        (
            "remove_request",
            Request::Remove {
                table_id: TABLE,
                rules: RejectRules {
                    doesnt_exist: true,
                    ..Default::default()
                },
                key: b"k1",
                rpc_id: None,
            },
        ),
        (
            "write_exactly_once_request",
            Request::Write {
                table_id: TABLE,
                rules: RejectRules::default(),
                key: b"k1",
                value: b"hello",
                rpc_id: Some(RpcId {
                    lease_id: 7,
                    seq: 12,
                    first_incomplete: 10,
                }),
            },
        ),
        (
            "set_expiry_request",
            Request::SetExpiry {
                table_id: TABLE,
                condition: ExpireCondition::Gt,
                expires_at: Some(0x0000_018c_1234_5678),
                key: b"k1",
            },
        ),
        (
            "persist_request",
            Request::SetExpiry {
                table_id: TABLE,
                condition: ExpireCondition::Xx,
                expires_at: None,
                key: b"k1",
            },
        ),
        (
            "get_expiry_request",
            Request::GetExpiry {
                table_id: TABLE,
                key: b"k1",
            },
        ),
        (
            "write_expiring_request",
            Request::WriteExpiring {
                table_id: TABLE,
                rules: rules_cas(5),
                expiry: ExpiryChange::At(0x0000_018c_1234_5678),
                key: b"k1",
                value: b"hello",
            },
        ),
        (
            "write_keep_ttl_request",
            Request::WriteExpiring {
                table_id: TABLE,
                rules: RejectRules::default(),
                expiry: ExpiryChange::Keep,
                key: b"k1",
                value: b"hello",
            },
        ),
        (
            "remove_exactly_once_request",
            Request::Remove {
                table_id: TABLE,
                rules: RejectRules::default(),
                key: b"k1",
                rpc_id: Some(RpcId {
                    lease_id: 7,
                    seq: 13,
                    first_incomplete: 13,
                }),
            },
        ),
        (
            "increment_exactly_once_request",
            Request::Increment {
                table_id: TABLE,
                rules: RejectRules::default(),
                kind: NumberKind::I64,
                delta: 1i64.to_le_bytes(),
                key: b"ctr",
                rpc_id: Some(RpcId {
                    lease_id: 7,
                    seq: 14,
                    first_incomplete: 13,
                }),
            },
        ),
        (
            "increment_request",
            Request::Increment {
                table_id: TABLE,
                rules: RejectRules::default(),
                kind: NumberKind::I64,
                delta: 5i64.to_le_bytes(),
                key: b"ctr",
                rpc_id: None,
            },
        ),
        (
            "increment_f64_request",
            Request::Increment {
                table_id: TABLE,
                rules: RejectRules::default(),
                kind: NumberKind::F64,
                delta: 1.5f64.to_le_bytes(),
                key: b"ctr",
                rpc_id: None,
            },
        ),
        (
            "enumerate_request",
            Request::Enumerate {
                table_id: TABLE,
                cursor: 0x8000_0000_0000_0000,
                max_bytes: 65536,
            },
        ),
        (
            "split_tablet_request",
            Request::SplitTablet {
                name: "users",
                split_hash: 0x4000_0000_0000_0000,
            },
        ),
        (
            "enlist_request",
            Request::Enlist {
                replaces_server_id: 0,
                services: Services::BOTH,
                memory_bytes: 1 << 30,
                backup_read_mbps: 0x0102_0304,
                address: "10.0.0.1:7000",
                failure_domain: "rack-7",
            },
        ),
        (
            "take_tablet_ownership_request",
            Request::TakeTabletOwnership {
                server_id: 3,
                table_id: TABLE,
                start_hash: 0,
                end_hash: 0x7fff_ffff_ffff_ffff,
            },
        ),
        (
            "drop_tablet_ownership_request",
            Request::DropTabletOwnership {
                server_id: 4,
                table_id: TABLE,
                start_hash: 0x8000_0000_0000_0000,
                end_hash: u64::MAX,
            },
        ),
        ("get_tablet_map_request", Request::GetTabletMap),
        ("get_server_stats_request", Request::GetServerStats),
        (
            "backup_write_request",
            Request::BackupWrite {
                master_id: MASTER,
                segment_id: SEGMENT,
                offset: 0x100,
                flags: BackupWriteFlags::OPEN,
                bytes: REPLICA_BYTES,
            },
        ),
        (
            "backup_write_atomic_close_request",
            Request::BackupWrite {
                master_id: MASTER,
                segment_id: SEGMENT,
                offset: 0,
                flags: BackupWriteFlags {
                    open: true,
                    close: true,
                    atomic: true,
                    reserve: false,
                },
                bytes: REPLICA_BYTES,
            },
        ),
        (
            "backup_free_request",
            Request::BackupFree {
                master_id: MASTER,
                segment_id: SEGMENT,
            },
        ),
        (
            "backup_get_replicas_request",
            Request::BackupGetReplicas { master_id: MASTER },
        ),
        (
            "backup_read_replica_request",
            Request::BackupReadReplica {
                master_id: MASTER,
                segment_id: SEGMENT,
            },
        ),
        (
            "backup_get_recovery_data_request",
            Request::BackupGetRecoveryData {
                master_id: MASTER,
                recovery_id: RECOVERY,
                segment_id: SEGMENT,
                partition_id: 2,
            },
        ),
        (
            "crash_server_request",
            Request::CrashServer { server_id: 3 },
        ),
        (
            "suspect_server_request",
            Request::SuspectServer {
                caller_id: 5,
                server_id: 3,
            },
        ),
        (
            "ping_server_request",
            Request::PingServer {
                server_id: 3,
                address: "10.0.0.3:7001",
            },
        ),
        ("renew_lease_request", Request::RenewLease { caller_id: 5 }),
        (
            "client_lease_open_request",
            Request::ClientLease { lease_id: 0 },
        ),
        (
            "client_lease_renew_request",
            Request::ClientLease { lease_id: 7 },
        ),
        (
            "check_client_lease_request",
            Request::CheckClientLease { lease_id: 7 },
        ),
        (
            "tx_decision_request",
            Request::TxDecision {
                lease_id: 3,
                tx_seq: 9,
                commit: true,
            },
        ),
        ("leave_request", Request::Leave { server_id: 3 }),
        (
            "migrate_tablet_request",
            Request::MigrateTablet {
                name: "users",
                start_hash: 0x10,
                end_hash: u64::MAX,
                target_server_id: 4,
                mode: MigrationMode::Rocksteady,
            },
        ),
        (
            "migrate_tablet_stop_and_copy_request",
            Request::MigrateTablet {
                name: "users",
                start_hash: 0x10,
                end_hash: u64::MAX,
                target_server_id: 4,
                mode: MigrationMode::StopAndCopy,
            },
        ),
        ("list_migrations_request", Request::ListMigrations),
        (
            "cancel_migration_request",
            Request::CancelMigration { migration_id: 9 },
        ),
        (
            "migration_done_request",
            Request::MigrationDone {
                migration_id: 9,
                bytes: 1 << 20,
                objects: 1000,
            },
        ),
        (
            "prepare_migration_request",
            Request::PrepareMigration {
                server_id: 3,
                table_id: 7,
                start_hash: 0,
                end_hash: 0xff,
                migration_id: 9,
            },
        ),
        (
            "take_migrating_tablet_request",
            Request::TakeMigratingTablet {
                server_id: 4,
                table_id: 7,
                start_hash: 0,
                end_hash: 0xff,
                migration_id: 9,
                source_server_id: 3,
                safe_version: 1234,
                source_address: "10.0.0.3:11100",
                mode: MigrationMode::Rocksteady,
            },
        ),
        (
            "take_migrating_tablet_no_priority_pulls_request",
            Request::TakeMigratingTablet {
                server_id: 4,
                table_id: 7,
                start_hash: 0,
                end_hash: 0xff,
                migration_id: 9,
                source_server_id: 3,
                safe_version: 1234,
                source_address: "10.0.0.3:11100",
                mode: MigrationMode::NoPriorityPulls,
            },
        ),
        (
            "pull_request",
            Request::Pull {
                table_id: 7,
                cursor: 0x40,
                end_hash: 0x7f,
                max_bytes: 1 << 20,
            },
        ),
    ]
}

/// Recovery id of the recovery samples.
pub const RECOVERY: u64 = 0x2122_2324_2526_2728;

/// Master and segment ids of the backup samples.
pub const MASTER: u64 = 0x0102_0304_0506_0708;
pub const SEGMENT: u64 = 0x1112_1314_1516_1718;
/// Replica bytes of the backup samples.
pub const REPLICA_BYTES: &[u8] = b"segment";

/// Tablets of the BackupStartPartitioning sample: two partitions.
pub fn partition_tablets() -> Vec<PartitionTablet> {
    vec![
        PartitionTablet {
            partition_id: 0,
            table_id: TABLE,
            start_hash: 0,
            end_hash: 0x7fff_ffff_ffff_ffff,
        },
        PartitionTablet {
            partition_id: 1,
            table_id: TABLE,
            start_hash: 0x8000_0000_0000_0000,
            end_hash: u64::MAX,
        },
    ]
}

/// Items of the RecoverPartition sample: a tablet without and one with a ctime, and
/// two replica sources.
pub fn recovery_items() -> Vec<RecoveryItem<'static>> {
    vec![
        RecoveryItem::Tablet {
            table_id: TABLE,
            start_hash: 0x8000_0000_0000_0000,
            end_hash: u64::MAX,
            ctime: 0,
        },
        RecoveryItem::Tablet {
            table_id: TABLE + 1,
            start_hash: 0,
            end_hash: 0x7fff_ffff_ffff_ffff,
            ctime: SEGMENT - 1,
        },
        RecoveryItem::Replica {
            segment_id: SEGMENT,
            address: "10.0.0.3:7000",
        },
        RecoveryItem::Replica {
            segment_id: SEGMENT + 1,
            address: "10.0.0.4:7000",
        },
    ]
}

/// (segment id, length, closed) of the BackupGetReplicas sample.
pub fn replicas() -> Vec<(u64, u32, bool)> {
    vec![(SEGMENT, 0x0080_0000, true), (SEGMENT + 1, 0x1234, false)]
}

/// The items of the multi-op and list samples, as owned data to compare against.
pub const MULTI_READ: [(u64, &[u8]); 2] = [(TABLE, b"a"), (TABLE + 1, b"bc")];

pub fn multi_write() -> Vec<(u64, RejectRules, &'static [u8], &'static [u8])> {
    vec![
        (TABLE, RejectRules::default(), b"a", b"x"),
        (
            TABLE + 1,
            RejectRules {
                exists: true,
                ..Default::default()
            },
            b"b",
            b"",
        ),
    ]
}

pub fn multi_remove() -> Vec<(u64, RejectRules, &'static [u8])> {
    vec![
        (TABLE, RejectRules::default(), b"a"),
        (
            TABLE + 1,
            RejectRules {
                given_version: 7,
                version_le_given: true,
                ..Default::default()
            },
            b"b",
        ),
    ]
}

pub const SERVER_LIST_VERSION: u64 = 9;

pub fn server_list() -> Vec<ServerListEntry<'static>> {
    vec![
        ServerListEntry {
            server_id: 1,
            status: ServerStatus::Up,
            services: Services::BOTH,
            backup_read_mbps: 0x0102_0304,
            address: "10.0.0.1:7000",
            failure_domain: "rack-7",
        },
        ServerListEntry {
            server_id: 2,
            status: ServerStatus::Crashed,
            services: Services {
                master: true,
                backup: false,
                replicated_log: false,
            },
            backup_read_mbps: 0,
            address: "10.0.0.2:7000",
            // Its own failure domain.
            failure_domain: "",
        },
    ]
}

/// Requests carrying lists, built with the encoders, by golden-file name.
pub fn list_request_frames() -> Vec<(&'static str, Vec<u8>)> {
    let mut frames = Vec::new();

    let mut out = Vec::new();
    let mut e = MultiReadRequestEncoder::new(ID, &mut out);
    for (t, k) in MULTI_READ {
        e.push(t, k).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("multi_read_request", out));

    let mut out = Vec::new();
    let mut e = MultiWriteRequestEncoder::new(ID, &mut out);
    for (t, r, k, v) in multi_write() {
        e.push(t, r, k, v).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("multi_write_request", out));

    let mut out = Vec::new();
    let mut e = MultiRemoveRequestEncoder::new(ID, &mut out);
    for (t, r, k) in multi_remove() {
        e.push(t, r, k).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("multi_remove_request", out));

    // The same multi-ops with one exactly-once rpc id per item (RIFL; issue 21).
    let mut out = Vec::new();
    let mut e = MultiWriteRequestEncoder::new(ID, &mut out);
    let mut seqs = Vec::new();
    for (i, (t, r, k, v)) in multi_write().into_iter().enumerate() {
        e.push(t, r, k, v).expect("push");
        seqs.push(40 + 2 * i as u64);
    }
    e.finish_with_rpc_ids(7, 40, &seqs).expect("finish");
    frames.push(("multi_write_exactly_once_request", out));

    let mut out = Vec::new();
    let mut e = MultiRemoveRequestEncoder::new(ID, &mut out);
    let mut seqs = Vec::new();
    for (i, (t, r, k)) in multi_remove().into_iter().enumerate() {
        e.push(t, r, k).expect("push");
        seqs.push(50 + i as u64);
    }
    e.finish_with_rpc_ids(7, 41, &seqs).expect("finish");
    frames.push(("multi_remove_exactly_once_request", out));

    let mut out = Vec::new();
    let mut e = ServerListUpdateEncoder::new(ID, SERVER_LIST_VERSION, &mut out);
    for server in server_list() {
        e.push(&server).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("server_list_update_request", out));

    let mut out = Vec::new();
    MultiReadRequestEncoder::new(ID, &mut out)
        .finish()
        .expect("finish");
    frames.push(("multi_read_empty_request", out));

    let mut out = Vec::new();
    let mut e = BackupStartPartitioningEncoder::new(ID, MASTER, RECOVERY, &mut out);
    for tablet in partition_tablets() {
        e.push(&tablet).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("backup_start_partitioning_request", out));

    let mut out = Vec::new();
    let mut e = RecoverPartitionEncoder::new(ID, MASTER, RECOVERY, 1, &mut out);
    for item in recovery_items() {
        e.push(&item).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("recover_partition_request", out));

    let mut out = Vec::new();
    let mut e = MultiReadRequestEncoder::priority_pull(ID, &mut out);
    e.push(7, b"alice").expect("push");
    e.push(7, b"bob").expect("push");
    e.finish().expect("finish");
    frames.push(("priority_pull_request", out));

    let mut out = Vec::new();
    let ops = [
        TxOp {
            kind: TxOpKind::Read,
            expected_version: Some(4),
            table_id: 7,
            key: b"alice",
            value: b"",
        },
        TxOp {
            kind: TxOpKind::Write,
            expected_version: Some(4),
            table_id: 7,
            key: b"bob",
            value: b"100",
        },
        TxOp {
            kind: TxOpKind::Remove,
            expected_version: None,
            table_id: 7,
            key: b"carol",
            value: b"",
        },
    ];
    let participants = [
        TxParticipant {
            table_id: 7,
            key_hash: 0x11,
        },
        TxParticipant {
            table_id: 8,
            key_hash: 0x22,
        },
    ];
    encode_tx_prepare(ID, 3, 9, 0, &participants, &ops, &mut out).expect("tx prepare");
    frames.push(("tx_prepare_request", out));

    let mut out = Vec::new();
    encode_tx_request_vote(ID, 3, 9, &participants, &mut out).expect("tx request vote");
    frames.push(("tx_request_vote_request", out));

    let mut out = Vec::new();
    let txs = [
        TxKey {
            lease_id: 3,
            tx_seq: 9,
        },
        TxKey {
            lease_id: 4,
            tx_seq: 1,
        },
    ];
    encode_tx_decisions(ID, true, &txs, &mut out).expect("tx decisions");
    frames.push(("tx_decisions_request", out));

    frames
}

/// Responses that are plain values (no lists), by golden-file name, with the opcode
/// of the request they answer.
pub fn simple_responses() -> Vec<(&'static str, Opcode, Response<'static>)> {
    vec![
        (
            "ping_response",
            Opcode::Ping,
            Response::Ping {
                nonce: 0x1122_3344_5566_7788,
                server_id: 3,
            },
        ),
        (
            "create_table_response",
            Opcode::CreateTable,
            Response::CreateTable { table_id: TABLE },
        ),
        (
            "get_table_id_response",
            Opcode::GetTableId,
            Response::GetTableId { table_id: TABLE },
        ),
        (
            "drop_table_response",
            Opcode::DropTable,
            Response::DropTable,
        ),
        (
            "read_response",
            Opcode::Read,
            Response::Read {
                version: 6,
                value: b"hello",
            },
        ),
        (
            "write_response",
            Opcode::Write,
            Response::Write { version: 6 },
        ),
        (
            "set_expiry_response",
            Opcode::SetExpiry,
            Response::SetExpiry { changed: true },
        ),
        (
            "get_expiry_response",
            Opcode::GetExpiry,
            Response::GetExpiry {
                expires_at: Some(0x0000_018c_1234_5678),
            },
        ),
        (
            "get_expiry_none_response",
            Opcode::GetExpiry,
            Response::GetExpiry { expires_at: None },
        ),
        (
            "write_expiring_response",
            Opcode::WriteExpiring,
            Response::WriteExpiring { version: 6 },
        ),
        (
            "remove_response",
            Opcode::Remove,
            Response::Remove {
                existed: true,
                version: 6,
            },
        ),
        (
            "increment_response",
            Opcode::Increment,
            Response::Increment {
                version: 7,
                value: 12i64.to_le_bytes(),
            },
        ),
        (
            "split_tablet_response",
            Opcode::SplitTablet,
            Response::SplitTablet,
        ),
        (
            "enlist_response",
            Opcode::Enlist,
            Response::Enlist { server_id: 3 },
        ),
        (
            "server_list_update_response",
            Opcode::ServerListUpdate,
            Response::ServerListUpdate,
        ),
        (
            "take_tablet_ownership_response",
            Opcode::TakeTabletOwnership,
            Response::TakeTabletOwnership,
        ),
        (
            "drop_tablet_ownership_response",
            Opcode::DropTabletOwnership,
            Response::DropTabletOwnership,
        ),
        (
            "get_server_stats_response",
            Opcode::GetServerStats,
            Response::GetServerStats {
                text: "objects=3\nlog_bytes=1024\n",
            },
        ),
        (
            "backup_write_response",
            Opcode::BackupWrite,
            Response::BackupWrite,
        ),
        (
            "backup_free_response",
            Opcode::BackupFree,
            Response::BackupFree,
        ),
        (
            "backup_read_replica_response",
            Opcode::BackupReadReplica,
            Response::BackupReadReplica {
                closed: true,
                bytes: REPLICA_BYTES,
            },
        ),
        (
            "backup_get_recovery_data_response",
            Opcode::BackupGetRecoveryData,
            Response::BackupGetRecoveryData {
                bytes: REPLICA_BYTES,
            },
        ),
        (
            "recover_partition_response",
            Opcode::RecoverPartition,
            Response::RecoverPartition {
                entries: 7,
                bytes: 0x1_0000,
                ctime: 0,
            },
        ),
        (
            "recover_partition_response_ctime",
            Opcode::RecoverPartition,
            Response::RecoverPartition {
                entries: 7,
                bytes: 0x1_0000,
                ctime: SEGMENT,
            },
        ),
        (
            "crash_server_response",
            Opcode::CrashServer,
            Response::CrashServer,
        ),
        (
            "suspect_server_response",
            Opcode::SuspectServer,
            Response::SuspectServer,
        ),
        (
            "ping_server_response",
            Opcode::PingServer,
            Response::PingServer { answered: true },
        ),
        (
            "renew_lease_response",
            Opcode::RenewLease,
            Response::RenewLease { lease_ms: 500 },
        ),
        (
            "client_lease_response",
            Opcode::ClientLease,
            Response::ClientLease {
                lease_id: 7,
                lease_ms: 30_000,
            },
        ),
        (
            "check_client_lease_response",
            Opcode::CheckClientLease,
            Response::CheckClientLease { live: true },
        ),
        (
            "tx_prepare_response",
            Opcode::TxPrepare,
            Response::TxPrepare {
                vote: TxVote::Prepared,
            },
        ),
        (
            "tx_decision_response",
            Opcode::TxDecision,
            Response::TxDecision,
        ),
        (
            "tx_request_vote_response",
            Opcode::TxRequestVote,
            Response::TxRequestVote {
                vote: TxVote::Abort,
            },
        ),
        (
            "tx_decisions_response",
            Opcode::TxDecisions,
            Response::TxDecisions,
        ),
        ("leave_response", Opcode::Leave, Response::Leave),
        (
            "migrate_tablet_response",
            Opcode::MigrateTablet,
            Response::MigrateTablet { migration_id: 9 },
        ),
        (
            "list_migrations_response",
            Opcode::ListMigrations,
            Response::ListMigrations {
                text: "id=9 table=users state=pulling\n",
            },
        ),
        (
            "migration_done_response",
            Opcode::MigrationDone,
            Response::MigrationDone,
        ),
        (
            "cancel_migration_response",
            Opcode::CancelMigration,
            Response::CancelMigration,
        ),
        (
            "prepare_migration_response",
            Opcode::PrepareMigration,
            Response::PrepareMigration { safe_version: 1234 },
        ),
        (
            "take_migrating_tablet_response",
            Opcode::TakeMigratingTablet,
            Response::TakeMigratingTablet,
        ),
        (
            "server_not_up_response",
            Opcode::Ping,
            Response::Error(ErrorBody::Message {
                status: Status::ServerNotUp,
                message: "you are not UP in the cluster",
            }),
        ),
        (
            "no_space_response",
            Opcode::BackupWrite,
            Response::Error(ErrorBody::Message {
                status: Status::NoSpace,
                message: "all 8 open-replica buffers are in use",
            }),
        ),
        (
            "wrong_version_response",
            Opcode::Write,
            Response::Error(ErrorBody::WrongVersion { current_version: 9 }),
        ),
        (
            "retry_response",
            Opcode::Write,
            Response::Error(ErrorBody::Retry { delay_ms: 100 }),
        ),
        (
            "object_doesnt_exist_response",
            Opcode::Read,
            Response::Error(ErrorBody::Message {
                status: Status::ObjectDoesntExist,
                message: "",
            }),
        ),
        (
            "table_doesnt_exist_response",
            Opcode::GetTableId,
            Response::Error(ErrorBody::Message {
                status: Status::TableDoesntExist,
                message: "no table users",
            }),
        ),
    ]
}

pub const ENUMERATE_NEXT_CURSOR: u64 = 0x123;

pub fn enumerated() -> Vec<(u64, &'static [u8], &'static [u8])> {
    vec![(6, b"a", b"x"), (7, b"bc", b"")]
}

pub const TABLET_MAP_VERSION: u64 = 4;

pub fn tablet_map() -> Vec<(u64, u64, u64, u64, &'static str)> {
    vec![
        (TABLE, 0, 0x7fff_ffff_ffff_ffff, 3, "10.0.0.3:7000"),
        (TABLE, 0x8000_0000_0000_0000, u64::MAX, 4, "10.0.0.4:7000"),
    ]
}

/// Completion records a Pull or PriorityPull answer carries (RIFL §4.3).
pub fn moved_records() -> Vec<MovedRpcResult<'static>> {
    vec![
        MovedRpcResult {
            table_id: TABLE,
            key_hash: 0x0123_4567_89ab_cdef,
            lease_id: 5,
            seq: 9,
            result: &[1, 7, 0, 0, 0, 0, 0, 0, 0],
        },
        MovedRpcResult {
            table_id: TABLE,
            key_hash: u64::MAX,
            lease_id: 6,
            seq: 1,
            result: &[],
        },
    ]
}

/// The participant list of the held commits a Pull answer carries.
pub fn held_participants() -> Vec<TxParticipant> {
    vec![
        TxParticipant {
            table_id: TABLE,
            key_hash: 0x0123_4567_89ab_cdef,
        },
        TxParticipant {
            table_id: TABLE + 1,
            key_hash: u64::MAX,
        },
    ]
}

/// Held commits a Pull answer carries (issue 21): two transactions.
pub fn held_commits(participants: &[TxParticipant]) -> Vec<HeldCommitOut<'_>> {
    vec![
        HeldCommitOut {
            lease_id: 5,
            tx_seq: 9,
            participants,
        },
        HeldCommitOut {
            lease_id: 6,
            tx_seq: 1,
            participants: &participants[..1],
        },
    ]
}

/// Responses carrying lists (built with the encoders), the zero-copy read response,
/// and an error answer to an unknown opcode, by golden-file name.
pub fn other_response_frames() -> Vec<(&'static str, Vec<u8>)> {
    let mut frames = Vec::new();

    let mut out = Vec::new();
    let mut e = MultiReadResponseEncoder::new(ID, &mut out);
    e.push_ok(6, b"x").expect("push");
    e.push_error(Status::ObjectDoesntExist).expect("push");
    e.finish().expect("finish");
    frames.push(("multi_read_response", out));

    let mut out = Vec::new();
    let mut e = MultiWriteResponseEncoder::new(ID, &mut out);
    e.push(Status::Ok, 6).expect("push");
    e.push(Status::WrongVersion, 9).expect("push");
    e.finish().expect("finish");
    frames.push(("multi_write_response", out));

    let mut out = Vec::new();
    let mut e = MultiRemoveResponseEncoder::new(ID, &mut out);
    e.push(Status::Ok, true, 6).expect("push");
    e.push(Status::ObjectDoesntExist, false, 0).expect("push");
    e.finish().expect("finish");
    frames.push(("multi_remove_response", out));

    let mut out = Vec::new();
    let mut e = EnumerateResponseEncoder::new(ID, &mut out);
    for (v, k, val) in enumerated() {
        e.push(v, k, val).expect("push");
    }
    e.finish(true, ENUMERATE_NEXT_CURSOR).expect("finish");
    frames.push(("enumerate_response", out));

    let mut out = Vec::new();
    let mut e = EnumerateResponseEncoder::for_pull(ID, &mut out);
    for (v, k, val) in enumerated() {
        e.push(v, k, val).expect("push");
    }
    e.finish(true, ENUMERATE_NEXT_CURSOR).expect("finish");
    frames.push(("pull_response", out));

    let mut out = Vec::new();
    let mut e = PriorityPullResponseEncoder::new(ID, &mut out);
    for (v, k, val) in enumerated() {
        e.push_parts(v, k, &[val]).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("priority_pull_response", out));

    let mut out = Vec::new();
    let mut e = EnumerateResponseEncoder::for_pull(ID, &mut out);
    for (v, k, val) in enumerated() {
        e.push(v, k, val).expect("push");
    }
    e.finish_with_records(true, ENUMERATE_NEXT_CURSOR, moved_records())
        .expect("finish");
    frames.push(("pull_response_with_records", out));

    // Held commits after records, and alone (the records count 0 leads them).
    for (name, records) in [
        ("pull_response_with_records_and_held", moved_records()),
        ("pull_response_with_held", Vec::new()),
    ] {
        let mut out = Vec::new();
        let mut e = EnumerateResponseEncoder::for_pull(ID, &mut out);
        for (v, k, val) in enumerated() {
            e.push(v, k, val).expect("push");
        }
        let participants = held_participants();
        e.finish_with_trailers(
            true,
            ENUMERATE_NEXT_CURSOR,
            records,
            held_commits(&participants),
        )
        .expect("finish");
        frames.push((name, out));
    }

    let mut out = Vec::new();
    let mut e = PriorityPullResponseEncoder::new(ID, &mut out);
    for (v, k, val) in enumerated() {
        e.push_parts(v, k, &[val]).expect("push");
    }
    e.finish_with_records(moved_records()).expect("finish");
    frames.push(("priority_pull_response_with_records", out));

    let mut out = Vec::new();
    let mut e = TabletMapEncoder::new(ID, TABLET_MAP_VERSION, &mut out);
    for (t, s, end, id, a) in tablet_map() {
        e.push(t, s, end, id, a).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("get_tablet_map_response", out));

    let mut out = Vec::new();
    let mut e = BackupReplicasEncoder::new(ID, &mut out);
    for (segment_id, length, closed) in replicas() {
        e.push(segment_id, length, closed).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("backup_get_replicas_response", out));

    let mut out = Vec::new();
    let mut e = BackupReplicasEncoder::for_partitioning(ID, &mut out);
    for (segment_id, length, closed) in replicas() {
        e.push(segment_id, length, closed).expect("push");
    }
    e.finish().expect("finish");
    frames.push(("backup_start_partitioning_response", out));

    let mut out = Vec::new();
    encode_error_response(
        ID,
        999,
        &ErrorBody::Message {
            status: Status::UnknownOpcode,
            message: "unknown opcode 999",
        },
        &mut out,
    )
    .expect("encode");
    frames.push(("unknown_opcode_response", out));

    frames
}

/// Every sample request frame, by golden-file name.
pub fn all_request_frames() -> Vec<(&'static str, Vec<u8>)> {
    let mut frames: Vec<_> = simple_requests()
        .into_iter()
        .map(|(name, req)| (name, request_frame(&req)))
        .collect();
    frames.extend(list_request_frames());
    frames
}

/// Every sample response frame that decodes (the unknown-opcode answer does not:
/// its opcode is unknown to this version too), by golden-file name.
pub fn all_response_frames() -> Vec<(&'static str, Vec<u8>)> {
    let mut frames: Vec<_> = simple_responses()
        .into_iter()
        .map(|(name, op, resp)| (name, response_frame(op, &resp)))
        .collect();
    frames.extend(
        other_response_frames()
            .into_iter()
            .filter(|(name, _)| *name != "unknown_opcode_response"),
    );
    frames
}

//! ramstore's RPC wire format (docs/design.md §6): frames, opcodes, status codes, and the
//! encoding of every request and response body. This crate does no I/O; transports
//! cut frames out of a byte stream with [`frame_len`] and hand them here.
//!
//! # Frame
//!
//! Every message is one frame: a length prefix, a 16-byte header, then the body. All
//! integers are little-endian.
//!
//! ```text
//! byte  0       4       6       8               12                              20
//!       +-------+-------+-------+---------------+-------------------------------+------
//!       |  len  |opcode |status |     flags     |          request_id           | body
//!       |  u32  |  u16  |  u16  |      u32      |              u64              | ...
//!       +-------+-------+-------+---------------+-------------------------------+------
//!               |<------------------ len bytes: header (16) + body ------------------->|
//! ```
//!
//! - `len`: bytes after the prefix, from 16 ([`HEADER_BYTES`], empty body) to
//!   [`MAX_FRAME_BYTES`].
//! - `opcode`: the operation ([`Opcode`]); a response carries its request's opcode.
//! - `status`: [`Status::Ok`] (0) in every request; the outcome in a response.
//! - `flags`: bit 0 = [`FLAG_RESPONSE`], set on responses only; other bits must be 0.
//! - `request_id`: chosen by the client, echoed in the response, so responses to the
//!   many requests in flight on one connection can come back in any order.
//!
//! # Bodies
//!
//! Fixed fields first, then variable bytes. Keys are `u16 len + bytes`; values are
//! `u32 len + bytes`, at most [`MAX_VALUE_BYTES`]; replica bytes (backup messages)
//! are `u32 len + bytes`, at most [`MAX_REPLICA_BYTES`]; names, addresses and
//! messages are `u16 len + UTF-8`; reject rules are `u64 given_version + u8 bits`
//! ([`RejectRules`]); lists are `u32 count + items` ([`List`]), multi-operations
//! at most [`MAX_MULTI_OPS`] items. OK bodies depend on the opcode ([`Request`],
//! [`Response`]); error bodies depend on the status only ([`ErrorBody`]).
//!
//! # Shared vocabulary
//!
//! What both ends of an RPC must agree on is defined here once and re-exported by
//! the crates above: [`RejectRules`] with its decision [`RejectRules::check`] (the
//! client sends it, the master applies it, the history checker models it; the
//! `serde` feature lets the checker record it), and [`key_hash`], which places a key
//! in a tablet (the client routes by it, the master checks ownership by it).
//!
//! # Backup messages (R§4.2, R§7.4, R§8)
//!
//! A master replicates its log segments to backups with four opcodes. Each backup
//! holds *replicas* named by (master id, segment id).
//!
//! ```text
//! BackupWrite request        master_id u64 | segment_id u64 | offset u32 | flags u8
//!                            | len u32 | bytes (len ≤ MAX_REPLICA_BYTES)
//!   flags: bit 0 OPEN   open the replica first (idempotent)
//!          bit 1 CLOSE  close it after writing (the replica becomes read-only)
//!          bit 2 ATOMIC open it in atomic mode: never offered until closed (R§8);
//!                       only together with OPEN; other bits must be 0
//! BackupWrite response       (empty)
//! BackupFree request         master_id u64 | segment_id u64
//! BackupFree response        (empty)
//! BackupGetReplicas request  master_id u64
//! BackupGetReplicas response count u32 | count × (segment_id u64 | length u32 | closed u8)
//! BackupReadReplica request  master_id u64 | segment_id u64
//! BackupReadReplica response closed u8 | len u32 | bytes (len ≤ MAX_REPLICA_BYTES)
//! BackupStartPartitioning request  master_id u64 | recovery_id u64 | count u32
//!                            | count × (partition_id u32 | table_id u64 | start_hash u64
//!                            | end_hash u64)
//! BackupStartPartitioning response (as BackupGetReplicas, in the order it reads them)
//! BackupGetRecoveryData request  master_id u64 | recovery_id u64 | segment_id u64
//!                            | partition_id u32
//! BackupGetRecoveryData response len u32 | entries (len ≤ MAX_REPLICA_BYTES)
//! ```
//!
//! # Recovery (R§7.5–7.6)
//!
//! ```text
//! RecoverPartition request   crashed_id u64 | recovery_id u64 | partition_id u32 | count u32
//!                            | count × item; item = 0 u8 | table_id u64 | start_hash u64
//!                            | end_hash u64 (a tablet), or 2 u8 | table_id u64
//!                            | start_hash u64 | end_hash u64 | ctime u64 (a tablet whose
//!                            replay skips segments below ctime; never 0), or 1 u8
//!                            | segment_id u64 | address (a replica and a backup holding it)
//! RecoverPartition response  entries u64 | bytes u64 [| ctime u64: the recovered tablets'
//!                            tenure start on the recovery master; absent: 0, never 0]
//! CrashServer request        server_id u64
//! CrashServer response       (empty)
//! Leave request              server_id u64 (a server stopping cleanly)
//! Leave response             (empty)
//! ```
//!
//! # Live migration (K§2.3)
//!
//! ```text
//! MigrateTablet request      name | start_hash u64 | end_hash u64 | target_server_id u64
//!                            [| mode u8: 1 no PriorityPulls, 2 stop-and-copy; absent:
//!                            Rocksteady ([`MigrationMode`])]
//! MigrateTablet response     migration_id u64 (ownership has moved)
//! ListMigrations request     (empty)
//! ListMigrations response    text (u32 len + UTF-8: `key=value` lines, one per migration)
//! MigrationDone request      migration_id u64 | bytes u64 | objects u64
//! MigrationDone response     (empty)
//! PrepareMigration request   server_id u64 | table_id u64 | start_hash u64 | end_hash u64
//!                            | migration_id u64
//! PrepareMigration response  safe_version u64
//! TakeMigratingTablet request  server_id u64 | table_id u64 | start_hash u64 | end_hash u64
//!                            | migration_id u64 | source_server_id u64 | safe_version u64
//!                            | source_address [| mode u8, as MigrateTablet's]
//! TakeMigratingTablet response (empty)
//! Pull request               table_id u64 | cursor u64 | end_hash u64 | max_bytes u32
//! Pull response              (as Enumerate's) has_next u8 | next_cursor u64 | objects
//! PriorityPull request       (as MultiRead's) count u32 | count × (table_id u64 | key)
//! PriorityPull response      count u32 | count × (version u64 | key | value): the keys
//!                            asked for that exist
//! CancelMigration request    migration_id u64
//! CancelMigration response   (empty; the cancel is recorded, the range returns)
//! ```
//!
//! # Key expiry (`expiry.rs`; R§4: the expiry lives in the object's log entry)
//!
//! ```text
//! SetExpiry request          table_id u64 | condition u8 | has_expiry u8
//!                            [| expires_at u64] | key ([`ExpireCondition`]; no
//!                            expiry: the object never expires, as PERSIST)
//! SetExpiry response         changed u8 (0: no such object, or the condition
//!                            refused)
//! GetExpiry request          table_id u64 | key
//! GetExpiry response         has_expiry u8 [| expires_at u64];
//!                            OBJECT_DOESNT_EXIST if absent or expired
//! WriteExpiring request      table_id u64 | rules | expiry change | key | value
//!                            ([`ExpiryChange`]; at-least-once: no rpc id)
//! WriteExpiring response     version u64
//! ```
//!
//! Expiry times are absolute wall-clock ms since the Unix epoch.
//!
//! # Failure detection (R§7.2, R§7.11, C§4.1)
//!
//! ```text
//! Ping request               nonce u64 | caller_id u64 (0: not a server)
//! Ping response              nonce u64 | server_id u64 (0: not enlisted yet)
//!   SERVER_NOT_UP "you are not UP in the cluster": the receiver lists the caller
//!   CRASHED or removed (the caller is a zombie and must stop)
//! SuspectServer request      caller_id u64 | server_id u64
//! SuspectServer response     (empty); SERVER_NOT_UP if the caller is not UP
//! PingServer request         server_id u64 | address
//! PingServer response        answered u8 (1: the server answered as itself)
//! RenewLease request         caller_id u64
//! RenewLease response        lease_ms u32 (0: not granted now; the caller keeps
//!                            asking). SERVER_NOT_UP if the caller is not UP
//! ```
//!
//! # Exactly-once RPCs (RIFL, Lee et al. SOSP'15 §4; R§10.3)
//!
//! ```text
//! Write, Remove, Increment requests  [| rpc id: lease_id u64 | seq u64
//!                            | first_incomplete u64] (optional trailer, [`RpcId`];
//!                            absent: at-least-once, as before RIFL)
//! MultiWrite, MultiRemove requests  [| rpc ids: lease_id u64 | first_incomplete u64
//!                            | count × seq u64] (optional trailer, one seq per item,
//!                            strictly increasing; [`MultiRpcIds`]; absent:
//!                            at-least-once)
//!   A MultiWrite or MultiRemove item answered from its completion record carries
//!   the original outcome; STALE_RPC is that item's status
//! ClientLease request        lease_id u64 (0: open a new lease)
//! ClientLease response       lease_id u64 | lease_ms u32 (from when the client sent)
//!   UNKNOWN_LEASE: the lease renewed has expired or was never issued
//! CheckClientLease request   lease_id u64
//! CheckClientLease response  live u8
//! STALE_RPC (any object request with an rpc id): its completion record was
//!   garbage-collected (seq below the acknowledged window, or lease expired)
//! ```
//!
//! One BackupWrite does open + write + close when its flags say so, so a master's
//! group commit sends every not-yet-replicated byte of its head to each backup in
//! one RPC, and a closed segment is re-replicated in one RPC. A backup that has no
//! free buffer or frame answers NO_SPACE (the master places the replica on another
//! backup, R§7.1); a replica it does not hold is OBJECT_DOESNT_EXIST; a write that
//! would leave a gap or end past the segment is INVALID_REQUEST.
//!
//! # Invariants
//!
//! - Decoding never panics and never reads past the frame, whatever the input: every
//!   length is checked against the bytes present and its limit before use.
//! - Decoding is strict: unknown opcodes, statuses, flag bits, rule bits and enum
//!   values, invalid UTF-8, and trailing bytes are errors. So a frame that decodes has
//!   exactly one encoding, and re-encoding a decoded message gives back its bytes.
//! - Decoding is zero-copy: keys, values, strings and lists borrow the frame buffer;
//!   lists are validated once, so iterating them cannot fail.
//! - Encoding appends whole frames or nothing: on error the output buffer is left as
//!   it was (the one exception by design is [`encode_read_response_header`], whose
//!   frame is complete once the caller appends the value).

mod codec;
pub mod counter;
pub mod encoder;
mod error;
mod expiry;
mod fields;
mod frame;
mod list;
pub mod location;
mod moved_record;
mod multi_rpc_ids;
mod opcode;
mod request;
mod response;
mod rpc_id;
mod rules;
pub mod server_id;
mod status;
mod tx;
mod tx_vote;

pub use encoder::{
    BackupReplicasEncoder, BackupStartPartitioningEncoder, EnumerateResponseEncoder,
    MultiReadRequestEncoder, MultiReadResponseEncoder, MultiRemoveRequestEncoder,
    MultiRemoveResponseEncoder, MultiWriteRequestEncoder, MultiWriteResponseEncoder,
    PriorityPullResponseEncoder, RecoverPartitionEncoder, ServerListUpdateEncoder,
    TabletMapEncoder,
};
pub use error::WireError;
pub use expiry::{ExpireCondition, ExpiryChange};
pub use fields::{
    BackupWriteFlags, MigrationMode, NumberKind, ServerStatus, Services, BACKUP_WRITE_ATOMIC,
    BACKUP_WRITE_CLOSE, BACKUP_WRITE_OPEN, BACKUP_WRITE_RESERVE, SERVICE_BACKUP, SERVICE_MASTER,
    SERVICE_REPLICATED_LOG,
};
pub use frame::{decode_header, decode_raw_header, frame_len, Header, RawHeader};
pub use list::{
    EnumeratedObject, EnumeratedObjects, List, ListItem, ListIter, MultiReadItem, MultiReadItems,
    MultiReadResult, MultiReadResults, MultiRemoveItem, MultiRemoveItems, MultiRemoveResult,
    MultiRemoveResults, MultiWriteItem, MultiWriteItems, MultiWriteResult, MultiWriteResults,
    PartitionTablet, PartitionTablets, RecoveryItem, RecoveryItems, ReplicaEntries, ReplicaEntry,
    ServerListEntries, ServerListEntry, TabletMapEntries, TabletMapEntry,
};
pub use moved_record::{
    HeldCommitOut, MovedHeldCommit, MovedHeldCommits, MovedRpcResult, MovedRpcResults,
    MAX_MOVED_RESULT_BYTES,
};
pub use multi_rpc_ids::MultiRpcIds;
pub use opcode::Opcode;
pub use request::{decode_request, encode_request, Request};
pub use response::{
    decode_response, encode_error_response, encode_read_response_header, encode_response, not_up,
    ErrorBody, Response, NOT_UP_MESSAGE,
};
pub use rpc_id::{RpcId, RPC_ID_BYTES};
pub use rules::{
    Refusal, RejectRules, RULES_BYTES, RULE_DOESNT_EXIST, RULE_EXISTS, RULE_VERSION_GT_GIVEN,
    RULE_VERSION_LE_GIVEN, RULE_VERSION_NE_GIVEN,
};
pub use status::Status;
pub use tx::{
    encode_tx_prepare, TxOp, TxOpKind, TxParticipant, TxPrepare, TxVote, MAX_TX_BYTES,
    MAX_TX_OBJECTS, TX_DECIDE_NOW,
};
pub use tx_vote::{
    encode_tx_decisions, encode_tx_request_vote, TxDecisions, TxKey, TxRequestVote,
    MAX_TX_DECISIONS,
};

/// The 64-bit hash of a key: it places the key in a tablet (a range of key hashes,
/// docs/design.md §4) and, on its master, in a hash-table bucket. xxh3-64. Clients
/// route by it and masters check ownership by it, so both must use this one
/// definition.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Bytes of the length prefix that starts every frame.
pub const LEN_PREFIX_BYTES: usize = 4;
/// Bytes of the header that follows the length prefix.
pub const HEADER_BYTES: usize = 16;
/// Longest replica byte string, in bytes: one whole log segment, the most a
/// BackupWrite carries (a closed segment re-replicated in one RPC, R§8) and a
/// BackupReadReplica returns. Equals `ramstore_log::SEGMENT_BYTES` and
/// `ramstore_backup::FRAME_SEGMENT_BYTES` (the server asserts both).
pub const MAX_REPLICA_BYTES: usize = 8 * 1024 * 1024;
/// Room a frame has besides its largest variable field: header and fixed fields of
/// any message with [`MAX_REPLICA_BYTES`] of replica bytes, with a wide margin.
pub const FRAME_OVERHEAD_BYTES: usize = 64 * 1024;
/// Largest length prefix accepted (header + body), so a peer cannot make the receiver
/// buffer an unbounded frame: a whole segment plus [`FRAME_OVERHEAD_BYTES`].
/// `ramstore_rpc::MAX_FRAME_BYTES` must be the same (the server asserts it).
pub const MAX_FRAME_BYTES: usize = MAX_REPLICA_BYTES + FRAME_OVERHEAD_BYTES;
/// Longest key, in bytes: the most a `u16` length can say; equals
/// `ramstore_log::MAX_KEY_BYTES` (the server asserts this, as `wire` depends on no
/// other ramstore crate).
pub const MAX_KEY_BYTES: usize = u16::MAX as usize;
/// Longest value, in bytes; equals `ramstore_log::MAX_VALUE_BYTES`.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Longest name, address or message, in bytes: the most a `u16` length can say.
pub const MAX_STRING_BYTES: usize = u16::MAX as usize;
/// Longest failure domain name (Enlist, server lists), in bytes: a rack or power
/// supply label, not a free text. The empty name means "the server is its own
/// failure domain".
pub const MAX_FAILURE_DOMAIN_BYTES: usize = 64;
/// Most items in one MultiRead, MultiWrite or MultiRemove (request or response).
pub const MAX_MULTI_OPS: usize = 4096;

/// Flag bit 0: the frame is a response.
pub const FLAG_RESPONSE: u32 = 1;
/// Every flag bit this version knows; frames with other bits set are rejected.
pub const KNOWN_FLAGS: u32 = FLAG_RESPONSE;

// The largest single object (key and value with the largest fixed fields of a
// Write request or Read response) must fit in one frame.
const _: () = assert!(HEADER_BYTES + 64 + MAX_KEY_BYTES + MAX_VALUE_BYTES <= MAX_FRAME_BYTES);
// A whole segment fits in one BackupWrite request (the largest fixed fields beside
// replica bytes) and one BackupReadReplica response.
const _: () = assert!(HEADER_BYTES + 64 + MAX_REPLICA_BYTES <= MAX_FRAME_BYTES);
// The frame length must fit the u32 prefix.
const _: () = assert!(MAX_FRAME_BYTES <= u32::MAX as usize);
// Item counts must fit the u32 count field.
const _: () = assert!(MAX_MULTI_OPS <= u32::MAX as usize);

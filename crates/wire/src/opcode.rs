//! Opcodes: which operation a frame asks for (requests) or answers (responses).

use crate::error::WireError;

/// The operation of a frame, as carried in the header's opcode field (`u16` LE).
/// A response carries the opcode of the request it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Opcode {
    Ping = 1,
    CreateTable = 2,
    GetTableId = 3,
    DropTable = 4,
    Read = 5,
    Write = 6,
    Remove = 7,
    Increment = 8,
    MultiRead = 9,
    MultiWrite = 10,
    MultiRemove = 11,
    Enumerate = 12,
    SplitTablet = 13,
    Enlist = 14,
    ServerListUpdate = 15,
    TakeTabletOwnership = 16,
    DropTabletOwnership = 17,
    GetTabletMap = 18,
    GetServerStats = 19,
    /// Master → backup: open, write and/or close a replica (R§4.2, R§7.4).
    BackupWrite = 20,
    /// Master → backup: drop a replica (its segment was cleaned, R§4.4).
    BackupFree = 21,
    /// Recovery / cold start → backup: which replicas of a master it holds (R§7.4).
    BackupGetReplicas = 22,
    /// Recovery / cold start → backup: the bytes of one replica (R§7.4, R§7.10).
    BackupReadReplica = 23,
    /// Coordinator → backup: read the replicas of a crashed master and bucket their
    /// entries by recovery partition (R§7.5).
    BackupStartPartitioning = 24,
    /// Recovery master → backup: the entries of one partition from one replica
    /// (R§7.5, R§7.6).
    BackupGetRecoveryData = 25,
    /// Coordinator → recovery master: recover one partition of a crashed master
    /// (R§7.6).
    RecoverPartition = 26,
    /// Operator → coordinator: treat a server as crashed (drills and tests).
    CrashServer = 27,
    /// Storage server → coordinator: a ping to `server_id` failed; please confirm
    /// (R§7.2).
    SuspectServer = 28,
    /// Coordinator → storage server: ping this server for me and say whether it
    /// answered (a second path to a suspect, C§4.1).
    PingServer = 29,
    /// Storage server → coordinator: may I keep serving object operations for a
    /// while? (the membership lease that keeps zombies from serving stale reads;
    /// design notes "Membership leases").
    RenewLease = 30,
    /// Storage server → coordinator: this server is stopping cleanly (SIGINT,
    /// SIGTERM); recover its data now, as a restart's rather than a crash's
    /// (design notes "Server identity across restarts").
    Leave = 31,
    /// Client → coordinator: move a tablet to another master (K§2.3).
    MigrateTablet = 32,
    /// Client → coordinator: the migrations in progress and recently done.
    ListMigrations = 33,
    /// Migration target → coordinator: every record of the range has arrived.
    MigrationDone = 34,
    /// Coordinator → migration source: fence the tablet and say its safe version.
    PrepareMigration = 35,
    /// Coordinator → migration target: own the tablet now and pull its records.
    TakeMigratingTablet = 36,
    /// Migration target → source: the next batch of a hash partition's records.
    Pull = 37,
    /// Migration target → source: these keys' records, now (a client waits).
    PriorityPull = 38,
    /// Client → coordinator: cancel a migration; its range ends on its source
    /// (issue 20; design notes "Cancelling a migration").
    CancelMigration = 39,
    /// Client → coordinator: open (lease id 0) or renew a client lease, the
    /// identity exactly-once RPCs are sent under (RIFL §4).
    ClientLease = 40,
    /// Master → coordinator: is this client lease still live? (RIFL §4: the
    /// master drops an expired lease's completion records).
    CheckClientLease = 41,
    /// Client → participant master: check versions and lock these objects of a
    /// transaction, or commit them at once if it is the only participant
    /// (SOSP'15 §6; `tx.rs`).
    TxPrepare = 42,
    /// Client → participant master: commit or abort a prepared transaction.
    TxDecision = 43,
    /// Transaction recovery manager → participant master: your vote on this
    /// transaction, deciding ABORT if you never prepared it (SOSP'15 §6.4;
    /// `tx_vote.rs`). Codes 44–49 are left for other messages.
    TxRequestVote = 50,
    /// Participant → participant masters: the same decision for many
    /// transactions at once (a held commit's release, `tx_vote.rs`).
    TxDecisions = 51,
    /// Client → master: change an object's expiry time (`expiry.rs`). Codes
    /// 52–59 are left for other messages.
    SetExpiry = 60,
    /// Client → master: an object's expiry time.
    GetExpiry = 61,
    /// Client → master: a write that also sets or keeps the expiry time.
    WriteExpiring = 62,
}

impl Opcode {
    /// Every opcode, in code order (for tests and tables).
    pub const ALL: [Opcode; 48] = [
        Opcode::Ping,
        Opcode::CreateTable,
        Opcode::GetTableId,
        Opcode::DropTable,
        Opcode::Read,
        Opcode::Write,
        Opcode::Remove,
        Opcode::Increment,
        Opcode::MultiRead,
        Opcode::MultiWrite,
        Opcode::MultiRemove,
        Opcode::Enumerate,
        Opcode::SplitTablet,
        Opcode::Enlist,
        Opcode::ServerListUpdate,
        Opcode::TakeTabletOwnership,
        Opcode::DropTabletOwnership,
        Opcode::GetTabletMap,
        Opcode::GetServerStats,
        Opcode::BackupWrite,
        Opcode::BackupFree,
        Opcode::BackupGetReplicas,
        Opcode::BackupReadReplica,
        Opcode::BackupStartPartitioning,
        Opcode::BackupGetRecoveryData,
        Opcode::RecoverPartition,
        Opcode::CrashServer,
        Opcode::SuspectServer,
        Opcode::PingServer,
        Opcode::RenewLease,
        Opcode::Leave,
        Opcode::MigrateTablet,
        Opcode::ListMigrations,
        Opcode::MigrationDone,
        Opcode::PrepareMigration,
        Opcode::TakeMigratingTablet,
        Opcode::Pull,
        Opcode::PriorityPull,
        Opcode::CancelMigration,
        Opcode::ClientLease,
        Opcode::CheckClientLease,
        Opcode::TxPrepare,
        Opcode::TxDecision,
        Opcode::TxRequestVote,
        Opcode::TxDecisions,
        Opcode::SetExpiry,
        Opcode::GetExpiry,
        Opcode::WriteExpiring,
    ];

    /// The code sent on the wire.
    pub fn code(self) -> u16 {
        self as u16
    }
}

/// How many opcodes have codes 1..=DENSE with no gap (the rest sit past it).
const DENSE: usize = 43;

impl TryFrom<u16> for Opcode {
    type Error = WireError;

    fn try_from(code: u16) -> Result<Self, WireError> {
        // `ALL` is in code order starting at 1 and dense up to its gap, so below
        // the gap the code minus one is the index (code 0 wraps far out of
        // range); codes past the gap are few and searched.
        match Opcode::ALL.get(usize::from(code.wrapping_sub(1))) {
            Some(&op) if op.code() == code => Ok(op),
            _ => Opcode::ALL[DENSE..]
                .iter()
                .find(|op| op.code() == code)
                .copied()
                .ok_or(WireError::UnknownOpcode(code)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_match_their_index() {
        for (i, op) in Opcode::ALL.iter().enumerate() {
            if i < DENSE {
                assert_eq!(usize::from(op.code()), i + 1);
            } else {
                assert!(
                    op.code() > Opcode::ALL[i - 1].code(),
                    "ALL is in code order"
                );
            }
            assert_eq!(Opcode::try_from(op.code()), Ok(*op));
        }
        for bad in [0, DENSE as u16 + 1, 49, 52, u16::MAX] {
            assert_eq!(Opcode::try_from(bad), Err(WireError::UnknownOpcode(bad)));
        }
    }
}

//! Small typed fields of message bodies: enumerations and bit sets that are a single
//! integer on the wire. Each decodes strictly (unknown values are errors), so every
//! value that decodes re-encodes to the same bytes.

use crate::error::WireError;

/// The number type of an increment (`u8`: 0 = i64, 1 = f64). The delta and the new
/// value travel as 8 little-endian bytes of that type; the stored value is decimal
/// text ([`crate::counter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NumberKind {
    I64 = 0,
    F64 = 1,
}

impl TryFrom<u8> for NumberKind {
    type Error = WireError;

    fn try_from(v: u8) -> Result<Self, WireError> {
        match v {
            0 => Ok(NumberKind::I64),
            1 => Ok(NumberKind::F64),
            _ => Err(WireError::BadEnum {
                field: "number kind",
                value: u64::from(v),
            }),
        }
    }
}

/// A server's state in a server list update (`u8`: 0 UP, 1 CRASHED, 2 REMOVED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ServerStatus {
    Up = 0,
    Crashed = 1,
    Removed = 2,
}

impl TryFrom<u8> for ServerStatus {
    type Error = WireError;

    fn try_from(v: u8) -> Result<Self, WireError> {
        match v {
            0 => Ok(ServerStatus::Up),
            1 => Ok(ServerStatus::Crashed),
            2 => Ok(ServerStatus::Removed),
            _ => Err(WireError::BadEnum {
                field: "server status",
                value: u64::from(v),
            }),
        }
    }
}

/// How a tablet migration moves its data (`u8`; K§2.3, design notes "Migration
/// (Rocksteady)"). Only [`MigrationMode::Rocksteady`] is meant for use; the other
/// two are the baselines `scripts/bench-migration` compares it with.
///
/// On the wire the mode is an optional last byte of `MigrateTablet` and
/// `TakeMigratingTablet`: absent means Rocksteady (so requests of earlier
/// versions keep their meaning), and Rocksteady is always sent as absent (so a
/// message has one encoding: an explicit 0 is refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
#[repr(u8)]
pub enum MigrationMode {
    /// Ownership moves at once; the target serves writes at once and reads once
    /// the record arrived, asking the source for missing records by PriorityPull.
    #[default]
    Rocksteady = 0,
    /// As Rocksteady, but the target never sends a PriorityPull: an operation on
    /// a key not pulled yet is answered RETRY until the background pulls reach it.
    NoPriorityPulls = 1,
    /// The source stays the owner with the range locked (clients retry) while the
    /// target copies every record; ownership moves only after the copy.
    StopAndCopy = 2,
}

impl MigrationMode {
    /// The mode's name, as the CLI and the benchmark print it.
    pub fn name(self) -> &'static str {
        match self {
            MigrationMode::Rocksteady => "rocksteady",
            MigrationMode::NoPriorityPulls => "no-priority-pulls",
            MigrationMode::StopAndCopy => "stop-and-copy",
        }
    }
}

impl TryFrom<u8> for MigrationMode {
    type Error = WireError;

    fn try_from(v: u8) -> Result<Self, WireError> {
        match v {
            0 => Ok(MigrationMode::Rocksteady),
            1 => Ok(MigrationMode::NoPriorityPulls),
            2 => Ok(MigrationMode::StopAndCopy),
            _ => Err(WireError::BadEnum {
                field: "migration mode",
                value: u64::from(v),
            }),
        }
    }
}

/// Bit of [`Services::master`] in the services word.
pub const SERVICE_MASTER: u32 = 1;
/// Bit of [`Services::backup`] in the services word.
pub const SERVICE_BACKUP: u32 = 2;
/// Bit of [`Services::replicated_log`] in the services word.
pub const SERVICE_REPLICATED_LOG: u32 = 4;

/// The services a server runs (`u32` bit set: bit 0 master, bit 1 backup, bit 2
/// replicated log).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Services {
    pub master: bool,
    pub backup: bool,
    /// The master replicates its log to backups (R > 0): after a crash its data
    /// is recovered from them, and recovery waits until its whole log is found.
    /// Without it (R = 0) the master's objects live only in its DRAM.
    pub replicated_log: bool,
}

impl Services {
    /// A server running both a master and a backup (the usual storage server).
    pub const BOTH: Services = Services {
        master: true,
        backup: true,
        replicated_log: false,
    };

    /// The bit set as sent on the wire.
    pub fn bits(self) -> u32 {
        (if self.master { SERVICE_MASTER } else { 0 })
            | (if self.backup { SERVICE_BACKUP } else { 0 })
            | (if self.replicated_log {
                SERVICE_REPLICATED_LOG
            } else {
                0
            })
    }

    /// Services from their wire form; unknown bits are an error, so a service this
    /// version does not know is never silently dropped from the server list.
    pub fn from_bits(bits: u32) -> Result<Self, WireError> {
        if bits & !(SERVICE_MASTER | SERVICE_BACKUP | SERVICE_REPLICATED_LOG) != 0 {
            return Err(WireError::BadEnum {
                field: "services",
                value: u64::from(bits),
            });
        }
        Ok(Services {
            master: bits & SERVICE_MASTER != 0,
            backup: bits & SERVICE_BACKUP != 0,
            replicated_log: bits & SERVICE_REPLICATED_LOG != 0,
        })
    }
}

/// Bit of [`BackupWriteFlags::open`] in a BackupWrite's flags byte.
pub const BACKUP_WRITE_OPEN: u8 = 1 << 0;
/// Bit of [`BackupWriteFlags::close`].
pub const BACKUP_WRITE_CLOSE: u8 = 1 << 1;
/// Bit of [`BackupWriteFlags::atomic`].
pub const BACKUP_WRITE_ATOMIC: u8 = 1 << 2;
/// Bit of [`BackupWriteFlags::reserve`].
pub const BACKUP_WRITE_RESERVE: u8 = 1 << 3;
const BACKUP_WRITE_KNOWN: u8 =
    BACKUP_WRITE_OPEN | BACKUP_WRITE_CLOSE | BACKUP_WRITE_ATOMIC | BACKUP_WRITE_RESERVE;

/// What a BackupWrite does besides writing its bytes (`u8` bit set: bit 0 open,
/// bit 1 close, bit 2 atomic, bit 3 reserve). One RPC may open, write and close a
/// replica (RAMCloud's BackupWriteRpc works the same way).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct BackupWriteFlags {
    /// Open the replica before writing; opening a replica that is already open in
    /// the same mode does nothing, so a retransmitted open is harmless.
    pub open: bool,
    /// Close the replica after writing: it is complete and read-only from then on.
    pub close: bool,
    /// Open in atomic mode: the replica is never offered for recovery until it is
    /// closed (R§8, re-replication). Only meaningful, and only allowed, with `open`.
    pub atomic: bool,
    /// The open may take one of the frames the backup keeps for cleaning: the
    /// replica frees more than it takes (a survivor of combined cleaning, or the
    /// head whose durability lets the cleaned segments' replicas be freed).
    /// Only allowed with `open` (docs/design-notes.md "Full backups").
    pub reserve: bool,
}

impl BackupWriteFlags {
    /// Write only (the replica is open already).
    pub const WRITE: BackupWriteFlags = BackupWriteFlags {
        open: false,
        close: false,
        atomic: false,
        reserve: false,
    };
    /// Open (in normal mode), then write.
    pub const OPEN: BackupWriteFlags = BackupWriteFlags {
        open: true,
        close: false,
        atomic: false,
        reserve: false,
    };
    /// Write, then close.
    pub const CLOSE: BackupWriteFlags = BackupWriteFlags {
        open: false,
        close: true,
        atomic: false,
        reserve: false,
    };

    /// The bit set as sent on the wire; fails for `atomic` without `open`.
    pub fn bits(self) -> Result<u8, WireError> {
        if self.atomic && !self.open {
            return Err(WireError::Malformed("backup write ATOMIC without OPEN"));
        }
        if self.reserve && !self.open {
            return Err(WireError::Malformed("backup write RESERVE without OPEN"));
        }
        Ok((if self.open { BACKUP_WRITE_OPEN } else { 0 })
            | (if self.close { BACKUP_WRITE_CLOSE } else { 0 })
            | (if self.atomic { BACKUP_WRITE_ATOMIC } else { 0 })
            | (if self.reserve {
                BACKUP_WRITE_RESERVE
            } else {
                0
            }))
    }

    /// Flags from their wire form. Unknown bits, and ATOMIC without OPEN (the mode
    /// of a replica is fixed when it is opened), are errors.
    pub fn from_bits(bits: u8) -> Result<Self, WireError> {
        if bits & !BACKUP_WRITE_KNOWN != 0 {
            return Err(WireError::BadEnum {
                field: "backup write flags",
                value: u64::from(bits),
            });
        }
        let flags = BackupWriteFlags {
            open: bits & BACKUP_WRITE_OPEN != 0,
            close: bits & BACKUP_WRITE_CLOSE != 0,
            atomic: bits & BACKUP_WRITE_ATOMIC != 0,
            reserve: bits & BACKUP_WRITE_RESERVE != 0,
        };
        flags.bits()?;
        Ok(flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_round_trip_and_reject_unknown_values() {
        for k in [NumberKind::I64, NumberKind::F64] {
            assert_eq!(NumberKind::try_from(k as u8), Ok(k));
        }
        assert!(NumberKind::try_from(2).is_err());
        for s in [
            ServerStatus::Up,
            ServerStatus::Crashed,
            ServerStatus::Removed,
        ] {
            assert_eq!(ServerStatus::try_from(s as u8), Ok(s));
        }
        assert!(ServerStatus::try_from(3).is_err());
        for m in [
            MigrationMode::Rocksteady,
            MigrationMode::NoPriorityPulls,
            MigrationMode::StopAndCopy,
        ] {
            assert_eq!(MigrationMode::try_from(m as u8), Ok(m));
        }
        assert!(MigrationMode::try_from(3).is_err());
        for bits in 0..8 {
            assert_eq!(Services::from_bits(bits).map(Services::bits), Ok(bits));
        }
        assert!(Services::from_bits(8).is_err());
    }

    #[test]
    fn backup_write_flags_round_trip_and_reject_bad_combinations() {
        for bits in 0..16u8 {
            let atomic_alone = bits & (BACKUP_WRITE_ATOMIC | BACKUP_WRITE_RESERVE) != 0
                && bits & BACKUP_WRITE_OPEN == 0;
            match BackupWriteFlags::from_bits(bits) {
                Ok(flags) => {
                    assert!(!atomic_alone, "{bits:#b}");
                    assert_eq!(flags.bits(), Ok(bits));
                }
                Err(e) => {
                    assert!(atomic_alone, "{bits:#b}: {e}");
                    assert!(matches!(e, WireError::Malformed(_)));
                }
            }
        }
        for bits in [0x10u8, 0x80, 0xff] {
            assert!(matches!(
                BackupWriteFlags::from_bits(bits),
                Err(WireError::BadEnum { .. })
            ));
        }
        let atomic_alone = BackupWriteFlags {
            atomic: true,
            ..BackupWriteFlags::WRITE
        };
        assert!(atomic_alone.bits().is_err());
        assert_eq!(BackupWriteFlags::OPEN.bits(), Ok(BACKUP_WRITE_OPEN));
        assert_eq!(BackupWriteFlags::CLOSE.bits(), Ok(BACKUP_WRITE_CLOSE));
    }
}

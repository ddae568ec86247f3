//! Small typed fields of message bodies: enumerations and bit sets that are a single
//! integer on the wire. Each decodes strictly (unknown values are errors), so every
//! value that decodes re-encodes to the same bytes.

use crate::error::WireError;

/// The number type of an increment (`u8`: 0 = i64, 1 = f64). The delta and the new
/// value travel as 8 little-endian bytes of that type.
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

/// Bit of [`Services::master`] in the services word.
pub const SERVICE_MASTER: u32 = 1;
/// Bit of [`Services::backup`] in the services word.
pub const SERVICE_BACKUP: u32 = 2;

/// The services a server runs (`u32` bit set: bit 0 master, bit 1 backup).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Services {
    pub master: bool,
    pub backup: bool,
}

impl Services {
    /// A server running both a master and a backup (the usual storage server).
    pub const BOTH: Services = Services {
        master: true,
        backup: true,
    };

    /// The bit set as sent on the wire.
    pub fn bits(self) -> u32 {
        (if self.master { SERVICE_MASTER } else { 0 })
            | (if self.backup { SERVICE_BACKUP } else { 0 })
    }

    /// Services from their wire form; unknown bits are an error, so a service this
    /// version does not know is never silently dropped from the server list.
    pub fn from_bits(bits: u32) -> Result<Self, WireError> {
        if bits & !(SERVICE_MASTER | SERVICE_BACKUP) != 0 {
            return Err(WireError::BadEnum {
                field: "services",
                value: u64::from(bits),
            });
        }
        Ok(Services {
            master: bits & SERVICE_MASTER != 0,
            backup: bits & SERVICE_BACKUP != 0,
        })
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
        for bits in 0..4 {
            assert_eq!(Services::from_bits(bits).map(Services::bits), Ok(bits));
        }
        assert!(Services::from_bits(4).is_err());
    }
}

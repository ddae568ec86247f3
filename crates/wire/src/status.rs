//! Status codes: the outcome a response reports in its header (docs/design.md §6). They are
//! few and reused across opcodes, so a client's retry logic needs only one table.

use crate::error::WireError;

/// The outcome of a request, as carried in the header's status field (`u16` LE).
/// Requests always carry [`Status::Ok`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    /// The request succeeded; the body is the opcode's OK response.
    Ok = 0,
    /// The object does not exist (also: a reject rule required it to exist). From a
    /// backup: it holds no (offerable) replica of that segment.
    ObjectDoesntExist = 1,
    /// A reject rule required the object not to exist.
    ObjectExists = 2,
    /// A version reject rule failed; the body carries the current version.
    WrongVersion = 3,
    /// The server does not own the tablet of that key: refresh the tablet map.
    UnknownTablet = 4,
    /// Try again after the delay in the body (e.g. the log is being cleaned).
    Retry = 5,
    /// The server is not (or no longer) an UP member of the cluster.
    ServerNotUp = 6,
    /// The request was malformed (from a backup also: a write that would leave a gap
    /// or end past the segment, a write to a closed replica, or no backup service).
    InvalidRequest = 7,
    /// A key, value, string, item count or frame exceeds its limit.
    TooLarge = 8,
    /// The server is out of memory for this request (not retryable as is). From a
    /// backup: every open-replica buffer or every frame is in use, so the master
    /// places the replica on another backup (R§7.1).
    NoSpace = 9,
    /// No table has that name or id.
    TableDoesntExist = 10,
    /// A bug or unexpected failure on the server.
    Internal = 11,
    /// An increment of a value that is not a number in decimal text
    /// ([`crate::counter`]).
    NotNumeric = 12,
    /// An increment overflowed (i64) or produced a non-finite float.
    Overflow = 13,
    /// The server does not know the request's opcode.
    UnknownOpcode = 14,
    /// An exactly-once RPC (RIFL) whose completion record is gone: its sequence
    /// number is below the window the client acknowledged, or its lease expired.
    /// Its outcome cannot be told; it was not executed now.
    StaleRpc = 15,
    /// The client lease is not known to the coordinator (never opened, or expired
    /// and forgotten): open a new one.
    UnknownLease = 16,
}

impl Status {
    /// Every status, in code order (for tests and tables).
    pub const ALL: [Status; 17] = [
        Status::Ok,
        Status::ObjectDoesntExist,
        Status::ObjectExists,
        Status::WrongVersion,
        Status::UnknownTablet,
        Status::Retry,
        Status::ServerNotUp,
        Status::InvalidRequest,
        Status::TooLarge,
        Status::NoSpace,
        Status::TableDoesntExist,
        Status::Internal,
        Status::NotNumeric,
        Status::Overflow,
        Status::UnknownOpcode,
        Status::StaleRpc,
        Status::UnknownLease,
    ];

    /// The code sent on the wire.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The name used in logs and documentation, e.g. `OBJECT_DOESNT_EXIST`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::ObjectDoesntExist => "OBJECT_DOESNT_EXIST",
            Status::ObjectExists => "OBJECT_EXISTS",
            Status::WrongVersion => "WRONG_VERSION",
            Status::UnknownTablet => "UNKNOWN_TABLET",
            Status::Retry => "RETRY",
            Status::ServerNotUp => "SERVER_NOT_UP",
            Status::InvalidRequest => "INVALID_REQUEST",
            Status::TooLarge => "TOO_LARGE",
            Status::NoSpace => "NO_SPACE",
            Status::TableDoesntExist => "TABLE_DOESNT_EXIST",
            Status::Internal => "INTERNAL",
            Status::NotNumeric => "NOT_NUMERIC",
            Status::Overflow => "OVERFLOW",
            Status::UnknownOpcode => "UNKNOWN_OPCODE",
            Status::StaleRpc => "STALE_RPC",
            Status::UnknownLease => "UNKNOWN_LEASE",
        }
    }
}

impl TryFrom<u16> for Status {
    type Error = WireError;

    fn try_from(code: u16) -> Result<Self, WireError> {
        // `ALL` is in code order, so the code is the index.
        Status::ALL
            .get(usize::from(code))
            .copied()
            .ok_or(WireError::UnknownStatus(code))
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

// The mapping lives beside `Status`, so that `error.rs` needs nothing from here.
impl WireError {
    /// The status a server answers a request with when decoding it failed this way.
    pub fn status(&self) -> Status {
        match self {
            WireError::FrameTooLarge(_)
            | WireError::KeyTooLarge(_)
            | WireError::ValueTooLarge(_)
            | WireError::ReplicaTooLarge(_)
            | WireError::StringTooLarge(_)
            | WireError::FailureDomainTooLarge(_)
            | WireError::TooManyItems(_) => Status::TooLarge,
            WireError::UnknownOpcode(_) => Status::UnknownOpcode,
            _ => Status::InvalidRequest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_match_their_index() {
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(usize::from(s.code()), i);
            assert_eq!(Status::try_from(s.code()), Ok(*s));
        }
        assert_eq!(Status::try_from(17), Err(WireError::UnknownStatus(17)));
        assert_eq!(
            Status::try_from(u16::MAX),
            Err(WireError::UnknownStatus(u16::MAX))
        );
    }
}

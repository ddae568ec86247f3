//! Why a frame could not be decoded or a message could not be encoded.

/// A malformed frame (decoding) or a message that does not fit the format (encoding).
///
/// Every variant maps to the status a server answers with ([`WireError::status`]), so
/// a bad request always gets a clear reply instead of a dropped connection — except
/// for [`WireError::FrameTooLarge`] and [`WireError::FrameTooSmall`] found by
/// [`crate::frame_len`], after which the stream cannot be re-synchronised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The frame ends before a field it must contain.
    #[error("frame is truncated")]
    Truncated,
    /// The length prefix (bytes after it) exceeds [`crate::MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes exceeds the limit of {max} bytes", max = crate::MAX_FRAME_BYTES)]
    FrameTooLarge(usize),
    /// The length prefix is shorter than the header.
    #[error("frame of {0} bytes is shorter than the {h}-byte header", h = crate::HEADER_BYTES)]
    FrameTooSmall(usize),
    /// The opcode is not one this version knows.
    #[error("unknown opcode {0}")]
    UnknownOpcode(u16),
    /// The status is not one this version knows.
    #[error("unknown status {0}")]
    UnknownStatus(u16),
    /// The flags hold bits this version does not know, or the RESPONSE bit is wrong
    /// for the direction (set on a request, clear on a response).
    #[error("bad flags {0:#x}")]
    BadFlags(u32),
    /// A key longer than [`crate::MAX_KEY_BYTES`] (only possible when encoding: the
    /// 16-bit length cannot say more).
    #[error("key of {0} bytes exceeds the limit of {max} bytes", max = crate::MAX_KEY_BYTES)]
    KeyTooLarge(usize),
    /// A value longer than [`crate::MAX_VALUE_BYTES`].
    #[error("value of {0} bytes exceeds the limit of {max} bytes", max = crate::MAX_VALUE_BYTES)]
    ValueTooLarge(usize),
    /// Replica bytes of a backup message longer than [`crate::MAX_REPLICA_BYTES`].
    #[error("replica bytes of {0} exceed the limit of {max} bytes", max = crate::MAX_REPLICA_BYTES)]
    ReplicaTooLarge(usize),
    /// A name, address or message longer than [`crate::MAX_STRING_BYTES`] (only
    /// possible when encoding).
    #[error("string of {0} bytes exceeds the limit of {max} bytes", max = crate::MAX_STRING_BYTES)]
    StringTooLarge(usize),
    /// A failure domain name longer than [`crate::MAX_FAILURE_DOMAIN_BYTES`]
    /// (encoding, or decoding a length field that says more).
    #[error("failure domain of {0} bytes exceeds the limit of {max} bytes", max = crate::MAX_FAILURE_DOMAIN_BYTES)]
    FailureDomainTooLarge(usize),
    /// A multi-operation with more than [`crate::MAX_MULTI_OPS`] items.
    #[error("{0} items exceed the limit of {max}", max = crate::MAX_MULTI_OPS)]
    TooManyItems(usize),
    /// A name, address or message that is not UTF-8.
    #[error("string is not valid UTF-8")]
    BadUtf8,
    /// A field holds a value outside its enumeration (or unknown bits of a bit set).
    #[error("bad value {value} in field {field}")]
    BadEnum { field: &'static str, value: u64 },
    /// Bytes left over after the last field of the body (or after the frame).
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// `encode_response` was given an OK body for another opcode than the header's.
    #[error("response body for opcode {body} under a header with opcode {header}")]
    OpcodeMismatch { header: u16, body: u16 },
    /// A combination of fields the format forbids, described in the message.
    #[error("malformed message: {0}")]
    Malformed(&'static str),
}

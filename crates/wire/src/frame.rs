//! The frame: length prefix and header, shared by every request and response.
//! Finding frame boundaries in a byte stream ([`frame_len`]) needs only the prefix, so
//! a transport can cut frames without knowing any body layout.

use crate::codec::{len_usize, Reader};
use crate::error::WireError;
use crate::opcode::Opcode;
use crate::status::Status;
use crate::{FLAG_RESPONSE, HEADER_BYTES, KNOWN_FLAGS, LEN_PREFIX_BYTES, MAX_FRAME_BYTES};

/// A frame header with every field checked: known opcode, known status, known flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    pub opcode: Opcode,
    pub status: Status,
    pub flags: u32,
    /// Chosen by the client, echoed by the server; matches a response to its request
    /// since many requests are in flight per connection and answered out of order.
    pub request_id: u64,
}

impl Header {
    /// Whether the frame is a response (flag bit 0).
    pub fn is_response(&self) -> bool {
        self.flags & FLAG_RESPONSE != 0
    }
}

/// A frame header as raw integers, nothing checked but the length prefix. A server
/// uses it to answer a frame it cannot decode (e.g. `UNKNOWN_OPCODE`) with the right
/// request id and opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawHeader {
    pub opcode: u16,
    pub status: u16,
    pub flags: u32,
    pub request_id: u64,
}

/// The total size (length prefix included) of the frame that starts `buf`, once `buf`
/// holds its length prefix; `None` while it holds fewer than [`LEN_PREFIX_BYTES`].
///
/// Errors when the prefix is below [`HEADER_BYTES`] or above [`MAX_FRAME_BYTES`]:
/// such a stream cannot be trusted to re-synchronise and should be closed.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    let Some(prefix) = buf.first_chunk::<LEN_PREFIX_BYTES>() else {
        return Ok(None);
    };
    let len = len_usize(u32::from_le_bytes(*prefix));
    if len < HEADER_BYTES {
        return Err(WireError::FrameTooSmall(len));
    }
    if len > MAX_FRAME_BYTES {
        return Err(WireError::FrameTooLarge(len));
    }
    Ok(Some(LEN_PREFIX_BYTES + len))
}

/// The raw header of the frame that starts `frame` (which may be longer or, past
/// the header, shorter than the frame). Checks only the length prefix.
pub fn decode_raw_header(frame: &[u8]) -> Result<RawHeader, WireError> {
    frame_len(frame)?.ok_or(WireError::Truncated)?;
    let mut r = Reader::new(frame.get(LEN_PREFIX_BYTES..).unwrap_or_default());
    Ok(RawHeader {
        opcode: r.u16()?,
        status: r.u16()?,
        flags: r.u32()?,
        request_id: r.u64()?,
    })
}

/// The checked header of the frame that starts `frame`: known opcode, status and
/// flag bits. Does not look at the body.
pub fn decode_header(frame: &[u8]) -> Result<Header, WireError> {
    let raw = decode_raw_header(frame)?;
    if raw.flags & !KNOWN_FLAGS != 0 {
        return Err(WireError::BadFlags(raw.flags));
    }
    Ok(Header {
        opcode: Opcode::try_from(raw.opcode)?,
        status: Status::try_from(raw.status)?,
        flags: raw.flags,
        request_id: raw.request_id,
    })
}

/// Splits one whole frame into its checked header and its body: the buffer must hold
/// exactly the frame its prefix announces.
pub(crate) fn split_frame(frame: &[u8]) -> Result<(Header, &[u8]), WireError> {
    let total = frame_len(frame)?.ok_or(WireError::Truncated)?;
    if frame.len() < total {
        return Err(WireError::Truncated);
    }
    if frame.len() > total {
        return Err(WireError::TrailingBytes(frame.len() - total));
    }
    let header = decode_header(frame)?;
    let body = frame
        .get(LEN_PREFIX_BYTES + HEADER_BYTES..)
        .ok_or(WireError::Truncated)?;
    Ok((header, body))
}

/// Appends a length prefix (a placeholder until [`end_frame`]) and a header; returns
/// where the frame starts in `out`.
pub(crate) fn begin_frame(
    out: &mut Vec<u8>,
    opcode: u16,
    status: Status,
    flags: u32,
    request_id: u64,
) -> usize {
    let start = out.len();
    out.reserve(LEN_PREFIX_BYTES + HEADER_BYTES);
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&opcode.to_le_bytes());
    out.extend_from_slice(&status.code().to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    start
}

/// Writes the length prefix of the frame begun at `start`, now that its body is
/// complete, plus `extra` bytes the caller promises to append afterwards.
pub(crate) fn end_frame(out: &mut [u8], start: usize, extra: usize) -> Result<(), WireError> {
    let len = out
        .len()
        .saturating_sub(start + LEN_PREFIX_BYTES)
        .saturating_add(extra);
    patch_u32(out, start, frame_len_field(len)?);
    Ok(())
}

/// The length prefix for a frame of `len` bytes after the prefix, if within the limit.
pub(crate) fn frame_len_field(len: usize) -> Result<u32, WireError> {
    match u32::try_from(len) {
        Ok(l) if len <= MAX_FRAME_BYTES => Ok(l),
        _ => Err(WireError::FrameTooLarge(len)),
    }
}

/// Overwrites four bytes at `at` (a placeholder written earlier by this crate).
pub(crate) fn patch_u32(out: &mut [u8], at: usize, v: u32) {
    if let Some(slot) = out.get_mut(at..at + 4) {
        slot.copy_from_slice(&v.to_le_bytes());
    }
}

/// Overwrites eight bytes at `at` (a placeholder written earlier by this crate).
pub(crate) fn patch_u64(out: &mut [u8], at: usize, v: u64) {
    if let Some(slot) = out.get_mut(at..at + 8) {
        slot.copy_from_slice(&v.to_le_bytes());
    }
}

/// Runs an encoder that appends one frame to `out`; if it fails, removes whatever it
/// appended, so a failed encode leaves `out` as it was.
pub(crate) fn atomically(
    out: &mut Vec<u8>,
    encode: impl FnOnce(&mut Vec<u8>) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let start = out.len();
    let result = encode(out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(len: u32) -> Vec<u8> {
        len.to_le_bytes().to_vec()
    }

    #[test]
    fn frame_len_needs_the_prefix_and_checks_its_range() {
        assert_eq!(frame_len(&[]), Ok(None));
        assert_eq!(frame_len(&[16, 0, 0]), Ok(None));
        assert_eq!(frame_len(&prefix(16)), Ok(Some(20)));
        assert_eq!(frame_len(&prefix(15)), Err(WireError::FrameTooSmall(15)));
        let max = MAX_FRAME_BYTES as u32;
        assert_eq!(frame_len(&prefix(max)), Ok(Some(MAX_FRAME_BYTES + 4)));
        assert_eq!(
            frame_len(&prefix(max + 1)),
            Err(WireError::FrameTooLarge(MAX_FRAME_BYTES + 1))
        );
        assert_eq!(
            frame_len(&prefix(u32::MAX)),
            Err(WireError::FrameTooLarge(u32::MAX as usize))
        );
    }

    #[test]
    fn header_fields_are_checked() {
        let mut frame = Vec::new();
        let start = begin_frame(&mut frame, 1, Status::Ok, FLAG_RESPONSE, 9);
        end_frame(&mut frame, start, 0).expect("small frame");
        let h = decode_header(&frame).expect("valid header");
        assert_eq!(h.opcode, Opcode::Ping);
        assert!(h.is_response());
        assert_eq!(h.request_id, 9);

        let mut bad = frame.clone();
        bad[8] |= 2; // flags: an unknown bit
        assert_eq!(
            decode_header(&bad),
            Err(WireError::BadFlags(FLAG_RESPONSE | 2))
        );
        let mut bad = frame.clone();
        bad[4] = 0; // opcode 0
        assert_eq!(decode_header(&bad), Err(WireError::UnknownOpcode(0)));
        let mut bad = frame.clone();
        bad[6] = 99; // status 99
        assert_eq!(decode_header(&bad), Err(WireError::UnknownStatus(99)));
        assert_eq!(decode_header(&frame[..19]), Err(WireError::Truncated));
    }
}

//! The primitive fields of a body: fixed little-endian integers and length-prefixed
//! byte strings, read from a borrowed buffer and appended to a `Vec`.
//!
//! Reading never panics: every read checks the bytes left first and reports
//! [`WireError::Truncated`]. Writing checks every limit *before* appending, so a
//! rejected field leaves nothing behind.

use crate::error::WireError;
use crate::rules::RejectRules;
use crate::status::Status;
use crate::{
    MAX_FAILURE_DOMAIN_BYTES, MAX_FRAME_BYTES, MAX_KEY_BYTES, MAX_REPLICA_BYTES, MAX_STRING_BYTES,
    MAX_VALUE_BYTES,
};

/// A cursor over the bytes of a body. Slices it returns borrow the underlying
/// buffer (zero-copy).
///
/// Nominally `pub` because the sealed list-item trait names it; the module is
/// private, so no one outside this crate can reach it.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { rest: buf }
    }

    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// The bytes not yet read, without consuming them.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.rest
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.rest.len() {
            return Err(WireError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        // `take` returned exactly N bytes, so the conversion cannot fail; mapping the
        // impossible error keeps this free of panics anyway.
        <[u8; N]>::try_from(self.take(N)?).map_err(|_| WireError::Truncated)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A `u8` that must be 0 or 1.
    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(WireError::BadEnum {
                field,
                value: u64::from(v),
            }),
        }
    }

    /// A key: `u16 LE len + bytes`. The length field cannot exceed `MAX_KEY_BYTES`.
    pub(crate) fn key(&mut self) -> Result<&'a [u8], WireError> {
        let len = self.u16()?;
        self.take(usize::from(len))
    }

    /// A value: `u32 LE len + bytes`, at most `MAX_VALUE_BYTES`. The limit is checked
    /// before the bytes, so an oversize value is reported as such even when the frame
    /// does not hold it.
    pub(crate) fn value(&mut self) -> Result<&'a [u8], WireError> {
        let len = len_usize(self.u32()?);
        if len > MAX_VALUE_BYTES {
            return Err(WireError::ValueTooLarge(len));
        }
        self.take(len)
    }

    /// Replica bytes of a backup message: `u32 LE len + bytes`, at most
    /// `MAX_REPLICA_BYTES`, the limit checked before the bytes (as for values).
    pub(crate) fn replica_bytes(&mut self) -> Result<&'a [u8], WireError> {
        let len = len_usize(self.u32()?);
        if len > MAX_REPLICA_BYTES {
            return Err(WireError::ReplicaTooLarge(len));
        }
        self.take(len)
    }

    /// A name, address or message: `u16 LE len + UTF-8 bytes`.
    pub(crate) fn string(&mut self) -> Result<&'a str, WireError> {
        let len = self.u16()?;
        let bytes = self.take(usize::from(len))?;
        std::str::from_utf8(bytes).map_err(|_| WireError::BadUtf8)
    }

    /// A failure domain name: `u16 LE len + UTF-8 bytes`, at most
    /// `MAX_FAILURE_DOMAIN_BYTES`, the limit checked before the bytes.
    pub(crate) fn failure_domain(&mut self) -> Result<&'a str, WireError> {
        let len = usize::from(self.u16()?);
        if len > MAX_FAILURE_DOMAIN_BYTES {
            return Err(WireError::FailureDomainTooLarge(len));
        }
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| WireError::BadUtf8)
    }

    /// A long text: `u32 LE len + UTF-8 bytes` (bounded only by the frame).
    pub(crate) fn long_string(&mut self) -> Result<&'a str, WireError> {
        let len = len_usize(self.u32()?);
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| WireError::BadUtf8)
    }

    pub(crate) fn rules(&mut self) -> Result<RejectRules, WireError> {
        let given_version = self.u64()?;
        let bits = self.u8()?;
        RejectRules::from_parts(given_version, bits)
    }

    pub(crate) fn status(&mut self) -> Result<Status, WireError> {
        Status::try_from(self.u16()?)
    }

    /// Ends the body: any byte left is an error, so one message has one encoding.
    pub(crate) fn finish(self) -> Result<(), WireError> {
        match self.rest.len() {
            0 => Ok(()),
            n => Err(WireError::TrailingBytes(n)),
        }
    }
}

/// A `u32` length as `usize`. Saturating keeps this panic-free on 16-bit targets; a
/// saturated length is far beyond every limit and fails the check that follows.
pub(crate) fn len_usize(len: u32) -> usize {
    usize::try_from(len).unwrap_or(usize::MAX)
}

pub(crate) fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

pub(crate) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_bool(out: &mut Vec<u8>, v: bool) {
    out.push(u8::from(v));
}

pub(crate) fn put_rules(out: &mut Vec<u8>, rules: &RejectRules) {
    put_u64(out, rules.given_version);
    put_u8(out, rules.bits());
}

pub(crate) fn put_status(out: &mut Vec<u8>, status: Status) {
    put_u16(out, status.code());
}

pub(crate) fn check_key(key: &[u8]) -> Result<u16, WireError> {
    match u16::try_from(key.len()) {
        Ok(len) if key.len() <= MAX_KEY_BYTES => Ok(len),
        _ => Err(WireError::KeyTooLarge(key.len())),
    }
}

pub(crate) fn put_key(out: &mut Vec<u8>, key: &[u8]) -> Result<(), WireError> {
    let len = check_key(key)?;
    put_u16(out, len);
    out.extend_from_slice(key);
    Ok(())
}

/// The `u32` length field of a value of `len` bytes, if within `MAX_VALUE_BYTES`.
pub(crate) fn check_value_len(len: usize) -> Result<u32, WireError> {
    match u32::try_from(len) {
        Ok(l) if len <= MAX_VALUE_BYTES => Ok(l),
        _ => Err(WireError::ValueTooLarge(len)),
    }
}

pub(crate) fn put_value(out: &mut Vec<u8>, value: &[u8]) -> Result<(), WireError> {
    put_u32(out, check_value_len(value.len())?);
    out.extend_from_slice(value);
    Ok(())
}

/// A value given as several slices (e.g. an object spanning seglets of the log),
/// written as one value without joining the slices first.
pub(crate) fn put_value_parts(out: &mut Vec<u8>, parts: &[&[u8]]) -> Result<(), WireError> {
    // Saturating addition: a sum that would overflow still fails the limit check
    // instead of wrapping around to a small length.
    let len = parts
        .iter()
        .fold(0usize, |acc, p| acc.saturating_add(p.len()));
    put_u32(out, check_value_len(len)?);
    for part in parts {
        out.extend_from_slice(part);
    }
    Ok(())
}

/// The `u32` length field of `len` replica bytes, if within `MAX_REPLICA_BYTES`.
pub(crate) fn check_replica_len(len: usize) -> Result<u32, WireError> {
    match u32::try_from(len) {
        Ok(l) if len <= MAX_REPLICA_BYTES => Ok(l),
        _ => Err(WireError::ReplicaTooLarge(len)),
    }
}

pub(crate) fn put_replica_bytes(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), WireError> {
    put_u32(out, check_replica_len(bytes.len())?);
    out.extend_from_slice(bytes);
    Ok(())
}

pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) -> Result<(), WireError> {
    match u16::try_from(s.len()) {
        Ok(len) if s.len() <= MAX_STRING_BYTES => {
            put_u16(out, len);
            out.extend_from_slice(s.as_bytes());
            Ok(())
        }
        _ => Err(WireError::StringTooLarge(s.len())),
    }
}

/// A failure domain name: a string of at most `MAX_FAILURE_DOMAIN_BYTES`.
pub(crate) fn put_failure_domain(out: &mut Vec<u8>, s: &str) -> Result<(), WireError> {
    if s.len() > MAX_FAILURE_DOMAIN_BYTES {
        return Err(WireError::FailureDomainTooLarge(s.len()));
    }
    put_string(out, s)
}

pub(crate) fn put_long_string(out: &mut Vec<u8>, s: &str) -> Result<(), WireError> {
    // A text longer than a frame can never be sent; refuse it before copying it.
    match u32::try_from(s.len()) {
        Ok(len) if s.len() <= MAX_FRAME_BYTES => {
            put_u32(out, len);
            out.extend_from_slice(s.as_bytes());
            Ok(())
        }
        _ => Err(WireError::FrameTooLarge(s.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_report_truncation_instead_of_panicking() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u32(), Err(WireError::Truncated));
        assert_eq!(r.u16(), Ok(0x0201));
        assert_eq!(r.u16(), Err(WireError::Truncated));
        assert_eq!(r.u8(), Ok(3));
        assert_eq!(r.u8(), Err(WireError::Truncated));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn oversize_value_is_reported_before_missing_bytes() {
        let len = (MAX_VALUE_BYTES as u32 + 1).to_le_bytes();
        assert_eq!(
            Reader::new(&len).value(),
            Err(WireError::ValueTooLarge(MAX_VALUE_BYTES + 1))
        );
    }

    #[test]
    fn oversize_replica_bytes_are_reported_before_missing_bytes() {
        let len = (MAX_REPLICA_BYTES as u32 + 1).to_le_bytes();
        assert_eq!(
            Reader::new(&len).replica_bytes(),
            Err(WireError::ReplicaTooLarge(MAX_REPLICA_BYTES + 1))
        );
        let mut out = Vec::new();
        let bytes = vec![0; MAX_REPLICA_BYTES + 1];
        assert_eq!(
            put_replica_bytes(&mut out, &bytes),
            Err(WireError::ReplicaTooLarge(MAX_REPLICA_BYTES + 1))
        );
        assert!(out.is_empty());
        put_replica_bytes(&mut out, &bytes[..MAX_REPLICA_BYTES]).expect("a whole segment fits");
        assert_eq!(
            Reader::new(&out).replica_bytes().map(<[u8]>::len),
            Ok(MAX_REPLICA_BYTES)
        );
    }

    #[test]
    fn failure_domains_are_bounded_both_ways() {
        let mut out = Vec::new();
        let longest = "r".repeat(MAX_FAILURE_DOMAIN_BYTES);
        put_failure_domain(&mut out, &longest).expect("the longest domain fits");
        put_failure_domain(&mut out, "").expect("the empty domain fits");
        let mut r = Reader::new(&out);
        assert_eq!(r.failure_domain(), Ok(longest.as_str()));
        assert_eq!(r.failure_domain(), Ok(""));
        assert_eq!(r.finish(), Ok(()));
        // A length field over the limit is refused before its bytes are looked at.
        let len = (MAX_FAILURE_DOMAIN_BYTES as u16 + 1).to_le_bytes();
        assert_eq!(
            Reader::new(&len).failure_domain(),
            Err(WireError::FailureDomainTooLarge(
                MAX_FAILURE_DOMAIN_BYTES + 1
            ))
        );
        assert_eq!(
            WireError::FailureDomainTooLarge(65).status(),
            Status::TooLarge
        );
    }

    #[test]
    fn rejected_fields_append_nothing() {
        let mut out = Vec::new();
        let key = vec![0; MAX_KEY_BYTES + 1];
        assert_eq!(
            put_key(&mut out, &key),
            Err(WireError::KeyTooLarge(MAX_KEY_BYTES + 1))
        );
        let value = vec![0; MAX_VALUE_BYTES + 1];
        assert_eq!(
            put_value(&mut out, &value),
            Err(WireError::ValueTooLarge(MAX_VALUE_BYTES + 1))
        );
        assert_eq!(
            put_value_parts(&mut out, &[&value[..10], &value[10..]]),
            Err(WireError::ValueTooLarge(MAX_VALUE_BYTES + 1))
        );
        let domain = "d".repeat(MAX_FAILURE_DOMAIN_BYTES + 1);
        assert_eq!(
            put_failure_domain(&mut out, &domain),
            Err(WireError::FailureDomainTooLarge(
                MAX_FAILURE_DOMAIN_BYTES + 1
            ))
        );
        let s = "x".repeat(MAX_STRING_BYTES + 1);
        assert_eq!(
            put_string(&mut out, &s),
            Err(WireError::StringTooLarge(MAX_STRING_BYTES + 1))
        );
        assert!(out.is_empty());
    }
}

//! Key expiry on the wire: what a write does to an object's expiry time, and
//! when a change of expiry applies (Redis 7's EXPIRE conditions). Shared by
//! the client, the master and the Redis front end, as the reject rules are.
//!
//! ```text
//! expiry change   tag u8: 0 keep | 1 clear | 2 at, followed by expires_at u64
//! condition       u8: 0 always | 1 NX | 2 XX | 3 GT | 4 LT | 5 XX and LT
//! ```
//!
//! Expiry times are absolute wall-clock milliseconds since the Unix epoch:
//! the master stores them in the object's log entry as they are, so a request
//! retried later or replayed by recovery means the same instant.

use crate::codec::{put_u64, put_u8, Reader};
use crate::error::WireError;

/// What a write does to the object's expiry time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExpiryChange {
    /// Keep the current object's expiry (`SET … KEEPTTL`); a new object never
    /// expires.
    Keep,
    /// The object never expires (a plain write).
    #[default]
    Clear,
    /// The object expires at this wall-clock time (ms since the Unix epoch).
    At(u64),
}

impl ExpiryChange {
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        match r.u8()? {
            0 => Ok(ExpiryChange::Keep),
            1 => Ok(ExpiryChange::Clear),
            2 => Ok(ExpiryChange::At(r.u64()?)),
            _ => Err(WireError::Malformed("unknown expiry change")),
        }
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        match *self {
            ExpiryChange::Keep => put_u8(out, 0),
            ExpiryChange::Clear => put_u8(out, 1),
            ExpiryChange::At(at) => {
                put_u8(out, 2);
                put_u64(out, at);
            }
        }
    }
}

/// When a change of expiry time applies (EXPIRE's NX/XX/GT/LT, Redis 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum ExpireCondition {
    /// Always.
    #[default]
    Always = 0,
    /// Only if the object has no expiry (NX).
    Nx = 1,
    /// Only if the object has an expiry (XX; PERSIST).
    Xx = 2,
    /// Only if the new expiry is later than the current one; no expiry counts
    /// as infinitely late (GT).
    Gt = 3,
    /// Only if the new expiry is earlier than the current one; no expiry
    /// counts as infinitely late (LT).
    Lt = 4,
    /// XX and LT together: only if the object has an expiry, later than the
    /// new one.
    XxLt = 5,
}

impl ExpireCondition {
    /// Whether an object expiring at `current` may get `new` (`None`: never).
    pub fn admits(self, current: Option<u64>, new: Option<u64>) -> bool {
        // No expiry is later than every time (Redis: a key without TTL has an
        // infinite one).
        let rank = |t: Option<u64>| t.map_or(u128::MAX, u128::from);
        match self {
            ExpireCondition::Always => true,
            ExpireCondition::Nx => current.is_none(),
            ExpireCondition::Xx => current.is_some(),
            ExpireCondition::Gt => rank(new) > rank(current),
            ExpireCondition::Lt => rank(new) < rank(current),
            ExpireCondition::XxLt => current.is_some() && rank(new) < rank(current),
        }
    }
}

impl TryFrom<u8> for ExpireCondition {
    type Error = WireError;

    fn try_from(b: u8) -> Result<Self, WireError> {
        Ok(match b {
            0 => ExpireCondition::Always,
            1 => ExpireCondition::Nx,
            2 => ExpireCondition::Xx,
            3 => ExpireCondition::Gt,
            4 => ExpireCondition::Lt,
            5 => ExpireCondition::XxLt,
            _ => return Err(WireError::Malformed("unknown expire condition")),
        })
    }
}

/// An optional expiry time: a presence byte, then the time when present.
pub(crate) fn read_optional_time(r: &mut Reader<'_>) -> Result<Option<u64>, WireError> {
    Ok(if r.bool("has expiry")? {
        Some(r.u64()?)
    } else {
        None
    })
}

/// Appends `t` as [`read_optional_time`] reads it.
pub(crate) fn put_optional_time(out: &mut Vec<u8>, t: Option<u64>) {
    put_u8(out, u8::from(t.is_some()));
    if let Some(t) = t {
        put_u64(out, t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_nx_only_without_expiry() {
        assert!(ExpireCondition::Nx.admits(None, Some(5)));
        assert!(!ExpireCondition::Nx.admits(Some(1), Some(5)));
    }

    #[test]
    fn admits_xx_only_with_expiry() {
        assert!(ExpireCondition::Xx.admits(Some(1), Some(5)));
        assert!(!ExpireCondition::Xx.admits(None, Some(5)));
    }

    #[test]
    fn admits_gt_treats_no_expiry_as_infinite() {
        assert!(ExpireCondition::Gt.admits(Some(1), Some(5)));
        assert!(!ExpireCondition::Gt.admits(Some(5), Some(5)));
        assert!(!ExpireCondition::Gt.admits(None, Some(5)));
    }

    #[test]
    fn admits_lt_treats_no_expiry_as_infinite() {
        assert!(ExpireCondition::Lt.admits(None, Some(5)));
        assert!(ExpireCondition::Lt.admits(Some(9), Some(5)));
        assert!(!ExpireCondition::Lt.admits(Some(5), Some(5)));
    }

    #[test]
    fn admits_xx_lt_needs_an_earlier_new_expiry() {
        assert!(ExpireCondition::XxLt.admits(Some(9), Some(5)));
        assert!(!ExpireCondition::XxLt.admits(None, Some(5)));
        assert!(!ExpireCondition::XxLt.admits(Some(5), Some(9)));
    }

    #[test]
    fn try_from_round_trips_every_condition() {
        for c in [
            ExpireCondition::Always,
            ExpireCondition::Nx,
            ExpireCondition::Xx,
            ExpireCondition::Gt,
            ExpireCondition::Lt,
            ExpireCondition::XxLt,
        ] {
            assert_eq!(ExpireCondition::try_from(c as u8), Ok(c));
        }
        assert!(ExpireCondition::try_from(6).is_err());
    }
}

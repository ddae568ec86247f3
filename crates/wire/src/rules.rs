//! Reject rules on the wire: the conditions under which a write, remove or increment
//! must not happen (R§3, Fig. 2: conditional operations). The server converts them to
//! the master's own `RejectRules`; `wire` does not depend on the master.

use crate::error::WireError;

/// Bit of [`WireRejectRules::doesnt_exist`] in the rules byte.
pub const RULE_DOESNT_EXIST: u8 = 1;
/// Bit of [`WireRejectRules::exists`] in the rules byte.
pub const RULE_EXISTS: u8 = 2;
/// Bit of [`WireRejectRules::version_le_given`] in the rules byte.
pub const RULE_VERSION_LE_GIVEN: u8 = 4;
/// Bit of [`WireRejectRules::version_ne_given`] in the rules byte.
pub const RULE_VERSION_NE_GIVEN: u8 = 8;
/// Bit of [`WireRejectRules::version_gt_given`] in the rules byte.
pub const RULE_VERSION_GT_GIVEN: u8 = 16;
const KNOWN_RULE_BITS: u8 = RULE_DOESNT_EXIST
    | RULE_EXISTS
    | RULE_VERSION_LE_GIVEN
    | RULE_VERSION_NE_GIVEN
    | RULE_VERSION_GT_GIVEN;

/// Bytes of encoded rules: `u64 LE given_version`, then `u8` rule bits.
pub const RULES_BYTES: usize = 9;

/// Conditions that make an operation fail instead of happening; the default rejects
/// nothing. Same meaning as the master's `RejectRules`: version rules apply only to
/// an object that exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WireRejectRules {
    /// The version the version rules compare against.
    pub given_version: u64,
    /// Reject if the object does not exist.
    pub doesnt_exist: bool,
    /// Reject if the object exists.
    pub exists: bool,
    /// Reject if the object's version ≤ `given_version`.
    pub version_le_given: bool,
    /// Reject if the object's version ≠ `given_version`.
    pub version_ne_given: bool,
    /// Reject if the object's version > `given_version`.
    pub version_gt_given: bool,
}

impl WireRejectRules {
    /// The rule bits as sent on the wire.
    pub fn bits(&self) -> u8 {
        let mut bits = 0;
        for (set, bit) in [
            (self.doesnt_exist, RULE_DOESNT_EXIST),
            (self.exists, RULE_EXISTS),
            (self.version_le_given, RULE_VERSION_LE_GIVEN),
            (self.version_ne_given, RULE_VERSION_NE_GIVEN),
            (self.version_gt_given, RULE_VERSION_GT_GIVEN),
        ] {
            if set {
                bits |= bit;
            }
        }
        bits
    }

    /// Rules from their wire form; unknown bits are an error, because silently
    /// ignoring a condition the sender relies on would make a conditional write
    /// unconditional.
    pub fn from_parts(given_version: u64, bits: u8) -> Result<Self, WireError> {
        if bits & !KNOWN_RULE_BITS != 0 {
            return Err(WireError::BadEnum {
                field: "reject rules",
                value: u64::from(bits),
            });
        }
        Ok(Self {
            given_version,
            doesnt_exist: bits & RULE_DOESNT_EXIST != 0,
            exists: bits & RULE_EXISTS != 0,
            version_le_given: bits & RULE_VERSION_LE_GIVEN != 0,
            version_ne_given: bits & RULE_VERSION_NE_GIVEN != 0,
            version_gt_given: bits & RULE_VERSION_GT_GIVEN != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_bit_pattern_round_trips() {
        for bits in 0..=KNOWN_RULE_BITS {
            let rules = WireRejectRules::from_parts(7, bits).expect("known bits");
            assert_eq!(rules.bits(), bits);
            assert_eq!(rules.given_version, 7);
        }
    }

    #[test]
    fn unknown_bits_are_rejected() {
        for bits in [32u8, 64, 128, 0xff] {
            assert!(matches!(
                WireRejectRules::from_parts(0, bits),
                Err(WireError::BadEnum { .. })
            ));
        }
    }
}

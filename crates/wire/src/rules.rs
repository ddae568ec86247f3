//! Reject rules: the conditions under which a read, write, remove or increment must
//! fail instead of happening (R§3, Fig. 2: conditional operations). They make
//! compare-and-swap, create-only and update-only operations out of the ordinary ones.
//!
//! This is the one definition: the client sends it, the wire carries it as
//! `u64 given_version + u8 bits`, the master decides with [`RejectRules::check`],
//! and the history checker models the same decision. It lives here, the lowest crate
//! all of them depend on, so the decision cannot drift between copies.

use crate::error::WireError;

/// Bit of [`RejectRules::doesnt_exist`] in the rules byte.
pub const RULE_DOESNT_EXIST: u8 = 1;
/// Bit of [`RejectRules::exists`] in the rules byte.
pub const RULE_EXISTS: u8 = 2;
/// Bit of [`RejectRules::version_le_given`] in the rules byte.
pub const RULE_VERSION_LE_GIVEN: u8 = 4;
/// Bit of [`RejectRules::version_ne_given`] in the rules byte.
pub const RULE_VERSION_NE_GIVEN: u8 = 8;
/// Bit of [`RejectRules::version_gt_given`] in the rules byte.
pub const RULE_VERSION_GT_GIVEN: u8 = 16;
const KNOWN_RULE_BITS: u8 = RULE_DOESNT_EXIST
    | RULE_EXISTS
    | RULE_VERSION_LE_GIVEN
    | RULE_VERSION_NE_GIVEN
    | RULE_VERSION_GT_GIVEN;

/// Bytes of encoded rules: `u64 LE given_version`, then `u8` rule bits.
pub const RULES_BYTES: usize = 9;

/// Conditions that make an operation fail instead of happening; the default rejects
/// nothing. Version rules apply only to an object that exists (as in RAMCloud).
///
/// ```
/// use ramstore_wire::RejectRules;
/// // Compare-and-swap: succeed only if the object still has version 7.
/// let cas = RejectRules::version_must_equal(7);
/// assert!(cas.version_ne_given && cas.doesnt_exist);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RejectRules {
    /// The version the version rules compare against.
    pub given_version: u64,
    /// Reject if the object does not exist ("object must exist").
    pub doesnt_exist: bool,
    /// Reject if the object exists ("object must not exist").
    pub exists: bool,
    /// Reject if the object's version ≤ `given_version`.
    pub version_le_given: bool,
    /// Reject if the object's version ≠ `given_version` ("version must equal").
    pub version_ne_given: bool,
    /// Reject if the object's version > `given_version` ("version must be ≤").
    pub version_gt_given: bool,
}

/// Why reject rules refused an operation ([`RejectRules::check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Refusal {
    /// The object does not exist and a rule required it.
    DoesntExist,
    /// The object exists and a rule required it not to.
    Exists,
    /// A version rule refused; the object's version at that moment.
    WrongVersion { current: u64 },
}

impl RejectRules {
    /// Only succeed if the object exists (update-only).
    ///
    /// ```
    /// # use ramstore_wire::RejectRules;
    /// assert!(RejectRules::must_exist().doesnt_exist);
    /// ```
    pub fn must_exist() -> Self {
        Self {
            doesnt_exist: true,
            ..Self::default()
        }
    }

    /// Only succeed if the object does not exist (create-only).
    ///
    /// ```
    /// # use ramstore_wire::RejectRules;
    /// assert!(RejectRules::must_not_exist().exists);
    /// ```
    pub fn must_not_exist() -> Self {
        Self {
            exists: true,
            ..Self::default()
        }
    }

    /// Only succeed if the object exists with exactly `version` (compare-and-swap).
    ///
    /// ```
    /// # use ramstore_wire::RejectRules;
    /// assert_eq!(RejectRules::version_must_equal(3).given_version, 3);
    /// ```
    pub fn version_must_equal(version: u64) -> Self {
        Self {
            given_version: version,
            doesnt_exist: true,
            version_ne_given: true,
            ..Self::default()
        }
    }

    /// Only succeed if the object does not exist or has a version ≤ `version`.
    ///
    /// ```
    /// # use ramstore_wire::RejectRules;
    /// assert!(RejectRules::version_must_be_at_most(3).version_gt_given);
    /// ```
    pub fn version_must_be_at_most(version: u64) -> Self {
        Self {
            given_version: version,
            version_gt_given: true,
            ..Self::default()
        }
    }

    /// The decision for an object whose current version is `current` (`None`: no
    /// such object). Version rules apply only to an object that exists, as in
    /// RAMCloud; the existence rules are tested first.
    pub fn check(&self, current: Option<u64>) -> Result<(), Refusal> {
        match current {
            None if self.doesnt_exist => Err(Refusal::DoesntExist),
            None => Ok(()),
            Some(_) if self.exists => Err(Refusal::Exists),
            Some(v) if self.version_le_given && v <= self.given_version => {
                Err(Refusal::WrongVersion { current: v })
            }
            Some(v) if self.version_ne_given && v != self.given_version => {
                Err(Refusal::WrongVersion { current: v })
            }
            Some(v) if self.version_gt_given && v > self.given_version => {
                Err(Refusal::WrongVersion { current: v })
            }
            Some(_) => Ok(()),
        }
    }

    /// Whether no rule can refuse.
    pub fn is_unconditional(&self) -> bool {
        self.bits() == 0
    }

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
    fn from_parts_every_known_bit_pattern_round_trips() {
        for bits in 0..=KNOWN_RULE_BITS {
            let rules = RejectRules::from_parts(7, bits).expect("known bits");
            assert_eq!(rules.bits(), bits);
            assert_eq!(rules.given_version, 7);
        }
    }

    #[test]
    fn from_parts_unknown_bits_are_rejected() {
        for bits in [32u8, 64, 128, 0xff] {
            assert!(matches!(
                RejectRules::from_parts(0, bits),
                Err(WireError::BadEnum { .. })
            ));
        }
    }

    #[test]
    fn bits_constructors_map_to_the_wire_bits() {
        assert_eq!(RejectRules::default().bits(), 0);
        assert_eq!(RejectRules::must_exist().bits(), RULE_DOESNT_EXIST);
        assert_eq!(RejectRules::must_not_exist().bits(), RULE_EXISTS);
        assert_eq!(
            RejectRules::version_must_equal(4).bits(),
            RULE_DOESNT_EXIST | RULE_VERSION_NE_GIVEN
        );
        assert_eq!(
            RejectRules::version_must_be_at_most(4).bits(),
            RULE_VERSION_GT_GIVEN
        );
        assert_eq!(RejectRules::version_must_equal(4).given_version, 4);
    }

    #[test]
    fn is_unconditional_only_without_rules() {
        assert!(RejectRules::default().is_unconditional());
        assert!(RejectRules {
            given_version: 9,
            ..RejectRules::default()
        }
        .is_unconditional());
        assert!(!RejectRules::must_exist().is_unconditional());
        assert!(!RejectRules::version_must_be_at_most(1).is_unconditional());
    }

    #[test]
    fn check_default_accepts_everything() {
        assert_eq!(RejectRules::default().check(None), Ok(()));
        assert_eq!(RejectRules::default().check(Some(7)), Ok(()));
    }

    #[test]
    fn check_existence_rules() {
        assert_eq!(
            RejectRules::must_exist().check(None),
            Err(Refusal::DoesntExist)
        );
        assert_eq!(RejectRules::must_exist().check(Some(1)), Ok(()));
        assert_eq!(
            RejectRules::must_not_exist().check(Some(1)),
            Err(Refusal::Exists)
        );
        assert_eq!(RejectRules::must_not_exist().check(None), Ok(()));
    }

    #[test]
    fn check_version_rules() {
        let eq = RejectRules::version_must_equal(5);
        assert_eq!(eq.check(Some(5)), Ok(()));
        assert_eq!(eq.check(Some(6)), Err(Refusal::WrongVersion { current: 6 }));
        assert_eq!(eq.check(None), Err(Refusal::DoesntExist));
        let le = RejectRules::version_must_be_at_most(5);
        assert_eq!(le.check(Some(5)), Ok(()));
        assert_eq!(le.check(Some(6)), Err(Refusal::WrongVersion { current: 6 }));
        assert_eq!(le.check(None), Ok(()));
        let newer = RejectRules {
            given_version: 5,
            version_le_given: true,
            ..Default::default()
        };
        assert_eq!(
            newer.check(Some(5)),
            Err(Refusal::WrongVersion { current: 5 })
        );
        assert_eq!(newer.check(Some(6)), Ok(()));
    }

    #[test]
    fn check_exists_rule_wins_over_version_rules() {
        // Existence is tested before versions, so an object that exists with the
        // given version still fails a create-only rule as "exists".
        let both = RejectRules {
            exists: true,
            ..RejectRules::version_must_equal(3)
        };
        assert_eq!(both.check(Some(3)), Err(Refusal::Exists));
    }
}

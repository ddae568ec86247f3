//! Reject rules: conditions under which a write, remove, read or increment must fail
//! instead of happening (R§3, Fig. 2: conditional operations). They make
//! compare-and-swap, create-only and update-only operations out of the ordinary ones.

use ramstore_wire::WireRejectRules;

/// Conditions that make an operation fail instead of happening; the default rejects
/// nothing. Version rules apply only to an object that exists (as in RAMCloud).
///
/// ```
/// use ramstore_client::RejectRules;
/// // Compare-and-swap: succeed only if the object still has version 7.
/// let cas = RejectRules::version_must_equal(7);
/// assert!(cas.version_ne_given && cas.doesnt_exist);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
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

impl RejectRules {
    /// Only succeed if the object exists (update-only).
    ///
    /// ```
    /// # use ramstore_client::RejectRules;
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
    /// # use ramstore_client::RejectRules;
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
    /// # use ramstore_client::RejectRules;
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
    /// # use ramstore_client::RejectRules;
    /// assert!(RejectRules::version_must_be_at_most(3).version_gt_given);
    /// ```
    pub fn version_must_be_at_most(version: u64) -> Self {
        Self {
            given_version: version,
            version_gt_given: true,
            ..Self::default()
        }
    }
}

impl From<RejectRules> for WireRejectRules {
    fn from(r: RejectRules) -> Self {
        WireRejectRules {
            given_version: r.given_version,
            doesnt_exist: r.doesnt_exist,
            exists: r.exists,
            version_le_given: r.version_le_given,
            version_ne_given: r.version_ne_given,
            version_gt_given: r.version_gt_given,
        }
    }
}

impl From<&RejectRules> for WireRejectRules {
    fn from(r: &RejectRules) -> Self {
        (*r).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_map_to_the_wire_bits() {
        use ramstore_wire::{
            RULE_DOESNT_EXIST, RULE_EXISTS, RULE_VERSION_GT_GIVEN, RULE_VERSION_NE_GIVEN,
        };
        let bits = |r: RejectRules| WireRejectRules::from(r).bits();
        assert_eq!(bits(RejectRules::default()), 0);
        assert_eq!(bits(RejectRules::must_exist()), RULE_DOESNT_EXIST);
        assert_eq!(bits(RejectRules::must_not_exist()), RULE_EXISTS);
        assert_eq!(
            bits(RejectRules::version_must_equal(4)),
            RULE_DOESNT_EXIST | RULE_VERSION_NE_GIVEN
        );
        assert_eq!(
            bits(RejectRules::version_must_be_at_most(4)),
            RULE_VERSION_GT_GIVEN
        );
        assert_eq!(
            WireRejectRules::from(RejectRules::version_must_equal(4)).given_version,
            4
        );
    }
}

//! Reject rules: the conditions under which a write or delete must not happen
//! (R§3, Fig. 2: conditional operations). They make compare-and-swap, create-only and
//! update-only operations out of the ordinary write and delete.

use crate::error::WriteError;

/// Conditions that make a write, delete or increment fail instead of happening.
/// The default rejects nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    /// Only succeed if the object exists.
    pub fn must_exist() -> Self {
        Self {
            doesnt_exist: true,
            ..Self::default()
        }
    }

    /// Only succeed if the object does not exist (create).
    pub fn must_not_exist() -> Self {
        Self {
            exists: true,
            ..Self::default()
        }
    }

    /// Only succeed if the object exists with exactly `version` (compare-and-swap).
    pub fn version_must_equal(version: u64) -> Self {
        Self {
            given_version: version,
            doesnt_exist: true,
            version_ne_given: true,
            ..Self::default()
        }
    }

    /// Only succeed if the object does not exist or has a version ≤ `version`.
    pub fn version_must_be_at_most(version: u64) -> Self {
        Self {
            given_version: version,
            version_gt_given: true,
            ..Self::default()
        }
    }

    /// Checks the rules against the current version (`None`: no such object).
    /// Version rules apply only to an object that exists, as in RAMCloud.
    pub fn check(&self, current: Option<u64>) -> Result<(), WriteError> {
        match current {
            None if self.doesnt_exist => Err(WriteError::ObjectDoesntExist),
            None => Ok(()),
            Some(_) if self.exists => Err(WriteError::ObjectExists),
            Some(v) if self.version_le_given && v <= self.given_version => {
                Err(WriteError::WrongVersion { current: v })
            }
            Some(v) if self.version_ne_given && v != self.given_version => {
                Err(WriteError::WrongVersion { current: v })
            }
            Some(v) if self.version_gt_given && v > self.given_version => {
                Err(WriteError::WrongVersion { current: v })
            }
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_default_accepts_everything() {
        assert_eq!(RejectRules::default().check(None), Ok(()));
        assert_eq!(RejectRules::default().check(Some(7)), Ok(()));
    }

    #[test]
    fn check_existence_rules() {
        assert_eq!(
            RejectRules::must_exist().check(None),
            Err(WriteError::ObjectDoesntExist)
        );
        assert_eq!(RejectRules::must_exist().check(Some(1)), Ok(()));
        assert_eq!(
            RejectRules::must_not_exist().check(Some(1)),
            Err(WriteError::ObjectExists)
        );
        assert_eq!(RejectRules::must_not_exist().check(None), Ok(()));
    }

    #[test]
    fn check_version_rules() {
        let eq = RejectRules::version_must_equal(5);
        assert_eq!(eq.check(Some(5)), Ok(()));
        assert_eq!(
            eq.check(Some(6)),
            Err(WriteError::WrongVersion { current: 6 })
        );
        assert_eq!(eq.check(None), Err(WriteError::ObjectDoesntExist));
        let le = RejectRules::version_must_be_at_most(5);
        assert_eq!(le.check(Some(5)), Ok(()));
        assert_eq!(
            le.check(Some(6)),
            Err(WriteError::WrongVersion { current: 6 })
        );
        assert_eq!(le.check(None), Ok(()));
        let newer = RejectRules {
            given_version: 5,
            version_le_given: true,
            ..Default::default()
        };
        assert_eq!(
            newer.check(Some(5)),
            Err(WriteError::WrongVersion { current: 5 })
        );
        assert_eq!(newer.check(Some(6)), Ok(()));
    }
}

//! Errors of the object operations, one enum per family. Each variant is an outcome a
//! caller must handle; `NoSpace` is the only retryable one.

/// Why a read (or enumeration) returned no object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// This master does not own the tablet holding the key (or cursor).
    #[error("unknown tablet: this master does not own that key")]
    UnknownTablet,
    /// No object with that key exists.
    #[error("object doesn't exist")]
    ObjectDoesntExist,
    /// The key is longer than the largest key ever stored.
    #[error("key of {0} bytes is longer than the limit of {max} bytes", max = ramstore_log::MAX_KEY_BYTES)]
    KeyTooLarge(usize),
    /// The key's tablet is migrating in (K§2.3): the migration's gate decides
    /// whether the key's record has arrived ([`crate::migration`]).
    #[error("the tablet is being migrated to this master")]
    Migrating,
    /// An exactly-once RPC whose completion record is gone (acknowledged by its
    /// client, or its lease expired; RIFL §4.2): not executed.
    #[error("stale exactly-once RPC: its completion record is gone")]
    StaleRpc,
    /// An exactly-once RPC that another request is executing now (retryable).
    #[error("the same exactly-once RPC is being executed now; retry")]
    RpcInProgress,
    /// A completion record that cannot be encoded (a bug: outcomes are small).
    #[error("completion record too large")]
    TooLargeRecord,
}

impl From<crate::tablets::Refused> for ReadError {
    fn from(r: crate::tablets::Refused) -> Self {
        match r {
            crate::tablets::Refused::NotServing => ReadError::UnknownTablet,
            crate::tablets::Refused::Migrating => ReadError::Migrating,
        }
    }
}

impl From<crate::tablets::Refused> for WriteError {
    fn from(r: crate::tablets::Refused) -> Self {
        match r {
            crate::tablets::Refused::NotServing => WriteError::UnknownTablet,
            crate::tablets::Refused::Migrating => WriteError::Migrating,
        }
    }
}

/// Why a write, delete or increment did not happen. Nothing was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    #[error("unknown tablet: this master does not own that key")]
    UnknownTablet,
    /// A reject rule required the object to exist.
    #[error("object doesn't exist")]
    ObjectDoesntExist,
    /// A reject rule required the object not to exist.
    #[error("object exists")]
    ObjectExists,
    /// A version reject rule failed; `current` is the object's version.
    #[error("wrong version: the object's version is {current}")]
    WrongVersion { current: u64 },
    #[error("key of {0} bytes is longer than the limit of {max} bytes", max = ramstore_log::MAX_KEY_BYTES)]
    KeyTooLarge(usize),
    #[error("value of {0} bytes is longer than the limit")]
    ValueTooLarge(usize),
    /// Increment of a value that is not a number in decimal text (the value's
    /// length is given; see `ramstore_wire::counter` for the form).
    #[error("value of {0} bytes is not a number in decimal text, which an increment needs")]
    NotNumeric(usize),
    /// Increment overflowed (i64) or produced a non-finite float.
    #[error("increment overflows the value")]
    Overflow,
    /// Log memory is full: retry after the cleaner has run (retryable).
    #[error("log memory is full; retry later")]
    NoSpace,
    /// As [`ReadError::Migrating`].
    #[error("the tablet is being migrated to this master")]
    Migrating,
    /// An exactly-once RPC whose completion record is gone (acknowledged by its
    /// client, or its lease expired; RIFL §4.2): not executed.
    #[error("stale exactly-once RPC: its completion record is gone")]
    StaleRpc,
    /// An exactly-once RPC that another request is executing now (retryable).
    #[error("the same exactly-once RPC is being executed now; retry")]
    RpcInProgress,
    /// An exactly-once RPC under a lease so old this master may have forgotten
    /// that it expired (`rifl::expired`): retryable once the coordinator says.
    #[error("the rpc's client lease is being checked with the coordinator; retry")]
    LeaseUnverified,
    /// A completion record that cannot be encoded (a bug: outcomes are small).
    #[error("completion record too large")]
    TooLargeRecord,
    /// A transaction holds the object locked between its prepare and its
    /// decision (SOSP'15 §6.2): retry shortly.
    #[error("the object is locked by a transaction being committed; retry")]
    ObjectLocked,
}

impl WriteError {
    /// Whether retrying the same operation later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            WriteError::NoSpace
                | WriteError::RpcInProgress
                | WriteError::LeaseUnverified
                | WriteError::ObjectLocked
        )
    }
}

/// A refusal by reject rules is answered as the matching error (R§3, Fig. 2).
impl From<ramstore_wire::Refusal> for WriteError {
    fn from(r: ramstore_wire::Refusal) -> Self {
        match r {
            ramstore_wire::Refusal::DoesntExist => WriteError::ObjectDoesntExist,
            ramstore_wire::Refusal::Exists => WriteError::ObjectExists,
            ramstore_wire::Refusal::WrongVersion { current } => {
                WriteError::WrongVersion { current }
            }
        }
    }
}

impl From<ramstore_log::AppendError> for WriteError {
    fn from(e: ramstore_log::AppendError) -> Self {
        match e {
            ramstore_log::AppendError::TooLarge(n) => WriteError::ValueTooLarge(n),
            _ => WriteError::NoSpace,
        }
    }
}

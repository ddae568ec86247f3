//! The errors a caller sees, and how every status a server can answer is sorted into
//! "the caller must handle this" (a [`ClientError`]) or "retry inside" (an
//! [`Outcome`] the retry loops act on, R§11.4).

use std::time::Duration;

use ramstore_wire::{ErrorBody, Status, WireError};

/// An outcome the caller must handle. Everything else (tablet moved, server not up,
/// retry-later, lost connections) is retried inside the client until the
/// operation deadline ([`crate::ClientOptions::operation_deadline`]); a full log
/// only for [`crate::ClientOptions::no_space_patience`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The object does not exist (a read, or a reject rule that required it).
    #[error("object does not exist")]
    ObjectDoesntExist,
    /// A reject rule required the object not to exist, and it does.
    #[error("object already exists")]
    ObjectExists,
    /// A version reject rule refused the operation; `current` is the object's
    /// version now.
    #[error("object has version {current}, which the reject rules refuse")]
    WrongVersion { current: u64 },
    /// No table has that name or id.
    #[error("table does not exist")]
    TableDoesntExist,
    /// A key, value, name or request exceeds a limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// An increment of a value that is not a number in decimal text (counters are
    /// stored as Redis stores them: [`crate::counter`]).
    #[error("the object's value is not a number in decimal text")]
    NotNumeric,
    /// An increment overflowed (i64) or produced a non-finite float.
    #[error("the increment overflowed")]
    Overflow,
    /// An exactly-once operation whose outcome can no longer be told: its
    /// completion record was garbage-collected because its client lease expired
    /// (RIFL §4, `STALE_RPC`). It may or may not have taken effect.
    #[error("stale exactly-once operation: its outcome is unknown (client lease expired)")]
    StaleRpc,
    /// A transaction conflicted (a version it read changed, or another
    /// transaction held a lock) and was aborted: nothing of it was applied.
    /// Run it again, e.g. with [`crate::Client::run_transaction`].
    #[error("transaction aborted by a conflict; nothing was applied")]
    Aborted,
    /// A transaction over a limit (objects or bytes): nothing was sent.
    #[error("transaction too large: {0}")]
    TxTooLarge(String),
    /// The coordinator does not know the client lease (`UNKNOWN_LEASE`).
    #[error("unknown client lease")]
    UnknownLease,
    /// The server refused the request as malformed (or did not know the operation).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The operation deadline passed while the client was still retrying;
    /// `last_attempt` says what was tried last and why it failed.
    #[error("operation deadline exceeded after {elapsed:?}; last attempt: {last_attempt}")]
    DeadlineExceeded {
        elapsed: Duration,
        last_attempt: String,
    },
    /// A master's log stayed full (NO_SPACE) for the whole
    /// [`crate::ClientOptions::no_space_patience`]: its live data does not leave
    /// room for this write. Deletes still work there and free space once the
    /// cleaner has run (L§7). The last attempt was not applied; with
    /// exactly-once off (or a multi-op), an earlier attempt whose answer was lost
    /// may have been (see the crate doc).
    #[error(
        "out of memory: the log of the server at {server} is full and has refused \
         writes for {waited:?} (delete data or add servers)"
    )]
    NoSpace { server: String, waited: Duration },
    /// The coordinator could not be reached (message: "cannot reach coordinator at
    /// ADDR: why").
    #[error("{0}")]
    CoordinatorUnreachable(String),
    /// A bug or unexpected failure, on a server or in a response it sent.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What to do about a response status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Give this error to the caller.
    Fail(ClientError),
    /// RETRY: try again after this many milliseconds.
    RetryAfter(u32),
    /// UNKNOWN_TABLET: the tablet map is stale; refresh it, then retry.
    RefreshMap,
    /// SERVER_NOT_UP: refresh the map (the tablet may be recovering elsewhere) and
    /// back off.
    RefreshAndBackOff,
    /// RETRY without a delay and the like: back off and retry.
    BackOff,
    /// NO_SPACE (the log is full): back off and retry, but only for
    /// [`crate::ClientOptions::no_space_patience`].
    NoSpace,
}

impl Outcome {
    /// Sorts a non-OK response body.
    pub(crate) fn of_body(body: &ErrorBody<'_>) -> Outcome {
        match body {
            ErrorBody::WrongVersion { current_version } => {
                Outcome::Fail(ClientError::WrongVersion {
                    current: *current_version,
                })
            }
            ErrorBody::Retry { delay_ms } => Outcome::RetryAfter(*delay_ms),
            ErrorBody::Message { status, message } => Outcome::of_status(*status, 0, message),
        }
    }

    /// Sorts a status; `version` is the current version that goes with
    /// WRONG_VERSION, `message` the server's explanation (may be empty).
    pub(crate) fn of_status(status: Status, version: u64, message: &str) -> Outcome {
        let text = |fallback: &str| {
            if message.is_empty() {
                fallback.to_string()
            } else {
                message.to_string()
            }
        };
        Outcome::Fail(match status {
            Status::ObjectDoesntExist => ClientError::ObjectDoesntExist,
            Status::ObjectExists => ClientError::ObjectExists,
            Status::WrongVersion => ClientError::WrongVersion { current: version },
            Status::TableDoesntExist => ClientError::TableDoesntExist,
            Status::NotNumeric => ClientError::NotNumeric,
            Status::Overflow => ClientError::Overflow,
            Status::StaleRpc => ClientError::StaleRpc,
            Status::UnknownLease => ClientError::UnknownLease,
            Status::TooLarge => ClientError::TooLarge(text("the server refused a size")),
            Status::InvalidRequest => ClientError::InvalidRequest(text("malformed request")),
            Status::UnknownOpcode => ClientError::InvalidRequest(format!(
                "the server does not know this operation ({})",
                text("UNKNOWN_OPCODE")
            )),
            Status::Internal => ClientError::Internal(text("server error")),
            Status::UnknownTablet => return Outcome::RefreshMap,
            Status::ServerNotUp => return Outcome::RefreshAndBackOff,
            Status::NoSpace => return Outcome::NoSpace,
            // Under a per-item status RETRY carries no delay: back off.
            Status::Retry => return Outcome::BackOff,
            Status::Ok => ClientError::Internal("an error response with status OK".into()),
        })
    }
}

/// The error for a request the client could not even encode.
pub(crate) fn encode_error(e: WireError) -> ClientError {
    match e.status() {
        Status::TooLarge => ClientError::TooLarge(e.to_string()),
        _ => ClientError::InvalidRequest(e.to_string()),
    }
}

/// Describes a status for "last attempt" messages.
pub(crate) fn describe_body(body: &ErrorBody<'_>) -> String {
    match body {
        ErrorBody::WrongVersion { current_version } => {
            format!("WRONG_VERSION (current {current_version})")
        }
        ErrorBody::Retry { delay_ms } => format!("RETRY after {delay_ms} ms"),
        ErrorBody::Message {
            status,
            message: "",
        } => status.to_string(),
        ErrorBody::Message { status, message } => format!("{status}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_is_sorted() {
        for status in Status::ALL {
            let outcome = Outcome::of_status(status, 7, "");
            let retried = matches!(
                outcome,
                Outcome::RefreshMap
                    | Outcome::RefreshAndBackOff
                    | Outcome::BackOff
                    | Outcome::NoSpace
            );
            assert_eq!(
                retried,
                matches!(
                    status,
                    Status::UnknownTablet | Status::ServerNotUp | Status::NoSpace | Status::Retry
                ),
                "{status}"
            );
        }
        assert_eq!(
            Outcome::of_status(Status::WrongVersion, 7, ""),
            Outcome::Fail(ClientError::WrongVersion { current: 7 })
        );
        assert_eq!(
            Outcome::of_body(&ErrorBody::Retry { delay_ms: 3 }),
            Outcome::RetryAfter(3)
        );
        assert_eq!(Outcome::of_status(Status::NoSpace, 0, ""), Outcome::NoSpace);
    }

    #[test]
    fn encode_errors_keep_their_kind() {
        assert!(matches!(
            encode_error(WireError::ValueTooLarge(5)),
            ClientError::TooLarge(_)
        ));
        assert!(matches!(
            encode_error(WireError::BadUtf8),
            ClientError::InvalidRequest(_)
        ));
    }
}

//! How the native front end answers: a response frame appended to the
//! connection's output buffer ([`Wire`], its [`FrontEnd`]), and the error answers
//! both its fast and slow paths give.

use ramstore_rpc::Handled;
use ramstore_wire::{
    decode_raw_header, encode_error_response, encode_response, ErrorBody, Opcode, Response, Status,
    WireError,
};

use super::request_path::{DurabilityWait, FrontEnd, FENCED_MESSAGE};
use crate::replica_manager::ReplicationError;

/// The answer to a backup request sent to a server that runs no backup.
const NO_BACKUP_MESSAGE: &str =
    "this server runs no backup service (start it with --backup-dir DIR)";

/// The delay a RETRY to a connection over the limit asks for.
pub(crate) const RETRY_AFTER_REFUSED_CONNECTION_MS: u32 = 100;

/// The delay a RETRY after a replication timeout asks for.
const RETRY_AFTER_REPLICATION_TIMEOUT_MS: u32 = 50;

/// The native answer to request `id` (`op`): its response frame, appended to `out`
/// from `mark` on.
pub(crate) struct Wire<'a> {
    pub(crate) id: u64,
    pub(crate) op: Opcode,
    pub(crate) mark: usize,
    pub(crate) out: &'a mut Vec<u8>,
    /// Whether a request that must wait for its key's migration may be parked
    /// (`migration_park.rs`); `false` when it has been parked once already.
    pub(crate) park: bool,
}

impl FrontEnd for Wire<'_> {
    /// The response frame is already in `out`.
    type Body = ();
    type Answer = Handled;

    fn refuse(&mut self, refusal: ErrorBody<'static>) {
        self.out.truncate(self.mark);
        // An error body always encodes; if it somehow did not, the client times
        // out and retries, as for a lost answer.
        let _ = encode_response(self.id, self.op, &Response::Error(refusal), self.out);
    }

    /// Every native answer to an update waits, refusals and rejections included:
    /// they reflect writes that may not be durable yet.
    fn waits(&self, _: &()) -> bool {
        true
    }

    fn now(self, _: ()) -> Handled {
        Handled::Done
    }

    /// Moves the response out of the connection's buffer into the deferred answer
    /// (R§4.2); a failed wait answers SERVER_NOT_UP (fenced off) or RETRY (the
    /// write is in the log and may become durable later; the client's retry writes
    /// it again).
    fn later(self, _: (), wait: DurabilityWait) -> Handled {
        let response = self.out[self.mark..].to_vec();
        self.out.truncate(self.mark);
        let (id, op) = (self.id, self.op);
        Handled::Deferred(Box::pin(async move {
            match wait.done().await {
                Ok(()) => response,
                Err(e) => wait_failed(id, op, e),
            }
        }))
    }

    fn hand_off(self) -> Handled {
        Handled::Slow
    }
}

/// The answer to request `id` whose replication wait failed with `e`.
fn wait_failed(id: u64, op: Opcode, e: ReplicationError) -> Vec<u8> {
    let mut answer = Vec::new();
    match e {
        ReplicationError::Fenced => answer_fenced(id, op, &mut answer),
        _ => {
            let _ = encode_response(
                id,
                op,
                &Response::Error(ErrorBody::Retry {
                    delay_ms: RETRY_AFTER_REPLICATION_TIMEOUT_MS,
                }),
                &mut answer,
            );
        }
    }
    answer
}

/// Appends an error response with `status` and a message for humans.
pub(crate) fn answer_message(
    id: u64,
    op: Opcode,
    status: Status,
    message: &str,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    encode_response(
        id,
        op,
        &Response::Error(ErrorBody::Message { status, message }),
        out,
    )
}

/// Answers an object operation sent to a fenced-off master: SERVER_NOT_UP, so the
/// client asks the coordinator where the tablet is now.
fn answer_fenced(id: u64, op: Opcode, out: &mut Vec<u8>) {
    let _ = answer_message(id, op, Status::ServerNotUp, FENCED_MESSAGE, out);
}

/// Answers a backup request sent to a server that runs no backup.
pub(crate) fn no_backup(id: u64, op: Opcode, out: &mut Vec<u8>) -> Result<(), WireError> {
    answer_message(id, op, Status::InvalidRequest, NO_BACKUP_MESSAGE, out)
}

/// Answers a request that did not decode: its status says why, with the request id
/// and opcode from the raw header when those could be read; otherwise nothing can be
/// answered and the frame is dropped.
pub(crate) fn answer_bad_request(frame: &[u8], err: &WireError, out: &mut Vec<u8>) {
    if let Ok(raw) = decode_raw_header(frame) {
        answer_wire_error(raw.request_id, raw.opcode, err, out);
    }
}

/// Answers request `id` (opcode `code`) with the status of `err`.
pub(crate) fn answer_wire_error(id: u64, code: u16, err: &WireError, out: &mut Vec<u8>) {
    let message = err.to_string();
    let _ = encode_error_response(id, code, &ErrorBody::for_wire_error(err, &message), out);
}

//! One ping between servers (R§7.2) and the answer to a caller that is not UP
//! (R§7.11): shared by the failure monitor's rounds ([`crate::failure_monitor`])
//! and the service's `PingServer` answer (`storage_service::membership`), so
//! neither imports the other for it.

use std::time::Duration;

use ramstore_rpc::Transport;
use ramstore_wire::{decode_response, encode_request, Request, Response, Status};

pub use ramstore_wire::{not_up, NOT_UP_MESSAGE};

/// How a ping went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinged {
    /// Answered as the expected server.
    Answered,
    /// Answered SERVER_NOT_UP: the receiver lists the caller crashed or removed.
    NotUp,
    /// No answer, a refused or reset connection, or a wrong answer.
    Failed,
}

/// Pings `address`, expecting server `expect` (0: any, the coordinator), as
/// `caller_id`.
pub async fn ping(
    transport: &dyn Transport,
    address: &str,
    expect: u64,
    caller_id: u64,
    nonce: u64,
    timeout: Duration,
) -> Pinged {
    let mut frame = Vec::new();
    if encode_request(0, &Request::Ping { nonce, caller_id }, &mut frame).is_err() {
        return Pinged::Failed;
    }
    let Ok(bytes) = transport.call(address, frame, timeout).await else {
        return Pinged::Failed;
    };
    match decode_response(&bytes) {
        Ok((
            h,
            Response::Ping {
                nonce: echoed,
                server_id,
            },
        )) if h.status == Status::Ok && echoed == nonce && server_id == expect => Pinged::Answered,
        Ok((_, Response::Error(e))) if e.status() == Status::ServerNotUp => Pinged::NotUp,
        _ => Pinged::Failed,
    }
}

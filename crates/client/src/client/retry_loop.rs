//! The retry loop every RPC goes through (R§11.4): to a key's owner by the tablet
//! map (`keyed`), or to the coordinator or one named server (`direct`), retrying
//! on transport errors, RETRY and back-pressure until the deadline.

use std::time::Duration;

use ramstore_wire::{decode_response, encode_request, Opcode, Request, Response, WireError};

use super::{transport_reason, Inner, Target, REQUEST_OVERHEAD_BYTES};
use crate::error::{describe_body, encode_error, ClientError, Outcome};
use crate::retry::Retrier;

impl Inner {
    /// One request about the object with key hash `hash` of `table_id`, sent to its
    /// owner and retried until it gets an answer the caller must handle.
    ///
    /// `encode` appends the request frame (it runs once per attempt, so a warm map
    /// costs one encode and one call); `parse` turns an OK response into the result
    /// (`None`: a response of another kind).
    pub(crate) async fn keyed<T>(
        &self,
        op: Opcode,
        table_id: u64,
        hash: u64,
        size_hint: usize,
        encode: impl Fn(&mut Vec<u8>) -> Result<(), WireError>,
        parse: impl FnOnce(Response<'_>) -> Option<T>,
    ) -> Result<T, ClientError> {
        let mut retry = Retrier::new(&self.options, self.options.operation_deadline)
            .with_no_space_patience(self.options.no_space_patience);
        loop {
            let Some(deadline) = retry.attempt_deadline(self.options.rpc_deadline) else {
                return Err(retry.deadline_exceeded());
            };
            let route = self.route(table_id, hash);
            let Some(addr) = route.addr else {
                self.find_route(&mut retry, table_id, hash, route.seen_refreshes, deadline)
                    .await?;
                continue;
            };
            let what = || format!("{op:?} in table {table_id} at {addr}");
            let mut frame = Vec::with_capacity(size_hint);
            encode(&mut frame).map_err(encode_error)?;
            let bytes = match self.transport.call(&addr, frame, deadline).await {
                Ok(bytes) => bytes,
                Err(e) => {
                    retry.note(format!("{}: {e}", what()));
                    // The server may be gone and its tablets elsewhere.
                    self.refresh_noting(&mut retry, route.seen_refreshes).await;
                    retry.back_off().await;
                    continue;
                }
            };
            let (header, response) = decode_response(&bytes).map_err(|e| {
                ClientError::Internal(format!("malformed response to {}: {e}", what()))
            })?;
            if header.opcode != op {
                return Err(ClientError::Internal(format!(
                    "{} answered opcode {:?}",
                    what(),
                    header.opcode
                )));
            }
            let body = match response {
                Response::Error(body) => body,
                ok => {
                    return parse(ok).ok_or_else(|| {
                        ClientError::Internal(format!("unexpected response to {}", what()))
                    })
                }
            };
            retry.note(format!("{}: {}", what(), describe_body(&body)));
            match Outcome::of_body(&body) {
                Outcome::Fail(e) => return Err(e),
                Outcome::RetryAfter(ms) => retry.wait_as_told(ms).await,
                Outcome::BackOff => retry.back_off().await,
                Outcome::NoSpace => match retry.no_space(&addr) {
                    Some(e) => return Err(e),
                    None => retry.back_off().await,
                },
                Outcome::RefreshMap => {
                    match self.refresh_noting(&mut retry, route.seen_refreshes).await {
                        // The map changed: the tablet has likely moved; go now.
                        Some(version) if version > route.map_version => {}
                        _ => retry.back_off().await,
                    }
                }
                Outcome::RefreshAndBackOff => {
                    self.refresh_noting(&mut retry, route.seen_refreshes).await;
                    retry.back_off().await;
                }
            }
        }
    }

    /// The map had no owner for `hash` of `table_id`: refresh it. Fails with
    /// TABLE_DOESNT_EXIST when a fresh map has no tablet of the table.
    pub(crate) async fn find_route(
        &self,
        retry: &mut Retrier<'_>,
        table_id: u64,
        hash: u64,
        seen_refreshes: u64,
        deadline: Duration,
    ) -> Result<(), ClientError> {
        match self.refresh_map(seen_refreshes, deadline).await {
            Ok(_) => {
                let map = self.map.read();
                if !map.has_table(table_id) {
                    return Err(ClientError::TableDoesntExist);
                }
                if map.owner(table_id, hash).is_some() {
                    return Ok(());
                }
                retry.note(format!(
                    "the tablet map (version {}) has no tablet of table {table_id} \
                     holding key hash {hash:#018x}",
                    map.version()
                ));
            }
            Err(e) => retry.note(e.why),
        }
        retry.back_off().await;
        Ok(())
    }

    /// A request to the coordinator (moving on to the next configured address after
    /// each transport failure) or to one server named by address, retried on RETRY,
    /// back-pressure and transport errors for `total`. When the target is a
    /// coordinator and the last failure was a transport error, giving up says the
    /// coordinator is unreachable.
    pub(super) async fn direct<T>(
        &self,
        target: Target<'_>,
        total: Duration,
        op: Opcode,
        encode: impl Fn(&mut Vec<u8>) -> Result<(), WireError>,
        parse: impl FnOnce(Response<'_>) -> Option<T>,
    ) -> Result<T, ClientError> {
        let mut retry = Retrier::new(&self.options, total);
        let mut unreachable = false;
        let coordinator = match target {
            Target::Coordinator => true,
            Target::Server { coordinator, .. } => coordinator,
        };
        loop {
            let (index, addr) = match target {
                Target::Coordinator => {
                    let (i, addr) = self.coordinator_addr();
                    (Some(i), addr)
                }
                Target::Server { addr, .. } => (None, addr),
            };
            let what = || {
                if coordinator {
                    format!("{op:?} at coordinator {addr}")
                } else {
                    format!("{op:?} at {addr}")
                }
            };
            let Some(deadline) = retry.attempt_deadline(self.options.rpc_deadline) else {
                if coordinator && unreachable {
                    let at = match target {
                        Target::Coordinator => self.options.coordinator.as_str(),
                        Target::Server { addr, .. } => addr,
                    };
                    return Err(ClientError::CoordinatorUnreachable(format!(
                        "cannot reach coordinator at {at}: {}",
                        retry.last()
                    )));
                }
                return Err(retry.deadline_exceeded());
            };
            let mut frame = Vec::with_capacity(REQUEST_OVERHEAD_BYTES);
            encode(&mut frame).map_err(encode_error)?;
            let bytes = match self.transport.call(addr, frame, deadline).await {
                Ok(bytes) => bytes,
                Err(e) => {
                    unreachable = true;
                    retry.note(if coordinator {
                        format!("{addr}: {}", transport_reason(&e))
                    } else {
                        format!("{}: {e}", what())
                    });
                    if let Some(i) = index {
                        // R§9: the coordinator may have failed over; try the next.
                        self.coordinator_failed(i);
                    }
                    retry.back_off().await;
                    continue;
                }
            };
            unreachable = false;
            let (header, response) = decode_response(&bytes).map_err(|e| {
                ClientError::Internal(format!("malformed response to {}: {e}", what()))
            })?;
            let body = match response {
                Response::Error(body) => body,
                ok if header.opcode == op => {
                    return parse(ok).ok_or_else(|| {
                        ClientError::Internal(format!("unexpected response to {}", what()))
                    })
                }
                _ => {
                    return Err(ClientError::Internal(format!(
                        "{} answered opcode {:?}",
                        what(),
                        header.opcode
                    )))
                }
            };
            retry.note(format!("{}: {}", what(), describe_body(&body)));
            match Outcome::of_body(&body) {
                Outcome::Fail(e) => return Err(e),
                Outcome::RetryAfter(ms) => retry.wait_as_told(ms).await,
                Outcome::BackOff
                | Outcome::NoSpace
                | Outcome::RefreshMap
                | Outcome::RefreshAndBackOff => retry.back_off().await,
            }
        }
    }

    /// Where a request "to `addr`" goes: the configured coordinator string means the
    /// active coordinator; anything else is one server.
    pub(super) fn target<'a>(&self, addr: &'a str) -> Target<'a> {
        if addr == self.options.coordinator {
            Target::Coordinator
        } else {
            Target::Server {
                addr,
                coordinator: self.coordinators.iter().any(|c| c == addr),
            }
        }
    }

    /// A request to the coordinator, within the operation deadline.
    pub(crate) async fn coordinator<T>(
        &self,
        req: Request<'_>,
        parse: impl FnOnce(Response<'_>) -> Option<T>,
    ) -> Result<T, ClientError> {
        self.direct(
            Target::Coordinator,
            self.options.operation_deadline,
            req.opcode(),
            |out| encode_request(0, &req, out),
            parse,
        )
        .await
    }
}

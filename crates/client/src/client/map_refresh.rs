//! Routing by the cached tablet map and refreshing it (R§4.2): concurrent callers
//! share one GetTabletMap, and a map never goes back to an older version.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ramstore_wire::{decode_response, encode_request, Opcode, Request, Response};

use super::{transport_reason, Client, Inner, RefreshError, Route, REQUEST_OVERHEAD_BYTES};
use crate::error::{describe_body, ClientError};
use crate::retry::Retrier;
use crate::tablet_map::TabletMap;

impl Inner {
    pub(crate) fn route(&self, table_id: u64, hash: u64) -> Route {
        // Read the refresh count before the map: a refresh that completes in between
        // is then merely repeated, never missed.
        let seen_refreshes = self.refreshes.load(Ordering::Acquire);
        let map = self.map.read();
        Route {
            addr: map.owner(table_id, hash).cloned(),
            seen_refreshes,
            map_version: map.version(),
        }
    }

    pub(crate) fn map(&self) -> parking_lot::RwLockReadGuard<'_, TabletMap> {
        self.map.read()
    }

    pub(crate) fn refresh_count(&self) -> u64 {
        self.refreshes.load(Ordering::Acquire)
    }

    /// Fetches the tablet map unless a refresh completed since the caller saw
    /// `seen_refreshes`; concurrent callers share one GetTabletMap. Returns the map
    /// version now held.
    pub(crate) async fn refresh_map(
        &self,
        seen_refreshes: u64,
        deadline: Duration,
    ) -> Result<u64, RefreshError> {
        let mut state = self.refresh.lock().await;
        if state.attempts == seen_refreshes {
            // A caller dropped mid-fetch leaves the count alone: the next one fetches.
            state.last = self.fetch_map(deadline).await;
            state.attempts += 1;
            self.refreshes.store(state.attempts, Ordering::Release);
        }
        state.last.clone().map(|()| self.map.read().version())
    }

    /// One GetTabletMap; installs the answer unless it is older than the map held.
    async fn fetch_map(&self, deadline: Duration) -> Result<(), RefreshError> {
        let (index, coordinator) = self.coordinator_addr();
        let fail = |reason: String, unreachable: bool| RefreshError {
            why: format!("fetching the tablet map from coordinator {coordinator}: {reason}"),
            reason,
            unreachable,
            permanent: false,
        };
        let mut frame = Vec::with_capacity(REQUEST_OVERHEAD_BYTES);
        encode_request(0, &Request::GetTabletMap, &mut frame)
            .map_err(|e| fail(e.to_string(), false))?;
        let bytes = match self.transport.call(coordinator, frame, deadline).await {
            Ok(bytes) => bytes,
            Err(e) => {
                // R§9: the coordinator may have failed over; try the next one.
                self.coordinator_failed(index);
                return Err(fail(transport_reason(&e), true));
            }
        };
        let (header, response) =
            decode_response(&bytes).map_err(|e| fail(format!("malformed response: {e}"), false))?;
        match response {
            Response::GetTabletMap {
                map_version,
                tablets,
            } if header.opcode == Opcode::GetTabletMap => {
                let fresh = TabletMap::from_entries(map_version, tablets);
                let mut map = self.map.write();
                // Never go backwards: an answer that was overtaken by a newer one
                // (or a lagging coordinator) is dropped.
                if fresh.version() >= map.version() {
                    *map = fresh;
                }
                Ok(())
            }
            Response::Error(body) => {
                let transient = matches!(
                    body.status(),
                    ramstore_wire::Status::Retry
                        | ramstore_wire::Status::ServerNotUp
                        | ramstore_wire::Status::NoSpace
                );
                Err(RefreshError {
                    permanent: !transient,
                    ..fail(describe_body(&body), false)
                })
            }
            _ => Err(fail("unexpected response".into(), false)),
        }
    }

    /// Refreshes the map within what is left of the operation's time; failures
    /// are noted in `retry` (the caller backs off anyway).
    pub(crate) async fn refresh_noting(
        &self,
        retry: &mut Retrier<'_>,
        seen_refreshes: u64,
    ) -> Option<u64> {
        let deadline = retry.attempt_deadline(self.options.rpc_deadline)?;
        match self.refresh_map(seen_refreshes, deadline).await {
            Ok(version) => Some(version),
            Err(e) => {
                retry.note(format!("{} (after: {})", e.why, retry.last()));
                None
            }
        }
    }
}

impl Client {
    /// Refreshes the cached map, retrying until the operation deadline.
    pub(crate) async fn refresh_now(&self) -> Result<(), ClientError> {
        let inner = &*self.inner;
        let mut retry = Retrier::new(&inner.options, inner.options.operation_deadline);
        let mut unreachable = None;
        loop {
            let Some(deadline) = retry.attempt_deadline(inner.options.rpc_deadline) else {
                if let Some(reason) = unreachable {
                    return Err(ClientError::CoordinatorUnreachable(format!(
                        "cannot reach coordinator at {}: {reason}",
                        inner.options.coordinator
                    )));
                }
                return Err(retry.deadline_exceeded());
            };
            match inner.refresh_map(inner.refresh_count(), deadline).await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    unreachable = e.unreachable.then(|| e.reason.clone());
                    retry.note(e.why);
                    retry.back_off().await;
                }
            }
        }
    }
}

//! Parking a client request for a key that is being pulled (K§2.3; design notes
//! "Migration (Rocksteady)", *Parked requests*).
//!
//! On a tablet migrating in, a read, conditional write, increment or delete of a
//! key whose record may still be on the source cannot run yet, nor can any
//! exactly-once update whose key's completion records may still be there (RIFL
//! §4.3); the gate queues the key for a PriorityPull. Answering RETRY made the client sleep at least
//! its retry delay (1 ms, rounded up by its timer) and send the request again,
//! often more than once, though the PriorityPull's answer usually comes back in
//! a fraction of that: during a migration the client's reads of the migrating
//! half spent most of their time asleep (docs/benchmarks.md, session 32). The
//! native front end therefore hands such a request to its slow path, where it
//! waits for the migration's arrival signal and then runs again from the start
//! (guards, gate, store call, durability wait), as if it had just arrived.
//!
//! Bounds: at most [`MAX_PARKED`] requests are parked on a server (checked
//! before handing off; a request over it is answered RETRY as before), and each
//! waits at most [`PARK_MS`]; a request still waiting then is run once more and
//! answered RETRY by the gate, so a slow or failing source costs the client no
//! more than before. Only migrations with PriorityPulls park requests: without
//! them a key arrives only when a background pull passes it (a benchmark
//! baseline). Multi-object requests and the Redis front end are answered RETRY.

use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramstore_master::key_hash;
use ramstore_master::migration::ClientOp;
use ramstore_rpc::Handled;
use ramstore_wire::{decode_raw_header, decode_request, encode_error_response, Request};

use super::migration::Gated;
use super::object_ops::{status_body, write_kind};
use super::StorageService;

/// Most client requests parked at once on one server.
pub const MAX_PARKED: usize = 1024;
/// Longest one request stays parked before it is answered RETRY: well above a
/// PriorityPull's round trip, far below the client's RPC deadline.
pub const PARK_MS: u64 = 50;

/// Counts one parked request while it lives.
struct Parked<'a>(&'a AtomicUsize);

impl<'a> Parked<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl StorageService {
    /// Whether a single-key request of kind `op` on `key` of `table_id` must wait
    /// for its key and may park for it here. Its gate queues the key for a
    /// PriorityPull, as answering RETRY would. The bound is checked without a
    /// lock, so it may be passed by the few requests handed off at the same
    /// moment.
    pub(crate) fn parks(&self, table_id: u64, key: &[u8], op: ClientOp) -> bool {
        // The gate's own first check is one relaxed load when no migration
        // comes in, so a request on a normal server pays only these.
        if op == ClientOp::BlindWrite
            || self.migrations.parked.load(Ordering::Relaxed) >= MAX_PARKED
        {
            return false;
        }
        matches!(self.migration_gate(table_id, key, op), Gated::Wait)
            && self.arrival_signals(table_id, key_hash(key)).is_some()
    }

    /// The answer to request `frame`, which [`Self::parks`] handed off: waits
    /// until its key has arrived (or [`PARK_MS`]), then serves it again, unable
    /// to park a second time.
    pub(crate) async fn park_then_serve(self: Arc<Self>, frame: Vec<u8>) -> Vec<u8> {
        {
            let _parked = Parked::new(&self.migrations.parked);
            if let Some((table_id, key, op)) = object_key(&frame) {
                self.wait_for_arrival(table_id, &key, op).await;
            }
        }
        let mut out = Vec::new();
        match self.handle_unparked(&frame, &mut out) {
            Handled::Done => out,
            Handled::Deferred(answer) => answer.await,
            // An object request served unparked is never handed off; answer
            // RETRY rather than nothing if one somehow was.
            Handled::Slow => {
                out.clear();
                if let Ok(raw) = decode_raw_header(&frame) {
                    let body = status_body(ramstore_wire::Status::Retry);
                    let _ = encode_error_response(raw.request_id, raw.opcode, &body, &mut out);
                }
                out
            }
        }
    }

    /// Waits until `key` of `table_id` may be used by `op` (the gate lets it
    /// through), its migration ends, or [`PARK_MS`] pass.
    async fn wait_for_arrival(&self, table_id: u64, key: &[u8], op: ClientOp) {
        let deadline = self.clock.now() + Duration::from_millis(PARK_MS);
        let hash = key_hash(key);
        loop {
            let Some(signals) = self.arrival_signals(table_id, hash) else {
                return;
            };
            // Registered before the check, so an arrival between the check
            // and the wait still wakes it.
            let mut arrived = pin!(signals.arrived.notified());
            arrived.as_mut().enable();
            if !matches!(self.migration_gate(table_id, key, op), Gated::Wait) {
                return;
            }
            tokio::select! {
                () = arrived => {}
                () = self.clock.sleep_until(deadline) => return,
            }
        }
    }
}

/// The table, key and gate kind of a single-key object request (the kinds that
/// park); `None` for any other request.
pub(crate) fn gated_op<'r>(req: &Request<'r>) -> Option<(u64, &'r [u8], ClientOp)> {
    match *req {
        Request::Read { table_id, key, .. } => Some((table_id, key, ClientOp::ReadsRecord)),
        // Exactly-once updates wait for their key's completion records too.
        Request::Write {
            table_id,
            key,
            rpc_id: Some(_),
            ..
        }
        | Request::Remove {
            table_id,
            key,
            rpc_id: Some(_),
            ..
        }
        | Request::Increment {
            table_id,
            key,
            rpc_id: Some(_),
            ..
        } => Some((table_id, key, ClientOp::ExactlyOnce)),
        Request::Write {
            table_id,
            ref rules,
            key,
            ..
        } => Some((table_id, key, write_kind(rules))),
        Request::Remove { table_id, key, .. } | Request::Increment { table_id, key, .. } => {
            Some((table_id, key, ClientOp::ReadsRecord))
        }
        _ => None,
    }
}

/// The table, key and gate kind of a single-key object request `frame`.
fn object_key(frame: &[u8]) -> Option<(u64, Vec<u8>, ClientOp)> {
    let (_, req) = decode_request(frame).ok()?;
    gated_op(&req).map(|(table_id, key, op)| (table_id, key.to_vec(), op))
}

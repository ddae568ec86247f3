//! [`SimNet`]: the simulated network. Services are registered in a
//! `ramstore_rpc::LocalTransport` (the registry and dispatch), and every call goes
//! through an [`Endpoint`] that knows its sender, so each message can be delayed,
//! lost or cut by a partition, as the seeded generator and the fault schedule say.
//!
//! Rules: a request and its response each take a drawn delay (mostly 5–200 µs,
//! rarely a few ms); a lost message or a cut link makes the call fail when its
//! deadline passes; a call to an address nobody serves (a crashed node) fails at
//! once as refused; a node that crashes while handling a request answers nothing
//! (the caller sees the connection close); and a crashed node's leftover tasks
//! send nothing more (their calls never complete), as a dead process's would not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_clock::Rng;
use ramstore_rpc::transport::CallFuture;
use ramstore_rpc::{LocalTransport, RpcError, Service, Transport};
use ramstore_wire::{decode_request, encode_response, Request, Response};

use crate::clock::SimClock;
use crate::trace::{hash_bytes, Kind, Trace};

/// The host part of an address ("s3" of "s3.2"): partitions cut hosts.
fn host(addr: &str) -> &str {
    addr.split('.').next().unwrap_or(addr)
}

/// The incarnation of client endpoints, which never crash.
const CLIENT: u64 = u64::MAX;

/// What the network does now (changed by the fault schedule).
#[derive(Debug, Default)]
struct NetState {
    /// Live incarnation of each registered node; absent: crashed or never started.
    alive: BTreeMap<String, u64>,
    /// Host pairs that cannot reach each other (both orders stored).
    cuts: BTreeSet<(String, String)>,
    /// Chance a message is lost, in millionths.
    loss_ppm: u64,
    /// Extra delay on every message.
    extra_delay: Duration,
    /// Crash notifications by address: a handler in progress stops answering.
    crash_signals: BTreeMap<String, Arc<tokio::sync::Notify>>,
}

/// Counts for the summary.
#[derive(Debug, Default)]
pub struct NetStats {
    pub delivered: AtomicU64,
    pub dropped: AtomicU64,
    pub refused: AtomicU64,
}

/// The simulated network (see the module doc).
pub struct SimNet {
    registry: LocalTransport,
    state: Mutex<NetState>,
    clock: Arc<SimClock>,
    rng: Arc<dyn Rng>,
    trace: Arc<Trace>,
    pub stats: NetStats,
    /// The planted bug: backups acknowledge data writes without storing them.
    lying_backups: bool,
}

impl SimNet {
    pub fn new(
        clock: Arc<SimClock>,
        rng: Arc<dyn Rng>,
        trace: Arc<Trace>,
        lying_backups: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            registry: LocalTransport::with_clock(clock.clone()),
            state: Mutex::default(),
            clock,
            rng,
            trace,
            stats: NetStats::default(),
            lying_backups,
        })
    }

    /// Makes `service` reachable at `addr` as incarnation `incarnation`.
    pub fn register<S: Service>(&self, addr: &str, incarnation: u64, service: Arc<S>) {
        self.registry.register(addr, service);
        let mut st = self.state.lock();
        st.alive.insert(addr.to_string(), incarnation);
        st.crash_signals
            .insert(addr.to_string(), Arc::new(tokio::sync::Notify::new()));
    }

    /// The node at `addr` stops: nothing reaches it, its handlers in progress
    /// answer nothing, and its own calls never complete.
    pub fn crash(&self, addr: &str) {
        self.registry.unregister(addr);
        let mut st = self.state.lock();
        st.alive.remove(addr);
        if let Some(signal) = st.crash_signals.remove(addr) {
            signal.notify_waiters();
        }
    }

    /// An endpoint sending as `addr` (incarnation `incarnation`).
    pub fn endpoint(self: &Arc<Self>, addr: &str, incarnation: u64) -> Arc<Endpoint> {
        Arc::new(Endpoint {
            net: self.clone(),
            from: addr.to_string(),
            incarnation,
        })
    }

    /// Cuts (or heals) the link between two hosts.
    pub fn set_cut(&self, a: &str, b: &str, cut: bool) {
        let mut st = self.state.lock();
        for pair in [(a.to_string(), b.to_string()), (b.to_string(), a.to_string())] {
            if cut {
                st.cuts.insert(pair);
            } else {
                st.cuts.remove(&pair);
            }
        }
    }

    /// Heals every cut.
    pub fn heal_all(&self) {
        self.state.lock().cuts.clear();
    }

    /// Sets the message loss rate (millionths) and the extra delay.
    pub fn set_weather(&self, loss_ppm: u64, extra_delay: Duration) {
        let mut st = self.state.lock();
        st.loss_ppm = loss_ppm;
        st.extra_delay = extra_delay;
    }

    /// An endpoint for a client: not a node, never crashed.
    pub fn client_endpoint(self: &Arc<Self>, name: &str) -> Arc<Endpoint> {
        self.endpoint(name, CLIENT)
    }

    fn sender_alive(&self, from: &str, incarnation: u64) -> bool {
        incarnation == CLIENT || self.state.lock().alive.get(from) == Some(&incarnation)
    }

    /// One message's fate: its delay, or `None` if it is lost on the way.
    fn route(&self, from: &str, to: &str) -> Option<Duration> {
        let st = self.state.lock();
        if st.cuts.contains(&(host(from).to_string(), host(to).to_string())) {
            return None;
        }
        let lost = st.loss_ppm > 0 && self.rng.next_u64() % 1_000_000 < st.loss_ppm;
        if lost {
            return None;
        }
        let roll = self.rng.next_u64();
        // 1 in 500 messages is slow (a few ms): queueing, a retransmit.
        let base = if roll % 500 == 0 {
            1_000 + (roll >> 20) % 5_000
        } else {
            5 + (roll >> 20) % 195
        };
        Some(Duration::from_micros(base) + st.extra_delay)
    }

    fn now_ns(&self) -> u64 {
        self.clock.elapsed_ns()
    }

    /// The planted bug's answer to a data BackupWrite: OK, with nothing stored.
    fn lie(&self, frame: &[u8]) -> Option<bytes::Bytes> {
        if !self.lying_backups {
            return None;
        }
        let (header, req) = decode_request(frame).ok()?;
        let Request::BackupWrite { flags, .. } = req else {
            return None;
        };
        if flags.open || flags.close {
            return None;
        }
        let mut out = Vec::new();
        encode_response(
            header.request_id,
            ramstore_wire::Opcode::BackupWrite,
            &Response::BackupWrite,
            &mut out,
        )
        .ok()?;
        Some(bytes::Bytes::from(out))
    }

    async fn call(
        &self,
        from: &str,
        incarnation: u64,
        to: &str,
        frame: Vec<u8>,
        deadline: Duration,
    ) -> Result<bytes::Bytes, RpcError> {
        let give_up = tokio::time::Instant::now() + deadline.min(ramstore_clock::FAR_FUTURE);
        if !self.sender_alive(from, incarnation) {
            // A dead process sends nothing: its leftover tasks wait forever.
            return std::future::pending().await;
        }
        let frame_hash = hash_bytes(&frame);
        let Some(delay) = self.route(from, to) else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            self.trace
                .event(self.now_ns(), Kind::Drop, from, to, frame_hash);
            tokio::time::sleep_until(give_up).await;
            return Err(RpcError::DeadlineExceeded);
        };
        tokio::time::sleep(delay).await;
        let (dispatch, signal) = {
            let st = self.state.lock();
            (
                self.registry.dispatch(to),
                st.crash_signals.get(to).cloned(),
            )
        };
        let (Some(dispatch), Some(signal)) = (dispatch, signal) else {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            self.trace
                .event(self.now_ns(), Kind::Refused, from, to, frame_hash);
            return Err(RpcError::ConnectFailed {
                addr: to.to_string(),
                reason: "connection refused (simulated crash)".into(),
                refused: true,
            });
        };
        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
        self.trace
            .event(self.now_ns(), Kind::Deliver, from, to, frame_hash);
        let crashed = signal.notified();
        let answer = match self.lie(&frame) {
            Some(answer) => Ok(answer),
            None => {
                tokio::select! {
                    biased;
                    _ = crashed => Err(RpcError::ConnectionClosed(to.to_string())),
                    r = tokio::time::timeout_at(give_up, dispatch(frame)) => {
                        r.unwrap_or(Err(RpcError::DeadlineExceeded))
                    }
                }
            }
        };
        let bytes = answer?;
        let Some(back) = self.route(to, from) else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            self.trace
                .event(self.now_ns(), Kind::Drop, to, from, hash_bytes(&bytes));
            tokio::time::sleep_until(give_up).await;
            return Err(RpcError::DeadlineExceeded);
        };
        tokio::time::sleep(back).await;
        if !self.sender_alive(from, incarnation) {
            return std::future::pending().await;
        }
        self.trace
            .event(self.now_ns(), Kind::Respond, to, from, hash_bytes(&bytes));
        Ok(bytes)
    }
}

/// The network as one node sees it: a `Transport` whose calls come from `from`.
pub struct Endpoint {
    net: Arc<SimNet>,
    from: String,
    incarnation: u64,
}

impl Transport for Endpoint {
    fn call<'a>(&'a self, addr: &'a str, frame: Vec<u8>, deadline: Duration) -> CallFuture<'a> {
        Box::pin(
            self.net
                .call(&self.from, self.incarnation, addr, frame, deadline),
        )
    }
}

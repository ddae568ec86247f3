//! [`SimNet`]: the simulated network. Services are registered in a
//! `ramstore_rpc::LocalTransport` (the registry and dispatch), and every call goes
//! through an [`Endpoint`] that knows its sender, so each message can be delayed,
//! lost or cut by a partition, as the seeded generator and the fault schedule say.
//!
//! Rules: a request and its response each take a drawn delay (mostly 5–200 µs,
//! rarely a few ms); a lost message is retransmitted after TCP's retransmission
//! timeout, and one across a cut link until the cut heals, so either may make the
//! call fail when its deadline passes (as over TCP, where a partition delays a
//! connection's bytes rather than dropping them); a call to an address nobody serves (a crashed node) fails at
//! once as refused; a node that crashes while handling a request answers nothing
//! (the caller sees the connection close); and a crashed node's leftover tasks
//! send nothing more (their calls never complete), as a dead process's would not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_clock::Rng;
use ramstore_rpc::transport::CallFuture;
use ramstore_rpc::{LocalTransport, RpcError, Service, Transport};
use ramstore_wire::{decode_request, encode_response, Request, Response};
use tracing::Instrument;

use crate::clock::SimClock;
use crate::cost::{Charge, Costs, Mark};
use crate::hops::{HopMeter, Traffic};
use crate::trace::{hash_bytes, Kind, Trace};

/// The host part of an address ("s3" of "s3.2"): partitions cut hosts.
fn host(addr: &str) -> &str {
    addr.split('.').next().unwrap_or(addr)
}

/// A node's life, shared with the handlers it runs.
#[derive(Debug, Default)]
struct Life {
    over: AtomicBool,
    ended: tokio::sync::Notify,
}

impl Life {
    /// Runs `handler` until it answers or this life ends (then: the connection
    /// closed, as a dead process's would).
    async fn run(
        self: Arc<Self>,
        to: String,
        handler: CallFuture<'static>,
    ) -> Result<bytes::Bytes, RpcError> {
        let ended = self.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if self.over.load(Ordering::SeqCst) {
            return Err(RpcError::ConnectionClosed(to));
        }
        tokio::select! {
            biased;
            _ = ended => Err(RpcError::ConnectionClosed(to)),
            r = handler => r,
        }
    }
}

/// What happens to one transmission of a message.
enum Fate {
    /// It arrives after this delay.
    Arrives(Duration),
    /// It is lost (sent again after a retransmission timeout).
    Lost,
    /// The link is cut (sent again until it heals).
    Cut,
}

/// TCP's retransmission timeout: its least value (Linux: 200 ms) and the most
/// the simulation lets it grow to between retransmissions.
const RTO_MIN: Duration = Duration::from_millis(200);
const RTO_MAX: Duration = Duration::from_secs(2);

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
    /// Hosts whose backup disk is slow: each BackupWrite waits this long before
    /// the backup handles it (a busy disk behind the page cache).
    slow_disks: BTreeMap<String, Duration>,
    /// Each live node's life: a handler in progress stops when it ends.
    crash_signals: BTreeMap<String, Arc<Life>>,
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
    /// Calls in progress by (from, to, opcode), for `--verbose`'s report of
    /// what is still waiting at the end.
    in_flight: Mutex<BTreeMap<(String, String, u16), u64>>,
    /// The cost model (issue 22; charges nothing while off).
    pub costs: Arc<Costs>,
    /// Recovery traffic by network distance (issue 22; counts nothing while
    /// off).
    pub hops: HopMeter,
}

/// Counts a call in progress while it lives.
struct InFlight<'a> {
    net: &'a SimNet,
    key: (String, String, u16),
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut map = self.net.in_flight.lock();
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

impl SimNet {
    pub fn new(
        clock: Arc<SimClock>,
        rng: Arc<dyn Rng>,
        trace: Arc<Trace>,
        lying_backups: bool,
    ) -> Arc<Self> {
        Self::with_costs(
            clock,
            rng,
            trace,
            lying_backups,
            Arc::new(Costs::new(crate::cost::CostModel::default(), false)),
        )
    }

    /// A network that charges `costs` (see [`crate::cost`]).
    pub fn with_costs(
        clock: Arc<SimClock>,
        rng: Arc<dyn Rng>,
        trace: Arc<Trace>,
        lying_backups: bool,
        costs: Arc<Costs>,
    ) -> Arc<Self> {
        Arc::new(Self {
            registry: LocalTransport::with_clock(clock.clone()),
            state: Mutex::default(),
            clock,
            rng,
            trace,
            stats: NetStats::default(),
            lying_backups,
            in_flight: Mutex::default(),
            costs,
            hops: HopMeter::default(),
        })
    }

    /// Makes `service` reachable at `addr` as incarnation `incarnation`.
    pub fn register<S: Service>(&self, addr: &str, incarnation: u64, service: Arc<S>) {
        self.registry.register(addr, service);
        let mut st = self.state.lock();
        st.alive.insert(addr.to_string(), incarnation);
        st.crash_signals
            .insert(addr.to_string(), Arc::new(Life::default()));
    }

    /// The node at `addr` stops: nothing reaches it, its handlers in progress
    /// answer nothing, and its own calls never complete.
    pub fn crash(&self, addr: &str) {
        self.registry.unregister(addr);
        let mut st = self.state.lock();
        st.alive.remove(addr);
        if let Some(life) = st.crash_signals.remove(addr) {
            life.over.store(true, Ordering::SeqCst);
            life.ended.notify_waiters();
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
        for pair in [
            (a.to_string(), b.to_string()),
            (b.to_string(), a.to_string()),
        ] {
            if cut {
                st.cuts.insert(pair);
            } else {
                st.cuts.remove(&pair);
            }
        }
    }

    /// Makes host `host`'s disk slow by `delay` per backup write (zero: well).
    pub fn set_slow_disk(&self, host: &str, delay: Duration) {
        let mut st = self.state.lock();
        if delay.is_zero() {
            st.slow_disks.remove(host);
        } else {
            st.slow_disks.insert(host.to_string(), delay);
        }
    }

    /// Every slow disk well again.
    pub fn heal_disks(&self) {
        self.state.lock().slow_disks.clear();
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

    /// Calls in progress now: (from, to, opcode) and how many.
    pub fn in_flight(&self) -> Vec<((String, String, u16), u64)> {
        self.in_flight
            .lock()
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect()
    }

    /// An endpoint for a client: not a node, never crashed.
    pub fn client_endpoint(self: &Arc<Self>, name: &str) -> Arc<Endpoint> {
        self.endpoint(name, CLIENT)
    }

    fn sender_alive(&self, from: &str, incarnation: u64) -> bool {
        incarnation == CLIENT || self.state.lock().alive.get(from) == Some(&incarnation)
    }

    /// One transmission's fate.
    fn route(&self, from: &str, to: &str) -> Fate {
        let st = self.state.lock();
        if st
            .cuts
            .contains(&(host(from).to_string(), host(to).to_string()))
        {
            return Fate::Cut;
        }
        if st.loss_ppm > 0 && self.rng.next_u64() % 1_000_000 < st.loss_ppm {
            return Fate::Lost;
        }
        let roll = self.rng.next_u64();
        // 1 in 500 messages is slow (a few ms): queueing, a busy switch.
        let base = if roll.is_multiple_of(500) {
            1_000 + (roll >> 20) % 5_000
        } else {
            5 + (roll >> 20) % 195
        };
        Fate::Arrives(Duration::from_micros(base) + st.extra_delay)
    }

    /// Carries one message from `from` to `to` as TCP would: a lost
    /// transmission is sent again after a retransmission timeout (doubling from
    /// 200 ms), and across a cut link it keeps being retransmitted until the cut
    /// heals. Returns once the message has arrived (the caller bounds the wait by
    /// its deadline).
    async fn carry(&self, from: &str, to: &str, what: u64) {
        let mut rto = RTO_MIN;
        loop {
            match self.route(from, to) {
                Fate::Arrives(delay) => {
                    tokio::time::sleep(delay).await;
                    return;
                }
                Fate::Lost | Fate::Cut => {
                    self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                    self.trace.event(self.now_ns(), Kind::Drop, from, to, what);
                    tokio::time::sleep(rto).await;
                    rto = (rto * 2).min(RTO_MAX);
                }
            }
        }
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
        if !self.sender_alive(from, incarnation) {
            // A dead process sends nothing: its leftover tasks wait forever.
            return std::future::pending().await;
        }
        let give_up = tokio::time::Instant::now() + deadline.min(ramstore_clock::FAR_FUTURE);
        let opcode = ramstore_wire::decode_raw_header(&frame).map_or(0, |h| h.opcode);
        let key = (from.to_string(), to.to_string(), opcode);
        *self.in_flight.lock().entry(key.clone()).or_default() += 1;
        let counted = InFlight { net: self, key };
        let exchange = self.exchange(from, incarnation, to, frame);
        match tokio::time::timeout_at(give_up, exchange).await {
            Ok(Some(answer)) => answer,
            Ok(None) => {
                // The caller died meanwhile: its leftover task waits for ever,
                // but it is no call in progress (`--verbose` would list it in
                // flight to the end of the run).
                drop(counted);
                std::future::pending().await
            }
            Err(_) => Err(RpcError::DeadlineExceeded),
        }
    }

    /// A request's trip, its handling and the response's trip; `None` if the
    /// caller died before the response reached it (nothing is delivered to a
    /// dead process).
    async fn exchange(
        &self,
        from: &str,
        incarnation: u64,
        to: &str,
        frame: Vec<u8>,
    ) -> Option<Result<bytes::Bytes, RpcError>> {
        let frame_hash = hash_bytes(&frame);
        let opcode = ramstore_wire::decode_raw_header(&frame).map_or(0, |h| h.opcode);
        let replication = opcode == ramstore_wire::Opcode::BackupWrite as u16;
        let recovery_data = opcode == ramstore_wire::Opcode::BackupGetRecoveryData as u16;
        // Which crashed master's replicas (and which segment) a recovery
        // request is about, for the cost model's read-once accounting; read
        // before the handler takes the frame.
        let about_replicas =
            recovery_data || opcode == ramstore_wire::Opcode::BackupStartPartitioning as u16;
        let replica_key = match about_replicas.then(|| decode_request(&frame)) {
            Some(Ok((_, Request::BackupStartPartitioning { master_id, .. }))) => {
                Some((master_id, None))
            }
            Some(Ok((
                _,
                Request::BackupGetRecoveryData {
                    master_id,
                    segment_id,
                    ..
                },
            ))) => Some((master_id, Some(segment_id))),
            _ => None,
        };
        // The cost model (crate::cost): nothing is charged or awaited while it
        // is off, so runs without it keep their schedules and traces.
        let costs = self.costs.is_on().then_some(&self.costs);
        if let Some(c) = costs {
            if replication {
                c.pay(host(from), Charge::Replicate(frame.len())).await;
                c.pay(host(from), Charge::Send(frame.len())).await;
            } else {
                c.pay(host(from), Charge::Control(frame.len())).await;
            }
        }
        if replication {
            self.hops
                .count(Traffic::Replication, host(from), host(to), frame.len());
        }
        self.carry(from, to, frame_hash).await;
        if let Some(c) = costs {
            c.pay(
                host(to),
                if replication {
                    Charge::Receive(frame.len())
                } else {
                    Charge::Control(frame.len())
                },
            )
            .await;
            if replication {
                // Written behind the acknowledgement (R§4.2): occupies the disk.
                c.reserve(host(to), Charge::DiskWrite(frame.len()));
                c.note(Mark::Replication, tokio::time::Instant::now());
            } else if recovery_data {
                c.note(Mark::FirstFetch, tokio::time::Instant::now());
            }
        }
        let slow = (opcode == ramstore_wire::Opcode::BackupWrite as u16)
            .then(|| self.state.lock().slow_disks.get(host(to)).copied())
            .flatten();
        if let Some(delay) = slow {
            tokio::time::sleep(delay).await;
        }
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
            return Some(Err(RpcError::ConnectFailed {
                addr: to.to_string(),
                reason: "connection refused (simulated crash)".into(),
                refused: true,
            }));
        };
        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
        self.trace
            .event(self.now_ns(), Kind::Deliver, from, to, frame_hash);
        let bytes = match self.lie(&frame) {
            Some(answer) => answer,
            // The handler runs on a task of its own, as on a server's connection
            // task: a caller that gives up (its deadline) does not cancel it; only
            // the server's crash does.
            // The handler's logs name the server it runs on (`server=s1.1`):
            // every simulated server logs through the same subscriber.
            None => {
                let handled = tokio::spawn(
                    signal
                        .run(to.to_string(), dispatch(frame))
                        .instrument(tracing::info_span!(parent: None, "server", server = %to)),
                )
                .await
                .unwrap_or_else(|_| Err(RpcError::ConnectionClosed(to.to_string())));
                match handled {
                    Ok(bytes) => bytes,
                    Err(e) => return Some(Err(e)),
                }
            }
        };
        // A GetServerStats answer holds the process's resident memory, which
        // the OS reports and no seed decides (the coordinator asks for it
        // before every migration): the trace counts the answer, not its bytes,
        // so one seed keeps one trace.
        let response_hash = if opcode == ramstore_wire::Opcode::GetServerStats as u16 {
            0
        } else {
            hash_bytes(&bytes)
        };
        if recovery_data
            && ramstore_wire::decode_raw_header(&bytes)
                .is_ok_and(|h| h.status == ramstore_wire::Status::Ok as u16)
        {
            self.hops
                .count(Traffic::Buckets, host(to), host(from), bytes.len());
        }
        let costs = self.costs.is_on().then_some(&self.costs);
        if let Some(c) = costs {
            let answered = ramstore_wire::decode_raw_header(&bytes)
                .is_ok_and(|h| h.status == ramstore_wire::Status::Ok as u16);
            if let (true, Some((master_id, None))) = (answered, replica_key) {
                announced(c, host(to), master_id, &bytes);
            }
            if recovery_data {
                // The backup reads the replica once and buckets it (R§7.4–7.5);
                // this bucket leaves once that is done.
                if let Some((master_id, Some(segment_id))) = replica_key {
                    let ready = c.buckets_ready(host(to), master_id, segment_id, bytes.len());
                    tokio::time::sleep_until(ready).await;
                }
                c.pay(host(to), Charge::Send(bytes.len())).await;
            } else {
                c.pay(host(to), Charge::Control(bytes.len())).await;
            }
        }
        self.carry(to, from, response_hash).await;
        if let Some(c) = costs {
            c.pay(
                host(from),
                if recovery_data {
                    Charge::Receive(bytes.len())
                } else {
                    Charge::Control(bytes.len())
                },
            )
            .await;
            if recovery_data {
                // The recovery master replays the bucket (R§7.6).
                c.pay(host(from), Charge::Replay(bytes.len())).await;
                c.note(Mark::Replay, tokio::time::Instant::now());
            }
        }
        if !self.sender_alive(from, incarnation) {
            return None;
        }
        self.trace
            .event(self.now_ns(), Kind::Respond, to, from, response_hash);
        Some(Ok(bytes))
    }
}

/// Tells the cost model which replicas (and how long) a backup will bucket,
/// from the OK answer to a BackupStartPartitioning about `master_id`.
fn announced(costs: &Costs, backup: &str, master_id: u64, answer: &[u8]) {
    if let Ok((_, Response::BackupStartPartitioning { replicas })) =
        ramstore_wire::decode_response(answer)
    {
        let list: Vec<(u64, usize)> = replicas
            .iter()
            .map(|r| (r.segment_id, r.length as usize))
            .collect();
        costs.replicas_announced(backup, master_id, &list);
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

#[cfg(test)]
mod tests {
    use ramstore_clock::SeededRng;
    use ramstore_rpc::Handled;

    use super::*;

    /// Answers every frame with itself.
    struct Echo;

    impl Service for Echo {
        fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
            out.extend_from_slice(frame);
            Handled::Done
        }

        fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> ramstore_rpc::server::SlowFuture {
            Box::pin(async move { frame })
        }
    }

    /// Sets its flag 1 s after a slow-path request arrives.
    struct Slow(Arc<AtomicBool>);

    impl Service for Slow {
        fn handle(&self, _frame: &[u8], _out: &mut Vec<u8>) -> Handled {
            Handled::Slow
        }

        fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> ramstore_rpc::server::SlowFuture {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                self.0.store(true, Ordering::SeqCst);
                frame
            })
        }
    }

    fn net() -> Arc<SimNet> {
        let net = SimNet::new(
            SimClock::handle(),
            SeededRng::handle(1),
            Arc::new(Trace::default()),
            false,
        );
        net.register("s1.1", 1, Arc::new(Echo));
        net
    }

    fn paused() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime")
    }

    #[test]
    fn call_delivers_within_the_drawn_delays_and_traces_it() {
        paused().block_on(async {
            let net = net();
            let client = net.client_endpoint("client-0");
            let started = tokio::time::Instant::now();
            let answer = client
                .call("s1.1", vec![7; 4], Duration::from_secs(1))
                .await;
            assert_eq!(answer.as_deref(), Ok(&[7u8; 4][..]));
            // Two trips of at most 6 ms each (a slow one).
            assert!(started.elapsed() <= Duration::from_millis(12));
            assert_eq!(net.stats.delivered.load(Ordering::Relaxed), 1);
            assert_eq!(net.trace.events(), 2, "a delivery and a response");
        });
    }

    #[test]
    fn call_across_a_cut_fails_at_its_deadline_and_succeeds_once_healed() {
        paused().block_on(async {
            let net = net();
            net.set_cut("client-0", "s1", true);
            let client = net.client_endpoint("client-0");
            let started = tokio::time::Instant::now();
            let cut = client
                .call("s1.1", vec![1], Duration::from_millis(500))
                .await;
            assert_eq!(cut, Err(RpcError::DeadlineExceeded));
            assert_eq!(started.elapsed(), Duration::from_millis(500));
            // A call made during the cut arrives once it heals (retransmitted).
            let healer = net.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                healer.set_cut("client-0", "s1", false);
            });
            let late = client.call("s1.1", vec![2], Duration::from_secs(10)).await;
            assert_eq!(late.as_deref(), Ok(&[2u8][..]));
        });
    }

    /// Regression: handlers ran inside the caller's future, so a caller's timeout
    /// cancelled them — including a master's inline replication round, which
    /// left the master unable to replicate for good.
    #[test]
    fn call_that_times_out_leaves_the_handler_running() {
        paused().block_on(async {
            let net = net();
            let done = Arc::new(AtomicBool::new(false));
            net.register("s2.1", 1, Arc::new(Slow(done.clone())));
            let client = net.client_endpoint("client-0");
            let answer = client
                .call("s2.1", vec![1], Duration::from_millis(100))
                .await;
            assert_eq!(answer, Err(RpcError::DeadlineExceeded));
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert!(done.load(Ordering::SeqCst), "the handler ran to its end");
        });
    }

    /// Regression: a call whose caller crashed while it was handled stayed in
    /// `--verbose`'s in-flight report to the end of the run (e.g. a deposed
    /// coordinator's `RecoverPartition`), as if a server were hung.
    #[test]
    fn in_flight_forgets_a_call_whose_caller_crashed_meanwhile() {
        paused().block_on(async {
            let net = net();
            net.register("s2.1", 1, Arc::new(Slow(Arc::new(AtomicBool::new(false)))));
            net.register("s3.1", 1, Arc::new(Echo));
            let caller = net.endpoint("s3.1", 1);
            let call = tokio::spawn(async move {
                caller
                    .call("s2.1", vec![1], Duration::from_secs(3600))
                    .await
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(net.in_flight().len(), 1, "counted while it is handled");
            net.crash("s3.1");
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert!(!call.is_finished(), "a dead caller gets no answer");
            assert!(net.in_flight().is_empty(), "{:?}", net.in_flight());
        });
    }

    #[test]
    fn call_to_a_crashed_node_is_refused_and_its_own_calls_never_complete() {
        paused().block_on(async {
            let net = net();
            net.register("s2.1", 1, Arc::new(Echo));
            let dead = net.endpoint("s2.1", 1);
            net.crash("s1.1");
            net.crash("s2.1");
            let client = net.client_endpoint("client-0");
            let refused = client.call("s1.1", vec![1], Duration::from_secs(1)).await;
            assert!(
                matches!(refused, Err(ref e) if e.peer_gone()),
                "{refused:?}"
            );
            let from_dead = tokio::time::timeout(
                Duration::from_secs(60),
                dead.call("s1.1", vec![1], Duration::from_secs(1)),
            )
            .await;
            assert!(from_dead.is_err(), "a dead node's call stays pending");
        });
    }
}

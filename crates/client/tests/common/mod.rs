//! An in-process fake cluster for client tests: a coordinator that keeps tables and
//! a tablet map, and masters that keep objects in a `HashMap`, answer
//! UNKNOWN_TABLET for keys outside their tablets, and can be told to fail, slow
//! down or stop.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_client::key_hash;
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, LocalTransport, Service};
use ramstore_wire::{
    decode_request, encode_error_response, encode_response, EnumerateResponseEncoder, ErrorBody,
    MultiReadResponseEncoder, MultiRemoveResponseEncoder, MultiRpcIds, MultiWriteResponseEncoder,
    NumberKind, Opcode, Refusal, RejectRules, Request, Response, RpcId, Status, TabletMapEncoder,
};

pub const COORDINATOR: &str = "coordinator";

fn master_addr(i: usize) -> String {
    format!("master-{}", i + 1)
}

fn error(id: u64, op: Opcode, body: ErrorBody<'_>, out: &mut Vec<u8>) {
    encode_error_response(id, op.code(), &body, out).expect("error response encodes");
}

fn status(id: u64, op: Opcode, status: Status, out: &mut Vec<u8>) {
    error(
        id,
        op,
        ErrorBody::Message {
            status,
            message: "",
        },
        out,
    );
}

fn ok(id: u64, op: Opcode, resp: Response<'_>, out: &mut Vec<u8>) {
    encode_response(id, op, &resp, out).expect("response encodes");
}

/// The real master's decision ([`RejectRules::check`]) as the status it answers.
fn check(rules: &RejectRules, current: Option<u64>) -> Result<(), (Status, u64)> {
    rules.check(current).map_err(|refusal| match refusal {
        Refusal::DoesntExist => (Status::ObjectDoesntExist, 0),
        Refusal::Exists => (Status::ObjectExists, current.unwrap_or(0)),
        Refusal::WrongVersion { current } => (Status::WrongVersion, current),
    })
}

fn fail(id: u64, op: Opcode, (s, version): (Status, u64), out: &mut Vec<u8>) {
    if s == Status::WrongVersion {
        error(
            id,
            op,
            ErrorBody::WrongVersion {
                current_version: version,
            },
            out,
        );
    } else {
        status(id, op, s, out);
    }
}

/// A failure a master answers its next request with.
#[derive(Debug, Clone, Copy)]
pub enum Inject {
    Retry(u32),
    Status(Status),
}

type Objects = HashMap<(u64, Vec<u8>), (Vec<u8>, u64)>;

/// A master holding objects in a map.
pub struct FakeMaster {
    pub addr: String,
    pub server_id: u64,
    versions: Arc<AtomicU64>,
    objects: Mutex<Objects>,
    /// Owned tablets: (table_id, start_hash, end_hash).
    owned: Mutex<Vec<(u64, u64, u64)>>,
    requests: Mutex<HashMap<Opcode, usize>>,
    inject: Mutex<VecDeque<Inject>>,
    /// Multi-op items still to answer with RETRY (per item).
    item_retries: AtomicUsize,
    /// Multi-ops take this long (on their own task), if nonzero.
    slow_multi_ms: AtomicU64,
    /// Largest enumeration batch, in bytes of keys and values.
    enumerate_batch_bytes: AtomicUsize,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    /// Every MultiWrite and MultiRemove item received: (key, its rpc id).
    multi_ids: Mutex<Vec<(Vec<u8>, Option<RpcId>)>>,
}

impl FakeMaster {
    /// Every multi-op item received so far: (key, its rpc id, if any).
    pub fn multi_ids(&self) -> Vec<(Vec<u8>, Option<RpcId>)> {
        self.multi_ids.lock().clone()
    }

    fn note_multi_ids<'a>(
        &self,
        keys: impl Iterator<Item = &'a [u8]>,
        ids: Option<MultiRpcIds<'_>>,
    ) {
        let mut seen = self.multi_ids.lock();
        for (i, key) in keys.enumerate() {
            seen.push((key.to_vec(), ids.and_then(|ids| ids.get(i))));
        }
    }

    fn owns(&self, table_id: u64, key: &[u8]) -> bool {
        let h = key_hash(key);
        self.owned
            .lock()
            .iter()
            .any(|&(t, s, e)| t == table_id && s <= h && h <= e)
    }

    fn next_version(&self) -> u64 {
        self.versions.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub fn requests(&self, op: Opcode) -> usize {
        self.requests.lock().get(&op).copied().unwrap_or(0)
    }

    pub fn inject(&self, failures: &[Inject]) {
        self.inject.lock().extend(failures.iter().copied());
    }

    pub fn retry_items(&self, n: usize) {
        self.item_retries.store(n, Ordering::SeqCst);
    }

    pub fn set_slow_multi(&self, ms: u64) {
        self.slow_multi_ms.store(ms, Ordering::SeqCst);
    }

    pub fn set_enumerate_batch_bytes(&self, bytes: usize) {
        self.enumerate_batch_bytes.store(bytes, Ordering::SeqCst);
    }

    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn object_count(&self) -> usize {
        self.objects.lock().len()
    }

    fn take_item_retry(&self) -> bool {
        self.item_retries
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    fn serve(&self, frame: &[u8], out: &mut Vec<u8>) {
        let (header, req) = decode_request(frame).expect("the client sends valid frames");
        let id = header.request_id;
        let op = header.opcode;
        if let Some(f) = self.inject.lock().pop_front() {
            match f {
                Inject::Retry(delay_ms) => error(id, op, ErrorBody::Retry { delay_ms }, out),
                Inject::Status(s) => status(id, op, s, out),
            }
            return;
        }
        match req {
            Request::Ping { nonce, .. } => ok(
                id,
                op,
                Response::Ping {
                    nonce,
                    server_id: self.server_id,
                },
                out,
            ),
            Request::GetServerStats => {
                let text = format!("objects={}\n", self.object_count());
                ok(id, op, Response::GetServerStats { text: &text }, out)
            }
            Request::Read {
                table_id,
                rules,
                key,
            } => {
                if !self.owns(table_id, key) {
                    return status(id, op, Status::UnknownTablet, out);
                }
                let objects = self.objects.lock();
                let current = objects.get(&(table_id, key.to_vec()));
                if let Err(e) = check(&rules, current.map(|o| o.1)) {
                    return fail(id, op, e, out);
                }
                match current {
                    Some((value, version)) => ok(
                        id,
                        op,
                        Response::Read {
                            version: *version,
                            value,
                        },
                        out,
                    ),
                    None => status(id, op, Status::ObjectDoesntExist, out),
                }
            }
            Request::Write {
                table_id,
                rules,
                key,
                value,
                ..
            } => match self.write(table_id, &rules, key, value) {
                Ok(version) => ok(id, op, Response::Write { version }, out),
                Err(e) => fail(id, op, e, out),
            },
            Request::Remove {
                table_id,
                rules,
                key,
                ..
            } => match self.remove(table_id, &rules, key) {
                Ok(removed) => ok(
                    id,
                    op,
                    Response::Remove {
                        existed: removed.is_some(),
                        version: removed.unwrap_or(0),
                    },
                    out,
                ),
                Err(e) => fail(id, op, e, out),
            },
            Request::Increment {
                table_id,
                rules,
                kind,
                delta,
                key,
                ..
            } => {
                if !self.owns(table_id, key) {
                    return status(id, op, Status::UnknownTablet, out);
                }
                let mut objects = self.objects.lock();
                let k = (table_id, key.to_vec());
                let current = objects.get(&k);
                if let Err(e) = check(&rules, current.map(|o| o.1)) {
                    return fail(id, op, e, out);
                }
                let old: [u8; 8] = match current {
                    None => [0; 8],
                    Some((v, _)) => match <[u8; 8]>::try_from(v.as_slice()) {
                        Ok(a) => a,
                        Err(_) => return status(id, op, Status::NotNumeric, out),
                    },
                };
                let new = match kind {
                    NumberKind::I64 => {
                        match i64::from_le_bytes(old).checked_add(i64::from_le_bytes(delta)) {
                            Some(n) => n.to_le_bytes(),
                            None => return status(id, op, Status::Overflow, out),
                        }
                    }
                    NumberKind::F64 => {
                        let n = f64::from_le_bytes(old) + f64::from_le_bytes(delta);
                        if !n.is_finite() {
                            return status(id, op, Status::Overflow, out);
                        }
                        n.to_le_bytes()
                    }
                };
                let version = self.next_version();
                objects.insert(k, (new.to_vec(), version));
                ok(
                    id,
                    op,
                    Response::Increment {
                        version,
                        value: new,
                    },
                    out,
                )
            }
            Request::MultiRead(items) => {
                let mut enc = MultiReadResponseEncoder::new(id, out);
                for item in items.iter() {
                    let pushed = if self.take_item_retry() {
                        enc.push_error(Status::Retry)
                    } else if !self.owns(item.table_id, item.key) {
                        enc.push_error(Status::UnknownTablet)
                    } else {
                        match self.objects.lock().get(&(item.table_id, item.key.to_vec())) {
                            Some((value, version)) => enc.push_ok(*version, value),
                            None => enc.push_error(Status::ObjectDoesntExist),
                        }
                    };
                    pushed.expect("item fits");
                }
                enc.finish().expect("frame fits");
            }
            Request::MultiWrite(items, ids) => {
                self.note_multi_ids(items.iter().map(|i| i.key), ids);
                let mut enc = MultiWriteResponseEncoder::new(id, out);
                for item in items.iter() {
                    let pushed = if self.take_item_retry() {
                        enc.push(Status::Retry, 0)
                    } else {
                        match self.write(item.table_id, &item.rules, item.key, item.value) {
                            Ok(version) => enc.push(Status::Ok, version),
                            Err((s, version)) => enc.push(s, version),
                        }
                    };
                    pushed.expect("item fits");
                }
                enc.finish().expect("frame fits");
            }
            Request::MultiRemove(items, ids) => {
                self.note_multi_ids(items.iter().map(|i| i.key), ids);
                let mut enc = MultiRemoveResponseEncoder::new(id, out);
                for item in items.iter() {
                    let pushed = if self.take_item_retry() {
                        enc.push(Status::Retry, false, 0)
                    } else {
                        match self.remove(item.table_id, &item.rules, item.key) {
                            Ok(removed) => {
                                enc.push(Status::Ok, removed.is_some(), removed.unwrap_or(0))
                            }
                            Err((s, version)) => enc.push(s, false, version),
                        }
                    };
                    pushed.expect("item fits");
                }
                enc.finish().expect("frame fits");
            }
            Request::Enumerate {
                table_id,
                cursor,
                max_bytes,
            } => self.enumerate(id, table_id, cursor, max_bytes, out),
            _ => status(id, op, Status::UnknownOpcode, out),
        }
    }

    fn write(
        &self,
        table_id: u64,
        rules: &RejectRules,
        key: &[u8],
        value: &[u8],
    ) -> Result<u64, (Status, u64)> {
        if !self.owns(table_id, key) {
            return Err((Status::UnknownTablet, 0));
        }
        let mut objects = self.objects.lock();
        let k = (table_id, key.to_vec());
        check(rules, objects.get(&k).map(|o| o.1))?;
        let version = self.next_version();
        objects.insert(k, (value.to_vec(), version));
        Ok(version)
    }

    fn remove(
        &self,
        table_id: u64,
        rules: &RejectRules,
        key: &[u8],
    ) -> Result<Option<u64>, (Status, u64)> {
        if !self.owns(table_id, key) {
            return Err((Status::UnknownTablet, 0));
        }
        let mut objects = self.objects.lock();
        let k = (table_id, key.to_vec());
        check(rules, objects.get(&k).map(|o| o.1))?;
        Ok(objects.remove(&k).map(|o| o.1))
    }

    fn enumerate(&self, id: u64, table_id: u64, cursor: u64, max_bytes: u32, out: &mut Vec<u8>) {
        let tablet = self
            .owned
            .lock()
            .iter()
            .copied()
            .find(|&(t, s, e)| t == table_id && s <= cursor && cursor <= e);
        let Some((_, _, end)) = tablet else {
            return status(id, Opcode::Enumerate, Status::UnknownTablet, out);
        };
        let mut found: Vec<(u64, Vec<u8>, Vec<u8>, u64)> = self
            .objects
            .lock()
            .iter()
            .filter(|((t, k), _)| *t == table_id && (cursor..=end).contains(&key_hash(k)))
            .map(|((_, k), (v, ver))| (key_hash(k), k.clone(), v.clone(), *ver))
            .collect();
        found.sort();
        let limit = (max_bytes as usize).min(self.enumerate_batch_bytes.load(Ordering::SeqCst));
        let mut enc = EnumerateResponseEncoder::new(id, out);
        let mut bytes = 0;
        for (hash, key, value, version) in &found {
            if bytes >= limit {
                return enc.finish(true, *hash).expect("frame fits");
            }
            bytes += key.len() + value.len();
            enc.push(*version, key, value).expect("object fits");
        }
        match end.checked_add(1) {
            Some(next) => enc.finish(true, next),
            None => enc.finish(false, 0),
        }
        .expect("frame fits");
    }
}

impl Service for FakeMaster {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        let (header, _) = decode_request(frame).expect("the client sends valid frames");
        *self.requests.lock().entry(header.opcode).or_default() += 1;
        let multi = matches!(
            header.opcode,
            Opcode::MultiRead | Opcode::MultiWrite | Opcode::MultiRemove
        );
        if multi && self.slow_multi_ms.load(Ordering::SeqCst) > 0 {
            return Handled::Slow;
        }
        self.serve(frame, out);
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            let ms = self.slow_multi_ms.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut out = Vec::new();
            self.serve(&frame, &mut out);
            out
        })
    }
}

#[derive(Debug, Clone)]
struct Tablet {
    table_id: u64,
    start: u64,
    end: u64,
    master: usize,
}

struct CoordinatorState {
    version: u64,
    next_table_id: u64,
    tables: HashMap<String, u64>,
    tablets: Vec<Tablet>,
}

/// A coordinator keeping tables and the tablet map, telling the fake masters
/// directly which tablets they own.
pub struct FakeCoordinator {
    state: Mutex<CoordinatorState>,
    masters: Vec<Arc<FakeMaster>>,
    map_requests: AtomicUsize,
    slow_map_ms: AtomicU64,
    /// If set, GetTabletMap reports this version instead of the real one.
    reported_version: Mutex<Option<u64>>,
}

impl FakeCoordinator {
    fn tablet_map(&self, id: u64, out: &mut Vec<u8>) {
        let state = self.state.lock();
        let version = self.reported_version.lock().unwrap_or(state.version);
        let mut enc = TabletMapEncoder::new(id, version, out);
        for t in &state.tablets {
            let m = &self.masters[t.master];
            enc.push(t.table_id, t.start, t.end, m.server_id, &m.addr)
                .expect("tablet fits");
        }
        enc.finish().expect("frame fits");
    }

    fn give(&self, t: &Tablet) {
        self.masters[t.master]
            .owned
            .lock()
            .push((t.table_id, t.start, t.end));
    }

    fn take(&self, t: &Tablet) {
        self.masters[t.master]
            .owned
            .lock()
            .retain(|&o| o != (t.table_id, t.start, t.end));
    }

    fn serve(&self, frame: &[u8], out: &mut Vec<u8>) {
        let (header, req) = decode_request(frame).expect("the client sends valid frames");
        let id = header.request_id;
        let op = header.opcode;
        match req {
            Request::GetTabletMap => self.tablet_map(id, out),
            // Clients are exactly-once by default and open a lease at their first
            // mutation; the fake masters ignore the rpc ids (at-least-once).
            Request::ClientLease { lease_id } => ok(
                id,
                op,
                Response::ClientLease {
                    lease_id: if lease_id == 0 { 1 } else { lease_id },
                    lease_ms: 30_000,
                },
                out,
            ),
            Request::Ping { nonce, .. } => ok(
                id,
                op,
                Response::Ping {
                    nonce,
                    server_id: 0,
                },
                out,
            ),
            Request::CreateTable { server_span, name } => {
                let mut state = self.state.lock();
                if let Some(&table_id) = state.tables.get(name) {
                    return ok(id, op, Response::CreateTable { table_id }, out);
                }
                let table_id = state.next_table_id;
                state.next_table_id += 1;
                state.tables.insert(name.to_string(), table_id);
                let span = u64::from(server_span.max(1));
                let step = u64::MAX / span;
                for i in 0..span {
                    let t = Tablet {
                        table_id,
                        start: i * step,
                        end: if i + 1 == span {
                            u64::MAX
                        } else {
                            (i + 1) * step - 1
                        },
                        master: (i as usize + table_id as usize) % self.masters.len(),
                    };
                    self.give(&t);
                    state.tablets.push(t);
                }
                state.version += 1;
                ok(id, op, Response::CreateTable { table_id }, out)
            }
            Request::GetTableId { name } => match self.state.lock().tables.get(name) {
                Some(&table_id) => ok(id, op, Response::GetTableId { table_id }, out),
                None => status(id, op, Status::TableDoesntExist, out),
            },
            Request::DropTable { name } => {
                let mut state = self.state.lock();
                let Some(table_id) = state.tables.remove(name) else {
                    return status(id, op, Status::TableDoesntExist, out);
                };
                let (gone, kept): (Vec<Tablet>, Vec<Tablet>) = state
                    .tablets
                    .drain(..)
                    .partition(|t| t.table_id == table_id);
                state.tablets = kept;
                for t in &gone {
                    self.take(t);
                }
                for m in &self.masters {
                    m.objects.lock().retain(|(t, _), _| *t != table_id);
                }
                state.version += 1;
                ok(id, op, Response::DropTable, out)
            }
            Request::SplitTablet { name, split_hash } => {
                let mut state = self.state.lock();
                let Some(&table_id) = state.tables.get(name) else {
                    return status(id, op, Status::TableDoesntExist, out);
                };
                let Some(i) = state.tablets.iter().position(|t| {
                    t.table_id == table_id && t.start <= split_hash && split_hash <= t.end
                }) else {
                    return status(id, op, Status::Internal, out);
                };
                let old = state.tablets[i].clone();
                if old.start != split_hash {
                    self.take(&old);
                    let low = Tablet {
                        end: split_hash - 1,
                        ..old.clone()
                    };
                    let high = Tablet {
                        start: split_hash,
                        ..old
                    };
                    self.give(&low);
                    self.give(&high);
                    state.tablets[i] = low;
                    state.tablets.push(high);
                    state.tablets.sort_by_key(|t| (t.table_id, t.start));
                    state.version += 1;
                }
                ok(id, op, Response::SplitTablet, out)
            }
            _ => status(id, op, Status::UnknownOpcode, out),
        }
    }
}

impl Service for FakeCoordinator {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        let (header, _) = decode_request(frame).expect("the client sends valid frames");
        if header.opcode == Opcode::GetTabletMap {
            self.map_requests.fetch_add(1, Ordering::SeqCst);
            if self.slow_map_ms.load(Ordering::SeqCst) > 0 {
                return Handled::Slow;
            }
        }
        self.serve(frame, out);
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move {
            let ms = self.slow_map_ms.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let mut out = Vec::new();
            self.serve(&frame, &mut out);
            out
        })
    }
}

/// A coordinator and `n` masters on one [`LocalTransport`].
pub struct FakeCluster {
    pub transport: LocalTransport,
    pub coordinator: Arc<FakeCoordinator>,
    pub masters: Vec<Arc<FakeMaster>>,
}

impl FakeCluster {
    pub fn new(n: usize) -> Self {
        let transport = LocalTransport::new();
        let versions = Arc::new(AtomicU64::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let masters: Vec<Arc<FakeMaster>> = (0..n)
            .map(|i| {
                Arc::new(FakeMaster {
                    addr: master_addr(i),
                    server_id: i as u64 + 1,
                    versions: versions.clone(),
                    objects: Mutex::default(),
                    owned: Mutex::default(),
                    requests: Mutex::default(),
                    inject: Mutex::default(),
                    item_retries: AtomicUsize::new(0),
                    slow_multi_ms: AtomicU64::new(0),
                    enumerate_batch_bytes: AtomicUsize::new(usize::MAX),
                    in_flight: in_flight.clone(),
                    max_in_flight: max_in_flight.clone(),
                    multi_ids: Mutex::default(),
                })
            })
            .collect();
        for m in &masters {
            transport.register(&m.addr, m.clone());
        }
        let coordinator = Arc::new(FakeCoordinator {
            state: Mutex::new(CoordinatorState {
                version: 1,
                next_table_id: 1,
                tables: HashMap::new(),
                tablets: Vec::new(),
            }),
            masters: masters.clone(),
            map_requests: AtomicUsize::new(0),
            slow_map_ms: AtomicU64::new(0),
            reported_version: Mutex::new(None),
        });
        transport.register(COORDINATOR, coordinator.clone());
        Self {
            transport,
            coordinator,
            masters,
        }
    }

    /// How many GetTabletMap requests the coordinator has answered.
    pub fn map_requests(&self) -> usize {
        self.coordinator.map_requests.load(Ordering::SeqCst)
    }

    pub fn set_slow_map(&self, ms: u64) {
        self.coordinator.slow_map_ms.store(ms, Ordering::SeqCst);
    }

    /// Makes GetTabletMap report `version` (None: the real one).
    pub fn report_map_version(&self, version: Option<u64>) {
        *self.coordinator.reported_version.lock() = version;
    }

    pub fn map_version(&self) -> u64 {
        self.coordinator.state.lock().version
    }

    /// The index of the master owning `key` of `table_id`.
    pub fn owner_of(&self, table_id: u64, key: &[u8]) -> usize {
        let h = key_hash(key);
        self.coordinator
            .state
            .lock()
            .tablets
            .iter()
            .find(|t| t.table_id == table_id && t.start <= h && h <= t.end)
            .map(|t| t.master)
            .expect("a tablet holds every hash")
    }

    /// Moves the tablet of `table_id` holding `hash` to master `to`, objects and
    /// all, and bumps the map version (as a migration would).
    pub fn move_tablet(&self, table_id: u64, hash: u64, to: usize) {
        let mut state = self.coordinator.state.lock();
        let t = state
            .tablets
            .iter_mut()
            .find(|t| t.table_id == table_id && t.start <= hash && hash <= t.end)
            .expect("a tablet holds the hash");
        let from = t.master;
        let (start, end) = (t.start, t.end);
        t.master = to;
        let tablet = t.clone();
        self.masters[from]
            .owned
            .lock()
            .retain(|&o| o != (table_id, start, end));
        let moved: Vec<_> = {
            let mut objects = self.masters[from].objects.lock();
            let keys: Vec<_> = objects
                .keys()
                .filter(|(t, k)| *t == table_id && (start..=end).contains(&key_hash(k)))
                .cloned()
                .collect();
            keys.into_iter()
                .filter_map(|k| objects.remove_entry(&k))
                .collect()
        };
        self.masters[to].objects.lock().extend(moved);
        self.coordinator.give(&tablet);
        state.version += 1;
    }
}
